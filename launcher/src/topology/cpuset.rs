//! A set of CPUs (PU OS indices) as the launcher passes it around and prints it.

use std::fmt;
use std::str::FromStr;

use rivet_pmi::topology::{format_cpu_list, parse_cpu_list};

use super::error::TopologyError;

/// Sorted, deduplicated PU OS indices. Displays as a CPU list (`0-3,8`), the same format
/// `FromStr` reads and `taskset -c`, `/sys/.../cpulist` and hwloc's `--pulist` use.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct CpuSet {
    cpus: Vec<u32>,
}

impl CpuSet {
    pub fn from_cpus(cpus: impl IntoIterator<Item = u32>) -> CpuSet {
        let mut cpus: Vec<u32> = cpus.into_iter().collect();
        cpus.sort_unstable();
        cpus.dedup();
        CpuSet { cpus }
    }

    /// The CPU numbers, ascending.
    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    pub fn len(&self) -> usize {
        self.cpus.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cpus.is_empty()
    }

    pub fn contains(&self, cpu: u32) -> bool {
        self.cpus.binary_search(&cpu).is_ok()
    }

    /// Truth that every CPU of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.cpus.iter().all(|c| other.contains(*c))
    }

    /// Truth that every CPU fits a `libc::cpu_set_t` (below `CPU_SETSIZE`).
    pub fn fits_libc(&self) -> bool {
        self.cpus.iter().all(|&c| (c as usize) < libc_setsize())
    }

    /// The set as a `cpu_set_t` for [`super::bind_self`]. Compute it in the parent, before
    /// `fork`. CPUs at or above `CPU_SETSIZE` (1024) cannot be represented and are left out;
    /// `plan` refuses such sets on a real system, so this only happens for simulated ones.
    pub fn to_libc(&self) -> libc::cpu_set_t {
        // SAFETY: cpu_set_t is a plain bit array; all-zero is the empty set (CPU_ZERO).
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in &self.cpus {
            if (c as usize) < libc_setsize() {
                // SAFETY: the index is below CPU_SETSIZE, checked just above.
                unsafe { libc::CPU_SET(c as usize, &mut set) };
            }
        }
        set
    }

    /// Reads a `cpu_set_t` back (e.g. from `sched_getaffinity`).
    pub fn from_libc(set: &libc::cpu_set_t) -> CpuSet {
        CpuSet::from_cpus(
            (0..libc_setsize())
                // SAFETY: every index is below CPU_SETSIZE.
                .filter(|&c| unsafe { libc::CPU_ISSET(c, set) })
                .map(|c| c as u32),
        )
    }
}

/// Number of CPUs a `cpu_set_t` holds.
pub(crate) fn libc_setsize() -> usize {
    8 * std::mem::size_of::<libc::cpu_set_t>()
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_cpu_list(&self.cpus))
    }
}

impl FromStr for CpuSet {
    type Err = TopologyError;

    fn from_str(s: &str) -> Result<CpuSet, TopologyError> {
        parse_cpu_list(s)
            .map(|cpus| CpuSet { cpus })
            .map_err(|reason| TopologyError::CpuList {
                text: s.to_string(),
                reason,
            })
    }
}
