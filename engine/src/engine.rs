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

use crate::backoff::should_yield;
use crate::comm::Comm;
use crate::config::{Config, LmtMode, NetmodChoice, YieldMode};
use crate::core::Core;
use crate::dynamic::PARENT_PORT_KEY;
use crate::error::{Error, Result};
use crate::inner::Inner;
use crate::netmod;
use crate::node_map::NodeMap;
use crate::pg::{PgCounts, Pgs, ProcessGroup, VcId, Vcrt};
use crate::pmi_watch::PmiWatch;
use crate::route::{Limits, RouteLimits};
use crate::shm::{cma, ShmConfig, ShmNode};
use crate::state::{Setup, State};
use crate::thread::{EngineLock, Shared, ThreadLevel, Threading};

/// COMM_WORLD uses context ids 0 and 1, COMM_SELF 2 and 3.
const SELF_CONTEXT: u32 = 2;
const FIRST_FREE_CONTEXT: u32 = 4;

/// One per process. Cheap to clone. `Engine` (`Engine<Shared>`) and its
/// handles are `Send + Sync` and the engine locks on every call (thread
/// level MULTIPLE); `Engine<Local>` and its handles stay on one thread and
/// run without a lock below MULTIPLE (`thread.rs`).
pub struct Engine<T: Threading = Shared> {
    pub(crate) inner: Arc<Inner>,
    _threads: PhantomData<T>,
}

impl<T: Threading> Clone for Engine<T> {
    fn clone(&self) -> Self {
        Engine {
            inner: self.inner.clone(),
            _threads: PhantomData,
        }
    }
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
    let job = rivet_settings::var("RIVET_JOBID")
        .filter(|j| !j.is_empty())
        .unwrap_or_else(|| pmi.kvs_name().to_string());
    node_segment_name(&job, leader, std::process::id())
}

