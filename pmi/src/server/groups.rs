//! Group connect (Rivet's extension; PMIx RFC0003's connect/disconnect):
//! `group_connect`, `group_ready`, `group_disconnect`, and what a process's
//! end ([`Server::process_ended`]) means for them.
//!
//! * An operation is keyed by its connect id (if any) and the set of
//!   expected processes (`ns:*` expanded, order ignored). It completes when
//!   every expected process joined, or, with `optional`, joined or ended.
//!   Without `optional` an expected process that ended fails it for
//!   everyone. Flags must agree; a mismatch fails it for everyone, and the
//!   processes that had not joined yet get the same failure when they do
//!   (their call belongs to the failed operation), so nobody hangs.
//! * On completion members are the joined processes sorted by (namespace
//!   creation order, rank); the new rank is the index, `ctx` the largest
//!   proposal, `op` a fresh number for the `group_ready` phase. Unless
//!   `xchg_only`, a group id `<first namespace>_g<N>` is made and a record
//!   kept until every member disconnected or ended.
//! * `group_ready op=N` is a barrier over the members of op N. A member
//!   that ends first is skipped with `optional`, else fails the phase.
//! * A member that ends while connected: `event=terminated` to the others,
//!   and without `early_term` [`Output::GroupMemberLost`] for the launcher.
//!
//! Replies are collected per operation; a connection that went away is
//! skipped, as for barriers.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use crate::group::{GroupEvent, GroupEventKind, GroupFlags, ProcName};
use crate::server::group_forward::{HUB_GROUP_PREFIX, HUB_OP_BASE};
use crate::server::{reply_to, shorten_to_fit, ConnId, NsId, Output, Server};
use crate::wire::Message;

/// Most group connects waiting at once (bounds memory).
pub const MAX_PENDING_GROUP_OPS: usize = 4096;

/// Most groups plus unfinished `group_ready` phases kept at once.
pub const MAX_GROUP_STATE: usize = 65536;

/// A process: (namespace, rank).
type Proc = (NsId, u32);

/// What identifies one connect operation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct OpKey {
    id: Option<String>,
    /// Sorted, without duplicates.
    procs: Vec<Proc>,
}

impl OpKey {
    fn expects(&self, p: Proc) -> bool {
        self.procs.binary_search(&p).is_ok()
    }
}

/// A process that joined a pending connect.
#[derive(Debug)]
struct Joiner {
    /// Where its answer goes; `None` once the connection went away.
    conn: Option<ConnId>,
    ctx: u32,
    card: String,
}

#[derive(Debug)]
struct PendingOp {
    flags: GroupFlags,
    joined: BTreeMap<Proc, Joiner>,
}

/// A connect that failed while some expected processes had not joined:
/// their join gets the same failure.
#[derive(Debug)]
struct Poisoned {
    reason: String,
    told: HashSet<Proc>,
}

/// The `group_ready` phase of a completed connect.
#[derive(Debug)]
struct ReadyPhase {
    members: BTreeSet<Proc>,
    optional: bool,
    /// Members that have neither sent `group_ready` nor ended.
    pending: BTreeSet<Proc>,
    /// Members that sent it, waiting for the answer.
    arrived: Vec<(Proc, Option<ConnId>)>,
    /// Set once a member ended without sending it (not `optional`).
    failed: Option<String>,
}

/// A group made by a connect (not `xchg_only`).
#[derive(Debug)]
struct GroupRecord {
    flags: GroupFlags,
    /// Members still connected (not disconnected, not ended).
    connected: BTreeSet<Proc>,
}

/// The group-connect state of one server.
#[derive(Debug, Default)]
pub(super) struct Groups {
    ops: HashMap<OpKey, PendingOp>,
    poisoned: HashMap<OpKey, Poisoned>,
    ready: HashMap<u64, ReadyPhase>,
    records: BTreeMap<String, GroupRecord>,
    /// Every process reported by `process_ended`.
    ended: HashSet<Proc>,
    /// Namespaces reported by `namespace_ended`: all their processes ended.
    ended_namespaces: HashSet<NsId>,
    /// Last op number and group number handed out.
    last_op: u64,
    last_group: u64,
    /// Set on the name server's group hub (`hub.rs`): op numbers from
    /// [`HUB_OP_BASE`], group ids `HUB_GROUP_PREFIX<N>`, namespaces of
    /// several clusters (`ns_cluster`).
    pub(super) hub: bool,
    /// The cluster of each namespace a job registered with the hub.
    pub(super) ns_cluster: HashMap<NsId, String>,
    /// Set by [`Server::forward_other_jobs`]: requests naming other jobs go to
    /// the launcher (`group_forward.rs`).
    pub(super) forward: bool,
    /// Connections waiting for the hub's answer, and the query they sent.
    pub(super) hub_waiting: HashMap<ConnId, &'static str>,
}

