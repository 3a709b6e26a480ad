//! Scripted multi-connection sessions through `Server::receive`. What the
//! tests share is here; each concept has a module.

use super::*;
use crate::wire::SpawnCommand;

fn spec(name: &str, nodes: &[u32]) -> NamespaceSpec {
    NamespaceSpec {
        name: name.to_string(),
        size: nodes.len() as u32,
        appnum: 0,
        appnum_of_rank: Vec::new(),
        universe_size: 8,
        node_of_rank: nodes.to_vec(),
        attributes: vec![("PMI_hwloc_xmlfile".into(), "/tmp/topo.xml".into())],
        preput: vec![("PARENT_ROOT_PORT_NAME".into(), "tag#0$port#99$".into())],
    }
}

/// A server plus helpers to talk to it.
struct Session {
    server: Server,
}

impl Session {
    /// Feed `text` from `conn`; return all outputs.
    fn io(&mut self, conn: ConnId, text: &str) -> Vec<Output> {
        let mut out = Vec::new();
        self.server.receive(conn, text.as_bytes(), &mut out);
        out
    }

    /// Feed `text` from `conn`; return what was sent back to `conn` only,
    /// asserting nothing else happened.
    fn ask(&mut self, conn: ConnId, text: &str) -> String {
        let out = self.io(conn, text);
        let mut reply = String::new();
        for o in out {
            match o {
                Output::Send { conn: c, bytes } if c == conn => {
                    reply.push_str(&String::from_utf8(bytes).unwrap())
                }
                other => panic!("unexpected output {other:?} for {text:?}"),
            }
        }
        reply
    }
}

fn sends(out: &[Output]) -> Vec<(ConnId, String)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send { conn, bytes } => {
                Some((*conn, String::from_utf8(bytes.clone()).unwrap()))
            }
            _ => None,
        })
        .collect()
}

fn three_rank_session() -> (Session, NsId) {
    let mut server = Server::new();
    let ns = server
        .create_namespace(spec("rivet_1_0", &[0, 0, 1]))
        .unwrap();
    for rank in 0..3 {
        server.attach(u64::from(rank) + 1, ns, rank);
    }
    (Session { server }, ns)
}

/// A spawn that started job `kids` with these codes.
fn spawned(errcodes: Vec<i32>) -> Spawned {
    Spawned {
        jobid: "kids".into(),
        errcodes,
    }
}

mod bad_input;
mod names;
mod ports;
mod session;
