//! The cluster levels of `PMI_Topo_cluster_info` and the mesh of `PMI_Topo_mesh_info`.

use super::*;

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

    pub(super) fn to_value(&self) -> String {
        self.levels
            .iter()
            .map(|l| format!("{}.{}.{}", l.kind, l.my_cluster, l.my_rank))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub(super) fn parse(s: &str) -> Result<ClusterInfo, String> {
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
