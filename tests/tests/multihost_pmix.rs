//! PMIx across hosts: each host's proxy serves its ranks PMIx through
//! OpenPMIx's server, fences gathered through the proxy tree, direct modex
//! and names through rivetrun, fences over some ranks and groups gathered by
//! rivetrun, every rank's MPMD app registered on every host; what is not
//! carried fails at once. Spawns, connects and group membership across hosts:
//! `multihost_pmix_dynamic.rs`. Namespace hosts (`rivet_tests::netns`), entered
//! through `--launcher-exec`; skipped, saying why, where they cannot be
//! made (not root) or OpenPMIx is missing (`rivet_tests::pmix_hosts`).

use rivet_tests::pmix_hosts::Hosts;
use rivet_tests::{cc_pmix, mpi_check_passed_on_hosts, mpicc_openmpi, passed_saying};

#[test]
fn rivet_ranks_bootstrapped_by_pmix_run_p2p_across_2_hosts_of_2_ranks() {
    let Some(h) = Hosts::open() else { return };
    // RIVET_PMI=pmix: the ranks take their proxy's PMIx server; the cards
    // of the other host's ranks come through the fence across proxies.
    for mode in ["connect_all", "stress"] {
        let args: &[&str] = if mode == "stress" {
            &[mode, "2000"]
        } else {
            &[mode]
        };
        let o = h.run_rivet_pmix(2, 4, "engine_check", args);
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
    }
}

#[test]
fn pmix_cards_cross_hosts_by_fence_and_by_direct_modex() {
    let Some((h, prog)) = Hosts::with_pmix_program("pmix_modex.c") else {
        return;
    };
    for mode in ["collect", "direct"] {
        let o = h.run_program(2, 4, &prog, &[mode]);
        assert_eq!(o.code(), Some(0), "{mode}: {}", o.show());
        for r in 0..4 {
            let ok = format!("pmix_modex {mode} rank {r} of 4 OK");
            assert!(o.stdout.contains(&ok), "{mode} rank {r}: {}", o.show());
        }
    }
}

/// Each proxy turns Nagle off on its own ranks' end of their connection
/// to its PMIx server, as rivetrun does on one host.
#[test]
fn proxies_pmix_clients_have_nagle_off_on_their_server_connection() {
    let Some((h, prog)) = Hosts::with_pmix_program("pmix_nodelay.c") else {
        return;
    };
    let o = h.run_program(2, 4, &prog, &[]);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for r in 0..4 {
        let line = format!("pmix_nodelay rank {r} nodelay=1\n");
        assert!(o.stdout.contains(&line), "rank {r}: {}", o.show());
    }
}

#[test]
fn what_proxies_do_not_carry_for_pmix_fails_at_once_with_an_error() {
    let Some((h, prog)) = Hosts::with_pmix_program("pmix_modex.c") else {
        return;
    };
    let o = h.run_program(2, 4, &prog, &["refused"]);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    // A fence naming another namespace's process, on every rank.
    let n = o.stdout.matches("pmix_modex refused fence: ").count();
    assert_eq!(n, 4, "{}", o.show());
    assert!(
        o.stderr.contains("a proxy serves only the job's"),
        "{}",
        o.show()
    );
}

