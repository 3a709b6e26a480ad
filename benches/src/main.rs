//! `rivet-bench`: Rivet's benchmark suite.
//!
//! Each subcommand is one benchmark. Rank-side programs run under a
//! launcher (`rivetrun -n 2 rivet-bench latency`, or MPICH's
//! `mpiexec.hydra`): `latency`, `bw`, `bibw`, `mr` (`p2p`, output in
//! `report`), `latency --idle-peers` and `fanin` (`scale`), `startup`, `info`, `pmi-startup`, and the dynamic-process
//! ones `spawn`, `accept` and `connect` (`dynamic`, rivetrun only).
//! Harnesses start launchers themselves and compare Rivet with its peers in
//! the same run, interleaved, because this machine's speed drifts between
//! runs: `compare` (`compare`, `peers`; over libfabric also `fi_pingpong`,
//! whose hidden `fi-pingpong` subcommand runs libfabric's fi_pingpong pairs
//! for it), `launch-time` and `dynamic`; all run jobs through `harness`. `stats`
//! holds the median/min/max summaries every harness reports; `sizes` the
//! size parsing, size ladder and iteration counts; `json` a little JSON;
//! `plot` draws a comparison (`rivet-bench plot`, `compare --plot`);
//! `progress` is the harnesses' progress bar or lines; `placement` probes where the host
//! put CPUs 0 and 1 around each run; `version` the long
//! `--version`; `generate` (shared with rivetrun) the man page and
//! completions `cargo xtask man` asks for.
//!
//! Choices: the plots use `plotters` (svg, bitmap, line series, `ab_glyph` text; no `ttf`
//! feature, so no fontconfig or freetype: a .ttf is read at run time), the progress bar
//! `indicatif` (no default features); `png` (a dev-dependency, already in the tree through
//! plotters) lets a test read the committed example plot (`docs/compare-shm.*`) back.
//!
//! Module map:
//!
//! - `p2p/`, `report.rs`: the rank-side point-to-point benchmarks and their OSU-style output;
//!   `sizes.rs` the size ladder and iteration counts.
//! - `scale.rs`: benchmarks of scale: `latency --idle-peers N` (idle ranks asleep in
//!   `Engine::pmi_barrier`; rank 0's RSS) and `fanin`; netmod system calls per message
//!   (`Netmod::syscalls`) in the JSON rows; `scale_compare.rs` their `compare` jobs and verdicts
//!   (`--benches idle,fanin`).
//! - `exchange.rs`: `rivet-bench exchange`, all-pairs ping-pong at 8 B, 1 KiB and 100 KiB with
//!   checked payloads.
//! - `dynamic/`: `spawn`, `accept`, `connect` and the `dynamic` harness; `pmi_startup.rs` and
//!   `launch_time.rs` the launch benchmark.
//! - `compare/`: the peer comparison, one file per step from arguments (`args.rs`) through stacks
//!   (`stacks.rs`), programs (`programs.rs`), results (`record.rs`, `table.rs`, `summary.rs`) to
//!   reports (`text.rs`, `csv.rs`, `json_report.rs`); `peers.rs` builds the peers' programs in
//!   `benches/peers/` (MPI latency/bw/mr, MPI hello, raw TCP ping-pong, Open MPI spawn);
//!   `fi_pingpong.rs` runs libfabric's `fi_pingpong`.
//! - `harness.rs`, `stats.rs`, `json.rs`: what the harnesses share, median/min/max summaries,
//!   a little JSON.
//! - `plot/`: `rivet-bench plot` and `compare --plot`: compare JSON -> curves and ratios
//!   (`data.rs`), drawn with plotters (`draw.rs`); `progress.rs` the progress bar or plain lines.
//! - `version.rs`: the long `--version`.
//! - `benches/benches/`: criterion micro-benchmarks (`engine_path.rs`, `matching.rs`,
//!   `shm_queue.rs`).

#![deny(clippy::undocumented_unsafe_blocks)]

mod compare;
mod dynamic;
mod exchange;
mod fi_pingpong;
#[path = "../../launcher/src/generate.rs"]
mod generate;
mod harness;
mod json;
mod launch_time;
mod p2p;
mod peers;
mod placement;
mod plot;
mod pmi_startup;
mod progress;
mod report;
mod scale;
mod scale_compare;
mod sizes;
mod stats;
mod version;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::sizes::Kind;