impl Groups {
    /// Whether `p` ended, alone or with its whole namespace.
    fn has_ended(&self, p: &Proc) -> bool {
        self.ended.contains(p) || self.ended_namespaces.contains(&p.0)
    }

    /// Every namespace whose processes some operation, phase or group
    /// still names.
    pub(super) fn namespaces_named(&self) -> HashSet<NsId> {
        let mut named = HashSet::new();
        for key in self.ops.keys().chain(self.poisoned.keys()) {
            named.extend(key.procs.iter().map(|p| p.0));
        }
        for phase in self.ready.values() {
            named.extend(phase.members.iter().map(|p| p.0));
        }
        for record in self.records.values() {
            named.extend(record.connected.iter().map(|p| p.0));
        }
        named
    }

    /// Namespace `ns` is retired (nothing names it): drop what is kept
    /// about its processes, so that its id can be reused.
    pub(super) fn forget_namespace(&mut self, ns: NsId) {
        self.ended_namespaces.remove(&ns);
        self.ended.retain(|p| p.0 != ns);
        self.ns_cluster.remove(&ns);
    }

    /// A connection went away: stop answering it (its process stays counted).
    pub fn forget_conn(&mut self, conn: ConnId) {
        self.hub_waiting.remove(&conn);
        for op in self.ops.values_mut() {
            for j in op.joined.values_mut() {
                if j.conn == Some(conn) {
                    j.conn = None;
                }
            }
        }
        for phase in self.ready.values_mut() {
            for (_, c) in phase.arrived.iter_mut() {
                if *c == Some(conn) {
                    *c = None;
                }
            }
        }
    }
}

/// One `group_connect` request, as parsed.
pub(super) struct Join {
    pub procs: Vec<ProcName>,
    pub id: Option<String>,
    pub flags: GroupFlags,
    pub ctx: u32,
    pub card: String,
}

/// The `rc=1` answer to `query` carrying `msg`, shortened to fit one line.
fn refusal(query: &str, msg: String) -> Message {
    shorten_to_fit(|m| Message::error_reply(Some(query), 1, m), msg)
}

fn refuse(out: &mut Vec<Output>, conn: Option<ConnId>, query: &str, msg: String) {
    if let Some(c) = conn {
        reply_to(out, c, &refusal(query, msg));
    }
}

fn flag_text(flags: GroupFlags) -> String {
    if flags.is_empty() {
        "no flags".to_string()
    } else {
        flags.to_string()
    }
}

impl Server {
    /// Set the cluster id of this process manager: `group_connect` accepts
    /// process names qualified with it (and unqualified ones); names of any
    /// other cluster are refused.
    pub fn set_cluster(&mut self, name: &str) -> crate::Result<()> {
        crate::group::check_cluster_name(name)?;
        self.cluster = Some(name.to_string());
        Ok(())
    }

    /// The cluster id set with [`Server::set_cluster`].
    pub fn cluster(&self) -> Option<&str> {
        self.cluster.as_deref()
    }

    /// `ns:rank` for messages.
    fn proc_text(&self, p: Proc) -> String {
        format!("{}:{}", self.namespace_name(p.0), p.1)
    }

