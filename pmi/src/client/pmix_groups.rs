//! Group connect (seed 004) for ranks bootstrapped by PMIx, on OpenPMIx
//! 4.x's process groups.
//!
//! * connect: the card and context proposal are put under a key named
//!   after the group and committed; `PMIx_Group_construct` over the named
//!   processes (`PMIX_GROUP_OPTIONAL` with `optional`) is the collective;
//!   then every member's card is read with `PMIx_Get` (with `optional`,
//!   `pmix.immediate`: a member that never joined has none, and is left
//!   out; otherwise a plain get, so a card on another host comes by
//!   direct modex).
//!   Members are sorted by (namespace, rank); the new rank is the index,
//!   the context the largest proposal. The group's name is derived from
//!   what every participant names alike (procs in any order, id, flags)
//!   and a count of such connects, so it is the same everywhere.
//!   A server without PMIx groups (Open MPI 4.1.4's mpirun: ORTE's host
//!   module has no group upcall; Slurm 22.05's plugin neither) answers "not
//!   supported" to every participant alike, so the collective is then a
//!   `PMIx_Fence` over the named processes; `optional` is refused there
//!   (only a group says who joined), and there are no member events.
//! * ready: `PMIx_Fence` over the members (no data).
//! * disconnect: `PMIx_Group_destruct`, which in PMIx is collective: it
//!   returns once every member destructed (Rivet's PMI-1 disconnect returns
//!   at once). OpenPMIx 4.2's waits for ended members too, for ever, so a
//!   group one of whose members ended (an event came) is only forgotten;
//!   a member that ends while the others are in the destruct hangs them
//!   (fixed in later OpenPMIx, `PMIX_GROUP_NOTIFY_TERMINATION`).
//!
//! * events: a member that ends while in the group is a `Terminated`
//!   event (`PMIX_GROUP_MEMBER_FAILED`, `pmix_events.rs`), which rivetrun's
//!   server raises; `early_term` is `PMIX_GROUP_NOTIFY_TERMINATION`, without
//!   which rivetrun fails the job, as under PMI-1. The construct asks for a
//!   context id so that the server's host hears of the group at all.
//!
//! Not mapped: `Disconnected` events (`notify_each`: a PMIx destruct is
//! collective, so nobody is left to tell); other servers than rivetrun
//! (mpirun, srun) raise no member events; `xchg_only` constructs no group
//! (a fence over the procs, cards through the same keys).
//!
//! Other jobs: under rivetrun a connect naming another namespace or any
//! cluster goes over rivetrun's PMI-1 group service instead
//! (`pmix_side.rs`). Under other servers names qualified with the
//! server's `PMIX_CLUSTER_ID` are its own processes; other clusters are
//! refused.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{c_char, c_int, CString};

use crate::client::groups::{GroupConnectReply, GroupConnectRequest, GroupMember};
use crate::error::{Error, Result};
use crate::group::ProcName;
use crate::pmix_ffi::{
    PmixInfo, PmixProc, PmixValue, PMIX_ERR_NOT_SUPPORTED, PMIX_GLOBAL, PMIX_RANK_WILDCARD,
    PMIX_STRING, PMIX_SUCCESS,
};

use super::pmix::Pmix;

/// `PMIx_Group_construct(grp, procs, nprocs, directives, ndirs, &results,
/// &nresults)`.
pub(super) type ConstructFn = unsafe extern "C" fn(
    *const c_char,
    *const PmixProc,
    usize,
    *const PmixInfo,
    usize,
    *mut *mut PmixInfo,
    *mut usize,
) -> c_int;
/// `PMIx_Group_destruct(grp, directives, ndirs)`.
pub(super) type DestructFn = unsafe extern "C" fn(*const c_char, *const PmixInfo, usize) -> c_int;

/// What this process keeps of its connects.
#[derive(Default)]
pub(super) struct PmixGroups {
    /// Connects made so far per description (for unique group names).
    seen: HashMap<String, u64>,
    last_op: u64,
    /// Each connect's members, until its ready.
    ready: HashMap<u64, Vec<PmixProc>>,
    /// Groups this process is in.
    groups: Vec<String>,
    /// Whether the group events' handler is registered.
    pub(super) watching: bool,
    /// Groups with a member that ended (their destruct could not complete).
    ended: HashSet<String>,
    /// Groups made by a fence where the server has no PMIx groups (nothing
    /// to destruct).
    fenced: HashSet<String>,
}

