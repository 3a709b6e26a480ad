//! The text report: a titled table per benchmark, medians [min-max] per
//! stack, the ratio columns and notes below.

use super::args::Bench;
use super::stacks::{role, split_provider, Role};
use super::summary::{fmt_mpi_ratio, fmt_summary, raw_target, summarize_table, RowSummary, Target};
use super::table::{placement_split, runs_placed, Table};
use crate::harness;
use crate::peers::Transport;
use crate::placement::Class;
use crate::sizes::Kind;
use crate::stats::{fmt_ratio, summarize};

pub(super) fn bench_title(transport: Transport, table: &Table, stacks: &[&str]) -> String {
    let raw = table.stacks.iter().any(|&i| role(stacks[i]) == Role::Raw);
    match table.bench {
        Bench::Idle => {
            return "latency-idle: 8 B half round trip, us (lower is better), with N idle ranks \
                connected to both measuring ranks and asleep in a PMI barrier; Rivet only"
                .into()
        }
        Bench::Memory => {
            return "memory: rank 0's RSS, KiB (lower is better), once connected to N idle peers \
                (one message each way); Rivet only"
                .into()
        }
        Bench::Fanin => {
            return "fanin: N ranks send windows of 64 8-byte messages to rank 0, messages/s \
                received (higher is better); Rivet only, unbound (more ranks than cores)"
                .into()
        }
        Bench::P2p(_) | Bench::Startup => {}
    }
    if transport == Transport::Ofi {
        return match table.bench {
            Bench::P2p(Kind::Latency) => {
                "latency: half round trip, us (lower is better); fi_pingpong: usec/xfer".into()
            }
            Bench::P2p(Kind::Bw) => {
                "bw: MB/s with 1 MB = 1e6 B (higher is better); rivet-ofi: window of 64; \
                fi_pingpong: ping-pong, size / half round trip (not a streaming figure)"
                    .into()
            }
            Bench::P2p(Kind::Bibw) => {
                "bibw: both directions, window of 64, MB/s (higher is better); Rivet only, no ratio"
                    .into()
            }
            Bench::P2p(Kind::Mr) => {
                "mr: 8-byte messages, window of 64, messages/s (higher is better); \
                Rivet only, no ratio (fi_pingpong has no mr)"
                    .into()
            }
            Bench::Startup => {
                "startup: whole N-rank job (init, barrier, finalize), launcher start to exit, \
                s (lower is better); Rivet only"
                    .into()
            }
            Bench::Idle | Bench::Memory | Bench::Fanin => unreachable!("titled above"),
        };
    }
    match table.bench {
        Bench::P2p(Kind::Latency) if raw => {
            "latency: half round trip, us (lower is better); raw-tcp: busy-poll recv".into()
        }
        Bench::P2p(Kind::Latency) => "latency: half round trip, us (lower is better)".into(),
        Bench::P2p(Kind::Bw) if raw => "bw: window of 64, MB/s with 1 MB = 1e6 B (higher is better); \
            raw-tcp: one stream of back-to-back sends"
            .into(),
        Bench::P2p(Kind::Bw) => "bw: window of 64, MB/s with 1 MB = 1e6 B (higher is better)".into(),
        Bench::P2p(Kind::Bibw) => {
            "bibw: both directions, window of 64, MB/s (higher is better); no peer has bibw, Rivet only".into()
        }
        Bench::P2p(Kind::Mr) => "mr: 8-byte messages, window of 64, messages/s (higher is better)".into(),
        Bench::Startup => {
            "startup: whole N-rank job (init, barrier, finalize), launcher start to exit, s (lower is better)"
                .into()
        }
        Bench::Idle | Bench::Memory | Bench::Fanin => unreachable!("titled above"),
    }
}

