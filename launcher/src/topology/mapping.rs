//! Placement: which node, which CPUs and which cluster position each rank gets.
//!
//! Rules (see `plan`):
//! - Nodes: one, unless `ppn` is given; then `ceil(nranks / ppn)` nodes, each a copy of the
//!   topology. Ranks fill node 0 with `ppn` ranks, then node 1, ... (block), except with
//!   `--map-by node`, where rank `r` goes to node `r mod nodes` (round-robin).
//! - Within a node, local rank `j` is mapped to a location (a core and one of its PUs):
//!   `core`/`node`: core `j mod cores`; `hwthread`: PU `j mod PUs` in topology order;
//!   `socket`/`numa`/`l3cache`: object `j mod objects`, and within it the `(j div objects)`-th
//!   core. Once every core of the scope has a rank, the next round takes the cores' next PU.
//! - Binding: to the object of the `--bind-to` kind holding the location. Default: `core`
//!   (`hwthread` under `--map-by hwthread`) while ranks per node fit the cores (PUs), else
//!   unbound with a note. An explicit `core` (`hwthread`) binding with more ranks per node than
//!   cores (PUs), or a `socket`/`numa`/`l3cache` binding with more ranks than PUs, is an error.
//! - `--cpu-list a:b:...`: rank `r` gets entry `r` (or the single entry), overriding both.
//! - Only the topology's PUs count: this machine's are those of rivetrun's affinity mask
//!   (`Topology::restrict_to`), so cores, capacities and `--cpu-list` checks are the mask's.

use std::collections::HashMap;

use rivet_pmi::topology::{format_dims, ClusterInfo, Level, LevelKind, RankTopology, TopoType};

use super::cpuset::{libc_setsize, CpuSet};
use super::error::TopologyError;
use super::policy::{BindTo, MapBy};
use super::summary::{DomainKind, Pu, Summary};
use super::Topology;

/// Where a rank sits in the node / package / NUMA / core hierarchy (`PMI_Topo_cluster_info`);
/// the same type the PMI client returns.
pub type ClusterPosition = ClusterInfo;

/// What the user asked for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PlacementRequest {
    pub nranks: usize,
    pub map_by: MapBy,
    /// `None` = the default binding (see the module docs).
    pub bind_to: Option<BindTo>,
    /// Ranks per node; `None` = all ranks on one node.
    pub ppn: Option<usize>,
    /// Explicit per-rank CPU lists separated by ':', e.g. `0-1:2-3`.
    pub cpu_list: Option<String>,
    /// Publish a mesh topology of these dimensions (their product must be `nranks`).
    pub mesh_dims: Option<Vec<usize>>,
}

impl PlacementRequest {
    /// `nranks` ranks with every other setting at its default.
    pub fn new(nranks: usize) -> PlacementRequest {
        PlacementRequest {
            nranks,
            ..Default::default()
        }
    }
}

/// The result of [`plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// One entry per rank, in rank order.
    pub ranks: Vec<RankPlacement>,
    /// Things the user should be told (binding turned off, simulated topology, ...).
    pub notes: Vec<String>,
    /// Number of nodes the ranks are spread over.
    pub nodes: usize,
    /// Truth that the cpusets describe a machine other than this one (XML or synthetic
    /// topology, or more than one node): nothing may be bound for real.
    pub simulated: bool,
    /// The mesh dimensions requested, if any.
    pub mesh_dims: Option<Vec<usize>>,
}

/// One rank's placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankPlacement {
    pub rank: usize,
    pub node: u32,
    pub local_rank: u32,
    pub local_size: u32,
    /// CPUs to bind to; `None` = not bound.
    pub cpuset: Option<CpuSet>,
    /// What it is bound to: `core 3`, `hwthread 5`, `numa 1`, `socket 0`, `l3cache 2`,
    /// `cpu-list`, `none` (object numbers are hwloc logical indices, lstopo's `L#`).
    pub bound_to: String,
    pub cluster: ClusterPosition,
}

/// A rank's mapped location within its node.
#[derive(Clone, Copy)]
struct Loc {
    core: usize,
    pu: Pu,
}

