//! rivetrun's part in PMIx under the proxies: passing a direct modex
//! between the asking node's proxy and the target rank's (`proxy/pmix.rs`
//! has the whole exchange), and gathering collectives over some hosts
//! (fences over a subset, groups: [`Collectives`]), and passing a PMIx
//! group member's end to the other proxies ([`member_ended`]). Whole-job
//! fences are the tree's barriers (their timeouts: `fence_timeouts.rs`).

use std::collections::{BTreeMap, HashMap};

use super::commands as cmd;
use super::{wire, Proxy};
use rivet_pmi::pmix_ffi::{PMIX_ERR_BAD_PARAM, PMIX_ERR_TIMEOUT, PMIX_ERR_UNREACH, PMIX_SUCCESS};

/// `pmix_spawned KVS PARENT_NS PARENT_RANK SIZES` from proxy `from`
/// (which spawned KVS, registered with its PMIx server): recorded in
/// `spawned_at` (direct modexes of its processes go to `from`) and passed
/// to every other proxy as `pmix_spawned KVS FROM PARENT_NS PARENT_RANK
/// SIZES`, whose servers register it too.
pub(super) fn spawned(
    from: u32,
    msg: &[Vec<u8>],
    spawned_at: &mut HashMap<String, u32>,
    proxies: &mut [Proxy],
) {
    if msg.len() < 5 {
        return;
    }
    spawned_at.insert(wire::text(&msg[1]), from);
    let node = from.to_string();
    let mut words: Vec<&[u8]> = vec![&msg[0], &msg[1], node.as_bytes()];
    words.extend(msg[2..5].iter().map(Vec::as_slice));
    for (i, p) in proxies.iter_mut().enumerate() {
        if let (Some(c), false) = (p.conn.as_mut(), i as u32 == from) {
            let _ = wire::send(c, &words);
        }
    }
}

/// The proxy holding the process `dmodex ID NS RANK` names: the job's
/// rank's, or the one that spawned NS.
pub(super) fn target(
    msg: &[Vec<u8>],
    node_of_rank: &[u32],
    spawned_at: &HashMap<String, u32>,
) -> Option<u32> {
    let ns = wire::text(msg.get(2)?);
    if let Some(&node) = spawned_at.get(&ns) {
        return Some(node);
    }
    let rank: usize = wire::text(msg.get(3)?).parse().ok()?;
    node_of_rank.get(rank).copied()
}

/// `dmodex ID NS RANK` from proxy `from`: asked of `target`, the proxy
/// holding the process (`dmodex_ask FROM ID NS RANK`), or answered at once
/// with an error if that proxy is gone or there is none.
pub(super) fn ask(from: u32, msg: &[Vec<u8>], target: Option<u32>, proxies: &mut [Proxy]) {
    let word = |i: usize| msg.get(i).map(|w| wire::text(w)).unwrap_or_default();
    let (id, ns, rank) = (word(1), word(2), word(3));
    let asked = target
        .and_then(|t| proxies.get_mut(t as usize))
        .and_then(|p| p.conn.as_mut())
        .is_some_and(|c| {
            wire::send(c, &[cmd::DMODEX_ASK, &from.to_string(), &id, &ns, &rank]).is_ok()
        });
    if !asked {
        let failed = [cmd::DMODEX_DONE, &id, &PMIX_ERR_UNREACH.to_string(), ""];
        if let Some(c) = proxies.get_mut(from as usize).and_then(|p| p.conn.as_mut()) {
            let _ = wire::send(c, &failed);
        }
    }
}

/// `gend NS RANK [GROUP]` from proxy `from` (a process of its node that
/// was in a PMIx group ended): `gend NS RANK` to every other proxy, whose
/// server tells that node's members.
pub(super) fn member_ended(from: u32, msg: &[Vec<u8>], proxies: &mut [Proxy]) {
    let words: Vec<&[u8]> = msg.iter().take(3).map(Vec::as_slice).collect();
    if words.len() < 3 {
        return;
    }
    for (i, p) in proxies.iter_mut().enumerate() {
        if i as u32 == from {
            continue;
        }
        if let Some(c) = p.conn.as_mut() {
            let _ = wire::send(c, &words);
        }
    }
}