/// The tables, aligned in columns.
pub(super) fn text_report(
    transport: Transport,
    tables: &[Table],
    stacks: &[&str],
    skipped: &[(&str, &str)],
    reps: u32,
    loads: &harness::Loads,
) -> String {
    let mut out = match transport {
        Transport::Shm => format!(
            "# Rivet vs peers: median [min-max] over {reps} interleaved runs per stack; ratio = rivet / best peer\n"
        ),
        Transport::Tcp => format!(
            "# Rivet vs peers over TCP (loopback): median [min-max] over {reps} interleaved runs per stack\n\
             # ratios = Rivet stack / best peer (mpich or openmpi), / raw-tcp (the loopback limit), rivet-uring / rivet-poll\n\
             # targets: 8 B latency {} x raw-tcp, 1 MiB bw {} x raw-tcp\n",
            Target::AtMost(1.1).describe(),
            Target::AtLeast(0.9).describe()
        ),
        Transport::Ofi => format!(
            "# Rivet over libfabric vs fi_pingpong: median [min-max] over {reps} interleaved runs per stack\n\
             # rivet-ofi(P): RIVET_NETMOD=ofi RIVET_OFI_PROVIDER=P rivetrun -n 2 --bind-to core; \
             fi_pingpong(P): fi_pingpong -p P -e rdm, server CPU 1, client CPU 0\n\
             # ratios = rivet-ofi(P) / fi_pingpong(P); targets at every size: latency {}, bw {}\n\
             # fi_pingpong's MB/s is ping-pong bandwidth (size / half round trip, one message in flight), \
             Rivet's bw a window of 64: not the same kind of figure\n",
            Target::AtMost(1.1).describe(),
            Target::AtLeast(1.0).describe()
        ),
    };
    for (name, why) in skipped {
        out += &format!("# skipped {name}: {why}\n");
    }
    if let Some(l) = loads.describe() {
        out += &format!("# {l}\n");
    }
    if loads.failures > 0 {
        out += &format!(
            "# {} run(s) failed or gave unusable output (see stderr)\n",
            loads.failures
        );
    }
    let split = placement_split(tables);
    out += &placement_line(tables, split);
    for table in tables {
        out += &format!("\n# {}\n", bench_title(transport, table, stacks));
        out += &table_text(transport, table, stacks, reps, "failed");
        if let Some(split) = split {
            for class in [Class::Near, Class::Far] {
                let placed = table.placed(split, class);
                if placed.samples.is_empty() {
                    continue;
                }
                let cmp = match class {
                    Class::Near => "<=",
                    Class::Far => ">",
                };
                out += &format!(
                    "# {} placement only: the runs with the CPUs' round trip {cmp} {split:.0} ns before and after\n",
                    class.name()
                );
                out += &table_text(transport, &placed, stacks, reps, "no run");
            }
        }
    }
    out
}

/// The header line on the placements the runs had: one, or two (then
/// every table also shows each placement's runs apart).
fn placement_line(tables: &[Table], split: Option<f64>) -> String {
    let values: Vec<f64> = tables.iter().flat_map(Table::probe_values).collect();
    let Some(all) = summarize(&values) else {
        return String::new();
    };
    let what = "round trip of a cache line between CPUs 0 and 1, probed before and after each run";
    let Some(split) = split else {
        return format!(
            "# placement: one group of runs ({what}: {:.0}-{:.0} ns)\n",
            all.min, all.max
        );
    };
    let count = |c| match runs_placed(tables, split, c) {
        1 => "1 run".to_string(),
        n => format!("{n} runs"),
    };
    let (near, far): (Vec<f64>, Vec<f64>) = values.iter().partition(|&&v| v <= split);
    let range =
        |v: &[f64]| summarize(v).map_or("-".into(), |s| format!("{:.0}-{:.0}", s.min, s.max));
    format!(
        "# placement: two, as the host placed this machine's CPUs ({what}): \
         near {} ns ({}), far {} ns ({}), moved during the run ({}); \
         each table also shows the near and the far runs apart\n",
        range(&near),
        count(Some(Class::Near)),
        range(&far),
        count(Some(Class::Far)),
        count(None)
    )
}

