//! Where each run's results go (`CellTarget`), and turning a run's output
//! into samples.

use super::args::Bench;
use super::programs::{StackEntry, StackRun};
use super::summary::fmt_value;
use super::table::Table;
use crate::harness::JobOutput;
use crate::peers;
use crate::placement::Probe;
use crate::sizes::Kind;
use crate::{fi_pingpong, report};

/// Where a cell's results go.
#[derive(Clone, Copy)]
pub(super) struct CellTarget {
    pub(super) table: usize,
    pub(super) stack: usize,
    /// Startup: the wall time is the sample, under this key.
    pub(super) wall_key: Option<u64>,
    /// idle, fanin: the run's one row goes under this key.
    pub(super) key: Option<u64>,
    /// idle: the table its `memory` line goes to.
    pub(super) memory: Option<usize>,
}

/// Turn one run's output into samples; the note lists what it measured.
pub(super) fn record(
    tables: &mut [Table],
    stacks: &[StackEntry],
    target: CellTarget,
    out: &JobOutput,
    probe: Option<Probe>,
) -> Result<String, String> {
    let table = &mut tables[target.table];
    if let Some(key) = target.wall_key {
        table.add_probed(key, target.stack, out.wall, probe);
        return Ok(String::new());
    }
    if let Some(key) = target.key {
        let name = if table.bench == Bench::Idle {
            Kind::Latency.name()
        } else {
            table.name()
        };
        let rows = report::parse_json_rows(&out.stdout, name)?;
        let &(_, v, calls) = rows.first().ok_or("no row in the output")?;
        table.add_probed(key, target.stack, v, probe);
        if let Some(c) = calls {
            table.add_calls(key, target.stack, c);
        }
        let unit = table.unit();
        let mut note = format!(" — {}", fmt_value(unit, v));
        if let Some(m) = target.memory {
            let mem = report::parse_json_rows(&out.stdout, "memory")?;
            let &(_, rss, _) = mem.first().ok_or("no memory row in the output")?;
            tables[m].add_probed(key, target.stack, rss, probe);
            note += &format!(" {unit}, rank 0 RSS {rss:.0} KiB");
            return Ok(note);
        }
        return Ok(note + " " + unit);
    }
    let rows = match &stacks[target.stack].status {
        Ok(StackRun::Rivet { .. }) => {
            let rows = report::parse_json_rows(&out.stdout, table.name())?;
            for &(k, _, calls) in &rows {
                if let Some(c) = calls {
                    table.add_calls(k, target.stack, c);
                }
            }
            rows.into_iter().map(|(k, v, _)| (k, v)).collect()
        }
        Ok(StackRun::RawTcp(_)) => peers::parse_raw_tcp(&out.stdout, table.name())?,
        Ok(StackRun::FiPingpong { .. }) => fi_pingpong::parse_table(&out.stdout, table.name())?,
        _ => peers::parse_table(&out.stdout),
    };
    let wanted: Vec<(u64, f64)> = rows.into_iter().filter(|(k, _)| table.wants(*k)).collect();
    if wanted.is_empty() {
        return Err("no row of a wanted size in the output".into());
    }
    let unit = table.unit();
    let mut note = String::from(" —");
    for (i, &(k, v)) in wanted.iter().enumerate() {
        table.add_probed(k, target.stack, v, probe);
        if wanted.len() <= 6 || i < 2 || i + 2 >= wanted.len() {
            note += &format!(" {k}:{}", fmt_value(unit, v));
        } else if i == 2 {
            note += " ...";
        }
    }
    Ok(note + " " + unit)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::table;
    use super::*;
    use crate::peers;

    use crate::peers::tests::RAW_TCP_LAT as RAW_LAT;

    #[test]
    fn raw_tcp_rows_land_on_their_sizes() {
        let stacks = [
            StackEntry {
                name: "rivet-uring".into(),
                status: Err("not built".into()),
            },
            StackEntry {
                name: "raw-tcp".into(),
                status: Ok(StackRun::RawTcp("tcp_pingpong".into())),
            },
        ];
        let mut lat = table(
            Bench::P2p(Kind::Latency),
            Some(vec![8, 1024, 1 << 20]),
            vec![0, 1],
        );
        lat.only.insert(1, &peers::RAW_TCP_LAT_SIZES);
        let mut tables = [lat];
        let out = |stdout: &str| JobOutput {
            wall: 13.0,
            stdout: stdout.into(),
            stderr: String::new(),
            foreign_pct: None,
        };
        let target = CellTarget {
            table: 0,
            stack: 1,
            wall_key: None,
            key: None,
            memory: None,
        };
        let note = record(&mut tables, &stacks, target, &out(RAW_LAT), None).unwrap();
        assert_eq!(note, " — 8:4.054 1024:3.755 us");
        let samples = &tables[0].samples;
        assert_eq!(samples[&8][&1], [4.054]);
        assert_eq!(samples[&1024][&1], [3.755]);
        assert!(!samples.contains_key(&(1 << 20)));
        assert!(tables[0].measures(1, 8));
        assert!(!tables[0].measures(1, 1 << 20));
        assert!(tables[0].measures(0, 1 << 20));
        // Cut short before its table's title: unusable.
        let cut: String = RAW_LAT
            .lines()
            .skip(2)
            .map(|l| l.to_owned() + "\n")
            .collect();
        assert!(record(&mut tables, &stacks, target, &out(&cut), None).is_err());
    }
}