    /// A short description of a process set: whole namespaces as `ns:*`.
    fn set_text(&self, procs: &[Proc]) -> String {
        let mut parts = Vec::new();
        let mut i = 0;
        while i < procs.len() {
            let ns = procs[i].0;
            let n = procs[i..].iter().take_while(|p| p.0 == ns).count();
            let size = self.namespaces.get(ns as usize).map_or(0, |n| n.size);
            if n as u64 == u64::from(size) {
                parts.push(format!("{}:*", self.namespace_name(ns)));
            } else {
                parts.extend(procs[i..i + n].iter().map(|&p| self.proc_text(p)));
            }
            i += n;
        }
        let text = parts.join(",");
        if text.len() > 200 {
            let cut = (0..=200).rev().find(|&c| text.is_char_boundary(c));
            format!("{}...", &text[..cut.unwrap_or(0)])
        } else {
            text
        }
    }

    fn op_label(&self, key: &OpKey) -> String {
        match &key.id {
            Some(id) => format!("group connect {id}"),
            None => format!("group connect of {}", self.set_text(&key.procs)),
        }
    }

    /// Expand and check the names of a request; `Err` is the refusal.
    fn expand(&self, procs: &[ProcName]) -> Result<Vec<Proc>, String> {
        let mut set = BTreeSet::new();
        for p in procs {
            let known = self.by_name.get(&p.nspace).copied();
            if let Some(c) = &p.cluster {
                // The hub knows each job's cluster; a job's server its own.
                let theirs = known
                    .and_then(|ns| self.groups.ns_cluster.get(&ns))
                    .or(self.cluster.as_ref());
                if theirs.map(String::as_str) != Some(c.as_str()) {
                    let ours = match (&self.cluster, self.groups.hub) {
                        (_, true) => format!(
                            "knows namespace {} {}",
                            p.nspace,
                            match theirs {
                                Some(t) => format!("on cluster {t}"),
                                None => "on no cluster".to_string(),
                            }
                        ),
                        (Some(a), false) => format!("serves cluster {a} only"),
                        (None, false) => "has no cluster id".to_string(),
                    };
                    return Err(format!(
                        "procs of cluster {c}: this process manager {ours}; give rivetrun \
                         --nameserver to connect with other jobs"
                    ));
                }
            }
            let Some(ns) = known else {
                return Err(format!("unknown namespace {}", p.nspace));
            };
            let size = self.namespaces.get(ns as usize).map_or(0, |n| n.size);
            match p.rank {
                Some(r) if r < size => {
                    set.insert((ns, r));
                }
                Some(r) => {
                    return Err(format!(
                        "{}:{r} does not exist: namespace {} has {size} processes",
                        p.nspace, p.nspace
                    ))
                }
                None => set.extend((0..size).map(|r| (ns, r))),
            }
        }
        Ok(set.into_iter().collect())
    }

