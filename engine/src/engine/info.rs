//! What the engine runs with and holds: `info` (the settings, transports
//! and live objects, for `rivet-bench --info` and diagnostics), `counts`
//! (live objects of the PG/VC layer, for the reference-count tests) and
//! the netmod's system calls.

use std::sync::atomic::Ordering;

use super::Engine;
use crate::config::{Config, LmtMode, NetmodChoice, YieldMode};
use crate::netmod;
use crate::pg::PgCounts;
use crate::shm::ShmNode;
use crate::thread::Threading;

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

impl<T: Threading> Engine<T> {
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
                items.push(("netmod.parks".into(), core.parked.to_string()));
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
}

pub(super) fn describe(
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
                    "{} per rank of {} B (max payload {} B; a message up to {} B spans cells)",
                    c.cells_per_rank,
                    c.cell_bytes,
                    s.max_payload(),
                    s.max_message()
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
