//! A server for one node of a multi-host job (rivetrun's per-node proxy),
//! Hydra's way: everything a rank asks is answered here, from the node's
//! copy of the job (attributes, process mapping, the KVS as of the last
//! fence), except job-wide barriers. A WORLD barrier (PMI-1 `barrier_in`,
//! with or without a 1.2 group tag; PMI-2 `kvs-fence`) completes on this
//! node when its own ranks have arrived, and becomes one
//! [`Output::Barrier`] carrying the node's puts since the last one; the
//! launcher carries it upstream and, once the whole job is there, reports
//! the job's puts with [`Server::barrier_done`], which answers the waiters.
//! `NODE` barriers, and list barriers whose members are all here, stay
//! local; a list naming another node's rank is refused, as are group
//! connects (they need every member's server).

use std::collections::VecDeque;

use crate::server::{reply_to, ConnId, NsId, Output, Server};
use crate::wire::Message;

/// What a namespace served as one node keeps.
#[derive(Debug, Default)]
pub(super) struct Delegated {
    /// This node's index in the job's node map.
    pub node: u32,
    /// Ranks of the namespace on this node.
    pub local: usize,
    /// Puts since the last barrier went upstream.
    pub puts: Vec<(String, String)>,
    /// Barriers gone upstream, oldest first: who waits, and the tag.
    pub waiting: VecDeque<(Vec<ConnId>, Option<i32>)>,
}

/// True for a barrier of every rank of the job (`group` absent or `WORLD[:tag]`).
pub(super) fn is_world(group: Option<&str>) -> bool {
    group.is_none_or(|g| g.split(':').next().map(str::trim) == Some("WORLD"))
}

/// For a list barrier (`r1,r2,...:tag`): whether every member is on `node`.
pub(super) fn list_is_local(group: &str, node: u32, node_of_rank: &[u32]) -> bool {
    let members = group.split(':').next().unwrap_or_default().trim();
    if members == "NODE" || members == "WORLD" {
        return true;
    }
    members.split(',').all(|m| {
        m.trim()
            .parse::<usize>()
            .ok()
            .and_then(|r| node_of_rank.get(r))
            .is_none_or(|&n| n == node)
    })
}

impl Server {
    /// Serve `ns` as node `node` of a multi-host job (see the module docs).
    pub fn delegate_barriers(&mut self, ns: NsId, node: u32) {
        if let Some(n) = self.namespaces.get_mut(ns as usize) {
            let local = n.node_of_rank.iter().filter(|&&x| x == node).count();
            n.delegated = Some(Delegated {
                node,
                local,
                ..Delegated::default()
            });
        }
    }

    /// The oldest barrier that went upstream is complete job-wide; `puts`
    /// are the job's puts since the one before (this node's included).
    /// The KVS takes them, then the waiters get `barrier_out` (or PMI-2's
    /// `kvs-fence-response`).
    pub fn barrier_done(&mut self, ns: NsId, puts: Vec<(String, String)>, out: &mut Vec<Output>) {
        let start = out.len();
        let Some(n) = self.namespaces.get_mut(ns as usize) else {
            return;
        };
        for (k, v) in puts {
            n.store(k, v);
        }
        let Some((waiters, tag)) = n.delegated.as_mut().and_then(|d| d.waiting.pop_front()) else {
            return;
        };
        let reply = Message::BarrierOut {
            rc: 0,
            tag,
            msg: None,
        };
        for w in waiters {
            reply_to(out, w, &reply);
        }
        self.translate_v2(start, out);
    }

