//! The engine over its netmods end to end: simultaneous connects, shm on
//! the node and tcp or ofi across simulated nodes, per-worker netmods,
//! peers killed mid-stream or mid-rendezvous, a panic over a live receive
//! buffer, a peer finishing early, tcp without io_uring, and a waiting rank
//! parked in its netmod. Every job must
//! end by itself, leave no process and no `/dev/shm/rivet-*` segment behind
//! (`rivet_tests::engine_cases` builds the cases and checks the ranks'
//! verdicts).

use std::process::Command;

use rivet::ThreadLevel;
use rivet_tests::engine_cases::*;
use rivet_tests::{
    assert_only_failure, bin, release_bin, rivetrun, run_job_checking_shm, serial, Outcome, LEVELS,
};
/// Every rank sends to every other first thing after init, so over tcp every
/// pair connects from both sides at once: one connection must win and every
/// message arrive exactly once, in order (checked per message). 2 and 4
/// ranks, both backends.
#[test]
fn simultaneous_connects_lose_and_duplicate_nothing() {
    let _serial = serial();
    for n in [2u32, 4] {
        for env in cases(&[], &[&[]]) {
            let o = pass(n, &["connect_all"], &env);
            knobs_took_effect(&o, &env);
            for rank in 0..n {
                has(
                    &o,
                    &env,
                    &format!(
                        "engine_check connect_all: rank {rank} exchanged 100 messages with each of {} peers",
                        n - 1
                    ),
                );
            }
        }
    }
}

/// rivetrun's options for two simulated nodes of two ranks each.
const TWO_NODES: [&str; 6] = [
    "-ppn",
    "2",
    "--map-by",
    "node",
    "--topology",
    "pack:1 core:2 pu:1",
];

/// Netmod selection: with two (simulated) nodes of two ranks, rank 0
/// reaches its node mate over shared memory and the other node over tcp
/// (the VCs it opened say so), or over ofi when `RIVET_OFI_PROVIDER` names
/// a provider; with `RIVET_NETMOD=tcp` every peer is tcp, and without it a
/// single node is all shared memory. Every message is checked.
#[test]
fn shm_on_the_node_and_tcp_across_nodes() {
    let _serial = serial();
    let named = vec![("RIVET_OFI_PROVIDER", "tcp;ofi_rxm")];
    let runs: [(&[&str], Env, &str); 5] = [
        (&TWO_NODES, vec![], "1 shm, 2 netmod"),
        (&TWO_NODES, TCP[0].to_vec(), "0 shm, 3 netmod"),
        // auto with a provider named: shm on the node, ofi across.
        (&TWO_NODES, named, "1 shm, 2 netmod"),
        (&[], vec![], "3 shm, 0 netmod"),
        (&[], TCP[1].to_vec(), "0 shm, 3 netmod"),
    ];
    for (launch, settings, vcs) in runs {
        for env in at_levels(vec![settings]) {
            let mut cmd = rivetrun(&["-n", "4"]);
            cmd.args(launch).arg(bin("engine_check")).arg("connect_all");
            let o = run_job_checking_shm(with_env(cmd, &env), DEADLINE);
            let case = format!("{launch:?} {env:?}");
            assert_eq!(o.code(), Some(0), "{case}: {}", o.show());
            for rank in 0..4 {
                has(&o, &case, &ok_line("connect_all", rank, 4, env.level));
            }
            has(&o, &case, &format!("engine_check info: vcs: {vcs}\n"));
            if env.contains(&("RIVET_OFI_PROVIDER", "tcp;ofi_rxm")) {
                has(
                    &o,
                    &case,
                    "engine_check info: transport.netmod: ofi for peers on other nodes (auto: \
                     RIVET_OFI_PROVIDER=tcp;ofi_rxm)",
                );
            }
        }
    }
    for env in at_levels(vec![vec![]]) {
        let mut cmd = rivetrun(&["-n", "4"]);
        cmd.args(TWO_NODES)
            .arg(release_bin("engine_check"))
            .args(["stress", "30000", "2"]);
        let o = run_job_checking_shm(with_env(cmd, &env), DEADLINE);
        let case = format!("stress over two nodes, {env:?}");
        assert_eq!(o.code(), Some(0), "{case}: {}", o.show());
        for rank in 0..4 {
            has(&o, &case, &ok_line("stress", rank, 4, env.level));
        }
        // No libfabric provider here is faster than tcp, so auto keeps tcp:
        // without an interconnect device it does not even load libfabric.
        let tcp = "engine_check info: transport.netmod: tcp for peers on other nodes (auto: no ";
        let why = if rivet_netmods::fabric_devices().is_empty() {
            "interconnect device (/sys/class/infiniband, /sys/class/cxi, /dev/hfi1*), libfabric \
             not loaded)"
        } else {
            "libfabric provider faster than tcp here)"
        };
        has(&o, &case, &format!("{tcp}{why}"));
    }
}

