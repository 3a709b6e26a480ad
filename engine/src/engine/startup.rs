//! Start-up: bootstrap through the process manager (PMI), open the
//! transports (the node segment, the netmod, one of each per worker), and
//! assemble the engine from them; a spawned process then connects back to
//! its parents (`Engine::connect_to_parent`, `dynamic/spawn.rs`).

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize};
use std::sync::{Arc, Mutex, Weak};

use rivet_pmi::Client;

use super::info::describe;
use super::{Engine, FIRST_FREE_CONTEXT};
use crate::backoff::should_yield;
use crate::config::{Config, LmtMode, NetmodChoice};
use crate::core::Core;
use crate::error::{Error, Result};
use crate::inner::Inner;
use crate::netmod;
use crate::node_map::NodeMap;
use crate::pg::{Pgs, ProcessGroup, VcId, Vcrt};
use crate::pmi_watch::PmiWatch;
use crate::route::{Limits, RouteLimits};
use crate::shm::{cma, ShmConfig, ShmNode};
use crate::state::{Setup, State};
use crate::thread::{EngineLock, ThreadLevel, Threading};

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
            Some(s) => (config.shm_eager_max.min(s.max_message()), s.max_payload()),
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
                self_vcrt: Arc::new(Vcrt::table(vec![VcId::world(rank)], Weak::<Inner>::new())),
                vcrts: AtomicUsize::new(0),
                parent: Mutex::new(None),
                groups: Mutex::default(),
                impi: std::sync::OnceLock::new(),
            }),
            _threads: PhantomData,
        })
    }
}
