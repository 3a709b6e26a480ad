//! The engine handle: what `Engine` is and the calls on it that are
//! neither start-up (`engine/startup.rs`: bootstrap through PMI, opening
//! the transports, assembling the workers) nor diagnostics
//! (`engine/info.rs`: `info`, `counts`). Every handle points at `Inner`
//! (`inner.rs`: the workers' locked state and the progress loop).

use std::marker::PhantomData;
use std::sync::Arc;

use crate::comm::Comm;
use crate::error::Result;
use crate::inner::Inner;
use crate::thread::{Shared, ThreadLevel, Threading};

mod info;
mod startup;

pub use info::{Counts, Info};
pub(crate) use startup::node_segment_name;

/// COMM_WORLD uses context ids 0 and 1, COMM_SELF 2 and 3.
const SELF_CONTEXT: u32 = 2;
const FIRST_FREE_CONTEXT: u32 = 4;

/// One per process. Cheap to clone. `Engine` (`Engine<Shared>`) and its
/// handles are `Send + Sync` and the engine locks on every call (thread
/// level MULTIPLE); `Engine<Local>` and its handles stay on one thread and
/// run without a lock below MULTIPLE (`thread.rs`).
pub struct Engine<T: Threading = Shared> {
    pub(crate) inner: Arc<Inner>,
    _threads: PhantomData<T>,
}

impl<T: Threading> Clone for Engine<T> {
    fn clone(&self) -> Self {
        Engine {
            inner: self.inner.clone(),
            _threads: PhantomData,
        }
    }
}

impl<T: Threading> Engine<T> {
    /// The thread level this engine provides.
    pub fn thread_level(&self) -> ThreadLevel {
        self.inner.level
    }

    /// The intercommunicator to the processes that spawned this one, if
    /// it was spawned (MPI_Comm_get_parent); `None` again once it has been
    /// disconnected.
    pub fn parent(&self) -> Option<Comm<T>> {
        let link = self.inner.parent.lock().unwrap_or_else(|p| p.into_inner());
        link.as_ref().map(|l| Comm::from_link(&self.inner, l))
    }

    pub fn rank(&self) -> u32 {
        self.inner.rank
    }

    /// The process manager's application number and universe size for
    /// this job (MPI's `APPNUM` and `UNIVERSE_SIZE` attributes; PMI's
    /// `-1` where it has none). Unsupported without a process manager.
    pub fn job_attrs(&self) -> Result<(i32, i32)> {
        self.inner
            .with_pmi(|pmi| Ok((pmi.appnum(), pmi.universe_size())))
    }

    pub fn size(&self) -> u32 {
        self.inner.size
    }

    /// The communicator of every rank of the job (context id 0).
    pub fn world(&self) -> Comm<T> {
        Comm {
            inner: self.inner.clone(),
            context: 0,
            rank: self.inner.rank,
            size: self.inner.size,
            local: self.inner.world_vcrt.clone(),
            remote: None,
            first: false,
            _threads: PhantomData,
        }
    }

    /// The communicator of this process alone (MPI_COMM_SELF).
    pub fn self_comm(&self) -> Comm<T> {
        Comm {
            inner: self.inner.clone(),
            context: SELF_CONTEXT,
            rank: 0,
            size: 1,
            local: self.inner.self_vcrt.clone(),
            remote: None,
            first: false,
            _threads: PhantomData,
        }
    }

    /// Poll every transport of every worker once; the number of events
    /// handled. A worker another thread is already progressing counts as
    /// done.
    pub fn progress(&self) -> usize {
        (0..self.inner.workers())
            .filter_map(|w| self.inner.worker(w).try_lock().map(|mut c| c.progress()))
            .sum()
    }

    /// A barrier of the whole job through the process manager: first
    /// everything queued to be sent is handed to the transports (progress
    /// until the netmod's queues are empty), then this thread blocks
    /// reading the PMI connection (no CPU) until every process of the job
    /// has called it. The engine makes no progress meanwhile: for
    /// benchmarks that need ranks asleep while others measure
    /// (`rivet-bench latency --idle-peers`).
    pub fn pmi_barrier(&self) -> Result<()> {
        self.inner.drain(|_| true);
        self.inner.with_pmi(|pmi| pmi.barrier())
    }

    /// Finish outstanding sends, then leave the job. Also done on drop of
    /// the last handle; calls on remaining communicators fail afterwards.
    pub fn finalize(self) -> Result<()> {
        self.inner.finalize()
    }

    /// End the whole job with `code`, through the process manager.
    pub fn abort(&self, code: i32, message: &str) -> ! {
        let mut pmi = self.inner.pmi.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = pmi.as_mut() {
            let _ = client.abort(code, message);
        }
        eprintln!("rivet: abort({code}): {message}");
        std::process::exit(code)
    }
}
