//! Errors of topology loading, mapping and binding; each message says what to do.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("cannot discover this machine's topology with hwloc: {0}")]
    Discover(String),

    #[error("invalid hwloc synthetic topology \"{spec}\": {reason} (expected e.g. \"pack:2 numa:2 core:8 pu:2\", or the path of an hwloc XML file)")]
    Synthetic { spec: String, reason: String },

    #[error("cannot read topology file {}: {source}", path.display())]
    XmlRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{} is not a valid hwloc XML topology{} (make one with `lstopo FILE.xml`)", path.display(), reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    XmlInvalid {
        path: PathBuf,
        reason: Option<String>,
    },

    #[error("cannot export the topology to {}: {reason}", path.display())]
    Export { path: PathBuf, reason: String },

    #[error("unknown {option} policy '{value}': valid values are {valid}")]
    UnknownPolicy {
        option: &'static str,
        value: String,
        valid: &'static str,
    },

    #[error("invalid CPU list '{text}': {reason} (expected e.g. \"0-3,8\")")]
    CpuList { text: String, reason: String },

    #[error("CPU {cpu} of --cpu-list is not in the topology (its CPUs are {available})")]
    CpuNotInTopology { cpu: u32, available: String },

    #[error("--cpu-list has {entries} entries for {nranks} ranks: give one entry per rank, separated by ':', or a single entry for all")]
    CpuListCount { entries: usize, nranks: usize },

    #[error("CPU {cpu} is beyond the {max} CPUs sched_setaffinity can be given here; use --bind-to none")]
    CpuBeyondSetsize { cpu: u32, max: usize },

    #[error("rivetrun's CPU affinity mask ({mask}) holds none of the topology's CPUs ({cpus}); start rivetrun with a mask that does (taskset -c LIST)")]
    NoAllowedCpu { mask: String, cpus: String },

    #[error("cannot bind: {0}")]
    CannotBind(String),

    #[error("invalid placement request: {0}")]
    Request(String),

    #[error("topology value for PMI: {0}")]
    Pmi(#[from] rivet_pmi::topology::TopoFormatError),
}