/// Two "nodes" of two ranks at MULTIPLE with two workers: two threads per
/// rank, each on its own communicator, exchange with every rank, on the
/// node (shm) and across (tcp on both backends, or ofi): each of the two
/// workers' own netmod instances and shm lanes carried its thread's
/// traffic (the rank checks `Engine::info`'s `worker.N` lines).
#[test]
fn two_threads_use_two_workers_netmods_across_nodes() {
    let _serial = serial();
    let two: &[(&str, &str)] = &[("RIVET_WORKERS", "2")];
    let runs: [(Env, &str); 4] = [
        (vec![("RIVET_TCP_BACKEND", "poll")], "tcp with"),
        (vec![("RIVET_TCP_BACKEND", "uring")], "tcp with"),
        (vec![("RIVET_OFI_PROVIDER", "tcp;ofi_rxm")], "ofi with"),
        // Forced on the node too: no shm, every peer through the netmod.
        (TCP[1].to_vec(), "tcp with"),
    ];
    for (settings, netmod) in runs {
        let env = Case::shared(settings.into_iter().chain(two.iter().copied()).collect());
        let mut cmd = rivetrun(&["-n", "4"]);
        cmd.args(TWO_NODES)
            .arg(bin("engine_check"))
            .arg("node_workers");
        let o = run_job_checking_shm(with_env(cmd, &env), DEADLINE);
        let case = format!("{env:?}");
        assert_eq!(o.code(), Some(0), "{case}: {}", o.show());
        let (shm, net) = match env.iter().any(|(k, _)| *k == "RIVET_NETMOD") {
            true => (0, 3),
            false => (1, 2),
        };
        for rank in 0..4 {
            has(&o, &case, &ok_line("node_workers", rank, 4, env.level));
            for w in 0..2 {
                has(
                    &o,
                    &case,
                    &format!(
                        "engine_check node_workers: rank {rank}: worker.{w}: {shm} shm VCs, \
                         {net} netmod VCs open; netmod: {netmod}"
                    ),
                );
            }
        }
    }
}

