//! What the engine end-to-end tests (`tests/engine*.rs`) share: the cases
//! they run `engine_check` in, and running and judging its jobs.
//!
//! The point-to-point tests run over every transport (UCX-style, one suite
//! parametrized rather than copied): shared memory, and tcp forced on-node
//! (`RIVET_NETMOD=tcp`) on the io_uring and the poll backend, and ofi on
//! its two providers; `cases` builds the list.
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

use crate::{bin, level_env, rivetrun, run_job_checking_shm, Outcome, LEVELS};

pub const DEADLINE: Duration = Duration::from_secs(120);

/// The settings the tests vary; cleared first so the caller's environment
/// cannot leak into a case.
pub const KNOBS: [&str; 24] = [
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

pub type Env = Vec<(&'static str, &'static str)>;

/// One case of a test: its settings, and the thread level the ranks must
/// run at (and name in their OK line).
#[derive(Clone, PartialEq)]
pub struct Case {
    /// The settings, with the level's `RIVET_THREAD_LEVEL` if it needs one.
    pub env: Env,
    pub level: ThreadLevel,
}

impl Case {
    /// `settings` at `level` (a `LEVELS` one), for a mode on engine_check's
    /// `Engine<Local>`.
    pub fn at(settings: Env, level: ThreadLevel) -> Case {
        let env = settings.into_iter().chain(level_env(level)).collect();
        Case { env, level }
    }

    /// `settings` for a mode on an `Engine<Shared>` (`threads`): MULTIPLE
    /// with or without `RIVET_THREAD_LEVEL`, so one level is all there is.
    pub fn shared(settings: Env) -> Case {
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
pub fn at_levels(settings: Vec<Env>) -> Vec<Case> {
    settings
        .into_iter()
        .flat_map(|env| LEVELS.map(|level| Case::at(env.clone(), level)))
        .collect()
}

/// tcp forced on-node, on each backend.
pub const TCP: [[(&str, &str); 2]; 2] = [
    [("RIVET_NETMOD", "tcp"), ("RIVET_TCP_BACKEND", "uring")],
    [("RIVET_NETMOD", "tcp"), ("RIVET_TCP_BACKEND", "poll")],
];

/// The libfabric netmod forced on-node, on the two providers every
/// libfabric build has.
pub const OFI: [[(&str, &str); 2]; 2] = [
    [
        ("RIVET_NETMOD", "ofi"),
        ("RIVET_OFI_PROVIDER", "tcp;ofi_rxm"),
    ],
    [("RIVET_NETMOD", "ofi"), ("RIVET_OFI_PROVIDER", "shm")],
];

/// The ofi spelling of a tcp netmod setting (the two netmods share the
/// meaning of these).
pub fn ofi_knob(tcp_knob: &'static str) -> &'static str {
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
pub fn cases(
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
pub fn is_plain(env: &Env) -> bool {
    env.iter().all(|(k, _)| {
        matches!(
            *k,
            "RIVET_NETMOD" | "RIVET_TCP_BACKEND" | "RIVET_OFI_PROVIDER"
        )
    })
}

/// The settings of `cases`, at no particular thread level.
pub fn settings(
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

pub fn with_env(mut cmd: Command, env: &[(&str, &str)]) -> Command {
    for k in KNOBS {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// `rivetrun -n N PROGRAM MODE ARGS...` with `env`.
pub fn job(n: u32, program: &Path, mode: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = rivetrun(&["-n", &n.to_string()]);
    cmd.arg(program).args(mode);
    with_env(cmd, env)
}

/// Run `engine_check MODE` on `n` ranks in `case`; it must pass on every
/// rank, at the case's thread level. The outcome, for mode-specific checks.
pub fn pass(n: u32, mode: &[&str], case: &Case) -> Outcome {
    pass_with(&bin("engine_check"), n, mode, case)
}

pub fn pass_with(program: &Path, n: u32, mode: &[&str], env: &Case) -> Outcome {
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
pub fn ok_line(mode: &str, rank: u32, n: u32, level: ThreadLevel) -> String {
    format!("engine_check {mode} OK rank {rank} of {n} at thread level {level}\n")
}

/// The engine's info (rank 0 prints it) shows the settings of `env`: the
/// case really ran the path it means to, at its thread level.
pub fn knobs_took_effect(o: &Outcome, env: &Case) {
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
pub fn has(o: &Outcome, case: &dyn std::fmt::Debug, what: &str) {
    assert!(
        o.stdout.contains(what),
        "{case:?}: expected {what:?} in\n{}",
        o.show()
    );
}
