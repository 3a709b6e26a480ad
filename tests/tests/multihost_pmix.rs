//! PMIx across hosts: each host's proxy serves its ranks PMIx through
//! OpenPMIx's server, fences gathered through the proxy tree, direct modex
//! and names through rivetrun, fences over some ranks, groups and connects
//! (Open MPI's spawn and connect/accept with ranks on both hosts) gathered by
//! rivetrun, every rank's MPMD app registered on every host; what is not
//! carried fails at once. Namespace hosts (`rivet_tests::netns`), entered
//! through `--launcher-exec`; skipped, saying why, where they cannot be
//! made (not root) or OpenPMIx is missing.

use std::process::Command;
use std::time::Duration;

use rivet_tests::netns::Cluster;
use rivet_tests::{
    bin, cc_pmix, mpi_check_passed_on_hosts, mpicc_openmpi, pmix_dirs, run_job, serial, Outcome,
};

const DEADLINE: Duration = Duration::from_secs(120);

/// Two namespace hosts, or None (saying why) where they or PMIx are missing.
fn cluster() -> Option<Cluster> {
    if !std::path::Path::new("/usr/lib/x86_64-linux-gnu/libpmix.so.2").exists()
        && Command::new("pkg-config")
            .args(["--exists", "pmix"])
            .status()
            .map_or(true, |s| !s.success())
    {
        eprintln!("skipping: OpenPMIx is not installed");
        return None;
    }
    match Cluster::new(2) {
        Ok(c) => Some(c),
        Err(why) => {
            eprintln!("skipping: cannot create network namespace hosts here: {why}");
            None
        }
    }
}

/// No process left on any host, no PMIx directory left of those not in `before`.
fn nothing_left(c: &Cluster, o: &Outcome, before: &[String]) {
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
fn open_mpi_job(c: &Cluster, per_host: u32, n: u32, src: &str, args: &[&str]) -> Outcome {
    let mut cmd = c.rivetrun(per_host, n);
    cmd.arg(mpicc_openmpi(src)).args(args);
    run_job(cmd, DEADLINE)
}

/// The job ended with code 0 and printed each of `lines`.
fn passed_saying<S: AsRef<str>>(o: &Outcome, lines: impl IntoIterator<Item = S>) {
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for want in lines {
        let want = want.as_ref();
        assert!(o.stdout.contains(want), "{want:?}: {}", o.show());
    }
}

#[test]
fn rivet_ranks_bootstrapped_by_pmix_run_p2p_across_2_hosts_of_2_ranks() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    // RIVET_PMI=pmix: the ranks take their proxy's PMIx server; the cards
    // of the other host's ranks come through the fence across proxies.
    for mode in ["connect_all", "stress"] {
        let mut cmd = c.rivetrun(2, 4);
        cmd.args([
            "-genv",
            "RIVET_PMI",
            "pmix",
            "-genv",
            "RIVET_YIELD",
            "always",
        ])
        .arg(bin("engine_check"))
        .arg(mode);
        if mode == "stress" {
            cmd.arg("2000");
        }
        let o = run_job(cmd, DEADLINE);
        assert_eq!(o.code(), Some(0), "{mode}: {}", o.show());
        for r in 0..4 {
            let ok = format!("engine_check {mode} OK rank {r} of 4 ");
            assert!(o.stdout.contains(&ok), "{mode} rank {r}: {}", o.show());
        }
        if mode == "connect_all" {
            // Rank 0 on h1: its host's other rank by shm, h2's two by tcp;
            // it learned which ranks share its host from PMIx.
            for want in [
                "engine_check info: vcs: 1 shm, 2 netmod",
                "(4 ranks, 2 on this node",
                "bootstrap: process manager (PMIx, OpenPMIx client)",
            ] {
                assert!(o.stdout.contains(want), "{want:?}: {}", o.show());
            }
        }
        nothing_left(&c, &o, &before);
    }
}

