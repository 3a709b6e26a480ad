//! PMIx on this node: the proxy runs OpenPMIx's server for its ranks
//! (`crate::pmix_host`, a node of the job: `pmix_host/node.rs`) beside the
//! PMI-1/PMI-2 server, and each rank's environment gets what the server's
//! setup-fork gives. The PMI loop (`pmi.rs`) serves the upcalls that need
//! other hosts, with this module's state:
//! * a fence over the whole job is one barrier of the proxy tree
//!   (`pmix_fences.rs`, which also enforces a `PMIX_TIMEOUT` across
//!   hosts). A fence among this node's ranks alone completes here; one over some
//!   ranks of several hosts, group construct and destruct, and connect and
//!   disconnect (Open MPI's spawn and connect/accept end with a
//!   `PMIx_Connect` over both jobs) are gathered by rivetrun
//!   (`pmix_subset.rs`), a spawned namespace's processes counted on the
//!   node of the proxy that spawned it (`pmix_spawned` from rivetrun);
//! * a direct modex asks rivetrun (`dmodex ID NS RANK`), which asks the
//!   target's proxy (`dmodex_ask FROM ID NS RANK`); that proxy's server
//!   answers (`dmodex_data FROM ID STATUS HEX`) and rivetrun passes it back
//!   (`dmodex_done ID STATUS HEX`). A lost target or rivetrun fails it;
//! * an abort goes to rivetrun as a PMI-1 abort does; names to rivetrun's
//!   job-wide table (`pmix_names.rs`);
//! * a spawn goes to the proxy's main thread, which starts the children
//!   on this host (`spawn.rs`). Their namespace is wholly on this node, so
//!   a fence over its processes (and this node's ranks of the job)
//!   completes here;
//! * a PMIx group member's end: this node's members hear of it from this
//!   node's server; the end of one of this node's processes goes to
//!   rivetrun (`gend NS RANK [GROUP]`, GROUP: one that did not allow it,
//!   which fails the job), which passes it to the other proxies (`gend NS
//!   RANK`), whose servers tell their own members ([`member_ended`]).

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use rivet_pmi::pmix_ffi::{PMIX_ERR_UNREACH, PMIX_RANK_WILDCARD, PMIX_SUCCESS};

use super::pmix_fences::{hex, unhex, Fences};
use super::pmix_subset::{Done, Subsets};
use super::upstream::Upstream;
use crate::pmix_host::node::{self, DmodexCall, FenceCall, Layout};
use crate::pmix_host::{PmixEvent, PmixHost, SpawnCall, Starting};
use crate::remote::commands as cmd;

/// Start this node's PMIx server (on a thread of its own, while the proxy
/// places its ranks), where OpenPMIx is installed and rivetrun named the
/// hosts; [`finish`] registers the job.
pub fn begin(kvsname: &str, hosts: &[String], node: u32) -> Option<Starting> {
    crate::pmix_host::probe().ok()?;
    let name = hosts.get(node as usize)?.clone();
    Some(Starting::spawn_node(kvsname.to_string(), name))
}

/// Register the job with the node's server: its ranks where
/// `node_of_rank` says, in the apps `appnums` says (empty: one app), this
/// node's hwloc XML and the cluster id. None, saying why, if that fails:
/// the job then runs with PMI-1/PMI-2 only, as single-host rivetrun
/// without OpenPMIx.
pub fn finish(
    starting: Option<Starting>,
    hosts: &[String],
    node_of_rank: &[u32],
    appnums: Vec<u32>,
    node: u32,
    topology_xml: &Path,
    cluster: Option<String>,
) -> Option<PmixHost> {
    let starting = starting?;
    let xml = std::fs::read_to_string(topology_xml).ok();
    let registered = Layout::from_nodes(hosts.to_vec(), node_of_rank, node as usize)
        .with_apps(appnums)
        .and_then(|layout| starting.finish_node(layout, xml, cluster));
    match registered {
        Ok(h) => Some(h),
        Err(why) => {
            let host = hosts.get(node as usize).map_or("?", String::as_str);
            eprintln!(
                "rivetrun: warning: {host}: no PMIx server for this node's ranks (PMI only): {why}"
            );
            None
        }
    }
}

