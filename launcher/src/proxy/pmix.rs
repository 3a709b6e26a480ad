//! PMIx on this node: the proxy runs OpenPMIx's server for its ranks
//! (`crate::pmix_host`, a node of the job: `pmix_host/node.rs`) beside the
//! PMI-1/PMI-2 server, and each rank's environment gets what the server's
//! setup-fork gives. The PMI loop (`pmi.rs`) serves the upcalls that need
//! other hosts, with this module's state:
//! * a fence over the whole job is one barrier of the proxy tree, the
//!   node's blob put as `pmix-fence/NODE` (hex); the job's `barrier_out`
//!   brings every node's, concatenated for the library. Fences run one at
//!   a time, in the order they come (every node sees the same order). A
//!   fence among this node's ranks alone completes here; one over some
//!   ranks of several hosts, and group construct and destruct, are gathered
//!   by rivetrun (`pmix_subset.rs`);
//! * a direct modex asks rivetrun (`dmodex ID NS RANK`), which asks the
//!   target's proxy (`dmodex_ask FROM ID NS RANK`); that proxy's server
//!   answers (`dmodex_data FROM ID STATUS HEX`) and rivetrun passes it back
//!   (`dmodex_done ID STATUS HEX`). A lost target or rivetrun fails it;
//! * an abort goes to rivetrun as a PMI-1 abort does; names to rivetrun's
//!   job-wide table (`pmix_names.rs`);
//! * a spawn goes to the proxy's main thread, which starts the children
//!   on this host (`spawn.rs`). Their namespace is wholly on this node, so
//!   a fence over its processes (and this node's ranks of the job)
//!   completes here;
//! * a PMIx group member's end: this node's members hear of it from this
//!   node's server; the end of one of this node's processes goes to
//!   rivetrun (`gend NS RANK [GROUP]`, GROUP: one that did not allow it,
//!   which fails the job), which passes it to the other proxies (`gend NS
//!   RANK`), whose servers tell their own members ([`member_ended`]).

use std::collections::{HashMap, VecDeque};
use std::path::Path;

use rivet_pmi::pmix_ffi::{PMIX_ERR_UNREACH, PMIX_RANK_WILDCARD, PMIX_SUCCESS};

use super::pmix_subset::{Done, Subsets};
use super::upstream::Upstream;
use crate::pmix_host::node::{self, DmodexCall, FenceCall, Layout};
use crate::pmix_host::{PmixEvent, PmixHost, SpawnCall, Starting};

/// The prefix of the keys that carry each node's fence blob.
pub const FENCE_KEY: &str = "pmix-fence/";

/// Start this node's PMIx server (on a thread of its own, while the proxy
/// places its ranks), where OpenPMIx is installed and rivetrun named the
/// hosts; [`finish`] registers the job.
pub fn begin(kvsname: &str, hosts: &[String], node: u32) -> Option<Starting> {
    crate::pmix_host::probe().ok()?;
    let name = hosts.get(node as usize)?.clone();
    Some(Starting::spawn_node(kvsname.to_string(), name))
}

/// Register the job with the node's server: its ranks where
/// `node_of_rank` says, in the apps `appnums` says (empty: one app), this
/// node's hwloc XML and the cluster id. None, saying why, if that fails:
/// the job then runs with PMI-1/PMI-2 only, as single-host rivetrun
/// without OpenPMIx.
pub fn finish(
    starting: Option<Starting>,
    hosts: &[String],
    node_of_rank: &[u32],
    appnums: Vec<u32>,
    node: u32,
    topology_xml: &Path,
    cluster: Option<String>,
) -> Option<PmixHost> {
    let starting = starting?;
    let xml = std::fs::read_to_string(topology_xml).ok();
    let registered = Layout::from_nodes(hosts.to_vec(), node_of_rank, node as usize)
        .with_apps(appnums)
        .and_then(|layout| starting.finish_node(layout, xml, cluster));
    match registered {
        Ok(h) => Some(h),
        Err(why) => {
            let host = hosts.get(node as usize).map_or("?", String::as_str);
            eprintln!(
                "rivetrun: warning: {host}: no PMIx server for this node's ranks (PMI only): {why}"
            );
            None
        }
    }
}

