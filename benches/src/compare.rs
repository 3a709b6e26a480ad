//! `rivet-bench compare`: Rivet and its peers (MPICH, Open MPI) side by side
//! on this machine, interleaved run by run, with median [min-max] per stack
//! and the ratio Rivet / best peer.
//!
//! Point-to-point (latency, bw, mr; bibw is Rivet only, the peers' program
//! has none): each run is one whole job on 2 ranks, one per core:
//! - rivet:   `rivetrun -n 2 --bind-to core rivet-bench <bench> --json --max M`
//! - mpich:   `MAXSIZE=M mpiexec.hydra -n 2 -bind-to core mpi_pingpong.mpich <lat|bw|mr>`
//! - openmpi: `mpirun.openmpi --allow-run-as-root --oversubscribe -n 2 --bind-to core
//!   --mca pml ob1 --mca btl self,vader -x MAXSIZE mpi_pingpong.openmpi <lat|bw|mr>`
//!
//! where `mpi_pingpong.*` is the anchors' `mpi_pingpong.c` built with each
//! stack's `mpicc -O2` (into `target/peers/`), and M the largest size asked
//! for, so every stack runs the same ladder of sizes up to M. mr is 8-byte
//! messages only (mpi_pingpong's mr).
//!
//! startup: wall time of a whole N-rank job, launcher start to exit:
//! `rivetrun -n N rivet-bench startup` against `mpiexec.hydra -n N hello.mpich`
//! and `mpirun.openmpi --oversubscribe -n N hello.openmpi` (the anchors'
//! `hello_mpi.c`: MPI_Init, MPI_Barrier, MPI_Finalize), default binding, one
//! untimed warm-up run of each first.
//!
//! Order: for each rep, every bench, every stack (the stack order rotates by
//! one each rep). A stack whose launcher or compiler is missing is skipped
//! with a note; a failed run is reported and left out of the summary.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::harness::{self, beside_me, find_program, Cell, CmdSpec, JobOutput, Order};
use crate::json;
use crate::peers::{self, Mpi};
use crate::report;
use crate::sizes::{self, Kind};
use crate::stats::{summarize, Summary};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Benchmarks to compare: latency, bw, bibw (Rivet only), mr, startup.
    #[arg(long, value_delimiter = ',', default_value = "latency,bw,mr")]
    benches: Vec<String>,
    /// Message sizes to report (latency, bw, bibw), comma-separated, with
    /// suffixes as --max; or `all` for every size up to 4 MiB. mr is always 8 B.
    #[arg(long, default_value = "8,1024,65536,1048576,4194304")]
    sizes: String,
    /// Rank counts for startup.
    #[arg(long, value_delimiter = ',', default_value = "2,8,32")]
    ranks: Vec<u32>,
    /// Runs per stack and benchmark.
    #[arg(long, default_value_t = 5)]
    reps: u32,
    /// Stacks to run: rivet, mpich, openmpi.
    #[arg(long, value_delimiter = ',', default_value = "rivet,mpich,openmpi")]
    stacks: Vec<String>,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    json: bool,
    /// rivetrun to use (default: the one beside this executable, else PATH).
    #[arg(long)]
    rivetrun: Option<PathBuf>,
    /// rivet-bench to run under rivetrun (default: the one beside this executable).
    #[arg(long)]
    rivet_bench: Option<PathBuf>,
    /// MPICH's launcher.
    #[arg(long, default_value = "mpiexec.hydra")]
    hydra: String,
    /// Open MPI's launcher.
    #[arg(long, default_value = "mpirun.openmpi")]
    ompi_mpirun: String,
    #[arg(long, default_value = "mpicc.mpich")]
    mpicc_mpich: String,
    #[arg(long, default_value = "mpicc.openmpi")]
    mpicc_openmpi: String,
    /// Directory with mpi_pingpong.c and hello_mpi.c.
    #[arg(long, default_value = peers::DEFAULT_ANCHORS)]
    anchors: PathBuf,
    /// Where to build the peers' programs [default: target/peers beside this executable's profile dir].
    #[arg(long)]
    build_dir: Option<PathBuf>,
    /// Seconds before a run is killed (and counted as failed).
    #[arg(long, default_value_t = 300)]
    timeout: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bench {
    P2p(Kind),
    Startup,
}

