//! The rendezvous server's state (seed 003, 2.3.4-2.3.7), sans I/O: the
//! launcher authenticates a connection, then feeds it the commands that
//! connection sends and carries out the [`Output`]s.
//!
//! IMPI: once every rank 0..size has joined, each client gets the size.
//! COLL: each client's labels queue up in the (ascending) order sent; as
//! soon as every client has something queued, the lowest label queued is
//! broadcast with the values of the clients whose next label it is (the
//! others skipped it: their bit stays clear in the mask). DONE goes out when
//! every client's next entry is DONE. FINI from all ends the server. Unknown
//! commands are skipped; a client that breaks the rules or hangs up before
//! its FINI fails the job.

use std::collections::{HashMap, VecDeque};

use super::labels::{label_name, Broadcast, Coll, NO_LABEL};
use super::{command_name, Command, CMD_AUTH, CMD_COLL, CMD_DONE, CMD_FINI, CMD_IMPI, MAX_CLIENTS};

/// A connection, as the launcher numbers them.
pub type ConnId = u64;

/// What the launcher must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Write these bytes (whole commands) to the connection.
    Send(ConnId, Vec<u8>),
    /// Close the connection (after what was sent to it).
    Close(ConnId),
    /// Tell the user (stderr); the server goes on.
    Note(String),
    /// The job cannot go on: report, close everything, exit non-zero.
    Fail(String),
    /// Every client sent FINI: exit 0.
    Finished,
}

#[derive(Debug)]
enum Entry {
    Label(u32, Vec<u8>),
    Done,
}

#[derive(Debug, Default)]
struct Client {
    conn: Option<ConnId>,
    queue: VecDeque<Entry>,
    queued_bytes: usize,
    last_label: Option<u32>,
    sent_done: bool,
    fini: bool,
}

/// The server's state for one job of `size` clients.
#[derive(Debug)]
pub struct Relay {
    clients: Vec<Client>,
    by_conn: HashMap<ConnId, usize>,
    joined: usize,
    started: bool,
    done: bool,
    failed: bool,
    max_queued: usize,
}

impl Relay {
    /// A job of `size` clients (1..=32: the COLL mask has 32 bits); each may
    /// have at most `max_queued` payload bytes waiting for the others.
    pub fn new(size: u32, max_queued: usize) -> Result<Relay, String> {
        if size == 0 || size > MAX_CLIENTS {
            return Err(format!(
                "an IMPI job has 1 to {MAX_CLIENTS} clients (the COLL client mask is 32 bits), not {size}"
            ));
        }
        Ok(Relay {
            clients: (0..size).map(|_| Client::default()).collect(),
            by_conn: HashMap::new(),
            joined: 0,
            started: false,
            done: false,
            failed: false,
            max_queued,
        })
    }

    /// The client rank a connection joined as, if it did.
    pub fn rank_of(&self, conn: ConnId) -> Option<u32> {
        self.by_conn.get(&conn).map(|&r| r as u32)
    }

    /// A command from an authenticated connection.
    pub fn command(&mut self, conn: ConnId, cmd: &Command) -> Vec<Output> {
        let mut out = Vec::new();
        if self.failed {
            return out;
        }
        let rank = self.by_conn.get(&conn).copied();
        match (cmd.cmd, rank) {
            (CMD_IMPI, None) => self.join(conn, cmd, &mut out),
            (CMD_IMPI | CMD_AUTH, Some(r)) => self.fail(
                &mut out,
                format!("client {r} sent {} again", command_name(cmd.cmd)),
            ),
            (CMD_AUTH | CMD_COLL | CMD_DONE | CMD_FINI, None) => {
                out.push(Output::Note(format!(
                    "a connection sent {} before joining with IMPI; closed",
                    command_name(cmd.cmd)
                )));
                out.push(Output::Close(conn));
            }
            (CMD_COLL, Some(r)) => self.coll(r, cmd, &mut out),
            (CMD_DONE, Some(r)) => {
                if self.clients[r].sent_done {
                    self.fail(&mut out, format!("client {r} sent DONE twice"));
                } else if !cmd.payload.is_empty() {
                    self.fail(&mut out, format!("client {r} sent DONE with a payload"));
                } else {
                    self.clients[r].sent_done = true;
                    self.clients[r].queue.push_back(Entry::Done);
                    self.advance(&mut out);
                }
            }
            (CMD_FINI, Some(r)) => {
                self.clients[r].fini = true;
                out.push(Output::Close(conn));
                if self.clients.iter().all(|c| c.fini) {
                    out.push(Output::Finished);
                }
            }
            // Forward compatibility (2.3.2): an unknown command is skipped.
            _ => {}
        }
        out
    }

    /// The connection hung up (or its bytes made no sense).
    pub fn closed(&mut self, conn: ConnId, why: &str) -> Vec<Output> {
        let mut out = Vec::new();
        let Some(r) = self.by_conn.remove(&conn) else {
            return out;
        };
        self.clients[r].conn = None;
        if !self.clients[r].fini && !self.failed {
            self.fail(
                &mut out,
                format!("client {r} disconnected before FINI ({why}); the IMPI job failed"),
            );
        }
        out
    }