/// Process `rank` of `nspace` ended while the job runs: this node's
/// members of the PMIx groups it was in hear of it. `ours`: it was this
/// node's process, so rivetrun is told (when it was in a group), to tell
/// the other nodes and, for a group that did not allow it, fail the job.
pub fn member_ended(host: Option<&PmixHost>, nspace: &str, rank: u32, ours: Option<&Upstream>) {
    let Some(host) = host else { return };
    let ended = host.member_ended(nspace, rank);
    for e in &ended.errors {
        eprintln!("rivetrun: warning: process {rank} of {nspace}: {e}");
    }
    if let (Some(up), false) = (ours, ended.groups.is_empty()) {
        let mut words = vec!["gend".to_string(), nspace.to_string(), rank.to_string()];
        words.extend(ended.forbidden.into_iter().next());
        let _ = up.send(&words);
    }
}

/// `pmix_spawned KVS NODE PARENT_NS PARENT_RANK SIZES` from rivetrun:
/// node NODE's proxy spawned job KVS (SIZES: each app's processes, comma
/// separated); registered with this node's server (`this`), so this
/// node's clients can name its processes (their data by direct modex).
pub fn spawned_elsewhere(host: Option<&PmixHost>, hosts: &[String], words: &[Vec<u8>]) {
    let Some(host) = host else { return };
    let text = |i: usize| words.get(i).map(|w| crate::remote::wire::text(w));
    let parsed = (|| {
        let (kvs, parent) = (text(1)?, text(3)?);
        let node: u32 = text(2)?.parse().ok()?;
        let prank: u32 = text(4)?.parse().ok()?;
        let sizes: Vec<u32> = (text(5)?.split(','))
            .map(|n| n.parse().ok())
            .collect::<Option<_>>()?;
        Some((kvs, node, parent, prank, sizes))
    })();
    let Some((kvs, node, parent, prank, sizes)) = parsed else {
        return eprintln!("rivetrun: proxy: a garbled pmix_spawned from rivetrun");
    };
    if let Err(why) = host.register_elsewhere(&kvs, hosts, node, &sizes, (&parent, prank)) {
        eprintln!("rivetrun: warning: {kvs} is not known to this node's PMIx server: {why}");
    }
}

/// Messages about PMIx from rivetrun, for the PMI loop.
pub enum Msg {
    /// Another node's rank asks for the data of `rank` of `nspace`.
    Ask {
        from: u32,
        id: u64,
        nspace: String,
        rank: u32,
    },
    /// The answer to this node's direct modex `id`.
    Done { id: u64, status: i32, data: Vec<u8> },
    /// The end of a collective over a subset (`pmix_subset.rs`).
    Coll(Done),
}

impl Msg {
    /// Parse `dmodex_ask` / `dmodex_done` / `coll_out` (other words: None).
    pub fn parse(words: &[Vec<u8>]) -> Option<Msg> {
        let text = |i: usize| words.get(i).map(|w| crate::remote::wire::text(w));
        match text(0)?.as_str() {
            "dmodex_ask" => Some(Msg::Ask {
                from: text(1)?.parse().ok()?,
                id: text(2)?.parse().ok()?,
                nspace: text(3)?,
                rank: text(4)?.parse().ok()?,
            }),
            "dmodex_done" => Some(Msg::Done {
                id: text(1)?.parse().ok()?,
                status: text(2)?.parse().ok()?,
                data: unhex(&text(3)?)?,
            }),
            "coll_out" => Done::parse(words).map(Msg::Coll),
            _ => None,
        }
    }
}

/// The PMI loop's PMIx state.
pub struct State {
    node: u32,
    kvsname: String,
    size: u32,
    local: Vec<u32>,
    /// Whole-job fences: the first is in the tree once `in_tree`.
    fences: VecDeque<FenceCall>,
    in_tree: bool,
    /// This node's direct modexes waiting for rivetrun's answer.
    asked: HashMap<u64, DmodexCall>,
    next_id: u64,
    /// Other nodes' requests this node's server is answering: ours → (from, theirs).
    answering: HashMap<u64, (u32, u64)>,
    /// Fences over some ranks of several hosts, and groups.
    subsets: Subsets,
    /// The namespaces of the processes this proxy spawned (all on this node).
    spawned: std::collections::HashSet<String>,
}

/// What the loop must do after a PMIx event.
pub enum Step {
    Nothing,
    /// Put the node's blob into the tree's barrier.
    Barrier(Vec<(String, String)>),
    /// Start the children of this spawn (the proxy's main thread).
    Spawn(SpawnCall),
}

