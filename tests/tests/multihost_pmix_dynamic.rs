//! PMIx dynamic processes across hosts: `PMIx_Spawn` (OpenPMIx's client and
//! Rivet's) started by the spawning rank's proxy and served PMIx there, Open
//! MPI's spawn and connect/accept with ranks on both hosts (their
//! `PMIx_Connect` gathered by rivetrun), PMIx groups whose construct fails or
//! whose member ends on another host, and Rivet's group connect over them
//! (the rest of PMIx across hosts: `multihost_pmix.rs`). Namespace hosts
//! (`rivet_tests::netns`), entered through `--launcher-exec`; skipped, saying
//! why, where they cannot be made (not root) or OpenPMIx is missing
//! (`rivet_tests::pmix_hosts`).

use rivet_tests::passed_saying;
use rivet_tests::pmix_hosts::Hosts;

/// `PMIx_Spawn` from a rank of either host: its proxy starts the children
/// on its own host, registered with its PMIx server; each child reads its
/// parent's card (a get across namespaces on one node) and those of the
/// parent job's other ranks (on the other host: direct modex), the parent
/// reads each child's; then they connect to each other and exchange lines.
#[test]
fn pmix_spawn_under_proxies_children_and_parent_talk() {
    let Some((h, prog)) = Hosts::with_pmix_program("pmix_spawn.c") else {
        return;
    };
    // Rank 0 is on h1 (the first proxy), rank 3 on h2.
    for root in [0u32, 3] {
        let o = h.run_program(2, 4, &prog, &["talk", "2", &root.to_string()]);
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
    }
}

/// A rank on h2 spawns children there (served PMIx: the parent reads
/// their cards) and aborts: the job ends with its code and the teardown
/// kills the children too, nothing left on either host.
#[test]
fn pmix_spawned_children_under_proxies_die_with_the_job() {
    let Some((h, prog)) = Hosts::with_pmix_program("pmix_spawn.c") else {
        return;
    };
    let o = h.run_program(2, 4, &prog, &["abort", "2", "3"]);
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
}

/// A `PMIx_Spawn` of a program that does not exist fails at the caller,
/// rivetrun says why, nothing is started and the job ends cleanly.
#[test]
fn pmix_spawn_of_a_missing_program_under_proxies_fails_cleanly() {
    let Some((h, prog)) = Hosts::with_pmix_program("pmix_spawn.c") else {
        return;
    };
    let o = h.run_program(2, 4, &prog, &["missing", "2"]);
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
}

/// A PMIx group member that ends without leaving, on h2: the members on
/// h1 hear it (`PMIX_GROUP_MEMBER_FAILED` through their own proxy's
/// server, as rivetrun passed it on), as does the other member on h2; a
/// group made without `PMIX_GROUP_NOTIFY_TERMINATION` fails the job
/// naming the rank, its host and the group, as on one host.
#[test]
fn a_pmix_group_members_end_reaches_members_on_other_hosts() {
    let Some((h, prog)) = Hosts::with_pmix_program("pmix_group_term.c") else {
        return;
    };
    // Ranks 0 and 1 on h1, 2 and 3 on h2; rank 3 ends first.
    let o = h.run_program(2, 4, &prog, &[]);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for r in 0..3 {
        let want = format!("pmix_group_term rank {r} heard rank 3 end OK");
        assert!(o.stdout.contains(&want), "{want}: {}", o.show());
    }

    let o = h.run_program(2, 4, &prog, &["strict"]);
    assert_ne!(o.code(), Some(0), "strict: {}", o.show());
    assert!(
        o.stderr
            .contains("rank 3 on h2 ended while connected to group pmix-term-test"),
        "strict: rivetrun must name the rank, its host and the group\n{}",
        o.show()
    );
}

/// Rivet's own `PMIx_Spawn` (`RIVET_PMI=pmix`) from a job on two hosts:
/// the spawning rank's proxy starts the children on its host, served PMIx
/// by it; they find the parents' port in their environment, connect back
/// and exchange with all 4 parents (on h1 and h2); the spawn of a missing
/// program fails on every parent, which go on.
#[test]
fn rivet_ranks_spawn_through_pmix_under_proxies() {
    let Some(h) = Hosts::open() else { return };
    let o = h.run_rivet_pmix(2, 4, "dyn_check", &["spawn", "2"]);
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
}

/// Rivet's group connect (seed 004) for ranks bootstrapped by PMIx on two
/// hosts: PMIx groups and fences over the members, across proxies; the
/// job connects as one group and as a subset, runs a ring on each and
/// disconnects.
#[test]
fn rivet_group_connect_over_pmix_spans_hosts() {
    let Some(h) = Hosts::open() else { return };
    let o = h.run_rivet_pmix(2, 4, "group_check", &["flat"]);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for r in 0..4 {
        let ok = format!("group_check flat OK rank {r} of 4");
        assert!(o.stdout.contains(&ok), "rank {r}: {}", o.show());
    }
}

/// Open MPI's `MPI_Comm_spawn` in a multi-host run whose parent job is on
/// one host (h1; the host list names h2 too): the children start there
/// through the proxy, served PMIx by its server, exchange messages with
/// the parent over the intercommunicator, merge and disconnect
/// (mpi_dynamic.c checks each step).
#[test]
fn open_mpi_comm_spawn_under_a_proxy() {
    let Some(h) = Hosts::open() else { return };
    let o = h.open_mpi_job(1, 1, "mpi_dynamic.c", &["spawn"]);
    passed_saying(
        &o,
        [
            "spawn parent 0 of 1 OK",
            "spawn child 0 of 2 OK",
            "spawn child 1 of 2 OK",
        ],
    );
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
    let Some(h) = Hosts::open() else { return };
    // Root 0 spawns on h1, root 1 on h2: each host learns where the other's
    // children are from rivetrun's pmix_spawned.
    for root in ["0", "1"] {
        let o = h.open_mpi_job(1, 2, "mpi_dynamic.c", &["spawn", root]);
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
    }
}

/// Open MPI's connect/accept within a job on two hosts: ranks 0 and 1
/// (h1) accept on a port they published, 2 and 3 (h2) look it up and
/// connect; the `PMIx_Connect` that ends it spans both hosts (before,
/// it hung as the spawn's did); then merge, unpublish, disconnect.
#[test]
fn open_mpi_connect_accept_across_two_hosts() {
    let Some(h) = Hosts::open() else { return };
    let o = h.open_mpi_job(2, 4, "mpi_dynamic.c", &["ports"]);
    let sides = [(0, "accept"), (1, "accept"), (2, "connect"), (3, "connect")];
    passed_saying(
        &o,
        sides.map(|(r, side)| format!("ports rank {r} of 4 OK ({side})")),
    );
}

/// A PMIx group construct that fails across hosts (h2's ranks mark it
/// optional, which their proxy refuses over several hosts): every member
/// fails at once, h1's too (rivetrun passes h2's refusal on), and no
/// host keeps a record of the group, so the members' ends later do not
/// fail the job as ends in a live group would; a retry with the same group
/// id then succeeds, with one context id on all four.
#[test]
fn a_pmix_group_construct_refused_on_one_host_fails_everywhere_and_leaves_no_group() {
    let Some((h, prog)) = Hosts::with_pmix_program("pmix_group_refused.c") else {
        return;
    };
    for retry in [false, true] {
        let args: &[&str] = if retry { &["retry"] } else { &[] };
        let o = h.run_program(2, 4, &prog, args);
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
    }
}
