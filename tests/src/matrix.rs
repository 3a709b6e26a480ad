//! The transports and thread levels a test runs over, and jobs built for
//! one of them.

use std::process::Command;

use rivet::ThreadLevel;

use crate::build::bin;
use crate::jobs::rivetrun;

/// (name, environment) of each transport a multi-process suite runs over:
/// shared memory inside a job (tcp between jobs), tcp forced everywhere,
/// and ofi forced everywhere on the `tcp;ofi_rxm` and `shm` providers.
/// Five or more processes share two cores here, so ranks yield when idle.
pub const TRANSPORTS: [(&str, &[(&str, &str)]); 4] = [
    ("shm", &[("RIVET_YIELD", "always")]),
    ("tcp", &[("RIVET_YIELD", "always"), ("RIVET_NETMOD", "tcp")]),
    (
        "ofi tcp;ofi_rxm",
        &[
            ("RIVET_YIELD", "always"),
            ("RIVET_NETMOD", "ofi"),
            ("RIVET_OFI_PROVIDER", "tcp;ofi_rxm"),
        ],
    ),
    (
        "ofi shm",
        &[
            ("RIVET_YIELD", "always"),
            ("RIVET_NETMOD", "ofi"),
            ("RIVET_OFI_PROVIDER", "shm"),
        ],
    ),
];

/// The thread levels a multi-process suite runs every case at: first
/// without `RIVET_THREAD_LEVEL`, where the rank programs' `Engine<Local>`
/// runs at SINGLE, without a lock; then with `RIVET_THREAD_LEVEL=multiple`,
/// which raises it to MULTIPLE, so the engine locks.
pub const LEVELS: [ThreadLevel; 2] = [ThreadLevel::Single, ThreadLevel::Multiple];

/// What asks the rank programs for `level`: nothing for SINGLE (their
/// default), `RIVET_THREAD_LEVEL=NAME` otherwise.
pub fn level_env(level: ThreadLevel) -> Option<(&'static str, &'static str)> {
    (level != ThreadLevel::Single).then(|| ("RIVET_THREAD_LEVEL", level.name()))
}

/// A transport of `TRANSPORTS` at a thread level of `LEVELS`: the
/// environment of one case of a multi-process suite.
#[derive(Debug, Clone)]
pub struct Over {
    pub transport: &'static str,
    pub level: ThreadLevel,
    /// The transport's settings, and the level's (`level_env`).
    pub env: Vec<(&'static str, &'static str)>,
}

impl std::fmt::Display for Over {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at thread level {}", self.transport, self.level)
    }
}

/// Every transport at every level (each transport at SINGLE, then at
/// MULTIPLE): one suite, parametrised rather than copied.
pub fn every_transport_and_level() -> Vec<Over> {
    TRANSPORTS
        .iter()
        .flat_map(|&(transport, env)| {
            LEVELS.iter().map(move |&level| Over {
                transport,
                level,
                env: env.iter().copied().chain(level_env(level)).collect(),
            })
        })
        .collect()
}

/// Lines of `stdout` saying `PROGRAM MODE OK ...` at thread level `level`
/// (the rank programs end their OK line with `at thread level NAME`).
pub fn oks_at(stdout: &str, program: &str, mode: &str, level: ThreadLevel) -> usize {
    let start = format!("{program} {mode} OK ");
    let end = format!(" at thread level {level}");
    stdout
        .lines()
        .filter(|l| l.starts_with(&start) && l.ends_with(&end))
        .count()
}

/// `rivetrun EXTRA... -n N PROGRAM ARGS...` with `env` (an `Over`'s, or a
/// `TRANSPORTS` entry's); what would choose another transport, name server
/// or thread level is cleared from the caller's environment first.
pub fn job_over(
    program: &str,
    n: u32,
    args: &[&str],
    env: &[(&str, &str)],
    extra: &[&str],
) -> Command {
    let n = n.to_string();
    let exe = bin(program);
    let mut all: Vec<&str> = extra.to_vec();
    all.extend(["-n", &n, exe.to_str().expect("utf-8 path")]);
    all.extend(args);
    let mut cmd = rivetrun(&all);
    for var in [
        "RIVET_NETMOD",
        "RIVET_OFI_PROVIDER",
        "RIVET_NAMESERVER",
        "RIVET_THREAD_LEVEL",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd
}
