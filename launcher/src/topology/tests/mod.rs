//! Mapper tests on hwloc synthetic topologies, with the expected cpusets written out by hand,
//! plus error cases and real binding on this machine. What the tests share is here; each
//! concept has a module.
//!
//! hwloc numbers synthetic PUs in logical order, so on `pack:2 numa:2 core:8 pu:2` core `c`
//! has PUs `2c` and `2c+1`, NUMA node `m` has cores `8m..8m+7` (PUs `16m..16m+15`) and package
//! `p` has cores `16p..16p+15` (PUs `32p..32p+31`). On `pack:2 numa:2 l3:2 core:4 pu:2`, L3
//! cache `l` has cores `4l..4l+3` (PUs `8l..8l+7`).

use super::*;

const A: &str = "pack:2 numa:2 core:8 pu:2";
const B: &str = "pack:2 numa:2 l3:2 core:4 pu:2";

fn topo(spec: &str) -> Topology {
    Topology::load(spec).unwrap_or_else(|e| panic!("load {spec}: {e}"))
}

fn req(n: usize, map_by: MapBy, bind_to: Option<BindTo>) -> PlacementRequest {
    PlacementRequest {
        nranks: n,
        map_by,
        bind_to,
        ..Default::default()
    }
}

/// Cpusets as strings, "-" for unbound.
fn cpusets(p: &Placement) -> Vec<String> {
    p.ranks
        .iter()
        .map(|r| r.cpuset.as_ref().map_or("-".to_string(), |c| c.to_string()))
        .collect()
}

fn bound(p: &Placement) -> Vec<&str> {
    p.ranks.iter().map(|r| r.bound_to.as_str()).collect()
}

/// Cluster levels as `kind.my_cluster.my_rank,...`.
fn cluster(r: &RankPlacement) -> String {
    r.cluster
        .levels
        .iter()
        .map(|l| format!("{}.{}.{}", l.kind, l.my_cluster, l.my_rank))
        .collect::<Vec<_>>()
        .join(",")
}

mod errors;
mod formats;
mod machine;
mod placements;
