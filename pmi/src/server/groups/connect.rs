//! `group_connect`: matching the joins of one operation, failing it for
//! everyone (and the late joiners), and completing it into a group.

use super::*;

impl Server {
    /// `cmd=group_connect`.
    pub(in crate::server) fn group_connect(
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
    pub(super) fn fail_op(
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
    pub(super) fn drop_poison_if_done(&mut self, key: &OpKey) {
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
    pub(super) fn settle(&mut self, key: &OpKey, out: &mut Vec<Output>) {
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
    pub(super) fn complete(&mut self, key: &OpKey, out: &mut Vec<Output>) {
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
}