/// Process `rank` of `nspace` ended while the job runs: this node's
/// members of the PMIx groups it was in hear of it. `ours`: it was this
/// node's process, so rivetrun is told (when it was in a group), to tell
/// the other nodes and, for a group that did not allow it, fail the job.
pub fn member_ended(host: Option<&PmixHost>, nspace: &str, rank: u32, ours: Option<&Upstream>) {
    let Some(host) = host else { return };
    let ended = host.member_ended(nspace, rank);
    for e in &ended.errors {
        eprintln!("rivetrun: warning: process {rank} of {nspace}: {e}");
    }
    if let (Some(up), false) = (ours, ended.groups.is_empty()) {
        let mut words = vec![cmd::GEND.to_string(), nspace.to_string(), rank.to_string()];
        words.extend(ended.forbidden.into_iter().next());
        let _ = up.send(&words);
    }
}

/// `pmix_spawned KVS NODE PARENT_NS PARENT_RANK SIZES` from rivetrun:
/// node NODE's proxy spawned job KVS (SIZES: each app's processes, comma
/// separated); registered with this node's server (`this`), so this
/// node's clients can name its processes (their data by direct modex).
pub fn spawned_elsewhere(host: Option<&PmixHost>, hosts: &[String], words: &[Vec<u8>]) {
    let Some(host) = host else { return };
    let text = |i: usize| words.get(i).map(|w| crate::remote::wire::text(w));
    let parsed = (|| {
        let (kvs, parent) = (text(1)?, text(3)?);
        let node: u32 = text(2)?.parse().ok()?;
        let prank: u32 = text(4)?.parse().ok()?;
        let sizes: Vec<u32> = (text(5)?.split(','))
            .map(|n| n.parse().ok())
            .collect::<Option<_>>()?;
        Some((kvs, node, parent, prank, sizes))
    })();
    let Some((kvs, node, parent, prank, sizes)) = parsed else {
        return eprintln!("rivetrun: proxy: a garbled pmix_spawned from rivetrun");
    };
    if let Err(why) = host.register_elsewhere(&kvs, hosts, node, &sizes, (&parent, prank)) {
        eprintln!("rivetrun: warning: {kvs} is not known to this node's PMIx server: {why}");
    }
}

/// Messages about PMIx from rivetrun, for the PMI loop.
pub enum Msg {
    /// Another node's rank asks for the data of `rank` of `nspace`.
    Ask {
        from: u32,
        id: u64,
        nspace: String,
        rank: u32,
    },
    /// The answer to this node's direct modex `id`.
    Done { id: u64, status: i32, data: Vec<u8> },
    /// The end of a collective over a subset (`pmix_subset.rs`).
    Coll(Done),
    /// Node `node`'s proxy spawned namespace `kvs` (`pmix_spawned`).
    Spawned { kvs: String, node: u32 },
    /// Whole-job fence `number` fails on every host (`fence_failed`).
    FenceFailed { number: u64, status: i32 },
}

impl Msg {
    /// Parse `dmodex_ask` / `dmodex_done` / `coll_out` / `pmix_spawned` /
    /// `fence_failed` (other words: None).
    pub fn parse(words: &[Vec<u8>]) -> Option<Msg> {
        let text = |i: usize| words.get(i).map(|w| crate::remote::wire::text(w));
        match text(0)?.as_str() {
            cmd::DMODEX_ASK => Some(Msg::Ask {
                from: text(1)?.parse().ok()?,
                id: text(2)?.parse().ok()?,
                nspace: text(3)?,
                rank: text(4)?.parse().ok()?,
            }),
            cmd::DMODEX_DONE => Some(Msg::Done {
                id: text(1)?.parse().ok()?,
                status: text(2)?.parse().ok()?,
                data: unhex(&text(3)?)?,
            }),
            cmd::COLL_OUT => Done::parse(words).map(Msg::Coll),
            cmd::PMIX_SPAWNED => Some(Msg::Spawned {
                kvs: text(1)?,
                node: text(2)?.parse().ok()?,
            }),
            cmd::FENCE_FAILED => Some(Msg::FenceFailed {
                number: text(1)?.parse().ok()?,
                status: text(2)?.parse().ok()?,
            }),
            _ => None,
        }
    }
}

