//! `compare`'s benchmarks of scale (`--benches idle,fanin`; Rivet stacks
//! only): their job command lines and the lines of verdict below their
//! tables. The tables themselves are `compare`'s, keyed by idle peers
//! (`latency-idle`, `memory`) or senders (`fanin`).
//!
//! - idle, for K in 0 and `--idle-peers`: `rivetrun -n K+2 --cpu-list
//!   0:1:0-1:... rivet-bench latency --idle-peers K --min 8 --max 8
//!   --json`: the measuring ranks 0 and 1 bound to CPUs 0 and 1 (as
//!   `--bind-to core` binds a 2-rank job), the idle ones anywhere (they
//!   sleep in a PMI barrier). Its memory line gives rank 0's RSS.
//! - fanin: `rivetrun -n S+1 rivet-bench fanin --json` (more ranks than
//!   cores: unbound).

use std::path::Path;

use crate::harness::CmdSpec;
use crate::sizes::Kind;
use crate::stats::fmt_ratio;

/// Targets of issue 21: latency with idle peers at most this times the
/// same stack's with none; fanin uring / poll at least this; memory per
/// idle peer at most this many KiB.
pub const IDLE_TARGET: f64 = 1.15;
pub const FANIN_TARGET: f64 = 1.3;
pub const MEMORY_TARGET_KIB: f64 = 64.0;

/// `--cpu-list` for `idle` idle ranks: 0, 1, then both CPUs for each.
pub fn cpu_list(idle: u64) -> String {
    let mut l = String::from("0:1");
    for _ in 0..idle {
        l += ":0-1";
    }
    l
}

/// The job of one run: `idle` (K idle peers) or fanin (K senders);
/// `loop_flags`: `--iters`, `--warmup`, `--window` as compare was given.
pub fn spec(
    rivetrun: CmdSpec,
    program: &Path,
    idle: bool,
    k: u64,
    loop_flags: Vec<String>,
) -> CmdSpec {
    if idle {
        rivetrun
            .args(["-n", &(k + 2).to_string(), "--cpu-list", &cpu_list(k)])
            .arg(program)
            .args([Kind::Latency.name(), "--idle-peers", &k.to_string()])
            .args(["--min", "8", "--max", "8", "--json"])
            .args(loop_flags)
    } else {
        rivetrun
            .args(["-n", &(k + 1).to_string()])
            .arg(program)
            .args(["fanin", "--json"])
            .args(loop_flags)
    }
}

/// A met/MISSED word.
fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

/// Below the latency-idle table: per stack, median with N idle / with none.
pub fn idle_lines(per_stack: &[(&str, Option<f64>, Option<f64>)], n: u64) -> String {
    let mut out = String::new();
    for (name, none, with) in per_stack {
        if let (Some(a), Some(b)) = (none, with) {
            let r = b / a;
            out += &format!(
                "# {name}: {n} idle peers / none = {} {} (target <= {IDLE_TARGET})\n",
                fmt_ratio(r, |v| v <= IDLE_TARGET),
                verdict(r <= IDLE_TARGET)
            );
        }
    }
    out
}

/// Below the memory table: per stack, RSS growth per idle peer.
pub fn memory_lines(per_stack: &[(&str, Option<f64>, Option<f64>)], n: u64) -> String {
    let mut out = String::new();
    for (name, none, with) in per_stack {
        if let (Some(a), Some(b), true) = (none, with, n > 0) {
            let per = (b - a) / n as f64;
            out += &format!(
                "# {name}: ({n} peers - none) / {n} = {per:.1} KiB per connected idle peer {} (target <= {MEMORY_TARGET_KIB} KiB)\n",
                verdict(per <= MEMORY_TARGET_KIB)
            );
        }
    }
    out
}

/// Below the fanin table: rivet-uring / rivet-poll.
pub fn fanin_line(uring_over_poll: Option<f64>) -> String {
    match uring_over_poll {
        Some(r) => format!(
            "# fanin rivet-uring / rivet-poll = {} {} (target >= {FANIN_TARGET})\n",
            fmt_ratio(r, |v| v >= FANIN_TARGET),
            verdict(r >= FANIN_TARGET)
        ),
        None => String::new(),
    }
}

/// Below any table with system-call counts: per key, each stack's median.
pub fn calls_lines(rows: &[(u64, Vec<(&str, f64)>)], key_name: &str) -> String {
    let mut out = String::new();
    for (key, per) in rows {
        if per.is_empty() {
            continue;
        }
        let each: Vec<String> = per.iter().map(|(n, c)| format!("{n} {c:.3}")).collect();
        out += &format!(
            "# system calls per message (rank 0's netmod), {key_name} {key}: {}\n",
            each.join(", ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_verdicts() {
        assert_eq!(cpu_list(0), "0:1");
        assert_eq!(cpu_list(2), "0:1:0-1:0-1");
        let idle = idle_lines(
            &[
                ("rivet-poll", Some(10.0), Some(11.0)),
                ("x", None, Some(1.0)),
            ],
            64,
        );
        assert_eq!(
            idle,
            "# rivet-poll: 64 idle peers / none = 1.10 met (target <= 1.15)\n"
        );
        let mem = memory_lines(
            &[("rivet-uring", Some(1000.0), Some(1000.0 + 64.0 * 80.0))],
            64,
        );
        assert!(
            mem.contains("80.0 KiB per connected idle peer MISSED"),
            "{mem}"
        );
        assert!(fanin_line(Some(1.5)).contains("1.50 met"));
        assert_eq!(fanin_line(None), "");
        let calls = calls_lines(&[(8, vec![("rivet-uring", 0.25)]), (16, vec![])], "size");
        assert_eq!(
            calls,
            "# system calls per message (rank 0's netmod), size 8: rivet-uring 0.250\n"
        );
    }
}
