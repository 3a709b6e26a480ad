//! Dynamic processes in multi-host jobs (namespace hosts, `--launcher-exec`):
//! names published on one host and looked up on another (rivetrun's table),
//! spawn (the children start on the spawning rank's host), and group
//! connect over ranks of several hosts, spawned children included (served
//! job-wide by rivetrun). Skipped, saying why, where namespaces cannot be
//! made (not root).

use std::time::Duration;

use rivet_tests::netns::Cluster;
use rivet_tests::{bin, run_job, serial, Outcome};

const DEADLINE: Duration = Duration::from_secs(120);

fn cluster(n: usize) -> Option<Cluster> {
    match Cluster::new(n) {
        Ok(c) => Some(c),
        Err(why) => {
            eprintln!("skipping: cannot create network namespace hosts here: {why}");
            None
        }
    }
}

/// `program ARGS` as `n` ranks on the cluster's hosts, 2 per host.
fn job(c: &Cluster, n: u32, program: &str, args: &[&str]) -> Outcome {
    let mut cmd = c.rivetrun(2, n);
    cmd.args(["-genv", "RIVET_YIELD", "always"]);
    cmd.arg(bin(program)).args(args);
    run_job(cmd, DEADLINE)
}

fn oks(o: &Outcome, program: &str, mode: &str) -> usize {
    let ok = format!("{program} {mode} OK rank ");
    o.stdout.lines().filter(|l| l.starts_with(&ok)).count()
}

#[test]
fn names_spawn_and_group_connect_work_across_hosts() {
    let _serial = serial();
    let Some(c) = cluster(2) else { return };
    // Names: every rank publishes, looks up and unpublishes; ranks 0-1 on
    // h1, 2-3 on h2, one table (rivetrun's).
    let o = job(&c, 4, "dyn_check", &["names"]);
    assert_eq!(o.code(), Some(0), "names: {}", o.show());
    assert_eq!(oks(&o, "dyn_check", "names"), 4, "{}", o.show());

    // Spawn from a job on two hosts: 2 children exchange with all 4
    // parents (on h1 and h2); the spawn of a missing program fails on
    // every parent, which go on.
    let o = job(&c, 4, "dyn_check", &["spawn", "2"]);
    assert_eq!(o.code(), Some(0), "spawn: {}", o.show());
    assert_eq!(oks(&o, "dyn_check", "spawn"), 4, "{}", o.show());
    assert_eq!(oks(&o, "dyn_check", "child"), 2, "{}", o.show());

    // Group connect over the whole job and over ranks 1..3 (both hosts).
    let o = job(&c, 4, "group_check", &["flat"]);
    assert_eq!(o.code(), Some(0), "flat: {}", o.show());
    assert_eq!(oks(&o, "group_check", "flat"), 4, "{}", o.show());

    // Parents on two hosts and their spawned children in one group.
    let o = job(&c, 4, "group_check", &["parents", "2"]);
    assert_eq!(o.code(), Some(0), "parents: {}", o.show());
    assert_eq!(oks(&o, "group_check", "parents"), 4, "{}", o.show());
    assert_eq!(oks(&o, "group_check", "child"), 2, "{}", o.show());
}
