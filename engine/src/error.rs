//! The engine's one error type.

use crate::shm::ShmError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("process manager (PMI): {0}")]
    Pmi(#[from] rivet_pmi::Error),
    #[error("shared memory: {0}")]
    Shm(#[from] ShmError),
    #[error("rank {rank} is out of range for a communicator of {size} ranks")]
    RankOutOfRange { rank: i64, size: u32 },
    #[error("tag {0} is invalid: tags are >= 0 (ANY_TAG only when receiving)")]
    InvalidTag(i32),
    #[error("no path to {0}: not on this node and no network module open, or its group was disconnected")]
    NoRoute(crate::vc_id::VcId),
    #[error("rank {rank} has failed: {why}")]
    PeerFailed { rank: u32, why: String },
    #[error("network module: {0}")]
    Netmod(#[from] rivet_netmods::NetmodError),
    #[error("bad setting {name}={value:?}: {why}")]
    Config {
        name: &'static str,
        value: String,
        why: String,
    },
    #[error("protocol error from rank {peer}: {what}")]
    Protocol { peer: u32, what: String },
    #[error("bad port name {name:?}: {why}")]
    BadPort { name: String, why: String },
    #[error("the port connection failed: {0}")]
    PortClosed(String),
    #[error("spawn failed: {message}{}", codes(errcodes))]
    Spawn { message: String, errcodes: Vec<i32> },
    #[error("{0}")]
    InvalidArgument(String),
    #[error("not supported here: {0}")]
    Unsupported(String),
    #[error("the operation failed at rank {root}, its root: {why}")]
    RootFailed { root: u32, why: String },
    #[error("the engine stopped working: {0}")]
    Failed(String),
    #[error("the engine has been finalized")]
    Finalized,
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

fn codes(errcodes: &[i32]) -> String {
    if errcodes.is_empty() {
        String::new()
    } else {
        format!(" (error code per process: {errcodes:?})")
    }
}
