//! The plain-Rust picture of one node that the mapper works on: cores in topology order, each
//! with its PUs and the package, NUMA node and L3 cache holding it.
//!
//! Built once from hwloc (see `discover.rs`); after that nothing in mapping touches hwloc.

use std::collections::HashMap;

use super::cpuset::CpuSet;

/// A hardware thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pu {
    /// OS index: the CPU number the kernel uses (what `sched_setaffinity` takes).
    pub os: u32,
    /// hwloc logical index (lstopo's `L#`).
    pub logical: usize,
}

/// A core and where it sits. `package`, `numa`, `l3` index into [`Summary`]'s domain lists.
#[derive(Debug, Clone)]
pub(crate) struct Core {
    /// hwloc logical index of the core.
    pub logical: usize,
    /// Its PUs, in logical order.
    pub pus: Vec<Pu>,
    pub package: usize,
    pub numa: usize,
    pub l3: usize,
}

/// A group of cores: a package, a NUMA node or an L3 cache.
#[derive(Debug, Clone)]
pub(crate) struct Domain {
    /// hwloc logical index of the object (0 for a stand-in when the topology has none).
    pub logical: usize,
    /// Indices into [`Summary::cores`], in topology order.
    pub cores: Vec<usize>,
    /// All PUs of those cores.
    pub cpuset: CpuSet,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum DomainKind {
    Package,
    Numa,
    L3,
}

impl DomainKind {
    pub fn name(self) -> &'static str {
        match self {
            DomainKind::Package => "socket",
            DomainKind::Numa => "numa",
            DomainKind::L3 => "l3cache",
        }
    }
}

/// One node's topology, reduced to what placement needs.
#[derive(Debug, Clone)]
pub(crate) struct Summary {
    pub cores: Vec<Core>,
    pub packages: Vec<Domain>,
    pub numas: Vec<Domain>,
    pub l3s: Vec<Domain>,
    /// Kinds the topology has no objects of; a single whole-node domain stands in for them.
    pub missing: Vec<DomainKind>,
    /// PU OS index → core index.
    pub core_of_pu: HashMap<u32, usize>,
    /// The node's CPUs before [`Summary::restricted`] kept only an affinity mask's.
    pub narrowed_from: Option<CpuSet>,
}

/// What discovery extracts for one core before domains are numbered: the hwloc logical
/// indices of its package, NUMA node and L3 (None when the topology has no such object).
pub(crate) struct RawCore {
    pub logical: usize,
    pub pus: Vec<Pu>,
    pub package: Option<usize>,
    pub numa: Option<usize>,
    pub l3: Option<usize>,
}

impl Summary {
    /// Builds the summary from per-core facts in topology order.
    pub fn from_raw(raw: Vec<RawCore>) -> Summary {
        let mut missing = Vec::new();
        let mut group = |kind: DomainKind, key: &dyn Fn(&RawCore) -> Option<usize>| {
            if raw.iter().all(|c| key(c).is_none()) {
                missing.push(kind);
            }
            // Domains sorted by logical index; cores without one share a stand-in after them.
            let mut ids: Vec<Option<usize>> = raw.iter().map(key).collect();
            ids.sort_by_key(|id| (id.is_none(), *id));
            ids.dedup();
            let domains: Vec<Domain> = ids
                .iter()
                .map(|id| {
                    let cores: Vec<usize> =
                        (0..raw.len()).filter(|&i| key(&raw[i]) == *id).collect();
                    let cpuset = CpuSet::from_cpus(
                        cores.iter().flat_map(|&i| raw[i].pus.iter().map(|p| p.os)),
                    );
                    Domain {
                        logical: id.unwrap_or(0),
                        cores,
                        cpuset,
                    }
                })
                .collect();
            let index_of: Vec<usize> = raw
                .iter()
                .map(|c| ids.iter().position(|id| *id == key(c)).unwrap_or(0))
                .collect();
            (domains, index_of)
        };
        let (packages, pkg_of) = group(DomainKind::Package, &|c| c.package);
        let (numas, numa_of) = group(DomainKind::Numa, &|c| c.numa);
        let (l3s, l3_of) = group(DomainKind::L3, &|c| c.l3);
        let mut core_of_pu = HashMap::new();
        let cores = raw
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                for p in &c.pus {
                    core_of_pu.insert(p.os, i);
                }
                Core {
                    logical: c.logical,
                    pus: c.pus,
                    package: pkg_of[i],
                    numa: numa_of[i],
                    l3: l3_of[i],
                }
            })
            .collect();
        Summary {
            cores,
            packages,
            numas,
            l3s,
            missing,
            core_of_pu,
            narrowed_from: None,
        }
    }

    /// The node as far as `allowed` reaches: its PUs only, cores and domains without one
    /// dropped, hwloc logical indices kept (so `core 3` still names lstopo's `L#3`).
    /// `None` when `allowed` holds none of the node's PUs.
    pub fn restricted(&self, allowed: &CpuSet) -> Option<Summary> {
        let logical = |kind: DomainKind, i: usize| {
            (!self.missing.contains(&kind)).then(|| self.domains(kind)[i].logical)
        };
        let raw: Vec<RawCore> = self
            .cores
            .iter()
            .filter_map(|c| {
                let pus: Vec<Pu> = c
                    .pus
                    .iter()
                    .copied()
                    .filter(|p| allowed.contains(p.os))
                    .collect();
                (!pus.is_empty()).then(|| RawCore {
                    logical: c.logical,
                    pus,
                    package: logical(DomainKind::Package, c.package),
                    numa: logical(DomainKind::Numa, c.numa),
                    l3: logical(DomainKind::L3, c.l3),
                })
            })
            .collect();
        if raw.is_empty() {
            return None;
        }
        let mut s = Summary::from_raw(raw);
        s.narrowed_from = Some(
            self.narrowed_from
                .clone()
                .unwrap_or_else(|| self.all_cpus()),
        );
        Some(s)
    }

    pub fn domains(&self, kind: DomainKind) -> &[Domain] {
        match kind {
            DomainKind::Package => &self.packages,
            DomainKind::Numa => &self.numas,
            DomainKind::L3 => &self.l3s,
        }
    }

    /// Index into [`Summary::domains`] of the domain of `kind` holding core `core`.
    pub fn domain_of(&self, kind: DomainKind, core: usize) -> usize {
        let c = &self.cores[core];
        match kind {
            DomainKind::Package => c.package,
            DomainKind::Numa => c.numa,
            DomainKind::L3 => c.l3,
        }
    }

    pub fn num_pus(&self) -> usize {
        self.cores.iter().map(|c| c.pus.len()).sum()
    }

    /// Every PU OS index of the node.
    pub fn all_cpus(&self) -> CpuSet {
        CpuSet::from_cpus(self.cores.iter().flat_map(|c| c.pus.iter().map(|p| p.os)))
    }

    /// PUs in topology order, with their core index.
    pub fn pus_in_order(&self) -> Vec<(usize, Pu)> {
        self.cores
            .iter()
            .enumerate()
            .flat_map(|(i, c)| c.pus.iter().map(move |p| (i, *p)))
            .collect()
    }
}