    /// `cmd=group_connect`.
    pub(super) fn group_connect(
        &mut self,
        conn: ConnId,
        ns_id: NsId,
        rank: Option<u32>,
        join: Join,
        out: &mut Vec<Output>,
    ) {
        const Q: &str = "group_connect";
        let Some(r) = rank else {
            return reply_to(
                out,
                conn,
                &Message::error_reply(Some(Q), -1, "initack_required_before_group_connect"),
            );
        };
        let me = (ns_id, r);
        if self.groups.forward && self.names_other_jobs(&join.procs) {
            let msg = Message::GroupConnect {
                procs: join.procs,
                id: join.id,
                flags: join.flags,
                ctx: join.ctx,
                card: join.card,
            };
            return self.forward_group(conn, me, Q, msg, out);
        }
        let procs = match self.expand(&join.procs) {
            Ok(p) => p,
            Err(msg) => return refuse(out, Some(conn), Q, msg),
        };
        if procs.binary_search(&me).is_err() {
            let msg = format!(
                "{} is not among the procs of its own group connect ({}); a process \
                 connects only to groups it is part of",
                self.proc_text(me),
                self.set_text(&procs)
            );
            return refuse(out, Some(conn), Q, msg);
        }
        // The member line must fit, or the connect could not be answered.
        let pg_size = self.namespaces.get(ns_id as usize).map_or(0, |n| n.size);
        let member = Message::GroupMember {
            proc: ProcName::new(self.namespace_name(ns_id), r),
            pg_size,
            card: join.card.clone(),
        };
        if let Err(e) = member.encode() {
            let msg = format!(
                "the business card ({} bytes) cannot be sent back in a group_member line: {e}",
                join.card.len()
            );
            return refuse(out, Some(conn), Q, msg);
        }
        let key = OpKey { id: join.id, procs };
        if let Some(p) = self.groups.poisoned.get_mut(&key) {
            if p.told.insert(me) {
                let reason = p.reason.clone();
                self.drop_poison_if_done(&key);
                return refuse(out, Some(conn), Q, reason);
            }
        }
        if !self.groups.ops.contains_key(&key) && self.groups.ops.len() >= MAX_PENDING_GROUP_OPS {
            let msg = format!(
                "too many group connects pending at once ({MAX_PENDING_GROUP_OPS}); try again later"
            );
            return refuse(out, Some(conn), Q, msg);
        }
        let (already, mismatch) = match self.groups.ops.get(&key) {
            None => (false, None),
            Some(op) => {
                let first = op.joined.keys().next().copied().unwrap_or(me);
                let mismatch = (op.flags != join.flags).then_some((first, op.flags));
                (op.joined.contains_key(&me), mismatch)
            }
        };
        if already {
            let msg = format!(
                "{} already joined this {}",
                self.proc_text(me),
                self.op_label(&key)
            );
            return refuse(out, Some(conn), Q, msg);
        }
        if let Some((first, theirs)) = mismatch {
            let reason = format!(
                "the participants of {} passed different flags ({} passed {}, {} passed {}); \
                 every participant must pass the same flags",
                self.op_label(&key),
                self.proc_text(first),
                flag_text(theirs),
                self.proc_text(me),
                flag_text(join.flags)
            );
            return self.fail_op(&key, Some((me, conn)), reason, out);
        }
        let op = self.groups.ops.entry(key.clone()).or_insert(PendingOp {
            flags: join.flags,
            joined: BTreeMap::new(),
        });
        op.joined.insert(
            me,
            Joiner {
                conn: Some(conn),
                ctx: join.ctx,
                card: join.card,
            },
        );
        self.settle(&key, out);
    }

    /// Fail a pending op for everyone who joined (and `extra`, the caller
    /// that caused it); the expected processes still to come get the same
    /// answer when they join.
    fn fail_op(
        &mut self,
        key: &OpKey,
        extra: Option<(Proc, ConnId)>,
        reason: String,
        out: &mut Vec<Output>,
    ) {
        let Some(op) = self.groups.ops.remove(key) else {
            return;
        };
        let reply = refusal("group_connect", reason.clone());
        let mut told = HashSet::new();
        for (p, j) in op.joined {
            told.insert(p);
            if let Some(c) = j.conn {
                reply_to(out, c, &reply);
            }
        }
        if let Some((p, c)) = extra {
            told.insert(p);
            reply_to(out, c, &reply);
        }
        self.groups
            .poisoned
            .insert(key.clone(), Poisoned { reason, told });
        self.drop_poison_if_done(key);
    }

    /// Forget a failed op once every expected process was told or ended.
    fn drop_poison_if_done(&mut self, key: &OpKey) {
        let groups = &self.groups;
        let done = groups.poisoned.get(key).is_none_or(|p| {
            key.procs
                .iter()
                .all(|q| p.told.contains(q) || groups.has_ended(q))
        });
        if done {
            self.groups.poisoned.remove(key);
        }
    }

    /// Fail or complete a pending op if it can be decided now.
    fn settle(&mut self, key: &OpKey, out: &mut Vec<Output>) {
        let Some(op) = self.groups.ops.get(key) else {
            return;
        };
        let groups = &self.groups;
        let missing_ended = key
            .procs
            .iter()
            .copied()
            .find(|p| !op.joined.contains_key(p) && groups.has_ended(p));
        if !op.flags.optional {
            if let Some(p) = missing_ended {
                let reason = format!(
                    "{} ended before joining {}; pass optional to go on without it",
                    self.proc_text(p),
                    self.op_label(key)
                );
                return self.fail_op(key, None, reason, out);
            }
        }
        let optional = op.flags.optional;
        let complete = key
            .procs
            .iter()
            .all(|p| op.joined.contains_key(p) || (optional && groups.has_ended(p)));
        if complete {
            self.complete(key, out);
        }
    }

