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

use std::fmt;

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

/// `PMI_Topo_mesh_info`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshInfo {
    pub dims: Vec<usize>,
}

/// A level of the cluster hierarchy, outermost first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LevelKind {
    Node,
    Package,
    Numa,
    Core,
}

impl LevelKind {
    /// All levels, outermost first.
    pub const ALL: [LevelKind; 4] = [
        LevelKind::Node,
        LevelKind::Package,
        LevelKind::Numa,
        LevelKind::Core,
    ];

    pub fn name(self) -> &'static str {
        match self {
            LevelKind::Node => "node",
            LevelKind::Package => "package",
            LevelKind::Numa => "numa",
            LevelKind::Core => "core",
        }
    }

    pub fn from_name(s: &str) -> Option<LevelKind> {
        LevelKind::ALL.into_iter().find(|k| k.name() == s)
    }
}

impl fmt::Display for LevelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One level of `PMI_Topo_cluster_info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    pub kind: LevelKind,
    /// Index of the object of this kind that holds the rank (node number for `Node`).
    pub my_cluster: u32,
    /// Position of the rank among the job's ranks in that object, in rank order.
    pub my_rank: u32,
}

/// `PMI_Topo_cluster_info`: `levels.len()` is the number of levels, then per level
/// `my_cluster[i]` and `my_rank[i]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterInfo {
    pub levels: Vec<Level>,
}

impl ClusterInfo {
    /// What a singleton knows: one node, and it is rank 0 there.
    pub fn singleton() -> ClusterInfo {
        ClusterInfo {
            levels: vec![Level {
                kind: LevelKind::Node,
                my_cluster: 0,
                my_rank: 0,
            }],
        }
    }

    /// `my_cluster[]` as in the seed's C signature.
    pub fn my_cluster(&self) -> Vec<u32> {
        self.levels.iter().map(|l| l.my_cluster).collect()
    }

    /// `my_rank[]` as in the seed's C signature.
    pub fn my_rank(&self) -> Vec<u32> {
        self.levels.iter().map(|l| l.my_rank).collect()
    }

    fn to_value(&self) -> String {
        self.levels
            .iter()
            .map(|l| format!("{}.{}.{}", l.kind, l.my_cluster, l.my_rank))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn parse(s: &str) -> Result<ClusterInfo, String> {
        if s.is_empty() {
            return Ok(ClusterInfo::default());
        }
        let mut levels = Vec::new();
        for item in s.split(',') {
            let mut it = item.split('.');
            let (Some(kind), Some(c), Some(r), None) = (it.next(), it.next(), it.next(), it.next())
            else {
                return Err(format!("cluster level '{item}' is not kind.cluster.rank"));
            };
            let kind = LevelKind::from_name(kind)
                .ok_or_else(|| format!("unknown cluster level kind '{kind}'"))?;
            if levels.last().is_some_and(|l: &Level| l.kind >= kind) {
                return Err(format!("cluster level '{kind}' out of order"));
            }
            let num = |x: &str| {
                x.parse::<u32>()
                    .map_err(|_| format!("'{x}' in '{item}' is not a number"))
            };
            levels.push(Level {
                kind,
                my_cluster: num(c)?,
                my_rank: num(r)?,
            });
        }
        Ok(ClusterInfo { levels })
    }
}

/// Everything the launcher tells one rank about its placement (`PMI_rivet_rank_<r>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankTopology {
    /// Node number within the job (0-based).
    pub node: u32,
    pub local_rank: u32,
    pub local_size: u32,
    /// PU OS indices the rank is bound to, sorted; `None` = not bound.
    pub cpuset: Option<Vec<u32>>,
    /// What it is bound to, human form: `core 1`, `numa 0`, `cpu-list`, `none`.
    pub bound: String,
    pub cluster: ClusterInfo,
}

