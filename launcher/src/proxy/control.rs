//! rivetrun's commands to this proxy, read on a thread of their own: the
//! control connection must keep being read while the main thread waits on
//! its ranks, and each command goes where it is handled (the PMI loop, the
//! main thread's events, rank 0's stdin) without this thread doing any of it.

use std::io::BufReader;
use std::net::TcpStream;
use std::sync::mpsc;

use super::{pmi, pmix, pmix_names, tree, Event};
use crate::remote::commands as cmd;
use crate::remote::wire;

/// Read rivetrun's commands from `reader` until the connection ends, then
/// tell the PMI loop and the main thread it is lost. `stdin` takes rank 0's
/// input (None: end of input); `secret` and `proxy_id` are for joining a
/// parent proxy in the tree.
pub(super) fn start_reader(
    mut reader: BufReader<TcpStream>,
    pmi: pmi::Handle,
    tx: mpsc::Sender<Event>,
    stdin_tx: mpsc::Sender<Option<Vec<u8>>>,
    secret: String,
    proxy_id: u32,
) {
    std::thread::spawn(move || {
        while let Ok(Some(msg)) = wire::recv(&mut reader) {
            match wire::text(msg.first().map_or(&[][..], |w| &w[..])).as_str() {
                cmd::BARRIER_OUT => pmi.send(pmi::Cmd::BarrierOut(wire::pairs(&msg))),
                cmd::CHILD_DONE => {
                    // A child proxy's ranks all ended (it may never have
                    // connected to us): as if its connection closed.
                    if let Some(c) = msg.get(1).and_then(|w| wire::text(w).parse().ok()) {
                        pmi.send(pmi::Cmd::ChildGone(c));
                    }
                }
                cmd::PARENT => {
                    let addr = wire::text(msg.get(1).map_or(&[][..], |w| w));
                    tree::join_parent(addr, secret.clone(), proxy_id, pmi.clone());
                }
                cmd::SIGNAL => {
                    let sig = msg.get(1).and_then(|s| wire::text(s).parse().ok());
                    let _ = tx.send(Event::Signal(sig.unwrap_or(libc::SIGTERM)));
                }
                cmd::STDIN => {
                    let _ = stdin_tx.send(msg.into_iter().nth(1));
                }
                cmd::STDIN_EOF => {
                    let _ = stdin_tx.send(None);
                }
                cmd::TERM => {
                    let _ = tx.send(Event::Term);
                }
                cmd::PMIX_SPAWNED => {
                    // The PMI loop learns where its processes are (for
                    // collectives naming them), the main thread
                    // registers it with this node's server.
                    if let Some(m) = pmix::Msg::parse(&msg) {
                        pmi.send(pmi::Cmd::Pmix(m));
                    }
                    let _ = tx.send(Event::PmixSpawned(msg));
                }
                cmd::GEND => {
                    let rank = msg.get(2).and_then(|w| wire::text(w).parse().ok());
                    if let (Some(ns), Some(rank)) = (msg.get(1), rank) {
                        let _ = tx.send(Event::MemberEnded(wire::text(ns), rank));
                    }
                }
                cmd::DMODEX_ASK | cmd::DMODEX_DONE | cmd::COLL_OUT | cmd::FENCE_FAILED => {
                    if let Some(m) = pmix::Msg::parse(&msg) {
                        pmi.send(pmi::Cmd::Pmix(m));
                    }
                }
                cmd::PMI_OUT => {
                    let conn = msg.get(1).and_then(|w| wire::text(w).parse().ok());
                    if let (Some(conn), Some(bytes)) = (conn, msg.get(2)) {
                        pmi.send(pmi::Cmd::Out(conn, bytes.clone()));
                    }
                }
                cmd::NAME_DONE => {
                    let conn = msg.get(1).and_then(|w| wire::text(w).parse().ok());
                    let body = wire::text(msg.get(3).map_or(&[][..], |w| w));
                    let result = match msg.get(2).map(|w| wire::text(w)).as_deref() {
                        Some("ok") => rivet_pmi::wire::Message::parse(body.trim_end())
                            .map_err(|e| format!("bad_answer_from_rivetrun: {e}")),
                        _ => Err(body),
                    };
                    // A PMIx query's answer goes to its waiting thread.
                    if let Some(conn) = conn.filter(|&c| c < pmix_names::CONN_BASE) {
                        pmi.send(pmi::Cmd::NameDone(conn, result));
                    } else if let Some(conn) = conn {
                        pmix_names::deliver(conn, result);
                    }
                }
                _ => {}
            }
        }
        pmi.send(pmi::Cmd::Lost);
        let _ = tx.send(Event::Lost);
    });
}