/// Which sizes to report.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SizeSel {
    All,
    List(Vec<usize>),
}

fn parse_sizes(text: &str) -> Result<SizeSel, String> {
    if text.trim() == "all" {
        return Ok(SizeSel::All);
    }
    let mut list = text
        .split(',')
        .map(rivet::parse_size)
        .collect::<Result<Vec<_>, _>>()?;
    list.sort_unstable();
    list.dedup();
    if let Some(bad) = list.iter().find(|&&s| s != 0 && !s.is_power_of_two()) {
        return Err(format!(
            "--sizes: {bad} is not on the size ladder (0 and powers of two)"
        ));
    }
    Ok(SizeSel::List(list))
}

/// One stack of the comparison: a name and how to run it, or why not.
struct StackEntry {
    name: &'static str,
    /// How its runs look, or why it is skipped.
    status: Result<StackRun, String>,
}

enum StackRun {
    Rivet { rivetrun: PathBuf, bench: PathBuf },
    Mpi(peers::Stack),
}

impl StackRun {
    /// The job for one p2p benchmark, or None if the stack has no such bench.
    fn p2p(&self, kind: Kind, max_size: usize) -> Option<CmdSpec> {
        match self {
            StackRun::Rivet { rivetrun, bench } => {
                let spec = CmdSpec::new(rivetrun)
                    .args(["-n", "2", "--bind-to", "core"])
                    .arg(bench)
                    .args([kind.name(), "--json"]);
                Some(if kind == Kind::Mr {
                    spec
                } else {
                    spec.args(["--max", &max_size.to_string()])
                })
            }
            StackRun::Mpi(s) => {
                let b = peers::pingpong_bench(kind.name())?;
                let max = if kind == Kind::Mr { 8 } else { max_size };
                Some(s.mpi.pingpong(&s.launcher, s.pingpong.as_ref()?, b, max))
            }
        }
    }

    fn startup(&self, n: u32) -> Option<CmdSpec> {
        match self {
            StackRun::Rivet { rivetrun, bench } => Some(
                CmdSpec::new(rivetrun)
                    .args(["-n", &n.to_string()])
                    .arg(bench)
                    .arg("startup"),
            ),
            StackRun::Mpi(s) => Some(s.mpi.launch(&s.launcher, n, false).arg(s.hello.as_ref()?)),
        }
    }
}

/// The results of one benchmark: samples per (key, stack).
struct Table {
    bench: Bench,
    /// Keys (sizes, or rank counts) to report; None = all seen.
    keys: Option<Vec<u64>>,
    /// Stack indexes that take part.
    stacks: Vec<usize>,
    samples: BTreeMap<u64, BTreeMap<usize, Vec<f64>>>,
}

impl Table {
    fn name(&self) -> &'static str {
        match self.bench {
            Bench::P2p(k) => k.name(),
            Bench::Startup => "startup",
        }
    }

    fn unit(&self) -> &'static str {
        match self.bench {
            Bench::P2p(k) => k.unit(),
            Bench::Startup => "s",
        }
    }

    fn lower_is_better(&self) -> bool {
        match self.bench {
            Bench::P2p(k) => k.lower_is_better(),
            Bench::Startup => true,
        }
    }

    fn key_name(&self) -> &'static str {
        match self.bench {
            Bench::P2p(_) => "size",
            Bench::Startup => "ranks",
        }
    }

    fn wants(&self, key: u64) -> bool {
        self.keys.as_ref().is_none_or(|k| k.contains(&key))
    }

    fn add(&mut self, key: u64, stack: usize, value: f64) {
        if self.wants(key) {
            self.samples
                .entry(key)
                .or_default()
                .entry(stack)
                .or_default()
                .push(value);
        }
    }
}