#[test]
fn pmix_cards_cross_hosts_by_fence_and_by_direct_modex() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    let prog = cc_pmix("pmix_modex.c");
    for mode in ["collect", "direct"] {
        let mut cmd = c.rivetrun(2, 4);
        cmd.arg(&prog).arg(mode);
        let o = run_job(cmd, DEADLINE);
        assert_eq!(o.code(), Some(0), "{mode}: {}", o.show());
        for r in 0..4 {
            let ok = format!("pmix_modex {mode} rank {r} of 4 OK");
            assert!(o.stdout.contains(&ok), "{mode} rank {r}: {}", o.show());
        }
        nothing_left(&c, &o, &before);
    }
}

/// `PMIx_Spawn` from a rank of either host: its proxy starts the children
/// on its own host, registered with its PMIx server; each child reads its
/// parent's card (a get across namespaces on one node) and those of the
/// parent job's other ranks (on the other host: direct modex), the parent
/// reads each child's; then they connect to each other and exchange lines.
#[test]
fn pmix_spawn_under_proxies_children_and_parent_talk() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    let prog = cc_pmix("pmix_spawn.c");
    // Rank 0 is on h1 (the first proxy), rank 3 on h2.
    for root in [0u32, 3] {
        let mut cmd = c.rivetrun(2, 4);
        cmd.arg(&prog).args(["talk", "2", &root.to_string()]);
        let o = run_job(cmd, DEADLINE);
        assert_eq!(o.code(), Some(0), "root {root}: {}", o.show());
        let (parent, kvs) = o
            .stdout
            .lines()
            .find_map(|l| {
                l.strip_prefix("pmix_spawn talk parent ")?
                    .split_once(" spawned ")
            })
            .unwrap_or_else(|| panic!("root {root}: no spawn reported: {}", o.show()));
        assert!(parent.ends_with(&format!(":{root}")), "{}", o.show());
        // The namespace of a proxy's spawn: `<job>_h<PROXY>_s<N>`.
        let proxy = if root == 0 { 0 } else { 1 };
        assert!(
            kvs.ends_with(&format!("_h{proxy}_s1")),
            "root {root}: {kvs}: {}",
            o.show()
        );
        for child in 0..2 {
            let mut want = vec![
                format!("pmix_spawn talk parent heard: child {child} to parent"),
                format!("pmix_spawn talk child {child} heard: parent to child {child}"),
            ];
            for r in (0..4).filter(|&r| r != root) {
                want.push(format!(
                    "pmix_spawn talk child {child} card of parent rank {r}: rank-{r}"
                ));
            }
            for w in want {
                assert!(o.stdout.contains(&w), "root {root}: {w:?}: {}", o.show());
            }
        }
        // The parent job's other ranks, on both hosts, read a child's card.
        for r in (0..4).filter(|&r| r != root) {
            let read = format!("pmix_spawn talk rank {r} read child 0's card: port:");
            assert!(
                o.stdout.contains(&read),
                "root {root}: {read}: {}",
                o.show()
            );
        }
        for r in 0..4 {
            let ok = format!("pmix_spawn talk rank {r} OK");
            assert!(o.stdout.contains(&ok), "root {root}: {ok}: {}", o.show());
        }
        nothing_left(&c, &o, &before);
    }
}

/// A rank on h2 spawns children there (served PMIx: the parent reads
/// their cards) and aborts: the job ends with its code and the teardown
/// kills the children too, nothing left on either host.
#[test]
fn pmix_spawned_children_under_proxies_die_with_the_job() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    let prog = cc_pmix("pmix_spawn.c");
    let mut cmd = c.rivetrun(2, 4);
    cmd.arg(&prog).args(["abort", "2", "3"]);
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(7), "{}", o.show());
    assert!(
        o.stdout.contains("pmix_spawn abort: 2 children up in "),
        "{}",
        o.show()
    );
    assert!(
        o.stderr.contains("rank 3 on h2 called abort (exit code 7)"),
        "{}",
        o.show()
    );
    nothing_left(&c, &o, &before);
}

/// A `PMIx_Spawn` of a program that does not exist fails at the caller,
/// rivetrun says why, nothing is started and the job ends cleanly.
#[test]
fn pmix_spawn_of_a_missing_program_under_proxies_fails_cleanly() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    let prog = cc_pmix("pmix_spawn.c");
    let mut cmd = c.rivetrun(2, 4);
    cmd.arg(&prog).args(["missing", "2"]);
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert!(
        o.stdout.contains("pmix_spawn missing refused: "),
        "{}",
        o.show()
    );
    for want in [
        "spawn requested by rank 2 of ",
        "cannot execute 'rivet-no-such-program': not found",
    ] {
        assert!(o.stderr.contains(want), "{want:?}: {}", o.show());
    }
    nothing_left(&c, &o, &before);
}