/// One table's grid of medians [min-max] (with shm's ratio columns), its
/// ratio grid (tcp, ofi) and the notes below it; `missing` stands where a
/// stack has no sample.
fn table_text(
    transport: Transport,
    table: &Table,
    stacks: &[&str],
    reps: u32,
    missing: &str,
) -> String {
    let mut out = String::new();
    let rows = summarize_table(table, stacks);
    let mut grid: Vec<Vec<String>> = Vec::new();
    let key_header = if table.key_name() == "size" {
        "Size".to_string()
    } else {
        "N".to_string()
    };
    let mut header = vec![key_header.clone()];
    header.extend(table.stacks.iter().map(|&i| stacks[i].to_string()));
    let has_ratio =
        transport == Transport::Shm && table.stacks.len() > 1 && stacks.first() == Some(&"rivet");
    if has_ratio {
        header.push("rivet/best".into());
    }
    // The MPI layer's stack: its own ratio to the best peer, and its
    // cost over the engine alone.
    let layer = table
        .stacks
        .iter()
        .copied()
        .find(|&i| stacks[i] == "rivet-mpi");
    let layer_ratios = has_ratio && layer.is_some();
    if layer_ratios {
        header.push("rivet-mpi/best".into());
        header.push("rivet-mpi/rivet".into());
    }
    grid.push(header);
    for r in &rows {
        let mut line = vec![r.key.to_string()];
        for (i, s) in &r.per_stack {
            line.push(match s {
                Some((s, n)) => fmt_summary(table.unit(), s, *n, reps),
                None if !table.measures(*i, r.key) => "-".into(),
                None => missing.into(),
            });
        }
        if has_ratio {
            line.push(match r.ratio {
                Some((x, peer)) => format!("{x:.2} vs {}", stacks[peer]),
                None => "-".into(),
            });
        }
        if layer_ratios {
            let vs_best = r.rivets.iter().find(|x| Some(x.stack) == layer);
            line.push(match vs_best.and_then(|x| x.vs_best) {
                Some((x, peer)) => format!("{x:.2} vs {}", stacks[peer]),
                None => "-".into(),
            });
            line.push(fmt_mpi_ratio(table.bench, r.key, r.mpi_over_rivet));
        }
        grid.push(line);
    }
    out += &align(&grid);
    if transport != Transport::Shm {
        out += &ratio_grid(transport, table, stacks, &rows, key_header);
    }
    out + &scale_notes(table, stacks, &rows)
}

/// Below a table: the verdicts of the benchmarks of scale (idle peers /
/// none, memory per idle peer, fanin uring / poll) and rank 0's netmod
/// system calls per message, where the runs reported them.
pub(super) fn scale_notes(table: &Table, stacks: &[&str], rows: &[RowSummary]) -> String {
    use crate::scale_compare as sc;
    let median_of = |key: u64, i: usize| {
        rows.iter()
            .find(|r| r.key == key)
            .and_then(|r| r.per_stack.iter().find(|(j, _)| *j == i))
            .and_then(|(_, s)| s.map(|(s, _)| s.median))
    };
    let mut out = String::new();
    match table.bench {
        Bench::Idle | Bench::Memory => {
            let n = table
                .keys
                .as_ref()
                .and_then(|k| k.last().copied())
                .unwrap_or(0);
            let per: Vec<(&str, Option<f64>, Option<f64>)> = table
                .stacks
                .iter()
                .map(|&i| (stacks[i], median_of(0, i), median_of(n, i)))
                .collect();
            out += &if table.bench == Bench::Idle {
                sc::idle_lines(&per, n)
            } else {
                sc::memory_lines(&per, n)
            };
        }
        Bench::Fanin => out += &sc::fanin_line(rows.first().and_then(|r| r.uring_over_poll)),
        Bench::Startup => {
            // Open MPI's hello under rivetrun against under its own
            // mpirun: the one ratio `openmpi-rivetrun` is measured for.
            let named = |n: &str| table.stacks.iter().copied().find(|&i| stacks[i] == n);
            if let (Some(ours), Some(theirs)) = (named("openmpi-rivetrun"), named("openmpi")) {
                for r in rows {
                    if let (Some(a), Some(b)) = (median_of(r.key, ours), median_of(r.key, theirs)) {
                        out += &openmpi_rivetrun_line(r.key, a / b);
                    }
                }
            }
        }
        Bench::P2p(_) => {}
    }
    let calls: Vec<(u64, Vec<(&str, f64)>)> = table
        .calls
        .iter()
        .map(|(k, m)| {
            let per = m
                .iter()
                .filter_map(|(i, v)| summarize(v).map(|s| (stacks[*i], s.median)))
                .collect();
            (*k, per)
        })
        .collect();
    out + &sc::calls_lines(&calls, table.key_name())
}

