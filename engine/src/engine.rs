//! The engine: start-up through PMI, the progress loop, shut-down.
//!
//! `Inner` is what every `Engine`, `Comm` and `Request` points at: the
//! locked `Core` plus what never changes after init. API calls take the
//! lock, do their step, and let go; blocking calls loop over `progress`
//! with the `Backoff` policy between empty polls, retaking the lock each
//! turn so other threads get their share.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use rivet_pmi::Client;

use crate::backoff::{should_yield, Backoff};
use crate::comm::Comm;
use crate::config::{Config, LmtMode, NetmodChoice, YieldMode};
use crate::core::{Core, State};
use crate::dynamic::{GroupTable, Ports, PARENT_PORT_KEY};
use crate::error::{Error, Result};
use crate::matching::Matcher;
use crate::netmod;
use crate::node_map::NodeMap;
use crate::pg::{PgCounts, Pgs, ProcessGroup, VcId, Vcrt};
use crate::protocol::SendArgs;
use crate::request::Request;
use crate::rma::RmaState;
use crate::shm::{cma, ShmConfig, ShmNode};
use crate::status::Status;
use crate::table::{Op, RequestTable};
use crate::thread::{EngineGuard, EngineLock, Shared, ThreadLevel, Threading};

/// COMM_WORLD uses context ids 0 and 1, COMM_SELF 2 and 3.
const SELF_CONTEXT: u32 = 2;
const FIRST_FREE_CONTEXT: u32 = 4;

/// One per process. Cheap to clone. `Engine` (`Engine<Shared>`) and its
/// handles are `Send + Sync` and the engine locks on every call (thread
/// level MULTIPLE); `Engine<Local>` and its handles stay on one thread and
/// run without a lock below MULTIPLE (`thread.rs`).
pub struct Engine<T: Threading = Shared> {
    pub(crate) inner: Arc<Inner>,
    /// Spawned processes: the intercommunicator to the parents, until it
    /// is disconnected (`Inner::parent` reaches it for that).
    parent: Arc<Mutex<Option<Comm>>>,
    _threads: PhantomData<T>,
}

impl<T: Threading> Clone for Engine<T> {
    fn clone(&self) -> Self {
        Engine {
            inner: self.inner.clone(),
            parent: self.parent.clone(),
            _threads: PhantomData,
        }
    }
}

pub struct Inner {
    /// The engine's state: locked at MULTIPLE, unlocked below (`core.rs`
    /// says why one lock, `thread.rs` how it is dropped).
    core: EngineLock<Core>,
    /// The level provided.
    pub(crate) level: ThreadLevel,
    pub(crate) rank: u32,
    size: u32,
    pub(crate) yields: bool,
    /// Next free context id on this process; `dup` agrees on the maximum.
    pub(crate) next_context: AtomicU32,
    /// Cold: business cards on first contact, abort and finalize. Lock
    /// order: the engine lock (`core`) before this one.
    pub(crate) pmi: Arc<Mutex<Option<Client>>>,
    finalized: AtomicBool,
    info: Vec<(String, String)>,
    local_size: u32,
    /// Which netmod to open when dynamic processes need one later.
    pub(crate) netmod_choice: NetmodChoice,
    /// COMM_WORLD's VC table (an identity map, shared by its dups).
    world_vcrt: Arc<Vcrt>,
    /// COMM_SELF's: this process alone.
    self_vcrt: Arc<Vcrt>,
    /// VC tables alive (for the reference-count tests and `--info`).
    pub(crate) vcrts: AtomicUsize,
    /// The engine's handle on the parent intercommunicator, which
    /// `Comm::disconnect` drops (weak: the handle holds this `Inner`).
    pub(crate) parent: Weak<Mutex<Option<Comm>>>,
    /// Groups made by group connect, their events and handlers. Lock
    /// order: before the engine lock, never while holding it.
    pub(crate) groups: Mutex<GroupTable>,
}

/// Live objects of the PG/VC layer (`Engine::counts`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub pg: PgCounts,
    /// VC tables besides COMM_WORLD's (dups share their original's).
    pub vcrts: usize,
    /// Connections the netmod holds (0 without a netmod).
    pub connections: usize,
    /// Ports open in this process.
    pub ports: usize,
}

/// What the engine runs with, for `rivet-bench --info` and diagnostics.
#[derive(Debug, Clone)]
pub struct Info {
    pub rank: u32,
    pub size: u32,
    pub local_size: u32,
    /// Lines of `name: value`, in a stable order.
    pub items: Vec<(String, String)>,
}