/// A PMIx group member that ends without leaving, on h2: the members on
/// h1 hear it (`PMIX_GROUP_MEMBER_FAILED` through their own proxy's
/// server, as rivetrun passed it on), as does the other member on h2; a
/// group made without `PMIX_GROUP_NOTIFY_TERMINATION` fails the job
/// naming the rank, its host and the group, as on one host.
#[test]
fn a_pmix_group_members_end_reaches_members_on_other_hosts() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    let prog = cc_pmix("pmix_group_term.c");
    // Ranks 0 and 1 on h1, 2 and 3 on h2; rank 3 ends first.
    let mut cmd = c.rivetrun(2, 4);
    cmd.arg(&prog);
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for r in 0..3 {
        let want = format!("pmix_group_term rank {r} heard rank 3 end OK");
        assert!(o.stdout.contains(&want), "{want}: {}", o.show());
    }
    nothing_left(&c, &o, &before);

    let mut cmd = c.rivetrun(2, 4);
    cmd.arg(&prog).arg("strict");
    let o = run_job(cmd, DEADLINE);
    assert_ne!(o.code(), Some(0), "strict: {}", o.show());
    assert!(
        o.stderr
            .contains("rank 3 on h2 ended while connected to group pmix-term-test"),
        "strict: rivetrun must name the rank, its host and the group\n{}",
        o.show()
    );
    nothing_left(&c, &o, &before);
}

#[test]
fn what_proxies_do_not_carry_for_pmix_fails_at_once_with_an_error() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    let prog = cc_pmix("pmix_modex.c");
    let mut cmd = c.rivetrun(2, 4);
    cmd.arg(&prog).arg("refused");
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    // A fence naming another namespace's process, on every rank.
    let n = o.stdout.matches("pmix_modex refused fence: ").count();
    assert_eq!(n, 4, "{}", o.show());
    assert!(
        o.stderr.contains("a proxy serves only the job's"),
        "{}",
        o.show()
    );
    nothing_left(&c, &o, &before);
}

/// Collectives across hosts given `PMIX_TIMEOUT` (1 s), joined 3 s late by
/// the rank of the second host (`tests/c/pmix_timeout.c`). OpenPMIx 4.2.2 stops a fence's timer
/// once its own clients are in, so the host's late answer completes the
/// fence; a connect's or a group's timer it keeps running while the host
/// works: a late answer would complete a connect a second time (a
/// duplicate reply to the client, the tracker unlinked twice from the
/// server's list; the node's server crashed), and the timer itself
/// misreads a group's tracker (it crashed at the deadline). A node's
/// server refuses those at once instead; also a connect of two ranks on
/// each host, none late (refused from the upcall, the library arms no
/// second timer, which would make its progress thread spin); and each
/// refused with only the second host's rank giving the timeout, where the
/// first host's rank must hear the refusal, not wait for ever. Every job then
/// fences plainly and finalizes, with nothing left behind.
#[test]
fn pmix_collectives_given_a_timeout_across_hosts_complete_or_fail_at_once() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    let prog = cc_pmix("pmix_timeout.c");
    for (mode, per_host, how, status) in [
        ("fence", 1, "late", "SUCCESS"),
        ("connect", 1, "late", "NOT-SUPPORTED"),
        ("group", 1, "late", "NOT-SUPPORTED"),
        ("connect", 2, "", "NOT-SUPPORTED"),
        // Only the second host's rank gives the timeout: the first host's,
        // which gave none, hears the refusal instead of waiting for ever.
        ("connect", 1, "mixed", "NOT-SUPPORTED"),
        ("group", 1, "mixed", "NOT-SUPPORTED"),
    ] {
        let n = 2 * per_host;
        let mut cmd = c.rivetrun(per_host, n);
        cmd.arg(&prog).arg(mode);
        if !how.is_empty() {
            cmd.arg(how);
        }
        let o = run_job(cmd, DEADLINE);
        let what = format!("{mode} {how} of {n} ranks");
        assert_eq!(o.code(), Some(0), "{what}: {}", o.show());
        for rank in 0..n {
            let line = format!("pmix_timeout {mode} rank {rank}: {status}\n");
            assert!(o.stdout.contains(&line), "{what}: {line:?}: {}", o.show());
            let done = format!("pmix_timeout {mode} rank {rank} done");
            assert!(o.stdout.contains(&done), "{what}: {done:?}: {}", o.show());
        }
        // A second completion reaches a client as a reply nobody awaits.
        let all = format!("{}{}", o.stdout, o.stderr);
        assert!(!all.contains("UNEXPECTED MESSAGE"), "{what}: {}", o.show());
        if mode != "fence" {
            assert!(all.contains("it gave PMIX_TIMEOUT"), "{what}: {}", o.show());
        }
        nothing_left(&c, &o, &before);
    }
}