fn failed(op: &'static str, message: impl Into<String>) -> Error {
    Error::GroupFailed {
        op,
        message: message.into(),
    }
}

/// 64-bit FNV-1a: a short, stable name for a long description.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// What every participant of `req` names alike: the processes (sorted),
/// the id and the flags.
fn description(req: &GroupConnectRequest) -> String {
    let mut procs: Vec<String> = req
        .procs
        .iter()
        .map(|p| match p.rank {
            Some(r) => format!("{}:{r}", p.nspace),
            None => format!("{}:*", p.nspace),
        })
        .collect();
    procs.sort();
    procs.dedup();
    format!(
        "{}|{:?}|{}{}{}{}",
        procs.join(","),
        req.id,
        req.optional as u8,
        req.xchg_only as u8,
        req.early_term as u8,
        req.notify_each as u8
    )
}

/// The card key's value: the context proposal, then the card.
fn entry(context: u32, card: &str) -> String {
    format!("{context};{card}")
}

fn parse_entry(s: &str) -> Option<(u32, String)> {
    let (ctx, card) = s.split_once(';')?;
    Some((ctx.parse().ok()?, card.to_string()))
}

impl Pmix {
    /// [`crate::Client::group_connect`] over PMIx.
    pub fn group_connect(&mut self, req: &GroupConnectRequest) -> Result<GroupConnectReply> {
        const OP: &str = "group_connect";
        if self.side.takes(req, &self.nspace) {
            return self.side.connect(req);
        }
        // Names qualified with this server's cluster (`PMIX_CLUSTER_ID`)
        // are its own processes; the description ignores the qualifier.
        if req.procs.iter().any(|p| p.cluster.is_some()) {
            let ours = self.cluster()?;
            if let Some(p) = req
                .procs
                .iter()
                .find(|p| p.cluster.is_some() && p.cluster != ours)
            {
                let served = match &ours {
                    Some(c) => format!("cluster {c}'s processes only"),
                    None => "no cluster id, so no qualified names".to_string(),
                };
                return Err(failed(
                    OP,
                    format!(
                        "{p}: this PMIx server serves {served}; other clusters and jobs need \
                         rivetrun (its PMI-1 group service, with --nameserver)"
                    ),
                ));
            }
        }
        let (construct, _) = self.group_fns()?;
        // Before any group exists, so no member's end goes unheard.
        self.watch_group_events()?;
        let desc = description(req);
        let count = self.groups_state().seen.entry(desc.clone()).or_insert(0);
        *count += 1;
        let name = format!("rivet-g{:016x}-{count}", fnv(&desc));
        let key = format!("rivet.grp.{name}");
        self.put_now(&key, &entry(req.context, &req.card))?;
        // The processes as named, wildcards as PMIx spells them.
        let procs: Vec<PmixProc> = req
            .procs
            .iter()
            .map(|p| PmixProc::new(&p.nspace, p.rank.unwrap_or(PMIX_RANK_WILDCARD)))
            .collect();
        if req.xchg_only {
            // No group: a fence over the processes publishes the cards.
            self.fence_over(&procs)?;
        } else {
            // A context id is asked for (and unused) so that the server's
            // host hears of the group: OpenPMIx 4.2 completes a construct
            // among its own clients without it otherwise, and the host
            // raises the members' termination events. `early_term` is
            // PMIx's "notify on termination": members that end without
            // leaving are then an event, not an error.
            let mut dirs = vec![
                PmixInfo::flag(c"pmix.grp.actxid", true),
                PmixInfo::flag(c"pmix.grp.notterm", req.early_term),
            ];
            if req.optional {
                dirs.push(PmixInfo::flag(c"pmix.grp.opt", true));
            }
            let grp = CString::new(name.clone()).expect("no NUL in a hex name");
            let mut results: *mut PmixInfo = std::ptr::null_mut();
            let mut nresults = 0usize;
            // SAFETY: a NUL-terminated name, `procs.len()` valid procs,
            // `dirs.len()` valid infos (flags, nothing to free); the results
            // are the library's (none are read; freed below).
            let rc = unsafe {
                construct(
                    grp.as_ptr(),
                    procs.as_ptr(),
                    procs.len(),
                    dirs.as_ptr(),
                    dirs.len(),
                    &mut results,
                    &mut nresults,
                )
            };
            self.free_infos(results, nresults);
            if rc == PMIX_ERR_NOT_SUPPORTED {
                // No PMIx groups here (Open MPI 4.1's mpirun; Slurm 22.05):
                // every participant gets the same answer, so all of them
                // meet in a fence over the processes instead. Only
                // `optional` needs the server's group (who joined).
                if req.optional {
                    return Err(Error::PmixUnsupported {
                        op: "an optional group connect (this PMIx server, such as Open MPI \
                             4.1's mpirun, serves no PMIx groups, so who joined is unknown)",
                    });
                }
                self.fence_over(&procs)?;
                self.groups_state().fenced.insert(name.clone());
            } else if rc != PMIX_SUCCESS {
                return Err(failed(
                    OP,
                    format!("PMIx_Group_construct: {}", self.describe(rc)),
                ));
            }
        }
        // The members: each named process (wildcards expanded) that left
        // its card.
        let mut members: BTreeMap<(String, u32), (u32, u32, String)> = BTreeMap::new();
        for p in &req.procs {
            let size = self.job_size_of(&p.nspace)?;
            let ranks: Vec<u32> = match p.rank {
                Some(r) => vec![r],
                None => (0..size).collect(),
            };
            for r in ranks {
                // Optional: only what the server holds (a member that never
                // joined has no card); otherwise a card on another host
                // comes by direct modex.
                match self.get_string_of(&p.nspace, r, &key, req.optional)? {
                    Some(v) => {
                        let (ctx, card) = parse_entry(&v).ok_or_else(|| {
                            failed(OP, format!("{}:{r} left a malformed card", p.nspace))
                        })?;
                        members.insert((p.nspace.clone(), r), (size, ctx, card));
                    }
                    None if req.optional => {}
                    None => {
                        return Err(failed(OP, format!("{}:{r} left no card", p.nspace)));
                    }
                }
            }
        }
        let me = (self.nspace.clone(), self.rank());
        let rank = members.keys().position(|m| *m == me).map(|i| i as u32);
        if rank.is_none() {
            return Err(failed(OP, "this process is not among the members"));
        }
        let context = members.values().map(|(_, c, _)| *c).max().unwrap_or(0);
        let state = self.groups_state();
        state.last_op += 1;
        let op = state.last_op;
        state.ready.insert(
            op,
            members
                .keys()
                .map(|(ns, r)| PmixProc::new(ns, *r))
                .collect(),
        );
        let group = (!req.xchg_only).then_some(name);
        if let Some(g) = &group {
            state.groups.push(g.clone());
        }
        Ok(GroupConnectReply {
            group,
            rank: (!req.xchg_only).then_some(rank).flatten(),
            context,
            op,
            members: members
                .into_iter()
                .map(|((ns, r), (pg_size, _, card))| GroupMember {
                    proc: ProcName::new(ns, r),
                    pg_size,
                    card,
                })
                .collect(),
        })
    }