    /// Upstream is gone: every barrier waiting on it fails with `why`.
    pub fn barriers_failed(&mut self, ns: NsId, why: &str, out: &mut Vec<Output>) {
        let start = out.len();
        let Some(d) = self
            .namespaces
            .get_mut(ns as usize)
            .and_then(|n| n.delegated.as_mut())
        else {
            return;
        };
        let reply = Message::error_reply(Some("barrier_in"), -1, why);
        for (waiters, _) in d.waiting.drain(..) {
            for w in waiters {
                reply_to(out, w, &reply);
            }
        }
        self.translate_v2(start, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::NamespaceSpec;
    use crate::wire::v2::{V2Frame, V2Framer, V2Message};

    /// Ranks 0 and 1 of a 4-rank job on node 0 (ranks 2, 3 elsewhere).
    fn node0() -> (Server, NsId) {
        let mut s = Server::new();
        let ns = s
            .create_namespace(NamespaceSpec {
                name: "job_9".into(),
                size: 4,
                universe_size: 4,
                node_of_rank: vec![0, 0, 1, 1],
                ..NamespaceSpec::default()
            })
            .unwrap();
        s.delegate_barriers(ns, 0);
        s.attach(10, ns, 0);
        s.attach(11, ns, 1);
        (s, ns)
    }

    fn feed(s: &mut Server, conn: ConnId, bytes: &[u8]) -> Vec<Output> {
        let mut out = Vec::new();
        s.receive(conn, bytes, &mut out);
        out
    }

    fn text_to(out: &[Output], conn: ConnId) -> String {
        out.iter()
            .filter_map(|o| match o {
                Output::Send { conn: c, bytes } if *c == conn => {
                    Some(String::from_utf8_lossy(bytes).into_owned())
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn world_barrier_goes_upstream_once_with_the_nodes_puts() {
        let (mut s, ns) = node0();
        let out = feed(&mut s, 10, b"cmd=put kvsname=job_9 key=a value=1\n");
        assert!(text_to(&out, 10).contains("rc=0"));
        assert!(feed(&mut s, 10, b"cmd=barrier_in group=WORLD:3\n").is_empty());
        let out = feed(&mut s, 11, b"cmd=barrier_in group=WORLD:3\n");
        assert_eq!(
            out,
            vec![Output::Barrier {
                ns,
                puts: vec![("a".into(), "1".into())]
            }]
        );
        // Nobody is answered before the job's barrier is complete.
        let mut out = Vec::new();
        s.barrier_done(
            ns,
            vec![("a".into(), "1".into()), ("b".into(), "2".into())],
            &mut out,
        );
        for conn in [10, 11] {
            assert_eq!(text_to(&out, conn), "cmd=barrier_out tag=3\n");
        }
        // The other node's put is served here now.
        let out = feed(&mut s, 11, b"cmd=get kvsname=job_9 key=b\n");
        assert!(text_to(&out, 11).contains("value=2"), "{out:?}");
        // The next barrier sends only what was put since.
        feed(&mut s, 10, b"cmd=barrier_in\n");
        let out = feed(&mut s, 11, b"cmd=barrier_in\n");
        assert_eq!(out, vec![Output::Barrier { ns, puts: vec![] }]);
    }

    #[test]
    fn node_barriers_stay_local_and_foreign_lists_are_refused() {
        let (mut s, _) = node0();
        feed(&mut s, 10, b"cmd=barrier_in group=NODE:1\n");
        let out = feed(&mut s, 11, b"cmd=barrier_in group=NODE:1\n");
        assert_eq!(text_to(&out, 10), "cmd=barrier_out tag=1\n");
        let out = feed(&mut s, 10, b"cmd=barrier_in group=0,2:5\n");
        assert!(
            text_to(&out, 10).contains("barrier_groups_across_hosts_unsupported"),
            "{out:?}"
        );
    }

    #[test]
    fn pmi2_fence_and_a_lost_upstream() {
        let (mut s, ns) = node0();
        for conn in [10, 11] {
            feed(&mut s, conn, b"cmd=init pmi_version=2 pmi_subversion=0\n");
        }
        let q = V2Message::new("kvs-put")
            .with("key", "k")
            .with("value", "v");
        feed(&mut s, 10, &q.encode().unwrap());
        let fence = V2Message::new("kvs-fence").encode().unwrap();
        assert!(feed(&mut s, 10, &fence).is_empty());
        let out = feed(&mut s, 11, &fence);
        assert_eq!(
            out,
            vec![Output::Barrier {
                ns,
                puts: vec![("k".into(), "v".into())]
            }]
        );
        let mut out = Vec::new();
        s.barriers_failed(ns, "launcher_connection_lost", &mut out);
        let mut f = V2Framer::new();
        let mut frames = Vec::new();
        for o in &out {
            if let Output::Send { bytes, .. } = o {
                f.feed(bytes, &mut frames).unwrap();
            }
        }
        assert_eq!(frames.len(), 2);
        for fr in frames {
            let V2Frame::Message(m) = fr else {
                panic!("{fr:?}")
            };
            assert_eq!(m.cmd, "kvs-fence-response");
            assert_ne!(m.get("rc"), Some("0"));
        }
    }
}
