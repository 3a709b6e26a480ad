//! Shared by the multi-host PMIx tests (`multihost_pmix.rs`,
//! `multihost_pmix_dynamic.rs`): their two namespace hosts, skipped where
//! OpenPMIx is missing, the Open MPI jobs they run across them, and the check
//! that nothing of a job is left on either host.

use std::process::Command;
use std::time::Duration;

use crate::netns::Cluster;
use crate::{mpicc_openmpi, pmix_dirs, run_job, Outcome};

/// How long a multi-host PMIx job may run.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// Two namespace hosts, or None (saying why) where they or PMIx are missing.
pub fn cluster() -> Option<Cluster> {
    if !std::path::Path::new("/usr/lib/x86_64-linux-gnu/libpmix.so.2").exists()
        && Command::new("pkg-config")
            .args(["--exists", "pmix"])
            .status()
            .map_or(true, |s| !s.success())
    {
        eprintln!("skipping: OpenPMIx is not installed");
        return None;
    }
    crate::netns::cluster(2)
}

/// No process left on any host, no PMIx directory left of those not in `before`.
pub fn nothing_left(c: &Cluster, o: &Outcome, before: &[String]) {
    let left: Vec<String> = pmix_dirs()
        .into_iter()
        .filter(|d| !before.contains(d))
        .collect();
    assert!(
        left.is_empty(),
        "PMIx directories left: {left:?}\n{}",
        o.show()
    );
    for i in 0..c.hosts.len() {
        assert!(
            c.pids(i).is_empty(),
            "left on h{}: {:?}\n{}",
            i + 1,
            c.pids(i),
            o.show()
        );
    }
}

/// Open MPI's `tests/c/SRC`, built with `mpicc.openmpi`, run by rivetrun
/// on the two hosts (`c.rivetrun(per_host, n)`) with `args`.
pub fn open_mpi_job(c: &Cluster, per_host: u32, n: u32, src: &str, args: &[&str]) -> Outcome {
    let mut cmd = c.rivetrun(per_host, n);
    cmd.arg(mpicc_openmpi(src)).args(args);
    run_job(cmd, DEADLINE)
}
