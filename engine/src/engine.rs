//! The engine: start-up through PMI, the progress loop, shut-down.

use std::sync::Arc;

use crate::comm::Comm;
use crate::error::Result;

/// One per process. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

pub struct Inner {}

/// What the engine runs with, for `rivet-bench --info` and diagnostics.
#[derive(Debug, Clone)]
pub struct Info {
    pub rank: u32,
    pub size: u32,
    pub local_size: u32,
    /// Lines of `name: value`, in a stable order.
    pub items: Vec<(String, String)>,
}

impl std::fmt::Display for Info {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (k, v) in &self.items {
            writeln!(f, "{k}: {v}")?;
        }
        Ok(())
    }
}

impl Engine {
    /// Bootstrap through the process manager (rivetrun, mpiexec.hydra, or
    /// none: a singleton).
    pub fn init() -> Result<Engine> {
        todo!()
    }

    pub fn rank(&self) -> u32 {
        todo!()
    }

    pub fn size(&self) -> u32 {
        todo!()
    }

    /// The communicator of every rank of the job.
    pub fn world(&self) -> Comm {
        todo!()
    }

    /// Poll every transport once; the number of events handled.
    pub fn progress(&self) -> usize {
        todo!()
    }

    pub fn info(&self) -> Info {
        todo!()
    }

    /// Finish outstanding sends, then leave the job. Also done on drop.
    pub fn finalize(self) -> Result<()> {
        todo!()
    }

    /// End the whole job with `code`, through the process manager.
    pub fn abort(&self, code: i32, message: &str) -> ! {
        let _ = (code, message);
        todo!()
    }
}
