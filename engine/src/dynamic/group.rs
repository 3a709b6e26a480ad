//! Group connect and disconnect (seed 004, PMIx RFC0003): processes of any
//! process groups join one new group, with an id (a namespace string) and a
//! new rank each, assigned by the process manager.
//!
//! 1. Every participant sends the process manager the set of processes
//!    (`ns:rank`, or `ns:*` for a whole process group), the operation's
//!    `connect_id`, its flags, a context-id proposal and its business card.
//! 2. Once every expected process has joined (or, with `optional`, has
//!    joined or ended), each gets the members in new-rank order with their
//!    cards, the group id and the largest context proposal.
//! 3. Every member registers the foreign process groups (as connect/accept
//!    does) and tells the process manager it is ready; the manager answers
//!    when all are. Only then may traffic flow: no member can hear from a
//!    process group it has not registered yet.
//! 4. The group's communicator is an intracommunicator over those VCs.
//!
//! `xchg_only` stops after step 3: the process groups are known (their cards
//! cached), no group is made. `disconnect` is not collective: the process
//! manager forgets this member (and tells the others, with `notify_each`),
//! and the VCs are released with disconnect semantics.
//!
//! Events (a member connected, disconnected, terminated) reach handlers
//! registered with [`Engine::on_group_event`] when the application calls
//! [`Engine::poll_group_events`] (and after each group call); a terminated
//! member's VC is failed first, so nothing waits on it for ever.

use std::sync::{Arc, MutexGuard};

use rivet_pmi::client::{GroupConnectReply, GroupConnectRequest};
use rivet_pmi::group::ProcName;
use rivet_pmi::GroupEventKind as PmiEventKind;

use crate::comm::Comm;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::group_events::{GroupEvent, GroupEventKind, GroupTable};
use crate::inner::Inner;
use crate::pg::{GroupDesc, MemberDesc, VcId};
use crate::thread::{Shared, Threading};

/// The job attribute with the process manager's cluster id (rivetrun's
/// `--cluster-id`).
const CLUSTER_KEY: &str = rivet_pmi::group::KEY_CLUSTER;

/// The attributes of a group connect (RFC0003's `PMIX_CONNECT_*` keys).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectAttrs {
    /// Tells apart operations over the same processes; every participant
    /// passes the same value (`PMIX_CONNECT_ID`).
    pub id: Option<String>,
    /// Processes that end without joining do not fail the operation.
    pub optional: bool,
    /// Only exchange connection information: no new group.
    pub xchg_only: bool,
    /// A member may end without disconnecting; otherwise the process
    /// manager treats that as a job failure.
    pub early_term_allowed: bool,
    /// Raise `Connected` events for each member, and `Disconnected` on
    /// the others when one disconnects.
    pub notify_each: bool,
}

/// What a group connect made.
pub enum Connected<T: Threading = Shared> {
    Group(Group<T>),
    /// `xchg_only`: the participants, whose process groups are now known.
    Exchanged(Vec<ProcName>),
}

/// A connected group: its id, this process's rank in it, and a
/// communicator over its members in rank order.
pub struct Group<T: Threading = Shared> {
    id: String,
    members: Vec<ProcName>,
    comm: Comm<T>,
}

impl<T: Threading> Group<T> {
    /// The id the process manager gave the group (a namespace string).
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn rank(&self) -> u32 {
        self.comm.rank
    }

    pub fn size(&self) -> u32 {
        self.comm.size
    }

    /// Members in rank order, as (process group, rank in it).
    pub fn members(&self) -> &[ProcName] {
        &self.members
    }

    /// An intracommunicator over the members.
    pub fn comm(&self) -> &Comm<T> {
        &self.comm
    }
}