/// `all_cores` is `0..cores`, `pus` is [`Summary::pus_in_order`]; both computed once.
fn locate(s: &Summary, all_cores: &[usize], pus: &[(usize, Pu)], map_by: MapBy, j: usize) -> Loc {
    let in_cores = |cores: &[usize], k: usize| {
        let core = cores[k % cores.len()];
        let round = k / cores.len();
        let c = &s.cores[core];
        Loc {
            core,
            pu: c.pus[round % c.pus.len()],
        }
    };
    match map_by.domain() {
        None if map_by == MapBy::Hwthread => {
            let (core, pu) = pus[j % pus.len()];
            Loc { core, pu }
        }
        None => in_cores(all_cores, j),
        Some(kind) => {
            let doms = s.domains(kind);
            let d = &doms[j % doms.len()];
            in_cores(&d.cores, j / doms.len())
        }
    }
}

/// Computes the placement of `req.nranks` ranks on `topo` (one copy of it per node).
/// Fails before anything starts on a bad request or an impossible binding.
pub fn plan(topo: &Topology, req: &PlacementRequest) -> Result<Placement, TopologyError> {
    let s = &topo.summary;
    check_request(req)?;
    let n = req.nranks;
    let mut notes = Vec::new();
    let (nodes, local, per_node) = assign_nodes(req);

    let (cpusets, bound) = match &req.cpu_list {
        Some(list) => bind_cpu_list(s, req, list, &mut notes)?,
        None => bind_by_policy(s, req, &local, &per_node, &mut notes)?,
    };

    for kind in [DomainKind::Package, DomainKind::Numa, DomainKind::L3] {
        let used = req.cpu_list.is_none()
            && (req.map_by.domain() == Some(kind)
                || req.bind_to.and_then(|b| b.domain()) == Some(kind));
        if used && s.missing.contains(&kind) {
            notes.push(format!(
                "the topology has no {} objects: the whole node is treated as one",
                kind.name()
            ));
        }
    }
    let simulated = !topo.is_this_system() || nodes > 1;
    if !topo.is_this_system() && cpusets.iter().any(Option::is_some) {
        notes.push(format!(
            "topology is {}, not this machine: binding is simulated, nothing is bound",
            topo.source_description()
        ));
    }
    if nodes > 1 {
        notes.push(format!(
            "{nodes} nodes, simulated as copies of the topology (launching on more than one \
             node is not supported yet)"
        ));
    }
    if !simulated {
        let too_big = cpusets.iter().flatten().find(|c| !c.fits_libc());
        if let Some(&cpu) = too_big.and_then(|c| c.cpus().last()) {
            return Err(TopologyError::CpuBeyondSetsize {
                cpu,
                max: libc_setsize(),
            });
        }
    }

    // Cluster positions; my_rank counts the job's ranks in the same object, in rank order.
    let mut counters: HashMap<(usize, LevelKind, usize), u32> = HashMap::new();
    let mut ranks = Vec::with_capacity(n);
    for (r, (cpuset, bound_to)) in cpusets.into_iter().zip(bound).enumerate() {
        let (node, local_rank) = local[r];
        let levels = cluster_levels(s, node, cpuset.as_ref())
            .into_iter()
            .map(|(kind, id)| {
                let counter = counters.entry((node, kind, id)).or_insert(0);
                let my_rank = *counter;
                *counter += 1;
                Level {
                    kind,
                    my_cluster: id as u32,
                    my_rank,
                }
            })
            .collect();
        ranks.push(RankPlacement {
            rank: r,
            node: node as u32,
            local_rank: local_rank as u32,
            local_size: per_node[node] as u32,
            cpuset,
            bound_to,
            cluster: ClusterInfo { levels },
        });
    }
    Ok(Placement {
        ranks,
        notes,
        nodes,
        simulated,
        mesh_dims: req.mesh_dims.clone(),
    })
}

fn check_request(req: &PlacementRequest) -> Result<(), TopologyError> {
    let n = req.nranks;
    if n == 0 {
        return Err(TopologyError::Request(
            "no ranks to place: the number of ranks must be at least 1".into(),
        ));
    }
    if req.ppn == Some(0) {
        return Err(TopologyError::Request(
            "ppn (ranks per node) must be at least 1".into(),
        ));
    }
    if let Some(dims) = &req.mesh_dims {
        let product = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if dims.is_empty() || dims.contains(&0) || product != Some(n) {
            return Err(TopologyError::Request(format!(
                "mesh dimensions '{}' must be positive and multiply to the number of ranks ({n})",
                format_dims(dims)
            )));
        }
    }
    Ok(())
}