impl RankTopology {
    /// The value for [`rank_key`]; `rank` is only used in the error message.
    pub fn to_value(&self, rank: u32) -> Result<String, TopoFormatError> {
        if self.bound.is_empty() || self.bound.contains([';', '/', ':', '.', '=', '\n']) {
            return Err(malformed(
                &self.bound,
                "bound description must be non-empty and contain no ';', '/', ':', '.', '=' or newline",
            ));
        }
        let head = format!(
            "node:{}/local_rank:{}/local_size:{}/cpuset:",
            self.node, self.local_rank, self.local_size
        );
        let tail = format!(
            "/bound:{}/cluster:{}",
            self.bound.replace(' ', "."),
            self.cluster.to_value()
        );
        let list = match &self.cpuset {
            None => "none".to_string(),
            Some(cpus) => format_cpu_list(cpus),
        };
        let mut v = format!("{head}{list}{tail}");
        if v.len() > MAX_VALUE_LEN {
            if let Some(cpus) = &self.cpuset {
                v = format!("{head}{}{tail}", format_cpu_mask(cpus));
            }
        }
        if v.len() > MAX_VALUE_LEN {
            return Err(TopoFormatError::TooLong {
                rank,
                len: v.len(),
                max: MAX_VALUE_LEN,
            });
        }
        Ok(v)
    }

    /// Parses a [`rank_key`] value. `node`, `local_rank` and `local_size` are required.
    pub fn parse(value: &str) -> Result<RankTopology, TopoFormatError> {
        let (mut node, mut local_rank, mut local_size) = (None, None, None);
        let mut cpuset = None;
        let mut bound = None;
        let mut cluster = ClusterInfo::default();
        for field in value.trim_end_matches('\n').split([';', '/']) {
            let Some((k, v)) = field.split_once(':') else {
                return Err(malformed(
                    value,
                    format!("field '{field}' is not name:value"),
                ));
            };
            let num = |v: &str| {
                v.parse::<u32>()
                    .map_err(|_| malformed(value, format!("{k} '{v}' is not a number")))
            };
            match k {
                "node" => node = Some(num(v)?),
                "local_rank" => local_rank = Some(num(v)?),
                "local_size" => local_size = Some(num(v)?),
                "cpuset" => {
                    cpuset = match v {
                        "none" => None,
                        _ if v.starts_with("0x") => {
                            Some(parse_cpu_mask(v).map_err(|r| malformed(value, r))?)
                        }
                        _ => Some(parse_cpu_list(v).map_err(|r| malformed(value, r))?),
                    }
                }
                "bound" => {
                    if v.is_empty() {
                        return Err(malformed(value, "empty bound"));
                    }
                    bound = Some(v.replace('.', " "));
                }
                "cluster" => cluster = ClusterInfo::parse(v).map_err(|r| malformed(value, r))?,
                _ => {} // a newer writer's field
            }
        }
        let (Some(node), Some(local_rank), Some(local_size)) = (node, local_rank, local_size)
        else {
            return Err(malformed(
                value,
                "node, local_rank and local_size are required",
            ));
        };
        if local_rank >= local_size {
            return Err(malformed(value, "local_rank must be below local_size"));
        }
        Ok(RankTopology {
            node,
            local_rank,
            local_size,
            bound: bound
                .unwrap_or_else(|| if cpuset.is_some() { "cpu-list" } else { "none" }.into()),
            cpuset,
            cluster,
        })
    }
}

/// Writes sorted CPU numbers as a list with ranges: `[0,1,2,3,8]` → `0-3,8`; empty → ``.
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

/// Largest CPU number accepted in a list (keeps a hostile `0-4294967295` from allocating).
pub const MAX_CPU: u32 = 1 << 20;