impl Inner {
    fn group_table(&self) -> MutexGuard<'_, GroupTable> {
        self.groups.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<T: Threading> Engine<T> {
    /// This process's namespace: its process group's id.
    pub fn nspace(&self) -> String {
        self.inner.lock_even_finalized().st.world().id.clone()
    }

    /// The process manager's cluster id, if it has one (rivetrun does).
    pub fn cluster(&self) -> Result<Option<String>> {
        self.inner
            .with_pmi(|pmi| pmi.job_attribute(CLUSTER_KEY))
            .map(|c| c.filter(|c| !c.is_empty()))
    }

    /// `cluster:nspace` (RFC0003's multi-cluster form), or the bare
    /// namespace where the process manager names no cluster: what to
    /// publish for processes of other jobs to name this one.
    pub fn qualified_nspace(&self) -> Result<String> {
        let ns = self.nspace();
        Ok(match self.cluster()? {
            Some(c) => rivet_pmi::group::qualified_nspace(&c, &ns),
            None => ns,
        })
    }

    /// Connect with `procs` (RFC0003 `PMIx_Connect`): blocks until every
    /// listed process has called it with the same processes and `id` (or,
    /// with `optional`, has ended). This process must be among `procs`.
    pub fn group_connect(&self, procs: &[ProcName], attrs: &ConnectAttrs) -> Result<Connected<T>> {
        if procs.is_empty() {
            return Err(Error::InvalidArgument(
                "group connect needs at least one process".into(),
            ));
        }
        let me = self.nspace();
        let cluster = self.cluster()?;
        // Only rivetrun serves group connect over PMI-1 (it names a
        // cluster); Hydra would end the whole job on the unknown command.
        // Under a PMIx server it goes to PMIx groups.
        let served = self
            .inner
            .with_pmi(|pmi| Ok(pmi.is_singleton() || pmi.kind() == "pmix"))?;
        if cluster.is_none() && !served {
            return Err(Error::Unsupported(
                "group connect needs rivetrun as the process manager; this one \
                 (e.g. mpiexec.hydra) does not serve it"
                    .into(),
            ));
        }
        let ours = |p: &ProcName| p.nspace == me && (p.cluster.is_none() || p.cluster == cluster);
        // Foreign process groups reach us through the netmod.
        let card = if procs.iter().all(ours) {
            String::new()
        } else {
            // With our group key: the others' netmods check our HELLOs.
            let card = self.inner.ensure_netmod()?;
            crate::pg::contact(&card, crate::groups::group_key().as_ref())
        };
        let request = GroupConnectRequest {
            procs: procs.to_vec(),
            id: attrs.id.clone(),
            optional: attrs.optional,
            xchg_only: attrs.xchg_only,
            early_term: attrs.early_term_allowed,
            notify_each: attrs.notify_each,
            context: self
                .inner
                .next_context
                .load(std::sync::atomic::Ordering::Relaxed),
            card,
        };
        let reply = self
            .inner
            .with_pmi_progressing(|pmi| pmi.group_connect(&request))?;
        // Step 3, whatever happens here: the others wait for our "ready".
        let registered = self.register_members(&reply);
        let ready = self
            .inner
            .with_pmi_progressing(|pmi| pmi.group_ready(reply.op));
        let vcs = registered?;
        ready?;
        let connected = self.make_group(reply, vcs, attrs.notify_each);
        self.poll_group_events()?;
        connected
    }

    fn register_members(&self, reply: &GroupConnectReply) -> Result<Vec<VcId>> {
        let members = reply
            .members
            .iter()
            .map(|m| {
                let (card, key) = crate::pg::split_contact(&m.card)?;
                Ok(MemberDesc {
                    pg: m.proc.nspace.clone(),
                    pg_size: m.pg_size,
                    rank: m.proc.rank.ok_or_else(|| {
                        Error::Failed(format!("the process manager named {} as a member", m.proc))
                    })?,
                    card,
                    key,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // Members of other process groups were among `procs`, so the
        // netmod is already open (`group_connect`).
        self.inner.register_group(&GroupDesc {
            context: reply.context,
            members,
        })
    }

    fn make_group(
        &self,
        reply: GroupConnectReply,
        vcs: Vec<VcId>,
        notify_each: bool,
    ) -> Result<Connected<T>> {
        let members: Vec<ProcName> = reply.members.into_iter().map(|m| m.proc).collect();
        let (Some(id), Some(rank)) = (reply.group, reply.rank) else {
            return Ok(Connected::Exchanged(members));
        };
        let size = u32::try_from(vcs.len())
            .map_err(|_| Error::Failed("group connect: too many members".into()))?;
        if rank >= size {
            return Err(Error::Failed(format!(
                "the process manager gave rank {rank} in a group of {size}"
            )));
        }
        let world = self.world();
        world.take_context(reply.context, 2)?;
        let comm = Comm {
            inner: self.inner.clone(),
            context: reply.context,
            rank,
            size,
            local: self.inner.new_vcrt(vcs.clone())?,
            remote: None,
            first: false,
            _threads: std::marker::PhantomData,
        };
        let mut table = self.inner.group_table();
        if notify_each {
            for (i, p) in members.iter().enumerate() {
                if i as u32 != rank {
                    table.queued.push(GroupEvent {
                        group: id.clone(),
                        kind: GroupEventKind::Connected,
                        proc: p.clone(),
                    });
                }
            }
        }
        table.live.insert(
            id.clone(),
            members.iter().cloned().zip(vcs.iter().copied()).collect(),
        );
        Ok(Connected::Group(Group { id, members, comm }))
    }

    /// Leave `group` (RFC0003 `PMIx_Disconnect`); not collective. Its
    /// connections to other process groups close once no other
    /// communicator uses them; traffic still in flight to or from this
    /// process on the group is lost.
    pub fn group_disconnect(&self, group: Group<T>) -> Result<()> {
        let Group { id, comm, .. } = group;
        // Progressing meanwhile: under PMIx the disconnect is a collective
        // destruct, and members may still need messages we queued (a tcp
        // connection only we can finish) before they reach it.
        let left = self
            .inner
            .with_pmi_progressing(|pmi| pmi.group_disconnect(&id));
        self.inner.group_table().live.remove(&id);
        if let Ok(table) = Arc::try_unwrap(comm.local) {
            table.mark_disconnect();
        }
        left?;
        self.poll_group_events().map(|_| ())
    }

    /// Call `handler` for each group event from now on (see
    /// [`Engine::poll_group_events`]). Handlers run on the thread that polls.
    pub fn on_group_event(&self, handler: impl FnMut(&GroupEvent) + Send + 'static) {
        self.inner.group_table().handlers.push(Box::new(handler));
    }

    /// Deliver pending group events to the handlers; the number delivered.
    /// Never blocks; progresses the engine once (a process that only waits
    /// for events still answers its peers, e.g. a finalizing member's
    /// goodbye, whose exit is the event). A `Terminated` member's VC is
    /// failed first, so requests waiting on it complete with an error.
    pub fn poll_group_events(&self) -> Result<usize> {
        self.progress();
        let from_pm = self.inner.with_pmi(|pmi| pmi.poll_events())?;
        let (events, mut handlers) = {
            let mut table = self.inner.group_table();
            let mut events = std::mem::take(&mut table.queued);
            for e in from_pm {
                let kind = match e.kind {
                    PmiEventKind::Terminated => GroupEventKind::Terminated,
                    PmiEventKind::Disconnected => GroupEventKind::Disconnected,
                };
                events.push(GroupEvent {
                    group: e.group,
                    kind,
                    proc: e.proc,
                });
            }
            let dead: Vec<VcId> = events
                .iter()
                .filter(|e| e.kind == GroupEventKind::Terminated)
                .filter_map(|e| {
                    let members = table.live.get(&e.group)?;
                    members
                        .iter()
                        .find(|(p, _)| p.nspace == e.proc.nspace && p.rank == e.proc.rank)
                        .map(|&(_, vc)| vc)
                })
                .collect();
            if !dead.is_empty() {
                drop(table);
                for vc in dead {
                    self.inner
                        .peer_failed_everywhere(vc, "it terminated (group event)");
                }
                table = self.inner.group_table();
            }
            (events, std::mem::take(&mut table.handlers))
        };
        for e in &events {
            for h in handlers.iter_mut() {
                h(e);
            }
        }
        // Handlers registered while these ran come after the old ones.
        let mut table = self.inner.group_table();
        handlers.append(&mut table.handlers);
        table.handlers = handlers;
        Ok(events.len())
    }
}