/// Why the job fails, for a `gend NS RANK GROUP` from `host` (the job is
/// `job`); None without a GROUP (the group allowed the end).
pub(super) fn group_left(job: &str, msg: &[Vec<u8>], host: &str) -> Option<String> {
    let word = |i: usize| msg.get(i).map(|w| wire::text(w));
    let (ns, rank, group) = (word(1)?, word(2)?, word(3)?);
    let who = if ns == job {
        format!("rank {rank} on {host}")
    } else {
        format!("spawned process {rank} of {ns} on {host}")
    };
    Some(format!(
        "{who} ended while connected to group {group} (made without \
         early_term_allowed: every member must disconnect first)"
    ))
}

/// `dmodex_data FROM ID STATUS HEX` from the target's proxy: to the asker
/// as `dmodex_done ID STATUS HEX`.
pub(super) fn answer(msg: &[Vec<u8>], proxies: &mut [Proxy]) {
    let Some(from) = msg.get(1).and_then(|w| wire::text(w).parse::<usize>().ok()) else {
        return;
    };
    let mut words = vec![cmd::DMODEX_DONE.as_bytes().to_vec()];
    words.extend(msg.iter().skip(2).take(3).cloned());
    if let Some(c) = proxies.get_mut(from).and_then(|p| p.conn.as_mut()) {
        let _ = wire::send(c, &words);
    }
}

/// `coll_out KEY STATUS CONTEXT` with no blobs: a failed collective.
fn failed(key: &[u8], status: i32) -> Vec<Vec<u8>> {
    vec![
        cmd::COLL_OUT.as_bytes().to_vec(),
        key.to_vec(),
        status.to_string().into_bytes(),
        b"0".to_vec(),
    ]
}

/// One collective being gathered: the nodes it needs and the blobs in.
struct Gather {
    nodes: Vec<u32>,
    arrived: BTreeMap<u32, Vec<u8>>,
    /// A node refused it (its part's status): every node hears this.
    failed: Option<i32>,
}

/// PMIx collectives over some hosts (`proxy/pmix_subset.rs`): each
/// participating proxy's `coll KEY NODES DATA`, gathered by key; once every
/// listed node is in, each gets `coll_out KEY 0 CONTEXT NODE DATA ...`
/// (every blob in node order; CONTEXT counts completed collectives, so it
/// is unique in the job). A part with a fifth word, a failed status
/// (`coll KEY NODES DATA STATUS`: that node refused it), fails it with that
/// status for every listed node, those in and those still to come; so does
/// a node's `coll_late KEY` (its `PMIX_TIMEOUT` passed) with
/// `PMIX_ERR_TIMEOUT`, unless every part came first. A collective needing a proxy that ended, or
/// whose proxies disagree on its nodes, fails for those in
/// (`PMIX_ERR_UNREACH`, `PMIX_ERR_BAD_PARAM`).
#[derive(Default)]
pub(super) struct Collectives {
    gathering: HashMap<Vec<u8>, Gather>,
    completed: u64,
}

/// Messages to send: (proxy, words).
pub(super) type Sends = Vec<(u32, Vec<Vec<u8>>)>;