/// Fences over some ranks of both hosts, with data, and PMIx groups
/// (construct and destruct) of the whole job and of pairs spanning the
/// hosts: each node's server gathers its members, rivetrun the nodes.
#[test]
fn pmix_subset_fences_and_groups_span_hosts() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    let prog = cc_pmix("pmix_subset.c");
    let mut cmd = c.rivetrun(2, 4);
    cmd.arg(&prog);
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    // Each rank's (whole-job group's context, its pair group's context).
    let ctx: Vec<(String, String)> = (0..4)
        .map(|r| {
            let prefix = format!("pmix_subset rank {r} of 4 all ctx ");
            let rest = o
                .stdout
                .lines()
                .find_map(|l| l.strip_prefix(&prefix)?.strip_suffix(" OK"))
                .unwrap_or_else(|| panic!("rank {r}: {}", o.show()));
            let (all, pair) = rest.split_once(" pair ctx ").expect("two contexts");
            (all.to_string(), pair.to_string())
        })
        .collect();
    // One context per group, the same on every member, none shared.
    assert!(ctx.iter().all(|(a, _)| *a == ctx[0].0), "{}", o.show());
    assert_eq!(ctx[0].1, ctx[3].1, "{}", o.show());
    assert_eq!(ctx[1].1, ctx[2].1, "{}", o.show());
    let mut all = vec![&ctx[0].0, &ctx[0].1, &ctx[1].1];
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 3, "{}", o.show());
    nothing_left(&c, &o, &before);
}

/// Rivet's group connect (seed 004) for ranks bootstrapped by PMIx on two
/// hosts: PMIx groups and fences over the members, across proxies; the
/// job connects as one group and as a subset, runs a ring on each and
/// disconnects.
/// Rivet's own `PMIx_Spawn` (`RIVET_PMI=pmix`) from a job on two hosts:
/// the spawning rank's proxy starts the children on its host, served PMIx
/// by it; they find the parents' port in their environment, connect back
/// and exchange with all 4 parents (on h1 and h2); the spawn of a missing
/// program fails on every parent, which go on.
#[test]
fn rivet_ranks_spawn_through_pmix_under_proxies() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    let mut cmd = c.rivetrun(2, 4);
    cmd.args([
        "-genv",
        "RIVET_PMI",
        "pmix",
        "-genv",
        "RIVET_YIELD",
        "always",
    ])
    .arg(bin("dyn_check"))
    .args(["spawn", "2"]);
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for r in 0..4 {
        let ok = format!("dyn_check spawn OK rank {r} of 4 ");
        assert!(o.stdout.contains(&ok), "rank {r}: {}", o.show());
    }
    for r in 0..2 {
        for want in [
            format!("dyn_check child OK rank {r} of 2 "),
            format!("dyn_check child {r} bootstrap: process manager (PMIx, OpenPMIx client)"),
        ] {
            assert!(o.stdout.contains(&want), "{want}: {}", o.show());
        }
    }
    assert!(
        o.stdout
            .contains("dyn_check spawn: missing program refused: spawn failed: PMIx_Spawn of "),
        "{}",
        o.show()
    );
    nothing_left(&c, &o, &before);
}

