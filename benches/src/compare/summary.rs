//! Statistics of a table's rows: medians per stack, Rivet's ratios to the
//! best peer and to its raw reference, the targets they are held to, and
//! values formatted by unit.

use super::args::Bench;
use super::stacks::{role, split_provider, Role};
use super::table::Table;
use crate::peers::Transport;
use crate::sizes::Kind;
use crate::stats::{fmt_ratio, summarize, Summary};

/// A value in a unit, with precision to suit.
pub(super) fn fmt_value(unit: &str, v: f64) -> String {
    match unit {
        "us" if v < 10.0 => format!("{v:.3}"),
        "us" if v < 100.0 => format!("{v:.2}"),
        "us" => format!("{v:.1}"),
        "MB/s" if v < 100.0 => format!("{v:.2}"),
        "MB/s" => format!("{v:.0}"),
        "msg/s" if v >= 1e6 => format!("{:.2}M", v / 1e6),
        "msg/s" if v >= 1e3 => format!("{:.1}k", v / 1e3),
        "s" => format!("{v:.4}"),
        _ => format!("{v:.0}"),
    }
}

pub(super) fn fmt_summary(unit: &str, s: &Summary, runs: usize, reps: u32) -> String {
    let mut t = format!(
        "{} [{}-{}]",
        fmt_value(unit, s.median),
        fmt_value(unit, s.min),
        fmt_value(unit, s.max)
    );
    if runs < reps as usize {
        t += &format!(" ({runs}/{reps} runs)");
    }
    t
}

/// One row of a table, summarised: per stack, then the ratios.
pub(super) struct RowSummary {
    pub(super) key: u64,
    pub(super) per_stack: Vec<(usize, Option<(Summary, usize)>)>,
    /// The first Rivet stack's median / the best peer's median, and that
    /// peer (shm's rivet/best column).
    pub(super) ratio: Option<(f64, usize)>,
    /// Every Rivet stack's ratios, in table order.
    pub(super) rivets: Vec<RivetRatios>,
    /// rivet-uring's median / rivet-poll's.
    pub(super) uring_over_poll: Option<f64>,
    /// rivet-mpi's median / rivet's: what the MPI layer costs.
    pub(super) mpi_over_rivet: Option<f64>,
}

/// One Rivet stack's medians over the others'.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct RivetRatios {
    pub(super) stack: usize,
    /// Over the best peer's (MPICH or Open MPI), and that peer.
    pub(super) vs_best: Option<(f64, usize)>,
    /// Over its raw reference's: raw-tcp's, or over ofi the same
    /// provider's fi_pingpong.
    pub(super) vs_raw: Option<f64>,
}

/// What a Rivet stack's ratio to its raw reference should be at a size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Target {
    AtMost(f64),
    AtLeast(f64),
}

impl Target {
    pub(super) fn met(self, ratio: f64) -> bool {
        match self {
            Target::AtMost(x) => ratio <= x,
            Target::AtLeast(x) => ratio >= x,
        }
    }

    /// "0.95 met (>= 0.9)": the ratio, whether it meets the target, and
    /// the target.
    pub(super) fn verdict(self, ratio: f64) -> String {
        format!(
            "{} {} ({})",
            fmt_ratio(ratio, |v| self.met(v)),
            if self.met(ratio) { "met" } else { "MISSED" },
            self.describe()
        )
    }

    pub(super) fn describe(self) -> String {
        match self {
            Target::AtMost(x) => format!("<= {x}"),
            Target::AtLeast(x) => format!(">= {x}"),
        }
    }
}

/// The targets against the raw reference. Over tcp: 8-byte latency at
/// most 1.1 x raw-tcp busy-poll, 1 MiB bandwidth at least 0.9 x raw-tcp
/// streaming. Over ofi, at every size: latency at most 1.1 x fi_pingpong,
/// bandwidth at least 1.0 x fi_pingpong's ping-pong MB/s.
pub(super) fn raw_target(transport: Transport, bench: Bench, key: u64) -> Option<Target> {
    match (transport, bench, key) {
        (Transport::Tcp, Bench::P2p(Kind::Latency), 8) => Some(Target::AtMost(1.1)),
        (Transport::Tcp, Bench::P2p(Kind::Bw), 1048576) => Some(Target::AtLeast(0.9)),
        (Transport::Ofi, Bench::P2p(Kind::Latency), _) => Some(Target::AtMost(1.1)),
        (Transport::Ofi, Bench::P2p(Kind::Bw), _) => Some(Target::AtLeast(1.0)),
        _ => None,
    }
}