    /// [`crate::Client::group_ready`] over PMIx: a fence over the members.
    pub fn group_ready(&mut self, op: u64) -> Result<()> {
        if let Some(done) = self.side.ready(op) {
            return done;
        }
        let procs = self
            .groups_state()
            .ready
            .remove(&op)
            .ok_or_else(|| failed("group_ready", format!("unknown group_ready op {op}")))?;
        self.fence_over(&procs)
    }

    /// [`crate::Client::group_disconnect`] over PMIx: `PMIx_Group_destruct`.
    pub fn group_disconnect(&mut self, group: &str) -> Result<()> {
        const OP: &str = "group_disconnect";
        if let Some(done) = self.side.disconnect(group) {
            return done;
        }
        let state = self.groups_state();
        let Some(i) = state.groups.iter().position(|g| g == group) else {
            return Err(failed(OP, format!("unknown group {group}")));
        };
        state.groups.swap_remove(i);
        // OpenPMIx 4.2's destruct waits for every member, one that ended
        // too (for ever); Rivet's disconnect is not collective, so the group
        // is only forgotten here. rivetrun's server keeps its record; the
        // others' later ends are then events nobody takes.
        let ended = state.ended.remove(group);
        if state.fenced.remove(group) || ended || super::pmix_events::queued_for(group) {
            return Ok(());
        }
        let (_, destruct) = self.group_fns()?;
        let grp = CString::new(group).map_err(|_| failed(OP, "a NUL in the group name"))?;
        // SAFETY: a NUL-terminated name; no directives.
        let rc = unsafe { destruct(grp.as_ptr(), std::ptr::null(), 0) };
        if rc != PMIX_SUCCESS {
            return Err(failed(
                OP,
                format!("PMIx_Group_destruct: {}", self.describe(rc)),
            ));
        }
        Ok(())
    }

