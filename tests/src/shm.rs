//! Shared-memory segments: a job must leave none of its own behind, also
//! when a rank was killed.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::jobs::{run_job, Outcome};

/// libfabric's shm provider names its queues `<pid>:<n>:<m>`.
fn is_fabric_segment(name: &str) -> bool {
    name.split(':').count() == 3
        && name
            .split(':')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Names of the shared-memory segments a job may leave in /dev/shm:
/// Rivet's (`rivet-*`) and libfabric shm's.
pub fn shm_segments() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with("rivet-") || is_fabric_segment(n))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a live process maps or holds open `/dev/shm/<name>`.
fn shm_in_use(name: &str) -> bool {
    let path = format!("/dev/shm/{name}");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    for entry in dir.flatten() {
        if !entry
            .file_name()
            .to_str()
            .is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        let maps = std::fs::read_to_string(entry.path().join("maps")).unwrap_or_default();
        if maps
            .lines()
            .any(|l| l.split_whitespace().nth(5) == Some(path.as_str()))
        {
            return true;
        }
        if let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) {
            for fd in fds.flatten() {
                if std::fs::read_link(fd.path()).is_ok_and(|t| t == Path::new(&path)) {
                    return true;
                }
            }
        }
    }
    false
}

/// Watches /dev/shm across a job: `leaked` names the Rivet segments that
/// appeared since `new` and that no live process uses (so not another job
/// running at the same time), and removes them so that one leak fails one
/// test only.
pub struct ShmWatch {
    before: std::collections::BTreeSet<String>,
}

impl ShmWatch {
    pub fn new() -> ShmWatch {
        ShmWatch {
            before: shm_segments(),
        }
    }

    pub fn leaked(&self) -> Vec<String> {
        let fresh = || -> Vec<String> {
            shm_segments()
                .into_iter()
                .filter(|n| !self.before.contains(n) && !shm_in_use(n))
                .collect()
        };
        let mut left = fresh();
        // A segment another job has just created may not be mapped yet.
        let settle = Instant::now();
        while !left.is_empty() && settle.elapsed() < Duration::from_millis(500) {
            std::thread::sleep(Duration::from_millis(50));
            left = fresh();
        }
        for name in &left {
            let _ = std::fs::remove_file(Path::new("/dev/shm").join(name));
        }
        left
    }
}

impl Default for ShmWatch {
    fn default() -> Self {
        ShmWatch::new()
    }
}

/// What rivetrun says when its end-of-job sweep of `/dev/shm/rivet-<job>-*`
/// removed a segment, or when it freed a segment a rank registered and
/// left behind: either way an engine did not unlink its segment.
pub const SWEEP_MARKS: [&str; 2] = [
    "rivetrun: swept /dev/shm/",
    "ended without freeing shm rivet-",
];

/// Run a job and fail if it left a segment in `/dev/shm` or rivetrun had
/// to remove one of the job's segments for it (the sweep would otherwise
/// hide an engine that never unlinks): for every test that kills no rank.
pub fn run_job_checking_shm(cmd: Command, deadline: Duration) -> Outcome {
    let o = run_killed_job_checking_shm(cmd, deadline);
    for mark in SWEEP_MARKS {
        assert!(
            !o.stderr.contains(mark),
            "rivetrun removed a segment the job's ranks left behind ({mark:?})\n{}",
            o.show()
        );
    }
    o
}

/// [`run_job_checking_shm`] for a job that kills a rank on purpose: a
/// rank killed before the others attached leaves the node segment to
/// rivetrun's sweep, so only what is left after rivetrun is checked.
pub fn run_killed_job_checking_shm(cmd: Command, deadline: Duration) -> Outcome {
    let watch = ShmWatch::new();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_job(cmd, deadline)));
    let leaked = watch.leaked();
    match result {
        Ok(o) => {
            assert!(
                leaked.is_empty(),
                "the job left shared memory behind: /dev/shm/{leaked:?} (removed now)\n\
                 exit {:?}\nstdout:\n{}\nstderr:\n{}",
                o.status,
                o.stdout,
                o.stderr
            );
            o
        }
        Err(panic) => {
            if !leaked.is_empty() {
                eprintln!(
                    "the job also left shared memory behind: /dev/shm/{leaked:?} (removed now)"
                );
            }
            std::panic::resume_unwind(panic)
        }
    }
}