/// Open MPI's start-up under rivetrun (its PMIx server) over under
/// `mpirun.openmpi`, N ranks, with its target.
fn openmpi_rivetrun_line(n: u64, ratio: f64) -> String {
    let t = Target::AtMost(0.7);
    format!(
        "# N={n}: openmpi-rivetrun / openmpi = {} {} (target {})\n",
        fmt_ratio(ratio, |v| t.met(v)),
        if t.met(ratio) { "met" } else { "MISSED" },
        t.describe()
    )
}

/// Over tcp and ofi, the ratios of a table, below its values: per Rivet
/// stack /best and /raw-tcp or /fi_pingpong (with the target where there
/// is one), and uring/poll.
pub(super) fn ratio_grid(
    transport: Transport,
    table: &Table,
    stacks: &[&str],
    rows: &[RowSummary],
    key_header: String,
) -> String {
    let has = |r: Role| table.stacks.iter().any(|&i| role(stacks[i]) == r);
    let (has_peer, has_raw) = (has(Role::Peer), has(Role::Raw));
    // raw-tcp, fi_pingpong
    let raw_name = table
        .stacks
        .iter()
        .find(|&&i| role(stacks[i]) == Role::Raw)
        .map_or("raw", |&i| split_provider(stacks[i]).0);
    let rivets: Vec<usize> = rows
        .first()
        .map(|r| r.rivets.iter().map(|x| x.stack).collect())
        .unwrap_or_default();
    let uring_poll = ["rivet-uring", "rivet-poll"]
        .iter()
        .all(|n| rivets.iter().any(|&i| stacks[i] == *n));
    let mut header = vec![key_header];
    for &i in &rivets {
        if has_peer {
            header.push(format!("{}/best", stacks[i]));
        }
        if has_raw {
            header.push(format!("{}/{raw_name}", stacks[i]));
        }
    }
    if uring_poll {
        header.push("uring/poll".into());
    }
    if header.len() == 1 {
        return String::new();
    }
    let mut grid = vec![header];
    for r in rows {
        let mut line = vec![r.key.to_string()];
        for x in &r.rivets {
            if has_peer {
                line.push(match x.vs_best {
                    Some((v, peer)) => format!("{v:.2} vs {}", stacks[peer]),
                    None => "-".into(),
                });
            }
            if has_raw {
                line.push(
                    match (x.vs_raw, raw_target(transport, table.bench, r.key)) {
                        (Some(v), Some(t)) => t.verdict(v),
                        (Some(v), None) => format!("{v:.2}"),
                        (None, _) => "-".into(),
                    },
                );
            }
        }
        if uring_poll {
            line.push(match r.uring_over_poll {
                Some(v) => format!("{v:.2}"),
                None => "-".into(),
            });
        }
        grid.push(line);
    }
    align(&grid)
}

/// Right-align columns; the first line is the header, prefixed with '#'.
pub(super) fn align(grid: &[Vec<String>]) -> String {
    let cols = grid.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            grid.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (i, row) in grid.iter().enumerate() {
        out += if i == 0 { "# " } else { "  " };
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(s, w)| format!("{s:>w$}"))
            .collect();
        out += cells.join("  ").trim_end();
        out += "\n";
    }
    out
}

#[cfg(test)]
#[path = "text_tests.rs"]
mod tests;
