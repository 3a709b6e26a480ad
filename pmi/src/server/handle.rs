//! One function per command: what the server answers and which
//! [`Output`]s it raises.
//!
//! Failure `rc`s: 1 for a refused request (missing key, duplicate name,
//! reserved key, as Hydra answers), -1 for a request the server cannot
//! understand (bad line, unknown command, wrong protocol version).

use crate::error::Error;
use crate::server::barrier::Arrival;
use crate::server::groups::Join;
use crate::server::node::{is_world, list_is_local};
use crate::server::{caller_id, reply_to, ConnId, Forwarded, NameRequest, NsId, Output, Server};
use crate::wire::limits::Limits;
use crate::wire::{Frame, Message};

/// PMI version this server reports. Hydra 4.0.2 answers 1.1 (observed);
/// newer MPICH clients send `PMI_Barrier` as a 1.2 group barrier
/// (`group=WORLD:0`) and refuse servers below 1.2, so this server reports
/// 1.2 and implements group barriers (`barrier.rs`). MPICH 4.0.2 accepts 1.2
/// (verified).
pub const SERVER_VERSION: (i32, i32) = (1, 2);

/// The `msg=` for a line that did not parse. Short codes first, because
/// MPICH 4.0.2 shows only the first word of a message.
fn error_code(e: &Error) -> String {
    match e {
        Error::MissingCmd { .. } => "missing_cmd".to_string(),
        Error::UnknownCommand { .. } => "unknown_command".to_string(),
        Error::MissingField { field, .. } => format!("missing_field_{field}"),
        Error::BadNumber { field, .. } => format!("bad_number_{field}"),
        Error::TooLong { what, .. } => format!("{}_too_long", what.replace(' ', "_")),
        Error::LineTooLong { max, .. } => format!("line_too_long_max_{max}_bytes"),
        Error::Malformed { reason } => format!("malformed: {reason}"),
        other => format!("bad_request: {other}"),
    }
}

pub(super) fn fail(out: &mut Vec<Output>, conn: ConnId, query: &str, rc: i32, msg: &str) {
    reply_to(out, conn, &Message::error_reply(Some(query), rc, msg));
}

impl Server {
    pub(super) fn handle_frame(&mut self, conn: ConnId, frame: Frame, out: &mut Vec<Output>) {
        if !self.conns.contains_key(&conn) {
            return; // refused earlier in this same read
        }
        if self.unauthenticated(conn) && !matches!(frame, Frame::Message(Message::InitAck { .. })) {
            let what = match &frame {
                Frame::Message(m) => format!("cmd={}", m.cmd()),
                Frame::Invalid { .. } => "an unreadable line".to_string(),
            };
            return self.refuse(
                conn,
                format!(
                    "a PMI_PORT connection sent {what} before authenticating with initack; refused"
                ),
                out,
            );
        }
        match frame {
            Frame::Message(m) => self.handle(conn, m, out),
            Frame::Invalid { cmd, error } if cmd.as_deref() == Some("abort") => {
                // A garbled abort is still an abort: the rank is going down.
                self.handle(
                    conn,
                    Message::Abort {
                        exitcode: 1,
                        message: Some(format!("garbled abort request: {error}")),
                    },
                    out,
                );
            }
            Frame::Invalid { cmd, error } => reply_to(
                out,
                conn,
                &Message::error_reply(cmd.as_deref(), -1, error_code(&error)),
            ),
        }
    }