/// The PMI loop's PMIx state.
pub struct State {
    node: u32,
    kvsname: String,
    size: u32,
    local: Vec<u32>,
    /// Whole-job fences.
    fences: Fences,
    /// This node's direct modexes waiting for rivetrun's answer.
    asked: HashMap<u64, DmodexCall>,
    next_id: u64,
    /// Other nodes' requests this node's server is answering: ours → (from, theirs).
    answering: HashMap<u64, (u32, u64)>,
    /// Fences over some ranks of several hosts, and groups.
    subsets: Subsets,
    /// The namespaces of the processes this proxy spawned (all on this node).
    spawned: std::collections::HashSet<String>,
}

/// What the loop must do after a PMIx event.
pub enum Step {
    Nothing,
    /// Put the node's blob into the tree's barrier.
    Barrier(Vec<(String, String)>),
    /// Start the children of this spawn (the proxy's main thread).
    Spawn(SpawnCall),
}

impl State {
    /// Node `node`'s state; job `kvsname` has `size` ranks, rank `r` on
    /// node `node_of_rank[r]`, this node's are `local`.
    pub fn new(
        node: u32,
        kvsname: &str,
        size: u32,
        node_of_rank: Vec<u32>,
        local: Vec<u32>,
    ) -> State {
        State {
            size,
            subsets: Subsets::new(node, kvsname, node_of_rank),
            node,
            kvsname: kvsname.to_string(),
            local,
            fences: Fences::new(node),
            asked: HashMap::new(),
            next_id: 1,
            answering: HashMap::new(),
            spawned: std::collections::HashSet::new(),
        }
    }

    /// Namespace `kvs` was spawned by this proxy: all its processes are here.
    pub fn spawned_here(&mut self, kvs: &str, rivetrun: &Upstream) {
        self.spawned.insert(kvs.to_string());
        self.subsets.spawned(kvs, self.node, rivetrun);
    }

    /// When the loop must next call [`State::expire`]: a collective's wait
    /// for a spawn's news ends, or a fence's `PMIX_TIMEOUT` passes.
    pub fn next_deadline(&self) -> Option<Instant> {
        let times = [self.subsets.next_deadline(), self.fences.next_deadline()];
        times.into_iter().flatten().min()
    }

    /// Fail the collectives whose wait for a spawn's news ended; ask
    /// rivetrun to fail the fences whose timeout passed (it answers every
    /// host alike, `pmix_fences.rs`).
    pub fn expire(&mut self, now: Instant, rivetrun: &Upstream) {
        self.subsets.expire(now, rivetrun);
        for number in self.fences.late(now) {
            let late = [cmd::FENCE_LATE.to_string(), number.to_string()];
            if rivetrun.send(&late).is_err() {
                // No rivetrun to decide: it fails here alone.
                self.fences.failed(number, PMIX_ERR_UNREACH);
            }
        }
    }

    /// Whether a PMIx fence is in the tree (its `barrier_out` is ours).
    pub fn in_tree(&self) -> bool {
        self.fences.in_tree()
    }

