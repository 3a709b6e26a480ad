//! `rivet-bench`: Rivet's benchmark suite.
//!
//! Each subcommand is one benchmark in a file of its own. Rank-side programs
//! (`pmi-startup`) run under a launcher; harnesses (`launch-time`) start
//! launchers themselves and compare Rivet with its peers in the same run,
//! because this machine's speed drifts between runs. `stats` holds the
//! median/min/max summaries every harness reports.

mod launch_time;
mod pmi_startup;
mod stats;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "rivet-bench", version, about = "Rivet's benchmarks")]
struct Cli {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// Rank side of the launch benchmark: PMI init, one put, a barrier, N gets, finalize.
    PmiStartup,
    /// Time launch-to-exit of `pmi-startup` jobs under rivetrun and under mpiexec.hydra.
    LaunchTime(launch_time::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.bench {
        Bench::PmiStartup => pmi_startup::run(),
        Bench::LaunchTime(args) => launch_time::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("rivet-bench: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}