impl std::fmt::Display for Info {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (k, v) in &self.items {
            writeln!(f, "{k}: {v}")?;
        }
        Ok(())
    }
}

/// The KVS key under which a node's leader publishes its segment name.
fn shm_key(leader: u32) -> String {
    format!("rivet-shm-{leader}")
}

/// Segment names carry the job id so the launcher can sweep them up:
/// rivetrun sets `RIVET_JOBID`; under another launcher, the KVS name.
fn segment_name(pmi: &Client, leader: u32) -> String {
    let job = std::env::var("RIVET_JOBID")
        .ok()
        .filter(|j| !j.is_empty())
        .unwrap_or_else(|| pmi.kvs_name().to_string());
    let job: String = job
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(64)
        .collect();
    format!("rivet-{job}-{leader}-{}", std::process::id())
}

impl Engine {
    /// Bootstrap through the process manager (rivetrun, mpiexec.hydra, or
    /// none: a singleton), at thread level MULTIPLE.
    pub fn init() -> Result<Engine> {
        Engine::init_thread(ThreadLevel::Multiple)
    }
}

impl<T: Threading> Engine<T> {
    /// Bootstrap at thread level `level` (`MPI_Init_thread`). The level
    /// provided is the highest of `level`, `RIVET_THREAD_LEVEL` and what
    /// the handles allow: `Engine<Shared>` can cross threads, so it is
    /// always MULTIPLE; `Engine<Local>` gets `level`, and below MULTIPLE
    /// its calls take no lock. [`thread_level`](Self::thread_level) says
    /// which it got.
    pub fn init_thread(level: ThreadLevel) -> Result<Engine<T>> {
        let config = Config::from_env()?;
        let level = ThreadLevel::provided(level.max(T::FLOOR), config.thread_level);
        let mut pmi = Client::init()?;
        let (rank, size) = (pmi.rank(), pmi.size());
        let node_map =
            NodeMap::from_client(&mut pmi).with_force_netmod(config.netmod != NetmodChoice::Auto);
        let local: Vec<u32> = node_map.local_ranks().to_vec();
        let my_local = node_map.my_local_index();
        let use_shm = local.len() > 1 && config.netmod == NetmodChoice::Auto;

        // A netmod for peers off this node, or for all when forced.
        let needs_netmod =
            size > 1 && (config.netmod != NetmodChoice::Auto || local.len() < size as usize);
        let netmod = if needs_netmod {
            let opened = netmod::open(config.netmod, pmi.kvs_name(), rank)?;
            pmi.put(&netmod::card_key(rank), opened.netmod.business_card())?;
            Some(opened)
        } else {
            None
        };

        let mut shm = None;
        if use_shm && my_local == 0 {
            let name = segment_name(&pmi, rank);
            let shm_config = ShmConfig::from_env()?;
            shm = Some(ShmNode::create(&name, local.len(), 0, &shm_config)?);
            pmi.put(&shm_key(rank), &name)?;
        }
        pmi.barrier()?;
        if use_shm && my_local != 0 {
            let name = pmi.get(&shm_key(local[0]))?;
            shm = Some(ShmNode::attach(&name, local.len(), my_local)?);
        }

        let cma_probe = if config.lmt == LmtMode::Copy {
            Err("off (RIVET_SHM_LMT=copy)".to_string())
        } else {
            cma::probe()
        };
        let yields = should_yield(config.yield_mode, local.len());
        let (shm_eager_max, shm_piece) = match &shm {
            Some(s) => (config.shm_eager_max.min(s.max_payload()), s.max_payload()),
            None => (config.shm_eager_max, 64 * 1024),
        };
        let mut info = describe(
            &config,
            shm.as_ref(),
            netmod.as_ref(),
            &cma_probe,
            yields,
            shm_eager_max,
        );
        info.push((
            "thread_level".into(),
            format!(
                "{level} ({}; RIVET_THREAD_LEVEL raises it)",
                if level.locks() {
                    "one lock around the engine's state"
                } else {
                    "no lock: handles stay on one thread"
                }
            ),
        ));
        let netmod = netmod.map(|o| o.netmod);
        let limits = netmod.as_ref().map(|n| n.limits());
        let st = State {
            pgs: Pgs::new(ProcessGroup::new(
                pmi.kvs_name().to_string(),
                size,
                rank,
                node_map,
                config.eager_window,
            )),
            requests: RequestTable::new(),
            matcher: Matcher::new(),
            pending_vcs: Vec::new(),
            shm_eager_max,
            shm_piece,
            cma_allowed: cma_probe.is_ok(),
            split_min: config.shm_split_min,
            copies: Default::default(),
            shm_pids: Vec::new(),
            net_eager_max: limits.map_or(0, |l| l.eager_max),
            net_piece: limits.map_or(1, |l| l.max_payload.max(1)),
            fatal: None,
            failed_peers: Vec::new(),
            ports: Ports::default(),
            rma: RmaState::default(),
            completions: 0,
            spare: Default::default(),
        };
        let spawned = pmi.spawned();
        let pmi = Arc::new(Mutex::new(Some(pmi)));
        let parent = Arc::new(Mutex::new(None));
        let engine = Engine {
            inner: Arc::new(Inner {
                core: EngineLock::new(
                    Core {
                        shm,
                        netmod,
                        pmi: pmi.clone(),
                        st,
                    },
                    level,
                ),
                level,
                rank,
                size,
                yields,
                next_context: AtomicU32::new(FIRST_FREE_CONTEXT),
                pmi,
                finalized: AtomicBool::new(false),
                info,
                local_size: local.len() as u32,
                netmod_choice: config.netmod,
                world_vcrt: Arc::new(Vcrt::world(size)),
                self_vcrt: Arc::new(Vcrt::table(vec![VcId::world(rank)], Weak::new())),
                vcrts: AtomicUsize::new(0),
                parent: Arc::downgrade(&parent),
                groups: Mutex::default(),
            }),
            parent,
            _threads: PhantomData,
        };
        if spawned {
            let comm = engine.connect_to_parent()?;
            *engine.parent.lock().unwrap_or_else(|p| p.into_inner()) = Some(comm);
        }
        Ok(engine)
    }

