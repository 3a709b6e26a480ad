//! `rivetrun --launcher ssh` against a real sshd in each namespace host
//! (`rivet_tests::sshd`): a job across two hosts, a host whose sshd is
//! down, a client without the key. Skipped, saying why, where namespaces
//! cannot be made (not root) or sshd is not installed.

use std::process::Command;
use std::time::{Duration, Instant};

use rivet_tests::netns::Cluster;
use rivet_tests::sshd::Sshd;
use rivet_tests::{bin, rivetrun, run_job, serial};

const DEADLINE: Duration = Duration::from_secs(120);

fn hosts_with_sshd(n: usize) -> Option<(Cluster, Sshd)> {
    let c = match Cluster::new(n) {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipping: cannot create network namespace hosts here: {why}");
            return None;
        }
    };
    match Sshd::start(&c) {
        Ok(s) => Some((c, s)),
        Err(why) => {
            eprintln!("skipping: cannot start sshd in the namespace hosts: {why}");
            None
        }
    }
}

/// `rivetrun --launcher ssh` on the cluster's hosts, ssh configured by `config`.
fn over_ssh(c: &Cluster, config: &std::path::Path, n: u32, args: &[&str]) -> Command {
    let n = n.to_string();
    let hosts = c.host_list(2);
    let mut cmd = rivetrun(&[
        "--launcher",
        "ssh",
        "--iface",
        &c.iface,
        "-hosts",
        &hosts,
        "-n",
        &n,
        "-genv",
        "RIVET_YIELD",
        "always",
        "--report-bindings",
    ]);
    cmd.args(args)
        .env("RIVET_LAUNCHER_EXTRA_ARGS", Sshd::extra_args(config));
    cmd
}

/// Processes on host `i` other than its sshd, once they are gone or after 5 s.
fn left_on(c: &Cluster, s: &Sshd, i: usize) -> Vec<u32> {
    let start = Instant::now();
    loop {
        let left: Vec<u32> = c
            .pids(i)
            .into_iter()
            .filter(|&p| Some(p) != s.pid(i))
            .collect();
        if left.is_empty() || start.elapsed() > Duration::from_secs(5) {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ssh_launches_a_job_on_two_hosts_and_a_host_without_sshd_fails_it_by_name() {
    let _serial = serial();
    let Some((c, mut sshd)) = hosts_with_sshd(2) else {
        return;
    };
    let check = bin("engine_check").display().to_string();
    // 2 hosts x 2 ranks, each host's proxy started by ssh through its sshd.
    let o = run_job(
        over_ssh(&c, &sshd.config, 4, &[&check, "connect_all"]),
        DEADLINE,
    );
    assert_eq!(
        o.code(),
        Some(0),
        "{}\nsshd h1: {}\nsshd h2: {}",
        o.show(),
        sshd.log(0),
        sshd.log(1)
    );
    for rank in 0..4 {
        let ok = format!("engine_check connect_all OK rank {rank} of 4 ");
        assert!(o.stdout.contains(&ok), "rank {rank}: {}", o.show());
    }
    // Each proxy ran on its own host (the sshd's UTS namespace).
    for want in [
        "rank 0 on h1 (node 0, local 0 of 2)",
        "rank 3 on h2 (node 1, local 1 of 2)",
    ] {
        assert!(o.stderr.contains(want), "{want:?}: {}", o.show());
    }
    assert!(o.stdout.contains("vcs: 1 shm, 2 netmod"), "{}", o.show());
    for i in 0..2 {
        assert!(left_on(&c, &sshd, i).is_empty(), "left on h{}", i + 1);
    }

    // Without the key: ssh must not prompt (BatchMode); the job fails fast
    // with ssh's reason and rivetrun's hint, naming the host that failed
    // first (the other's ssh is stopped by the teardown).
    let o = run_job(
        over_ssh(&c, &sshd.config_without_key, 4, &[&check, "connect_all"]),
        DEADLINE,
    );
    assert_ne!(o.code(), Some(0), "{}", o.show());
    assert!(o.stderr.contains("Permission denied"), "{}", o.show());
    let named = ["h1", "h2"].iter().any(|host| {
        let want = format!("host {host}: the command starting its proxy ended (exit code 255)");
        o.stderr.contains(&want)
    });
    assert!(named, "{}", o.show());
    assert!(o.stderr.contains("BatchMode=yes"), "{}", o.show());
    assert!(o.elapsed < Duration::from_secs(30), "{}", o.show());

    // h2's sshd is down: h1's proxy starts its ranks, which wait for h2's
    // forever; the job fails naming h2 and nothing is left on h1.
    sshd.stop(1);
    let o = run_job(
        over_ssh(&c, &sshd.config, 4, &[&check, "connect_all"]),
        DEADLINE,
    );
    assert_ne!(o.code(), Some(0), "{}", o.show());
    assert!(o.stderr.contains("Connection refused"), "{}", o.show());
    assert!(
        o.stderr
            .contains("host h2: the command starting its proxy ended (exit code 255)"),
        "{}",
        o.show()
    );
    assert!(!o.stderr.contains("host h1:"), "{}", o.show());
    // (run_job already failed the test if rivetrun's ssh clients outlived it.)
    assert!(left_on(&c, &sshd, 0).is_empty(), "left on h1");
    assert!(c.pids(1).is_empty(), "h2 runs nothing: {:?}", c.pids(1));
}