/// `rivet-<job>-<leader rank>-<leader pid>`, the job made safe for a file name.
pub(crate) fn node_segment_name(job: &str, leader: u32, pid: u32) -> String {
    let job: String = job
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(64)
        .collect();
    format!("rivet-{job}-{leader}-{pid}")
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
        let (client_rank, client_size) = (pmi.rank(), pmi.size());
        // Under `rivetrun --impi-client`, the world is every client's procs
        // (seed 003): this client's ranks start at `offset`.
        let impi = rivet_netmods::impi::ImpiConfig::from_env(client_rank, client_size)
            .map_err(Error::Failed)?;
        let (rank, size, offset) = match &impi {
            Some(c) => (c.rank, c.size(), c.offset),
            None => (client_rank, client_size, 0),
        };
        let node_map = NodeMap::from_client(&mut pmi)
            .shifted(offset)
            .with_force_netmod(config.netmod != NetmodChoice::Auto);
        let local: Vec<u32> = node_map.local_ranks().to_vec();
        let my_local = node_map.my_local_index();
        let use_shm = local.len() > 1 && config.netmod == NetmodChoice::Auto;

        // A netmod for peers off this node, or for all when forced; under
        // IMPI the `impi` netmod wraps it and also reaches the other clients.
        let needs_netmod = client_size > 1
            && (config.netmod != NetmodChoice::Auto || local.len() < client_size as usize);
        // Workers (`thread.rs`) in a job with a netmod: RIVET_WORKERS at
        // MULTIPLE, one below; every rank decides alike from its own level
        // (the card keys say how many, `netmod::CardKeys`), spawned
        // processes too. A one-node job on shared memory alone follows its
        // node leader's lanes instead.
        let net_workers = match level == ThreadLevel::Multiple && impi.is_none() {
            true if needs_netmod => config.workers,
            _ => 1,
        };
        let hints = netmod::Hints {
            one_node: local.len() == client_size as usize,
            one_thread: level <= ThreadLevel::Funneled,
        };
        let mut netmod = if needs_netmod {
            Some(netmod::open(
                config.netmod,
                pmi.kvs_name(),
                client_rank,
                hints,
            )?)
        } else {
            None
        };
        if let Some(cfg) = impi.clone() {
            netmod = Some(netmod::wrap_impi(cfg, netmod)?);
        }
        // Workers 1..'s own instances (their own listener or endpoint),
        // each published under its own key.
        let mut more_netmods = Vec::new();
        if let Some(opened) = &netmod {
            for _ in 1..net_workers {
                let more = netmod::open(config.netmod, pmi.kvs_name(), client_rank, hints)?;
                more_netmods.push(more.netmod);
            }
            let keys = |worker| netmod::CardKeys {
                worker,
                workers: net_workers,
            };
            pmi.put(&keys(0).key(rank), opened.netmod.business_card())?;
            for (k, more) in more_netmods.iter().enumerate() {
                pmi.put(&keys(k + 1).key(rank), more.business_card())?;
            }
        }

        let mut shm = None;
        if use_shm && my_local == 0 {
            let name = segment_name(&pmi, rank);
            let shm_config = ShmConfig::from_env()?;
            // Lanes (one per worker, `thread.rs`): in a job with a netmod,
            // one per worker of ours; in a one-node job on shared memory
            // alone, RIVET_WORKERS where the leader runs at MULTIPLE, and
            // every rank of the node follows, so that every rank maps
            // communicators to workers alike.
            let lanes = match level == ThreadLevel::Multiple
                && local.len() == size as usize
                && impi.is_none()
                && !needs_netmod
            {
                true => config.workers,
                false => net_workers,
            };
            shm = Some(ShmNode::create_lanes(
                &name,
                local.len(),
                0,
                &shm_config,
                lanes,
            )?);
            pmi.put(&shm_key(rank), &name)?;
            // If every local rank dies before attaching, nobody unlinks the
            // name: rivetrun does (seed 002's registration; elsewhere the
            // launcher's sweep or nothing, as before). Never released: the
            // last rank to attach unlinks it, and freeing a name already
            // gone is a no-op. A refusal (a proxy that does not free) only
            // leaves things as they were.
            if pmi.frees_resources() {
                if let Ok(r) = rivet_pmi::resource::Resource::shm(&name) {
                    let _ = pmi.register_resource(&r);
                }
            }
        }
        pmi.barrier()?;
        if use_shm && my_local != 0 {
            let name = pmi.get(&shm_key(local[0]))?;
            let node = ShmNode::attach(&name, local.len(), my_local)?;
            if needs_netmod && node.lanes() != net_workers {
                return Err(Error::Config {
                    name: "RIVET_WORKERS",
                    value: config.workers.to_string(),
                    why: format!(
                        "this rank runs {net_workers} worker(s) at thread level {level}, its \
                         node leader (rank {}) laid out {}: in a job with a netmod every rank \
                         must run at MULTIPLE with the same RIVET_WORKERS, or all below MULTIPLE",
                        local[0],
                        node.lanes()
                    ),
                });
            }
            shm = Some(node);
        }
        let spawned = pmi.spawned();
        let mut world = ProcessGroup::new(
            pmi.kvs_name().to_string(),
            size,
            rank,
            node_map,
            config.eager_window,
        );
        if let Some(cfg) = &impi {
            // Other clients' ranks need no card from our KVS (the impi
            // netmod knows their channels); ours publish theirs there.
            world.cards = (0..size)
                .map(|g| {
                    if cfg.is_own(g) {
                        String::new()
                    } else {
                        "impi".into()
                    }
                })
                .collect();
        }
        let engine = Engine::assemble(&config, level, world, shm, netmod, more_netmods, Some(pmi))?;
        if let Some(cfg) = &impi {
            let _ = engine.inner.impi.set(crate::impi_topo::ClientMap {
                firsts: cfg.client_firsts.clone(),
            });
        }
        if spawned {
            let link = engine.connect_to_parent()?.into_link();
            *engine
                .inner
                .parent
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = link;
        }
        Ok(engine)
    }

    /// The engine from its opened transports, however they were set up
    /// (through PMI here, or `external.rs`): worker 0's netmod, and
    /// `more_netmods` for workers 1.. (their cards published by the
    /// caller under `netmod::CardKeys`).
    pub(crate) fn assemble(
        config: &Config,
        level: ThreadLevel,
        world: ProcessGroup,
        shm: Option<ShmNode>,
        netmod: Option<netmod::Opened>,
        more_netmods: Vec<Box<dyn rivet_netmods::Netmod>>,
        pmi: Option<Client>,
    ) -> Result<Engine<T>> {
        let (rank, size) = (world.my_rank, world.size);
        if rank == 0 {
            // Typos in RIVET_* names would otherwise be ignored silently.
            rivet_settings::warn_unknown_once();
        }
        let local_size = world.node_map.local_ranks().len();
        let cma_probe = if config.lmt == LmtMode::Copy {
            Err("off (RIVET_SHM_LMT=copy)".to_string())
        } else {
            cma::probe()
        };
        let yields = should_yield(config.yield_mode, local_size);
        // Workers 1.. (`thread.rs`): one per further lane of the node
        // segment and per further netmod instance (as many of each where
        // both are open, `init_thread`).
        let mut shm = shm;
        let lanes = match shm.as_mut() {
            Some(node) => node.take_lanes(),
            None => Vec::new(),
        };
        let workers = 1 + lanes.len().max(more_netmods.len());
        let (shm_eager_max, shm_piece) = match &shm {
            Some(s) => (config.shm_eager_max.min(s.max_payload()), s.max_payload()),
            None => (config.shm_eager_max, 64 * 1024),
        };
        let mut info = describe(
            config,
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
                    "each worker's state behind its own lock"
                } else {
                    "no lock: handles stay on one thread"
                }
            ),
        ));
        info.push((
            "workers".into(),
            match workers {
                1 => "1".into(),
                n => format!(
                    "{n} (communicators of our world spread by context id; each worker its own {}; \
                     RIVET_WORKERS)",
                    match (lanes.is_empty(), more_netmods.is_empty()) {
                        (false, true) => "shared-memory lane",
                        (true, false) => "netmod instance",
                        _ => "shared-memory lane and netmod instance",
                    }
                ),
            },
        ));
        info.push((
            "bootstrap".into(),
            match &pmi {
                Some(c) if c.kind() == "pmix" => "process manager (PMIx, OpenPMIx client)".into(),
                Some(c) if c.kind() == "singleton" => "none (singleton)".into(),
                Some(c) if c.kind() == "pmi2" => "process manager (PMI-2)".into(),
                Some(_) => "process manager (PMI-1)".into(),
                None => "external (addresses exchanged by the caller)".into(),
            },
        ));
        let netmod = netmod.map(|o| o.netmod);
        // The netmod's limits are set when `Core` takes it.
        let limits = Setup {
            limits: RouteLimits {
                shm: Limits {
                    eager_max: shm_eager_max,
                    piece: shm_piece,
                },
                net: Limits {
                    eager_max: 0,
                    piece: 1,
                },
            },
            cma_allowed: cma_probe.is_ok(),
            split_min: config.shm_split_min,
        };
        // The launcher's death ends this process (`pmi_watch.rs`).
        let watch = match pmi.as_ref().and_then(Client::connection_fd) {
            Some(fd) => Some(PmiWatch::start(fd, rank).map_err(|source| Error::Io {
                what: "starting the PMI connection watch".into(),
                source,
            })?),
            None => None,
        };
        let pmi = Arc::new(Mutex::new(pmi));
        let spread = workers as u32;
        let net_workers = 1 + more_netmods.len();
        let keys = |worker| netmod::CardKeys {
            worker,
            workers: net_workers,
        };
        let mut lanes = lanes.into_iter();
        let mut more_netmods = more_netmods.into_iter();
        let others: Box<[EngineLock<Core>]> = (1..workers)
            .map(|w| {
                let st = State::for_worker(Pgs::new(world.fresh()), limits, w);
                let mut core = Core::new(lanes.next(), more_netmods.next(), pmi.clone(), st);
                core.cards = keys(w);
                EngineLock::new(core, level)
            })
            .collect();
        let st = State::new(Pgs::new(world), limits);
        let mut core = Core::new(shm, netmod, pmi.clone(), st);
        core.cards = keys(0);
        Ok(Engine {
            inner: Arc::new(Inner {
                core: EngineLock::new(core, level),
                lanes: others,
                spread,
                level,
                rank,
                size,
                yields,
                next_context: AtomicU32::new(FIRST_FREE_CONTEXT),
                pmi,
                pmi_watch: Mutex::new(watch),
                finalized: AtomicBool::new(false),
                info,
                local_size: local_size as u32,
                netmod_choice: config.netmod,
                world_vcrt: Arc::new(Vcrt::world(size)),
                self_vcrt: Arc::new(Vcrt::table(vec![VcId::world(rank)], Weak::new())),
                vcrts: AtomicUsize::new(0),
                parent: Mutex::new(None),
                groups: Mutex::default(),
                impi: std::sync::OnceLock::new(),
            }),
            _threads: PhantomData,
        })
    }

    /// Started by `spawn`: connect to the parents through the port they
    /// pre-put in our KVS (seed 001, spawnees' column).
    fn connect_to_parent(&self) -> Result<Comm<T>> {
        let port = self.inner.with_pmi(|pmi| pmi.get(PARENT_PORT_KEY))?;
        self.world().connect(&port, 0)
    }

    /// The thread level this engine provides.
    pub fn thread_level(&self) -> ThreadLevel {
        self.inner.level
    }

    /// The intercommunicator to the processes that spawned this one, if
    /// it was spawned (MPI_Comm_get_parent); `None` again once it has been
    /// disconnected.
    pub fn parent(&self) -> Option<Comm<T>> {
        let link = self.inner.parent.lock().unwrap_or_else(|p| p.into_inner());
        link.as_ref().map(|l| Comm::from_link(&self.inner, l))
    }

    /// Live objects of the PG/VC layer: process groups, VCs, VC tables,
    /// connections, ports. Tests check they return to their baseline.
    pub fn counts(&self) -> Counts {
        let core = self.inner.lock_even_finalized();
        let (pg, ports) = (core.st.pg_counts(), core.st.ports_open());
        drop(core);
        Counts {
            pg,
            vcrts: self.inner.vcrts.load(Ordering::Relaxed),
            connections: self.per_worker_netmod(|n| n.peer_count() as u64) as usize,
            ports,
        }
    }

    /// `f` of each worker's netmod, summed (0 without one); one worker's
    /// lock at a time.
    fn per_worker_netmod(&self, f: impl Fn(&dyn rivet_netmods::Netmod) -> u64) -> u64 {
        (0..self.inner.workers())
            .map(|w| self.inner.worker(w).lock().netmod().map_or(0, &f))
            .sum()
    }

    pub fn rank(&self) -> u32 {
        self.inner.rank
    }

    /// The process manager's application number and universe size for
    /// this job (MPI's `APPNUM` and `UNIVERSE_SIZE` attributes; PMI's
    /// `-1` where it has none). Unsupported without a process manager.
    pub fn job_attrs(&self) -> Result<(i32, i32)> {
        self.inner
            .with_pmi(|pmi| Ok((pmi.appnum(), pmi.universe_size())))
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

    /// Poll every transport of every worker once; the number of events
    /// handled. A worker another thread is already progressing counts as
    /// done.
    pub fn progress(&self) -> usize {
        (0..self.inner.workers())
            .filter_map(|w| self.inner.worker(w).try_lock().map(|mut c| c.progress()))
            .sum()
    }

    /// A barrier of the whole job through the process manager: first
    /// everything queued to be sent is handed to the transports (progress
    /// until the netmod's queues are empty), then this thread blocks
    /// reading the PMI connection (no CPU) until every process of the job
    /// has called it. The engine makes no progress meanwhile: for
    /// benchmarks that need ranks asleep while others measure
    /// (`rivet-bench latency --idle-peers`).
    pub fn pmi_barrier(&self) -> Result<()> {
        self.inner.drain(|_| true);
        self.inner.with_pmi(|pmi| pmi.barrier())
    }

    /// System calls the netmod has made for I/O so far, where it counts
    /// them (the tcp netmod does; every worker's instance, summed); `None`
    /// without a netmod, or once finalized.
    pub fn netmod_syscalls(&self) -> Option<u64> {
        let core = self.inner.lock().ok()?;
        core.netmod().and_then(|n| n.syscalls())?;
        drop(core);
        Some(self.per_worker_netmod(|n| n.syscalls().unwrap_or(0)))
    }

    pub fn info(&self) -> Info {
        let mut items = self.inner.info.clone();
        if let Ok(core) = self.inner.lock() {
            let pg = core.st.world();
            items.push((
                "process_group".into(),
                format!(
                    "{} ({} ranks, {} on this node, {} VCs open, {} requests in flight)",
                    pg.id,
                    pg.size,
                    pg.node_map.local_ranks().len(),
                    pg.open_vcs(),
                    core.st.requests_live()
                ),
            ));
            let (shm, net) = pg.vcs_by_path();
            items.push(("vcs".into(), format!("{shm} shm, {net} netmod")));
            let c = core.st.pg_counts();
            items.push((
                "pg_counts".into(),
                format!(
                    "{} process groups, {} foreign VCs ({} in use), {} temporary VCs, {} VC tables, {} connections, {} ports open",
                    c.process_groups,
                    c.foreign_vcs,
                    c.referenced_vcs,
                    c.temp_vcs,
                    self.inner.vcrts.load(Ordering::Relaxed),
                    core.netmod().map_or(0, |n| n.peer_count()),
                    core.st.ports_open()
                ),
            ));
            if core.shm().is_some() {
                let (whole, shared) = core.st.single_copies();
                items.push((
                    "shm.single_copy_reads".into(),
                    format!("{whole} whole, {shared} shared with the sender"),
                ));
            }
            if let Some(n) = core.netmod().and_then(|n| n.syscalls()) {
                items.push(("netmod.syscalls".into(), n.to_string()));
            }
            if core.netmod().is_some() {
                let (done, streamed) = core.st.netmod_reads();
                items.push((
                    "netmod.rendezvous_reads".into(),
                    format!("{done} done, {streamed} streamed instead (a read refused or failed)"),
                ));
            }
            for (name, size, vcs, refs) in core.st.foreign_groups() {
                items.push((
                    format!("process_group.{name}"),
                    format!("{size} ranks, {vcs} VCs, {refs} in use"),
                ));
            }
            for (vc, why) in core.st.failed_peers() {
                let key = match vc.group() {
                    0 => format!("failed_peer.{}", vc.rank()),
                    _ => format!("failed_peer.{vc}"),
                };
                items.push((key, why.to_string()));
            }
        }
        // Each worker's own transports (`thread.rs`), one lock at a time.
        for w in (0..self.inner.workers()).filter(|_| self.inner.workers() > 1) {
            let core = self.inner.worker(w).lock();
            let (shm, net) = core.st.world().vcs_by_path();
            let netmod = match core.netmod() {
                Some(n) => format!("{} with {} connections", n.name(), n.peer_count()),
                None => "none".into(),
            };
            items.push((
                format!("worker.{w}"),
                format!("{shm} shm VCs, {net} netmod VCs open; netmod: {netmod}"),
            ));
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
        None if config.netmod != NetmodChoice::Auto => add(
            "transport.shm",
            format!(
                "off (RIVET_NETMOD={}: every peer through the netmod)",
                if config.netmod == NetmodChoice::Tcp {
                    "tcp"
                } else {
                    "ofi"
                }
            ),
        ),
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