    /// One event from the node's server.
    pub fn event(&mut self, ev: PmixEvent, rivetrun: &Upstream) -> Step {
        match ev {
            PmixEvent::Fence(call) => return self.fence(call, rivetrun),
            PmixEvent::Group(call) => self.subsets.group(call, rivetrun),
            PmixEvent::Connect(call) => self.subsets.connect(call, rivetrun),
            PmixEvent::Dmodex(call) => {
                let id = self.next_id;
                self.next_id += 1;
                let sent = rivetrun.send(&[
                    cmd::DMODEX.to_string(),
                    id.to_string(),
                    call.nspace.clone(),
                    call.rank.to_string(),
                ]);
                match sent {
                    Ok(()) => {
                        self.asked.insert(id, call);
                    }
                    Err(_) => call.finish(PMIX_ERR_UNREACH, Vec::new()),
                }
            }
            PmixEvent::DmodexAnswer { id, status, data } => {
                if let Some((from, theirs)) = self.answering.remove(&id) {
                    let _ = rivetrun.send(&[
                        cmd::DMODEX_DATA.to_string(),
                        from.to_string(),
                        theirs.to_string(),
                        status.to_string(),
                        hex(&data),
                    ]);
                }
            }
            PmixEvent::Aborted {
                rank,
                code,
                message,
                ack,
                ..
            } => {
                let _ = rivetrun.send(&[
                    cmd::ABORT.to_string(),
                    rank.to_string(),
                    code.to_string(),
                    message,
                ]);
                // Only now is the caller released: its exit, reported on
                // the same link, then comes after its abort.
                drop(ack);
            }
            PmixEvent::Names(call) => super::pmix_names::serve(call, rivetrun.clone()),
            PmixEvent::Spawn(call) => return Step::Spawn(call),
        }
        Step::Nothing
    }

    fn fence(&mut self, call: FenceCall, rivetrun: &Upstream) -> Step {
        let mut whole = false;
        let mut covered = std::collections::HashSet::new();
        let mut all_local = true;
        for (ns, rank) in &call.procs {
            if self.spawned.contains(ns) {
                // Children of this proxy: the library has their data.
                continue;
            }
            if *ns != self.kvsname {
                all_local = false;
                continue;
            }
            if *rank == PMIX_RANK_WILDCARD {
                whole = true;
            } else {
                covered.insert(*rank);
                all_local &= self.local.contains(rank);
            }
        }
        let whole = whole || covered.len() as u32 == self.size;
        if !whole && all_local && !call.procs.is_empty() {
            // Only this node's ranks: the library has every contribution.
            let data = call.data.clone();
            call.finish(PMIX_SUCCESS, data);
            return Step::Nothing;
        }
        if !whole {
            self.subsets.fence(call, rivetrun);
            return Step::Nothing;
        }
        barrier(self.fences.begin(call, Instant::now()))
    }

    /// The job's `barrier_out` for the fence in the tree: every node's
    /// blob to the library; then the next fence, if one waits.
    pub fn barrier_out(&mut self, puts: &[(String, String)]) -> Step {
        barrier(self.fences.barrier_out(puts))
    }

    /// The tree can complete no barrier: every fence fails.
    pub fn fail_fences(&mut self) {
        self.fences.fail_all();
    }

    /// rivetrun's link is gone: direct modexes and subsets fail too.
    pub fn lost(&mut self) {
        self.fail_fences();
        self.subsets.lost();
        for (_, call) in self.asked.drain() {
            call.finish(PMIX_ERR_UNREACH, Vec::new());
        }
    }

    /// A message from rivetrun.
    pub fn message(&mut self, msg: Msg, rivetrun: &Upstream) {
        match msg {
            Msg::Ask {
                from,
                id,
                nspace,
                rank,
            } => {
                let ours = self.next_id;
                self.next_id += 1;
                match node::request_dmodex(&nspace, rank, ours) {
                    Ok(()) => {
                        self.answering.insert(ours, (from, id));
                    }
                    Err(status) => {
                        let _ = rivetrun.send(&[
                            cmd::DMODEX_DATA.to_string(),
                            from.to_string(),
                            id.to_string(),
                            status.to_string(),
                            String::new(),
                        ]);
                    }
                }
            }
            Msg::Done { id, status, data } => {
                if let Some(call) = self.asked.remove(&id) {
                    call.finish(status, data);
                }
            }
            Msg::Coll(done) => self.subsets.done(done),
            Msg::Spawned { kvs, node } => self.subsets.spawned(&kvs, node, rivetrun),
            Msg::FenceFailed { number, status } => self.fences.failed(number, status),
        }
    }
}

fn barrier(puts: Option<Vec<(String, String)>>) -> Step {
    puts.map_or(Step::Nothing, Step::Barrier)
}

#[cfg(test)]
#[path = "pmix_tests.rs"]
pub(super) mod tests;