    /// Answer every participant of a complete op and keep what follows it.
    fn complete(&mut self, key: &OpKey, out: &mut Vec<Output>) {
        if self.groups.records.len() + self.groups.ready.len() >= MAX_GROUP_STATE {
            let reason = format!(
                "too many groups and unfinished group_ready phases ({MAX_GROUP_STATE}); \
                 disconnect groups that are no longer needed"
            );
            return self.fail_op(key, None, reason, out);
        }
        let Some(op) = self.groups.ops.remove(key) else {
            return;
        };
        let flags = op.flags;
        let members: Vec<Proc> = op.joined.keys().copied().collect();
        let ctx = op.joined.values().map(|j| j.ctx).max().unwrap_or(0);
        self.groups.last_op += 1;
        let op_number = self.groups.last_op + if self.groups.hub { HUB_OP_BASE } else { 0 };
        let group = if flags.xchg_only {
            None
        } else {
            self.groups.last_group += 1;
            let n = self.groups.last_group;
            Some(if self.groups.hub {
                format!("{HUB_GROUP_PREFIX}{n}")
            } else {
                format!("{}_g{n}", self.namespace_name(0))
            })
        };
        // The member lines, the same for everyone, made once.
        let mut lines = Vec::new();
        for (&(ns, r), j) in &op.joined {
            let member = Message::GroupMember {
                proc: ProcName::new(self.namespace_name(ns), r),
                pg_size: self.namespaces.get(ns as usize).map_or(0, |n| n.size),
                card: j.card.clone(),
            };
            // Checked at join time; a failure here would desynchronise
            // every client, so fail the op instead.
            if member.encode_into(&mut lines).is_err() {
                let reason = format!(
                    "the card of {} cannot be sent in a group_member line",
                    self.proc_text((ns, r))
                );
                self.groups.ops.insert(key.clone(), op);
                return self.fail_op(key, None, reason, out);
            }
        }
        let size = members.len() as u32;
        let mut conns = Vec::new();
        for (index, j) in op.joined.values().enumerate() {
            let Some(c) = j.conn else { continue };
            let result = Message::GroupConnectResult {
                rc: 0,
                op: op_number,
                ctx,
                size,
                group: group.clone(),
                rank: group.as_ref().map(|_| index as u32),
                msg: None,
            };
            reply_to(out, c, &result);
            conns.push(c);
        }
        if !conns.is_empty() {
            out.push(Output::SendAll {
                conns,
                bytes: Arc::from(lines),
            });
        }
        self.groups.ready.insert(
            op_number,
            ReadyPhase {
                members: members.iter().copied().collect(),
                optional: flags.optional,
                pending: members.iter().copied().collect(),
                arrived: Vec::new(),
                failed: None,
            },
        );
        if let Some(g) = &group {
            self.groups.records.insert(
                g.clone(),
                GroupRecord {
                    flags,
                    connected: members.iter().copied().collect(),
                },
            );
        }
        // Members that ended after joining are already gone from the group.
        let gone: Vec<Proc> = members
            .iter()
            .copied()
            .filter(|p| self.groups.has_ended(p))
            .collect();
        for p in gone {
            self.ready_member_ended(op_number, p, out);
            if let Some(g) = &group {
                self.group_member_ended(g, p, out);
            }
        }
    }

    /// `cmd=group_ready op=N`.
    pub(super) fn group_ready(
        &mut self,
        conn: ConnId,
        ns_id: NsId,
        rank: Option<u32>,
        op: u64,
        out: &mut Vec<Output>,
    ) {
        const Q: &str = "group_ready";
        let Some(r) = rank else {
            return reply_to(
                out,
                conn,
                &Message::error_reply(Some(Q), -1, "initack_required_before_group_ready"),
            );
        };
        let me = (ns_id, r);
        if self.groups.forward && op >= HUB_OP_BASE {
            return self.forward_group(conn, me, Q, Message::GroupReady { op }, out);
        }
        let me_text = self.proc_text(me);
        let Some(phase) = self.groups.ready.get_mut(&op) else {
            let msg = format!(
                "unknown group_ready op {op}: no group connect with that number is waiting \
                 for group_ready (never made, or already finished)"
            );
            return refuse(out, Some(conn), Q, msg);
        };
        if !phase.members.contains(&me) {
            let msg = format!("{me_text} is not a member of group connect op {op}");
            return refuse(out, Some(conn), Q, msg);
        }
        if !phase.pending.remove(&me) {
            let msg = format!("{me_text} sent group_ready for op {op} twice");
            return refuse(out, Some(conn), Q, msg);
        }
        if let Some(reason) = phase.failed.clone() {
            refuse(out, Some(conn), Q, reason);
        } else {
            phase.arrived.push((me, Some(conn)));
        }
        self.finish_ready_if_done(op, out);
    }