#[test]
fn rivet_group_connect_over_pmix_spans_hosts() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    let mut cmd = c.rivetrun(2, 4);
    cmd.args([
        "-genv",
        "RIVET_PMI",
        "pmix",
        "-genv",
        "RIVET_YIELD",
        "always",
    ])
    .arg(bin("group_check"))
    .arg("flat");
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for r in 0..4 {
        let ok = format!("group_check flat OK rank {r} of 4");
        assert!(o.stdout.contains(&ok), "rank {r}: {}", o.show());
    }
    nothing_left(&c, &o, &before);
}

#[test]
fn open_mpi_ranks_on_two_hosts_publish_and_look_up_names_through_rivetrun() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    let service = format!("mh-pmix-names-{}", std::process::id());
    // Rank 0 on h1 publishes, rank 1 on h2 finds it, may not unpublish it,
    // and no longer finds it once rank 0 has.
    let o = open_mpi_job(&c, 1, 2, "mpi_names.c", &["names", &service]);
    passed_saying(
        &o,
        [
            "mpi_names names OK rank 0 of 2",
            "mpi_names names OK rank 1 of 2",
            "rank 1: unpublish by a non-publisher failed",
            "rank 1: lookup after unpublish failed with MPI_ERR_NAME",
        ],
    );
    nothing_left(&c, &o, &before);
}

#[test]
fn an_open_mpi_program_runs_on_2_hosts_of_2_ranks() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    let o = open_mpi_job(&c, 2, 4, "mpi_check.c", &[]);
    // Open MPI learned which ranks share each host from the PMIx maps.
    mpi_check_passed_on_hosts(&o, 4, 2);
    nothing_left(&c, &o, &before);
}

#[test]
fn an_open_mpi_abort_on_another_host_ends_the_job_naming_rank_and_host() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    let o = open_mpi_job(&c, 2, 4, "mpi_check.c", &["abort", "3", "13"]);
    assert_eq!(o.code(), Some(13), "{}", o.show());
    assert!(
        o.stderr
            .contains("rank 3 on h2 called abort (exit code 13)"),
        "{}",
        o.show()
    );
    nothing_left(&c, &o, &before);
}

#[test]
fn mpmd_apps_across_hosts_reach_open_mpi_and_pmix_clients() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    // `-n 1 P : -n 3 P` over two hosts of two slots: rank 0 (app 0) and
    // rank 1 (app 1) on h1, ranks 2 and 3 (app 1) on h2; each proxy
    // registers every rank's app, not only its own ranks'.
    let ompi = mpicc_openmpi("mpi_appnum.c");
    let apps = cc_pmix("pmix_apps.c");
    for prog in [&ompi, &apps] {
        let mut cmd = c.rivetrun(2, 1);
        cmd.arg(prog).args([":", "-n", "3"]).arg(prog);
        let o = run_job(cmd, DEADLINE);
        assert_eq!(o.code(), Some(0), "{}", o.show());
        for (rank, app, size, leader, app_rank, local) in [
            (0, 0, 1, 0, 0, 0),
            (1, 1, 3, 1, 0, 1),
            (2, 1, 3, 1, 1, 0),
            (3, 1, 3, 1, 2, 1),
        ] {
            let want = if prog == &ompi {
                format!("mpi_appnum rank {rank} appnum {app}\n")
            } else {
                format!(
                    "pmix_apps rank {rank} napps 2 appnums 0,1,1,1 app_size {size} \
                     app_leader {leader} app_rank {app_rank} local_rank {local}\n"
                )
            };
            assert!(o.stdout.contains(&want), "{want:?}: {}", o.show());
        }
        nothing_left(&c, &o, &before);
    }
}

/// Open MPI's `MPI_Comm_spawn` in a multi-host run whose parent job is on
/// one host (h1; the host list names h2 too): the children start there
/// through the proxy, served PMIx by its server, exchange messages with
/// the parent over the intercommunicator, merge and disconnect
/// (mpi_dynamic.c checks each step).
#[test]
fn open_mpi_comm_spawn_under_a_proxy() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    let o = open_mpi_job(&c, 1, 1, "mpi_dynamic.c", &["spawn"]);
    passed_saying(
        &o,
        [
            "spawn parent 0 of 1 OK",
            "spawn child 0 of 2 OK",
            "spawn child 1 of 2 OK",
        ],
    );
    nothing_left(&c, &o, &before);
}

