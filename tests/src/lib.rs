//! Support for Rivet's multi-process integration tests.
//!
//! The tests start real jobs (`rivetrun`, `mpiexec.hydra`), so this crate
//! makes sure they end by themselves and leave nothing behind: every job runs
//! with a deadline, under a unique `RIVET_TEST_TAG` in its environment (which
//! the launchers pass on to the ranks), and `leftovers` finds any process
//! still carrying that tag. Jobs run one at a time (`serial`): two ranks
//! busy-polling fill this machine's two cores.
//!
//! Module map:
//!
//! - the harness: `lib.rs` (`serial`), building what tests run (`build.rs`), running jobs with
//!   deadlines and leak checks (`jobs.rs`), every transport at thread levels SINGLE and MULTIPLE
//!   (`matrix.rs`), segment checks (`shm.rs`), the engine tests' transport cases and verdicts (`engine_cases.rs`), reading a job's output (`verdicts.rs`); `rank_check.rs` the test ranks' engine start (level checked)
//!   and failure reporting; `procfs.rs` a job's processes seen through `/proc` (ranks,
//!   listeners, peak memory); `netns.rs` namespace hosts for multi-host tests (netns + veth on a
//!   bridge, own address, hostname, `/etc/hosts`, the `--launcher-exec` wrapper; removed on
//!   drop); `pmix_hosts.rs` what the multi-host PMIx tests share (two hosts where OpenPMIx is
//!   installed, Open MPI jobs across them, nothing left on either); `pattern.rs` the payload
//!   patterns; `impi.rs` IMPI servers and clients (`--impi-server`, `--impi-client`).
//! - `src/bin/`: the Rust test ranks (`engine_check`, `dyn_check`, `group_check`, `cancel_race`,
//!   `pmi_check`, `pmi_spawn_check`) and `no_io_uring`; `c/`: the C test programs (librivet,
//!   librivet-pmi, the MPI layer, PMIx).
//! - `tests/`: the integration tests, one file per area (launcher, engine, dynamic, group, PMI,
//!   PMI-2, PMIx, IMPI, multi-host, C APIs, the MPI layer, MPICH interop, peer benchmarks).
//!
//! What must stay true here (ARCHITECTURE.md's test invariant, in full): integration tests run
//! jobs one at a time with a deadline and fail if any process of the job outlives it; under
//! `--disable-auto-cleanup` they require that the rank they killed is the only failure rivetrun
//! reported; a job that kills no rank fails if rivetrun's `/dev/shm` sweep named anything.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod engine_cases;
pub mod impi;
pub mod netns;
pub mod pattern;
pub mod pmix_hosts;
pub mod procfs;
pub mod rank_check;
pub mod sshd;

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

/// Wait for `cond`, polling every 20 ms for at most `limit`; false if it
/// never held. It never panics: callers run inside `run_job_with`'s hook,
/// which must return for the job to be reaped.
pub fn wait_for(limit: std::time::Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while !cond() {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    true
}

/// Hold this for the whole of a test that starts processes.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An executable script whose interpreter does not exist, made in `dir`: it
/// passes rivetrun's check of the program, and only its exec fails (ENOENT).
pub fn bad_interpreter(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("bad-interpreter");
    std::fs::write(&path, "#!/no/such/interpreter\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}
