//! The results of one benchmark (`Table`): what it reports, its unit and
//! keys, and its samples per (key, stack).

use super::args::Bench;
use crate::placement::{self, Class, Probe};
use crate::sizes;
use std::collections::BTreeMap;

/// The results of one benchmark: samples per (key, stack).
#[derive(Clone)]
pub(super) struct Table {
    pub(super) bench: Bench,
    /// Keys (sizes, or rank counts) to report; None = all seen.
    pub(super) keys: Option<Vec<u64>>,
    /// Stack indexes that take part.
    pub(super) stacks: Vec<usize>,
    /// Stacks that measure only these keys (raw-tcp): "-" at the others.
    pub(super) only: BTreeMap<usize, &'static [u64]>,
    pub(super) samples: BTreeMap<u64, BTreeMap<usize, Vec<f64>>>,
    /// Each sample's run's placement probe, in the same order as `samples`.
    pub(super) probes: BTreeMap<u64, BTreeMap<usize, Vec<Option<Probe>>>>,
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

    #[cfg(test)]
    pub(super) fn add(&mut self, key: u64, stack: usize, value: f64) {
        self.add_probed(key, stack, value, None);
    }

    /// A sample with its run's placement probe.
    pub(super) fn add_probed(&mut self, key: u64, stack: usize, value: f64, probe: Option<Probe>) {
        if self.wants(key) {
            self.samples
                .entry(key)
                .or_default()
                .entry(stack)
                .or_default()
                .push(value);
            self.probes
                .entry(key)
                .or_default()
                .entry(stack)
                .or_default()
                .push(probe);
        }
    }

    /// The placement probes of the table's runs that had them.
    fn run_probes(&self) -> impl Iterator<Item = &Probe> + '_ {
        self.probes
            .values()
            .flat_map(|m| m.values().flatten().flatten())
    }

    /// Every placement probe value of the table's runs (before and after each).
    pub(super) fn probe_values(&self) -> impl Iterator<Item = f64> + '_ {
        self.run_probes().flat_map(|p| [p.before, p.after])
    }

    /// The table with only the samples of runs in placement `class`
    /// (`split_ns` parts the placements) and the keys they measured; no
    /// system call counts.
    pub(super) fn placed(&self, split_ns: f64, class: Class) -> Table {
        let mut t = Table {
            samples: BTreeMap::new(),
            probes: BTreeMap::new(),
            calls: BTreeMap::new(),
            ..self.clone()
        };
        for (&key, per) in &self.probes {
            for (&stack, probes) in per {
                let values = &self.samples[&key][&stack];
                for (&v, p) in values.iter().zip(probes) {
                    if p.and_then(|p| p.class(split_ns)) == Some(class) {
                        t.add_probed(key, stack, v, *p);
                    }
                }
            }
        }
        // Only the keys some run of this placement measured.
        if let Some(keys) = &mut t.keys {
            keys.retain(|k| t.samples.contains_key(k));
        }
        t
    }
}

/// The split between the two placements of a comparison's runs
/// (`placement::split` over every probe), if they had two.
pub(super) fn placement_split(tables: &[Table]) -> Option<f64> {
    let values: Vec<f64> = tables.iter().flat_map(Table::probe_values).collect();
    placement::split(&values)
}

/// How many runs of the comparison had placement `class` (`None`: the
/// host moved the CPUs during the run).
pub(super) fn runs_placed(tables: &[Table], split_ns: f64, class: Option<Class>) -> usize {
    tables
        .iter()
        .flat_map(Table::run_probes)
        .filter(|p| p.class(split_ns) == class)
        .count()
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::table;
    use super::*;
    use crate::sizes::Kind;

    #[test]
    fn a_placement_keeps_its_own_runs() {
        let mut t = table(Bench::P2p(Kind::Bw), Some(vec![8, 16]), vec![0, 1]);
        let p = |before, after| Some(Probe { before, after });
        t.add_probed(8, 0, 4500.0, p(110.0, 120.0));
        t.add_probed(8, 0, 2400.0, p(500.0, 490.0));
        t.add_probed(8, 0, 3000.0, p(110.0, 500.0));
        t.add_probed(8, 1, 2500.0, p(480.0, 520.0));
        t.add(8, 1, 4000.0);
        t.add_calls(8, 0, 0.2);
        assert_eq!(t.probe_values().count(), 8);
        let near = t.placed(300.0, Class::Near);
        assert_eq!(near.samples[&8][&0], [4500.0]);
        assert!(!near.samples[&8].contains_key(&1));
        assert!(near.calls.is_empty());
        let far = t.placed(300.0, Class::Far);
        assert_eq!(far.samples[&8][&0], [2400.0]);
        assert_eq!(far.samples[&8][&1], [2500.0]);
        assert_eq!(far.stacks, [0, 1]);
        // A key no run of a placement measured is not among its keys.
        t.add_probed(16, 0, 4400.0, p(100.0, 100.0));
        assert_eq!(t.placed(300.0, Class::Far).keys, Some(vec![8]));
        assert_eq!(t.placed(300.0, Class::Near).keys, Some(vec![8, 16]));
    }
}