/// Open MPI's `MPI_Comm_spawn` from a job whose ranks are on both hosts
/// (the root's host starts the children: h1 for rank 0, h2 for rank 1): Open MPI ends the
/// spawn with a `PMIx_Connect` over both jobs, which each node's server
/// hands to its proxy and rivetrun gathers from both (before, nothing
/// answered it and the job hung); then messages over the
/// intercommunicator, its merge (an allreduce across parents on both
/// hosts and children) and a disconnect, nothing left on either host.
#[test]
fn open_mpi_comm_spawn_with_parents_on_two_hosts() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    // Root 0 spawns on h1, root 1 on h2: each host learns where the other's
    // children are from rivetrun's pmix_spawned.
    for root in ["0", "1"] {
        let o = open_mpi_job(&c, 1, 2, "mpi_dynamic.c", &["spawn", root]);
        eprintln!("root {root}"); // shown with a failure
        passed_saying(
            &o,
            [
                "spawn parent 0 of 2 OK",
                "spawn parent 1 of 2 OK",
                "spawn child 0 of 2 OK",
                "spawn child 1 of 2 OK",
            ],
        );
        nothing_left(&c, &o, &before);
    }
}

/// Open MPI's connect/accept within a job on two hosts: ranks 0 and 1
/// (h1) accept on a port they published, 2 and 3 (h2) look it up and
/// connect; the `PMIx_Connect` that ends it spans both hosts (before,
/// it hung as the spawn's did); then merge, unpublish, disconnect.
#[test]
fn open_mpi_connect_accept_across_two_hosts() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    let o = open_mpi_job(&c, 2, 4, "mpi_dynamic.c", &["ports"]);
    let sides = [(0, "accept"), (1, "accept"), (2, "connect"), (3, "connect")];
    passed_saying(
        &o,
        sides.map(|(r, side)| format!("ports rank {r} of 4 OK ({side})")),
    );
    nothing_left(&c, &o, &before);
}

/// A PMIx group construct that fails across hosts (h2's ranks mark it
/// optional, which their proxy refuses over several hosts): every member
/// fails at once, h1's too (rivetrun passes h2's refusal on), and no
/// host keeps a record of the group, so the members' ends later do not
/// fail the job as ends in a live group would; a retry with the same group
/// id then succeeds, with one context id on all four.
#[test]
fn a_pmix_group_construct_refused_on_one_host_fails_everywhere_and_leaves_no_group() {
    let _serial = serial();
    let Some(c) = cluster() else { return };
    let before = pmix_dirs();
    let prog = cc_pmix("pmix_group_refused.c");
    for retry in [false, true] {
        let mut cmd = c.rivetrun(2, 4);
        cmd.arg(&prog);
        if retry {
            cmd.arg("retry");
        }
        let o = run_job(cmd, DEADLINE);
        assert_eq!(o.code(), Some(0), "retry {retry}: {}", o.show());
        for r in 0..4 {
            let want = format!("pmix_group_refused rank {r} construct failed: ");
            assert!(o.stdout.contains(&want), "{want}: {}", o.show());
        }
        assert!(
            o.stderr
                .contains("optional members (PMIX_GROUP_OPTIONAL) on several hosts"),
            "{}",
            o.show()
        );
        assert!(
            !o.stderr.contains("while connected to group"),
            "a failed construct left a group behind: {}",
            o.show()
        );
        if retry {
            let ctx: Vec<&str> = (0..4)
                .map(|r| {
                    let prefix = format!("pmix_group_refused rank {r} retry ctx ");
                    o.stdout
                        .lines()
                        .find_map(|l| l.strip_prefix(&prefix))
                        .unwrap_or_else(|| panic!("rank {r}: {}", o.show()))
                })
                .collect();
            assert!(ctx.iter().all(|c| *c == ctx[0]), "{ctx:?}: {}", o.show());
        }
        nothing_left(&c, &o, &before);
    }
}