impl Collectives {
    /// Proxy `from`'s part; `gone(n)`: node `n`'s proxy has ended. Returns
    /// the messages to send and, for a collective failed by a proxy that
    /// ended, that node (for the message naming its host).
    pub(super) fn arrive(
        &mut self,
        from: u32,
        msg: &[Vec<u8>],
        nnodes: u32,
        gone: impl Fn(u32) -> bool,
    ) -> (Sends, Option<u32>) {
        let (Some(key), Some(nodes), Some(data)) = (msg.get(1), msg.get(2), msg.get(3)) else {
            return (Vec::new(), None);
        };
        let nodes: Option<Vec<u32>> = (wire::text(nodes).split(','))
            .map(|n| n.parse().ok().filter(|&n| n < nnodes))
            .collect();
        let nodes = nodes
            .map(|mut n| {
                n.sort_unstable();
                n.dedup();
                n
            })
            .filter(|n| n.contains(&from));
        let Some(nodes) = nodes else {
            return (vec![(from, failed(key, PMIX_ERR_BAD_PARAM))], None);
        };
        let g = self.gathering.entry(key.clone()).or_insert_with(|| Gather {
            nodes: nodes.clone(),
            arrived: BTreeMap::new(),
            failed: None,
        });
        if g.nodes != nodes {
            // The proxies disagree on who takes part: nobody can complete it.
            let mut sends = self.fail(key, PMIX_ERR_BAD_PARAM);
            sends.push((from, failed(key, PMIX_ERR_BAD_PARAM)));
            return (sends, None);
        }
        g.arrived.entry(from).or_insert_with(|| data.clone());
        let refused = (msg.get(4).and_then(|w| wire::text(w).parse::<i32>().ok()))
            .filter(|&s| s != PMIX_SUCCESS);
        if let Some(status) = g.failed.or(refused) {
            // Those in hear it now (all of them, when this part is the
            // refusal), those still to come when their part comes; then
            // it is forgotten.
            let to: Vec<u32> = if g.failed.is_none() {
                g.arrived.keys().copied().collect()
            } else {
                vec![from]
            };
            g.failed = Some(status);
            if g.arrived.len() == g.nodes.len() {
                self.gathering.remove(key);
            }
            return (
                to.into_iter().map(|n| (n, failed(key, status))).collect(),
                None,
            );
        }
        if let Some(&n) = g
            .nodes
            .iter()
            .find(|&&n| gone(n) && !g.arrived.contains_key(&n))
        {
            return (self.fail(key, PMIX_ERR_UNREACH), Some(n));
        }
        if g.arrived.len() < g.nodes.len() {
            return (Vec::new(), None);
        }
        let g = self.gathering.remove(key).expect("gathered above");
        self.completed += 1;
        let mut out = vec![
            cmd::COLL_OUT.as_bytes().to_vec(),
            key.clone(),
            PMIX_SUCCESS.to_string().into_bytes(),
            self.completed.to_string().into_bytes(),
        ];
        for (n, blob) in g.arrived {
            out.push(n.to_string().into_bytes());
            out.push(blob);
        }
        (
            g.nodes.into_iter().map(|n| (n, out.clone())).collect(),
            None,
        )
    }

    /// `coll_late KEY` from proxy `from`: its timeout passed. Unless the
    /// collective completed (or failed) already, it fails with
    /// `PMIX_ERR_TIMEOUT` for the nodes in, and for the others as their
    /// parts come (then it is forgotten).
    pub(super) fn late(&mut self, from: u32, msg: &[Vec<u8>]) -> Sends {
        let Some(key) = msg.get(1) else {
            return Vec::new();
        };
        let Some(g) = self.gathering.get_mut(key) else {
            return Vec::new();
        };
        if g.failed.is_some() || !g.arrived.contains_key(&from) {
            return Vec::new();
        }
        g.failed = Some(PMIX_ERR_TIMEOUT);
        (g.arrived.keys())
            .map(|&n| (n, failed(key, PMIX_ERR_TIMEOUT)))
            .collect()
    }

    /// Node `id`'s proxy ended: every collective still needing it fails
    /// (one failed already, every node in told, is only forgotten).
    /// Returns the messages and how many collectives failed.
    pub(super) fn ended(&mut self, id: u32) -> (Sends, usize) {
        self.gathering.retain(|_, g| {
            g.failed.is_none() || !g.nodes.contains(&id) || g.arrived.contains_key(&id)
        });
        let keys: Vec<Vec<u8>> = (self.gathering.iter())
            .filter(|(_, g)| g.nodes.contains(&id) && !g.arrived.contains_key(&id))
            .map(|(k, _)| k.clone())
            .collect();
        let n = keys.len();
        let sends = keys
            .iter()
            .flat_map(|k| self.fail(k, PMIX_ERR_UNREACH))
            .collect();
        (sends, n)
    }