/// Where a cell's results go.
#[derive(Clone, Copy)]
struct CellTarget {
    table: usize,
    stack: usize,
    /// Startup: the wall time is the sample, under this key.
    wall_key: Option<u64>,
}

pub fn run(args: Args) -> Result<(), String> {
    if args.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    let size_sel = parse_sizes(&args.sizes)?;
    let mut benches = Vec::new();
    for b in &args.benches {
        let bench = match b.trim() {
            "startup" => Bench::Startup,
            other => Bench::P2p(Kind::from_name(other).ok_or_else(|| {
                format!("unknown bench {other:?}: latency, bw, bibw, mr or startup")
            })?),
        };
        if !benches.contains(&bench) {
            benches.push(bench);
        }
    }
    if benches.contains(&Bench::Startup) && (args.ranks.is_empty() || args.ranks.contains(&0)) {
        return Err("--ranks must list rank counts of at least 1".into());
    }
    let want_pingpong = benches
        .iter()
        .any(|b| matches!(b, Bench::P2p(k) if *k != Kind::Bibw));
    let want_hello = benches.contains(&Bench::Startup);

    if let Some(bad) = args
        .stacks
        .iter()
        .find(|s| !["rivet", "mpich", "openmpi"].contains(&s.trim()))
    {
        return Err(format!("unknown stack {bad:?}: rivet, mpich or openmpi"));
    }
    // The stacks, in a fixed order: rivet first.
    let build_dir = args
        .build_dir
        .clone()
        .unwrap_or_else(peers::default_build_dir);
    let mut stacks = Vec::new();
    for name in ["rivet", "mpich", "openmpi"] {
        if !args.stacks.iter().any(|s| s.trim() == name) {
            continue;
        }
        let status = match name {
            "rivet" => rivet_stack(&args),
            "mpich" => peers::prepare(
                Mpi::Mpich,
                &args.hydra,
                &args.mpicc_mpich,
                &args.anchors,
                &build_dir,
                want_pingpong,
                want_hello,
            )
            .map(StackRun::Mpi),
            _ => peers::prepare(
                Mpi::OpenMpi,
                &args.ompi_mpirun,
                &args.mpicc_openmpi,
                &args.anchors,
                &build_dir,
                want_pingpong,
                want_hello,
            )
            .map(StackRun::Mpi),
        };
        if let Err(why) = &status {
            eprintln!("rivet-bench: skipping {name}: {why}");
        }
        stacks.push(StackEntry { name, status });
    }
    if !stacks.iter().any(|s| s.status.is_ok()) {
        return Err("no stack can run".into());
    }

    // Tables and cells: one group per p2p bench, one per startup rank count.
    let max_size = match &size_sel {
        SizeSel::All => sizes::DEFAULT_MAX,
        SizeSel::List(l) => *l.last().expect("non-empty"),
    };
    let mut tables = Vec::new();
    let mut groups: Vec<Vec<Cell>> = Vec::new();
    let mut targets: Vec<Vec<CellTarget>> = Vec::new();
    for &bench in &benches {
        let t = tables.len();
        let mut table = Table {
            bench,
            keys: None,
            stacks: Vec::new(),
            samples: BTreeMap::new(),
        };
        match bench {
            Bench::P2p(kind) => {
                table.keys = match (&size_sel, kind) {
                    (_, Kind::Mr) => Some(vec![8]),
                    (SizeSel::All, _) => None,
                    (SizeSel::List(l), _) => Some(
                        l.iter()
                            .filter(|&&s| s > 0 || kind == Kind::Latency)
                            .map(|&s| s as u64)
                            .collect(),
                    ),
                };
                let mut cells = Vec::new();
                let mut tgts = Vec::new();
                for (i, s) in stacks.iter().enumerate() {
                    let Ok(run) = &s.status else { continue };
                    let Some(spec) = run.p2p(kind, max_size) else {
                        continue;
                    };
                    table.stacks.push(i);
                    cells.push(Cell {
                        label: format!("{}/{}", kind.name(), s.name),
                        spec,
                        warmup: false,
                    });
                    tgts.push(CellTarget {
                        table: t,
                        stack: i,
                        wall_key: None,
                    });
                }
                groups.push(cells);
                targets.push(tgts);
            }
            Bench::Startup => {
                table.keys = Some(args.ranks.iter().map(|&n| u64::from(n)).collect());
                for (i, s) in stacks.iter().enumerate() {
                    if s.status.as_ref().is_ok_and(|r| r.startup(1).is_some()) {
                        table.stacks.push(i);
                    }
                }
                for &n in &args.ranks {
                    let mut cells = Vec::new();
                    let mut tgts = Vec::new();
                    for &i in &table.stacks {
                        let run = stacks[i].status.as_ref().expect("usable");
                        cells.push(Cell {
                            label: format!("startup N={n}/{}", stacks[i].name),
                            spec: run.startup(n).expect("usable"),
                            warmup: true,
                        });
                        tgts.push(CellTarget {
                            table: t,
                            stack: i,
                            wall_key: Some(u64::from(n)),
                        });
                    }
                    groups.push(cells);
                    targets.push(tgts);
                }
            }
        }
        tables.push(table);
    }

    for g in &groups {
        for c in g {
            eprintln!("rivet-bench: {}: {}", c.label, c.spec);
        }
    }
    let loads = harness::run_interleaved(
        &groups,
        args.reps,
        Order::RepsOutermost,
        Duration::from_secs(args.timeout),
        |g, c, out| record(&mut tables, &stacks, targets[g][c], out),
    );

    let names: Vec<&str> = stacks.iter().map(|s| s.name).collect();
    let skipped: Vec<(&str, &str)> = stacks
        .iter()
        .filter_map(|s| s.status.as_ref().err().map(|w| (s.name, w.as_str())))
        .collect();
    if args.json {
        println!("{}", json_doc(&tables, &names, &skipped, args.reps, &loads));
    } else {
        print!(
            "{}",
            text_report(&tables, &names, &skipped, args.reps, &loads)
        );
    }
    Ok(())
}

