//! Topology discovery, mapping and binding for `rivetrun`.
//!
//! - [`Topology`]: this machine (`discover`, narrowed to the CPUs of rivetrun's affinity mask
//!   by `restrict_to`, so ranks are placed and bound only there), or another one from an hwloc XML file or
//!   synthetic description (`load`, for `--topology`); exported as XML for `PMI_hwloc_xmlfile`.
//! - [`plan`]: turns a [`PlacementRequest`] (`-n`, `--map-by`, `--bind-to`, `-ppn`,
//!   `--cpu-list`) into a [`Placement`]: per rank its node, local rank, cpuset and position in
//!   the node/package/NUMA/core hierarchy. The rules are in `mapping.rs`.
//! - [`bind_self`]: applies a cpuset in a forked child before `exec`.
//! - [`report_line`]: a `--report-bindings` line.
//! - [`Placement::pmi_keys`]: the topology job attributes for the PMI server (formats in
//!   `rivet_pmi::topology`).
//! - [`SharedTopology`]: the discovered hwloc topology lent to the PMIx server.
//!
//! hwloc is used through `hwlocality` only in `discover.rs`; everything else works on the
//! plain [`summary`] of one node.

// rivetrun calls part of this API; the rest (PMI keys, process mapping, affinity read-back)
// is for its later features and the tests. Dead-code warnings would only be noise here.
#![allow(dead_code)]

mod binding;
mod cpuset;
mod discover;
mod error;
mod mapping;
mod policy;
mod report;
mod shared;
mod summary;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

// The API rivetrun picks from; unused re-exports are not an error in a binary crate.
#[allow(unused_imports)]
pub use binding::{bind_self, current_affinity};
#[allow(unused_imports)]
pub use cpuset::CpuSet;
#[allow(unused_imports)]
pub use error::TopologyError;
#[allow(unused_imports)]
pub use mapping::{plan, ClusterPosition, Placement, PlacementRequest, RankPlacement};
#[allow(unused_imports)]
pub use policy::{BindTo, MapBy};
#[allow(unused_imports)]
pub use report::report_line;
pub use shared::SharedTopology;

use summary::{DomainKind, Summary};

/// Where a topology came from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    ThisSystem,
    Xml(PathBuf),
    Synthetic(String),
}

/// A machine's topology: the hwloc topology plus the summary the mapper uses.
pub struct Topology {
    hw: Arc<hwlocality::Topology>,
    summary: Summary,
    source: Source,
    /// Discovered here and hwloc agrees (`HWLOC_XMLFILE` or `HWLOC_SYNTHETIC` in the
    /// environment make hwloc load something else).
    this_system: bool,
}

impl fmt::Debug for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Topology")
            .field("source", &self.source)
            .field("summary", &self.summary())
            .finish()
    }
}

impl Topology {
    /// This machine's topology, as far as rivetrun's affinity mask reaches: ranks are
    /// placed and bound only on the CPUs rivetrun may run on itself (`taskset -c 1
    /// rivetrun ...`, a batch system's cpuset), so jobs started side by side with disjoint
    /// masks do not share cores. hwloc alone drops only the CPUs a cgroup forbids.
    pub fn discover() -> Result<Topology, TopologyError> {
        let mut topo = Topology::new(discover::this_system()?, Source::ThisSystem)?;
        if topo.this_system {
            let mask = binding::current_affinity()
                .map_err(|e| TopologyError::Discover(format!("sched_getaffinity: {e}")))?;
            topo.restrict_to(&mask)?;
        }
        Ok(topo)
    }

    /// Keep only the PUs of `allowed` for placement (the hwloc topology, exported for the
    /// ranks, stays whole). Nothing changes when `allowed` covers every PU.
    pub fn restrict_to(&mut self, allowed: &CpuSet) -> Result<(), TopologyError> {
        if self.summary.all_cpus().is_subset(allowed) {
            return Ok(());
        }
        self.summary =
            self.summary
                .restricted(allowed)
                .ok_or_else(|| TopologyError::NoAllowedCpu {
                    mask: allowed.to_string(),
                    cpus: self.summary.all_cpus().to_string(),
                })?;
        Ok(())
    }

