//! Group connect across separately started jobs, a job's side (seed 004's
//! groups of several jobs).
//!
//! A job's server knows only its own namespaces. With
//! [`Server::forward_other_jobs`] (rivetrun sets it when it has a
//! `--nameserver`), a `group_connect` that names a namespace this server
//! does not know, or a cluster other than its own, goes to the launcher as
//! [`Output::GroupForward`]; the launcher relays it to the name server's
//! group hub (`hub.rs`), which matches it with the joins of the other jobs.
//! The hub's op numbers start at [`HUB_OP_BASE`] and its group ids at
//! [`HUB_GROUP_PREFIX`], so the `group_ready` and `group_disconnect` that
//! follow are routed by their value alone. What the hub sends back (answers
//! and unasked `group_event`s) reaches the rank through
//! [`Server::group_relayed`]. If the hub goes away,
//! [`Server::group_hub_lost`] answers every rank still waiting for it.

use crate::group::ProcName;
use crate::server::{reply_to, ConnId, NsId, Output, Server};
use crate::wire::Message;

/// The hub's first `group_ready` op number; a job's own stay below it.
pub const HUB_OP_BASE: u64 = 1 << 48;

/// What the hub's group ids start with (a job's own are `<namespace>_g<N>`,
/// and rivetrun's namespaces are `rivet_<pid>_<n>`).
pub const HUB_GROUP_PREFIX: &str = "jobs~g";

impl Server {
    /// Hand group connects naming other jobs to the launcher
    /// ([`Output::GroupForward`]) instead of refusing them.
    pub fn forward_other_jobs(&mut self, on: bool) {
        self.groups.forward = on;
    }

    /// How many processes namespace `ns` has (0 for an unknown id).
    pub fn namespace_size(&self, ns: NsId) -> u32 {
        self.namespaces.get(ns as usize).map_or(0, |n| n.size)
    }

    /// Some of `procs` live in a namespace or on a cluster this server does
    /// not serve.
    pub(super) fn names_other_jobs(&self, procs: &[ProcName]) -> bool {
        procs.iter().any(|p| {
            !self.by_name.contains_key(&p.nspace)
                || p.cluster
                    .as_ref()
                    .is_some_and(|c| Some(c) != self.cluster.as_ref())
        })
    }

    /// Send `msg` (query `query` of `me`, on `conn`) to the hub.
    pub(super) fn forward_group(
        &mut self,
        conn: ConnId,
        me: (NsId, u32),
        query: &'static str,
        msg: Message,
        out: &mut Vec<Output>,
    ) {
        if self.groups.hub_waiting.contains_key(&conn) {
            let refusal = Message::error_reply(Some(query), -1, "group_request_already_pending");
            return reply_to(out, conn, &refusal);
        }
        self.groups.hub_waiting.insert(conn, query);
        out.push(Output::GroupForward {
            ns: me.0,
            rank: me.1,
            message: msg,
        });
    }

    /// Lines the hub sent to rank `rank` of namespace `nspace`: answers to
    /// what was forwarded, and `group_event`s. They go to the rank's
    /// connection; a rank that is gone is skipped. `Err` names a line that
    /// is not the hub's to send (the launcher drops the hub's link).
    pub fn group_relayed(
        &mut self,
        nspace: &str,
        rank: u32,
        lines: &[Message],
        out: &mut Vec<Output>,
    ) -> Result<(), String> {
        let conn = self
            .namespace_id(nspace)
            .and_then(|ns| self.namespaces.get(ns as usize))
            .and_then(|n| n.conn_of(rank))
            .filter(|c| self.conns.contains_key(c));
        let mut bytes = Vec::new();
        for m in lines {
            let answers = match m {
                Message::GroupConnectResult { .. } => Some("group_connect"),
                Message::GroupReadyResult { .. } => Some("group_ready"),
                Message::GroupDisconnectResult { .. } => Some("group_disconnect"),
                Message::GroupMember { .. } | Message::GroupEvent(_) => None,
                other => {
                    return Err(format!(
                        "cmd={} for {nspace}:{rank} is not a group answer",
                        other.cmd()
                    ))
                }
            };
            if let (Some(q), Some(c)) = (answers, conn) {
                if self.groups.hub_waiting.get(&c) == Some(&q) {
                    self.groups.hub_waiting.remove(&c);
                }
            }
            m.encode_into(&mut bytes)
                .map_err(|e| format!("cmd={} for {nspace}:{rank}: {e}", m.cmd()))?;
        }
        if let Some(c) = conn {
            out.push(Output::Send { conn: c, bytes });
        }
        Ok(())
    }

    /// The hub cannot be reached any more: every rank waiting for it gets
    /// a refusal saying `why`.
    pub fn group_hub_lost(&mut self, why: &str, out: &mut Vec<Output>) {
        let mut waiting: Vec<(ConnId, &'static str)> = self.groups.hub_waiting.drain().collect();
        waiting.sort_unstable();
        for (conn, query) in waiting {
            let msg = format!("the name server's group service is gone: {why}");
            let refusal =
                crate::server::shorten_to_fit(|m| Message::error_reply(Some(query), 1, m), msg);
            reply_to(out, conn, &refusal);
        }
    }
}
