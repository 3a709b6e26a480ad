//! Serving PMI-2 on the same connections as PMI-1, as Hydra does.
//!
//! A connection is PMI-1 until it sends `cmd=init pmi_version=2` (answered
//! `response_to_init pmi_version=2 pmi_subversion=0`) or its first bytes
//! are a PMI-2 length prefix; from then on it speaks PMI-2 framing
//! (`wire/v2.rs`). Most PMI-2 queries are PMI-1 queries in other words, so
//! they are served by the PMI-1 handlers: the query is kept in the
//! connection's `pending` queue, and each PMI-1 answer the handlers queue
//! for that connection (a barrier's too, whichever rank completed it) is
//! rewritten into the PMI-2 response of the oldest pending query. The rest
//! (`fullinit`, `job-getid`, node attributes, `universeSize`) is answered
//! here. `spawn` is read into PMI-1's request (`wire/v2_spawn.rs`) and
//! answered with the error codes of its processes.
//!
//! A `PMI_PORT` connection still authenticates with PMI-1's `initack`
//! before it may switch.

use std::collections::VecDeque;

use crate::error::Error;
use crate::server::{ConnId, NsId, Output, Server};
use crate::wire::v2::{V2Frame, V2Framer, V2Message};
use crate::wire::Message;

/// PMI-2 state of one connection.
#[derive(Debug, Default)]
pub(super) struct V2Conn {
    framer: V2Framer,
    /// Queries passed to the PMI-1 handlers, oldest first, awaiting answers.
    pending: VecDeque<V2Message>,
    /// The job a spawn just started, for its `spawn-response`
    /// (`Server::spawn_done`).
    pub(super) spawned_jobid: Option<String>,
}

/// True when a fresh connection's first bytes are a PMI-2 length prefix
/// (a digit, after any padding), not PMI-1's `cmd=`/`mcmd=`. `None`: only
/// spaces so far, cannot tell yet.
pub(super) fn looks_like_v2(bytes: &[u8]) -> Option<bool> {
    bytes
        .iter()
        .find(|&&b| b != b' ')
        .map(|b| b.is_ascii_digit())
}

/// The PMI-1 query serving a PMI-2 one, if one does.
fn as_pmi1(q: &V2Message, own_ns: &str) -> Option<Message> {
    let text = |k: &'static str| q.get(k).unwrap_or_default().to_string();
    Some(match q.cmd.as_str() {
        "kvs-put" => Message::Put {
            kvsname: own_ns.to_string(),
            key: text("key"),
            value: text("value"),
        },
        "kvs-get" => Message::Get {
            kvsname: q.get("jobid").filter(|j| !j.is_empty()).map(str::to_string),
            key: text("key"),
        },
        "info-getjobattr" => Message::Get {
            kvsname: None,
            key: text("key"),
        },
        "kvs-fence" => Message::BarrierIn { group: None },
        "finalize" => Message::Finalize,
        "name-publish" => Message::PublishName {
            service: text("name"),
            port: text("port"),
        },
        "name-unpublish" => Message::UnpublishName {
            service: text("name"),
        },
        "name-lookup" => Message::LookupName {
            service: text("name"),
        },
        _ => return None,
    })
}

/// The PMI-2 response to `query` that PMI-1 answer `reply` stands for;
/// `jobid`, a spawn's new job, goes into a successful `spawn-response`.
fn as_v2_reply(query: &V2Message, reply: &Message, jobid: Option<String>) -> V2Message {
    if let Message::SpawnResult { rc, errcodes, msg } = reply {
        let codes: Vec<String> = errcodes.iter().map(i32::to_string).collect();
        return V2Message::new("spawn-response")
            .with("rc", rc)
            .with_opt("jobid", jobid.filter(|_| *rc == 0))
            .with_opt("errmsg", msg.as_ref().map(|m| m.replace(';', ",")))
            .with_opt("errcodes", (!codes.is_empty()).then(|| codes.join(",")))
            .with_opt("thrid", query.get("thrid"));
    }
    let (rc, msg) = reply.status().unwrap_or((0, None));
    let lookup = matches!(query.cmd.as_str(), "kvs-get" | "info-getjobattr");
    let missing = msg.is_some_and(|m| m.contains("not_found") || m.contains("unknown_kvsname"));
    if rc != 0 && !(lookup && missing) {
        return V2Message::error_reply(query, rc, msg.unwrap_or("failed"));
    }
    let base = V2Message::new(&format!("{}-response", query.cmd))
        .with("rc", 0)
        .with_opt("thrid", query.get("thrid"));
    match reply {
        Message::GetResult { value, .. } => match value {
            Some(v) if rc == 0 => base.with("found", "TRUE").with("value", v),
            _ => base.with("found", "FALSE"),
        },
        Message::LookupResult { port: Some(p), .. } => {
            base.with("found", "TRUE").with("value", p).with("port", p)
        }
        _ => base,
    }
}

