//! What every test rank program (`engine_check`, `dyn_check`) uses to fail:
//! one `PROGRAM rank R: FAILED: ...` line on stderr, exit code 1.
//!
//! `start(program)` first thing, `set_rank(rank)` once the rank is known;
//! `ensure!` and `or_die` then report in that rank's name.

use std::io::Write;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;

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