fn rivet_stack(args: &Args) -> Result<StackRun, String> {
    let rivetrun = args
        .rivetrun
        .clone()
        .unwrap_or_else(|| beside_me("rivetrun"));
    let rivetrun = find_program(&rivetrun.to_string_lossy()).ok_or_else(|| {
        format!(
            "{} not found (build it: cargo build --release -p rivet-launcher)",
            rivetrun.display()
        )
    })?;
    let bench = match &args.rivet_bench {
        Some(p) => p.clone(),
        None => std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?,
    };
    if !bench.is_file() {
        return Err(format!("{} not found", bench.display()));
    }
    Ok(StackRun::Rivet { rivetrun, bench })
}

/// Turn one run's output into samples; the note lists what it measured.
fn record(
    tables: &mut [Table],
    stacks: &[StackEntry],
    target: CellTarget,
    out: &JobOutput,
) -> Result<String, String> {
    let table = &mut tables[target.table];
    if let Some(key) = target.wall_key {
        table.add(key, target.stack, out.wall);
        return Ok(String::new());
    }
    let rows = match &stacks[target.stack].status {
        Ok(StackRun::Rivet { .. }) => report::parse_json_output(&out.stdout, table.name())?,
        _ => peers::parse_table(&out.stdout),
    };
    let wanted: Vec<(u64, f64)> = rows.into_iter().filter(|(k, _)| table.wants(*k)).collect();
    if wanted.is_empty() {
        return Err("no row of a wanted size in the output".into());
    }
    let unit = table.unit();
    let mut note = String::from(" —");
    for (i, &(k, v)) in wanted.iter().enumerate() {
        table.add(k, target.stack, v);
        if wanted.len() <= 6 || i < 2 || i + 2 >= wanted.len() {
            note += &format!(" {k}:{}", fmt_value(unit, v));
        } else if i == 2 {
            note += " ...";
        }
    }
    Ok(note + " " + unit)
}

