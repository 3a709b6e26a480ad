//! Seed 002's resource registration end to end: ranks of a rivetrun job
//! register a file, a shared-memory segment and a child process (in a
//! process group of its own, so rivetrun's teardown of the ranks' groups
//! does not reach it), register and release a second file, and one rank is
//! killed with SIGKILL. rivetrun frees what each rank registered and did
//! not release — the file and segment are gone, the child is dead — and
//! leaves the released file alone; across hosts each node's proxy does the
//! same for its ranks. As a singleton (no process manager)
//! registering is refused with an error, as the seed requires.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rivet_tests::procfs::rank_pid;
use rivet_tests::{bin, rivetrun, run_job_with, serial};

const DEADLINE: Duration = Duration::from_secs(90);

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(case: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("rivet-test-res-{case}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// `(shm name, child pid)` of each `pmi_check resources rank R ...` line.
fn registered(stdout: &str) -> Vec<(String, u32)> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("pmi_check resources rank "))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            match f[..] {
                [_, "shm", shm, "child", pid] => Some((shm.to_string(), pid.parse().ok()?)),
                _ => None,
            }
        })
        .collect()
}

fn alive(pid: u32) -> bool {
    // A zombie is gone for our purpose; rivetrun's teardown reaps none of
    // these (they are not its children), init does.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

/// Run `pmi_check resources DIR` under `cmd` (2 ranks), SIGKILL rank 1
/// (`find(launcher pid)`) once both are ready, and check that what each
/// rank registered was freed, what it released kept, and that `freer`
/// named what it freed of rank 1 (`"rank 1 ended"` and the like).
fn kill_rank_1_and_check(
    mut cmd: std::process::Command,
    dir: &Scratch,
    find: impl Fn(u32) -> Option<u32>,
    freer: &str,
) {
    let d = dir.0.clone();
    cmd.arg(bin("pmi_check"))
        .args(["resources", d.to_str().unwrap()])
        .stdin(Stdio::null());
    let marked = |d: &Path| (0..2).all(|r| d.join(format!("ready-{r}")).exists());
    let mut killed = None;
    let o = run_job_with(&mut cmd, DEADLINE, |launcher| {
        let start = Instant::now();
        while !marked(&d) && start.elapsed() < DEADLINE / 2 {
            std::thread::sleep(Duration::from_millis(20));
        }
        killed = find(launcher);
        if let Some(pid) = killed {
            // SAFETY: kill(2) takes no pointers.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    });
    let found = registered(&o.stdout);
    // Whatever happened, no child outlives the test.
    for (_, pid) in &found {
        if alive(*pid) {
            // SAFETY: kill(2) takes no pointers.
            unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
        }
    }
    assert!(killed.is_some(), "rank 1 not found\n{}", o.show());
    assert_ne!(
        o.code(),
        Some(0),
        "a killed rank fails the job\n{}",
        o.show()
    );
    assert_eq!(found.len(), 2, "both ranks registered\n{}", o.show());
    for rank in 0..2 {
        assert!(
            !d.join(format!("file-{rank}")).exists(),
            "rank {rank}'s registered file is still there\n{}",
            o.show()
        );
        assert!(
            d.join(format!("kept-{rank}")).exists(),
            "rank {rank}'s released file was removed\n{}",
            o.show()
        );
    }
    let start = Instant::now();
    for (shm, pid) in &found {
        assert!(
            !Path::new("/dev/shm").join(shm).exists(),
            "segment {shm} is still there\n{}",
            o.show()
        );
        // The SIGKILL was sent before rivetrun returned; give the kernel a
        // moment to finish the process.
        while alive(*pid) && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!alive(*pid), "child {pid} was not killed\n{}", o.show());
    }
    assert!(
        o.stderr
            .contains(&format!("{freer} without freeing shm rivet-restest-")),
        "the freer names what it freed\n{}",
        o.show()
    );
}

#[test]
fn rivetrun_frees_what_a_killed_rank_registered() {
    let _serial = serial();
    let dir = scratch("kill");
    let cmd = rivetrun(&["-n", "2"]);
    kill_rank_1_and_check(cmd, &dir, |launcher| rank_pid(launcher, 1), "rank 1 ended");
}

/// Across hosts each node's proxy keeps its ranks' registrations and frees
/// them (rank 1 runs on h2, under h2's proxy; rank 0 on h1 is ended by
/// the job's teardown and its proxy frees its part).
#[test]
fn proxies_free_what_their_ranks_registered_across_hosts() {
    let _serial = serial();
    let c = match rivet_tests::netns::Cluster::new(2) {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipping: cannot create network namespace hosts here: {why}");
            return;
        }
    };
    let dir = scratch("hosts");
    let cmd = c.rivetrun(1, 2);
    // Rank 1 is the pmi_check process in h2's namespace (its `sleep`
    // child has the same environment, another name).
    let find = |_| {
        c.pids(1).into_iter().find(|&pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            comm.trim() == "pmi_check" && env.split(|&b| b == 0).any(|v| v == b"PMI_RANK=1")
        })
    };
    kill_rank_1_and_check(cmd, &dir, find, "rank 1 (on h2) ended");
}

#[test]
fn without_a_process_manager_registering_is_an_error() {
    let dir = scratch("singleton");
    let o = std::process::Command::new(bin("pmi_check"))
        .args(["resources", dir.0.to_str().unwrap()])
        .env_remove("PMI_FD")
        .env_remove("PMI_PORT")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        stdout.contains("pmi_check resources refused:") && stdout.contains("the program must"),
        "{stdout}"
    );
    assert!(!dir.0.join("file-0").exists(), "it cleaned up itself");
}
