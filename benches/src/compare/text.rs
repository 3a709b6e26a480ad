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
mod tests {
    use super::super::fixtures::{ofi_tables, table, tcp_tables, OFI_NAMES};
    use super::super::json_report::json_doc;
    use super::super::stacks::TCP_STACKS;
    use super::*;
    use crate::harness;
    use crate::json;
    use crate::placement::Probe;

    #[test]
    fn text_and_json_reports() {
        let names = ["rivet", "mpich"];
        let mut mr = table(Bench::P2p(Kind::Mr), Some(vec![8]), vec![0, 1]);
        for v in [6.0e6, 5.0e6, 7.0e6] {
            mr.add(8, 0, v);
        }
        mr.add(8, 1, 5.0e6);
        mr.add(8, 1, 5.5e6);
        let mut st = table(Bench::Startup, Some(vec![8]), vec![0, 1]);
        st.add(8, 0, 0.0112);
        st.add(8, 1, 0.321);
        let loads = harness::Loads {
            samples: vec![1.0, 3.0, 40.0],
            failures: 1,
        };
        let skipped = [("openmpi", "mpirun.openmpi not found")];
        let text = text_report(Transport::Shm, &[mr, st], &names, &skipped, 3, &loads);
        let expected = "\
# Rivet vs peers: median [min-max] over 3 interleaved runs per stack; ratio = rivet / best peer
# skipped openmpi: mpirun.openmpi not found
# CPU load of other processes during the runs: median 3%, max 40%; 1 of 3 runs above 20%
# 1 run(s) failed or gave unusable output (see stderr)

# mr: 8-byte messages, window of 64, messages/s (higher is better)
# Size                rivet                           mpich     rivet/best
     8  6.00M [5.00M-7.00M]  5.25M [5.00M-5.50M] (2/3 runs)  1.14 vs mpich

# startup: whole N-rank job (init, barrier, finalize), launcher start to exit, s (lower is better)
# N                              rivet                              mpich     rivet/best
  8  0.0112 [0.0112-0.0112] (1/3 runs)  0.3210 [0.3210-0.3210] (1/3 runs)  0.03 vs mpich
";
        assert_eq!(text, expected);

        let mut lat = table(Bench::P2p(Kind::Latency), Some(vec![0]), vec![0, 1]);
        lat.add(0, 0, 0.25);
        let doc = json_doc(
            Transport::Shm,
            &[lat],
            &names,
            &skipped,
            1,
            &harness::Loads::default(),
        );
        assert_eq!(
            doc,
            "{\"benchmark\":\"compare\",\"reps\":1,\"stacks\":[\"rivet\",\"mpich\"],\
             \"skipped\":[{\"stack\":\"openmpi\",\"why\":\"mpirun.openmpi not found\"}],\
             \"other_load_pct\":null,\"failed_runs\":0,\"placement\":null,\
             \"results\":[{\"bench\":\"latency\",\
             \"unit\":\"us\",\"better\":\"lower\",\"rows\":[{\"size\":0,\"stacks\":{\"rivet\":\
             {\"median\":0.25,\"min\":0.25,\"max\":0.25,\"runs\":1},\"mpich\":null},\
             \"best_peer\":null,\"ratio\":null}]}]}"
        );
        assert!(json::parse(&doc).is_ok());
    }

    /// Open MPI's start-up: rivetrun's over mpirun's, per N, with the
    /// target; no rivet/best column (the first stack is not rivet).
    #[test]
    fn openmpi_start_up_under_rivetrun_gets_its_ratio() {
        let names = ["openmpi", "openmpi-rivetrun"];
        let mut st = table(Bench::Startup, Some(vec![8, 32]), vec![0, 1]);
        st.add(8, 0, 0.6);
        st.add(8, 1, 0.4);
        st.add(32, 0, 1.6);
        st.add(32, 1, 1.2);
        let text = text_report(
            Transport::Shm,
            &[st],
            &names,
            &[],
            1,
            &harness::Loads::default(),
        );
        assert!(
            text.contains("# N=8: openmpi-rivetrun / openmpi = 0.67 met (target <= 0.7)\n"),
            "{text}"
        );
        assert!(
            text.contains("# N=32: openmpi-rivetrun / openmpi = 0.75 MISSED (target <= 0.7)\n"),
            "{text}"
        );
    }

