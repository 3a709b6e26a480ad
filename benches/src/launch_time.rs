//! Launch-to-exit time of an N-rank `pmi-startup` job under rivetrun and
//! under MPICH's mpiexec.hydra, interleaved run by run so both see the same
//! machine, with the ratio rivetrun/hydra per N.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

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
}

struct Row {
    ranks: u32,
    rivetrun: Summary,
    hydra: Option<Summary>,
}

pub fn run(args: Args) -> Result<(), String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let rivetrun = args.rivetrun.clone().unwrap_or_else(|| {
        let beside = me.with_file_name("rivetrun");
        if beside.exists() {
            beside
        } else {
            PathBuf::from("rivetrun")
        }
    });
    let hydra_ok = Command::new(&args.hydra)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !hydra_ok {
        eprintln!("rivet-bench: {} not found; measuring rivetrun alone (apt-get install mpich for the comparison)", args.hydra);
    }
    if args.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    let mut rows = Vec::new();
    for &n in &args.ranks {
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        for rep in 0..args.reps {
            eprint!("\rrivet-bench: N={n} run {}/{}", rep + 1, args.reps);
            ours.push(time_job(
                Command::new(&rivetrun)
                    .args(["-n", &n.to_string()])
                    .arg(&me)
                    .arg("pmi-startup"),
            )?);
            if hydra_ok {
                theirs.push(time_job(
                    Command::new(&args.hydra)
                        .args(["-n", &n.to_string()])
                        .arg(&me)
                        .arg("pmi-startup"),
                )?);
            }
        }
        eprintln!();
        rows.push(Row {
            ranks: n,
            rivetrun: summarize(&ours).expect("reps > 0"),
            hydra: summarize(&theirs),
        });
    }
    if args.json {
        print_json(&rows);
    } else {
        print_table(&rows);
    }
    Ok(())
}

fn time_job(cmd: &mut Command) -> Result<f64, String> {
    let start = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    let secs = start.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(secs)
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
