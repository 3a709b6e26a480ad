//! The PMI-1/PMI-2 server core as one node of a multi-host job serves it: the
//! whole job's namespace, but barriers, names and groups handed up to rivetrun
//! (the proxy's loop forwards them), since no node sees the whole job.

use rivet_pmi::server::{NamespaceSpec, Server};

use super::job::Job;

/// The PMI server of this node: the job's namespace (its process mapping,
/// the appnums of this node's ranks, rivetrun's attributes and this node's
/// topology keys) served as node `node` (`Server::delegate_barriers`).
pub(super) fn node_server(
    job: &Job,
    node: u32,
    topology: Vec<(String, String)>,
) -> Result<Server, String> {
    let mapping = job
        .attrs
        .iter()
        .find(|(k, _)| k == rivet_pmi::server::PROCESS_MAPPING_KEY)
        .map(|(_, v)| v.as_str())
        .ok_or("no process mapping in the job description")?;
    let node_of_rank = rivet_pmi::server::parse_process_mapping(mapping, job.size as usize)
        .map_err(|e| format!("the job's process mapping: {e}"))?;
    let mut appnum_of_rank = vec![0; job.size as usize];
    for (&r, &a) in job.ranks.iter().zip(&job.appnums) {
        appnum_of_rank[r as usize] = a;
    }
    let mut attributes: Vec<(String, String)> = job
        .attrs
        .iter()
        .filter(|(k, _)| k != rivet_pmi::server::PROCESS_MAPPING_KEY)
        .cloned()
        .collect();
    attributes.extend(topology);
    let mut server = Server::new();
    // The proxy frees what its ranks leave, as rivetrun does on one host.
    attributes.push(crate::resources::serve(&mut server));
    let ns = server
        .create_namespace(NamespaceSpec {
            name: job.kvsname.clone(),
            size: job.size,
            appnum: 0,
            appnum_of_rank,
            universe_size: job.size,
            node_of_rank,
            attributes,
            preput: Vec::new(),
        })
        .map_err(|e| e.to_string())?;
    server.delegate_barriers(ns, node);
    // Names and groups are the job's, served by rivetrun (the loop forwards them).
    server.forward_names(true);
    server.forward_groups();
    Ok(server)
}
