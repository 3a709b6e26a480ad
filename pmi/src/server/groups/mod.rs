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
//!
//! This file holds the state and the naming of processes; `connect.rs`
//! matches and completes connects, `ready.rs` runs the ready phase and
//! disconnects, `ended.rs` settles what a process's end means.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use crate::group::{GroupEvent, GroupEventKind, GroupFlags, ProcName};
use crate::server::group_forward::{HUB_GROUP_PREFIX, HUB_OP_BASE};
use crate::server::{reply_to, shorten_to_fit, ConnId, NsId, Output, Server};
use crate::wire::Message;

mod connect;
mod ended;
mod ready;

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
}