    #[test]
    fn tcp_text_report() {
        let text = text_report(
            Transport::Tcp,
            &tcp_tables(),
            &TCP_STACKS,
            &[],
            1,
            &harness::Loads::default(),
        );
        // raw-tcp: "-" where it measures nothing; a failed run: "failed".
        let expected = "\
# Rivet vs peers over TCP (loopback): median [min-max] over 1 interleaved runs per stack
# ratios = Rivet stack / best peer (mpich or openmpi), / raw-tcp (the loopback limit), rivet-uring / rivet-poll
# targets: 8 B latency <= 1.1 x raw-tcp, 1 MiB bw >= 0.9 x raw-tcp

# latency: half round trip, us (lower is better); raw-tcp: busy-poll recv
#    Size          rivet-uring           rivet-poll              raw-tcp                mpich              openmpi
        8  3.200 [3.200-3.200]  3.600 [3.600-3.600]  3.000 [3.000-3.000]  3.500 [3.500-3.500]  3.800 [3.800-3.800]
     1024  3.500 [3.500-3.500]  3.900 [3.900-3.900]  3.300 [3.300-3.300]  3.900 [3.900-3.900]               failed
  1048576  150.0 [150.0-150.0]               failed                    -  149.7 [149.7-149.7]  230.3 [230.3-230.3]
#    Size  rivet-uring/best  rivet-uring/raw-tcp  rivet-poll/best    rivet-poll/raw-tcp  uring/poll
        8     0.91 vs mpich    1.07 met (<= 1.1)    1.03 vs mpich  1.20 MISSED (<= 1.1)        0.89
     1024     0.90 vs mpich                 1.06    1.00 vs mpich                  1.18        0.90
  1048576     1.00 vs mpich                    -                -                     -           -

# bw: window of 64, MB/s with 1 MB = 1e6 B (higher is better); raw-tcp: one stream of back-to-back sends
#    Size       rivet-uring        rivet-poll           raw-tcp             mpich           openmpi
     1024     400 [400-400]     380 [380-380]                 -     131 [131-131]     361 [361-361]
  1048576  4500 [4500-4500]  4000 [4000-4000]  4800 [4800-4800]  5000 [5000-5000]  5400 [5400-5400]
#    Size  rivet-uring/best  rivet-uring/raw-tcp  rivet-poll/best    rivet-poll/raw-tcp  uring/poll
     1024   1.11 vs openmpi                    -  1.05 vs openmpi                     -        1.05
  1048576   0.83 vs openmpi    0.94 met (>= 0.9)  0.74 vs openmpi  0.83 MISSED (>= 0.9)        1.12
";
        assert_eq!(text, expected);
    }

    /// Runs in two placements: the header says so, and each table shows
    /// each placement's runs apart, with their own ratios; a run whose
    /// probes disagree is in neither; a stack with no run in a placement
    /// says so.
    #[test]
    fn two_placements_are_reported_apart() {
        let names = ["rivet-uring", "rivet-poll"];
        let mut bw = table(Bench::P2p(Kind::Bw), Some(vec![1 << 20]), vec![0, 1]);
        let p = |before, after| Some(Probe { before, after });
        for (stack, v, probe) in [
            (0, 5000.0, p(100.0, 110.0)),
            (1, 4800.0, p(105.0, 95.0)),
            (0, 2600.0, p(500.0, 520.0)),
            (1, 2500.0, p(510.0, 490.0)),
            (0, 5200.0, p(120.0, 100.0)),
            (1, 4000.0, p(90.0, 480.0)),
        ] {
            bw.add_probed(1 << 20, stack, v, probe);
        }
        let mut lat = table(Bench::P2p(Kind::Latency), Some(vec![8]), vec![0, 1]);
        lat.add_probed(8, 0, 9.0, p(600.0, 610.0));
        lat.add_probed(8, 1, 5.0, p(98.0, 101.0));
        let tables = [bw, lat];
        let text = text_report(
            Transport::Tcp,
            &tables,
            &names,
            &[],
            3,
            &harness::Loads::default(),
        );
        let split = (120.0f64 * 480.0).sqrt();
        assert!(
            text.contains(
                "# placement: two, as the host placed this machine's CPUs (round trip of a cache line \
                 between CPUs 0 and 1, probed before and after each run): near 90-120 ns (4 runs), \
                 far 480-610 ns (3 runs), moved during the run (1 run); each table also shows the \
                 near and the far runs apart\n"
            ),
            "{text}"
        );
        assert_eq!(split.round(), 240.0);
        let expected_bw = "\
# near placement only: the runs with the CPUs' round trip <= 240 ns before and after
#    Size                  rivet-uring                   rivet-poll
  1048576  5100 [5000-5200] (2/3 runs)  4800 [4800-4800] (1/3 runs)
#    Size  uring/poll
  1048576        1.06
# far placement only: the runs with the CPUs' round trip > 240 ns before and after
#    Size                  rivet-uring                   rivet-poll
  1048576  2600 [2600-2600] (1/3 runs)  2500 [2500-2500] (1/3 runs)
#    Size  uring/poll
  1048576        1.04
";
        assert!(text.contains(expected_bw), "{text}");
        // All runs together: the medians of mixed placements.
        assert!(
            text.contains("  1048576  5000 [2600-5200]  4000 [2500-4800]\n"),
            "{text}"
        );
        // Latency: each stack ran in one placement only.
        assert!(
            text.contains("     8       no run  5.000 [5.000-5.000] (1/3 runs)\n"),
            "{text}"
        );

        let doc = json_doc(
            Transport::Tcp,
            &tables,
            &names,
            &[],
            3,
            &harness::Loads::default(),
        );
        assert!(json::parse(&doc).is_ok(), "{doc}");
        assert!(
            doc.contains(
                "\"placement\":{\"min_ns\":90,\"max_ns\":610,\"split_ns\":240,\
                 \"near_runs\":4,\"far_runs\":3,\"moved_runs\":1}"
            ),
            "{doc}"
        );
        assert!(
            doc.contains(
                "\"placements\":{\"near\":{\"rows\":[{\"size\":1048576,\"stacks\":{\
                 \"rivet-uring\":{\"median\":5100,\"min\":5000,\"max\":5200,\"runs\":2},\
                 \"rivet-poll\":{\"median\":4800,\"min\":4800,\"max\":4800,\"runs\":1}},\
                 \"ratios\":"
            ),
            "{doc}"
        );
        // One placement: no split, no placements.
        let mut one = table(Bench::P2p(Kind::Bw), Some(vec![1 << 20]), vec![0, 1]);
        for (stack, before) in [(0, 100.0), (1, 110.0), (0, 120.0), (1, 130.0)] {
            one.add_probed(1 << 20, stack, 5000.0, p(before, before));
        }
        let doc = json_doc(
            Transport::Tcp,
            &[one],
            &names,
            &[],
            2,
            &harness::Loads::default(),
        );
        assert!(
            doc.contains("\"placement\":{\"min_ns\":100,\"max_ns\":130,\"split_ns\":null}"),
            "{doc}"
        );
        assert!(!doc.contains("placements"), "{doc}");
    }

