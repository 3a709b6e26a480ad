//! What a multi-host job's proxies cannot serve alone, served by rivetrun
//! for the whole job: the name table (`publish_name`, `lookup_name`,
//! `unpublish_name`; or the `--nameserver`), and group connect, whose
//! members are on many hosts. rivetrun keeps a PMI server core of its own
//! with the job's namespace and every namespace a proxy spawned. A proxy
//! forwards a rank's group message as `pmi KVS RANK CONN LINE`; it is fed
//! to this server as if from a connection `(proxy, CONN)` of that rank, and
//! whatever the server answers that connection goes back as `pmi_out CONN
//! BYTES`. Rank ends (`exit`, `sexit`) reach the server too, so group
//! operations waiting for a rank that ended fail or go on as on one host.

use std::collections::HashSet;

use rivet_pmi::server::{ConnId, NameRequest, NamespaceSpec, NsId, Output, Server};
use rivet_pmi::wire::Message;

use super::commands as cmd;
use super::wire;

/// The answers for proxies (proxy index, message words) and job failures.
#[derive(Default)]
pub(super) struct Routed {
    pub to: Vec<(u32, Vec<Vec<u8>>)>,
    pub failures: Vec<String>,
}

/// What to do with a name request.
pub(super) enum NameAction {
    /// Send these words to the proxy.
    Reply(Vec<Vec<u8>>),
    /// Ask the name server at this address, then answer with [`name_done`].
    Ask(String, NameRequest),
}

/// `name_done CONN ok LINE` or `name_done CONN err WHY`.
pub(super) fn name_done(conn: &[u8], result: Result<Message, String>) -> Vec<Vec<u8>> {
    let (kind, body) = match result {
        Ok(m) => match m.encode() {
            Ok(line) => ("ok", line),
            Err(e) => ("err", format!("name_answer_unsendable: {e}").into_bytes()),
        },
        Err(why) => ("err", why.into_bytes()),
    };
    vec![
        cmd::NAME_DONE.as_bytes().to_vec(),
        conn.to_vec(),
        kind.as_bytes().to_vec(),
        body,
    ]
}

pub(super) struct JobWide {
    server: Server,
    name_server: Option<String>,
    /// Connections `(proxy << 32) | CONN` already attached.
    attached: HashSet<ConnId>,
}

fn vconn(proxy: u32, conn: u32) -> ConnId {
    (ConnId::from(proxy) << 32) | ConnId::from(conn)
}

impl JobWide {
    /// The job `kvsname` of `size` ranks; group names of `cluster`.
    pub fn new(
        kvsname: &str,
        size: u32,
        cluster: &str,
        name_server: Option<String>,
    ) -> Result<JobWide, String> {
        let mut server = Server::new();
        server
            .create_namespace(NamespaceSpec {
                name: kvsname.to_string(),
                size,
                universe_size: size,
                node_of_rank: vec![0; size as usize],
                ..NamespaceSpec::default()
            })
            .map_err(|e| e.to_string())?;
        // A cluster id that cannot be one only limits group names to plain `ns:rank`.
        let _ = server.set_cluster(cluster);
        Ok(JobWide {
            server,
            name_server,
            attached: HashSet::new(),
        })
    }

    fn rank_of(&self, msg: &[Vec<u8>]) -> Option<(NsId, u32, u32)> {
        let word = |i: usize| msg.get(i).map(|w| wire::text(w)).unwrap_or_default();
        let ns = self.server.namespace_id(&word(1))?;
        Some((ns, word(2).parse().ok()?, word(3).parse().ok()?))
    }

    /// `name KVS RANK CONN LINE` from proxy `proxy`.
    pub fn name(&mut self, msg: &[Vec<u8>]) -> Option<NameAction> {
        let conn = msg.get(3)?.clone();
        let line = msg.get(4).map(|w| wire::text(w)).unwrap_or_default();
        let request = Message::parse(line.trim_end())
            .ok()
            .and_then(|m| NameRequest::from_message(m).ok());
        let Some(request) = request else {
            let why = "bad_name_request_from_proxy".to_string();
            return Some(NameAction::Reply(name_done(&conn, Err(why))));
        };
        if let Some(addr) = &self.name_server {
            return Some(NameAction::Ask(addr.clone(), request));
        }
        let Some((ns, rank, _)) = self.rank_of(msg) else {
            let why = "unknown_namespace_or_rank".to_string();
            return Some(NameAction::Reply(name_done(&conn, Err(why))));
        };
        let reply = self.server.answer_name(ns, rank, &request);
        Some(NameAction::Reply(name_done(&conn, Ok(reply))))
    }

    /// `pmi KVS RANK CONN LINE` from proxy `proxy`: serve it job-wide.
    pub fn relay(&mut self, proxy: u32, msg: &[Vec<u8>]) -> Routed {
        let Some((ns, rank, conn)) = self.rank_of(msg) else {
            return Routed::default();
        };
        let id = vconn(proxy, conn);
        if self.attached.insert(id) {
            self.server.attach(id, ns, rank);
        }
        let mut out = Vec::new();
        if let Some(line) = msg.get(4) {
            self.server.receive(id, line, &mut out);
        }
        self.route(out)
    }