impl Server {
    /// Switch `conn` to PMI-2 framing.
    pub(super) fn switch_to_v2(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.v2 = Some(V2Conn::default());
        }
    }

    /// Bytes from a PMI-2 connection.
    pub(super) fn receive_v2(&mut self, conn: ConnId, bytes: &[u8], out: &mut Vec<Output>) {
        if self.unauthenticated(conn) {
            return self.refuse(
                conn,
                "a PMI_PORT connection spoke PMI-2 before authenticating with initack; refused"
                    .to_string(),
                out,
            );
        }
        let mut frames = Vec::new();
        let fed = match self.conns.get_mut(&conn).and_then(|c| c.v2.as_mut()) {
            Some(v2) => v2.framer.feed(bytes, &mut frames),
            None => return,
        };
        for frame in frames {
            if !self.conns.contains_key(&conn) {
                return;
            }
            match frame {
                V2Frame::Message(q) => self.handle_v2(conn, q, out),
                V2Frame::Invalid { cmd, error } => {
                    let q = V2Message::new(cmd.as_deref().unwrap_or("error"));
                    if q.cmd == "abort" {
                        self.handle_v2(conn, q.with("msg", "garbled abort request"), out);
                    } else {
                        self.send_v2(
                            conn,
                            &V2Message::error_reply(&q, -1, &error.to_string()),
                            out,
                        );
                    }
                }
            }
        }
        if let (Err(e), true) = (fed, self.conns.contains_key(&conn)) {
            out.push(Output::Close {
                conn,
                reason: format!("not a PMI-2 stream: {e}"),
            });
        }
    }

    /// Queue a PMI-2 message for `conn` (an error answer if it cannot be
    /// encoded).
    fn send_v2(&self, conn: ConnId, msg: &V2Message, out: &mut Vec<Output>) {
        let bytes = msg.encode().or_else(|e| {
            let why = match e {
                Error::Unencodable { .. } => "value_holds_a_semicolon_pmi2_cannot_carry",
                _ => "reply_cannot_be_encoded",
            };
            let q = V2Message::new(msg.cmd.trim_end_matches("-response"))
                .with_opt("thrid", msg.get("thrid"));
            V2Message::error_reply(&q, -1, why).encode()
        });
        if let Ok(bytes) = bytes {
            out.push(Output::Send { conn, bytes });
        }
    }

    fn handle_v2(&mut self, conn: ConnId, q: V2Message, out: &mut Vec<Output>) {
        if let Err(e) = q.check_query() {
            return self.send_v2(conn, &V2Message::error_reply(&q, -1, &e.to_string()), out);
        }
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (ns_id, rank) = (c.ns, c.rank);
        let Some(ns) = self.namespaces.get(ns_id as usize) else {
            return self.send_v2(
                conn,
                &V2Message::error_reply(&q, -1, "unknown_namespace"),
                out,
            );
        };
        let ok = |q: &V2Message| {
            V2Message::new(&format!("{}-response", q.cmd))
                .with("rc", 0)
                .with_opt("thrid", q.get("thrid"))
        };
        match q.cmd.as_str() {
            "fullinit" => {
                let asked = match (q.number::<u32>("pmirank"), q.number::<u32>("pmiid")) {
                    (Ok(r), Ok(i)) => r.or(i),
                    (Err(e), _) | (_, Err(e)) => {
                        let reply = V2Message::error_reply(&q, -1, &e.to_string());
                        return self.send_v2(conn, &reply, out);
                    }
                };
                let rank = match (rank, asked) {
                    (Some(r), Some(a)) if r != a => {
                        let reply =
                            V2Message::error_reply(&q, -1, "pmirank_is_not_this_connection's");
                        return self.send_v2(conn, &reply, out);
                    }
                    (Some(r), _) => r,
                    (None, _) => {
                        let reply =
                            V2Message::error_reply(&q, -1, "rank_unknown_use_PMI_FD_or_initack");
                        return self.send_v2(conn, &reply, out);
                    }
                };
                let reply = ok(&q)
                    .with("pmi-version", 2)
                    .with("pmi-subversion", 0)
                    .with("rank", rank)
                    .with("size", ns.size)
                    .with("appnum", ns.appnum_of(Some(rank)))
                    .with("debugged", "FALSE")
                    .with("pmiverbose", "FALSE");
                self.send_v2(conn, &reply, out)
            }
            "job-getid" => {
                let reply = ok(&q).with("jobid", &ns.name);
                self.send_v2(conn, &reply, out)
            }
            "info-getjobattr" if q.get("key") == Some("universeSize") => {
                let reply = ok(&q).with("found", "TRUE").with("value", ns.universe_size);
                self.send_v2(conn, &reply, out)
            }
            "info-putnodeattr" => {
                let key = (ns_id, q.get("key").unwrap_or_default().to_string());
                self.node_attrs
                    .insert(key, q.get("value").unwrap_or_default().to_string());
                self.send_v2(conn, &ok(&q), out)
            }
            "info-getnodeattr" => {
                // One node per rivetrun: the namespace's attributes are the node's.
                // `wait=TRUE` for an attribute not there yet is answered found=FALSE.
                let key = (ns_id, q.get("key").unwrap_or_default().to_string());
                let reply = match self.node_attrs.get(&key) {
                    Some(v) => ok(&q).with("found", "TRUE").with("value", v),
                    None => ok(&q).with("found", "FALSE"),
                };
                self.send_v2(conn, &reply, out)
            }
            "abort" => {
                let exit_code = q.number::<i32>("exitcode").ok().flatten().unwrap_or(1);
                out.push(Output::Abort {
                    ns: ns_id,
                    rank,
                    exit_code,
                    message: q.get("msg").map(str::to_string),
                });
            }
            "spawn" => match crate::wire::v2_spawn::spawn_request(&q) {
                Ok(request) => {
                    if let Some(v2) = self.conns.get_mut(&conn).and_then(|c| c.v2.as_mut()) {
                        v2.pending.push_back(q);
                    }
                    self.handle(conn, Message::Spawn(request), out);
                }
                Err(e) => {
                    let reply = V2Message::error_reply(&q, -1, &e.to_string());
                    self.send_v2(conn, &reply, out)
                }
            },
            _ => {
                let Some(m) = as_pmi1(&q, &ns.name) else {
                    return self.send_v2(
                        conn,
                        &V2Message::error_reply(&q, -1, "unknown_command"),
                        out,
                    );
                };
                if let Some(v2) = self.conns.get_mut(&conn).and_then(|c| c.v2.as_mut()) {
                    v2.pending.push_back(q);
                }
                self.handle(conn, m, out);
            }
        }
    }

    /// Rewrite the PMI-1 answers in `out[start..]` bound for PMI-2
    /// connections into PMI-2 responses (see the module docs).
    pub(super) fn translate_v2(&mut self, start: usize, out: &mut [Output]) {
        for o in out.iter_mut().skip(start) {
            let Output::Send { conn, bytes } = o else {
                continue;
            };
            let Some(v2) = self.conns.get_mut(conn).and_then(|c| c.v2.as_mut()) else {
                continue;
            };
            // PMI-2 bytes (a length prefix) were written here already.
            if !bytes.starts_with(b"cmd=") {
                continue;
            }
            let text = String::from_utf8_lossy(bytes).into_owned();
            let mut rewritten = Vec::new();
            for line in text.lines() {
                let Ok(reply) = Message::parse(line) else {
                    continue;
                };
                // A response to init (the switch itself) stays PMI-1.
                if matches!(reply, Message::InitResponse { .. }) {
                    rewritten.extend_from_slice(line.as_bytes());
                    rewritten.push(b'\n');
                    continue;
                }
                let Some(query) = v2.pending.pop_front() else {
                    continue; // nothing asked: not for a PMI-2 client
                };
                let jobid = match reply {
                    Message::SpawnResult { .. } => v2.spawned_jobid.take(),
                    _ => None,
                };
                let answer = as_v2_reply(&query, &reply, jobid);
                match answer.encode() {
                    Ok(b) => rewritten.extend_from_slice(&b),
                    Err(_) => {
                        let e =
                            V2Message::error_reply(&query, -1, "value_cannot_be_carried_over_pmi2");
                        if let Ok(b) = e.encode() {
                            rewritten.extend_from_slice(&b);
                        }
                    }
                }
            }
            *bytes = rewritten;
        }
    }
}

/// The node attributes of a namespace, by key.
pub(super) type NodeAttrs = std::collections::HashMap<(NsId, String), String>;