/// Number of nodes, `(node, local rank)` per rank, and ranks per node.
fn assign_nodes(req: &PlacementRequest) -> (usize, Vec<(usize, usize)>, Vec<usize>) {
    let n = req.nranks;
    let nodes = req.ppn.map_or(1, |p| n.div_ceil(p));
    let node_of = |r: usize| match req.ppn {
        None => 0,
        Some(_) if req.map_by == MapBy::Node => r % nodes,
        Some(p) => r / p,
    };
    let mut per_node = vec![0usize; nodes];
    let mut local = Vec::with_capacity(n);
    for r in 0..n {
        let node = node_of(r);
        local.push((node, per_node[node]));
        per_node[node] += 1;
    }
    (nodes, local, per_node)
}

type Bindings = (Vec<Option<CpuSet>>, Vec<String>);

/// `--cpu-list`: entry `r` for rank `r`, or the single entry for every rank.
fn bind_cpu_list(
    s: &Summary,
    req: &PlacementRequest,
    list: &str,
    notes: &mut Vec<String>,
) -> Result<Bindings, TopologyError> {
    if let Some(b) = req.bind_to {
        notes.push(format!("--cpu-list given: --bind-to {b} is ignored"));
    }
    let entries = parse_cpu_lists(s, list)?;
    let n = req.nranks;
    if entries.len() != 1 && entries.len() != n {
        return Err(TopologyError::CpuListCount {
            entries: entries.len(),
            nranks: n,
        });
    }
    Ok((0..n)
        .map(|r| {
            (
                Some(entries[r % entries.len()].clone()),
                "cpu-list".to_string(),
            )
        })
        .unzip())
}

/// `--map-by` and `--bind-to` (or the default binding).
fn bind_by_policy(
    s: &Summary,
    req: &PlacementRequest,
    local: &[(usize, usize)],
    per_node: &[usize],
    notes: &mut Vec<String>,
) -> Result<Bindings, TopologyError> {
    let max_local = per_node.iter().copied().max().unwrap_or(0);
    let ranks_word = if per_node.len() > 1 {
        "ranks per node"
    } else {
        "ranks"
    };
    let (ncores, npus) = (s.cores.len(), s.num_pus());
    let capacity = |k: BindTo| if k == BindTo::Core { ncores } else { npus };
    let unit = |k: BindTo| match (k == BindTo::Core, capacity(k) == 1) {
        (true, true) => "core",
        (true, false) => "cores",
        (false, true) => "hardware thread",
        (false, false) => "hardware threads",
    };
    let default_kind = if req.map_by == MapBy::Hwthread {
        BindTo::Hwthread
    } else {
        BindTo::Core
    };
    let bind = match req.bind_to {
        Some(BindTo::None) => None,
        Some(k) if max_local > capacity(k) => {
            let what = match k {
                BindTo::Core => "cannot bind one rank per core".to_string(),
                BindTo::Hwthread => "cannot bind one rank per hardware thread".to_string(),
                _ => format!("binding to {k} would oversubscribe it"),
            };
            return Err(TopologyError::CannotBind(format!(
                "{max_local} {ranks_word} but {} {}: {what}; use --bind-to none or fewer ranks",
                capacity(k),
                unit(k)
            )));
        }
        Some(k) => Some(k),
        None if max_local > capacity(default_kind) => {
            notes.push(format!(
                "oversubscribed: {max_local} {ranks_word} on {} {}, binding off",
                capacity(default_kind),
                unit(default_kind)
            ));
            None
        }
        None => Some(default_kind),
    };
    let pus = s.pus_in_order();
    let all_cores: Vec<usize> = (0..ncores).collect();
    Ok(local
        .iter()
        .map(|&(_, j)| {
            let loc = locate(s, &all_cores, &pus, req.map_by, j);
            match bind {
                None | Some(BindTo::None) => (None, "none".to_string()),
                Some(BindTo::Core) => {
                    let c = &s.cores[loc.core];
                    let cpus = CpuSet::from_cpus(c.pus.iter().map(|p| p.os));
                    (Some(cpus), format!("core {}", c.logical))
                }
                Some(BindTo::Hwthread) => (
                    Some(CpuSet::from_cpus([loc.pu.os])),
                    format!("hwthread {}", loc.pu.logical),
                ),
                Some(k) => {
                    let kind = k.domain().unwrap_or(DomainKind::Package);
                    let d = &s.domains(kind)[s.domain_of(kind, loc.core)];
                    (
                        Some(d.cpuset.clone()),
                        format!("{} {}", kind.name(), d.logical),
                    )
                }
            }
        })
        .unzip())
}