    pub(super) fn handle(&mut self, conn: ConnId, msg: Message, out: &mut Vec<Output>) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (ns_id, rank) = (c.ns, c.rank);
        let Some(ns) = self.namespaces.get(ns_id as usize) else {
            let query = if msg.is_query() {
                Some(msg.cmd())
            } else {
                None
            };
            reply_to(
                out,
                conn,
                &Message::error_reply(query, -1, "unknown_namespace"),
            );
            return;
        };
        if self.forwarded.is_some()
            && matches!(
                msg,
                Message::GroupConnect { .. }
                    | Message::GroupReady { .. }
                    | Message::GroupDisconnect { .. }
            )
        {
            let query = msg.cmd();
            match (rank, self.forwarded.as_mut()) {
                (Some(rank), Some(queue)) => queue.push(Forwarded {
                    conn,
                    ns: ns_id,
                    rank,
                    msg,
                }),
                _ => fail(
                    out,
                    conn,
                    query,
                    -1,
                    "initack_required_before_group_connect",
                ),
            }
            return;
        }
        let appnum = i32::try_from(ns.appnum_of(rank)).unwrap_or(i32::MAX);
        let universe_size = i32::try_from(ns.universe_size).unwrap_or(i32::MAX);
        let kvsname = ns.name.clone();
        use Message as M;
        match msg {
            M::Init { version: 2, .. } => {
                // PMI-2 (`v2.rs`): answered in PMI-1, then PMI-2 framing.
                let reply = M::InitResponse {
                    rc: 0,
                    version: 2,
                    subversion: 0,
                    msg: None,
                };
                reply_to(out, conn, &reply);
                self.switch_to_v2(conn);
            }
            M::Init { version, .. } => {
                let (v, s) = SERVER_VERSION;
                let reply = if version == v {
                    M::InitResponse {
                        rc: 0,
                        version: v,
                        subversion: s,
                        msg: None,
                    }
                } else {
                    M::InitResponse {
                        rc: -1,
                        version: v,
                        subversion: s,
                        msg: Some(
                            "unsupported_pmi_version_this_server_speaks_PMI-1_and_PMI-2".into(),
                        ),
                    }
                };
                reply_to(out, conn, &reply);
            }
            M::GetMaxes => {
                let l = Limits::DEFAULT;
                let reply = M::Maxes {
                    rc: 0,
                    kvsname_max: l.kvsname_max as u32,
                    keylen_max: l.keylen_max as u32,
                    vallen_max: l.vallen_max as u32,
                    msg: None,
                };
                reply_to(out, conn, &reply);
            }
            M::GetAppnum => {
                reply_to(
                    out,
                    conn,
                    &M::Appnum {
                        rc: 0,
                        appnum,
                        msg: None,
                    },
                );
            }
            M::GetMyKvsname => {
                reply_to(
                    out,
                    conn,
                    &M::MyKvsname {
                        rc: 0,
                        kvsname,
                        msg: None,
                    },
                );
            }
            M::GetUniverseSize => {
                reply_to(
                    out,
                    conn,
                    &M::UniverseSize {
                        rc: 0,
                        size: universe_size,
                        msg: None,
                    },
                );
            }
            M::Put {
                kvsname,
                key,
                value,
            } => self.put(conn, ns_id, &kvsname, &key, &value, out),
            M::Get { kvsname, key } => self.get(conn, ns_id, kvsname.as_deref(), &key, out),
            M::BarrierIn { group } => self.barrier_in(conn, ns_id, rank, group.as_deref(), out),
            M::Finalize => {
                reply_to(out, conn, &M::FinalizeAck { rc: 0, msg: None });
                if let Some(r) = rank {
                    if let Some(ns) = self.namespaces.get_mut(ns_id as usize) {
                        ns.mark_finalized(r);
                    }
                    out.push(Output::Finalized { ns: ns_id, rank: r });
                }
            }
            M::Abort { exitcode, message } => out.push(Output::Abort {
                ns: ns_id,
                rank,
                exit_code: exitcode,
                message,
            }),
            M::PublishName { .. } | M::UnpublishName { .. } | M::LookupName { .. } => {
                if let Ok(request) = NameRequest::from_message(msg) {
                    self.name_request(conn, ns_id, rank, request, out);
                }
            }
            M::Spawn(request) => {
                let Some(r) = rank else {
                    return fail(out, conn, "spawn", -1, "initack_required_before_spawn");
                };
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                if c.spawn_pending.is_some() {
                    return fail(out, conn, "spawn", -1, "spawn_already_pending");
                }
                if c.name_pending.is_some() {
                    return fail(out, conn, "spawn", -1, "name_request_pending");
                }
                c.spawn_pending = Some(request.total_procs());
                out.push(Output::Spawn {
                    conn,
                    ns: ns_id,
                    rank: r,
                    request,
                });
            }
            M::InitAck { pmiid, secret } => {
                self.initack(conn, ns_id, rank, pmiid, secret.as_deref(), out)
            }
            M::GroupConnect { .. } if ns.delegated.is_some() => fail(
                out,
                conn,
                "group_connect",
                1,
                "group_connect_is_not_supported_across_hosts_yet",
            ),
            M::GroupConnect {
                procs,
                id,
                flags,
                ctx,
                card,
            } => {
                let join = Join {
                    procs,
                    id,
                    flags,
                    ctx,
                    card,
                };
                self.group_connect(conn, ns_id, rank, join, out)
            }
            M::GroupReady { op } => self.group_ready(conn, ns_id, rank, op, out),
            M::GroupDisconnect { group } => self.group_disconnect(conn, ns_id, rank, &group, out),
            M::ResourceRegister(r) => self.resource_request(conn, ns_id, rank, true, r, out),
            M::ResourceRelease(r) => self.resource_request(conn, ns_id, rank, false, r, out),
            other => reply_to(
                out,
                conn,
                &M::Error {
                    rc: -1,
                    msg: Some(format!("unexpected_{}_from_a_client", other.cmd())),
                },
            ),
        }
    }

    /// Answer from this server's table, or hand the request to the launcher.
    fn name_request(
        &mut self,
        conn: ConnId,
        ns_id: NsId,
        rank: Option<u32>,
        request: NameRequest,
        out: &mut Vec<Output>,
    ) {
        if !self.forward_names {
            // The caller, as the table records publishers.
            let caller = rank.map(|r| caller_id(ns_id, r));
            let reply = self.names.answer_for(&request, caller.as_deref());
            return reply_to(out, conn, &reply);
        }
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.name_pending.is_some() || c.spawn_pending.is_some() {
            return fail(out, conn, request.query(), -1, "request_already_pending");
        }
        c.name_pending = Some(request.clone());
        out.push(Output::Name {
            conn,
            ns: ns_id,
            rank,
            request,
        });
    }

    fn put(
        &mut self,
        conn: ConnId,
        ns_id: NsId,
        kvsname: &str,
        key: &str,
        value: &str,
        out: &mut Vec<Output>,
    ) {
        let Some(ns) = self.namespaces.get_mut(ns_id as usize) else {
            return;
        };
        if !kvsname.is_empty() && kvsname != ns.name {
            return fail(out, conn, "put", 1, "put_allowed_only_into_own_kvs");
        }
        let reply = match ns.put(key, value) {
            Ok(()) => {
                if let Some(d) = ns.delegated.as_mut() {
                    d.puts.push((key.to_string(), value.to_string()));
                }
                Message::PutResult { rc: 0, msg: None }
            }
            Err(code) => Message::error_reply(Some("put"), 1, code),
        };
        reply_to(out, conn, &reply);
    }

    fn get(
        &mut self,
        conn: ConnId,
        ns_id: NsId,
        kvsname: Option<&str>,
        key: &str,
        out: &mut Vec<Output>,
    ) {
        let target = match kvsname.filter(|k| !k.is_empty()) {
            None => Some(ns_id),
            Some(name) => self.by_name.get(name).copied(),
        };
        let Some(ns) = target.and_then(|id| self.namespaces.get(id as usize)) else {
            return fail(out, conn, "get", 1, "unknown_kvsname");
        };
        let reply = match ns.get(key) {
            Some(v) => Message::GetResult {
                rc: 0,
                value: Some(v.to_string()),
                msg: None,
            },
            None => Message::error_reply(Some("get"), 1, "key_not_found"),
        };
        reply_to(out, conn, &reply);
    }

    fn barrier_in(
        &mut self,
        conn: ConnId,
        ns_id: NsId,
        rank: Option<u32>,
        group: Option<&str>,
        out: &mut Vec<Output>,
    ) {
        let Some(r) = rank else {
            return fail(
                out,
                conn,
                "barrier_in",
                -1,
                "initack_required_before_barrier",
            );
        };
        let Some(ns) = self.namespaces.get_mut(ns_id as usize) else {
            return;
        };
        let world = match &ns.delegated {
            Some(d) if !group.is_none_or(|g| list_is_local(g, d.node, &ns.node_of_rank)) => {
                return fail(
                    out,
                    conn,
                    "barrier_in",
                    1,
                    "barrier_groups_across_hosts_unsupported",
                )
            }
            Some(d) => d.local,
            None => ns.node_of_rank.len(),
        };
        match ns
            .barriers
            .arrive_counting(conn, r, group, &ns.node_of_rank, world)
        {
            Ok(Arrival::Waiting) => {}
            Ok(Arrival::Complete { waiters, tag }) if ns.delegated.is_some() && is_world(group) => {
                if let Some(d) = ns.delegated.as_mut() {
                    d.waiting.push_back((waiters, tag));
                    let puts = std::mem::take(&mut d.puts);
                    out.push(Output::Barrier { ns: ns_id, puts });
                }
            }
            Ok(Arrival::Complete { waiters, tag }) => {
                let reply = Message::BarrierOut {
                    rc: 0,
                    tag,
                    msg: None,
                };
                for w in waiters {
                    reply_to(out, w, &reply);
                }
            }
            Err(code) => fail(out, conn, "barrier_in", 1, code),
        }
    }

    fn initack(
        &mut self,
        conn: ConnId,
        ns_id: NsId,
        rank: Option<u32>,
        pmiid: i32,
        secret: Option<&str>,
        out: &mut Vec<Output>,
    ) {
        if let Some(gate) = self.port_gates.get_mut(&ns_id) {
            let admitted = match rank {
                Some(r) if gate.is_id_of(r, pmiid) => Ok(r),
                Some(_) => Err("pmiid_does_not_match_this_connection"),
                None => gate.admit(pmiid, secret),
            };
            match admitted {
                Ok(r) => return self.identified(conn, ns_id, r, out),
                Err(why) if rank.is_some() => return fail(out, conn, "initack", -1, why),
                Err(why) => {
                    fail(out, conn, "initack", -1, why);
                    return self.refuse(
                        conn,
                        format!("a PMI_PORT connection failed to authenticate ({why}); refused"),
                        out,
                    );
                }
            }
        }
        let Some(ns) = self.namespaces.get(ns_id as usize) else {
            return;
        };
        let id = match (rank, u32::try_from(pmiid)) {
            (Some(r), Ok(p)) if r == p => r,
            (Some(_), _) => {
                return fail(
                    out,
                    conn,
                    "initack",
                    -1,
                    "pmiid_does_not_match_this_connection",
                )
            }
            (None, Ok(p)) if p < ns.size => p,
            (None, _) => return fail(out, conn, "initack", -1, "pmiid_out_of_range"),
        };
        self.identified(conn, ns_id, id, out)
    }

    /// Connection `conn` is rank `id` of `ns_id`: say so, as Hydra does.
    fn identified(&mut self, conn: ConnId, ns_id: NsId, id: u32, out: &mut Vec<Output>) {
        let Some(ns) = self.namespaces.get_mut(ns_id as usize) else {
            return;
        };
        if id >= ns.size {
            return fail(out, conn, "initack", -1, "pmiid_out_of_range");
        }
        if ns
            .conn_of(id)
            .is_some_and(|h| h != conn && self.conns.contains_key(&h))
        {
            return fail(out, conn, "initack", -1, "pmiid_already_connected");
        }
        ns.set_conn(id, conn);
        let size = ns.size;
        if let Some(c) = self.conns.get_mut(&conn) {
            c.rank = Some(id);
        }
        // One write, as Hydra sends it: `cmd=initack` then three `cmd=set`.
        let mut bytes = Vec::new();
        let lines = [
            Message::InitAckResponse { rc: 0, msg: None },
            Message::Set {
                key: "size".into(),
                value: size.to_string(),
            },
            Message::Set {
                key: "rank".into(),
                value: id.to_string(),
            },
            Message::Set {
                key: "debug".into(),
                value: "0".into(),
            },
        ];
        for m in &lines {
            if m.encode_into(&mut bytes).is_err() {
                return fail(out, conn, "initack", -1, "reply_cannot_be_encoded");
            }
        }
        out.push(Output::Send { conn, bytes });
    }
}
