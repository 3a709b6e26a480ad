//! After a connect: the `group_ready` barrier over the members, and
//! `group_disconnect` with the events it sends the rest of the group.

use super::*;

impl Server {
    /// `cmd=group_ready op=N`.
    pub(in crate::server) fn group_ready(
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
    pub(super) fn finish_ready_if_done(&mut self, op: u64, out: &mut Vec<Output>) {
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
    pub(super) fn ready_member_ended(&mut self, op: u64, p: Proc, out: &mut Vec<Output>) {
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
    pub(in crate::server) fn group_disconnect(
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
    pub(super) fn tell_members(
        &self,
        group: &str,
        kind: GroupEventKind,
        about: Proc,
        out: &mut Vec<Output>,
    ) {
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
    pub(super) fn group_member_ended(&mut self, group: &str, p: Proc, out: &mut Vec<Output>) {
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

    pub(super) fn drop_group_if_empty(&mut self, group: &str) {
        if self
            .groups
            .records
            .get(group)
            .is_some_and(|r| r.connected.is_empty())
        {
            self.groups.records.remove(group);
        }
    }
}