const AFTER_HELP: &str = "\
Point-to-point benchmarks run on 2 or more ranks (fewer is an error);
ranks 0 and 1 measure, ranks 2 and above only join the barriers.

  rivetrun -n 2 rivet-bench latency --max 64K
  mpiexec.hydra -n 2 rivet-bench bw --min 1K --json
  rivetrun -n 2 rivet-bench mr --threads 2
  rivet-bench compare --benches latency,bw,mr --reps 5
  rivet-bench compare --transport tcp --sizes 8,1K,64K,1M --reps 5
  rivet-bench compare --transport ofi --provider 'tcp;ofi_rxm' --benches latency,bw --reps 3
  rivet-bench compare --benches startup --ranks 8,32
  rivet-bench dynamic --reps 5
  rivetrun -n 1 rivet-bench spawn --children 1,4,16 --reps 5

Sizes: 0, 1, 2, 4, ... powers of two within [--min, --max] (bw and bibw
start at 1 B; mr is 8 B only unless --min or --max is given). Suffixes
K, M, G (= KiB, MiB, GiB) are binary; KB/MB/GB are refused as ambiguous.
Bandwidth is in MB/s with 1 MB = 1e6 B, as the peer programs.

Table output (rank 0): '# Rivet <bench> (<n> ranks)[, window 64[, T threads per rank]]',
'# Size  <column>', then one row per size. --json prints, at the end, one line:
  {\"bench\":\"latency\",\"ranks\":2,\"threads\":1,\"window\":1,\"unit\":\"us\",
   \"rows\":[{\"size\":0,\"value\":0.512,\"iters\":10000},...]}
unit: us (latency, half round trip), MB/s (bw, bibw), msg/s (mr, all threads);
iters: timed round trips (latency) or windows of 64 (bw, bibw, mr; per thread).";

#[derive(Parser)]
#[command(
    name = "rivet-bench",
    version,
    about = "Rivet's benchmarks",
    after_long_help = AFTER_HELP,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// Print the engine's configuration (rank 0) and exit, as `rivet-bench info`.
    #[arg(long)]
    info: bool,
    #[command(subcommand)]
    bench: Option<Bench>,
}