    /// Connections of joined clients (to close on failure).
    pub fn conns(&self) -> Vec<ConnId> {
        self.by_conn.keys().copied().collect()
    }

    fn fail(&mut self, out: &mut Vec<Output>, why: String) {
        self.failed = true;
        out.push(Output::Fail(why));
    }

    fn join(&mut self, conn: ConnId, cmd: &Command, out: &mut Vec<Output>) {
        let size = self.clients.len();
        let rank = match cmd.impi_value() {
            Ok(r) if r >= 0 && (r as usize) < size => r as usize,
            Ok(r) => {
                out.push(Output::Note(format!(
                    "a connection asked to join as client {r} of a job of {size}; closed"
                )));
                out.push(Output::Close(conn));
                return;
            }
            Err(e) => {
                out.push(Output::Note(format!("bad IMPI command: {e}; closed")));
                out.push(Output::Close(conn));
                return;
            }
        };
        if self.clients[rank].conn.is_some() || self.clients[rank].fini {
            out.push(Output::Note(format!(
                "a second connection asked to join as client {rank}; closed"
            )));
            out.push(Output::Close(conn));
            return;
        }
        self.clients[rank].conn = Some(conn);
        self.by_conn.insert(conn, rank);
        self.joined += 1;
        if self.joined == size {
            let reply = Command::impi(size as i32).encode();
            for c in &self.clients {
                if let Some(id) = c.conn {
                    out.push(Output::Send(id, reply.clone()));
                }
            }
            self.started = true;
            self.advance(out);
        }
    }

    fn coll(&mut self, r: usize, cmd: &Command, out: &mut Vec<Output>) {
        let coll = match Coll::decode(&cmd.payload) {
            Ok(c) => c,
            Err(e) => return self.fail(out, format!("client {r}: {e}")),
        };
        let client = &self.clients[r];
        let broken = if client.sent_done {
            Some("sent COLL after DONE".to_string())
        } else if coll.label == NO_LABEL {
            Some("sent IMPI_NO_LABEL, which is never sent".to_string())
        } else if let Some(last) = client.last_label.filter(|&l| coll.label <= l) {
            Some(format!(
                "sent {} after {}: labels must ascend",
                label_name(coll.label),
                label_name(last)
            ))
        } else if client.queued_bytes + coll.data.len() > self.max_queued {
            Some(format!(
                "has {} bytes of labels waiting for the others, over the {}-byte limit",
                client.queued_bytes + coll.data.len(),
                self.max_queued
            ))
        } else {
            None
        };
        if let Some(why) = broken {
            return self.fail(out, format!("client {r} {why}"));
        }
        let client = &mut self.clients[r];
        client.queued_bytes += coll.data.len();
        client.last_label = Some(coll.label);
        client.queue.push_back(Entry::Label(coll.label, coll.data));
        self.advance(out);
    }

