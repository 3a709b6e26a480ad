//! Launch-to-exit time of an N-rank `pmi-startup` job under rivetrun and
//! under MPICH's mpiexec.hydra, interleaved run by run so both see the same
//! machine, with the ratio rivetrun/hydra per N. The running and timing is
//! `harness`'s, shared with `compare --benches startup`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::{self, Cell, CmdSpec, Order};
use crate::stats::{summarize, Summary};

#[derive(clap::Args)]
pub struct Args {
    /// Rank counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    ranks: Vec<u32>,
    /// Runs per launcher and rank count.
    #[arg(long, default_value_t = 10)]
    reps: u32,
    /// The rivetrun to measure (default: the one beside this binary, else PATH).
    #[arg(long)]
    rivetrun: Option<PathBuf>,
    /// The Hydra launcher to compare with.
    #[arg(long, default_value = "mpiexec.hydra")]
    hydra: String,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Seconds before a run is killed (the benchmark then fails).
    #[arg(long, default_value_t = 300)]
    timeout: u64,
}

struct Row {
    ranks: u32,
    rivetrun: Summary,
    hydra: Option<Summary>,
}

pub fn run(args: Args) -> Result<(), String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let rivetrun = args
        .rivetrun
        .clone()
        .unwrap_or_else(|| harness::beside_me("rivetrun"));
    let hydra_ok = harness::version_ok(Path::new(&args.hydra));
    if !hydra_ok {
        eprintln!("rivet-bench: {} not found; measuring rivetrun alone (apt-get install mpich for the comparison)", args.hydra);
    }
    if args.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    // One group per N: rivetrun and hydra alternate within it.
    let groups: Vec<Vec<Cell>> = args
        .ranks
        .iter()
        .map(|&n| {
            let job = |launcher: &Path| {
                CmdSpec::new(launcher)
                    .args(["-n", &n.to_string()])
                    .arg(&me)
                    .arg("pmi-startup")
            };
            let mut cells = vec![Cell {
                label: format!("N={n} rivetrun"),
                spec: job(&rivetrun),
                warmup: false,
            }];
            if hydra_ok {
                cells.push(Cell {
                    label: format!("N={n} {}", args.hydra),
                    spec: job(Path::new(&args.hydra)),
                    warmup: false,
                });
            }
            cells
        })
        .collect();
    let mut walls = vec![[Vec::new(), Vec::new()]; groups.len()];
    let loads = harness::run_interleaved(
        &groups,
        args.reps,
        Order::GroupsOutermost,
        Duration::from_secs(args.timeout),
        |g, c, out, _| {
            walls[g][c].push(out.wall);
            Ok(String::new())
        },
    );
    if loads.failures > 0 {
        return Err(format!("{} run(s) failed (see above)", loads.failures));
    }
    let rows: Vec<Row> = args
        .ranks
        .iter()
        .zip(&walls)
        .map(|(&ranks, [ours, theirs])| Row {
            ranks,
            rivetrun: summarize(ours).expect("reps > 0 and no failure"),
            hydra: summarize(theirs),
        })
        .collect();
    if args.json {
        print_json(&rows);
    } else {
        print_table(&rows);
    }
    if let Some(l) = loads.describe() {
        eprintln!("rivet-bench: {l}");
    }
    Ok(())
}

fn print_table(rows: &[Row]) {
    println!("# Launch-to-exit of an N-rank PMI job (init, put, barrier, N gets, finalize); seconds, median [min-max]");
    println!(
        "# {:>5}  {:>26}  {:>26}  {:>7}",
        "N", "rivetrun", "mpiexec.hydra", "ratio"
    );
    for row in rows {
        let ours = fmt(&row.rivetrun);
        let (theirs, ratio) = match &row.hydra {
            Some(h) => (fmt(h), format!("{:.2}", row.rivetrun.median / h.median)),
            None => ("-".into(), "-".into()),
        };
        println!(
            "  {:>5}  {:>26}  {:>26}  {:>7}",
            row.ranks, ours, theirs, ratio
        );
    }
}

fn fmt(s: &Summary) -> String {
    format!("{:.4} [{:.4}-{:.4}]", s.median, s.min, s.max)
}

fn print_json(rows: &[Row]) {
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            let h = r.hydra.map_or("null".into(), |h| format!("{{\"median\":{},\"min\":{},\"max\":{}}}", h.median, h.min, h.max));
            let ratio = r.hydra.map_or("null".into(), |h| format!("{}", r.rivetrun.median / h.median));
            format!(
                "{{\"ranks\":{},\"rivetrun\":{{\"median\":{},\"min\":{},\"max\":{}}},\"hydra\":{},\"ratio\":{}}}",
                r.ranks, r.rivetrun.median, r.rivetrun.min, r.rivetrun.max, h, ratio
            )
        })
        .collect();
    println!(
        "{{\"benchmark\":\"launch-time\",\"unit\":\"s\",\"rows\":[{}]}}",
        items.join(",")
    );
}