    /// Answer a phase once nobody is pending, and forget it.
    fn finish_ready_if_done(&mut self, op: u64, out: &mut Vec<Output>) {
        let Some(phase) = self.groups.ready.get(&op) else {
            return;
        };
        if !phase.pending.is_empty() {
            return;
        }
        if let Some(phase) = self.groups.ready.remove(&op) {
            let ok = Message::GroupReadyResult { rc: 0, msg: None };
            for (_, c) in phase.arrived {
                if let Some(c) = c {
                    reply_to(out, c, &ok);
                }
            }
        }
    }

    /// A member of phase `op` ended.
    fn ready_member_ended(&mut self, op: u64, p: Proc, out: &mut Vec<Output>) {
        let text = self.proc_text(p);
        let Some(phase) = self.groups.ready.get_mut(&op) else {
            return;
        };
        if !phase.pending.remove(&p) {
            return; // it had sent group_ready: still counted
        }
        if !phase.optional && phase.failed.is_none() {
            let reason =
                format!("{text} ended before sending group_ready for group connect op {op}");
            for (_, c) in phase.arrived.drain(..) {
                refuse(out, c, "group_ready", reason.clone());
            }
            phase.failed = Some(reason);
        }
        self.finish_ready_if_done(op, out);
    }

    /// `cmd=group_disconnect group=G`: not collective; answered at once.
    pub(super) fn group_disconnect(
        &mut self,
        conn: ConnId,
        ns_id: NsId,
        rank: Option<u32>,
        group: &str,
        out: &mut Vec<Output>,
    ) {
        const Q: &str = "group_disconnect";
        let Some(r) = rank else {
            return reply_to(
                out,
                conn,
                &Message::error_reply(Some(Q), -1, "initack_required_before_group_disconnect"),
            );
        };
        let me = (ns_id, r);
        if self.groups.forward && group.starts_with(HUB_GROUP_PREFIX) {
            let msg = Message::GroupDisconnect {
                group: group.to_string(),
            };
            return self.forward_group(conn, me, Q, msg, out);
        }
        let me_text = self.proc_text(me);
        let Some(record) = self.groups.records.get_mut(group) else {
            let msg = format!("unknown group {group} (never made, or every member left it)");
            return refuse(out, Some(conn), Q, msg);
        };
        if !record.connected.remove(&me) {
            let msg = format!("{me_text} is not connected to group {group}");
            return refuse(out, Some(conn), Q, msg);
        }
        reply_to(
            out,
            conn,
            &Message::GroupDisconnectResult { rc: 0, msg: None },
        );
        if record.flags.notify_each {
            self.tell_members(group, GroupEventKind::Disconnected, me, out);
        }
        self.drop_group_if_empty(group);
    }

    /// Send `event` about `about` to every member of `group` still connected.
    fn tell_members(&self, group: &str, kind: GroupEventKind, about: Proc, out: &mut Vec<Output>) {
        let Some(record) = self.groups.records.get(group) else {
            return;
        };
        let event = Message::GroupEvent(GroupEvent {
            group: group.to_string(),
            kind,
            proc: ProcName::new(self.namespace_name(about.0), about.1),
        });
        for &(ns, r) in &record.connected {
            let conn = self
                .namespaces
                .get(ns as usize)
                .and_then(|n| n.conn_of(r))
                .filter(|c| self.conns.contains_key(c));
            if let Some(c) = conn {
                reply_to(out, c, &event);
            }
        }
    }

    /// A member of `group` ended: tell the others; without `early_term`
    /// the launcher hears of it.
    fn group_member_ended(&mut self, group: &str, p: Proc, out: &mut Vec<Output>) {
        let Some(record) = self.groups.records.get_mut(group) else {
            return;
        };
        if !record.connected.remove(&p) {
            return;
        }
        let early_term = record.flags.early_term;
        self.tell_members(group, GroupEventKind::Terminated, p, out);
        if !early_term {
            out.push(Output::GroupMemberLost {
                ns: p.0,
                rank: p.1,
                group: group.to_string(),
            });
        }
        self.drop_group_if_empty(group);
    }

