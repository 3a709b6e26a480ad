//! rivetrun across hosts when things go wrong: a host that dies, rivetrun
//! killed, a rank failing or not starting on another host, a host cut off
//! the network. The job fails naming the rank and host, and nothing is
//! left on any host. Namespace hosts on a bridge (`rivet_tests::netns`);
//! skipped, saying why, where they cannot be made (not root).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rivet_tests::netns::{cluster, on_hosts, Cluster};
use rivet_tests::{bin, run_job, run_job_with, serial};

const DEADLINE: Duration = Duration::from_secs(120);

/// Where `engine_check hang DIR` ranks mark themselves ready; removed on
/// drop, so also when an assertion fails.
struct ReadyMarks(std::path::PathBuf);

impl ReadyMarks {
    /// Whether ranks 0..n all marked themselves ready within 60 s.
    fn all_ready(&self, n: u32) -> bool {
        let start = Instant::now();
        while (0..n).any(|r| !self.0.join(format!("ready-{r}")).exists()) {
            if start.elapsed() > Duration::from_secs(60) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }
}

impl Drop for ReadyMarks {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A job of `ranks` ranks on the cluster's hosts (`slots` each) that
/// exchange a ring and then wait forever (`engine_check hang`).
fn hanging_job(c: &Cluster, name: &str, slots: u32, ranks: u32) -> (ReadyMarks, Command) {
    let dir = std::env::temp_dir().join(format!("rivet-mh-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let dir_arg = dir.display().to_string();
    let mut cmd = on_hosts(
        c,
        &["-hosts", &c.host_list(slots)],
        ranks,
        &["--iface", &c.iface.clone()],
        &bin("engine_check"),
        &["hang", &dir_arg],
    );
    cmd.stdin(std::process::Stdio::null());
    (ReadyMarks(dir), cmd)
}

#[test]
fn a_host_that_dies_fails_the_job_naming_it_and_nothing_is_left_on_the_others() {
    let _serial = serial();
    let Some(c) = cluster(2) else { return };
    let (marks, mut cmd) = hanging_job(&c, "hang", 2, 4);
    let mut killed_at = None;
    let mut killed = 0;
    let o = run_job_with(&mut cmd, DEADLINE, |_| {
        if !marks.all_ready(4) {
            return; // the job's own failure shows below
        }
        killed = c.kill_host(1);
        killed_at = Some(Instant::now());
    });
    let killed_at = killed_at.unwrap_or_else(|| panic!("ranks never got ready\n{}", o.show()));
    let took = killed_at.elapsed();
    assert!(killed >= 3, "h2 ran its proxy and 2 ranks, killed {killed}");
    assert_ne!(o.code(), Some(0), "{}", o.show());
    assert!(
        o.stderr.contains("host h2 lost"),
        "the message names the host\n{}",
        o.show()
    );
    // Generous: the job must come down, not hang (the aim is < 5 s).
    assert!(
        took < Duration::from_secs(30),
        "took {took:?}\n{}",
        o.show()
    );
    eprintln!("job down {took:?} after h2 was killed");
    assert!(c.pids(0).is_empty(), "left on h1: {:?}", c.pids(0));
}

#[test]
fn when_rivetrun_is_killed_nothing_is_left_on_any_host() {
    let _serial = serial();
    let Some(c) = cluster(2) else { return };
    let (marks, mut cmd) = hanging_job(&c, "kill9", 1, 2);
    let mut ready = false;
    // run_job_with fails the test if any process of the job outlives it.
    let o = run_job_with(&mut cmd, DEADLINE, |pid| {
        if !marks.all_ready(2) {
            return;
        }
        ready = true;
        // SAFETY: kill(2) takes no pointers.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    });
    assert!(ready, "ranks never got ready\n{}", o.show());
    assert_eq!(o.status.code(), None, "{}", o.show());
    for i in 0..2 {
        let start = Instant::now();
        while !c.pids(i).is_empty() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(c.pids(i).is_empty(), "left on h{}: {:?}", i + 1, c.pids(i));
    }
}

#[test]
fn a_failing_rank_on_another_host_ends_the_job_naming_rank_and_host() {
    let _serial = serial();
    let Some(c) = cluster(2) else { return };
    // (pmi_check mode and its arguments, exit code, what stderr must say);
    // ranks 0 and 1 run on h1, 2 and 3 on h2.
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["signal", "3", "9"],
            128 + 9,
            "rank 3 on h2 was killed by signal 9",
        ),
        (&["exit", "1", "3"], 3, "rank 1 on h1 exited with code 3"),
        (
            &["nofinalize", "2"],
            1,
            "rank 2 on h2 exited with code 0 without finalizing PMI",
        ),
        (
            &["abort", "3", "7"],
            7,
            "rank 3 on h2 called abort (exit code 7)",
        ),
    ];
    let iface = c.iface.clone();
    // A host the launcher cannot reach: the job fails naming it.
    let cmd = on_hosts(
        &c,
        &["-hosts", "h1,nosuch"],
        2,
        &["--iface", &iface],
        &bin("pmi_check"),
        &[],
    );
    let o = run_job(cmd, DEADLINE);
    assert_ne!(o.code(), Some(0), "{}", o.show());
    assert!(
        o.stderr
            .contains("host nosuch: the command starting its proxy ended (exit code 255)"),
        "{}",
        o.show()
    );
    for (mode, code, message) in cases {
        let cmd = on_hosts(
            &c,
            &["-hosts", &c.host_list(2)],
            4,
            &["--iface", &iface],
            &bin("pmi_check"),
            mode,
        );
        let o = run_job(cmd, DEADLINE);
        assert_eq!(o.code(), Some(*code), "{mode:?}: {}", o.show());
        assert!(o.stderr.contains(message), "{mode:?}: {}", o.show());
        assert!(!o.stderr.contains(" lost"), "{mode:?}: {}", o.show());
    }
}

#[test]
fn a_rank_whose_exec_fails_on_another_host_is_named_with_host_and_error() {
    let _serial = serial();
    let Some(c) = cluster(2) else { return };
    let dir = std::env::temp_dir().join(format!("rivet-badexec-mh-{}", std::process::id()));
    let bad = rivet_tests::bad_interpreter(&dir);
    let bad = bad.to_str().unwrap();
    // 2 slots each: ranks 0-1 on h1 sleep, on h2 rank 2 sleeps and rank 3
    // cannot exec.
    let cmd = on_hosts(
        &c,
        &["-hosts", &c.host_list(2)],
        3,
        &["--iface", &c.iface.clone()],
        Path::new("/bin/sleep"),
        &["30", ":", "-n", "1", bad],
    );
    let o = run_job(cmd, DEADLINE);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(o.code(), Some(1), "{}", o.show());
    let want = format!("host h2: could not start rank 3 ({bad}): No such file or directory");
    assert!(o.stderr.contains(&want), "{}", o.show());
}

#[test]
fn a_host_cut_off_the_network_fails_the_job_and_cleans_itself_up() {
    let _serial = serial();
    let Some(c) = cluster(2) else { return };
    let (marks, mut cmd) = hanging_job(&c, "cut", 1, 2);
    let mut cut_at = None;
    // No FIN, no reset: only keepalive finds out. run_job_with fails the
    // test if a process of the job (h2's included) outlives rivetrun.
    let o = run_job_with(&mut cmd, DEADLINE, |_| {
        if !marks.all_ready(2) {
            return;
        }
        c.cut_host(1).unwrap();
        cut_at = Some(Instant::now());
    });
    let cut_at = cut_at.unwrap_or_else(|| panic!("ranks never got ready\n{}", o.show()));
    assert_ne!(o.code(), Some(0), "{}", o.show());
    assert!(o.stderr.contains("host h2 lost"), "{}", o.show());
    eprintln!("job down {:?} after h2 was cut off", cut_at.elapsed());
    assert!(c.pids(1).is_empty(), "left on h2: {:?}", c.pids(1));
}