#[derive(Subcommand)]
enum Bench {
    /// Ping-pong latency: blocking send/recv between ranks 0 and 1, half round trip in us.
    Latency(p2p::P2pArgs),
    /// Bandwidth (osu_bw): windows of 64 nonblocking sends 0 -> 1, then a 4-byte ack; MB/s.
    Bw(p2p::P2pArgs),
    /// Bidirectional bandwidth (osu_bibw): both ranks post 64 receives and 64 sends; MB/s.
    Bibw(p2p::P2pArgs),
    /// Message rate: windows of 64 sends 0 -> 1 and an ack, per thread; messages/s.
    ///
    /// Each of --threads threads per rank uses its own duplicate of the world
    /// communicator (made on the main thread before the threads start); the
    /// rate is that of all threads together, from the first thread's start to
    /// the last one's end. Sizes: 8 B only, unless --min or --max is given.
    Mr(p2p::MrArgs),
    /// Fan-in: every rank but 0 sends windows of 8 B messages to rank 0, which acks each window; messages/s received.
    ///
    /// Per window rank 0 posts --window receives per sender, waits for all,
    /// then acks every sender. Also rank 0's netmod system calls per
    /// message received (where the netmod counts them: tcp).
    ///
    ///   RIVET_NETMOD=tcp rivetrun -n 17 rivet-bench fanin
    Fanin(scale::FaninArgs),
    /// Every rank ping-pongs with every other: 8 B, 1 KiB, 100 KiB, each byte checked; `exchange ok: R ranks`.
    ///
    /// Per size a rank sends to every peer first, then receives from every
    /// peer, then echoes each message back and receives its own back. A
    /// payload depends only on its size and tag. Exits non-zero on any
    /// mismatch. For jobs whose ranks reach each other by different paths:
    ///
    ///   rivetrun --impi-client 0 HOST:PORT -n 2 rivet-bench exchange
    Exchange,
    /// Print the engine's configuration: transports, paths, thresholds, yield mode (rank 0).
    Info {
        /// Also list every RIVET_* setting: value in force, source (environment or
        /// default), default and what it does; and RIVET_* variables that are not settings.
        #[arg(long)]
        all: bool,
    },
    /// Hello world: init, barrier, finalize; rank 0 prints the time from main() to the end of finalize.
    ///
    /// The time starts when main() begins (so it leaves out exec and dynamic
    /// loading, about a millisecond), not at the process's start time in
    /// /proc/self/stat, whose clock ticks are 10 ms. `compare --benches
    /// startup` times whole jobs from outside instead.
    Startup {
        /// One JSON line: {"bench":"startup","ranks":N,"unit":"ms","from":"main","total":..,"init":..,"barrier":..,"finalize":..}
        #[arg(long)]
        json: bool,
    },
    /// Compare Rivet with MPICH and Open MPI (over TCP also raw TCP; over libfabric with fi_pingpong), interleaved: median [min-max] and ratios.
    ///
    /// Point-to-point runs use benches/peers/mpi_p2p.c for the peers
    /// (built with mpicc.mpich / mpicc.openmpi into target/peers); startup
    /// runs mpi_hello.c. A stack whose tools are missing is skipped with a
    /// note. Progress goes to stderr, one line per run; the tables (or
    /// --json) to stdout.
    ///
    /// --transport shm (the default): stacks rivet, mpich (its defaults:
    /// UCX shared memory) and openmpi (--mca pml ob1 --mca btl self,vader).
    ///
    /// --transport tcp, over loopback: rivet-uring and rivet-poll (rivetrun
    /// with RIVET_NETMOD=tcp and RIVET_TCP_BACKEND=uring or poll), raw-tcp
    /// (benches/peers/tcp_pingpong.c built with cc -O2; latency from its
    /// busy-poll table at 1, 8, 64, 512 B, 1, 4, 16, 64 KiB, bw from its
    /// one-stream table at 64, 256 KiB, 1, 4 MiB, "-" at other sizes; no mr,
    /// no startup), mpich (UCX_TLS=tcp,self) and openmpi (--mca pml ob1
    /// --mca btl self,tcp). Below each table, per size: each Rivet stack /
    /// best peer (mpich or openmpi) and / raw-tcp, and rivet-uring /
    /// rivet-poll; the targets 8 B latency <= 1.1 x raw-tcp and 1 MiB bw >=
    /// 0.9 x raw-tcp are marked met or MISSED.
    ///
    /// --transport ofi, per libfabric provider P of --provider (default
    /// tcp;ofi_rxm and shm): rivet-ofi(P) (rivetrun with RIVET_NETMOD=ofi
    /// and RIVET_OFI_PROVIDER=P) and fi_pingpong(P), libfabric's own
    /// ping-pong (package libfabric-bin; latency and bw only): per size one
    /// server/client pair, `taskset -c 1 fi_pingpong -p P -e rdm -B PORT -S
    /// SIZE -I ITERS` and `taskset -c 0 fi_pingpong ... -P PORT ...
    /// 127.0.0.1`, a free port each, ITERS 50000 up to 1 KiB, 5000 up to 64
    /// KiB, 500 above. Its latency is usec/xfer
    /// (half round trip); its bw is ping-pong bandwidth, size / half round
    /// trip, not a streaming window like Rivet's bw. Below each table, per size:
    /// rivet-ofi(P) / fi_pingpong(P), with the targets latency <= 1.1 and
    /// bw >= 1.0 marked met or MISSED. mr, bibw and startup are rivet-ofi
    /// only, without a ratio.
    ///
    /// --benches idle,fanin (tcp, ofi; Rivet stacks only): 8 B latency
    /// with 0 and --idle-peers idle ranks (asleep in a PMI barrier) and
    /// rank 0's RSS in those runs (a memory table: KiB per idle peer,
    /// target at most 64), and fanin from --senders ranks (target uring /
    /// poll at least 1.3). Rank 0's netmod system calls per message are printed
    /// below every table whose Rivet runs count them (tcp).
    ///
    /// Placement: just before and after each run, the round trip of a cache
    /// line between CPUs 0 and 1 (the first two this process may use) is
    /// probed (1-10 ms) and shown on its progress line. In a virtual machine
    /// the host may place those CPUs near each other or far apart, for
    /// seconds at a time, and every stack's figures follow. When the
    /// probes fall into two such placements, the header says so and each
    /// table also shows the near runs and the far runs apart, with their own
    /// medians and ratios (a run whose two probes disagree is in neither);
    /// the JSON has them as each result's "placements". The CSV has all runs.
    Compare(Box<compare::Args>),
    /// Draw a `compare --json` document: latency and bandwidth curves per stack, ratio to the best peer.
    ///
    /// One column per benchmark measured at two sizes or more: the median
    /// of every stack against message size on log-log axes, with its
    /// min-max band, and below, each Rivet stack's median over the best
    /// peer's (MPICH or Open MPI; where neither ran, raw-tcp, or over ofi
    /// the same provider's fi_pingpong). SVG, or PNG when FILE ends in
    /// .png. Text needs a TrueType font: RIVET_BENCH_FONT, else DejaVu Sans
    /// (fonts-dejavu-core) or another usual system font.
    ///
    ///   rivet-bench compare --json > run.json && rivet-bench plot run.json -o run.png
    Plot(plot::Args),
    /// Rank side of the launch benchmark: PMI init, one put, a barrier, N gets, finalize.
    PmiStartup,
    /// Time launch-to-exit of `pmi-startup` jobs under rivetrun and under mpiexec.hydra.
    LaunchTime(launch_time::Args),
    /// Rank side: time spawn of N children (this program, `spawn-child`) from call to return (rank 0; rivetrun only).
    ///
    /// Every rank of the world spawns collectively (root 0); rank 0 times
    /// `world.spawn` from call to return (the intercommunicator is ready:
    /// every child has connected back), receives each child's pid,
    /// disconnects (all parents) and waits until every child has exited
    /// ("exited": spawn call to the last child gone or a zombie, polled every
    /// 50 us). One untimed spawn of 1 child comes first, reported as
    /// "first". Needs a launcher with PMI spawn (rivetrun).
    ///
    ///   rivetrun -n 1 rivet-bench spawn --children 1,4,16 --reps 5
    Spawn(dynamic::SpawnArgs),
    /// What `spawn` starts: send the pid to the parent, disconnect, finalize.
    #[command(hide = true)]
    SpawnChild,
    /// For `compare --transport ofi`: fi_pingpong server/client pairs, one per size; a table of usec/xfer and MB/s.
    #[command(hide = true)]
    FiPingpong(fi_pingpong::Args),
    /// Rank side: open a port, write it to --port-file, then accept --reps times (accept, barrier, disconnect).
    ///
    /// Rank 0 times open_port (the first dynamic call: it opens the netmod)
    /// and each accept from call to return (which includes waiting for the
    /// connector). The port file is written atomically (temporary file and
    /// rename) and removed at the end. Run with a `connect` job:
    ///
    ///   rivetrun -n 2 rivet-bench accept --port-file /tmp/p --reps 20 &
    ///   rivetrun -n 2 rivet-bench connect --port-file /tmp/p --reps 20
    Accept(dynamic::PortArgs),
    /// Rank side: read the port from --port-file (waiting for it up to --wait s), then connect --reps times.
    ///
    /// Each rep: a barrier on the world, connect (timed on rank 0 from call
    /// to return), a barrier on the intercommunicator, disconnect ("cycle"
    /// = all three). The first connect, which opens the netmod, is reported
    /// apart from the others. --reps must match the accept side's.
    Connect(dynamic::PortArgs),
    /// Time connect/accept between two rivetrun jobs and spawn of N children, Rivet and Open MPI's MPI_Comm_spawn, interleaved.
    ///
    /// Per rep, in an order rotated each rep: an accept job and a connect
    /// job started together (`rivetrun -n RANKS rivet-bench accept|connect
    /// --port-file <fresh file> --reps CONNECTS`), a Rivet spawn job
    /// (`rivetrun -n PARENTS rivet-bench spawn --reps SPAWNS`), and an Open
    /// MPI spawn job (`PMIX_MCA_psec=native mpirun.openmpi --allow-run-as-root
    /// --oversubscribe -n PARENTS ompi_spawn`, benches/peers/ompi_spawn.c built with
    /// `mpicc.openmpi -O2` into target/peers, timing the same figures with
    /// MPI_Wtime). Rivet jobs run with RIVET_YIELD=always. Samples of all
    /// jobs are pooled: median [min-max] (count) per figure, in ms, and
    /// Rivet / Open MPI. MPICH is not a peer: Debian's ch4:ucx build refuses
    /// MPI_Open_port and MPI_Comm_spawn. Debian's Open MPI 4.1.4 (PMIx 4.2)
    /// now and then hangs in MPI_Comm_spawn: a spawn cycle still running
    /// after --hang s is cut off (its job ends, what it measured before is
    /// kept) and counted under the table. Progress to stderr, table (or
    /// --json) to stdout.
    Dynamic(dynamic::Args),
}