    fn drop_group_if_empty(&mut self, group: &str) {
        if self
            .groups
            .records
            .get(group)
            .is_some_and(|r| r.connected.is_empty())
        {
            self.groups.records.remove(group);
        }
    }

    /// The launcher reaped rank `rank` of `ns`. Pending connects that
    /// expected it fail (or, with `optional`, go on without it), `group_ready`
    /// phases stop waiting for it (or fail), and the groups it was still
    /// connected to get `event=terminated`; groups made without
    /// `early_term` also yield [`Output::GroupMemberLost`]. Unknown
    /// processes and repeated reports are ignored.
    pub fn process_ended(&mut self, ns: NsId, rank: u32, out: &mut Vec<Output>) {
        if self
            .namespaces
            .get(ns as usize)
            .is_none_or(|n| rank >= n.size)
        {
            return;
        }
        let p = (ns, rank);
        if self.groups.has_ended(&p) {
            return;
        }
        self.groups.ended.insert(p);
        self.settle_ended(p, out);
    }

    /// Every process of namespace `ns` ended at once (its job's link to the
    /// name server's hub closed): what [`Server::process_ended`] does for
    /// each, in time proportional to the group state that names them rather
    /// than to the namespace's size (up to 2^20 processes).
    pub fn namespace_ended(&mut self, ns: NsId, out: &mut Vec<Output>) {
        if self.namespaces.get(ns as usize).is_none() || !self.groups.ended_namespaces.insert(ns) {
            return;
        }
        let g = &self.groups;
        let mine = |p: &&Proc| p.0 == ns && !g.ended.contains(p);
        let mut named: BTreeSet<Proc> = BTreeSet::new();
        for key in g.ops.keys().chain(g.poisoned.keys()) {
            named.extend(key.procs.iter().filter(mine));
        }
        for phase in g.ready.values() {
            named.extend(phase.pending.iter().filter(mine));
        }
        for record in g.records.values() {
            named.extend(record.connected.iter().filter(mine));
        }
        for p in named {
            self.settle_ended(p, out);
        }
        // The namespace's mark covers its processes' own ones.
        self.groups.ended.retain(|p| p.0 != ns);
    }

    /// The consequences of `p`'s end, once it is recorded as ended.
    fn settle_ended(&mut self, p: Proc, out: &mut Vec<Output>) {
        let mut keys: Vec<OpKey> = self
            .groups
            .ops
            .iter()
            .filter(|(k, op)| k.expects(p) && !op.joined.contains_key(&p))
            .map(|(k, _)| k.clone())
            .collect();
        // Deterministic order of answers.
        keys.sort_by(|a, b| (&a.procs, &a.id).cmp(&(&b.procs, &b.id)));
        for key in keys {
            self.settle(&key, out);
        }
        let poisoned: Vec<OpKey> = self
            .groups
            .poisoned
            .keys()
            .filter(|k| k.expects(p))
            .cloned()
            .collect();
        for key in poisoned {
            self.drop_poison_if_done(&key);
        }
        let mut phases: Vec<u64> = self
            .groups
            .ready
            .iter()
            .filter(|(_, ph)| ph.pending.contains(&p))
            .map(|(&op, _)| op)
            .collect();
        phases.sort_unstable();
        for op in phases {
            self.ready_member_ended(op, p, out);
        }
        let groups: Vec<String> = self
            .groups
            .records
            .iter()
            .filter(|(_, r)| r.connected.contains(&p))
            .map(|(g, _)| g.clone())
            .collect();
        for g in groups {
            self.group_member_ended(&g, p, out);
        }
    }

    /// Every namespace that group state still names (see
    /// [`Server::retire_namespace`]).
    pub fn namespaces_in_group_state(&self) -> HashSet<NsId> {
        self.groups.namespaces_named()
    }

    /// Groups currently kept (for tests and diagnostics).
    pub fn group_count(&self) -> usize {
        self.groups.records.len()
    }
}
