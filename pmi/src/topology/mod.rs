//! Topology keys: what the launcher publishes about placement and how ranks read it.
//!
//! This file is the one place that defines both the key names and the value formats, for the
//! writer (`rivetrun`, which builds the values from its placement) and the reader (the client,
//! which parses them to answer the PMI topology queries of seed 002, "Topology Information":
//! `PMI_Topo_type`, `PMI_Topo_cluster_info`, `PMI_Topo_mesh_info`).
//!
//! Keys (all served as job attributes, `PMI_` prefixed like Hydra's own):
//!
//! | key | value | example |
//! |---|---|---|
//! | [`KEY_HWLOC_XMLFILE`] `PMI_hwloc_xmlfile` | path of an hwloc XML of the node, or `unavailable` | `/tmp/rivet-1234/topo.xml` |
//! | [`KEY_TOPO`] `PMI_rivet_topo` | [`TopoType`]: `cluster`, `mesh:<d0>x<d1>...`, `none` | `mesh:2x4` |
//! | [`rank_key`] `PMI_rivet_rank_<r>` | [`RankTopology`]: `/`-separated `field:value` pairs | see below |
//!
//! A rank value looks like
//! `node:0/local_rank:1/local_size:2/cpuset:2-3/bound:core.1/cluster:node.0.1,package.0.1,numa.0.1,core.1.0`
//! (`/`, not `;`, which PMI-2's wire cannot carry; `;` is still read):
//! - `cpuset` is a CPU list (`0-3,8`, PU OS indices, the Linux `cpulist` format), or `0x<hex>`
//!   (bit i = CPU i, most significant digit first) when the list would not fit, or `none` when
//!   the rank is not bound.
//! - `bound` names what the rank is bound to, spaces written as `.`: `core.1`, `numa.0`,
//!   `cpu-list`, `none`.
//! - `cluster` lists the levels, outermost first, each `kind.my_cluster.my_rank`: the index of
//!   the object of that kind holding the rank (the node number at the `node` level, the hwloc
//!   logical index below it), and the rank's position among the job's ranks in that object
//!   (in rank order). Levels stop at the first kind whose objects do not contain the rank's
//!   whole cpuset; an unbound rank has only the `node` level.
//!
//! Values contain no spaces (the PMI-1 wire splits on spaces) and no `=`; they are at most
//! [`MAX_VALUE_LEN`] bytes. Unknown fields are ignored when parsing, so fields can be added.
//!
//! This file holds the keys, the errors and the job-level type; `cluster.rs` the levels,
//! `rank.rs` a rank's value, `cpus.rs` the CPU-set formats, `client_queries.rs` the queries.

use std::fmt;

mod client_queries;
mod cluster;
mod cpus;
mod rank;
#[cfg(test)]
mod tests;

pub use client_queries::{queries, AttributeSource};
pub use cluster::{ClusterInfo, Level, LevelKind, MeshInfo};
pub use cpus::{format_cpu_list, format_cpu_mask, parse_cpu_list, parse_cpu_mask, MAX_CPU};
pub use rank::RankTopology;

/// Path of an hwloc XML export of the node's topology (MPICH loads it with
/// `HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM`), or [`XMLFILE_UNAVAILABLE`].
pub const KEY_HWLOC_XMLFILE: &str = "PMI_hwloc_xmlfile";
/// Value of [`KEY_HWLOC_XMLFILE`] meaning "no file"; MPICH treats it as absent.
pub const XMLFILE_UNAVAILABLE: &str = "unavailable";
/// Job-level topology type, a [`TopoType`] value.
pub const KEY_TOPO: &str = "PMI_rivet_topo";
/// Prefix of the per-rank keys; see [`rank_key`].
pub const RANK_KEY_PREFIX: &str = "PMI_rivet_rank_";
/// Longest value written: what fits one `cmd=get_result rc=0 value=...` reply line, the
/// server's own limit for attributes.
pub const MAX_VALUE_LEN: usize = crate::server::MAX_REPLY_VALUE;

/// The key holding rank `rank`'s [`RankTopology`].
pub fn rank_key(rank: u32) -> String {
    format!("{RANK_KEY_PREFIX}{rank}")
}

/// A topology value that cannot be written or parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopoFormatError {
    #[error("malformed topology value '{value}': {reason}")]
    Malformed { value: String, reason: String },
    #[error("topology value for rank {rank} would be {len} bytes, over the PMI limit of {max}")]
    TooLong { rank: u32, len: usize, max: usize },
}

fn malformed(value: &str, reason: impl Into<String>) -> TopoFormatError {
    TopoFormatError::Malformed {
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// `PMI_Topo_type`: the kind of topology the launcher describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopoType {
    /// Hierarchical: node, package, NUMA, core ([`ClusterInfo`]).
    Cluster,
    /// A logical mesh of the given dimensions ([`MeshInfo`]); the product is the job size.
    Mesh { dims: Vec<usize> },
    /// Nothing known (singleton, or a launcher that published nothing).
    None,
}

impl TopoType {
    /// The value written under [`KEY_TOPO`].
    pub fn to_value(&self) -> String {
        match self {
            TopoType::Cluster => "cluster".to_string(),
            TopoType::Mesh { dims } => format!("mesh:{}", format_dims(dims)),
            TopoType::None => "none".to_string(),
        }
    }

    /// Parses a [`KEY_TOPO`] value (`mesh dims=2x4` is accepted as a spelling of `mesh:2x4`).
    pub fn parse(value: &str) -> Result<TopoType, TopoFormatError> {
        let v = value.trim();
        match v {
            "cluster" => return Ok(TopoType::Cluster),
            "none" => return Ok(TopoType::None),
            _ => {}
        }
        let dims = v
            .strip_prefix("mesh:")
            .or_else(|| v.strip_prefix("mesh dims="))
            .or_else(|| v.strip_prefix("mesh;dims="))
            .ok_or_else(|| malformed(value, "expected 'cluster', 'mesh:<d0>x<d1>...' or 'none'"))?;
        Ok(TopoType::Mesh {
            dims: parse_dims(dims).map_err(|r| malformed(value, r))?,
        })
    }
}

impl fmt::Display for TopoType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_value())
    }
}

/// Writes mesh dimensions as `2x4x8`.
pub fn format_dims(dims: &[usize]) -> String {
    dims.iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("x")
}

/// Parses `2x4x8` (every dimension ≥ 1, at least one).
pub fn parse_dims(s: &str) -> Result<Vec<usize>, String> {
    if s.is_empty() {
        return Err("no mesh dimensions".into());
    }
    s.split('x')
        .map(|d| match d.parse::<usize>() {
            Ok(0) => Err("a mesh dimension is 0".to_string()),
            Ok(n) => Ok(n),
            Err(_) => Err(format!("mesh dimension '{d}' is not a positive integer")),
        })
        .collect()
}