/// Parses `0-3,8` into sorted, deduplicated CPU numbers. Empty items, reversed ranges and
/// numbers above [`MAX_CPU`] are errors; so is an empty list.
pub fn parse_cpu_list(s: &str) -> Result<Vec<u32>, String> {
    let num = |x: &str| -> Result<u32, String> {
        let n = x
            .trim()
            .parse::<u32>()
            .map_err(|_| format!("'{x}' is not a CPU number"))?;
        if n > MAX_CPU {
            return Err(format!("CPU {n} is above the limit of {MAX_CPU}"));
        }
        Ok(n)
    };
    if s.trim().is_empty() {
        return Err("empty CPU list".into());
    }
    // One bit per CPU up to the largest named: repeated ranges cost their
    // text, not their width (a list of many `0-1048576` stays small).
    let mut bits: Vec<u64> = Vec::new();
    let mut mark = |a: u32, b: u32| {
        let need = b as usize / 64 + 1;
        if bits.len() < need {
            bits.resize(need, 0);
        }
        let (mut c, b) = (a as usize, b as usize);
        while c <= b {
            if c % 64 == 0 && c + 63 <= b {
                bits[c / 64] = u64::MAX;
                c += 64;
            } else {
                bits[c / 64] |= 1 << (c % 64);
                c += 1;
            }
        }
    };
    for item in s.split(',') {
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("range '{item}' goes backwards"));
                }
                mark(a, b);
            }
            None => {
                let n = num(item)?;
                mark(n, n);
            }
        }
    }
    Ok((0..bits.len() * 64)
        .filter(|&c| bits[c / 64] & (1 << (c % 64)) != 0)
        .map(|c| c as u32)
        .collect())
}

/// Writes CPU numbers as `0x<hex>`, bit i = CPU i, most significant digit first.
pub fn format_cpu_mask(cpus: &[u32]) -> String {
    let Some(&max) = cpus.iter().max() else {
        return "0x0".into();
    };
    let mut nibbles = vec![0u8; max as usize / 4 + 1];
    for &c in cpus {
        nibbles[c as usize / 4] |= 1 << (c % 4);
    }
    let mut out = String::from("0x");
    for n in nibbles.iter().rev() {
        out.push(char::from_digit(u32::from(*n), 16).unwrap_or('0'));
    }
    out
}

/// Parses the `0x<hex>` form of [`format_cpu_mask`]; an empty mask is an error.
pub fn parse_cpu_mask(s: &str) -> Result<Vec<u32>, String> {
    let hex = s
        .strip_prefix("0x")
        .ok_or_else(|| format!("'{s}' does not start with 0x"))?;
    if hex.is_empty() || hex.len() > (MAX_CPU as usize / 4) {
        return Err(format!("CPU mask '{s}' has a bad length"));
    }
    let mut cpus = Vec::new();
    for (i, ch) in hex.chars().rev().enumerate() {
        let d = ch
            .to_digit(16)
            .ok_or_else(|| format!("'{ch}' in CPU mask is not a hex digit"))?;
        for b in 0..4 {
            if d & (1 << b) != 0 {
                cpus.push((i * 4 + b) as u32);
            }
        }
    }
    if cpus.is_empty() {
        return Err("empty CPU mask".into());
    }
    Ok(cpus)
}

/// What the topology queries need from a PMI client: job attributes and the rank's identity.
/// The client implements it (answering "not found" with `Ok(None)`); tests use a map.
pub trait AttributeSource {
    type Error;
    /// The value of a job attribute (`PMI_...`), or `None` if the process manager has none.
    fn job_attribute(&mut self, key: &str) -> Result<Option<String>, Self::Error>;
    fn rank(&self) -> u32;
    fn size(&self) -> u32;
    /// The error for a published value under `key` that does not parse.
    fn malformed(&self, key: &str, err: TopoFormatError) -> Self::Error;
}

/// The topology queries of seed 002, on any [`AttributeSource`] (the client's methods call
/// these).
pub mod queries {
    use super::*;

    fn attribute<S: AttributeSource>(src: &mut S, key: &str) -> Result<Option<String>, S::Error> {
        Ok(src.job_attribute(key)?.filter(|v| !v.is_empty()))
    }

    /// `PMI_Topo_type`: what the launcher published, or [`TopoType::None`].
    pub fn topo_type<S: AttributeSource>(src: &mut S) -> Result<TopoType, S::Error> {
        match attribute(src, KEY_TOPO)? {
            Some(v) => TopoType::parse(&v).map_err(|e| src.malformed(KEY_TOPO, e)),
            None => Ok(TopoType::None),
        }
    }

