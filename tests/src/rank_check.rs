//! What every test rank program (`engine_check`, `dyn_check`,
//! `group_check`) uses to start its engine and to fail: one `PROGRAM rank
//! R: FAILED: ...` line on stderr, exit code 1.
//!
//! `start(program)` first thing, then `init::<T>(level)` (which records the
//! rank and checks the thread level), or `set_rank(rank)` once the rank is
//! known; `ensure!` and `or_die` then report in that rank's name.

use std::io::Write;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;

use rivet::{Engine, ThreadLevel, Threading};

static PROGRAM: OnceLock<&'static str> = OnceLock::new();
static RANK: AtomicI64 = AtomicI64::new(-1);

/// Name the program failures are reported for (first call wins).
pub fn start(program: &'static str) {
    let _ = PROGRAM.set(program);
}

pub fn set_rank(rank: u32) {
    RANK.store(rank.into(), Ordering::Relaxed);
}

/// The rank `set` recorded (-1 before).
pub fn rank() -> i64 {
    RANK.load(Ordering::Relaxed)
}

pub fn die(what: impl std::fmt::Display) -> ! {
    let _ = std::io::stdout().flush();
    eprintln!(
        "{} rank {}: FAILED: {what}",
        PROGRAM.get().copied().unwrap_or("test rank"),
        rank()
    );
    std::process::exit(1);
}

/// `ensure!(cond, "format", args)`: die with the message unless `cond`.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            $crate::rank_check::die(format!($($fmt)+))
        }
    };
}

pub trait OrDie<T> {
    fn or_die(self, what: &str) -> T;
}

impl<T, E: std::fmt::Display> OrDie<T> for Result<T, E> {
    fn or_die(self, what: &str) -> T {
        self.unwrap_or_else(|e| die(format!("{what}: {e}")))
    }
}

/// The thread level the harness asks a program for, which its engine must
/// provide: `RIVET_THREAD_LEVEL` when set, else what the program asked
/// (`required`); never below what the handles allow (`Engine<Shared>` is
/// always MULTIPLE).
pub fn expected_level<T: Threading>(required: ThreadLevel) -> ThreadLevel {
    let floor = required.max(T::FLOOR);
    match std::env::var("RIVET_THREAD_LEVEL") {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<ThreadLevel>() {
            Ok(asked) => asked.max(floor),
            Err(e) => die(format!("RIVET_THREAD_LEVEL={v:?}: {e}")),
        },
        _ => floor,
    }
}

/// `Engine::<T>::init_thread(required)`, then record the rank and check
/// the level it provides against `expected_level` (and its `thread_level`
/// info item against that), so a case cannot run at another level than the
/// one it names.
pub fn init<T: Threading>(required: ThreadLevel) -> Engine<T> {
    let engine = Engine::<T>::init_thread(required).or_die("Engine::init_thread");
    set_rank(engine.rank());
    let want = expected_level::<T>(required);
    let got = engine.thread_level();
    crate::ensure!(
        got == want,
        "thread level {got}, but the harness asked for {want} (RIVET_THREAD_LEVEL={:?})",
        std::env::var("RIVET_THREAD_LEVEL").unwrap_or_default()
    );
    let info = engine
        .info()
        .items
        .into_iter()
        .find(|(k, _)| k == "thread_level")
        .map(|(_, v)| v)
        .unwrap_or_default();
    let lock = if got.locks() {
        "its own lock"
    } else {
        "no lock"
    };
    crate::ensure!(
        info.starts_with(got.name()) && info.contains(lock),
        "thread level {got}, but the engine's info says {info:?}"
    );
    engine
}