/// Collectives across hosts given `PMIX_TIMEOUT` (1 s), joined 3 s late by
/// the rank of the second host (`tests/c/pmix_timeout.c`). OpenPMIx 4.2.2 stops a fence's timer
/// once its own clients are in, so the proxies and rivetrun enforce it
/// across hosts: the late fence (over the job, a tree barrier; over a rank
/// of each host, gathered by rivetrun) fails with the timeout on every
/// rank (the first host's at its deadline, the late host's at once: not
/// asserted, as it is a matter of timing), also where the late rank gave
/// no timeout; the same fence again without one
/// succeeds. A connect's or a group's timer the library keeps running while the host
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
    let Some((h, prog)) = Hosts::with_pmix_program("pmix_timeout.c") else {
        return;
    };
    for (mode, per_host, how, status) in [
        // The second host's rank is 3 s late for a fence timed 1 s: every
        // rank's fails with the timeout; the same fence again, untimed,
        // succeeds.
        ("fence", 1, "late", "TIMEOUT"),
        // The late rank gave no timeout: it fails with the others'.
        ("fence", 1, "late-untimed", "TIMEOUT"),
        // All in time, two clients a host each giving the timeout.
        ("fence", 2, "", "SUCCESS"),
        // A fence over ranks 0 and 3 only, one on each host (rivetrun
        // gathers it, not the tree).
        ("subset", 2, "late", "TIMEOUT"),
        ("connect", 1, "late", "NOT-SUPPORTED"),
        ("group", 1, "late", "NOT-SUPPORTED"),
        ("connect", 2, "", "NOT-SUPPORTED"),
        // Only the second host's rank gives the timeout: the first host's,
        // which gave none, hears the refusal instead of waiting for ever.
        ("connect", 1, "mixed", "NOT-SUPPORTED"),
        ("group", 1, "mixed", "NOT-SUPPORTED"),
    ] {
        let n = 2 * per_host;
        let args: &[&str] = if how.is_empty() {
            &[mode]
        } else {
            &[mode, how]
        };
        let o = h.run_program(per_host, n, &prog, args);
        let what = format!("{mode} {how} of {n} ranks");
        assert_eq!(o.code(), Some(0), "{what}: {}", o.show());
        for rank in 0..n {
            let line = if mode == "subset" && rank != 0 && rank != n - 1 {
                format!("pmix_timeout {mode} rank {rank}: not in it\n")
            } else {
                format!("pmix_timeout {mode} rank {rank}: {status}\n")
            };
            assert!(o.stdout.contains(&line), "{what}: {line:?}: {}", o.show());
            let done = format!("pmix_timeout {mode} rank {rank} done");
            assert!(o.stdout.contains(&done), "{what}: {done:?}: {}", o.show());
        }
        // A second completion reaches a client as a reply nobody awaits.
        let all = format!("{}{}", o.stdout, o.stderr);
        assert!(!all.contains("UNEXPECTED MESSAGE"), "{what}: {}", o.show());
        if mode == "connect" || mode == "group" {
            assert!(all.contains("it gave PMIX_TIMEOUT"), "{what}: {}", o.show());
        }
    }
}

/// Fences over some ranks of both hosts, with data, and PMIx groups
/// (construct and destruct) of the whole job and of pairs spanning the
/// hosts: each node's server gathers its members, rivetrun the nodes.
#[test]
fn pmix_subset_fences_and_groups_span_hosts() {
    let Some((h, prog)) = Hosts::with_pmix_program("pmix_subset.c") else {
        return;
    };
    let o = h.run_program(2, 4, &prog, &[]);
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
}

#[test]
fn open_mpi_ranks_on_two_hosts_publish_and_look_up_names_through_rivetrun() {
    let Some(h) = Hosts::open() else { return };
    let service = format!("mh-pmix-names-{}", std::process::id());
    // Rank 0 on h1 publishes, rank 1 on h2 finds it, may not unpublish it,
    // and no longer finds it once rank 0 has.
    let o = h.open_mpi_job(1, 2, "mpi_names.c", &["names", &service]);
    passed_saying(
        &o,
        [
            "mpi_names names OK rank 0 of 2",
            "mpi_names names OK rank 1 of 2",
            "rank 1: unpublish by a non-publisher failed",
            "rank 1: lookup after unpublish failed with MPI_ERR_NAME",
        ],
    );
}

#[test]
fn an_open_mpi_program_runs_on_2_hosts_of_2_ranks() {
    let Some(h) = Hosts::open() else { return };
    let o = h.open_mpi_job(2, 4, "mpi_check.c", &[]);
    // Open MPI learned which ranks share each host from the PMIx maps.
    mpi_check_passed_on_hosts(&o, 4, 2);
}

#[test]
fn an_open_mpi_abort_on_another_host_ends_the_job_naming_rank_and_host() {
    let Some(h) = Hosts::open() else { return };
    let o = h.open_mpi_job(2, 4, "mpi_check.c", &["abort", "3", "13"]);
    assert_eq!(o.code(), Some(13), "{}", o.show());
    assert!(
        o.stderr
            .contains("rank 3 on h2 called abort (exit code 13)"),
        "{}",
        o.show()
    );
}

#[test]
fn mpmd_apps_across_hosts_reach_open_mpi_and_pmix_clients() {
    let Some(h) = Hosts::open() else { return };
    // `-n 1 P : -n 3 P` over two hosts of two slots: rank 0 (app 0) and
    // rank 1 (app 1) on h1, ranks 2 and 3 (app 1) on h2; each proxy
    // registers every rank's app, not only its own ranks'.
    let ompi = mpicc_openmpi("mpi_appnum.c");
    let apps = cc_pmix("pmix_apps.c");
    for prog in [&ompi, &apps] {
        let mut cmd = h.rivetrun(2, 1);
        cmd.arg(prog).args([":", "-n", "3"]).arg(prog);
        let o = h.run(cmd);
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
    }
}