    /// This rank's placement, or `None` when the launcher published nothing (Hydra,
    /// singleton).
    pub fn my_topology<S: AttributeSource>(src: &mut S) -> Result<Option<RankTopology>, S::Error> {
        let key = rank_key(src.rank());
        match attribute(src, &key)? {
            Some(v) => RankTopology::parse(&v)
                .map(Some)
                .map_err(|e| src.malformed(&key, e)),
            None => Ok(None),
        }
    }

    /// `PMI_Topo_cluster_info`: the published levels; a singleton has one level (node 0,
    /// rank 0); `None` when nothing is known (`PMI_ERR_UNSUPPORTED`).
    pub fn cluster_info<S: AttributeSource>(src: &mut S) -> Result<Option<ClusterInfo>, S::Error> {
        match my_topology(src)? {
            Some(t) => Ok(Some(t.cluster)),
            None if src.size() <= 1 => Ok(Some(ClusterInfo::singleton())),
            None => Ok(None),
        }
    }

    /// `PMI_Topo_mesh_info`: the dimensions when the job is a mesh, else `None`.
    pub fn mesh_info<S: AttributeSource>(src: &mut S) -> Result<Option<MeshInfo>, S::Error> {
        Ok(match topo_type(src)? {
            TopoType::Mesh { dims } => Some(MeshInfo { dims }),
            _ => None,
        })
    }

    /// `PMI_hwloc_xmlfile` as a path; `None` when absent or `unavailable`.
    pub fn hwloc_xmlfile<S: AttributeSource>(
        src: &mut S,
    ) -> Result<Option<std::path::PathBuf>, S::Error> {
        Ok(attribute(src, KEY_HWLOC_XMLFILE)?
            .filter(|v| v != XMLFILE_UNAVAILABLE)
            .map(std::path::PathBuf::from))
    }
}

impl AttributeSource for crate::client::Client {
    type Error = crate::Error;

    fn job_attribute(&mut self, key: &str) -> crate::Result<Option<String>> {
        crate::client::Client::job_attribute(self, key)
    }

    fn rank(&self) -> u32 {
        crate::client::Client::rank(self)
    }

    fn size(&self) -> u32 {
        crate::client::Client::size(self)
    }

    fn malformed(&self, key: &str, err: TopoFormatError) -> crate::Error {
        crate::Error::Malformed {
            reason: format!("job attribute {key}: {err}"),
        }
    }
}

/// The topology queries of seed 002 ("Topology Information").
impl crate::client::Client {
    /// `PMI_Topo_type`: cluster, mesh, or none (singleton, or nothing published).
    pub fn topo_type(&mut self) -> crate::Result<TopoType> {
        queries::topo_type(self)
    }

    /// `PMI_Topo_cluster_info`: `levels.len()`, `my_cluster[]`, `my_rank[]`. A singleton
    /// gets one level (node 0, rank 0); `None` when the launcher published nothing (Hydra).
    pub fn cluster_info(&mut self) -> crate::Result<Option<ClusterInfo>> {
        queries::cluster_info(self)
    }

    /// `PMI_Topo_mesh_info`: the dimensions when the job is a mesh, else `None`.
    pub fn mesh_info(&mut self) -> crate::Result<Option<MeshInfo>> {
        queries::mesh_info(self)
    }

    /// Everything `rivetrun` published about this rank (node, local rank and size, cpuset,
    /// binding, cluster levels); `None` when nothing was published (Hydra, singleton).
    pub fn my_topology(&mut self) -> crate::Result<Option<RankTopology>> {
        queries::my_topology(self)
    }

