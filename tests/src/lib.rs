//! Support for Rivet's multi-process integration tests.
//!
//! The tests start real jobs (`rivetrun`, `mpiexec.hydra`), so this crate
//! makes sure they end by themselves and leave nothing behind: every job runs
//! with a deadline, under a unique `RIVET_TEST_TAG` in its environment (which
//! the launchers pass on to the ranks), and `leftovers` finds any process
//! still carrying that tag. Jobs run one at a time (`serial`): two ranks
//! busy-polling fill this machine's two cores.
//!
//! Here `serial`; building what tests run in `build.rs`, running jobs in
//! `jobs.rs`, transports and thread levels in `matrix.rs`, segment checks in
//! `shm.rs`, reading a job's output in `verdicts.rs`.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod netns;
pub mod pattern;
pub mod procfs;
pub mod rank_check;

mod build;
mod jobs;
mod matrix;
mod shm;
mod verdicts;

pub use build::*;
pub use jobs::*;
pub use matrix::*;
pub use shm::*;
pub use verdicts::*;

use std::sync::{Mutex, MutexGuard};

/// Hold this for the whole of a test that starts processes.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
