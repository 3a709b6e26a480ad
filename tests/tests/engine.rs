//! The engine end to end: `engine_check` ranks under rivetrun (and Hydra,
//! and alone) check MPI matching, probe, cancel, synchronous sends, sizes
//! on every large-message path, truncation, threads, dup/barrier, a heavy
//! random load, and a rank killed mid-job. Every job must end by itself,
//! leave no process and no `/dev/shm/rivet-*` segment behind.
//!
//! The point-to-point tests run over every transport (UCX-style, one suite
//! parametrized rather than copied): shared memory, and tcp forced on-node
//! (`RIVET_NETMOD=tcp`) on the io_uring and the poll backend; `cases`
//! builds the list. The tcp-only tests (simultaneous connects, a peer
//! killed mid-stream, io_uring unavailable) are at the end.
//!
//! Cases run at two thread levels (`rivet_tests::LEVELS`): without
//! `RIVET_THREAD_LEVEL`, where `engine_check`'s `Engine<Local>` runs at
//! SINGLE without a lock, and with `RIVET_THREAD_LEVEL=multiple`, where it
//! locks. Each transport's plain case runs at both; each variant of a
//! setting (an eager limit, a copy mechanism, a piece size) at one, the
//! levels taking turns down the list, so that every level meets every
//! transport and most variants without the matrix doubling. The ranks check
//! they run at the level asked for and say it in their OK line, which the
//! tests match. `threads` is MULTIPLE by nature (`Engine<Shared>`) and runs
//! once.

use std::ops::Deref;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rivet::ThreadLevel;
use rivet_tests::{
    assert_only_failure, bin, level_env, release_bin, rivetrun, run_job_checking_shm,
    run_killed_job_checking_shm, serial, Outcome, LEVELS,
};

const DEADLINE: Duration = Duration::from_secs(120);

/// The settings the tests vary; cleared first so the caller's environment
/// cannot leak into a case.
const KNOBS: [&str; 24] = [
    "RIVET_SHM_SPLIT_MIN",
    "RIVET_THREAD_LEVEL",
    "RIVET_TCP_BACKEND",
    "RIVET_TCP_EAGER_MAX",
    "RIVET_TCP_PIECE",
    "RIVET_TCP_IFACE",
    "RIVET_TCP_URING_INJECT_FAILURE",
    "RIVET_NETMOD_EAGER_WINDOW",
    "RIVET_SHM_LMT",
    "RIVET_SHM_EAGER_MAX",
    "RIVET_EAGER_MAX",
    "RIVET_YIELD",
    "RIVET_NETMOD",
    "RIVET_SHM_CELLS",
    "RIVET_SHM_CELL_SIZE",
    "RIVET_SHM_FASTBOX_SIZE",
    "RIVET_SHM_FASTBOX_MAX",
    "RIVET_OFI_PROVIDER",
    "RIVET_OFI_DOMAIN",
    "RIVET_OFI_EAGER_MAX",
    "RIVET_OFI_PIECE",
    "RIVET_OFI_TIMEOUT",
    "RIVET_OFI_RMA",
    "RIVET_WORKERS",
];

type Env = Vec<(&'static str, &'static str)>;

/// One case of a test: its settings, and the thread level the ranks must
/// run at (and name in their OK line).
#[derive(Clone, PartialEq)]
struct Case {
    /// The settings, with the level's `RIVET_THREAD_LEVEL` if it needs one.
    env: Env,
    level: ThreadLevel,
}

impl Case {
    /// `settings` at `level` (a `LEVELS` one), for a mode on engine_check's
    /// `Engine<Local>`.
    fn at(settings: Env, level: ThreadLevel) -> Case {
        let env = settings.into_iter().chain(level_env(level)).collect();
        Case { env, level }
    }

    /// `settings` for a mode on an `Engine<Shared>` (`threads`): MULTIPLE
    /// with or without `RIVET_THREAD_LEVEL`, so one level is all there is.
    fn shared(settings: Env) -> Case {
        Case {
            env: settings,
            level: ThreadLevel::Multiple,
        }
    }
}

impl Deref for Case {
    type Target = [(&'static str, &'static str)];

    fn deref(&self) -> &Self::Target {
        &self.env
    }
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} at thread level {}", self.env, self.level)
    }
}

/// Each of `settings` at each of `LEVELS` (SINGLE, then MULTIPLE).
fn at_levels(settings: Vec<Env>) -> Vec<Case> {
    settings
        .into_iter()
        .flat_map(|env| LEVELS.map(|level| Case::at(env.clone(), level)))
        .collect()
}

