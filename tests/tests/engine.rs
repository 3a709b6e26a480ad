//! The engine end to end: `engine_check` ranks under rivetrun (and Hydra,
//! and alone) check MPI matching, probe, cancel, synchronous sends, sizes
//! on every large-message path, truncation, threads, dup/barrier, a heavy
//! random load, and a rank killed mid-job. Every job must end by itself,
//! leave no process and no `/dev/shm/rivet-*` segment behind.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rivet_tests::{bin, release_bin, rivetrun, run_job_checking_shm, serial, Outcome};

const DEADLINE: Duration = Duration::from_secs(120);

/// The settings the tests vary; cleared first so the caller's environment
/// cannot leak into a case.
const KNOBS: [&str; 9] = [
    "RIVET_SHM_LMT",
    "RIVET_SHM_EAGER_MAX",
    "RIVET_EAGER_MAX",
    "RIVET_YIELD",
    "RIVET_NETMOD",
    "RIVET_SHM_CELLS",
    "RIVET_SHM_CELL_SIZE",
    "RIVET_SHM_FASTBOX_SIZE",
    "RIVET_SHM_FASTBOX_MAX",
];

fn show(o: &Outcome) -> String {
    format!(
        "exit {:?} after {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status, o.elapsed, o.stdout, o.stderr
    )
}