/// Rank 1 SIGKILLs itself while rank 0 streams messages to it: rank 0's
/// sends and its receive posted for rank 1 fail with an error naming rank 1,
/// then ranks 0 and 2 still exchange messages and exit 0; rivetrun, told to
/// let the others run (`--disable-auto-cleanup`), names the dead rank and
/// exits 128+9. Nothing is left behind.
#[test]
fn a_peer_killed_mid_stream_fails_only_what_needs_it() {
    let _serial = serial();
    // ofi notices a dead peer only when sends to it stop moving for
    // RIVET_OFI_TIMEOUT (tcp;ofi_rxm reports nothing else).
    for env in cases(&[], &[&[("RIVET_OFI_TIMEOUT", "3s")]]) {
        let mut cmd = rivetrun(&["-n", "3", "--disable-auto-cleanup"]);
        cmd.arg(bin("engine_check")).arg("netkill");
        let o = run_job_checking_shm(with_env(cmd, &env), DEADLINE);
        assert_eq!(o.code(), Some(128 + 9), "{env:?}: {}", o.show());
        // How many others still run when rivetrun reaps rank 1 depends on
        // the order it reaps in: ranks 0 and 2 may have exited already.
        assert!(
            (0..=2).any(|n| o.stderr.contains(&format!(
                "rank 1 was killed by signal 9 (SIGKILL); {n} other rank(s) keep running"
            ))),
            "{env:?}: {}",
            o.show()
        );
        has(&o, &env, "engine_check netkill: rank 1 raises SIGKILL");
        has(&o, &env, "then the send failed: ");
        has(&o, &env, "engine_check netkill: the ANY_SOURCE receive: ");
        has(
            &o,
            &env,
            "engine_check netkill: rank 0 and rank 2 exchanged 10 messages after the failure",
        );
        for rank in [0, 2] {
            has(&o, &env, &ok_line("netkill", rank, 3, env.level));
        }
        assert!(!o.stderr.contains("FAILED"), "{env:?}: {}", o.show());
        // A survivor crashing after its OK line would not change the exit
        // code; rivetrun would report it.
        assert_only_failure(&o, "rank 1", &format!("{env:?}"));
    }
}

/// Rank 1 dies while rank 0 pulls its 48 MiB rendezvous message (read
/// over ofi, streamed over tcp): rank 0's receive ends, with the message or
/// with an error naming rank 1, and rank 0 exits 0 (over ofi it may abort
/// instead, saying why); rivetrun reports the kill. Nothing is left behind.
#[test]
fn a_sender_killed_mid_rendezvous_ends_the_receive() {
    let _serial = serial();
    for env in cases(&[], &[&[("RIVET_OFI_TIMEOUT", "3s")]]) {
        let mut cmd = rivetrun(&["-n", "2", "--disable-auto-cleanup"]);
        cmd.arg(bin("engine_check")).arg("readkill");
        let o = run_job_checking_shm(with_env(cmd, &env), DEADLINE);
        assert_eq!(o.code(), Some(128 + 9), "{env:?}: {}", o.show());
        has(&o, &env, "engine_check readkill: rank 1 raises SIGKILL");
        // As in the test below: an ofi provider may never end a read from
        // the dead sender, and rank 0 then aborts rather than release the
        // buffer it may still write.
        if env.contains(&("RIVET_NETMOD", "ofi"))
            && o.stderr
                .contains("rank 1 may still be writing into a receive buffer")
            && o.stderr.contains("rank 0 was killed by signal 6 (SIGABRT)")
        {
            eprintln!("{env:?}: the provider kept the read; rank 0 aborted");
            continue;
        }
        has(&o, &env, "engine_check readkill: rank 0's receive ended: ");
        has(&o, &env, &ok_line("readkill", 0, 2, env.level));
        assert!(!o.stderr.contains("FAILED"), "{env:?}: {}", o.show());
        assert_only_failure(&o, "rank 1", &format!("{env:?}"));
        let line = o
            .stdout
            .lines()
            .find(|l| l.contains("receive ended"))
            .unwrap_or_default();
        eprintln!("{env:?}: {line}");
    }
}