/// tcp forced on-node, on each backend.
const TCP: [[(&str, &str); 2]; 2] = [
    [("RIVET_NETMOD", "tcp"), ("RIVET_TCP_BACKEND", "uring")],
    [("RIVET_NETMOD", "tcp"), ("RIVET_TCP_BACKEND", "poll")],
];

/// The libfabric netmod forced on-node, on the two providers every
/// libfabric build has.
const OFI: [[(&str, &str); 2]; 2] = [
    [
        ("RIVET_NETMOD", "ofi"),
        ("RIVET_OFI_PROVIDER", "tcp;ofi_rxm"),
    ],
    [("RIVET_NETMOD", "ofi"), ("RIVET_OFI_PROVIDER", "shm")],
];

/// The ofi spelling of a tcp netmod setting (the two netmods share the
/// meaning of these).
fn ofi_knob(tcp_knob: &'static str) -> &'static str {
    match tcp_knob {
        "RIVET_TCP_EAGER_MAX" => "RIVET_OFI_EAGER_MAX",
        "RIVET_TCP_PIECE" => "RIVET_OFI_PIECE",
        other => other,
    }
}

/// Every case of a test: each `shm` setting over shared memory, and each
/// `net` setting over tcp on both backends and over ofi on both providers
/// (`RIVET_TCP_EAGER_MAX` and `RIVET_TCP_PIECE` become their `RIVET_OFI_`
/// twins there; `RIVET_OFI_*` settings are left out for tcp), without
/// duplicates; a transport's plain case at every thread level, the
/// variants at one level each, in turn.
fn cases(
    shm: &[&[(&'static str, &'static str)]],
    net: &[&[(&'static str, &'static str)]],
) -> Vec<Case> {
    let mut turn = LEVELS.iter().cycle();
    settings(shm, net)
        .into_iter()
        .flat_map(|env| {
            if is_plain(&env) {
                at_levels(vec![env])
            } else {
                let level = *turn.next().expect("cycle never ends");
                vec![Case::at(env, level)]
            }
        })
        .collect()
}

/// Whether `env` only chooses a transport (no variant of its settings).
fn is_plain(env: &Env) -> bool {
    env.iter().all(|(k, _)| {
        matches!(
            *k,
            "RIVET_NETMOD" | "RIVET_TCP_BACKEND" | "RIVET_OFI_PROVIDER"
        )
    })
}

/// The settings of `cases`, at no particular thread level.
fn settings(
    shm: &[&[(&'static str, &'static str)]],
    net: &[&[(&'static str, &'static str)]],
) -> Vec<Env> {
    let mut all: Vec<Env> = shm.iter().map(|c| c.to_vec()).collect();
    let mut add = |case: Env| {
        if !all.contains(&case) {
            all.push(case);
        }
    };
    for backend in TCP {
        for c in net {
            let c = c.iter().filter(|(k, _)| !k.starts_with("RIVET_OFI_"));
            add(backend.iter().chain(c).copied().collect());
        }
    }
    for provider in OFI {
        for c in net {
            let c = c.iter().map(|&(k, v)| (ofi_knob(k), v));
            add(provider.iter().copied().chain(c).collect());
        }
    }
    all
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

/// Run `engine_check MODE` on `n` ranks in `case`; it must pass on every
/// rank, at the case's thread level. The outcome, for mode-specific checks.
fn pass(n: u32, mode: &[&str], case: &Case) -> Outcome {
    pass_with(&bin("engine_check"), n, mode, case)
}

fn pass_with(program: &Path, n: u32, mode: &[&str], env: &Case) -> Outcome {
    let o = run_job_checking_shm(job(n, program, mode, env), DEADLINE);
    let case = format!("{mode:?} on {n} ranks with {env:?}");
    assert_eq!(o.code(), Some(0), "{case}: {}", o.show());
    for rank in 0..n {
        let line = ok_line(mode[0], rank, n, env.level);
        assert!(
            o.stdout.contains(&line),
            "{case}: no {line:?}\n{}",
            o.show()
        );
    }
    assert!(
        !o.stderr.contains("FAILED"),
        "{case}: a rank reported a failure\n{}",
        o.show()
    );
    o
}

/// What a rank that passed `mode` at `level` prints last.
fn ok_line(mode: &str, rank: u32, n: u32, level: ThreadLevel) -> String {
    format!("engine_check {mode} OK rank {rank} of {n} at thread level {level}\n")
}

/// The engine's info (rank 0 prints it) shows the settings of `env`: the
/// case really ran the path it means to, at its thread level.
fn knobs_took_effect(o: &Outcome, env: &Case) {
    let info = |key: &str| -> String {
        let prefix = format!("engine_check info: {key}: ");
        o.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("{env:?}: no info line {prefix:?}\n{}", o.show()))
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
    if let Some(netmod @ ("tcp" | "ofi")) = value("RIVET_NETMOD") {
        let line = info("transport.netmod");
        assert!(
            line.starts_with(&format!("{netmod} for every peer")),
            "{env:?}: netmod: {line}"
        );
        // Said as the choice it is, not as "no other rank on this node".
        let line = info("transport.shm");
        assert_eq!(
            line,
            format!("off (RIVET_NETMOD={netmod}: every peer through the netmod)"),
            "{env:?}"
        );
    } else {
        let line = info("transport.netmod");
        assert!(line.starts_with("none"), "{env:?}: netmod: {line}");
    }
    if let Some(b) = value("RIVET_TCP_BACKEND") {
        let line = info("tcp.backend");
        assert!(line.starts_with(b), "{env:?}: tcp backend: {line}");
    }
    if let Some(max) = value("RIVET_TCP_EAGER_MAX") {
        let line = info("tcp.eager_max");
        assert!(line.starts_with(max), "{env:?}: tcp eager max: {line}");
    }
    if let Some(p) = value("RIVET_OFI_PROVIDER") {
        let line = info("ofi.provider");
        assert!(
            line.starts_with(&format!("{p} ")),
            "{env:?}: provider: {line}"
        );
    }
    if let Some(max) = value("RIVET_OFI_EAGER_MAX") {
        let line = info("ofi.eager_max");
        assert!(line.starts_with(max), "{env:?}: ofi eager max: {line}");
    }
    if let Some(y) = value("RIVET_YIELD") {
        let line = info("yield");
        assert!(
            line.contains(&format!("RIVET_YIELD={y}")),
            "{env:?}: yield: {line}"
        );
    }
    let line = info("thread_level");
    assert!(
        line.starts_with(env.level.name()),
        "{env:?}: thread level: {line}"
    );
}

/// `case` (which names its thread level) printed `what`.
fn has(o: &Outcome, case: &dyn std::fmt::Debug, what: &str) {
    assert!(
        o.stdout.contains(what),
        "{case:?}: expected {what:?} in\n{}",
        o.show()
    );
}

/// Ranks 1..3 send to rank 0, which receives with exact and wildcard
/// patterns (some posted together, exact before wildcard) and checks every
/// receive got its sender's earliest matching message.
#[test]
fn wildcard_receives_keep_each_senders_order() {
    let _serial = serial();
    for env in cases(&[&[], &[("RIVET_SHM_LMT", "copy")]], &[&[]]) {
        let o = pass(4, &["order"], &env);
        has(
            &o,
            &env,
            "engine_check order: rank 0 got all 900 messages of 3 senders in order",
        );
    }
}

#[test]
fn probe_reports_the_message_the_next_receive_gets() {
    let _serial = serial();
    for env in cases(&[&[]], &[&[]]) {
        let o = pass(3, &["probe"], &env);
        has(
            &o,
            &env,
            "engine_check probe: rank 0 probed and received 88 messages",
        );
    }
}

/// Matched probes take messages of every size out of matching; a dropped
/// one (2 MiB, rendezvous) still lets its synchronous sender finish.
#[test]
fn matched_probes_take_messages_out_of_matching() {
    let _serial = serial();
    for env in cases(&[&[]], &[&[]]) {
        let o = pass(2, &["mprobe"], &env);
        has(
            &o,
            &env,
            "engine_check mprobe: rank 0 took and received 6 messages, dropped 1",
        );
        has(&o, &env, "engine_check mprobe: rank 1 sends all finished");
    }
}

/// Unmatched receives and sends are withdrawn (the receiver's ANY_TAG
/// receive then gets the message after the cancelled one); cancels after a
/// match are refused; on both large-message paths.
#[test]
fn cancel_withdraws_unmatched_operations_only() {
    let _serial = serial();
    let all = cases(
        &[&[("RIVET_SHM_LMT", "cma")], &[("RIVET_SHM_LMT", "copy")]],
        &[&[]],
    );
    for env in all {
        let o = pass(2, &["cancel"], &env);
        has(
            &o,
            &env,
            "engine_check cancel: 5 receives and 4 sends cancelled, 4 late cancels refused",
        );
    }
}

/// An issend stays pending (test() says so, many times) until the receiver,
/// told only afterwards, posts its receive; eager and rendezvous sizes.
#[test]
fn ssend_completes_only_after_the_match() {
    let _serial = serial();
    let all = cases(
        &[
            &[],
            &[("RIVET_SHM_LMT", "copy")],
            &[("RIVET_SHM_EAGER_MAX", "0")],
        ],
        &[&[], &[("RIVET_TCP_EAGER_MAX", "0")]],
    );
    for env in all {
        let o = pass(2, &["ssend"], &env);
        has(
            &o,
            &env,
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
    let all = cases(
        &[
            &[],
            &[("RIVET_SHM_LMT", "cma")],
            &[("RIVET_SHM_LMT", "copy")],
            &[("RIVET_SHM_LMT", "copy"), ("RIVET_SHM_EAGER_MAX", "256")],
            &[("RIVET_SHM_LMT", "cma"), ("RIVET_SHM_EAGER_MAX", "256")],
            &[("RIVET_SHM_LMT", "copy"), ("RIVET_EAGER_MAX", "1000")],
            &[("RIVET_SHM_LMT", "copy"), ("RIVET_SHM_EAGER_MAX", "0")],
            // Eager over several cells, up to their limit (4 cells).
            &[("RIVET_SHM_EAGER_MAX", "65280")],
            // Single copy, never shared with the sender.
            &[("RIVET_SHM_LMT", "cma"), ("RIVET_SHM_SPLIT_MIN", "0")],
            // Shared from just above the eager limit: parts not page-sized.
            &[
                ("RIVET_SHM_LMT", "cma"),
                ("RIVET_SHM_EAGER_MAX", "256"),
                ("RIVET_SHM_SPLIT_MIN", "300"),
            ],
        ],
        &[
            &[],
            &[
                ("RIVET_TCP_EAGER_MAX", "1000"),
                ("RIVET_TCP_PIECE", "65536"),
            ],
            &[("RIVET_TCP_EAGER_MAX", "0")],
            // A window smaller than the eager limit: credit runs out.
            &[("RIVET_NETMOD_EAGER_WINDOW", "16K")],
            // ofi: rendezvous streamed even where the provider can read.
            &[("RIVET_OFI_RMA", "0")],
        ],
    );
    for env in &all {
        let o = pass(2, &["sizes"], env);
        knobs_took_effect(&o, env);
        for rank in 0..2 {
            let line = format!("engine_check sizes: rank {rank} verified ");
            has(&o, &env, &line);
        }
        has(&o, &env, "from 0 to 4194305 bytes");
        // Over shared memory with single copy, receives share the copy
        // with the sender from RIVET_SHM_SPLIT_MIN on (default 64 KiB),
        // once a first whole read has shown single copy works.
        // (Where the kernel refuses single copy, everything is copied.)
        let cma = rivet::shm::cma::probe().is_ok();
        if cma
            && !env
                .iter()
                .any(|(k, v)| *k == "RIVET_NETMOD" || *v == "copy")
        {
            let split = !env.contains(&("RIVET_SHM_SPLIT_MIN", "0"));
            for rank in 0..2 {
                let prefix = format!("engine_check sizes: rank {rank} single-copy reads: ");
                let Some(l) = o.stdout.lines().find_map(|l| l.strip_prefix(&prefix)) else {
                    panic!("{env:?}: no {prefix:?} line\n{}", o.show());
                };
                let count = |what: &str| -> u64 {
                    let at = l.find(what).expect("count");
                    let num = l[..at].trim_end().rsplit([' ', ',']).next().unwrap();
                    num.parse().unwrap()
                };
                assert!(count(" whole") > 0, "{env:?}: rank {rank}: {l}");
                assert_eq!(count(" shared") > 0, split, "{env:?}: rank {rank}: {l}");
            }
        }
        // Over ofi, rendezvous data is read by the receiver unless RMA is
        // off (both providers here offer FI_RMA); elsewhere nothing is read.
        let ofi = env.contains(&("RIVET_NETMOD", "ofi"));
        let rma = ofi && !env.contains(&("RIVET_OFI_RMA", "0"));
        for rank in 0..2 {
            let prefix = format!("engine_check sizes: rank {rank} rendezvous reads: ");
            let line = o.stdout.lines().find_map(|l| l.strip_prefix(&prefix));
            match (env.contains(&("RIVET_NETMOD", "tcp")) || ofi, line) {
                (false, _) => {}
                (true, None) => panic!("{env:?}: no {prefix:?} line\n{}", o.show()),
                (true, Some(l)) => {
                    let done: u64 = l.split(' ').next().unwrap().parse().unwrap();
                    assert_eq!(done > 0, rma, "{env:?}: rank {rank}: {l}");
                    assert!(
                        l.contains(" 0 streamed instead"),
                        "{env:?}: rank {rank}: {l}"
                    );
                }
            }
        }
    }
}

/// A receive buffer smaller than the message: Truncated in the status,
/// count = capacity, nothing written past the buffer, the next message fine.
#[test]
fn truncated_receives_report_and_the_job_goes_on() {
    let _serial = serial();
    let all = cases(
        &[
            &[],
            &[("RIVET_SHM_LMT", "cma")],
            &[("RIVET_SHM_LMT", "copy")],
            &[("RIVET_SHM_LMT", "copy"), ("RIVET_SHM_EAGER_MAX", "256")],
        ],
        &[&[], &[("RIVET_TCP_EAGER_MAX", "256")]],
    );
    for env in all {
        let o = pass(2, &["trunc"], &env);
        has(&o, &env, "engine_check trunc: ");
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
    let all = cases(
        &[
            &[],
            &[("RIVET_SHM_LMT", "copy"), ("RIVET_SHM_EAGER_MAX", "4096")],
        ],
        &[&[], &[("RIVET_NETMOD_EAGER_WINDOW", "64K")]],
    );
    for env in &all {
        let o = pass_with(&program, 3, &["stress", "100000", "1"], env);
        knobs_took_effect(&o, env);
        let sent: usize = o
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("engine_check stress: rank "))
            .map(|l| {
                let n = l.split(" sent ").nth(1).and_then(|r| r.split(' ').next());
                n.and_then(|n| n.parse::<usize>().ok())
                    .unwrap_or_else(|| panic!("bad stress line {l:?}\n{}", o.show()))
            })
            .sum();
        assert_eq!(sent, 100_000, "{env:?}: {}", o.show());
    }
}

/// Four threads per rank exchange messages at once, two on their own dup'd
/// communicators, two on the world with distinct tags, while a fifth only
/// calls progress().
#[test]
fn threads_share_the_engine() {
    let _serial = serial();
    // One thread level only: `threads` runs on an `Engine<Shared>`, which
    // is MULTIPLE whether or not RIVET_THREAD_LEVEL asks for it.
    let all = settings(&[&[], &[("RIVET_SHM_LMT", "copy")]], &[&[]]);
    for env in all.into_iter().map(Case::shared) {
        let o = pass(2, &["threads"], &env);
        for rank in 0..2 {
            has(
                &o,
                &env,
                &format!("engine_check threads: rank {rank}: 4 threads x 400 exchanges verified"),
            );
            // A job at MULTIPLE spreads its communicators over
            // RIVET_WORKERS workers (4 by default; world, c1 and c2 on three
            // of them), each with its own shm lane or, a netmod forced, its
            // own netmod instance; one thread's calls move them all.
            let transport = match env.iter().any(|(k, _)| *k == "RIVET_NETMOD") {
                true => "netmod instance",
                false => "shared-memory lane",
            };
            has(
                &o,
                &env,
                &format!(
                    "engine_check threads: rank {rank}: across workers OK; workers: 4 \
                     (communicators of our world spread by context id; each worker its own \
                     {transport}; RIVET_WORKERS)"
                ),
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
    let runs = [
        (&["kill"][..], &[][..]),
        (&["kill", "early"][..], &[][..]),
        (&["kill"][..], &TCP[0][..]),
        (&["kill"][..], &TCP[1][..]),
    ];
    for (mode, settings) in runs {
        for env in at_levels(vec![settings.to_vec()]) {
            // Killed before attaching (`early`), rank 2 leaves the node
            // segment to rivetrun: only what outlives rivetrun counts.
            let o = run_killed_job_checking_shm(job(3, &bin("engine_check"), mode, &env), DEADLINE);
            let case = format!("{mode:?} {env:?}");
            assert_eq!(o.code(), Some(128 + 9), "{case}: {}", o.show());
            assert!(
                o.stderr.contains("rank 2 was killed by signal 9 (SIGKILL)"),
                "{case}: {}",
                o.show()
            );
            has(&o, &case, "engine_check kill: rank 2 raises SIGKILL");
            // Ranks 0 and 1 checked their thread level before waiting.
            assert!(!o.stderr.contains("FAILED"), "{case}: {}", o.show());
        }
    }
}

/// Ping-pong of sizes up to 4 MiB (eager and rendezvous), bootstrapped by
/// MPICH's Hydra instead of rivetrun.
#[test]
fn pingpong_under_mpich_hydra() {
    let _serial = serial();
    for env in cases(&[&[]], &[&[]]) {
        let mut cmd = Command::new("mpiexec.hydra");
        cmd.args(["-n", "2"])
            .arg(bin("engine_check"))
            .arg("pingpong");
        let o = run_job_checking_shm(with_env(cmd, &env), DEADLINE);
        assert_eq!(o.code(), Some(0), "{env:?}: {}", o.show());
        knobs_took_effect(&o, &env);
        for rank in 0..2 {
            has(&o, &env, &ok_line("pingpong", rank, 2, env.level));
        }
        has(
            &o,
            &env,
            "engine_check pingpong: sizes [0, 1, 100, 4096, 65536, 300000, 4194304]",
        );
    }
}

/// The same ping-pong under rivetrun with every yield policy.
#[test]
fn pingpong_under_rivetrun_with_every_yield_mode() {
    let _serial = serial();
    // Each (policy, transport) once, the thread levels taking turns.
    let mut turn = LEVELS.iter().cycle();
    for y in ["auto", "always", "never"] {
        for net in [&[][..], &TCP[0][..], &TCP[1][..]] {
            let settings: Env = net.iter().copied().chain([("RIVET_YIELD", y)]).collect();
            let env = Case::at(settings, *turn.next().expect("cycle never ends"));
            let o = pass(2, &["pingpong"], &env);
            knobs_took_effect(&o, &env);
        }
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

/// dup: new context ids, agreed by all ranks; a message on a dup never
/// matches a receive on its parent; barriers (checked with marker files the
/// ranks write before entering) on 1 to 4 ranks.
#[test]
fn dup_isolates_traffic_and_barriers_hold_on_1_to_4_ranks() {
    let _serial = serial();
    // Each transport on each size once, the thread levels taking turns
    // (the barrier does not depend on the level; the lock does not on n).
    let jobs = (1..=4u32).flat_map(|n| {
        settings(&[&[]], &[&[]])
            .into_iter()
            .enumerate()
            .map(move |(i, env)| (n, Case::at(env, LEVELS[(n as usize + i) % 2])))
    });
    for (n, env) in jobs {
        let dir = std::env::temp_dir().join(format!("rivet-barrier-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let o = pass(n, &["dup", dir.to_str().unwrap()], &env);
        let _ = std::fs::remove_dir_all(&dir);
        for rank in 0..n {
            has(
                &o,
                &env,
                &format!("engine_check dup: rank {rank} of {n}: context ids ["),
            );
        }
        has(&o, &env, "isolation and 45 barriers checked");
    }
}

/// No launcher: a singleton of size 1 that sends to itself.
#[test]
fn a_singleton_sends_to_itself() {
    let _serial = serial();
    for env in at_levels(vec![vec![]]) {
        let mut cmd = Command::new(bin("engine_check"));
        cmd.arg("singleton");
        for var in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE"] {
            cmd.env_remove(var);
        }
        let o = run_job_checking_shm(with_env(cmd, &env), DEADLINE);
        assert_eq!(o.code(), Some(0), "{env:?}: {}", o.show());
        has(
            &o,
            &env,
            "engine_check singleton: rank 0 of 1, messages to self verified",
        );
        has(&o, &env, &ok_line("singleton", 0, 1, env.level));
    }
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

// ---------------------------------------------------------------------------
// netmods only.

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
/// injected in the backend's constructor: `RIVET_TCP_BACKEND=auto` (io_uring
/// where possible) falls back to poll, says why, and passes. Forcing the uring backend where it cannot work is a clear
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
        let auto = Case::at(
            vec![("RIVET_NETMOD", "tcp"), ("RIVET_TCP_BACKEND", "auto")],
            level,
        );
        let o = run_job_checking_shm(under_seccomp(&auto), DEADLINE);
        fallback(&o, "seccomp", level);

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