    #[test]
    fn ofi_text_report() {
        let skipped = [("fi_pingpong(verbs;ofi_rxm)", "no such provider")];
        let text = text_report(
            Transport::Ofi,
            &ofi_tables(),
            &OFI_NAMES,
            &skipped,
            1,
            &harness::Loads::default(),
        );
        // Each rivet-ofi(P) over fi_pingpong(P); "-" where fi_pingpong(shm) failed; mr without ratio.
        let expected = "\
# Rivet over libfabric vs fi_pingpong: median [min-max] over 1 interleaved runs per stack
# rivet-ofi(P): RIVET_NETMOD=ofi RIVET_OFI_PROVIDER=P rivetrun -n 2 --bind-to core; fi_pingpong(P): fi_pingpong -p P -e rdm, server CPU 1, client CPU 0
# ratios = rivet-ofi(P) / fi_pingpong(P); targets at every size: latency <= 1.1, bw >= 1
# fi_pingpong's MB/s is ping-pong bandwidth (size / half round trip, one message in flight), Rivet's bw a window of 64: not the same kind of figure
# skipped fi_pingpong(verbs;ofi_rxm): no such provider

# latency: half round trip, us (lower is better); fi_pingpong: usec/xfer
#  Size  rivet-ofi(tcp;ofi_rxm)  fi_pingpong(tcp;ofi_rxm)       rivet-ofi(shm)     fi_pingpong(shm)
      8     14.50 [14.50-14.50]       13.80 [13.80-13.80]  1.900 [1.900-1.900]  1.710 [1.710-1.710]
  65536     120.0 [120.0-120.0]       60.00 [60.00-60.00]  55.00 [55.00-55.00]               failed
#  Size  rivet-ofi(tcp;ofi_rxm)/fi_pingpong  rivet-ofi(shm)/fi_pingpong
      8                   1.05 met (<= 1.1)        1.11 MISSED (<= 1.1)
  65536                2.00 MISSED (<= 1.1)                           -

# bw: MB/s with 1 MB = 1e6 B (higher is better); rivet-ofi: window of 64; fi_pingpong: ping-pong, size / half round trip (not a streaming figure)
#  Size  rivet-ofi(tcp;ofi_rxm)  fi_pingpong(tcp;ofi_rxm)    rivet-ofi(shm)  fi_pingpong(shm)
      8        2.00 [2.00-2.00]          0.58 [0.58-0.58]  6.00 [6.00-6.00]  4.68 [4.68-4.68]
  65536           900 [900-900]          1092 [1092-1092]  5200 [5200-5200]  5168 [5168-5168]
#  Size  rivet-ofi(tcp;ofi_rxm)/fi_pingpong  rivet-ofi(shm)/fi_pingpong
      8                     3.45 met (>= 1)             1.28 met (>= 1)
  65536                  0.82 MISSED (>= 1)             1.01 met (>= 1)

# mr: 8-byte messages, window of 64, messages/s (higher is better); Rivet only, no ratio (fi_pingpong has no mr)
# Size  rivet-ofi(tcp;ofi_rxm)       rivet-ofi(shm)
     8  600.0k [600.0k-600.0k]  2.00M [2.00M-2.00M]
";
        assert_eq!(text, expected);
    }
}