    /// `PMI_hwloc_xmlfile` as a path; `None` when absent or `unavailable`.
    pub fn hwloc_xmlfile(&mut self) -> crate::Result<Option<std::path::PathBuf>> {
        queries::hwloc_xmlfile(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RankTopology {
        RankTopology {
            node: 0,
            local_rank: 1,
            local_size: 2,
            cpuset: Some(vec![2, 3]),
            bound: "core 1".into(),
            cluster: ClusterInfo {
                levels: vec![
                    Level {
                        kind: LevelKind::Node,
                        my_cluster: 0,
                        my_rank: 1,
                    },
                    Level {
                        kind: LevelKind::Package,
                        my_cluster: 0,
                        my_rank: 1,
                    },
                    Level {
                        kind: LevelKind::Numa,
                        my_cluster: 0,
                        my_rank: 1,
                    },
                    Level {
                        kind: LevelKind::Core,
                        my_cluster: 1,
                        my_rank: 0,
                    },
                ],
            },
        }
    }

    #[test]
    fn rank_value_literal_and_round_trip() {
        let v = sample().to_value(1).unwrap();
        assert_eq!(
            v,
            "node:0/local_rank:1/local_size:2/cpuset:2-3/bound:core.1/cluster:node.0.1,package.0.1,numa.0.1,core.1.0"
        );
        assert!(!v.contains(' ') && !v.contains('='));
        assert_eq!(RankTopology::parse(&v).unwrap(), sample());
    }

    #[test]
    fn unbound_rank_round_trip() {
        let r = RankTopology {
            node: 3,
            local_rank: 0,
            local_size: 1,
            cpuset: None,
            bound: "none".into(),
            cluster: ClusterInfo {
                levels: vec![Level {
                    kind: LevelKind::Node,
                    my_cluster: 3,
                    my_rank: 0,
                }],
            },
        };
        let v = r.to_value(7).unwrap();
        assert_eq!(
            v,
            "node:3/local_rank:0/local_size:1/cpuset:none/bound:none/cluster:node.3.0"
        );
        assert_eq!(RankTopology::parse(&v).unwrap(), r);
    }

    #[test]
    fn long_cpuset_falls_back_to_mask_then_errors() {
        let mut r = sample();
        r.cpuset = Some((0..1600).step_by(2).collect());
        let v = r.to_value(1).unwrap();
        assert!(v.contains("cpuset:0x5555"), "{v}");
        assert!(v.len() <= MAX_VALUE_LEN);
        assert_eq!(RankTopology::parse(&v).unwrap(), r);
        r.cpuset = Some((0..20000).step_by(2).collect());
        assert!(matches!(
            r.to_value(1),
            Err(TopoFormatError::TooLong { rank: 1, .. })
        ));
    }

    #[test]
    fn unknown_fields_ignored() {
        let v =
            "node:0;local_rank:0;local_size:1;cpuset:0;bound:core.0;future:xyz;cluster:node.0.0";
        let r = RankTopology::parse(v).unwrap();
        assert_eq!(r.cpuset, Some(vec![0]));
        assert_eq!(r.cluster.levels.len(), 1);
    }

    #[test]
    fn malformed_rank_values() {
        for bad in [
            "",
            "garbage",
            "node:0;local_rank:0",                         // missing local_size
            "node:x;local_rank:0;local_size:1",            // not a number
            "node:0;local_rank:2;local_size:2",            // rank beyond size
            "node:0;local_rank:0;local_size:1;cpuset:3-1", // backwards range
            "node:0;local_rank:0;local_size:1;cpuset:",    // empty list
            "node:0;local_rank:0;local_size:1;cpuset:0xzz", // bad mask
            "node:0;local_rank:0;local_size:1;cluster:node.0", // short level
            "node:0;local_rank:0;local_size:1;cluster:rack.0.0", // unknown level
            "node:0;local_rank:0;local_size:1;cluster:core.0.0,node.0.0", // out of order
            "node:0;local_rank:0;local_size:1;bound:",
        ] {
            assert!(RankTopology::parse(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn bad_bound_is_refused_when_writing() {
        let mut r = sample();
        r.bound = "core;1".into();
        assert!(r.to_value(0).is_err());
    }

    #[test]
    fn topo_type_round_trip() {
        for (t, s) in [
            (TopoType::Cluster, "cluster"),
            (TopoType::None, "none"),
            (TopoType::Mesh { dims: vec![2, 4] }, "mesh:2x4"),
            (TopoType::Mesh { dims: vec![8] }, "mesh:8"),
        ] {
            assert_eq!(t.to_value(), s);
            assert_eq!(TopoType::parse(s).unwrap(), t);
        }
        assert_eq!(
            TopoType::parse("mesh dims=2x4").unwrap(),
            TopoType::Mesh { dims: vec![2, 4] }
        );
        for bad in ["", "torus", "mesh:", "mesh:2x0", "mesh:2xx4", "mesh:-1"] {
            assert!(TopoType::parse(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn cpu_list_forms() {
        assert_eq!(format_cpu_list(&[0, 1, 2, 3, 8]), "0-3,8");
        assert_eq!(format_cpu_list(&[5]), "5");
        assert_eq!(format_cpu_list(&[1, 3, 4]), "1,3-4");
        assert_eq!(parse_cpu_list("8,0-3,2").unwrap(), vec![0, 1, 2, 3, 8]);
        assert!(parse_cpu_list("0-4294967295").is_err());
        assert!(parse_cpu_list("1,,2").is_err());
        assert_eq!(format_cpu_mask(&[0, 1, 2, 3, 8]), "0x10f");
        assert_eq!(parse_cpu_mask("0x10f").unwrap(), vec![0, 1, 2, 3, 8]);
        assert!(parse_cpu_mask("0x0").is_err());
        assert_eq!(
            parse_cpu_list("60-130,64").unwrap(),
            (60..=130).collect::<Vec<_>>()
        );
    }

    /// A list repeating the widest range costs its text, not its width
    /// times its items (which held 4 MiB per 9 bytes of text before).
    #[test]
    fn repeated_wide_ranges_stay_small() {
        let wide = vec![format!("0-{MAX_CPU}"); 4000].join(",");
        let cpus = parse_cpu_list(&wide).unwrap();
        assert_eq!(cpus.len(), MAX_CPU as usize + 1);
    }

    #[test]
    fn rank_key_name() {
        assert_eq!(rank_key(12), "PMI_rivet_rank_12");
    }

    /// A process manager's job attributes, as a map.
    struct Attrs {
        map: std::collections::HashMap<String, String>,
        rank: u32,
        size: u32,
    }

    impl AttributeSource for Attrs {
        type Error = String;
        fn job_attribute(&mut self, key: &str) -> Result<Option<String>, String> {
            Ok(self.map.get(key).cloned())
        }
        fn rank(&self) -> u32 {
            self.rank
        }
        fn size(&self) -> u32 {
            self.size
        }
        fn malformed(&self, key: &str, err: TopoFormatError) -> String {
            format!("{key}: {err}")
        }
    }

    fn attrs(rank: u32, size: u32, kv: &[(&str, &str)]) -> Attrs {
        Attrs {
            map: kv
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            rank,
            size,
        }
    }

    #[test]
    fn queries_with_published_keys() {
        let v = sample().to_value(1).unwrap();
        let mut a = attrs(
            1,
            2,
            &[
                ("PMI_rivet_topo", "mesh:2x1"),
                ("PMI_rivet_rank_1", &v),
                ("PMI_hwloc_xmlfile", "/tmp/x.xml"),
            ],
        );
        assert_eq!(
            queries::topo_type(&mut a).unwrap(),
            TopoType::Mesh { dims: vec![2, 1] }
        );
        assert_eq!(
            queries::mesh_info(&mut a).unwrap(),
            Some(MeshInfo { dims: vec![2, 1] })
        );
        assert_eq!(queries::my_topology(&mut a).unwrap(), Some(sample()));
        let c = queries::cluster_info(&mut a).unwrap().unwrap();
        assert_eq!(c.my_cluster(), [0, 0, 0, 1]);
        assert_eq!(c.my_rank(), [1, 1, 1, 0]);
        assert_eq!(
            queries::hwloc_xmlfile(&mut a).unwrap(),
            Some(std::path::PathBuf::from("/tmp/x.xml"))
        );
    }

    #[test]
    fn queries_with_nothing_published() {
        // Singleton: no topology, one level.
        let mut a = attrs(0, 1, &[]);
        assert_eq!(queries::topo_type(&mut a).unwrap(), TopoType::None);
        assert_eq!(queries::my_topology(&mut a).unwrap(), None);
        assert_eq!(
            queries::cluster_info(&mut a).unwrap(),
            Some(ClusterInfo::singleton())
        );
        assert_eq!(queries::mesh_info(&mut a).unwrap(), None);
        // Under Hydra (keys unknown): nothing known.
        let mut a = attrs(3, 8, &[("PMI_hwloc_xmlfile", "unavailable")]);
        assert_eq!(queries::topo_type(&mut a).unwrap(), TopoType::None);
        assert_eq!(queries::cluster_info(&mut a).unwrap(), None);
        assert_eq!(queries::hwloc_xmlfile(&mut a).unwrap(), None);
    }

    #[test]
    fn queries_reject_malformed_values() {
        let mut a = attrs(
            0,
            2,
            &[("PMI_rivet_topo", "torus"), ("PMI_rivet_rank_0", "node:0")],
        );
        let e = queries::topo_type(&mut a).unwrap_err();
        assert!(e.starts_with("PMI_rivet_topo: malformed"), "{e}");
        assert!(queries::my_topology(&mut a).is_err());
        assert!(queries::cluster_info(&mut a).is_err());
    }

    #[test]
    fn singleton_client_queries() {
        let mut c = crate::Client::connect(crate::ClientConfig::singleton()).unwrap();
        assert_eq!(c.topo_type().unwrap(), TopoType::None);
        assert_eq!(c.my_topology().unwrap(), None);
        assert_eq!(c.cluster_info().unwrap(), Some(ClusterInfo::singleton()));
        assert_eq!(c.mesh_info().unwrap(), None);
        assert_eq!(c.hwloc_xmlfile().unwrap(), None);
    }

    /// The launcher's keys served by the real server core, read by the real client.
    #[test]
    fn client_reads_what_the_server_serves() {
        use crate::server::{NamespaceSpec, Output, Server};
        use std::io::{Read, Write};
        use std::os::unix::net::UnixStream;

        let mut attributes = vec![
            (
                KEY_HWLOC_XMLFILE.to_string(),
                "/tmp/rivet-topo.xml".to_string(),
            ),
            (
                KEY_TOPO.to_string(),
                TopoType::Mesh { dims: vec![2, 1] }.to_value(),
            ),
        ];
        attributes.push((rank_key(1), sample().to_value(1).unwrap()));
        let mut server = Server::new();
        let ns = server
            .create_namespace(NamespaceSpec {
                name: "kvs_topo_test".into(),
                size: 2,
                appnum: 0,
                appnum_of_rank: Vec::new(),
                universe_size: 2,
                node_of_rank: vec![0, 0],
                attributes,
                preput: vec![],
            })
            .unwrap();
        server.attach(7, ns, 1);
        let (client_end, mut server_end) = UnixStream::pair().unwrap();
        let pm = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                let n = match server_end.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let mut out = Vec::new();
                server.receive(7, &buf[..n], &mut out);
                for o in out {
                    if let Output::Send { bytes, .. } = o {
                        if server_end.write_all(&bytes).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let mut c = crate::Client::connect(crate::ClientConfig {
            transport: crate::Transport::Stream {
                stream: client_end,
                rank: 1,
                size: 2,
            },
            spawned: false,
            pmi2: false,
            jobid: None,
        })
        .unwrap();
        assert_eq!(c.topo_type().unwrap(), TopoType::Mesh { dims: vec![2, 1] });
        assert_eq!(c.mesh_info().unwrap(), Some(MeshInfo { dims: vec![2, 1] }));
        assert_eq!(c.my_topology().unwrap(), Some(sample()));
        assert_eq!(c.cluster_info().unwrap().unwrap().my_rank(), [1, 1, 1, 0]);
        assert_eq!(
            c.hwloc_xmlfile().unwrap(),
            Some(std::path::PathBuf::from("/tmp/rivet-topo.xml"))
        );
        drop(c);
        pm.join().unwrap();
    }
}