    /// Drop collective `key`: its error to every node in.
    fn fail(&mut self, key: &[u8], status: i32) -> Sends {
        let Some(g) = self.gathering.remove(key) else {
            return Vec::new();
        };
        (g.arrived.into_keys())
            .map(|n| (n, failed(key, status)))
            .collect()
    }
}

/// Send each message to its proxy (one that ended is skipped).
pub(super) fn send(proxies: &mut [Proxy], sends: Sends) {
    for (to, words) in sends {
        if let Some(c) = proxies.get_mut(to as usize).and_then(|p| p.conn.as_mut()) {
            let _ = wire::send(c, &words);
        }
    }
}

/// Say that `n` collectives failed because `host`'s proxy ended.
pub(super) fn coll_lost(host: &str, n: usize) {
    if n > 0 {
        eprintln!(
            "rivetrun: host {host}: its proxy ended while {n} PMIx collective(s) over some hosts \
             (a fence over a subset, or a group) needed its ranks; they fail"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coll(key: &str, nodes: &str, data: &str) -> Vec<Vec<u8>> {
        [
            cmd::COLL.as_bytes(),
            key.as_bytes(),
            nodes.as_bytes(),
            data.as_bytes(),
        ]
        .iter()
        .map(|w| w.to_vec())
        .collect()
    }

    fn words(w: &[&str]) -> Vec<Vec<u8>> {
        w.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn a_collective_completes_once_every_listed_node_is_in() {
        let mut c = Collectives::default();
        let none = |_| false;
        // Nodes 0 and 2 of 3; node 2 first.
        assert!(c.arrive(2, &coll("k", "0,2", "b2"), 3, none).0.is_empty());
        let (sends, lost) = c.arrive(0, &coll("k", "2,0", "b0"), 3, none);
        assert_eq!(lost, None);
        let out = words(&["coll_out", "k", "0", "1", "0", "b0", "2", "b2"]);
        assert_eq!(sends, vec![(0, out.clone()), (2, out)]);
        // The next one has the next context; a key completes afresh.
        let (sends, _) = c.arrive(1, &coll("k", "1", ""), 3, none);
        assert_eq!(
            sends,
            vec![(1, words(&["coll_out", "k", "0", "2", "1", ""]))]
        );
    }

    #[test]
    fn a_nodes_refusal_fails_it_for_every_listed_node_then_it_is_forgotten() {
        let mut c = Collectives::default();
        let none = |_| false;
        let refused = |n: u32| (n, words(&["coll_out", "g#1", "-25", "0"]));
        let mut part = coll("g#1", "0,1,2", "");
        // Node 0 is in; node 1 refuses: both hear it, node 2 when it comes.
        assert!(c.arrive(0, &part, 3, none).0.is_empty());
        part.push(b"-25".to_vec());
        let (sends, _) = c.arrive(1, &part, 3, none);
        assert_eq!(sends, vec![refused(0), refused(1)]);
        part.pop();
        assert_eq!(c.arrive(2, &part, 3, none).0, vec![refused(2)]);
        assert!(c.gathering.is_empty(), "forgotten once every node came");
        // A refusal first: the others hear it as they come. A status of 0
        // is no refusal.
        let mut part = coll("g#1", "0,1", "");
        part.push(b"-25".to_vec());
        assert_eq!(c.arrive(1, &part, 3, none).0, vec![refused(1)]);
        part.pop();
        assert_eq!(c.arrive(0, &part, 3, none).0, vec![refused(0)]);
        let mut ok = coll("h", "0,1", "a");
        ok.push(b"0".to_vec());
        assert!(c.arrive(0, &ok, 3, none).0.is_empty());
        assert_eq!(c.arrive(1, &coll("h", "0,1", "b"), 3, none).0.len(), 2);
        assert!(c.gathering.is_empty());
    }

    /// A node's `coll_late`: those in hear the timeout at once, the late
    /// part when it comes, then it is forgotten; a `coll_late` for one that
    /// completed first changes nothing, nor does it reach the next
    /// collective over the same processes (another key).
    #[test]
    fn a_late_collective_times_out_for_every_node_then_is_forgotten() {
        let mut c = Collectives::default();
        let none = |_| false;
        let timeout = |n: u32, k: &str| (n, words(&["coll_out", k, "-24", "0"]));
        assert_eq!(PMIX_ERR_TIMEOUT, -24);
        assert!(c
            .arrive(0, &coll("f#1", "0,1,2", "a"), 3, none)
            .0
            .is_empty());
        assert!(c
            .arrive(2, &coll("f#1", "0,1,2", "c"), 3, none)
            .0
            .is_empty());
        let late = words(&["coll_late", "f#1"]);
        assert_eq!(c.late(0, &late), vec![timeout(0, "f#1"), timeout(2, "f#1")]);
        assert_eq!(c.late(2, &late), Vec::new(), "once");
        assert_eq!(
            c.arrive(1, &coll("f#1", "0,1,2", "b"), 3, none).0,
            vec![timeout(1, "f#1")]
        );
        assert!(c.gathering.is_empty());
        // Completed first: the late word finds nothing.
        c.arrive(0, &coll("f#2", "0,1", "a"), 3, none);
        assert_eq!(c.arrive(1, &coll("f#2", "0,1", "b"), 3, none).0.len(), 2);
        assert_eq!(c.late(0, &words(&["coll_late", "f#2"])), Vec::new());
        assert!(c.gathering.is_empty(), "no collective begun by it");
        // From a node not in it, or garbled: nothing.
        c.arrive(0, &coll("f#3", "0,1", "a"), 3, none);
        assert_eq!(c.late(1, &words(&["coll_late", "f#3"])), Vec::new());
        assert_eq!(c.late(0, &words(&["coll_late"])), Vec::new());
        // A late part's proxy ends instead: forgotten, nobody hears twice.
        assert_eq!(
            c.late(0, &words(&["coll_late", "f#3"])),
            vec![timeout(0, "f#3")]
        );
        assert_eq!(c.ended(1), (Vec::new(), 0));
        assert!(c.gathering.is_empty());
    }

    #[test]
    fn bad_parts_and_ended_proxies_fail_it_for_those_in_and_nothing_waits() {
        let mut c = Collectives::default();
        let none = |_| false;
        let bad = |n: u32, k: &str| (n, words(&["coll_out", k, "-27", "0"]));
        // A node list without the sender, past the job, or garbled.
        for nodes in ["1", "0,7", "x", ""] {
            let (sends, _) = c.arrive(0, &coll("k", nodes, ""), 3, none);
            assert_eq!(sends, vec![bad(0, "k")], "{nodes}");
        }
        // Two proxies disagree on the nodes: both hear it.
        c.arrive(0, &coll("d", "0,1", ""), 3, none);
        let (sends, _) = c.arrive(1, &coll("d", "1,2", ""), 3, none);
        assert_eq!(sends, vec![bad(0, "d"), bad(1, "d")]);
        // A node that ended before its part came.
        let unreach = |n: u32, k: &str| (n, words(&["coll_out", k, "-25", "0"]));
        let (sends, lost) = c.arrive(0, &coll("e", "0,1", ""), 3, |n| n == 1);
        assert_eq!((sends, lost), (vec![unreach(0, "e")], Some(1)));
        // ... or after the others were in.
        c.arrive(0, &coll("f", "0,1,2", ""), 3, none);
        c.arrive(2, &coll("f", "0,1,2", ""), 3, none);
        assert_eq!(c.ended(0), (Vec::new(), 0), "node 0 is in");
        assert_eq!(c.ended(1), (vec![unreach(0, "f"), unreach(2, "f")], 1));
        assert!(c.gathering.is_empty());
        // A message cut short is ignored.
        assert_eq!(
            c.arrive(0, &words(&["coll", "k"]), 3, none),
            (Vec::new(), None)
        );
    }
}