    /// [`crate::Client::poll_events`] over PMIx: members of this process's
    /// groups that ended (`pmix_events.rs`).
    pub fn poll_events(&mut self) -> Result<Vec<crate::group::GroupEvent>> {
        let state = self.groups_state();
        let mut events = super::pmix_events::take(&state.groups);
        state.ended.extend(events.iter().map(|e| e.group.clone()));
        events.extend(self.side.poll_events()?);
        Ok(events)
    }

    /// `key` → `value` put and committed now (not gathered for a barrier).
    fn put_now(&mut self, key: &str, value: &str) -> Result<()> {
        let k = CString::new(key).map_err(|_| failed("group_connect", "a NUL in a key"))?;
        let v = CString::new(value).map_err(|_| failed("group_connect", "a NUL in a card"))?;
        let mut value = PmixValue {
            ty: PMIX_STRING,
            _pad: [0; 6],
            data: [v.as_ptr() as u64, 0, 0],
        };
        self.put_value(PMIX_GLOBAL, &k, &mut value)
    }

    /// Size of namespace `nspace`'s job.
    fn job_size_of(&self, nspace: &str) -> Result<u32> {
        self.get_u32_of(nspace, PMIX_RANK_WILDCARD, "pmix.job.size")?
            .ok_or_else(|| failed("group_connect", format!("no size known for job {nspace}")))
    }

    /// `PMIx_Get` of a string; `None` when not found (`immediate`: the
    /// server answers from what it has, without waiting).
    fn get_string_of(
        &self,
        nspace: &str,
        rank: u32,
        key: &str,
        immediate: bool,
    ) -> Result<Option<String>> {
        let info = PmixInfo::flag(c"pmix.immediate", true);
        let infos: &[PmixInfo] = if immediate {
            std::slice::from_ref(&info)
        } else {
            &[]
        };
        match self.get_with(nspace, rank, key, infos, Pmix::string_of_value) {
            Err(Error::PmixFailed { .. }) if immediate => Ok(None),
            r => r,
        }
    }

    fn get_u32_of(&self, nspace: &str, rank: u32, key: &str) -> Result<Option<u32>> {
        self.get_with(nspace, rank, key, &[], Pmix::u32_of_value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn participants_name_the_same_group_however_they_spell_the_procs() {
        let a = GroupConnectRequest {
            procs: vec![ProcName::new("b", 0), ProcName::wildcard("a")],
            id: Some("x".into()),
            ..Default::default()
        };
        let b = GroupConnectRequest {
            procs: vec![ProcName::wildcard("a"), ProcName::new("b", 0)],
            card: "another card".into(),
            context: 9,
            ..a.clone()
        };
        assert_eq!(description(&a), description(&b));
        let c = GroupConnectRequest {
            optional: true,
            ..a.clone()
        };
        assert_ne!(description(&a), description(&c));
        assert_eq!(
            parse_entry(&entry(7, "c;a;r;d")),
            Some((7, "c;a;r;d".into()))
        );
        assert_eq!(parse_entry("x;card"), None);
    }
}