fn with_env(mut cmd: Command, env: &[(&str, &str)]) -> Command {
    for k in KNOBS {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// `rivetrun -n N PROGRAM MODE ARGS...` with `env`.
fn job(n: u32, program: &Path, mode: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = rivetrun(&["-n", &n.to_string()]);
    cmd.arg(program).args(mode);
    with_env(cmd, env)
}

/// Run `engine_check MODE` on `n` ranks with `env`; it must pass on every
/// rank. The outcome, for mode-specific checks.
fn pass(n: u32, mode: &[&str], env: &[(&str, &str)]) -> Outcome {
    pass_with(&bin("engine_check"), n, mode, env)
}

fn pass_with(program: &Path, n: u32, mode: &[&str], env: &[(&str, &str)]) -> Outcome {
    let o = run_job_checking_shm(job(n, program, mode, env), DEADLINE);
    let case = format!("{mode:?} on {n} ranks with {env:?}");
    assert_eq!(o.code(), Some(0), "{case}: {}", show(&o));
    for rank in 0..n {
        let line = format!("engine_check {} OK rank {rank} of {n}\n", mode[0]);
        assert!(
            o.stdout.contains(&line),
            "{case}: no {line:?}\n{}",
            show(&o)
        );
    }
    assert!(
        !o.stderr.contains("FAILED"),
        "{case}: a rank reported a failure\n{}",
        show(&o)
    );
    o
}

/// The engine's info (rank 0 prints it) shows the settings of `env`: the
/// case really ran the path it means to.
fn knobs_took_effect(o: &Outcome, env: &[(&str, &str)]) {
    let info = |key: &str| -> String {
        let prefix = format!("engine_check info: {key}: ");
        o.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("{env:?}: no info line {prefix:?}\n{}", show(o)))
            .to_string()
    };
    let value = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    if let Some(lmt) = value("RIVET_SHM_LMT") {
        let line = info("shm.large_messages");
        assert!(line.starts_with(lmt), "{env:?}: large messages: {line}");
    }
    if let Some(max) = value("RIVET_SHM_EAGER_MAX").or(value("RIVET_EAGER_MAX")) {
        let line = info("shm.eager_max");
        assert!(
            line.starts_with(&format!("{max} B")),
            "{env:?}: eager max: {line}"
        );
    }
    if let Some(y) = value("RIVET_YIELD") {
        let line = info("yield");
        assert!(
            line.contains(&format!("RIVET_YIELD={y}")),
            "{env:?}: yield: {line}"
        );
    }
}

fn has(o: &Outcome, what: &str) {
    assert!(o.stdout.contains(what), "expected {what:?} in\n{}", show(o));
}

/// Ranks 1..3 send to rank 0, which receives with exact and wildcard
/// patterns (some posted together, exact before wildcard) and checks every
/// receive got its sender's earliest matching message.
#[test]
fn wildcard_receives_keep_each_senders_order() {
    let _serial = serial();
    for env in [&[][..], &[("RIVET_SHM_LMT", "copy")][..]] {
        let o = pass(4, &["order"], env);
        has(
            &o,
            "engine_check order: rank 0 got all 900 messages of 3 senders in order",
        );
    }
}

#[test]
fn probe_reports_the_message_the_next_receive_gets() {
    let _serial = serial();
    let o = pass(3, &["probe"], &[]);
    has(
        &o,
        "engine_check probe: rank 0 probed and received 88 messages",
    );
}

/// Unmatched receives and sends are withdrawn (the receiver's ANY_TAG
/// receive then gets the message after the cancelled one); cancels after a
/// match are refused; on both large-message paths.
#[test]
fn cancel_withdraws_unmatched_operations_only() {
    let _serial = serial();
    for lmt in ["cma", "copy"] {
        let o = pass(2, &["cancel"], &[("RIVET_SHM_LMT", lmt)]);
        has(
            &o,
            "engine_check cancel: 5 receives and 4 sends cancelled, 4 late cancels refused",
        );
    }
}

/// An issend stays pending (test() says so, many times) until the receiver,
/// told only afterwards, posts its receive; eager and rendezvous sizes.
#[test]
fn ssend_completes_only_after_the_match() {
    let _serial = serial();
    for env in [
        &[][..],
        &[("RIVET_SHM_LMT", "copy")][..],
        &[("RIVET_SHM_EAGER_MAX", "0")][..],
    ] {
        let o = pass(2, &["ssend"], env);
        has(
            &o,
            "engine_check ssend: 7 issends stayed pending for 2000 tests each until matched",
        );
    }
}

/// 0 bytes to 4 MiB+1, around every threshold, one at a time and all at
/// once in both directions, on each large-message path and with small eager
/// limits that push medium sizes to rendezvous.
#[test]
fn every_size_arrives_intact_on_every_path() {
    let _serial = serial();
    let cases: &[&[(&str, &str)]] = &[
        &[],
        &[("RIVET_SHM_LMT", "cma")],
        &[("RIVET_SHM_LMT", "copy")],
        &[("RIVET_SHM_LMT", "copy"), ("RIVET_SHM_EAGER_MAX", "256")],
        &[("RIVET_SHM_LMT", "cma"), ("RIVET_SHM_EAGER_MAX", "256")],
        &[("RIVET_SHM_LMT", "copy"), ("RIVET_EAGER_MAX", "1000")],
        &[("RIVET_SHM_LMT", "copy"), ("RIVET_SHM_EAGER_MAX", "0")],
    ];
    for env in cases {
        let o = pass(2, &["sizes"], env);
        knobs_took_effect(&o, env);
        for rank in 0..2 {
            let line = format!("engine_check sizes: rank {rank} verified ");
            has(&o, &line);
        }
        has(&o, "from 0 to 4194305 bytes");
    }
}

/// A receive buffer smaller than the message: Truncated in the status,
/// count = capacity, nothing written past the buffer, the next message fine.
#[test]
fn truncated_receives_report_and_the_job_goes_on() {
    let _serial = serial();
    let cases: &[&[(&str, &str)]] = &[
        &[],
        &[("RIVET_SHM_LMT", "cma")],
        &[("RIVET_SHM_LMT", "copy")],
        &[("RIVET_SHM_LMT", "copy"), ("RIVET_SHM_EAGER_MAX", "256")],
    ];
    for env in cases {
        let o = pass(2, &["trunc"], env);
        has(&o, "engine_check trunc: ");
    }
}

/// 10^5 messages of random sizes (0..1 MiB, mostly small) and tags between
/// 3 ranks on this 2-core machine, received with random exact and wildcard
/// patterns; per-sender order, sizes and checksums verified. The ranks are
/// a release build (a debug one takes ~10 s a run, the release one ~1 s
/// plus its build); the launcher is the debug one.
#[test]
fn stress_random_traffic_between_three_oversubscribed_ranks() {
    let _serial = serial();
    let program = release_bin("engine_check");
    let cases: &[&[(&str, &str)]] = &[
        &[],
        &[("RIVET_SHM_LMT", "copy"), ("RIVET_SHM_EAGER_MAX", "4096")],
    ];
    for env in cases {
        let o = pass_with(&program, 3, &["stress", "100000", "1"], env);
        let sent: usize = o
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("engine_check stress: rank "))
            .map(|l| {
                let n = l.split(" sent ").nth(1).and_then(|r| r.split(' ').next());
                n.and_then(|n| n.parse::<usize>().ok())
                    .unwrap_or_else(|| panic!("bad stress line {l:?}\n{}", show(&o)))
            })
            .sum();
        assert_eq!(sent, 100_000, "{env:?}: {}", show(&o));
    }
}