impl State {
    /// Node `node`'s state; job `kvsname` has `size` ranks, rank `r` on
    /// node `node_of_rank[r]`, this node's are `local`.
    pub fn new(
        node: u32,
        kvsname: &str,
        size: u32,
        node_of_rank: Vec<u32>,
        local: Vec<u32>,
    ) -> State {
        State {
            size,
            subsets: Subsets::new(node, kvsname, node_of_rank),
            node,
            kvsname: kvsname.to_string(),
            local,
            fences: VecDeque::new(),
            in_tree: false,
            asked: HashMap::new(),
            next_id: 1,
            answering: HashMap::new(),
            spawned: std::collections::HashSet::new(),
        }
    }

    /// Namespace `kvs` was spawned by this proxy: all its processes are here.
    pub fn spawned_here(&mut self, kvs: &str) {
        self.spawned.insert(kvs.to_string());
    }

    /// Whether a PMIx fence is in the tree (its `barrier_out` is ours).
    pub fn in_tree(&self) -> bool {
        self.in_tree
    }

    /// One event from the node's server.
    pub fn event(&mut self, ev: PmixEvent, rivetrun: &Upstream) -> Step {
        match ev {
            PmixEvent::Fence(call) => return self.fence(call, rivetrun),
            PmixEvent::Group(call) => self.subsets.group(call, rivetrun),
            PmixEvent::Dmodex(call) => {
                let id = self.next_id;
                self.next_id += 1;
                let sent = rivetrun.send(&[
                    "dmodex".to_string(),
                    id.to_string(),
                    call.nspace.clone(),
                    call.rank.to_string(),
                ]);
                match sent {
                    Ok(()) => {
                        self.asked.insert(id, call);
                    }
                    Err(_) => call.finish(PMIX_ERR_UNREACH, Vec::new()),
                }
            }
            PmixEvent::DmodexAnswer { id, status, data } => {
                if let Some((from, theirs)) = self.answering.remove(&id) {
                    let _ = rivetrun.send(&[
                        "dmodex_data".to_string(),
                        from.to_string(),
                        theirs.to_string(),
                        status.to_string(),
                        hex(&data),
                    ]);
                }
            }
            PmixEvent::Aborted {
                rank,
                code,
                message,
                ..
            } => {
                let _ = rivetrun.send(&[
                    "abort".to_string(),
                    rank.to_string(),
                    code.to_string(),
                    message,
                ]);
            }
            PmixEvent::Names(call) => super::pmix_names::serve(call, rivetrun.clone()),
            PmixEvent::Spawn(call) => return Step::Spawn(call),
        }
        Step::Nothing
    }

    fn fence(&mut self, call: FenceCall, rivetrun: &Upstream) -> Step {
        let mut whole = false;
        let mut covered = std::collections::HashSet::new();
        let mut all_local = true;
        for (ns, rank) in &call.procs {
            if self.spawned.contains(ns) {
                // Children of this proxy: the library has their data.
                continue;
            }
            if *ns != self.kvsname {
                all_local = false;
                continue;
            }
            if *rank == PMIX_RANK_WILDCARD {
                whole = true;
            } else {
                covered.insert(*rank);
                all_local &= self.local.contains(rank);
            }
        }
        let whole = whole || covered.len() as u32 == self.size;
        if !whole && all_local && !call.procs.is_empty() {
            // Only this node's ranks: the library has every contribution.
            let data = call.data.clone();
            call.finish(PMIX_SUCCESS, data);
            return Step::Nothing;
        }
        if !whole {
            self.subsets.fence(call, rivetrun);
            return Step::Nothing;
        }
        self.fences.push_back(call);
        self.next_barrier()
    }

    fn next_barrier(&mut self) -> Step {
        if self.in_tree {
            return Step::Nothing;
        }
        let Some(first) = self.fences.front() else {
            return Step::Nothing;
        };
        self.in_tree = true;
        Step::Barrier(vec![(
            format!("{FENCE_KEY}{}", self.node),
            hex(&first.data),
        )])
    }

    /// The job's `barrier_out` for the fence in the tree: every node's
    /// blob to the library; then the next fence, if one waits.
    pub fn barrier_out(&mut self, puts: &[(String, String)]) -> Step {
        if !self.in_tree {
            return Step::Nothing;
        }
        self.in_tree = false;
        let mut blobs: Vec<(u32, Vec<u8>)> = Vec::new();
        let mut bad = false;
        for (k, v) in puts {
            if let Some(n) = k.strip_prefix(FENCE_KEY) {
                match (n.parse::<u32>(), unhex(v)) {
                    (Ok(n), Some(b)) => blobs.push((n, b)),
                    _ => bad = true,
                }
            }
        }
        blobs.sort_by_key(|(n, _)| *n);
        if let Some(call) = self.fences.pop_front() {
            if bad {
                eprintln!("rivetrun: proxy {}: a fence blob came garbled", self.node);
                call.finish(rivet_pmi::pmix_ffi::PMIX_ERROR, Vec::new());
            } else {
                call.finish(
                    PMIX_SUCCESS,
                    blobs.into_iter().flat_map(|(_, b)| b).collect(),
                );
            }
        }
        self.next_barrier()
    }