/// The deterministic case: rank 1's rendezvous request has arrived and
/// rank 1 is dead before rank 0 posts the receive, so no byte of the
/// payload can come: the receive must end with `PeerFailed` naming rank 1.
/// Over ofi the read may be posted before the netmod knows of the death;
/// a provider that then never ends it (`tcp;ofi_rxm` to a killed peer)
/// cannot give the buffer back, so rank 0 aborts, saying why, rather than
/// release memory the provider may still write (`Rma::stop_reads`).
#[test]
fn a_receive_of_a_dead_senders_rendezvous_fails_naming_it() {
    let _serial = serial();
    for env in cases(&[&[]], &[&[("RIVET_OFI_TIMEOUT", "3s")]]) {
        let mut cmd = rivetrun(&["-n", "2", "--disable-auto-cleanup"]);
        cmd.arg(bin("engine_check")).args(["readkill", "dead"]);
        let o = run_job_checking_shm(with_env(cmd, &env), DEADLINE);
        assert_eq!(o.code(), Some(128 + 9), "{env:?}: {}", o.show());
        let read_kept = env.contains(&("RIVET_NETMOD", "ofi"))
            && o.stderr
                .contains("rank 1 may still be writing into a receive buffer")
            && o.stderr.contains("rank 0 was killed by signal 6 (SIGABRT)");
        if read_kept {
            assert!(!o.stdout.contains("receive ended"), "{env:?}: {}", o.show());
            eprintln!("{env:?}: the provider kept the read; rank 0 aborted");
            continue;
        }
        has(
            &o,
            &env,
            "engine_check readkill: rank 0's receive ended: PeerFailed { rank: 1 }",
        );
        has(&o, &env, &ok_line("readkill", 0, 2, env.level));
        assert_only_failure(&o, "rank 1", &format!("{env:?}"));
    }
}

/// A panic inside a scope whose receive is being filled through the
/// netmod (rendezvous streamed over tcp) aborts the process: the unwind
/// would free the buffer the netmod writes into. rivetrun reports rank 0
/// killed by SIGABRT, with the engine's reason on stderr.
#[test]
fn a_panic_over_a_live_receive_buffer_aborts() {
    let _serial = serial();
    for env in TCP {
        let mut cmd = rivetrun(&["-n", "2"]);
        cmd.arg(bin("engine_check")).arg("panic");
        let o = run_job_checking_shm(with_env(cmd, &env), DEADLINE);
        has(
            &o,
            &env,
            "engine_check panic: rank 0 panics with its receive under way",
        );
        assert_eq!(o.code(), Some(128 + 6), "{env:?}: {}", o.show());
        assert!(
            o.stderr.contains("rank 0 was killed by signal 6 (SIGABRT)"),
            "{env:?}: {}",
            o.show()
        );
        assert!(
            o.stderr
                .contains("rivet: a panic is unwinding while rank 1 may still be writing"),
            "{env:?}: {}",
            o.show()
        );
    }
}

/// A rank that finalizes and exits early says goodbye first: the other
/// ranks' `ANY_SOURCE` receives do not fail when its connection closes.
#[test]
fn a_peer_that_finished_early_fails_nothing() {
    let _serial = serial();
    for env in cases(&[&[]], &[&[]]) {
        let o = pass(3, &["early_exit"], &env);
        has(
            &o,
            &env,
            "engine_check early_exit: rank 0 received from rank 1 after rank 2 finished",
        );
    }
}

/// io_uring made unavailable, for real (a seccomp filter, as Docker's
/// default profile does, around the whole job) and by a setup failure
/// injected in the backend's constructor: the default backend (`auto`,
/// io_uring where possible) falls back to poll, says why, and passes. Forcing the uring backend where it cannot work is a clear
/// start-up error, not a hang.
#[test]
fn tcp_runs_on_poll_when_io_uring_is_unavailable() {
    let _serial = serial();
    let engine_check = bin("engine_check");
    let under_seccomp = |env: &[(&str, &str)]| {
        let mut cmd = Command::new(bin("no_io_uring"));
        cmd.arg(bin("rivetrun"))
            .args(["-n", "2"])
            .arg(&engine_check)
            .arg("sizes");
        with_env(cmd, env)
    };
    let fallback = |o: &Outcome, how: &str, level: ThreadLevel| {
        let how = format!("{how} at thread level {level}");
        assert_eq!(o.code(), Some(0), "{how}: {}", o.show());
        let line = o
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("engine_check info: tcp.backend: "))
            .unwrap_or_else(|| panic!("{how}: no tcp.backend line\n{}", o.show()));
        assert!(
            line.starts_with("poll") && line.contains("io_uring"),
            "{how}: backend {line:?}"
        );
        for rank in 0..2 {
            has(o, &how, &ok_line("sizes", rank, 2, level));
        }
    };

    for level in LEVELS {
        // The default backend (auto) with nothing set.
        let default = Case::at(vec![("RIVET_NETMOD", "tcp")], level);
        let o = run_job_checking_shm(under_seccomp(&default), DEADLINE);
        fallback(&o, "seccomp, default backend", level);

        let env = Case::at(
            vec![
                ("RIVET_NETMOD", "tcp"),
                ("RIVET_TCP_BACKEND", "auto"),
                ("RIVET_TCP_URING_INJECT_FAILURE", "1"),
            ],
            level,
        );
        let o = run_job_checking_shm(job(2, &engine_check, &["sizes"], &env), DEADLINE);
        fallback(&o, "injected", level);

        let forced = Case::at(
            vec![("RIVET_NETMOD", "tcp"), ("RIVET_TCP_BACKEND", "uring")],
            level,
        );
        let o = run_job_checking_shm(under_seccomp(&forced), DEADLINE);
        assert_ne!(
            o.code(),
            Some(0),
            "forced uring under seccomp, {forced:?}: {}",
            o.show()
        );
        assert!(
            o.stderr.contains("Engine::init") && o.stderr.contains("io_uring"),
            "forced uring under seccomp, {forced:?}: {}",
            o.show()
        );
    }
}