/// The arguments; `--version` gets the long version, whose library probes
/// run only when it is asked for.
fn parse_args() -> Cli {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let mut command = Cli::command();
    if args.iter().any(|a| a == "--version") {
        // Printed once, then the process exits: leaking it is free.
        command = command.long_version(&*Box::leak(version::long().into_boxed_str()));
    }
    let matches = command.get_matches_from(args);
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn main() -> std::process::ExitCode {
    let main_start = std::time::Instant::now();
    if let Some(code) = generate::from_args(Cli::command) {
        return code;
    }
    let cli = parse_args();
    let result = match cli.bench {
        None if cli.info => p2p::info(false),
        None => Err("no benchmark given: see `rivet-bench --help`".into()),
        Some(Bench::Latency(args)) => p2p::run(Kind::Latency, args),
        Some(Bench::Bw(args)) => p2p::run(Kind::Bw, args),
        Some(Bench::Bibw(args)) => p2p::run(Kind::Bibw, args),
        Some(Bench::Mr(args)) => p2p::mr(args),
        Some(Bench::Fanin(args)) => scale::fanin(args),
        Some(Bench::Info { all }) => p2p::info(all),
        Some(Bench::Exchange) => exchange::run(),
        Some(Bench::Startup { json }) => p2p::startup(main_start, json),
        Some(Bench::Compare(args)) => compare::run(*args),
        Some(Bench::Plot(args)) => plot::run(args),
        Some(Bench::PmiStartup) => pmi_startup::run(),
        Some(Bench::LaunchTime(args)) => launch_time::run(args),
        Some(Bench::Spawn(args)) => dynamic::spawn(args),
        Some(Bench::SpawnChild) => dynamic::spawn_child(),
        Some(Bench::FiPingpong(args)) => fi_pingpong::run(args),
        Some(Bench::Accept(args)) => dynamic::accept(args),
        Some(Bench::Connect(args)) => dynamic::connect(args),
        Some(Bench::Dynamic(args)) => dynamic::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("rivet-bench: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OSU's spellings (-m MIN:MAX, -i, -x, -W) beside the long ones.
    #[test]
    fn osu_option_spellings() {
        let cli = Cli::try_parse_from([
            "rivet-bench",
            "bw",
            "-m",
            "1K:64K",
            "-i",
            "5",
            "-x",
            "1",
            "-W",
            "8",
        ])
        .expect("parses");
        let Some(Bench::Bw(a)) = cli.bench else {
            panic!("not bw")
        };
        assert_eq!(a.range, Some((Some(1024), Some(65536))));
        assert_eq!((a.iters, a.warmup, a.window), (Some(5), Some(1), 8));
        let cli = Cli::try_parse_from(["rivet-bench", "latency", "-m", "4K"]).expect("parses");
        let Some(Bench::Latency(a)) = cli.bench else {
            panic!("not latency")
        };
        assert_eq!(a.range, Some((None, Some(4096))));
        assert_eq!(a.window, sizes::WINDOW);
        // -m and --max together are refused, as are bad ranges.
        assert!(Cli::try_parse_from(["rivet-bench", "bw", "-m", "1:8", "--max", "8"]).is_err());
        assert!(Cli::try_parse_from(["rivet-bench", "bw", "-m", "1:8Q"]).is_err());
        let cli = Cli::try_parse_from([
            "rivet-bench",
            "compare",
            "-m",
            "8:1K",
            "-W",
            "16",
            "-i",
            "3",
        ])
        .expect("parses");
        assert!(matches!(cli.bench, Some(Bench::Compare(_))));
        assert!(
            Cli::try_parse_from(["rivet-bench", "compare", "-m", "8:1K", "--sizes", "8"]).is_err()
        );
    }
}