    /// The tree can complete no barrier: every fence fails.
    pub fn fail_fences(&mut self) {
        self.in_tree = false;
        for call in self.fences.drain(..) {
            call.finish(PMIX_ERR_UNREACH, Vec::new());
        }
    }

    /// rivetrun's link is gone: direct modexes and subsets fail too.
    pub fn lost(&mut self) {
        self.fail_fences();
        self.subsets.lost();
        for (_, call) in self.asked.drain() {
            call.finish(PMIX_ERR_UNREACH, Vec::new());
        }
    }

    /// A message from rivetrun.
    pub fn message(&mut self, msg: Msg, rivetrun: &Upstream) {
        match msg {
            Msg::Ask {
                from,
                id,
                nspace,
                rank,
            } => {
                let ours = self.next_id;
                self.next_id += 1;
                match node::request_dmodex(&nspace, rank, ours) {
                    Ok(()) => {
                        self.answering.insert(ours, (from, id));
                    }
                    Err(status) => {
                        let _ = rivetrun.send(&[
                            "dmodex_data".to_string(),
                            from.to_string(),
                            id.to_string(),
                            status.to_string(),
                            String::new(),
                        ]);
                    }
                }
            }
            Msg::Done { id, status, data } => {
                if let Some(call) = self.asked.remove(&id) {
                    call.finish(status, data);
                }
            }
            Msg::Coll(done) => self.subsets.done(done),
        }
    }
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::wire;
    use rivet_pmi::pmix_ffi::PMIX_ERR_NOT_SUPPORTED;
    use std::ffi::{c_char, c_int, c_void};
    use std::sync::Mutex;

    /// What fence completions said: (status, data).
    type Seen = Mutex<Vec<(c_int, Vec<u8>)>>;

    unsafe extern "C" fn seen(
        status: c_int,
        data: *const c_char,
        n: usize,
        cbdata: *mut c_void,
        release: Option<unsafe extern "C" fn(*mut c_void)>,
        release_data: *mut c_void,
    ) {
        // SAFETY: `cbdata` is the test's `Seen`; `n` bytes at `data`,
        // alive until `release` (called right after the copy).
        unsafe {
            let bytes = if n == 0 {
                Vec::new()
            } else {
                std::slice::from_raw_parts(data.cast::<u8>(), n).to_vec()
            };
            (*(cbdata as *const Seen))
                .lock()
                .unwrap()
                .push((status, bytes));
            if let Some(r) = release {
                r(release_data);
            }
        }
    }

    fn fence(ranks: &[u32], data: &[u8], s: &Seen) -> PmixEvent {
        let procs = ranks.iter().map(|&r| ("kvs_1".to_string(), r)).collect();
        let cbdata = s as *const Seen as *mut c_void;
        PmixEvent::Fence(FenceCall::for_test(procs, data.to_vec(), seen, cbdata))
    }

    fn rivetrun() -> (Upstream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let up = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (Upstream::new(up), l.accept().unwrap().0)
    }