    /// A proxy started the processes of namespace `kvs` (`spawned KVS SIZE`).
    pub fn spawned(&mut self, msg: &[Vec<u8>]) -> Result<(), String> {
        let word = |i: usize| msg.get(i).map(|w| wire::text(w)).unwrap_or_default();
        let size: u32 = word(2).parse().map_err(|_| format!("bad {msg:?}"))?;
        self.server
            .create_namespace(NamespaceSpec {
                name: word(1),
                size,
                universe_size: size,
                node_of_rank: vec![0; size as usize],
                ..NamespaceSpec::default()
            })
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Rank `rank` of `kvs` ended.
    pub fn ended(&mut self, kvs: &str, rank: u32) -> Routed {
        let Some(ns) = self.server.namespace_id(kvs) else {
            return Routed::default();
        };
        let mut out = Vec::new();
        self.server.process_ended(ns, rank, &mut out);
        self.route(out)
    }

    /// Proxy `proxy`'s connection ended: its ranks' connections go.
    pub fn proxy_gone(&mut self, proxy: u32) {
        let gone: Vec<ConnId> = self
            .attached
            .iter()
            .copied()
            .filter(|&c| c >> 32 == ConnId::from(proxy))
            .collect();
        for c in gone {
            self.attached.remove(&c);
            self.server.detach(c);
        }
    }

    fn route(&mut self, out: Vec<Output>) -> Routed {
        let mut routed = Routed::default();
        let mut send = |conn: ConnId, bytes: &[u8]| {
            let words = vec![
                cmd::PMI_OUT.as_bytes().to_vec(),
                (conn & 0xffff_ffff).to_string().into_bytes(),
                bytes.to_vec(),
            ];
            routed.to.push(((conn >> 32) as u32, words));
        };
        for o in out {
            match o {
                Output::Send { conn, bytes } => send(conn, &bytes),
                Output::SendAll { conns, bytes } => {
                    for conn in conns {
                        send(conn, &bytes);
                    }
                }
                Output::Close { conn, reason } => {
                    eprintln!("rivetrun: a group message from a proxy was refused: {reason}");
                    self.attached.remove(&conn);
                    self.server.detach(conn);
                }
                Output::GroupMemberLost { ns, rank, group } => routed.failures.push(format!(
                    "rank {rank} of {} ended while connected to group {group} (made without \
                     early_term)",
                    self.server.namespace_name(ns)
                )),
                // Only group messages reach this server.
                _ => {}
            }
        }
        routed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn names_are_one_table_for_every_proxy() {
        let mut j = JobWide::new("kvs_9", 4, "c1", None).unwrap();
        let publish = "cmd=publish_name service=svc port=tcp://x\n";
        let Some(NameAction::Reply(r)) = j.name(&words(&["name", "kvs_9", "0", "1", publish]))
        else {
            panic!("no reply");
        };
        assert_eq!(r[0], b"name_done");
        assert_eq!(r[2], b"ok");
        assert!(
            wire::text(&r[3]).contains("rc=0"),
            "{:?}",
            wire::text(&r[3])
        );
        // Another proxy's rank finds it.
        let lookup = "cmd=lookup_name service=svc\n";
        let Some(NameAction::Reply(r)) = j.name(&words(&["name", "kvs_9", "3", "4", lookup]))
        else {
            panic!("no reply");
        };
        assert_eq!(r[1], b"4");
        assert!(wire::text(&r[3]).contains("port=tcp://x"));
        // Garbage is answered, not dropped.
        let Some(NameAction::Reply(r)) = j.name(&words(&["name", "kvs_9", "3", "4", "junk"]))
        else {
            panic!("no reply");
        };
        assert_eq!(r[2], b"err");
    }

    #[test]
    fn a_group_connect_of_ranks_on_two_proxies_completes_for_both() {
        let mut j = JobWide::new("kvs_9", 2, "c1", None).unwrap();
        let join = |rank: u32| {
            format!("cmd=group_connect procs=kvs_9:0,kvs_9:1 id=g ctx=5 card=card{rank}\n")
        };
        let first = j.relay(0, &words(&["pmi", "kvs_9", "0", "1", &join(0)]));
        let said: Vec<String> = first.to.iter().map(|(_, w)| wire::text(&w[2])).collect();
        assert!(first.to.is_empty(), "waits for rank 1: {said:?}");
        let done = j.relay(1, &words(&["pmi", "kvs_9", "1", "2", &join(1)]));
        let proxies: HashSet<u32> = done.to.iter().map(|(p, _)| *p).collect();
        assert_eq!(proxies, HashSet::from([0, 1]), "both members answered");
        for (p, w) in &done.to {
            assert_eq!(w[0], b"pmi_out");
            assert_eq!(wire::text(&w[1]), if *p == 0 { "1" } else { "2" });
        }
        let text: String = done.to.iter().map(|(_, w)| wire::text(&w[2])).collect();
        assert!(text.contains("card0") && text.contains("card1"), "{text}");
    }
}