/// What rivet-mpi / rivet should be (the MPI layer costs almost nothing):
/// 8-byte latency at most 1.05 x, message rate at least 0.95 x.
pub(super) fn mpi_target(bench: Bench, key: u64) -> Option<Target> {
    match (bench, key) {
        (Bench::P2p(Kind::Latency), 8) => Some(Target::AtMost(1.05)),
        (Bench::P2p(Kind::Mr), 8) => Some(Target::AtLeast(0.95)),
        _ => None,
    }
}

/// rivet-mpi / rivet for the text table, with the target where there is one.
pub(super) fn fmt_mpi_ratio(bench: Bench, key: u64, ratio: Option<f64>) -> String {
    match (ratio, mpi_target(bench, key)) {
        (Some(v), Some(t)) => t.verdict(v),
        (Some(v), None) => format!("{v:.2}"),
        (None, _) => "-".into(),
    }
}

pub(super) fn summarize_table(table: &Table, stacks: &[&str]) -> Vec<RowSummary> {
    let with_role = |r: Role| -> Vec<usize> {
        table
            .stacks
            .iter()
            .copied()
            .filter(|&i| role(stacks[i]) == r)
            .collect()
    };
    let rivets = with_role(Role::Rivet);
    let peers = with_role(Role::Peer);
    let raws = with_role(Role::Raw);
    // A Rivet stack's raw reference: the one of its provider (over ofi),
    // else the only one (raw-tcp).
    let reference = |r: usize| match split_provider(stacks[r]).1 {
        Some(p) => raws
            .iter()
            .copied()
            .find(|&i| split_provider(stacks[i]).1 == Some(p)),
        None => raws.first().copied(),
    };
    let named = |n: &str| table.stacks.iter().copied().find(|&i| stacks[i] == n);
    let (uring, poll) = (named("rivet-uring"), named("rivet-poll"));
    let (layer, engine) = (named("rivet-mpi"), named("rivet"));
    let keys: Vec<u64> = match &table.keys {
        Some(k) => k.clone(),
        None => table.samples.keys().copied().collect(),
    };
    keys.into_iter()
        .map(|key| {
            let per_stack: Vec<(usize, Option<(Summary, usize)>)> = table
                .stacks
                .iter()
                .map(|&i| {
                    let v = table.samples.get(&key).and_then(|m| m.get(&i));
                    (i, v.and_then(|v| summarize(v).map(|s| (s, v.len()))))
                })
                .collect();
            let median = |i: usize| {
                per_stack
                    .iter()
                    .find(|(j, _)| *j == i)
                    .and_then(|(_, s)| s.map(|(s, _)| s.median))
            };
            let over = |r: f64, other: f64| (other > 0.0).then(|| r / other);
            let best_peer = peers
                .iter()
                .filter_map(|&i| median(i).map(|m| (i, m)))
                .reduce(|a, b| {
                    let b_better = if table.lower_is_better() {
                        b.1 < a.1
                    } else {
                        b.1 > a.1
                    };
                    if b_better {
                        b
                    } else {
                        a
                    }
                });
            let ratios: Vec<RivetRatios> = rivets
                .iter()
                .map(|&r| {
                    let m = median(r);
                    RivetRatios {
                        stack: r,
                        vs_best: m
                            .zip(best_peer)
                            .and_then(|(m, (peer, p))| over(m, p).map(|x| (x, peer))),
                        vs_raw: m
                            .zip(reference(r).and_then(median))
                            .and_then(|(m, p)| over(m, p)),
                    }
                })
                .collect();
            let uring_over_poll = uring
                .and_then(median)
                .zip(poll.and_then(median))
                .and_then(|(u, p)| over(u, p));
            let mpi_over_rivet = layer
                .and_then(median)
                .zip(engine.and_then(median))
                .and_then(|(m, r)| over(m, r));
            RowSummary {
                key,
                per_stack,
                ratio: ratios.first().and_then(|r| r.vs_best),
                rivets: ratios,
                uring_over_poll,
                mpi_over_rivet,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{ofi_tables, table, tcp_tables, OFI_NAMES};
    use super::super::programs::StackRun;
    use super::super::stacks::{select_stacks, TCP_STACKS};
    use super::*;
    use crate::peers::{self, Mpi};

    #[test]
    fn ratio_is_rivet_over_best_peer() {
        let names = ["rivet", "mpich", "openmpi"];
        let mut lat = table(
            Bench::P2p(Kind::Latency),
            Some(vec![8, 1024]),
            vec![0, 1, 2],
        );
        for (stack, vals) in [
            (0, [0.5, 0.4, 0.6]),
            (1, [0.6, 0.7, 0.65]),
            (2, [0.45, 0.44, 0.5]),
        ] {
            for v in vals {
                lat.add(8, stack, v);
            }
        }
        lat.add(64, 0, 1.0); // not a wanted size: ignored
        let rows = summarize_table(&lat, &names);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].key, 8);
        let (ratio, peer) = rows[0].ratio.unwrap();
        assert_eq!(peer, 2); // openmpi is the lowest latency
        assert!((ratio - 0.5 / 0.45).abs() < 1e-12);
        assert!(rows[1].ratio.is_none());
        assert!(rows[1].per_stack.iter().all(|(_, s)| s.is_none()));

        let mut bw = table(Bench::P2p(Kind::Bw), None, vec![0, 1, 2]);
        bw.add(4096, 0, 1000.0);
        bw.add(4096, 1, 2000.0);
        bw.add(4096, 2, 1500.0);
        let rows = summarize_table(&bw, &names);
        assert_eq!(rows[0].ratio, Some((0.5, 1))); // mpich has the highest bandwidth
    }

    #[test]
    fn rivet_mpi_runs_the_peers_program_and_is_held_to_the_engine() {
        let stack = peers::Stack {
            mpi: Mpi::Rivet,
            launcher: "rivetrun".into(),
            pingpong: Some("target/peers/mpi_p2p.rivet-mpi".into()),
            hello: Some("target/peers/mpi_hello.rivet-mpi".into()),
        };
        let run = StackRun::Mpi(stack, Transport::Shm);
        assert_eq!(
            run.p2p(Kind::Mr, 1 << 20, &[]).unwrap().to_string(),
            "MAXSIZE=8 rivetrun -n 2 --bind-to core target/peers/mpi_p2p.rivet-mpi mr"
        );
        assert_eq!(
            run.startup(4).unwrap().to_string(),
            "rivetrun -n 4 target/peers/mpi_hello.rivet-mpi"
        );
        assert_eq!(
            select_stacks(Transport::Shm, None, &[]).unwrap(),
            ["rivet", "rivet-mpi", "mpich", "openmpi"]
        );

        let names = ["rivet", "rivet-mpi", "mpich"];
        let mut lat = table(Bench::P2p(Kind::Latency), Some(vec![8]), vec![0, 1, 2]);
        lat.add(8, 0, 0.40);
        lat.add(8, 1, 0.44);
        lat.add(8, 2, 0.50);
        let rows = summarize_table(&lat, &names);
        let m = rows[0].mpi_over_rivet.unwrap();
        assert!((m - 1.1).abs() < 1e-12);
        assert_eq!(rows[0].ratio.map(|r| r.1), Some(2)); // rivet / mpich, as before
        assert_eq!(
            fmt_mpi_ratio(lat.bench, 8, Some(m)),
            "1.10 MISSED (<= 1.05)"
        );
        assert_eq!(
            fmt_mpi_ratio(Bench::P2p(Kind::Mr), 8, Some(0.97)),
            "0.97 met (>= 0.95)"
        );
        assert_eq!(fmt_mpi_ratio(Bench::P2p(Kind::Bw), 1024, Some(0.9)), "0.90");
    }

    #[test]
    fn tcp_ratios() {
        let tables = tcp_tables();
        let rows = summarize_table(&tables[0], &TCP_STACKS);
        let r8 = &rows[0];
        assert_eq!(r8.rivets.len(), 2);
        let (uring, poll) = (r8.rivets[0], r8.rivets[1]);
        assert_eq!((uring.stack, poll.stack), (0, 1));
        assert_eq!(uring.vs_best.map(|b| b.1), Some(3)); // mpich: best latency of the peers
        assert!((uring.vs_best.unwrap().0 - 3.2 / 3.5).abs() < 1e-12);
        assert!((uring.vs_raw.unwrap() - 3.2 / 3.0).abs() < 1e-12);
        assert!((poll.vs_raw.unwrap() - 3.6 / 3.0).abs() < 1e-12);
        assert!((r8.uring_over_poll.unwrap() - 3.2 / 3.6).abs() < 1e-12);
        assert_eq!(r8.ratio, uring.vs_best);
        // raw-tcp has no 1 MiB latency, rivet-poll failed there.
        let r1m = &rows[2];
        assert_eq!(r1m.rivets[0].vs_raw, None);
        assert_eq!(r1m.rivets[1].vs_best, None);
        assert_eq!(r1m.uring_over_poll, None);
        // The raw-tcp reference is never "best peer", even when it is best.
        let rows = summarize_table(&tables[1], &TCP_STACKS);
        assert_eq!(rows[1].rivets[0].vs_best.map(|b| b.1), Some(4));
        assert_eq!(
            raw_target(Transport::Tcp, Bench::P2p(Kind::Latency), 8),
            Some(Target::AtMost(1.1))
        );
        assert_eq!(
            raw_target(Transport::Tcp, Bench::P2p(Kind::Bw), 1 << 20),
            Some(Target::AtLeast(0.9))
        );
        assert_eq!(raw_target(Transport::Tcp, Bench::P2p(Kind::Bw), 8), None);
        assert_eq!(raw_target(Transport::Tcp, Bench::P2p(Kind::Mr), 8), None);
        assert!(Target::AtMost(1.1).met(1.1) && !Target::AtMost(1.1).met(1.11));
        assert!(Target::AtLeast(0.9).met(0.9) && !Target::AtLeast(0.9).met(0.89));
    }

    #[test]
    fn ofi_ratios_pair_each_provider() {
        let tables = ofi_tables();
        let rows = summarize_table(&tables[0], &OFI_NAMES);
        let r8 = &rows[0];
        assert_eq!(r8.rivets.len(), 2);
        // Each rivet-ofi over its own provider's fi_pingpong.
        assert!((r8.rivets[0].vs_raw.unwrap() - 14.5 / 13.8).abs() < 1e-12);
        assert!((r8.rivets[1].vs_raw.unwrap() - 1.9 / 1.71).abs() < 1e-12);
        assert_eq!(r8.rivets[0].vs_best, None);
        // fi_pingpong(shm) failed at 64 KiB: no ratio there for shm only.
        assert!(rows[1].rivets[0].vs_raw.is_some());
        assert_eq!(rows[1].rivets[1].vs_raw, None);
        for key in [8, 65536, 1 << 20] {
            assert_eq!(
                raw_target(Transport::Ofi, Bench::P2p(Kind::Latency), key),
                Some(Target::AtMost(1.1))
            );
            assert_eq!(
                raw_target(Transport::Ofi, Bench::P2p(Kind::Bw), key),
                Some(Target::AtLeast(1.0))
            );
        }
        assert_eq!(raw_target(Transport::Ofi, Bench::P2p(Kind::Mr), 8), None);
        assert_eq!(
            raw_target(Transport::Shm, Bench::P2p(Kind::Latency), 8),
            None
        );
    }

    #[test]
    fn values_are_formatted_by_unit() {
        assert_eq!(fmt_value("us", 0.51234), "0.512");
        assert_eq!(fmt_value("us", 12.345), "12.35");
        assert_eq!(fmt_value("us", 1234.5), "1234.5");
        assert_eq!(fmt_value("MB/s", 12067.4), "12067");
        assert_eq!(fmt_value("MB/s", 4.051), "4.05");
        assert_eq!(fmt_value("msg/s", 5_234_000.0), "5.23M");
        assert_eq!(fmt_value("msg/s", 52_340.0), "52.3k");
        assert_eq!(fmt_value("s", 0.04191), "0.0419");
    }
}