    #[test]
    fn fences_go_up_the_tree_one_at_a_time_and_come_back_concatenated() {
        let (up, _peer) = rivetrun();
        // Node 1 of a 4-rank job holding ranks 2 and 3.
        let mut st = State::new(1, "kvs_1", 4, vec![0, 0, 1, 1], vec![2, 3]);
        let s = Seen::default();
        // A fence among this node's ranks completes at once, with its data.
        assert!(matches!(
            st.event(fence(&[2, 3], b"ab", &s), &up),
            Step::Nothing
        ));
        assert_eq!(
            s.lock().unwrap().pop(),
            Some((PMIX_SUCCESS, b"ab".to_vec()))
        );
        // Two whole-job fences: the first goes up, the second waits.
        let Step::Barrier(puts) = st.event(fence(&[PMIX_RANK_WILDCARD], b"\x01\x02", &s), &up)
        else {
            panic!("no barrier for a whole-job fence");
        };
        assert_eq!(puts, vec![(format!("{FENCE_KEY}1"), "0102".to_string())]);
        assert!(matches!(
            st.event(fence(&[0, 1, 2, 3], b"z", &s), &up),
            Step::Nothing
        ));
        assert!(st.in_tree());
        // The job's barrier_out: node 0's blob and ours, in node order; the
        // waiting fence goes up next.
        let out = vec![
            (format!("{FENCE_KEY}1"), "0102".to_string()),
            ("other".to_string(), "x".to_string()),
            (format!("{FENCE_KEY}0"), "ff".to_string()),
        ];
        let Step::Barrier(next) = st.barrier_out(&out) else {
            panic!("the second fence did not go up");
        };
        assert_eq!(next, vec![(format!("{FENCE_KEY}1"), hex(b"z"))]);
        assert_eq!(
            s.lock().unwrap().pop(),
            Some((PMIX_SUCCESS, vec![0xff, 1, 2]))
        );
        // The tree fails: the fence under way fails, nothing hangs.
        st.fail_fences();
        assert!(!st.in_tree());
        assert_eq!(
            s.lock().unwrap().pop(),
            Some((PMIX_ERR_UNREACH, Vec::new()))
        );
        // Some ranks of several hosts: gathered by rivetrun, not the tree.
        let (up, peer) = rivetrun();
        assert!(matches!(
            st.event(fence(&[0, 3], b"q", &s), &up),
            Step::Nothing
        ));
        assert!(!st.in_tree());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(peer), &mut line).unwrap();
        let words = wire::recv(&mut line.as_bytes()).unwrap().unwrap();
        assert_eq!(words[0], b"coll");
        assert_eq!(words[2], b"0,1");
        assert_eq!(words[3], b"q");
        // rivetrun's answer completes it with both nodes' blobs.
        let done = Done {
            key: wire::text(&words[1]),
            status: PMIX_SUCCESS,
            context: 1,
            blobs: vec![(0, b"p".to_vec()), (1, b"q".to_vec())],
        };
        st.message(Msg::Coll(done), &up);
        assert_eq!(
            s.lock().unwrap().pop(),
            Some((PMIX_SUCCESS, b"pq".to_vec()))
        );
        // A namespace this proxy spawned is all here: its fence completes
        // at once, with this node's ranks too.
        st.spawned_here("kvs_1_h1_s1");
        let kids = vec![
            ("kvs_1_h1_s1".to_string(), PMIX_RANK_WILDCARD),
            ("kvs_1".to_string(), 2),
        ];
        let cbdata = &s as *const Seen as *mut c_void;
        let call = FenceCall::for_test(kids, b"k".to_vec(), seen, cbdata);
        assert!(matches!(
            st.event(PmixEvent::Fence(call), &up),
            Step::Nothing
        ));
        assert_eq!(s.lock().unwrap().pop(), Some((PMIX_SUCCESS, b"k".to_vec())));
        // Another namespace's processes: refused at once.
        let other = vec![("kvs_1".to_string(), 0), ("other".to_string(), 1)];
        let cbdata = &s as *const Seen as *mut c_void;
        let call = FenceCall::for_test(other, Vec::new(), seen, cbdata);
        st.event(PmixEvent::Fence(call), &up);
        assert_eq!(
            s.lock().unwrap().pop(),
            Some((PMIX_ERR_NOT_SUPPORTED, Vec::new()))
        );
    }

    #[test]
    fn blobs_survive_hex_and_garbage_is_refused() {
        let b = vec![0u8, 1, 0xfe, 0xff, b'%', b' '];
        assert_eq!(unhex(&hex(&b)), Some(b));
        assert_eq!(unhex(""), Some(Vec::new()));
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
    }

    #[test]
    fn rivetruns_dmodex_messages_parse_and_bad_ones_do_not() {
        let words = |s: &[&str]| s.iter().map(|w| w.as_bytes().to_vec()).collect::<Vec<_>>();
        match Msg::parse(&words(&["dmodex_ask", "2", "7", "kvs_1", "3"])) {
            Some(Msg::Ask {
                from,
                id,
                nspace,
                rank,
            }) => assert_eq!((from, id, nspace.as_str(), rank), (2, 7, "kvs_1", 3)),
            _ => panic!("not an ask"),
        }
        match Msg::parse(&words(&["dmodex_done", "7", "0", "00ff"])) {
            Some(Msg::Done { id, status, data }) => {
                assert_eq!((id, status, data), (7, 0, vec![0, 255]))
            }
            _ => panic!("not an answer"),
        }
        assert!(Msg::parse(&words(&["dmodex_done", "x", "0", ""])).is_none());
        assert!(Msg::parse(&words(&["dmodex_ask", "1"])).is_none());
    }
}
