//! rivetrun's errors, each with the exit code the launcher ends with.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum LaunchError {
    #[error("cannot execute '{program}': not found{}", if *.searched { " in PATH" } else { "" })]
    NotFound { program: String, searched: bool },
    #[error("cannot execute '{program}': it {why}")]
    NotExecutable { program: String, why: &'static str },
    #[error("could not start rank {rank} ({program}): {err}")]
    Spawn {
        program: String,
        rank: u32,
        err: std::io::Error,
    },
    #[error("cannot bind rank {rank} to its CPUs: {err}")]
    Bind { rank: u32, err: std::io::Error },
    #[error("topology: {0}")]
    Topology(#[from] crate::topology::TopologyError),
    #[error("working directory '{0}' does not exist or is not a directory")]
    BadWdir(String),
    #[error("{0}")]
    Usage(String),
    #[error("PMI server: {0}")]
    Pmi(#[from] rivet_pmi::Error),
    #[error("{0}")]
    Io(#[source] std::io::Error),
    /// An IMPI job failed (startup refused, another client gone): exit 1.
    #[error("IMPI client: {0}")]
    Impi(String),
}

impl LaunchError {
    /// The exit code rivetrun ends with for this error (shell conventions for exec failures).
    pub fn exit_code(&self) -> i32 {
        match self {
            LaunchError::NotFound { .. } => 127,
            LaunchError::NotExecutable { .. } => 126,
            LaunchError::Spawn { err, .. } if err.kind() == std::io::ErrorKind::NotFound => 127,
            LaunchError::Spawn { err, .. }
                if err.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                126
            }
            LaunchError::Usage(_) | LaunchError::BadWdir(_) | LaunchError::Topology(_) => 2,
            _ => 1,
        }
    }
}