    /// The CPUs placement may use (all PUs unless [`Topology::restrict_to`] narrowed them).
    pub fn allowed_cpus(&self) -> CpuSet {
        self.summary.all_cpus()
    }

    /// Another machine's topology: `spec` is the path of an hwloc XML file (taken as one when
    /// the file exists, ends in `.xml`, or starts with `/`, `./`, `../` or `~`) or an hwloc
    /// synthetic description such as `pack:2 numa:2 core:8 pu:2`.
    pub fn load(spec: &str) -> Result<Topology, TopologyError> {
        let spec = spec.trim();
        let path = Path::new(spec);
        let looks_like_path = path.is_file()
            || spec.ends_with(".xml")
            || ["/", "./", "../", "~"].iter().any(|p| spec.starts_with(p));
        if looks_like_path {
            Topology::new(discover::xml_file(path)?, Source::Xml(path.to_path_buf()))
        } else if spec.is_empty() {
            Err(TopologyError::Synthetic {
                spec: String::new(),
                reason: "empty description".into(),
            })
        } else {
            Topology::new(
                discover::synthetic(spec)?,
                Source::Synthetic(spec.to_string()),
            )
        }
    }

    fn new(hw: hwlocality::Topology, source: Source) -> Result<Topology, TopologyError> {
        let summary = discover::summarize(&hw)?;
        let this_system = source == Source::ThisSystem && discover::hw_is_this_system(&hw);
        Ok(Topology {
            hw: Arc::new(hw),
            summary,
            source,
            this_system,
        })
    }

    /// Truth that this is the machine we run on; false for XML and synthetic topologies,
    /// whose placements are only simulated.
    pub fn is_this_system(&self) -> bool {
        self.this_system
    }

    /// This machine's hwloc topology, for the PMIx server to use rather than
    /// discover it again; None for another machine's (`--topology`).
    pub fn shared(&self) -> Option<SharedTopology> {
        self.this_system
            .then(|| SharedTopology(Arc::clone(&self.hw)))
    }

    /// Writes the topology as hwloc XML (for `PMI_hwloc_xmlfile`).
    pub fn export_xml(&self, path: &Path) -> Result<(), TopologyError> {
        discover::export_xml(&self.hw, path)
    }

    /// One line: `2 packages, 4 NUMA nodes, 4 L3 caches, 32 cores, 64 PUs (synthetic "...")`,
    /// counting only the PUs placement may use and naming the mask when it is narrower.
    pub fn summary(&self) -> String {
        let s = &self.summary;
        let count = |k: DomainKind, one: &str, many: &str| {
            let n = if s.missing.contains(&k) {
                0
            } else {
                s.domains(k).len()
            };
            format!("{n} {}", if n == 1 { one } else { many })
        };
        let narrowed = match &s.narrowed_from {
            Some(all) => format!(
                "; ranks go only on CPUs {} of {all}: rivetrun's affinity mask",
                s.all_cpus()
            ),
            None => String::new(),
        };
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        format!(
            "{}, {}, {}, {}, {} ({}{narrowed})",
            count(DomainKind::Package, "package", "packages"),
            count(DomainKind::Numa, "NUMA node", "NUMA nodes"),
            count(DomainKind::L3, "L3 cache", "L3 caches"),
            plural(s.cores.len(), "core", "cores"),
            plural(s.num_pus(), "PU", "PUs"),
            self.source_description()
        )
    }

    pub fn num_pus(&self) -> usize {
        self.summary.num_pus()
    }

    pub fn num_cores(&self) -> usize {
        self.summary.cores.len()
    }

    /// All PUs (OS indices) of the topology.
    pub fn cpus(&self) -> CpuSet {
        self.summary.all_cpus()
    }

    /// The underlying hwloc topology, for callers that need more than this module offers.
    pub fn hwloc(&self) -> &hwlocality::Topology {
        &self.hw
    }

    fn source_description(&self) -> String {
        match &self.source {
            Source::ThisSystem if self.this_system => "this machine".to_string(),
            Source::ThisSystem => "given by HWLOC_XMLFILE/HWLOC_SYNTHETIC".to_string(),
            Source::Xml(p) => format!("XML {}", p.display()),
            Source::Synthetic(s) => format!("synthetic \"{s}\""),
        }
    }
}