/// With `RIVET_YIELD=always`, a rank waiting over tcp alone blocks in its
/// netmod (`Netmod::park`) and is woken by the messages that come
/// (8 B, 64 KiB, 1 MiB, each after a pause), on both backends. With a
/// shared-memory lane it never parks (nothing there would wake it) and
/// gets them all the same: over shared memory alone, and on two
/// simulated nodes of two, where each rank has a node mate on shared
/// memory and the others over tcp.
#[test]
fn a_parked_rank_is_woken_by_what_arrives() {
    let _serial = serial();
    // (rivetrun options, ranks, settings, whether the ranks park)
    type Run<'a> = (&'a [&'a str], u32, &'a [(&'a str, &'a str)], bool);
    let runs: [Run; 4] = [
        (&[], 2, &TCP[0], true),
        (&[], 2, &TCP[1], true),
        (&[], 2, &[], false),
        (&TWO_NODES, 4, &[], false),
    ];
    for (launch, n, net, parks_expected) in runs {
        let settings: Env = net
            .iter()
            .copied()
            .chain([("RIVET_YIELD", "always")])
            .collect();
        let env = Case::at(settings, ThreadLevel::Single);
        let mut cmd = rivetrun(&["-n", &n.to_string()]);
        cmd.args(launch).arg(bin("engine_check")).arg("park");
        let o = run_job_checking_shm(with_env(cmd, &env), DEADLINE);
        let case = format!("{launch:?} {env:?}");
        assert_eq!(o.code(), Some(0), "{case}: {}", o.show());
        if launch.is_empty() {
            knobs_took_effect(&o, &env);
        } else {
            // Both transports: a node mate on shm, the others on tcp.
            has(&o, &case, "engine_check info: transport.shm: on");
            has(&o, &case, "engine_check info: transport.netmod: tcp");
        }
        for rank in 0..n {
            has(&o, &case, &ok_line("park", rank, n, env.level));
            let prefix = format!("engine_check park: rank {rank} parks ");
            let parks = o
                .stdout
                .lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .unwrap_or_else(|| panic!("{case}: no {prefix:?}\n{}", o.show()));
            match (parks_expected, parks.parse::<u64>()) {
                (true, Ok(p)) => assert!(p > 0, "{case}: rank {rank} never parked\n{}", o.show()),
                (false, Ok(p)) => assert_eq!(p, 0, "{case}: rank {rank} parked\n{}", o.show()),
                (false, Err(_)) => assert_eq!(parks, "none (no netmod)", "{case}"),
                (true, Err(_)) => panic!("{case}: rank {rank} parks {parks:?}\n{}", o.show()),
            }
        }
    }
}