/// The levels holding a rank: the node, then package, NUMA node and core for as long as one
/// object of that kind holds the whole cpuset. Unbound ranks have only the node level.
/// Ids are job-wide: on node n, object i of a kind with k per node is n*k + i.
fn cluster_levels(s: &Summary, node: usize, cpuset: Option<&CpuSet>) -> Vec<(LevelKind, usize)> {
    let mut levels = vec![(LevelKind::Node, node)];
    let Some(cs) = cpuset else { return levels };
    let mut cores: Vec<usize> = cs
        .cpus()
        .iter()
        .filter_map(|c| s.core_of_pu.get(c).copied())
        .collect();
    cores.sort_unstable();
    cores.dedup();
    let same = |f: &dyn Fn(usize) -> usize| -> Option<usize> {
        let first = f(*cores.first()?);
        cores.iter().all(|&c| f(c) == first).then_some(first)
    };
    let pkg = same(&|c| s.packages[s.cores[c].package].logical);
    let numa = same(&|c| s.numas[s.cores[c].numa].logical);
    let core = (cores.len() == 1).then(|| s.cores[cores[0]].logical);
    // Ids are unique across the job: node n's objects come after node n-1's,
    // so ranks on different (simulated) nodes never look like they share one.
    for (kind, id, per_node) in [
        (LevelKind::Package, pkg, s.packages.len()),
        (LevelKind::Numa, numa, s.numas.len()),
        (LevelKind::Core, core, s.cores.len()),
    ] {
        match id {
            Some(id) => levels.push((kind, node * per_node + id)),
            None => break,
        }
    }
    levels
}

/// Parses `--cpu-list` entries and checks every CPU exists in the topology.
fn parse_cpu_lists(s: &Summary, list: &str) -> Result<Vec<CpuSet>, TopologyError> {
    let all = s.all_cpus();
    let available = match &s.narrowed_from {
        Some(machine) => format!("{all}: rivetrun's affinity mask, of {machine}"),
        None => all.to_string(),
    };
    list.split(':')
        .map(|entry| {
            let set: CpuSet = entry.parse()?;
            if let Some(&cpu) = set.cpus().iter().find(|&&c| !all.contains(c)) {
                return Err(TopologyError::CpuNotInTopology {
                    cpu,
                    available: available.clone(),
                });
            }
            Ok(set)
        })
        .collect()
}

impl RankPlacement {
    /// The rank's [`RankTopology`], as published under `PMI_rivet_rank_<r>`.
    pub fn to_pmi(&self) -> RankTopology {
        RankTopology {
            node: self.node,
            local_rank: self.local_rank,
            local_size: self.local_size,
            cpuset: self.cpuset.as_ref().map(|c| c.cpus().to_vec()),
            bound: self.bound_to.clone(),
            cluster: self.cluster.clone(),
        }
    }
}

impl Placement {
    /// `PMI_Topo_type` of the job: mesh when dimensions were requested, else cluster.
    pub fn topo_type(&self) -> TopoType {
        match &self.mesh_dims {
            Some(dims) => TopoType::Mesh { dims: dims.clone() },
            None => TopoType::Cluster,
        }
    }

    /// The node of each rank, for `NamespaceSpec::node_of_rank` (from which the PMI server
    /// builds `PMI_process_mapping`).
    pub fn node_of_rank(&self) -> Vec<u32> {
        self.ranks.iter().map(|r| r.node).collect()
    }

    /// The job attributes to publish (`NamespaceSpec::attributes`): `PMI_hwloc_xmlfile` (the
    /// XML path, or `unavailable`), `PMI_rivet_topo`, and `PMI_rivet_rank_<r>` for every rank.
    pub fn pmi_keys(
        &self,
        xml_file: Option<&std::path::Path>,
    ) -> Result<Vec<(String, String)>, TopologyError> {
        use rivet_pmi::topology::{rank_key, KEY_HWLOC_XMLFILE, KEY_TOPO, XMLFILE_UNAVAILABLE};
        let xml = match xml_file {
            Some(p) => p
                .to_str()
                .filter(|s| !s.contains([' ', '\n']))
                .map(str::to_string)
                .ok_or_else(|| {
                    TopologyError::Request(format!(
                        "topology XML path {} is not UTF-8 without spaces",
                        p.display()
                    ))
                })?,
            None => XMLFILE_UNAVAILABLE.to_string(),
        };
        let mut keys = Vec::with_capacity(self.ranks.len() + 2);
        keys.push((KEY_HWLOC_XMLFILE.to_string(), xml));
        keys.push((KEY_TOPO.to_string(), self.topo_type().to_value()));
        for r in &self.ranks {
            keys.push((rank_key(r.rank as u32), r.to_pmi().to_value(r.rank as u32)?));
        }
        Ok(keys)
    }
}
