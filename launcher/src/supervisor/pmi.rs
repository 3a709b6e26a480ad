//! PMI connections: reading requests into the sans-IO server, applying its
//! outputs (answers, aborts, spawns, names), writing answers back.

use std::io::{ErrorKind, Read};

use rivet_pmi::server::{ConnId, NsId, Output, Spawned};

use super::{Failure, Phase, Supervisor, Who, MAX_PMI_UNSENT};
use crate::nonblocking::{interest, write_unsent};

impl Supervisor {
    /// Read what `conn` sent; `to_end`: until end of stream, which will
    /// be reported by no later event.
    pub(super) fn read_conn(&mut self, conn: ConnId, to_end: bool) {
        let mut buf = std::mem::take(&mut self.read_buf);
        let mut outputs = Vec::new();
        let mut closed = false;
        while let Some(c) = self.conns.get_mut(&conn) {
            if c.unsent.len() > MAX_PMI_UNSENT {
                // A rank that asks without reading its answers: no more
                // of its requests are read, so its answers stop growing.
                outputs.push(Output::Close {
                    conn,
                    reason: format!("more than {MAX_PMI_UNSENT} bytes of answers unread"),
                });
                break;
            }
            match c.stream.read(&mut buf) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => {
                    if let Some(p) = c.proc {
                        self.procs[p].spoke_pmi = true;
                    }
                    self.server.receive(conn, &buf[..n], &mut outputs);
                    if n < buf.len() && !to_end {
                        break; // drained; edge-triggered readiness reports the next arrival
                    }
                }
                Err(err) if err.kind() == ErrorKind::WouldBlock => break,
                Err(err) if err.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    closed = true;
                    break;
                }
            }
        }
        self.read_buf = buf;
        self.learn_rank(conn);
        self.apply(outputs);
        if closed {
            self.drop_conn(conn);
        }
    }

    pub(super) fn apply(&mut self, outputs: Vec<Output>) {
        for output in outputs {
            match output {
                Output::Send { conn, bytes } => {
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.unsent.extend_from_slice(&bytes);
                    }
                    self.flush_conn(conn);
                }
                Output::SendAll { conns, bytes } => {
                    for conn in conns {
                        if let Some(c) = self.conns.get_mut(&conn) {
                            c.unsent.extend_from_slice(&bytes);
                        }
                        self.flush_conn(conn);
                    }
                }
                Output::Close { conn, reason } => {
                    let who = self.conns.get(&conn).and_then(|c| c.proc);
                    match who {
                        Some(p) => eprintln!(
                            "rivetrun: closing the PMI connection of {}: {reason}",
                            self.procs[p].who
                        ),
                        None => eprintln!("rivetrun: closing a PMI connection: {reason}"),
                    }
                    self.drop_conn(conn);
                }
                Output::Abort {
                    ns,
                    rank,
                    exit_code,
                    message,
                } => {
                    let who = match rank {
                        Some(rank) => self.who(ns, rank),
                        None => Who::Unidentified,
                    };
                    self.begin_teardown(Failure::Aborted {
                        who,
                        code: exit_code,
                        message,
                    });
                }
                // Only a server serving one node of a multi-host job (the proxy's).
                Output::Finalized { .. } | Output::Barrier { .. } => {}
                Output::Spawn {
                    conn,
                    ns,
                    rank,
                    request,
                } => {
                    let result = self
                        .spawn(ns, rank, &request, &[])
                        .map(|(errcodes, jobid)| Spawned { jobid, errcodes });
                    let mut replies = Vec::new();
                    self.server.spawn_done(conn, result, &mut replies);
                    self.apply(replies);
                }
                Output::Name {
                    conn,
                    ns,
                    rank,
                    request,
                } => self.forward_name(conn, ns, rank, request),
                Output::GroupForward { ns, rank, message } => {
                    let mut more = Vec::new();
                    match &self.group_link {
                        Some(link) => {
                            link.forward_output(&mut self.server, ns, rank, message, &mut more)
                        }
                        None => self.server.group_hub_lost("no name server", &mut more),
                    }
                    self.apply(more);
                }
                Output::GroupMemberLost { ns, rank, group } => {
                    // Once the job is going down, ends are our doing.
                    if matches!(self.phase, Phase::Running) {
                        let who = self.who(ns, rank);
                        self.job_failed(Failure::GroupLeft { who, group });
                    }
                }
            }
        }
    }

    /// The process that is rank `rank` of namespace `ns`.
    pub(super) fn who(&self, ns: NsId, rank: u32) -> Who {
        match self.by_rank.get(&(ns, rank)) {
            Some(&p) => self.procs[p].who.clone(),
            None if ns == self.ns => Who::Rank(rank),
            None => Who::Spawned {
                kvsname: self.server.namespace_name(ns).to_string(),
                index: rank,
            },
        }
    }

    /// A PMI_PORT connection learns its rank from initack; remember it for
    /// diagnostics and for the exit-without-finalize check.
    pub(super) fn learn_rank(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.proc.is_some() {
            return;
        }
        if let Some(key) = self.server.conn_rank(conn) {
            if let Some(&p) = self.by_rank.get(&key) {
                c.proc = Some(p);
                self.procs[p].spoke_pmi = true;
            }
        }
    }

    pub(super) fn flush_conn(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if write_unsent(&mut c.stream, &mut c.unsent).is_err() {
            self.drop_conn(conn);
            return;
        }
        let wants_write = !c.unsent.is_empty();
        if wants_write != c.wants_write {
            let interest = interest(wants_write);
            let token = c.token;
            let _ = self
                .poll
                .registry()
                .reregister(c.stream.source(), token, interest);
            c.wants_write = wants_write;
        }
    }

    pub(super) fn drop_conn(&mut self, conn: ConnId) {
        if let Some(mut c) = self.conns.remove(&conn) {
            let _ = self.poll.registry().deregister(c.stream.source());
            self.sources.remove(&c.token);
            self.server.detach(conn);
        }
    }
}