/// A value in a unit, with precision to suit.
fn fmt_value(unit: &str, v: f64) -> String {
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

fn fmt_summary(unit: &str, s: &Summary, runs: usize, reps: u32) -> String {
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

/// One row of a table, summarised: per stack, then the ratio.
struct RowSummary {
    key: u64,
    per_stack: Vec<(usize, Option<(Summary, usize)>)>,
    /// Rivet's median / the best peer's median, and that peer.
    ratio: Option<(f64, usize)>,
}

fn summarize_table(table: &Table, stacks: &[&str]) -> Vec<RowSummary> {
    let rivet = stacks.iter().position(|&s| s == "rivet");
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
            let best_peer = per_stack
                .iter()
                .filter(|(i, _)| Some(*i) != rivet)
                .filter_map(|(i, s)| s.map(|(s, _)| (*i, s.median)))
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
            let ratio = match (rivet.and_then(median), best_peer) {
                (Some(r), Some((peer, p))) if p > 0.0 => Some((r / p, peer)),
                _ => None,
            };
            RowSummary {
                key,
                per_stack,
                ratio,
            }
        })
        .collect()
}

fn bench_title(table: &Table) -> String {
    match table.bench {
        Bench::P2p(Kind::Latency) => "latency: half round trip, us (lower is better)".into(),
        Bench::P2p(Kind::Bw) => "bw: window of 64, MB/s with 1 MB = 1e6 B (higher is better)".into(),
        Bench::P2p(Kind::Bibw) => {
            "bibw: both directions, window of 64, MB/s (higher is better); no peer has bibw, Rivet only".into()
        }
        Bench::P2p(Kind::Mr) => "mr: 8-byte messages, window of 64, messages/s (higher is better)".into(),
        Bench::Startup => {
            "startup: whole N-rank job (init, barrier, finalize), launcher start to exit, s (lower is better)"
                .into()
        }
    }
}

/// The tables, aligned in columns.
fn text_report(
    tables: &[Table],
    stacks: &[&str],
    skipped: &[(&str, &str)],
    reps: u32,
    loads: &harness::Loads,
) -> String {
    let mut out = format!(
        "# Rivet vs peers: median [min-max] over {reps} interleaved runs per stack; ratio = rivet / best peer\n"
    );
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
    for table in tables {
        out += &format!("\n# {}\n", bench_title(table));
        let rows = summarize_table(table, stacks);
        let mut grid: Vec<Vec<String>> = Vec::new();
        let mut header = vec![if table.key_name() == "size" {
            "Size".to_string()
        } else {
            "N".to_string()
        }];
        header.extend(table.stacks.iter().map(|&i| stacks[i].to_string()));
        let has_ratio = table.stacks.len() > 1 && stacks.first() == Some(&"rivet");
        if has_ratio {
            header.push("rivet/best".into());
        }
        grid.push(header);
        for r in &rows {
            let mut line = vec![r.key.to_string()];
            for (_, s) in &r.per_stack {
                line.push(match s {
                    Some((s, n)) => fmt_summary(table.unit(), s, *n, reps),
                    None => "failed".into(),
                });
            }
            if has_ratio {
                line.push(match r.ratio {
                    Some((x, peer)) => format!("{x:.2} vs {}", stacks[peer]),
                    None => "-".into(),
                });
            }
            grid.push(line);
        }
        out += &align(&grid);
    }
    out
}