    /// Started by `spawn`: connect to the parents through the port they
    /// pre-put in our KVS (seed 001, spawnees' column).
    fn connect_to_parent(&self) -> Result<Comm> {
        let world: Comm = self.world().retype();
        let port = self.inner.with_pmi(|pmi| pmi.get(PARENT_PORT_KEY))?;
        world.connect(&port, 0)
    }

    /// The thread level this engine provides.
    pub fn thread_level(&self) -> ThreadLevel {
        self.inner.level
    }

    /// The intercommunicator to the processes that spawned this one, if
    /// it was spawned (MPI_Comm_get_parent); `None` again once it has been
    /// disconnected.
    pub fn parent(&self) -> Option<Comm<T>> {
        self.parent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .map(Comm::retype)
    }

    /// Live objects of the PG/VC layer: process groups, VCs, VC tables,
    /// connections, ports. Tests check they return to their baseline.
    pub fn counts(&self) -> Counts {
        let core = self.inner.lock_even_finalized();
        Counts {
            pg: core.st.pgs.counts(),
            vcrts: self.inner.vcrts.load(Ordering::Relaxed),
            connections: core.netmod.as_ref().map_or(0, |n| n.peer_count()),
            ports: core.st.ports.open_count(),
        }
    }

    pub fn rank(&self) -> u32 {
        self.inner.rank
    }

    pub fn size(&self) -> u32 {
        self.inner.size
    }

    /// The communicator of every rank of the job (context id 0).
    pub fn world(&self) -> Comm<T> {
        Comm {
            inner: self.inner.clone(),
            context: 0,
            rank: self.inner.rank,
            size: self.inner.size,
            local: self.inner.world_vcrt.clone(),
            remote: None,
            first: false,
            _threads: PhantomData,
        }
    }

    /// The communicator of this process alone (MPI_COMM_SELF).
    pub fn self_comm(&self) -> Comm<T> {
        Comm {
            inner: self.inner.clone(),
            context: SELF_CONTEXT,
            rank: 0,
            size: 1,
            local: self.inner.self_vcrt.clone(),
            remote: None,
            first: false,
            _threads: PhantomData,
        }
    }

    /// Poll every transport once; the number of events handled. Another
    /// thread already progressing counts as done.
    pub fn progress(&self) -> usize {
        match self.inner.core.try_lock() {
            Some(mut core) => core.progress(),
            None => 0,
        }
    }

