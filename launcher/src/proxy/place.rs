//! Where this node's ranks go: the proxy discovers the node's own topology and
//! plans its share of the job with the same policies as rivetrun on one host,
//! then renumbers the plan as the job's (global ranks, this node's index).

use std::path::Path;

use super::job::Job;
use crate::launch::RankPlace;
use crate::topology::{self, PlacementRequest, Topology};

/// This node's placement: one `RankPlace` per local rank, the mask
/// unbound ranks get once any rank is bound, and the topology keys of the
/// node's ranks (`PMI_rivet_*`, numbered as in the job, with the node's
/// index at the node level, and the node's hwloc XML in `dir`).
pub(super) type Placed = (
    Vec<RankPlace>,
    Option<libc::cpu_set_t>,
    Vec<(String, String)>,
);

/// `pmix`: the node's PMIx server being started, lent the topology found here.
pub(super) fn place(
    job: &Job,
    node: u32,
    host: &str,
    dir: &Path,
    pmix: &mut Option<crate::pmix_host::Starting>,
) -> Result<Placed, String> {
    let topo = Topology::discover().map_err(|e| e.to_string())?;
    if let Some(starting) = pmix.as_mut() {
        starting.lend_topology(topo.shared());
    }
    let map_by = match &job.map_by {
        Some(m) => m
            .parse()
            .map_err(|e: topology::TopologyError| e.to_string())?,
        None => "core"
            .parse()
            .map_err(|e: topology::TopologyError| e.to_string())?,
    };
    let bind_to = match &job.bind_to {
        Some(b) => Some(
            b.parse()
                .map_err(|e: topology::TopologyError| e.to_string())?,
        ),
        None => None,
    };
    let mut placement = topology::plan(
        &topo,
        &PlacementRequest {
            nranks: job.ranks.len(),
            map_by,
            bind_to,
            ppn: None,
            cpu_list: None,
            mesh_dims: None,
        },
    )
    .map_err(|e| e.to_string())?;
    for note in &placement.notes {
        eprintln!("rivetrun: note: {host}: {note}");
    }
    for (p, &rank) in placement.ranks.iter_mut().zip(&job.ranks) {
        (p.rank, p.node) = (rank as usize, node);
        for level in &mut p.cluster.levels {
            if level.kind == rivet_pmi::topology::LevelKind::Node {
                level.my_cluster = node;
            }
        }
        if job.report {
            eprintln!("{}", topology::report_line(p, host));
        }
    }
    let xml = dir.join("topology.xml");
    topo.export_xml(&xml).map_err(|e| e.to_string())?;
    let keys = placement.pmi_keys(Some(&xml)).map_err(|e| e.to_string())?;
    let places: Vec<RankPlace> = placement
        .ranks
        .iter()
        .map(|r| RankPlace {
            local_rank: r.local_rank,
            local_size: r.local_size,
            affinity: r.cpuset.as_ref().map(|set| set.to_libc()),
        })
        .collect();
    let default = if places.iter().any(|p| p.affinity.is_some()) {
        Some(
            topology::current_affinity()
                .map_err(|e| e.to_string())?
                .to_libc(),
        )
    } else {
        None
    };
    Ok((places, default, keys))
}