/// Four threads per rank exchange messages at once, two on their own dup'd
/// communicators, two on the world with distinct tags, while a fifth only
/// calls progress().
#[test]
fn threads_share_the_engine() {
    let _serial = serial();
    for env in [&[][..], &[("RIVET_SHM_LMT", "copy")][..]] {
        let o = pass(2, &["threads"], env);
        for rank in 0..2 {
            has(
                &o,
                &format!("engine_check threads: rank {rank}: 4 threads x 400 exchanges verified"),
            );
        }
    }
}

/// Rank 2 SIGKILLs itself while ranks 0 and 1 wait in a receive from it,
/// or (`early`) before starting its engine, while the others start theirs
/// and the node segment waits for rank 2 to attach: rivetrun ends the job
/// with 128+9, nothing outlives it, no segment is left.
#[test]
fn a_killed_rank_ends_the_job_and_leaves_nothing() {
    let _serial = serial();
    for mode in [&["kill"][..], &["kill", "early"][..]] {
        let o = run_job_checking_shm(job(3, &bin("engine_check"), mode, &[]), DEADLINE);
        assert_eq!(o.code(), Some(128 + 9), "{mode:?}: {}", show(&o));
        assert!(
            o.stderr.contains("rank 2 was killed by signal 9 (SIGKILL)"),
            "{mode:?}: {}",
            show(&o)
        );
        has(&o, "engine_check kill: rank 2 raises SIGKILL");
        assert!(!o.stderr.contains("FAILED"), "{mode:?}: {}", show(&o));
    }
}

/// Ping-pong of sizes up to 4 MiB (eager and rendezvous), bootstrapped by
/// MPICH's Hydra instead of rivetrun.
#[test]
fn pingpong_under_mpich_hydra() {
    let _serial = serial();
    let mut cmd = Command::new("mpiexec.hydra");
    cmd.args(["-n", "2"])
        .arg(bin("engine_check"))
        .arg("pingpong");
    let o = run_job_checking_shm(with_env(cmd, &[]), DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", show(&o));
    for rank in 0..2 {
        has(&o, &format!("engine_check pingpong OK rank {rank} of 2\n"));
    }
    has(
        &o,
        "engine_check pingpong: sizes [0, 1, 100, 4096, 65536, 300000, 4194304]",
    );
}

/// The same ping-pong under rivetrun with every yield policy.
#[test]
fn pingpong_under_rivetrun_with_every_yield_mode() {
    let _serial = serial();
    for y in ["auto", "always", "never"] {
        let env = [("RIVET_YIELD", y)];
        let o = pass(2, &["pingpong"], &env);
        knobs_took_effect(&o, &env);
    }
}

/// dup: new context ids, agreed by all ranks; a message on a dup never
/// matches a receive on its parent; barriers (checked with marker files the
/// ranks write before entering) on 1 to 4 ranks.
#[test]
fn dup_isolates_traffic_and_barriers_hold_on_1_to_4_ranks() {
    let _serial = serial();
    for n in 1..=4 {
        let dir = std::env::temp_dir().join(format!("rivet-barrier-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let o = pass(n, &["dup", dir.to_str().unwrap()], &[]);
        let _ = std::fs::remove_dir_all(&dir);
        for rank in 0..n {
            has(
                &o,
                &format!("engine_check dup: rank {rank} of {n}: context ids ["),
            );
        }
        has(&o, "isolation and 45 barriers checked");
    }
}

/// No launcher: a singleton of size 1 that sends to itself.
#[test]
fn a_singleton_sends_to_itself() {
    let _serial = serial();
    let mut cmd = Command::new(bin("engine_check"));
    cmd.arg("singleton");
    for var in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE"] {
        cmd.env_remove(var);
    }
    let o = run_job_checking_shm(with_env(cmd, &[]), DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", show(&o));
    has(
        &o,
        "engine_check singleton: rank 0 of 1, messages to self verified",
    );
    has(&o, "engine_check singleton OK rank 0 of 1\n");
}

/// The harness itself: a job that leaves a Rivet segment in /dev/shm fails.
#[test]
#[should_panic(expected = "left shared memory behind")]
fn the_harness_catches_a_leaked_segment() {
    let _serial = serial();
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "touch /dev/shm/rivet-harness-check-$$"]);
    run_job_checking_shm(cmd, DEADLINE);
}
