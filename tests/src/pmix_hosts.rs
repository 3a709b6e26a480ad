//! Shared by the multi-host PMIx tests (`multihost_pmix.rs`,
//! `multihost_pmix_dynamic.rs`): `Hosts`, their two namespace hosts held
//! for one test (skipped where OpenPMIx is missing), the jobs they run
//! across them, and the check after each job that nothing of it is left
//! on either host.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::MutexGuard;
use std::time::Duration;

use crate::netns::Cluster;
use crate::{cc_pmix, mpicc_openmpi, pmix_dirs, run_job, serial, Outcome};

/// How long a multi-host PMIx job may run.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// Two namespace hosts held by one test, with the serial lock (dropped
/// after the hosts) and the PMIx directories that were there before it.
pub struct Hosts {
    pub cluster: Cluster,
    before: Vec<String>,
    _serial: MutexGuard<'static, ()>,
}

impl Hosts {
    /// Takes the serial lock and makes the two hosts, or None (saying why)
    /// where they or OpenPMIx are missing.
    pub fn open() -> Option<Hosts> {
        let serial = serial();
        let cluster = cluster()?;
        Some(Hosts {
            cluster,
            before: pmix_dirs(),
            _serial: serial,
        })
    }

    /// `open`, and the PMIx client `tests/c/SRC` built with `cc_pmix`.
    pub fn with_pmix_program(src: &str) -> Option<(Hosts, PathBuf)> {
        let h = Hosts::open()?;
        Some((h, cc_pmix(src)))
    }

    /// rivetrun over both hosts, `per_host` slots on each, `n` ranks.
    pub fn rivetrun(&self, per_host: u32, n: u32) -> Command {
        self.cluster.rivetrun(per_host, n)
    }

    /// Runs `cmd` (within `DEADLINE`); then no process of it may be left
    /// on either host, nor a PMIx directory that was not there before.
    pub fn run(&self, cmd: Command) -> Outcome {
        let o = run_job(cmd, DEADLINE);
        self.nothing_left(&o);
        o
    }

    /// `prog args` run by rivetrun (`rivetrun(per_host, n)`), as `run` does.
    pub fn run_program(&self, per_host: u32, n: u32, prog: &Path, args: &[&str]) -> Outcome {
        let mut cmd = self.rivetrun(per_host, n);
        cmd.arg(prog).args(args);
        self.run(cmd)
    }

    /// Rivet's test program `bin` (`crate::bin`) with `args`, its ranks
    /// bootstrapped by PMIx (`RIVET_PMI=pmix`, `RIVET_YIELD=always`), run
    /// as `run_program` does.
    pub fn run_rivet_pmix(&self, per_host: u32, n: u32, bin: &str, args: &[&str]) -> Outcome {
        let mut cmd = self.rivetrun(per_host, n);
        cmd.args([
            "-genv",
            "RIVET_PMI",
            "pmix",
            "-genv",
            "RIVET_YIELD",
            "always",
        ])
        .arg(crate::bin(bin))
        .args(args);
        self.run(cmd)
    }

    /// Open MPI's `tests/c/SRC`, built with `mpicc.openmpi`, run as
    /// `run_program` does.
    pub fn open_mpi_job(&self, per_host: u32, n: u32, src: &str, args: &[&str]) -> Outcome {
        self.run_program(per_host, n, &mpicc_openmpi(src), args)
    }

    fn nothing_left(&self, o: &Outcome) {
        let left: Vec<String> = pmix_dirs()
            .into_iter()
            .filter(|d| !self.before.contains(d))
            .collect();
        assert!(
            left.is_empty(),
            "PMIx directories left: {left:?}\n{}",
            o.show()
        );
        let c = &self.cluster;
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
}

/// Two namespace hosts, or None (saying why) where they or PMIx are missing.
fn cluster() -> Option<Cluster> {
    if !Path::new("/usr/lib/x86_64-linux-gnu/libpmix.so.2").exists()
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
