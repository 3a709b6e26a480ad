//! The command line of `compare` (`Args`), the benchmarks and sizes it
//! asks for, and the iteration options passed on to every stack.

use crate::fi_pingpong;
use crate::peers::Transport;
use crate::sizes::Kind;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Transport of the point-to-point runs and startup jobs; it decides the
    /// stacks and their command lines (listed in `compare --help`).
    #[arg(long, value_enum, default_value_t = Transport::Shm)]
    pub(super) transport: Transport,
    /// libfabric providers for --transport ofi, comma-separated, as fi_info
    /// names them; each gets its rivet-ofi and fi_pingpong stacks.
    /// [default: tcp;ofi_rxm,shm]
    #[arg(long, value_delimiter = ',')]
    pub(super) provider: Option<Vec<String>>,
    /// Benchmarks to compare: latency, bw, bibw (Rivet only), mr (no
    /// raw-tcp, no fi_pingpong), startup (no raw-tcp, no fi_pingpong);
    /// Rivet only, over tcp or ofi: idle (8 B latency with 0 and
    /// --idle-peers idle ranks connected; also a `memory` table, rank 0's
    /// RSS) and fanin (--senders ranks to one).
    #[arg(long, value_delimiter = ',', default_value = "latency,bw,mr")]
    pub(super) benches: Vec<String>,
    /// Message sizes to report (latency, bw, bibw), comma-separated, with
    /// suffixes as --max; or `all` for every size up to 4 MiB. mr is always 8 B.
    /// raw-tcp measures only latency at 1,8,64,512,1K,4K,16K,64K and bw at
    /// 64K,256K,1M,4M; it shows "-" at other sizes. fi_pingpong runs one
    /// server/client pair per size listed (every ladder size for `all`).
    #[arg(long, default_value = "8,1024,65536,1048576,4194304")]
    pub(super) sizes: String,
    /// Sizes as OSU's `-m MIN:MAX`: every ladder size in the range
    /// (instead of --sizes).
    #[arg(short = 'm', value_parser = crate::p2p::parse_range, value_name = "MIN:MAX",
          conflicts_with = "sizes")]
    pub(super) range: Option<(Option<usize>, Option<usize>)>,
    /// Timed iterations per size for every stack (OSU's -i): round trips
    /// (latency) or windows (bw, mr); raw-tcp's bw sends ITERS x WINDOW
    /// messages. [default: by size, as `rivet-bench latency --help` says;
    /// fi_pingpong keeps its own]
    #[arg(short = 'i', long, value_name = "N")]
    pub(super) iters: Option<u32>,
    /// Untimed iterations per size for Rivet and the MPI stacks (OSU's -x).
    #[arg(short = 'x', long, value_name = "N")]
    pub(super) warmup: Option<u32>,
    /// Messages per window of bw and mr, for Rivet and the MPI stacks
    /// (OSU's -W).
    #[arg(short = 'W', long, value_name = "N")]
    pub(super) window: Option<usize>,
    /// Rank counts for startup.
    #[arg(long, value_delimiter = ',', default_value = "2,8,32")]
    pub(super) ranks: Vec<u32>,
    /// Idle peers of the `idle` bench (8 B latency with none and with N,
    /// and rank 0's RSS in the `memory` table).
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub(super) idle_peers: u32,
    /// Senders of the `fanin` bench.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub(super) senders: u32,
    /// Runs per stack and benchmark.
    #[arg(long, default_value_t = 5)]
    pub(super) reps: u32,
    /// Stacks to run. shm: rivet, rivet-mpi, mpich, openmpi. tcp: rivet-uring,
    /// rivet-poll, raw-tcp, mpich, openmpi (rivet = both Rivet stacks).
    /// ofi: rivet-ofi (or rivet), fi_pingpong, each for every --provider.
    /// Only when named (shm, tcp): openmpi-rivetrun, Open MPI's programs
    /// under rivetrun, in no rivet/best ratio; with openmpi at --benches
    /// startup, a line per N gives openmpi-rivetrun / openmpi (target at
    /// most 0.7) [default: all of the transport's stacks]
    #[arg(long, value_delimiter = ',')]
    pub(super) stacks: Option<Vec<String>>,
    /// Print one JSON object instead of the tables.
    #[arg(long, conflicts_with = "csv")]
    pub(super) json: bool,
    /// Print CSV instead of the tables: one line per benchmark, size (or
    /// rank count) and stack: bench,unit,better,key,value,stack,median,min,
    /// max,runs,vs_best_peer,vs_raw (empty where there is none).
    #[arg(long)]
    pub(super) csv: bool,
    /// Also draw the curves into FILE (.svg or .png; as `rivet-bench plot`).
    #[arg(long, value_name = "FILE")]
    pub(super) plot: Option<PathBuf>,
    /// Build what is needed, print every run's command line (stdout) and exit
    /// without running anything.
    #[arg(long)]
    pub(super) dry_run: bool,
    /// rivetrun to use (default: the one beside this executable, else PATH).
    #[arg(long)]
    pub(super) rivetrun: Option<PathBuf>,
    /// rivet-bench to run under rivetrun (default: the one beside this executable).
    #[arg(long)]
    pub(super) rivet_bench: Option<PathBuf>,
    /// MPICH's launcher.
    #[arg(long, default_value = "mpiexec.hydra")]
    pub(super) hydra: String,
    /// Open MPI's launcher.
    #[arg(long, default_value = "mpirun.openmpi")]
    pub(super) ompi_mpirun: String,
    #[arg(long, default_value = "mpicc.mpich")]
    pub(super) mpicc_mpich: String,
    #[arg(long, default_value = "mpicc.openmpi")]
    pub(super) mpicc_openmpi: String,
    /// rivetcc for the rivet-mpi stack (default: the one beside this executable).
    #[arg(long)]
    pub(super) rivetcc: Option<PathBuf>,
    /// C compiler for tcp_pingpong.c (raw-tcp).
    #[arg(long, default_value = "cc")]
    pub(super) cc: String,
    /// libfabric's fi_pingpong (fi_pingpong stacks, --transport ofi).
    #[arg(long, default_value = fi_pingpong::DEFAULT_PROGRAM)]
    pub(super) fi_pingpong: String,
    /// Directory with the peer programs' sources: mpi_p2p.c, mpi_hello.c
    /// and tcp_pingpong.c [default: benches/peers of this source tree].
    #[arg(long, value_name = "DIR")]
    pub(super) peers_dir: Option<PathBuf>,
    /// Where to build the peers' programs [default: target/peers beside this executable's profile dir].
    #[arg(long)]
    pub(super) build_dir: Option<PathBuf>,
    /// Seconds before a run is killed (and counted as failed).
    #[arg(long, default_value_t = 300)]
    pub(super) timeout: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bench {
    P2p(Kind),
    Startup,
    /// 8 B latency keyed by idle peers (`latency --idle-peers`).
    Idle,
    /// Rank 0's RSS (KiB) in the idle runs, keyed by idle peers.
    Memory,
    /// `fanin`, keyed by senders.
    Fanin,
}

/// Which sizes to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum SizeSel {
    All,
    List(Vec<usize>),
}

pub(super) fn parse_sizes(text: &str) -> Result<SizeSel, String> {
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

/// Iteration options every stack's p2p run is given (`-i`, `-x`, `-W`);
/// `None`: the program's defaults.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Loops {
    pub(super) iters: Option<u32>,
    pub(super) warmup: Option<u32>,
    pub(super) window: Option<usize>,
}

impl Loops {
    /// `[flag, value]` pairs for the options set, `flags` naming
    /// (iters, warmup, window); window only where the bench has one.
    pub(super) fn args(&self, kind: Kind, flags: [&str; 3]) -> Vec<String> {
        let mut out = Vec::new();
        let window = self.window.filter(|_| kind != Kind::Latency);
        let values = [
            self.iters.map(u64::from),
            self.warmup.map(u64::from),
            window.map(|w| w as u64),
        ];
        for (flag, value) in flags.iter().zip(values) {
            if let Some(v) = value {
                out.push(flag.to_string());
                out.push(v.to_string());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
