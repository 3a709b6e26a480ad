//! The results of one benchmark (`Table`): what it reports, its unit and
//! keys, and its samples per (key, stack).

use super::args::Bench;
use crate::sizes;
use std::collections::BTreeMap;

/// The results of one benchmark: samples per (key, stack).
pub(super) struct Table {
    pub(super) bench: Bench,
    /// Keys (sizes, or rank counts) to report; None = all seen.
    pub(super) keys: Option<Vec<u64>>,
    /// Stack indexes that take part.
    pub(super) stacks: Vec<usize>,
    /// Stacks that measure only these keys (raw-tcp): "-" at the others.
    pub(super) only: BTreeMap<usize, &'static [u64]>,
    pub(super) samples: BTreeMap<u64, BTreeMap<usize, Vec<f64>>>,
    /// Rank 0's netmod system calls per message, per (key, stack), where
    /// the run reported them.
    pub(super) calls: BTreeMap<u64, BTreeMap<usize, Vec<f64>>>,
}

impl Table {
    pub(super) fn name(&self) -> &'static str {
        match self.bench {
            Bench::P2p(k) => k.name(),
            Bench::Startup => "startup",
            Bench::Idle => "latency-idle",
            Bench::Memory => "memory",
            Bench::Fanin => "fanin",
        }
    }

    pub(super) fn unit(&self) -> &'static str {
        match self.bench {
            Bench::P2p(k) => k.unit(),
            Bench::Startup => "s",
            Bench::Idle => "us",
            Bench::Memory => "KiB",
            Bench::Fanin => "msg/s",
        }
    }

    pub(super) fn lower_is_better(&self) -> bool {
        match self.bench {
            Bench::P2p(k) => k.lower_is_better(),
            Bench::Startup | Bench::Idle | Bench::Memory => true,
            Bench::Fanin => false,
        }
    }

    pub(super) fn key_name(&self) -> &'static str {
        match self.bench {
            Bench::P2p(_) => "size",
            Bench::Startup => "ranks",
            Bench::Idle | Bench::Memory => "idle_peers",
            Bench::Fanin => "senders",
        }
    }

    pub(super) fn wants(&self, key: u64) -> bool {
        self.keys.as_ref().is_none_or(|k| k.contains(&key))
    }

    /// The sizes a p2p bench reports (fi_pingpong runs exactly these): the
    /// keys, or with `--sizes all` the bench's ladder up to `max_size`.
    pub(super) fn run_sizes(&self, max_size: usize) -> Vec<u64> {
        match (&self.keys, self.bench) {
            (Some(k), _) => k.clone(),
            (None, Bench::P2p(kind)) => sizes::sizes_for(kind, None, Some(max_size))
                .unwrap_or_default()
                .into_iter()
                .map(|s| s as u64)
                .collect(),
            (None, _) => Vec::new(),
        }
    }

    /// Whether `stack` measures `key` at all (a missing value is a failure).
    pub(super) fn measures(&self, stack: usize, key: u64) -> bool {
        self.only.get(&stack).is_none_or(|k| k.contains(&key))
    }

    pub(super) fn add_calls(&mut self, key: u64, stack: usize, calls: f64) {
        if self.wants(key) {
            self.calls
                .entry(key)
                .or_default()
                .entry(stack)
                .or_default()
                .push(calls);
        }
    }

    pub(super) fn add(&mut self, key: u64, stack: usize, value: f64) {
        if self.wants(key) {
            self.samples
                .entry(key)
                .or_default()
                .entry(stack)
                .or_default()
                .push(value);
        }
    }
}