    pub fn info(&self) -> Info {
        let mut items = self.inner.info.clone();
        if let Ok(core) = self.inner.lock() {
            let pg = &core.st.pgs.world;
            items.push((
                "process_group".into(),
                format!(
                    "{} ({} ranks, {} on this node, {} VCs open, {} requests in flight)",
                    pg.id,
                    pg.size,
                    pg.node_map.local_ranks().len(),
                    pg.open_vcs(),
                    core.st.requests.live()
                ),
            ));
            let (shm, net) = pg.vcs_by_path();
            items.push(("vcs".into(), format!("{shm} shm, {net} netmod")));
            let c = core.st.pgs.counts();
            items.push((
                "pg_counts".into(),
                format!(
                    "{} process groups, {} foreign VCs ({} in use), {} temporary VCs, {} VC tables, {} connections, {} ports open",
                    c.process_groups,
                    c.foreign_vcs,
                    c.referenced_vcs,
                    c.temp_vcs,
                    self.inner.vcrts.load(Ordering::Relaxed),
                    core.netmod.as_ref().map_or(0, |n| n.peer_count()),
                    core.st.ports.open_count()
                ),
            ));
            if core.shm.is_some() {
                let c = &core.st.copies;
                items.push((
                    "shm.single_copy_reads".into(),
                    format!("{} whole, {} shared with the sender", c.whole, c.shared),
                ));
            }
            if core.netmod.is_some() {
                let r = &core.st.rma;
                items.push((
                    "netmod.rendezvous_reads".into(),
                    format!(
                        "{} done, {} streamed instead (a read refused or failed)",
                        r.reads, r.fallbacks
                    ),
                ));
            }
            for (name, size, vcs, refs) in core.st.pgs.foreign_groups() {
                items.push((
                    format!("process_group.{name}"),
                    format!("{size} ranks, {vcs} VCs, {refs} in use"),
                ));
            }
            for (vc, why) in &core.st.failed_peers {
                let key = match vc.group() {
                    0 => format!("failed_peer.{}", vc.rank()),
                    _ => format!("failed_peer.{vc}"),
                };
                items.push((key, why.clone()));
            }
        }
        Info {
            rank: self.inner.rank,
            size: self.inner.size,
            local_size: self.inner.local_size,
            items,
        }
    }

    /// Finish outstanding sends, then leave the job. Also done on drop of
    /// the last handle; calls on remaining communicators fail afterwards.
    pub fn finalize(self) -> Result<()> {
        self.parent.lock().unwrap_or_else(|p| p.into_inner()).take();
        self.inner.finalize()
    }

    /// End the whole job with `code`, through the process manager.
    pub fn abort(&self, code: i32, message: &str) -> ! {
        let mut pmi = self.inner.pmi.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = pmi.as_mut() {
            let _ = client.abort(code, message);
        }
        eprintln!("rivet: abort({code}): {message}");
        std::process::exit(code)
    }
}

fn describe(
    config: &Config,
    shm: Option<&ShmNode>,
    netmod: Option<&netmod::Opened>,
    cma: &std::result::Result<(), String>,
    yields: bool,
    shm_eager_max: usize,
) -> Vec<(String, String)> {
    let mut items = Vec::new();
    let mut add = |k: &str, v: String| items.push((k.to_string(), v));
    match shm {
        Some(s) => {
            let c = s.config();
            add("transport.shm", "on (node segment)".into());
            add(
                "shm.fastbox",
                format!(
                    "{} B ring per pair, payloads <= {} B",
                    c.fastbox_bytes, c.fastbox_max
                ),
            );
            add(
                "shm.cells",
                format!(
                    "{} per rank of {} B (max payload {} B)",
                    c.cells_per_rank,
                    c.cell_bytes,
                    s.max_payload()
                ),
            );
        }
        None => add("transport.shm", "off (no other rank on this node)".into()),
    }
    add(
        "shm.eager_max",
        format!("{shm_eager_max} B (RIVET_SHM_EAGER_MAX, RIVET_EAGER_MAX)"),
    );
    let lmt = match (config.lmt, cma) {
        (LmtMode::Copy, _) => "copy (pipelined through cells)".to_string(),
        (_, Ok(())) => format!(
            "cma (process_vm_readv single copy; from {} on the sender writes half with \
             process_vm_writev meanwhile, RIVET_SHM_SPLIT_MIN; copy if a peer refuses)",
            match config.shm_split_min {
                0 => "never".to_string(),
                n => format!("{n} B"),
            }
        ),
        (_, Err(why)) => format!("copy ({why})"),
    };
    add("shm.large_messages", lmt);
    match netmod {
        Some(netmod::Opened { netmod: n, why }) => {
            let scope = if config.netmod == NetmodChoice::Auto {
                "peers on other nodes"
            } else {
                "every peer"
            };
            add(
                "transport.netmod",
                format!("{} for {scope} ({why})", n.name()),
            );
            for (k, v) in n.describe() {
                add(&k, v);
            }
            add(
                "netmod.eager_window",
                format!(
                    "{} B per peer (RIVET_NETMOD_EAGER_WINDOW)",
                    config.eager_window
                ),
            );
        }
        None => add(
            "transport.netmod",
            "none (every peer is on this node)".into(),
        ),
    }
    let mode = match config.yield_mode {
        YieldMode::Auto => "auto",
        YieldMode::Always => "always",
        YieldMode::Never => "never",
    };
    add(
        "yield",
        format!(
            "{} (RIVET_YIELD={mode}, {} online cpus)",
            if yields {
                "yield when idle"
            } else {
                "busy poll"
            },
            crate::backoff::online_cpus()
        ),
    );
    items
}