    /// Broadcast what every client has decided about.
    fn advance(&mut self, out: &mut Vec<Output>) {
        while self.started && !self.done && self.clients.iter().all(|c| !c.queue.is_empty()) {
            let lowest = self
                .clients
                .iter()
                .filter_map(|c| match c.queue.front() {
                    Some(Entry::Label(l, _)) => Some(*l),
                    _ => None,
                })
                .min();
            let bytes = match lowest {
                None => {
                    self.done = true;
                    for c in &mut self.clients {
                        c.queue.clear();
                    }
                    Command::empty(CMD_DONE).encode()
                }
                Some(label) => {
                    let mut parts: Vec<Option<Vec<u8>>> = Vec::with_capacity(self.clients.len());
                    for c in &mut self.clients {
                        let mine =
                            matches!(c.queue.front(), Some(Entry::Label(l, _)) if *l == label);
                        if mine {
                            if let Some(Entry::Label(_, data)) = c.queue.pop_front() {
                                c.queued_bytes -= data.len();
                                parts.push(Some(data));
                                continue;
                            }
                        }
                        parts.push(None);
                    }
                    let b = Broadcast::collect(label, parts.iter().map(|p| p.as_deref()));
                    Command::new(CMD_COLL, b.encode()).encode()
                }
            };
            for c in &self.clients {
                if let Some(id) = c.conn {
                    out.push(Output::Send(id, bytes.clone()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::impi::labels::{Value, C_DATALEN, C_NHOSTS, H_PORT};

    fn coll(label: u32, v: Value) -> Command {
        Command::new(
            CMD_COLL,
            Coll {
                label,
                data: v.encode(),
            }
            .encode(),
        )
    }

    fn sends(out: &[Output]) -> Vec<(ConnId, Vec<u8>)> {
        out.iter()
            .filter_map(|o| match o {
                Output::Send(c, b) => Some((*c, b.clone())),
                _ => None,
            })
            .collect()
    }

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    fn joined3() -> Relay {
        let mut r = Relay::new(3, 1 << 20).unwrap();
        assert!(r.command(10, &Command::impi(0)).is_empty());
        assert!(r.command(12, &Command::impi(2)).is_empty());
        let out = r.command(11, &Command::impi(1));
        let s = sends(&out);
        assert_eq!(s.len(), 3);
        assert!(s.iter().all(|(_, b)| b == b"IMPI\0\0\0\x04\0\0\0\x03"));
        r
    }

    #[test]
    fn the_seed_exchange_of_three_clients() {
        let mut r = joined3();
        assert!(r.command(10, &coll(C_NHOSTS, Value::Count(3))).is_empty());
        assert!(r.command(11, &coll(C_NHOSTS, Value::Count(2))).is_empty());
        let out = r.command(12, &coll(C_NHOSTS, Value::Count(2)));
        let want = words(&[CMD_COLL, 20, C_NHOSTS, 7, 3, 2, 2]);
        assert_eq!(
            sends(&out),
            vec![(10, want.clone()), (11, want.clone()), (12, want)]
        );
        // Client 1 skips DATALEN: its next label (H_PORT) tells the server so.
        r.command(10, &coll(C_DATALEN, Value::Count(8000)));
        r.command(12, &coll(C_DATALEN, Value::Count(4000)));
        let out = r.command(11, &coll(H_PORT, Value::Counts(vec![6001, 6002])));
        assert_eq!(
            sends(&out)[0].1,
            words(&[CMD_COLL, 16, C_DATALEN, 5, 8000, 4000])
        );
        r.command(10, &coll(H_PORT, Value::Counts(vec![5001, 5002, 5003])));
        let out = r.command(12, &coll(H_PORT, Value::Counts(vec![7001, 7002])));
        assert_eq!(
            sends(&out)[0].1,
            words(&[CMD_COLL, 36, H_PORT, 7, 5001, 5002, 5003, 6001, 6002, 7001, 7002])
        );
        // Unknown labels are relayed as they came; unknown commands skipped.
        assert!(r
            .command(10, &Command::new(0x5555_5555, vec![1, 2, 3]))
            .is_empty());
        r.command(10, &Command::new(CMD_COLL, words(&[0x9000, 0xabcd])));
        r.command(11, &Command::empty(CMD_DONE));
        let out = r.command(12, &Command::empty(CMD_DONE));
        assert_eq!(sends(&out)[0].1, words(&[CMD_COLL, 12, 0x9000, 1, 0xabcd]));
        let out = r.command(10, &Command::empty(CMD_DONE));
        assert_eq!(sends(&out).len(), 3);
        assert!(sends(&out).iter().all(|(_, b)| b == b"DONE\0\0\0\0"));
        assert_eq!(
            r.command(11, &Command::empty(CMD_FINI)),
            vec![Output::Close(11)]
        );
        assert!(
            r.closed(11, "eof").is_empty(),
            "a client gone after FINI is fine"
        );
        r.command(10, &Command::empty(CMD_FINI));
        let out = r.command(12, &Command::empty(CMD_FINI));
        assert_eq!(out, vec![Output::Close(12), Output::Finished]);
    }

    #[test]
    fn rule_breakers_and_vanishing_clients_fail_the_job() {
        let mut r = joined3();
        r.command(10, &coll(H_PORT, Value::Counts(vec![1])));
        let out = r.command(10, &coll(C_NHOSTS, Value::Count(1)));
        assert!(
            matches!(&out[..], [Output::Fail(w)] if w.contains("ascend")),
            "{out:?}"
        );

        let mut r = joined3();
        let out = r.closed(11, "connection reset");
        assert!(
            matches!(&out[..], [Output::Fail(w)] if w.contains("client 1 disconnected before FINI"))
        );

        let mut r = joined3();
        r.command(10, &Command::empty(CMD_DONE));
        let out = r.command(10, &coll(C_NHOSTS, Value::Count(1)));
        assert!(matches!(&out[..], [Output::Fail(w)] if w.contains("after DONE")));

        let mut r = Relay::new(2, 8).unwrap();
        r.command(1, &Command::impi(0));
        r.command(2, &Command::impi(1));
        let out = r.command(1, &Command::new(CMD_COLL, words(&[C_NHOSTS, 1, 2, 3])));
        assert!(matches!(&out[..], [Output::Fail(w)] if w.contains("limit")));
    }

    #[test]
    fn strangers_do_not_join_or_fail_the_job() {
        let mut r = Relay::new(2, 1 << 20).unwrap();
        assert_eq!(r.command(1, &Command::impi(5))[1], Output::Close(1));
        assert_eq!(r.command(2, &Command::impi(-1))[1], Output::Close(2));
        assert_eq!(
            r.command(3, &Command::new(CMD_IMPI, vec![1]))[1],
            Output::Close(3)
        );
        assert_eq!(r.command(4, &Command::empty(CMD_DONE))[1], Output::Close(4));
        r.command(5, &Command::impi(0));
        assert_eq!(r.command(6, &Command::impi(0))[1], Output::Close(6));
        assert!(r.closed(6, "eof").is_empty());
        assert_eq!(r.rank_of(5), Some(0));
        assert!(Relay::new(0, 1).is_err());
        assert!(Relay::new(33, 1).is_err());
    }
}