/// Right-align columns; the first line is the header, prefixed with '#'.
fn align(grid: &[Vec<String>]) -> String {
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

/// The JSON report:
/// `{"benchmark":"compare","reps":R,"stacks":["rivet",...],"skipped":[{"stack":..,"why":..}],
///   "other_load_pct":{"median":..,"max":..}|null,"failed_runs":F,
///   "results":[{"bench":"latency","unit":"us","better":"lower","rows":[
///     {"size":8,"stacks":{"rivet":{"median":..,"min":..,"max":..,"runs":5}|null,...},
///      "best_peer":"mpich"|null,"ratio":0.9|null}]}]}`
/// (startup rows have "ranks" instead of "size").
fn json_doc(
    tables: &[Table],
    stacks: &[&str],
    skipped: &[(&str, &str)],
    reps: u32,
    loads: &harness::Loads,
) -> String {
    let results: Vec<String> = tables
        .iter()
        .map(|table| {
            let rows: Vec<String> = summarize_table(table, stacks)
                .iter()
                .map(|r| {
                    let per: Vec<String> = r
                        .per_stack
                        .iter()
                        .map(|(i, s)| {
                            let v = match s {
                                Some((s, n)) => format!(
                                    "{{\"median\":{},\"min\":{},\"max\":{},\"runs\":{n}}}",
                                    json::num(s.median),
                                    json::num(s.min),
                                    json::num(s.max)
                                ),
                                None => "null".into(),
                            };
                            format!("{}:{v}", json::string(stacks[*i]))
                        })
                        .collect();
                    let (peer, ratio) = match r.ratio {
                        Some((x, p)) => (json::string(stacks[p]), json::num(x)),
                        None => ("null".into(), "null".into()),
                    };
                    format!(
                        "{{\"{}\":{},\"stacks\":{{{}}},\"best_peer\":{peer},\"ratio\":{ratio}}}",
                        table.key_name(),
                        r.key,
                        per.join(",")
                    )
                })
                .collect();
            format!(
                "{{\"bench\":{},\"unit\":{},\"better\":\"{}\",\"rows\":[{}]}}",
                json::string(table.name()),
                json::string(table.unit()),
                if table.lower_is_better() {
                    "lower"
                } else {
                    "higher"
                },
                rows.join(",")
            )
        })
        .collect();
    let skipped: Vec<String> = skipped
        .iter()
        .map(|(n, w)| {
            format!(
                "{{\"stack\":{},\"why\":{}}}",
                json::string(n),
                json::string(w)
            )
        })
        .collect();
    let load = match summarize(&loads.samples) {
        Some(s) => format!(
            "{{\"median\":{},\"max\":{}}}",
            json::num(s.median),
            json::num(s.max)
        ),
        None => "null".into(),
    };
    let names: Vec<String> = stacks.iter().map(|s| json::string(s)).collect();
    format!(
        "{{\"benchmark\":\"compare\",\"reps\":{reps},\"stacks\":[{}],\"skipped\":[{}],\"other_load_pct\":{load},\"failed_runs\":{},\"results\":[{}]}}",
        names.join(","),
        skipped.join(","),
        loads.failures,
        results.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(bench: Bench, keys: Option<Vec<u64>>, stacks: Vec<usize>) -> Table {
        Table {
            bench,
            keys,
            stacks,
            samples: BTreeMap::new(),
        }
    }

    #[test]
    fn size_selection() {
        assert_eq!(parse_sizes("all"), Ok(SizeSel::All));
        assert_eq!(
            parse_sizes("1M,8,1K,8"),
            Ok(SizeSel::List(vec![8, 1024, 1 << 20]))
        );
        assert!(parse_sizes("8,x").is_err());
        assert!(parse_sizes("0,1000").unwrap_err().contains("1000"));
    }

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
        let text = text_report(&[mr, st], &names, &skipped, 3, &loads);
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
        let doc = json_doc(&[lat], &names, &skipped, 1, &harness::Loads::default());
        assert_eq!(
            doc,
            "{\"benchmark\":\"compare\",\"reps\":1,\"stacks\":[\"rivet\",\"mpich\"],\
             \"skipped\":[{\"stack\":\"openmpi\",\"why\":\"mpirun.openmpi not found\"}],\
             \"other_load_pct\":null,\"failed_runs\":0,\"results\":[{\"bench\":\"latency\",\
             \"unit\":\"us\",\"better\":\"lower\",\"rows\":[{\"size\":0,\"stacks\":{\"rivet\":\
             {\"median\":0.25,\"min\":0.25,\"max\":0.25,\"runs\":1},\"mpich\":null},\
             \"best_peer\":null,\"ratio\":null}]}]}"
        );
        assert!(json::parse(&doc).is_ok());
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