impl Inner {
    #[inline]
    pub(crate) fn lock(&self) -> Result<EngineGuard<'_, Core>> {
        if self.finalized.load(Ordering::Relaxed) {
            return Err(Error::Finalized);
        }
        Ok(self.lock_even_finalized())
    }

    pub(crate) fn check(core: &Core) -> Result<()> {
        match &core.st.fatal {
            Some(why) => Err(Error::Failed(why.clone())),
            None => Ok(()),
        }
    }

    /// The error of a failed peer, with the reason the transport gave.
    pub(crate) fn failure_of(&self, rank: u32) -> Error {
        let core = self.lock_even_finalized();
        let vc = core
            .st
            .failed_peers
            .iter()
            .map(|(vc, _)| *vc)
            .find(|vc| vc.rank() == rank)
            .unwrap_or(VcId::world(rank));
        core.st.failure_of(vc)
    }

    /// Start a send. A standard eager send that the transport takes at
    /// once needs no request at all: it comes back finished.
    pub(crate) fn start_send<T: Threading>(&self, a: &SendArgs) -> Result<Request<'_, T>> {
        let mut core = self.lock()?;
        Self::check(&core)?;
        if core.try_send_now(a)? {
            return Ok(Request::finished(self, Status::default()));
        }
        let id = core.start_send(a)?;
        Ok(Request::new(self, id))
    }

    pub(crate) fn start_recv(
        &self,
        context: u32,
        buf: *mut u8,
        cap: usize,
        source: i32,
        source_vc: Option<VcId>,
        tag: i32,
    ) -> Result<u64> {
        let mut core = self.lock()?;
        Self::check(&core)?;
        Ok(core.start_recv(context, buf, cap, source, source_vc, tag))
    }

    /// The status if `id` is complete (freeing it); a freed handle counts
    /// as complete with an empty status.
    #[inline]
    pub(crate) fn take_if_complete(core: &mut Core, id: u64) -> Option<Status> {
        match core.st.requests.get(id) {
            Some(req) if req.complete => {
                let status = req.status;
                core.st.requests.remove(id);
                Some(status)
            }
            Some(_) => None,
            None => Some(Status::default()),
        }
    }

    pub(crate) fn test(&self, id: u64) -> Result<Option<Status>> {
        let mut core = self.lock()?;
        if let Some(s) = Self::take_if_complete(&mut core, id) {
            return Ok(Some(s));
        }
        core.progress();
        if let Some(s) = Self::take_if_complete(&mut core, id) {
            return Ok(Some(s));
        }
        Self::check(&core)?;
        Ok(None)
    }

    pub(crate) fn wait(&self, id: u64) -> Result<Status> {
        let mut backoff = Backoff::new(self.yields);
        loop {
            {
                let mut core = self.lock()?;
                if let Some(s) = Self::take_if_complete(&mut core, id) {
                    return Ok(s);
                }
                if core.progress() > 0 {
                    backoff.busy();
                    if let Some(s) = Self::take_if_complete(&mut core, id) {
                        return Ok(s);
                    }
                }
                Self::check(&core)?;
            }
            backoff.idle();
        }
    }

    pub(crate) fn cancel(&self, id: u64) -> Result<()> {
        self.lock()?.cancel(id)
    }

    /// Nobody will wait for `id`: free it now if complete, else on completion.
    pub(crate) fn detach(&self, id: u64) {
        let mut core = self.lock_even_finalized();
        if let Some(req) = core.st.requests.get_mut(id) {
            if req.complete {
                core.st.requests.remove(id);
            } else {
                req.detached = true;
            }
        }
    }

    /// Withdraw `ids`, whose buffers are about to be released: a scope
    /// ending on an error or unwinding from a panic (`unwinding`), or a
    /// blocking call that failed or is unwinding.
    ///
    /// The rule: no buffer is released while a netmod, a netmod read or a
    /// peer's single-copy write may still write into it, i.e. a receive
    /// streaming from a netmod peer (the netmod may have been handed the
    /// buffer, `State::placement`), reading from one (`rma.rs`), or sharing
    /// its copy with a shared-memory sender (`copy.rs`). Such a receive is finished first (or
    /// failed with its peer) if the engine can still do that; during a
    /// panic, or once the engine has failed, the process aborts instead:
    /// an unwind must not free memory the netmod is writing, and waiting
    /// inside it for a peer could hang forever. Everything else is
    /// withdrawn at once: shared-memory copies and our own single-copy
    /// reads are done under the engine lock, and a transport copies what
    /// it takes of a send.
    pub(crate) fn abandon(&self, ids: &[u64], unwinding: bool) {
        let mut backoff = Backoff::new(self.yields);
        loop {
            {
                let mut core = self.lock_even_finalized();
                let writer = ids.iter().find_map(|&id| core.st.remote_writer(id));
                let Some(from) = writer else {
                    core.abandon(ids);
                    return;
                };
                if unwinding || core.st.fatal.is_some() {
                    abort_for_live_buffer(from, unwinding);
                }
                core.progress();
            }
            backoff.idle();
        }
    }

    pub(crate) fn iprobe(&self, context: u32, source: i32, tag: i32) -> Result<Option<Status>> {
        let mut core = self.lock()?;
        let found = |core: &Core| {
            core.st
                .matcher
                .probe(context, source, tag)
                .map(|(env, m)| Status {
                    source: env.source as i32,
                    tag: env.tag,
                    count: m.len(),
                    cancelled: false,
                    error: None,
                })
        };
        if let Some(s) = found(&core) {
            return Ok(Some(s));
        }
        core.progress();
        Self::check(&core)?;
        Ok(found(&core))
    }

    pub(crate) fn probe(&self, context: u32, source: i32, tag: i32) -> Result<Status> {
        let mut backoff = Backoff::new(self.yields);
        loop {
            if let Some(s) = self.iprobe(context, source, tag)? {
                return Ok(s);
            }
            backoff.idle();
        }
    }

    /// Send everything still owed to peers, then tell the process manager.
    fn finalize(&self) -> Result<()> {
        if self.finalized.load(Ordering::Relaxed) {
            return Ok(());
        }
        // What peers are owed first; then a goodbye to each netmod peer, so
        // that our connections closing is not taken for a failure, and
        // theirs in answer: after it a peer sends us nothing more, so we
        // exit without leaving it talking to a closed endpoint (which some
        // providers retry until a timeout rather than fail).
        self.drain(|core| {
            !core
                .st
                .requests
                .any(|r| !r.complete && matches!(r.op, Op::Send(_)))
        });
        self.lock_even_finalized().st.say_bye();
        self.drain(|core| core.st.byes_answered());
        self.finalized.store(true, Ordering::Relaxed);
        let client = self.pmi.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(client) = client {
            client.finalize()?;
        }
        Ok(())
    }

    /// Progress until `done` holds and nothing waits to be sent, in the
    /// engine's queues or the netmod's, or until the engine has failed.
    fn drain(&self, done: impl Fn(&mut Core) -> bool) {
        let mut backoff = Backoff::new(self.yields);
        loop {
            {
                let mut core = self.lock_even_finalized();
                core.progress();
                let net_idle = core.netmod.as_ref().is_none_or(|n| n.idle());
                if (net_idle && core.st.pending_vcs.is_empty() && done(&mut core))
                    || core.st.fatal.is_some()
                {
                    return;
                }
            }
            backoff.idle();
        }
    }

    pub(crate) fn lock_even_finalized(&self) -> EngineGuard<'_, Core> {
        self.core.lock()
    }
}

/// A buffer about to be released may still be written into by `from`'s
/// netmod, and the engine can neither finish nor wait for that: end the
/// process rather than let the write land in freed memory.
#[cold]
fn abort_for_live_buffer(from: VcId, unwinding: bool) -> ! {
    let why = match unwinding {
        true => "a panic is unwinding",
        false => "the engine failed",
    };
    eprintln!(
        "rivet: {why} while {from} may still be writing into a receive buffer through the \
         netmod; aborting rather than releasing the buffer"
    );
    std::process::abort()
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.finalize();
    }
}
