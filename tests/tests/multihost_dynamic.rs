//! Dynamic processes in multi-host jobs (namespace hosts, `--launcher-exec`):
//! names published on one host and looked up on another (rivetrun's table
//! or a `--nameserver`, over PMI-1 and PMI-2, within a job and between jobs),
//! spawn (the children start on the spawning rank's host), and group
//! connect over ranks of several hosts, spawned children included (served
//! job-wide by rivetrun). Skipped, saying why, where namespaces cannot be
//! made (not root).

use std::time::Duration;

use rivet_tests::netns::Cluster;
use rivet_tests::{bin, run_job, serial, NameServer, Outcome};

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

#[test]
fn names_cross_hosts_over_pmi1_and_pmi2_through_rivetrun_and_a_name_server() {
    let _serial = serial();
    let Some(c) = cluster(2) else { return };
    let server = NameServer::start();
    // Within a job: rank 0 (h1) publishes, a duplicate is refused, all four
    // ranks (h1 and h2) look it up, rank 0 unpublishes, lookups then fail.
    for pmi in ["pmi1", "pmi2"] {
        for name_server in [None, Some(server.addr.as_str())] {
            let case = format!("{pmi}, name server {name_server:?}");
            let mut cmd = c.rivetrun(2, 4);
            cmd.args(["-genv", "RIVET_PMI", pmi]);
            if let Some(addr) = name_server {
                cmd.args(["--nameserver", addr]);
            }
            cmd.arg(bin("pmi_check")).arg("check");
            let o = run_job(cmd, DEADLINE);
            assert_eq!(o.code(), Some(0), "{case}: {}", o.show());
            let over = format!(" over {pmi}");
            let ranks = o.stdout.lines().filter(|l| l.ends_with(&over)).count();
            assert_eq!(ranks, 4, "{case}: {}", o.show());
            let passed = o.stdout.matches("pmi_check OK rank ").count();
            assert_eq!(passed, 4, "{case}: {}", o.show());
        }
    }
    // Between jobs on different hosts, through the name server: published
    // over PMI-2 by a job on h1, looked up and unpublished over PMI-1 by
    // jobs on h2.
    let one_rank_on = |host: &str, pmi: &str, op: &[&str]| {
        let exec = c.launcher_exec().display().to_string();
        let mut cmd = rivet_tests::rivetrun(&[
            "--launcher",
            "rsh",
            "--launcher-exec",
            &exec,
            "--iface",
            &c.iface,
            "--nameserver",
            &server.addr,
            "-hosts",
            host,
            "-n",
            "1",
            "-genv",
            "RIVET_PMI",
            pmi,
        ]);
        cmd.arg(bin("pmi_spawn_check")).arg("name").args(op);
        let o = run_job(cmd, DEADLINE);
        assert_eq!(o.code(), Some(0), "{op:?} on {host}: {}", o.show());
        o.stdout
    };
    let steps: &[(&str, &str, &[&str], &str)] = &[
        (
            "h1",
            "pmi2",
            &["publish", "sky", "port-on-h1"],
            "name publish sky -> ok \n",
        ),
        (
            "h2",
            "pmi1",
            &["lookup", "sky"],
            "name lookup sky -> ok port-on-h1\n",
        ),
        (
            "h2",
            "pmi1",
            &["unpublish", "sky"],
            "name unpublish sky -> ok \n",
        ),
        (
            "h1",
            "pmi2",
            &["lookup", "sky"],
            "name lookup sky -> error rc=1 msg=service_not_found\n",
        ),
    ];
    for (host, pmi, op, want) in steps {
        let out = one_rank_on(host, pmi, op);
        assert!(out.contains(want), "{op:?} on {host} over {pmi}: {out}");
    }
    assert!(server.stop().success());
}
