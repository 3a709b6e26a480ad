//! rivetrun killed by `kill -9` mid-job: every rank ends by itself soon
//! after (its parent-death signal, or its engine seeing the PMI connection
//! hang up), and the next rivetrun removes what the dead job left in
//! /dev/shm and the temporary directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rivet_tests::{bin, mpicc_openmpi, rivetrun, run_job, serial, tagged_processes};

/// How long the job gets to start, and its ranks to end after the launcher
/// died. Without the fixes they never end; with them it takes milliseconds.
const START: Duration = Duration::from_secs(60);
const END: Duration = Duration::from_secs(5);

/// A directory for one case's marker files, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(case: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("rivet-test-death-{case}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Names in /dev/shm and the temporary directory that belong to the job
/// of rivetrun `pid`.
fn job_files(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("rivet-{pid}-");
    let mut found = Vec::new();
    for dir in [PathBuf::from("/dev/shm"), std::env::temp_dir()] {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(&prefix) {
                    found.push(e.path());
                }
            }
        }
    }
    found
}

fn kill_all(procs: &[(u32, String)]) {
    for (pid, _) in procs {
        // SAFETY: kill(2) takes no pointers.
        unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
    }
}

/// Start `cmd` (a rivetrun) tagged, wait until `ready` holds, `kill -9`
/// rivetrun, and require every process of the job to be gone within `END`;
/// then a next job must remove what this one left, and say so. Returns
/// what it left (before the next job).
fn kill_launcher(case: &str, mut cmd: Command, ready: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let tag = format!("death-{case}-{}", std::process::id());
    let log = std::env::temp_dir().join(format!("rivet-test-death-{case}.log"));
    let stderr = std::fs::File::create(&log).expect("log file");
    cmd.env("RIVET_TEST_TAG", &tag)
        .env("RIVET_YIELD", "always")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    let mut launcher: Child = cmd.spawn().expect("start rivetrun");
    let pid = launcher.id();
    let show = || std::fs::read_to_string(&log).unwrap_or_default();
    let started = Instant::now();
    while !ready(&tag) {
        if let Some(status) = launcher.try_wait().expect("wait") {
            kill_all(&tagged_processes(&tag));
            panic!(
                "{case}: rivetrun ended before the job was up: {status}\n{}",
                show()
            );
        }
        if started.elapsed() > START {
            let _ = launcher.kill();
            let _ = launcher.wait();
            kill_all(&tagged_processes(&tag));
            panic!(
                "{case}: the job did not come up within {START:?}\n{}",
                show()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let before: Vec<(u32, String)> = tagged_processes(&tag)
        .into_iter()
        .filter(|(p, _)| *p != pid)
        .collect();
    assert!(!before.is_empty(), "{case}: no rank found");

    // SAFETY: kill(2) takes no pointers; `pid` is our child, not yet reaped.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    let killed = Instant::now();
    launcher.wait().expect("reap rivetrun");
    let mut left = tagged_processes(&tag);
    while !left.is_empty() && killed.elapsed() < END {
        std::thread::sleep(Duration::from_millis(10));
        left = tagged_processes(&tag);
    }
    let took = killed.elapsed();
    kill_all(&left);
    assert!(
        left.is_empty(),
        "{case}: {} of the job's processes ({before:?}) still ran {END:?} after \
         rivetrun was killed: {left:?}\n{}",
        left.len(),
        show()
    );
    eprintln!(
        "{case}: all {} processes gone {took:?} after kill -9",
        before.len()
    );

    // The next job sweeps what this one could not remove, and names it.
    let left_behind = job_files(pid);
    let o = run_job(rivetrun(&["-n", "1", "true"]), START);
    assert_eq!(o.code(), Some(0), "{case}: {}", o.show());
    for f in &left_behind {
        assert!(
            o.stderr.contains(&f.display().to_string()),
            "{case}: the next job did not say it removed {f:?}\n{}",
            o.show()
        );
    }
    let files = job_files(pid);
    for f in &files {
        let _ = std::fs::remove_dir_all(f);
        let _ = std::fs::remove_file(f);
    }
    assert!(
        files.is_empty(),
        "{case}: the dead job's files outlived the next job: {files:?}\nnext job: {}",
        o.show()
    );
    let _ = std::fs::remove_file(&log);
    left_behind
}

/// Every rank of `n` wrote its marker in `dir`.
fn all_marked(dir: &Path, n: u32) -> bool {
    (0..n).all(|r| dir.join(format!("ready-{r}")).exists())
}

#[test]
fn ranks_blocked_in_a_wait_end_when_rivetrun_is_killed_over_shm_and_tcp() {
    let _serial = serial();
    for (case, netmod) in [("shm", None), ("tcp", Some("tcp"))] {
        let dir = Scratch::new(case);
        let mut cmd = rivetrun(&["-n", "2"]);
        cmd.arg(bin("engine_check")).arg("hang").arg(&dir.0);
        if let Some(n) = netmod {
            cmd.env("RIVET_NETMOD", n);
        }
        kill_launcher(case, cmd, |_| all_marked(&dir.0, 2));
    }
}

/// Under a wrapper shell the rank is rivetrun's grandchild: no parent-death
/// signal reaches it, only its engine's watch on the PMI connection (over
/// the inherited socket, and over TCP with --pmi-port).
#[test]
fn a_rank_under_a_wrapper_ends_when_its_pmi_connection_hangs_up() {
    let _serial = serial();
    for (case, port) in [("wrapped", false), ("wrapped-port", true)] {
        let dir = Scratch::new(case);
        let mut args = vec!["-n", "2"];
        if port {
            args.push("--pmi-port");
        }
        let mut cmd = rivetrun(&args);
        // `; exit` keeps the shell from exec'ing the rank in its place.
        let script = format!(
            "{} hang {} ; exit $?",
            bin("engine_check").display(),
            dir.0.display()
        );
        cmd.args(["sh", "-c", &script]);
        kill_launcher(case, cmd, |_| all_marked(&dir.0, 2));
    }
}

/// Spawned processes are rivetrun's children too: they end with it.
#[test]
fn spawned_processes_end_when_rivetrun_is_killed() {
    let _serial = serial();
    let mut cmd = rivetrun(&["-n", "1"]);
    cmd.arg(bin("pmi_spawn_check")).arg("spawn_sleep");
    kill_launcher("spawned", cmd, |tag| {
        tagged_processes(tag)
            .iter()
            .filter(|(_, comm)| comm == "pmi_spawn_check")
            .count()
            == 3
    });
}

/// A program that knows nothing of PMI ends by its parent-death signal.
#[test]
fn a_program_without_pmi_ends_when_rivetrun_is_killed() {
    let _serial = serial();
    let cmd = {
        let mut c = rivetrun(&["-n", "2"]);
        c.args(["sleep", "1000"]);
        c
    };
    kill_launcher("sleep", cmd, |tag| {
        tagged_processes(tag)
            .iter()
            .filter(|(_, comm)| comm == "sleep")
            .count()
            == 2
    });
}

/// Open MPI's ranks keep their shared-memory segments in the job's own
/// directory in `/dev/shm`, so a killed rivetrun, which leaves no PMIx
/// server to remove them, leaves them to the next rivetrun's sweep.
#[test]
fn open_mpi_segments_of_a_killed_rivetrun_go_at_the_next_start() {
    let _serial = serial();
    let mut cmd = rivetrun(&["-n", "2"]);
    // No rank 9: every rank passes the barrier and sleeps a minute.
    cmd.arg(mpicc_openmpi("mpi_check.c"))
        .args(["abort", "9", "0"]);
    let segments_in_job_dir = |tag: &str| {
        let Some((pid, _)) = tagged_processes(tag)
            .into_iter()
            .find(|(_, comm)| comm == "rivetrun")
        else {
            return 0;
        };
        std::fs::read_dir(format!("/dev/shm/rivet-{pid}-ompi")).map_or(0, |d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("vader_segment.")
                })
                .count()
        })
    };
    let left = kill_launcher("openmpi", cmd, |tag| segments_in_job_dir(tag) == 2);
    assert!(
        left.iter().any(|f| f.to_string_lossy().ends_with("-ompi")),
        "the segments' directory was not left for the sweep: {left:?}"
    );
}
