//! `rivet-bench compare`: Rivet and its peers (MPICH, Open MPI; over TCP
//! also raw TCP; over libfabric fi_pingpong) side by side on this machine,
//! interleaved run by run, with median [min-max] per stack and the ratio
//! Rivet / best peer. The transport is shared memory (`--transport shm`, the
//! default), TCP over loopback (`--transport tcp`) or libfabric
//! (`--transport ofi`, one or more providers).
//!
//! Point-to-point (latency, bw, mr; bibw is Rivet only, the peers' program
//! has none): each run is one whole job on 2 ranks, one per core. Over shm:
//! - rivet:   `rivetrun -n 2 --bind-to core rivet-bench <bench> --json --max M`
//! - rivet-mpi: `MAXSIZE=M rivetrun -n 2 --bind-to core mpi_p2p.rivet-mpi <lat|bw|mr>`
//!   (the same peer program as MPICH's and Open MPI's, built with `rivetcc`:
//!   MPI on librivetmpi on librivet); its extra column rivet-mpi/rivet is
//!   what the MPI layer costs, held to 8 B latency <= 1.05 x and mr >= 0.95 x
//! - mpich:   `MAXSIZE=M mpiexec.hydra -n 2 -bind-to core mpi_p2p.mpich <lat|bw|mr>`
//! - openmpi: `mpirun.openmpi --allow-run-as-root --oversubscribe -n 2 --bind-to core
//!   --mca pml ob1 --mca btl self,vader -x MAXSIZE mpi_p2p.openmpi <lat|bw|mr>`
//!
//! Over tcp (`--transport tcp`):
//! - rivet-uring: `RIVET_NETMOD=tcp RIVET_TCP_BACKEND=uring rivetrun -n 2 --bind-to core
//!   rivet-bench <bench> --json --max M`
//! - rivet-poll:  `RIVET_NETMOD=tcp RIVET_TCP_BACKEND=poll rivetrun -n 2 --bind-to core
//!   rivet-bench <bench> --json --max M`
//! - raw-tcp:     `tcp_pingpong <lat|bw>` (latency and bw only)
//! - mpich:   `UCX_TLS=tcp,self MAXSIZE=M mpiexec.hydra -n 2 -bind-to core
//!   mpi_p2p.mpich <lat|bw|mr>`
//! - openmpi: `mpirun.openmpi --allow-run-as-root --oversubscribe -n 2 --bind-to core
//!   --mca pml ob1 --mca btl self,tcp -x MAXSIZE mpi_p2p.openmpi <lat|bw|mr>`
//!
//! where `mpi_p2p.*` is benches/peers/mpi_p2p.c built with each
//! stack's `mpicc -O2` (into `target/peers/`), and M the largest size asked
//! for, so every stack runs the same ladder of sizes up to M. mr is 8-byte
//! messages only (mpi_p2p's mr).
//!
//! raw-tcp is `benches/peers/tcp_pingpong.c` built with `cc -O2` (into
//! `target/peers/`): one loopback connection with TCP_NODELAY between two
//! processes it forks and pins to CPUs 0 and 1 itself. It is the limit
//! Rivet's TCP netmod is held to, not a peer: its latency is the busy-poll
//! table (recv(MSG_DONTWAIT) in a loop; the blocking-recv table it prints
//! first is not used) at 1, 8, 64, 512 B, 1, 4, 16, 64 KiB; its bw is one
//! stream of back-to-back sends (no window, one ack at the end) at 64 KiB,
//! 256 KiB, 1 MiB and 4 MiB. Sizes it does not measure show as "-".
//!
//! Over ofi (`--transport ofi`), for each provider P of `--provider`
//! (default `tcp;ofi_rxm` and `shm`):
//! - rivet-ofi(P):   `RIVET_NETMOD=ofi RIVET_OFI_PROVIDER=P rivetrun -n 2 --bind-to core
//!   rivet-bench <bench> --json --max M` (no `RIVET_OFI_DOMAIN`: the
//!   provider's first domain, as fi_pingpong's)
//! - fi_pingpong(P): libfabric's own ping-pong (package libfabric-bin), the
//!   raw reference, latency and bw only, one server/client pair per size
//!   (`fi_pingpong` has only one size per run), run through `rivet-bench
//!   fi-pingpong` (module `fi_pingpong`): `taskset -c 1 fi_pingpong -p P -e
//!   rdm -B PORT -S SIZE -I ITERS` and `taskset -c 0 fi_pingpong -p P -e rdm
//!   -P PORT -S SIZE -I ITERS 127.0.0.1` (as the project's reference runs, and
//!   ITERS: 50000 up to 1 KiB, 5000 up to 64 KiB, 500 above), a free port
//!   per pair, at exactly the sizes asked for. Its latency is
//!   usec/xfer (half a round trip); its bw is ping-pong bandwidth, size /
//!   half round trip with one message in flight (fi_pingpong's MB/sec
//!   column). That is not the same kind of figure as Rivet's bw, a window
//!   of 64 messages in flight: the bw ratio compares a streaming rate with a
//!   ping-pong one.
//!
//! mr, bibw and startup over ofi are rivet-ofi only (fi_pingpong has none),
//! shown without a ratio.
//!
//! Ratios are Rivet's median over the other stack's. Over shm: rivet / best
//! peer. Over tcp, per size: each Rivet stack / best peer (the better of
//! MPICH and Open MPI), each Rivet stack / raw-tcp, and rivet-uring /
//! rivet-poll; the targets are 8-byte latency <= 1.1 x raw-tcp and 1 MiB bw
//! >= 0.9 x raw-tcp, and those two ratios say whether they are met.
//!
//! Over ofi, per size: rivet-ofi(P) / fi_pingpong(P), the same provider's;
//! the targets, at every size, are latency at most 1.1 x fi_pingpong's and
//! bw at least 1.0 x fi_pingpong's ping-pong MB/s, and the ratios say
//! whether they are met.
//!
//! startup: wall time of a whole N-rank job, launcher start to exit:
//! `rivetrun -n N rivet-bench startup` against `mpiexec.hydra -n N mpi_hello.mpich`
//! and `mpirun.openmpi --oversubscribe -n N mpi_hello.openmpi` (benches/peers/
//! `mpi_hello.c`: MPI_Init, MPI_Barrier, MPI_Finalize), default binding, one
//! untimed warm-up run of each first. Over tcp each stack gets its TCP
//! settings (the RIVET_* environment, UCX_TLS=tcp,self, --mca pml ob1 --mca
//! btl self,tcp); raw-tcp has no startup. Over ofi only rivet-ofi(P) runs
//! startup (with its RIVET_* settings).
//!
//! Benchmarks of scale (`--benches idle,fanin`, over tcp or ofi, Rivet
//! stacks only; jobs and verdicts in `scale_compare`): `latency-idle`, 8 B
//! latency with 0 and `--idle-peers` idle ranks connected, and `memory`,
//! rank 0's RSS in the same runs, keyed by idle peers; `fanin`, keyed by
//! `--senders`. Below every table whose Rivet runs report them: rank 0's
//! netmod system calls per message (median per stack).
//!
//! Order: for each rep, every bench, every stack (the stack order rotates by
//! one each rep). A stack whose launcher or compiler is missing is skipped
//! with a note; a failed run is reported and left out of the summary.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::fi_pingpong;
use crate::harness::{self, beside_me, find_program, Cell, CmdSpec, JobOutput, Order};
use crate::json;
use crate::peers::{self, Mpi, Transport};
use crate::report;
use crate::sizes::{self, Kind};
use crate::stats::{summarize, Summary};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Transport of the point-to-point runs and startup jobs; it decides the
    /// stacks and their command lines (listed in `compare --help`).
    #[arg(long, value_enum, default_value_t = Transport::Shm)]
    transport: Transport,
    /// libfabric providers for --transport ofi, comma-separated, as fi_info
    /// names them; each gets its rivet-ofi and fi_pingpong stacks.
    /// [default: tcp;ofi_rxm,shm]
    #[arg(long, value_delimiter = ',')]
    provider: Option<Vec<String>>,
    /// Benchmarks to compare: latency, bw, bibw (Rivet only), mr (no
    /// raw-tcp, no fi_pingpong), startup (no raw-tcp, no fi_pingpong);
    /// Rivet only, over tcp or ofi: idle (8 B latency with 0 and
    /// --idle-peers idle ranks connected; also a `memory` table, rank 0's
    /// RSS) and fanin (--senders ranks to one).
    #[arg(long, value_delimiter = ',', default_value = "latency,bw,mr")]
    benches: Vec<String>,
    /// Message sizes to report (latency, bw, bibw), comma-separated, with
    /// suffixes as --max; or `all` for every size up to 4 MiB. mr is always 8 B.
    /// raw-tcp measures only latency at 1,8,64,512,1K,4K,16K,64K and bw at
    /// 64K,256K,1M,4M; it shows "-" at other sizes. fi_pingpong runs one
    /// server/client pair per size listed (every ladder size for `all`).
    #[arg(long, default_value = "8,1024,65536,1048576,4194304")]
    sizes: String,
    /// Sizes as OSU's `-m MIN:MAX`: every ladder size in the range
    /// (instead of --sizes).
    #[arg(short = 'm', value_parser = crate::p2p::parse_range, value_name = "MIN:MAX",
          conflicts_with = "sizes")]
    range: Option<(Option<usize>, Option<usize>)>,
    /// Timed iterations per size for every stack (OSU's -i): round trips
    /// (latency) or windows (bw, mr); raw-tcp's bw sends ITERS x WINDOW
    /// messages. [default: by size, as `rivet-bench latency --help` says;
    /// fi_pingpong keeps its own]
    #[arg(short = 'i', long, value_name = "N")]
    iters: Option<u32>,
    /// Untimed iterations per size for Rivet and the MPI stacks (OSU's -x).
    #[arg(short = 'x', long, value_name = "N")]
    warmup: Option<u32>,
    /// Messages per window of bw and mr, for Rivet and the MPI stacks
    /// (OSU's -W).
    #[arg(short = 'W', long, value_name = "N")]
    window: Option<usize>,
    /// Rank counts for startup.
    #[arg(long, value_delimiter = ',', default_value = "2,8,32")]
    ranks: Vec<u32>,
    /// Idle peers of the `idle` bench (8 B latency with none and with N,
    /// and rank 0's RSS in the `memory` table).
    #[arg(long, default_value_t = 64, value_name = "N")]
    idle_peers: u32,
    /// Senders of the `fanin` bench.
    #[arg(long, default_value_t = 16, value_name = "N")]
    senders: u32,
    /// Runs per stack and benchmark.
    #[arg(long, default_value_t = 5)]
    reps: u32,
    /// Stacks to run. shm: rivet, rivet-mpi, mpich, openmpi. tcp: rivet-uring,
    /// rivet-poll, raw-tcp, mpich, openmpi (rivet = both Rivet stacks).
    /// ofi: rivet-ofi (or rivet), fi_pingpong, each for every --provider.
    /// Only when named (shm, tcp): openmpi-rivetrun, Open MPI's programs
    /// under rivetrun, in no ratio (compare it with openmpi, e.g. at
    /// --benches startup) [default: all of the transport's stacks]
    #[arg(long, value_delimiter = ',')]
    stacks: Option<Vec<String>>,
    /// Print one JSON object instead of the tables.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print CSV instead of the tables: one line per benchmark, size (or
    /// rank count) and stack: bench,unit,better,key,value,stack,median,min,
    /// max,runs,vs_best_peer,vs_raw (empty where there is none).
    #[arg(long)]
    csv: bool,
    /// Also draw the curves into FILE (.svg or .png; as `rivet-bench plot`).
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Build what is needed, print every run's command line (stdout) and exit
    /// without running anything.
    #[arg(long)]
    dry_run: bool,
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
    /// rivetcc for the rivet-mpi stack (default: the one beside this executable).
    #[arg(long)]
    rivetcc: Option<PathBuf>,
    /// C compiler for tcp_pingpong.c (raw-tcp).
    #[arg(long, default_value = "cc")]
    cc: String,
    /// libfabric's fi_pingpong (fi_pingpong stacks, --transport ofi).
    #[arg(long, default_value = fi_pingpong::DEFAULT_PROGRAM)]
    fi_pingpong: String,
    /// Directory with the peer programs' sources: mpi_p2p.c, mpi_hello.c
    /// and tcp_pingpong.c [default: benches/peers of this source tree].
    #[arg(long, value_name = "DIR")]
    peers_dir: Option<PathBuf>,
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
    /// 8 B latency keyed by idle peers (`latency --idle-peers`).
    Idle,
    /// Rank 0's RSS (KiB) in the idle runs, keyed by idle peers.
    Memory,
    /// `fanin`, keyed by senders.
    Fanin,
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

/// The stacks of each transport, in the order of the tables.
const SHM_STACKS: [&str; 4] = ["rivet", "rivet-mpi", "mpich", "openmpi"];
/// Run only when `--stacks` names them (shm and tcp): Open MPI's programs
/// under rivetrun's PMIx server, a launcher comparison rather than a peer.
const ASKED_ONLY_STACKS: [&str; 1] = ["openmpi-rivetrun"];
const TCP_STACKS: [&str; 5] = ["rivet-uring", "rivet-poll", "raw-tcp", "mpich", "openmpi"];
/// Over ofi, each of these for every provider: `rivet-ofi(shm)`.
const OFI_STACKS: [&str; 2] = ["rivet-ofi", "fi_pingpong"];
/// The providers of `--transport ofi` unless `--provider` says otherwise.
const DEFAULT_PROVIDERS: [&str; 2] = ["tcp;ofi_rxm", "shm"];

/// A stack's name and, over ofi, its provider: `rivet-ofi(shm)` is
/// (`rivet-ofi`, `shm`).
fn split_provider(name: &str) -> (&str, Option<&str>) {
    match name.strip_suffix(')').and_then(|n| n.split_once('(')) {
        Some((base, provider)) => (base, Some(provider)),
        None => (name, None),
    }
}

/// The providers to compare over (`--provider`), checked.
fn select_providers(transport: Transport, asked: Option<&[String]>) -> Result<Vec<String>, String> {
    let Some(asked) = asked else {
        return Ok(DEFAULT_PROVIDERS.map(String::from).to_vec());
    };
    if transport != Transport::Ofi {
        return Err("--provider applies to --transport ofi only".into());
    }
    let mut providers: Vec<String> = Vec::new();
    for p in asked.iter().map(|p| p.trim()) {
        if p.is_empty() || p.contains(['(', ')']) {
            return Err(format!(
                "--provider: {p:?} is not a libfabric provider name"
            ));
        }
        if !providers.iter().any(|q| q == p) {
            providers.push(p.to_string());
        }
    }
    Ok(providers)
}

/// The stacks `--stacks` asks for (all of the transport's if not given), in
/// table order; over tcp, `rivet` stands for both Rivet stacks; over ofi,
/// each stack runs for every provider (`rivet` = `rivet-ofi`).
fn select_stacks(
    transport: Transport,
    asked: Option<&[String]>,
    providers: &[String],
) -> Result<Vec<String>, String> {
    let known: &[&'static str] = match transport {
        Transport::Shm => &SHM_STACKS,
        Transport::Tcp => &TCP_STACKS,
        Transport::Ofi => &OFI_STACKS,
    };
    let chosen: Vec<&'static str> = match asked {
        None => known.to_vec(),
        Some(asked) => {
            let mut chosen = Vec::new();
            for name in asked.iter().map(|s| s.trim()) {
                let matched: Vec<&'static str> = match (transport, name) {
                    (Transport::Tcp, "rivet") => vec!["rivet-uring", "rivet-poll"],
                    (Transport::Ofi, "rivet") => vec!["rivet-ofi"],
                    (Transport::Shm | Transport::Tcp, _) if ASKED_ONLY_STACKS.contains(&name) => {
                        ASKED_ONLY_STACKS
                            .iter()
                            .copied()
                            .filter(|&k| k == name)
                            .collect()
                    }
                    _ => known.iter().copied().filter(|&k| k == name).collect(),
                };
                if matched.is_empty() {
                    return Err(format!(
                        "unknown stack {name:?} for --transport {}: {}",
                        transport.name(),
                        known.join(", ")
                    ));
                }
                chosen.extend(matched);
            }
            known
                .iter()
                .chain(ASKED_ONLY_STACKS.iter())
                .copied()
                .filter(|k| chosen.contains(k))
                .collect()
        }
    };
    Ok(match transport {
        Transport::Ofi => providers
            .iter()
            .flat_map(|p| chosen.iter().map(move |s| format!("{s}({p})")))
            .collect(),
        _ => chosen.into_iter().map(String::from).collect(),
    })
}

/// What a stack is to the ratios, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// rivet, rivet-uring, rivet-poll, rivet-ofi(P): the numerator of every ratio.
    Rivet,
    /// mpich, openmpi: the best of them is "best peer".
    Peer,
    /// raw-tcp, fi_pingpong(P): the limit, a ratio of its own.
    Raw,
    /// openmpi-rivetrun: measured and shown, in no ratio.
    Other,
}

fn role(name: &str) -> Role {
    if ASKED_ONLY_STACKS.contains(&name) {
        Role::Other
    } else if name.starts_with("rivet") {
        Role::Rivet
    } else if name.starts_with("raw") || name.starts_with("fi_pingpong") {
        Role::Raw
    } else {
        Role::Peer
    }
}

/// One stack of the comparison: a name and how to run it, or why not.
struct StackEntry {
    name: String,
    /// How its runs look, or why it is skipped.
    status: Result<StackRun, String>,
}

enum StackRun {
    Rivet {
        rivetrun: PathBuf,
        bench: PathBuf,
        /// Set for rivetrun (which passes it on to the ranks).
        env: Vec<(&'static str, String)>,
    },
    Mpi(peers::Stack, Transport),
    /// tcp_pingpong.
    RawTcp(PathBuf),
    /// fi_pingpong pairs, run by `wrapper fi-pingpong` (this executable).
    FiPingpong {
        wrapper: PathBuf,
        program: PathBuf,
        provider: String,
        /// `fi-pingpong --timeout`: a little under compare's, so that it
        /// stops its pairs itself before its job is killed.
        timeout: u64,
    },
}

/// Iteration options every stack's p2p run is given (`-i`, `-x`, `-W`);
/// `None`: the program's defaults.
#[derive(Debug, Default, Clone, Copy)]
struct Loops {
    iters: Option<u32>,
    warmup: Option<u32>,
    window: Option<usize>,
}

impl Loops {
    /// `[flag, value]` pairs for the options set, `flags` naming
    /// (iters, warmup, window); window only where the bench has one.
    fn args(&self, kind: Kind, flags: [&str; 3]) -> Vec<String> {
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

impl StackRun {
    /// `p2p_with` the programs' own iteration counts.
    #[cfg(test)]
    fn p2p(&self, kind: Kind, max_size: usize, sizes: &[u64]) -> Option<CmdSpec> {
        self.p2p_with(kind, max_size, sizes, &Loops::default())
    }

    /// The job for one p2p benchmark, or None if the stack has no such
    /// bench. `sizes` are those to report: Rivet's and the MPI stacks'
    /// runs go up the ladder to `max_size`, fi_pingpong runs those only.
    fn p2p_with(
        &self,
        kind: Kind,
        max_size: usize,
        sizes: &[u64],
        loops: &Loops,
    ) -> Option<CmdSpec> {
        match self {
            StackRun::Rivet {
                rivetrun,
                bench,
                env,
            } => {
                let spec = rivet_cmd(rivetrun, env)
                    .args(["-n", "2", "--bind-to", "core"])
                    .arg(bench)
                    .args([kind.name(), "--json"])
                    .args(loops.args(kind, ["--iters", "--warmup", "--window"]));
                Some(if kind == Kind::Mr {
                    spec
                } else {
                    spec.args(["--max", &max_size.to_string()])
                })
            }
            StackRun::Mpi(s, transport) => {
                let b = peers::pingpong_bench(kind.name())?;
                let max = if kind == Kind::Mr { 8 } else { max_size };
                Some(
                    s.mpi
                        .pingpong(&s.launcher, s.pingpong.as_ref()?, b, max, *transport)
                        .args(loops.args(kind, ["-i", "-x", "-W"])),
                )
            }
            StackRun::RawTcp(program) => {
                let (b, _) = peers::raw_tcp_bench(kind.name())?;
                let spec = CmdSpec::new(program).arg(b);
                // Its -i counts round trips (lat) or messages (bw).
                let per_iter = if kind == Kind::Bw {
                    loops.window.unwrap_or(sizes::WINDOW) as u64
                } else {
                    1
                };
                Some(match loops.iters {
                    Some(n) => spec.args(["-i".to_string(), (u64::from(n) * per_iter).to_string()]),
                    None => spec,
                })
            }
            StackRun::FiPingpong {
                wrapper,
                program,
                provider,
                timeout,
            } => {
                if !matches!(kind, Kind::Latency | Kind::Bw) || sizes.is_empty() {
                    return None;
                }
                let sizes: Vec<String> = sizes.iter().map(u64::to_string).collect();
                Some(
                    CmdSpec::new(wrapper)
                        .args(["fi-pingpong", "--provider", provider])
                        .args(["--sizes", &sizes.join(",")])
                        .arg("--program")
                        .arg(program)
                        .args(["--timeout", &timeout.to_string()]),
                )
            }
        }
    }

    /// fi_pingpong's server and client command lines, one pair per size
    /// (port shown as PORT: each pair gets a free one when it runs).
    fn fi_pairs(&self, sizes: &[u64]) -> Vec<(CmdSpec, CmdSpec)> {
        match self {
            StackRun::FiPingpong {
                program, provider, ..
            } => sizes
                .iter()
                .map(|&s| {
                    fi_pingpong::pair(program, provider, "PORT", s, fi_pingpong::iterations(s))
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    fn startup(&self, n: u32) -> Option<CmdSpec> {
        match self {
            StackRun::Rivet {
                rivetrun,
                bench,
                env,
            } => Some(
                rivet_cmd(rivetrun, env)
                    .args(["-n", &n.to_string()])
                    .arg(bench)
                    .arg("startup"),
            ),
            StackRun::Mpi(s, transport) => Some(
                s.mpi
                    .startup(&s.launcher, n, *transport)
                    .arg(s.hello.as_ref()?),
            ),
            StackRun::RawTcp(_) | StackRun::FiPingpong { .. } => None,
        }
    }

    /// The only sizes this stack measures for `kind`, if it cannot do others.
    fn fixed_sizes(&self, kind: Kind) -> Option<&'static [u64]> {
        match self {
            StackRun::RawTcp(_) => peers::raw_tcp_bench(kind.name()).map(|(_, s)| s),
            _ => None,
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
    /// Stacks that measure only these keys (raw-tcp): "-" at the others.
    only: BTreeMap<usize, &'static [u64]>,
    samples: BTreeMap<u64, BTreeMap<usize, Vec<f64>>>,
    /// Rank 0's netmod system calls per message, per (key, stack), where
    /// the run reported them.
    calls: BTreeMap<u64, BTreeMap<usize, Vec<f64>>>,
}

impl Table {
    fn name(&self) -> &'static str {
        match self.bench {
            Bench::P2p(k) => k.name(),
            Bench::Startup => "startup",
            Bench::Idle => "latency-idle",
            Bench::Memory => "memory",
            Bench::Fanin => "fanin",
        }
    }

    fn unit(&self) -> &'static str {
        match self.bench {
            Bench::P2p(k) => k.unit(),
            Bench::Startup => "s",
            Bench::Idle => "us",
            Bench::Memory => "KiB",
            Bench::Fanin => "msg/s",
        }
    }

    fn lower_is_better(&self) -> bool {
        match self.bench {
            Bench::P2p(k) => k.lower_is_better(),
            Bench::Startup | Bench::Idle | Bench::Memory => true,
            Bench::Fanin => false,
        }
    }

    fn key_name(&self) -> &'static str {
        match self.bench {
            Bench::P2p(_) => "size",
            Bench::Startup => "ranks",
            Bench::Idle | Bench::Memory => "idle_peers",
            Bench::Fanin => "senders",
        }
    }

    fn wants(&self, key: u64) -> bool {
        self.keys.as_ref().is_none_or(|k| k.contains(&key))
    }

    /// The sizes a p2p bench reports (fi_pingpong runs exactly these): the
    /// keys, or with `--sizes all` the bench's ladder up to `max_size`.
    fn run_sizes(&self, max_size: usize) -> Vec<u64> {
        match (&self.keys, self.bench) {
            (Some(k), _) => k.clone(),
            (None, Bench::P2p(kind)) => sizes::sizes_for(kind, None, Some(max_size))
                .unwrap_or_default()
                .into_iter()
                .map(|s| s as u64)
                .collect(),
            (None, _) => Vec::new(),
        }
    }

    /// Whether `stack` measures `key` at all (a missing value is a failure).
    fn measures(&self, stack: usize, key: u64) -> bool {
        self.only.get(&stack).is_none_or(|k| k.contains(&key))
    }

    fn add_calls(&mut self, key: u64, stack: usize, calls: f64) {
        if self.wants(key) {
            self.calls
                .entry(key)
                .or_default()
                .entry(stack)
                .or_default()
                .push(calls);
        }
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
    /// idle, fanin: the run's one row goes under this key.
    key: Option<u64>,
    /// idle: the table its `memory` line goes to.
    memory: Option<usize>,
}

pub fn run(args: Args) -> Result<(), String> {
    if args.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    if let Some(path) = &args.plot {
        crate::plot::format_of(path)?;
    }
    if args.iters == Some(0) || args.window == Some(0) {
        return Err("--iters and --window must be at least 1".into());
    }
    let loops = Loops {
        iters: args.iters,
        warmup: args.warmup,
        window: args.window,
    };
    let size_sel = match args.range {
        Some((min, max)) => {
            let (min, max) = (min.unwrap_or(0), max.unwrap_or(sizes::DEFAULT_MAX));
            let list = sizes::size_list(min, max);
            if list.is_empty() {
                return Err(format!("-m {min}:{max}: no ladder size in the range"));
            }
            SizeSel::List(list)
        }
        None => parse_sizes(&args.sizes)?,
    };
    let transport = args.transport;
    let mut benches = Vec::new();
    for b in &args.benches {
        let bench = match b.trim() {
            "startup" => Bench::Startup,
            "idle" if transport == Transport::Shm => {
                return Err("idle needs --transport tcp or ofi (a netmod between the ranks)".into())
            }
            "fanin" => Bench::Fanin,
            "idle" => Bench::Idle,
            other => Bench::P2p(Kind::from_name(other).ok_or_else(|| {
                format!("unknown bench {other:?}: latency, bw, bibw, mr, startup, idle or fanin")
            })?),
        };
        if !benches.contains(&bench) {
            benches.push(bench);
            if bench == Bench::Idle {
                benches.push(Bench::Memory);
            }
        }
    }
    if benches.contains(&Bench::Startup) && (args.ranks.is_empty() || args.ranks.contains(&0)) {
        return Err("--ranks must list rank counts of at least 1".into());
    }
    let want_pingpong = benches
        .iter()
        .any(|b| matches!(b, Bench::P2p(k) if *k != Kind::Bibw));
    let want_hello = benches.contains(&Bench::Startup);
    let want_raw = benches
        .iter()
        .any(|b| matches!(b, Bench::P2p(Kind::Latency | Kind::Bw)));

    let providers = select_providers(transport, args.provider.as_deref())?;
    let names = select_stacks(transport, args.stacks.as_deref(), &providers)?;
    // The stacks, in a fixed order: Rivet first.
    let build_dir = args
        .build_dir
        .clone()
        .unwrap_or_else(peers::default_build_dir);
    let peers_dir = args
        .peers_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(peers::DEFAULT_PEERS_DIR));
    let mut stacks = Vec::new();
    for name in names {
        let tcp = |backend: &str| {
            vec![
                ("RIVET_NETMOD", "tcp".to_string()),
                ("RIVET_TCP_BACKEND", backend.to_string()),
            ]
        };
        let status = match split_provider(&name) {
            ("rivet", None) => rivet_stack(&args, Vec::new()),
            ("rivet-uring", None) => rivet_stack(&args, tcp("uring")),
            ("rivet-poll", None) => rivet_stack(&args, tcp("poll")),
            ("raw-tcp" | "fi_pingpong", _) if !want_raw => Err("it has only latency and bw".into()),
            ("raw-tcp", None) => {
                peers::prepare_raw_tcp(&args.cc, &peers_dir, &build_dir).map(StackRun::RawTcp)
            }
            ("rivet-ofi", Some(provider)) => rivet_stack(
                &args,
                vec![
                    ("RIVET_NETMOD", "ofi".to_string()),
                    ("RIVET_OFI_PROVIDER", provider.to_string()),
                ],
            ),
            ("fi_pingpong", Some(provider)) => fi_pingpong_stack(&args, provider),
            ("mpich", None) => peers::prepare(
                Mpi::Mpich,
                &args.hydra,
                &args.mpicc_mpich,
                &peers_dir,
                &build_dir,
                want_pingpong,
                want_hello,
            )
            .map(|s| StackRun::Mpi(s, transport)),
            ("rivet-mpi", None) => {
                rivet_mpi_stack(&args, &peers_dir, &build_dir, want_pingpong, want_hello)
                    .map(|s| StackRun::Mpi(s, transport))
            }
            ("openmpi-rivetrun", None) => peers::prepare(
                Mpi::OpenMpiRivetrun,
                &args
                    .rivetrun
                    .clone()
                    .unwrap_or_else(|| beside_me("rivetrun"))
                    .to_string_lossy(),
                &args.mpicc_openmpi,
                &peers_dir,
                &build_dir,
                want_pingpong,
                want_hello,
            )
            .map(|s| StackRun::Mpi(s, transport)),
            ("openmpi", None) => peers::prepare(
                Mpi::OpenMpi,
                &args.ompi_mpirun,
                &args.mpicc_openmpi,
                &peers_dir,
                &build_dir,
                want_pingpong,
                want_hello,
            )
            .map(|s| StackRun::Mpi(s, transport)),
            _ => Err(format!("unknown stack {name}")),
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
            only: BTreeMap::new(),
            samples: BTreeMap::new(),
            calls: BTreeMap::new(),
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
                let run_sizes = table.run_sizes(max_size);
                for (i, s) in stacks.iter().enumerate() {
                    let Ok(run) = &s.status else { continue };
                    let Some(spec) = run.p2p_with(kind, max_size, &run_sizes, &loops) else {
                        continue;
                    };
                    if let Some(fixed) = run.fixed_sizes(kind) {
                        if !fixed.iter().any(|&k| table.wants(k)) {
                            eprintln!(
                                "rivet-bench: {} left out of {}: it measures only sizes {}",
                                s.name,
                                kind.name(),
                                fixed
                                    .iter()
                                    .map(u64::to_string)
                                    .collect::<Vec<_>>()
                                    .join(",")
                            );
                            continue;
                        }
                        table.only.insert(i, fixed);
                    }
                    table.stacks.push(i);
                    cells.push(Cell {
                        label: format!("{}/{} ({})", kind.name(), s.name, size_span(&run_sizes)),
                        spec,
                        warmup: false,
                    });
                    tgts.push(CellTarget {
                        table: t,
                        stack: i,
                        wall_key: None,
                        key: None,
                        memory: None,
                    });
                }
                groups.push(cells);
                targets.push(tgts);
            }
            Bench::Memory => {
                // Filled by the idle runs.
                table.stacks = stacks
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| matches!(s.status, Ok(StackRun::Rivet { .. })))
                    .map(|(i, _)| i)
                    .collect();
                table.keys = Some(vec![0, u64::from(args.idle_peers)]);
                groups.push(Vec::new());
                targets.push(Vec::new());
            }
            Bench::Idle | Bench::Fanin => {
                let keys: Vec<u64> = if bench == Bench::Idle {
                    vec![0, u64::from(args.idle_peers)]
                } else {
                    vec![u64::from(args.senders)]
                };
                table.keys = Some(keys.clone());
                let mut cells = Vec::new();
                let mut tgts = Vec::new();
                for (i, s) in stacks.iter().enumerate() {
                    let Ok(StackRun::Rivet {
                        rivetrun,
                        bench: program,
                        env,
                    }) = &s.status
                    else {
                        continue;
                    };
                    table.stacks.push(i);
                    for &k in &keys {
                        let kind = if bench == Bench::Idle {
                            Kind::Latency
                        } else {
                            Kind::Mr
                        };
                        let spec = crate::scale_compare::spec(
                            rivet_cmd(rivetrun, env),
                            program,
                            bench == Bench::Idle,
                            k,
                            loops.args(kind, ["--iters", "--warmup", "--window"]),
                        );
                        cells.push(Cell {
                            label: format!("{} {k}/{}", table.name(), s.name),
                            spec,
                            warmup: false,
                        });
                        tgts.push(CellTarget {
                            table: t,
                            stack: i,
                            wall_key: None,
                            key: Some(k),
                            // The memory table follows the idle one.
                            memory: (bench == Bench::Idle).then_some(t + 1),
                        });
                    }
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
                            key: None,
                            memory: None,
                        });
                    }
                    groups.push(cells);
                    targets.push(tgts);
                }
            }
        }
        tables.push(table);
    }

    if args.dry_run {
        for (g, cells) in groups.iter().enumerate() {
            for (c, cell) in cells.iter().enumerate() {
                println!("{}: {}", cell.label, cell.spec);
                let target = targets[g][c];
                if let Ok(run) = &stacks[target.stack].status {
                    let sizes = tables[target.table].run_sizes(max_size);
                    for (server, client) in run.fi_pairs(&sizes) {
                        println!("  server: {server}\n  client: {client}");
                    }
                }
            }
        }
        return Ok(());
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

    let names: Vec<&str> = stacks.iter().map(|s| s.name.as_str()).collect();
    let skipped: Vec<(&str, &str)> = stacks
        .iter()
        .filter_map(|s| {
            s.status
                .as_ref()
                .err()
                .map(|w| (s.name.as_str(), w.as_str()))
        })
        .collect();
    let doc = json_doc(transport, &tables, &names, &skipped, args.reps, &loads);
    if let Some(path) = &args.plot {
        // A plot that cannot be drawn must not cost the tables.
        if let Err(e) = crate::plot::plot_json(&doc, path) {
            eprintln!("rivet-bench: no plot: {e}");
        }
    }
    if args.json {
        println!("{doc}");
    } else if args.csv {
        print!("{}", csv_doc(&tables, &names));
    } else {
        let text = text_report(transport, &tables, &names, &skipped, args.reps, &loads);
        match args.window {
            // The titles name the default window.
            Some(w) => print!(
                "{}",
                text.replace("window of 64", &format!("window of {w}"))
            ),
            None => print!("{text}"),
        }
    }
    Ok(())
}

/// "8 B-4 MiB" (or "8 B"): the sizes a run covers, for progress lines.
fn size_span(sizes: &[u64]) -> String {
    let fmt = |s: u64| match s {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    };
    match (sizes.iter().min(), sizes.iter().max()) {
        (Some(&a), Some(&b)) if a == b => fmt(a),
        (Some(&a), Some(&b)) => format!("{}-{}", fmt(a), fmt(b)),
        _ => "all sizes".into(),
    }
}

/// `rivetrun` with the stack's `RIVET_*` settings.
fn rivet_cmd(rivetrun: &std::path::Path, env: &[(&'static str, String)]) -> CmdSpec {
    env.iter()
        .fold(CmdSpec::new(rivetrun), |spec, (k, v)| spec.env(k, v))
}

/// fi_pingpong over `provider`, run through this executable's `fi-pingpong`.
fn fi_pingpong_stack(args: &Args, provider: &str) -> Result<StackRun, String> {
    let program = find_program(&args.fi_pingpong)
        .ok_or_else(|| format!("{} not found (package libfabric-bin)", args.fi_pingpong))?;
    if find_program("taskset").is_none() {
        return Err("taskset not found (package util-linux)".into());
    }
    let wrapper =
        std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    Ok(StackRun::FiPingpong {
        wrapper,
        program,
        provider: provider.to_string(),
        timeout: args.timeout.saturating_sub(10).max(1),
    })
}

/// The peers' programs built with `rivetcc` (librivetmpi on librivet)
/// and run under `rivetrun`, as the MPI peers run theirs.
fn rivet_mpi_stack(
    args: &Args,
    peers_dir: &std::path::Path,
    build_dir: &std::path::Path,
    want_pingpong: bool,
    want_hello: bool,
) -> Result<peers::Stack, String> {
    let path = |given: &Option<PathBuf>, name: &str| {
        given
            .clone()
            .unwrap_or_else(|| beside_me(name))
            .to_string_lossy()
            .into_owned()
    };
    let rivetcc = path(&args.rivetcc, "rivetcc");
    // The programs link librivetmpi by rpath from rivetcc's directory, so
    // each rivetcc (debug, release, installed) gets its own build dir.
    let dir = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        find_program(&rivetcc).unwrap_or_default().hash(&mut h);
        build_dir.join(format!("rivet-mpi-{:016x}", h.finish()))
    };
    // A program older than the library it was built against is rebuilt
    // (mpi.h may have changed with it).
    let lib = find_program(&rivetcc)
        .and_then(|cc| cc.parent().map(|d| d.to_path_buf()))
        .map(|d| {
            let beside = d.join("librivetmpi.so");
            if beside.exists() {
                beside
            } else {
                d.join("../lib/librivetmpi.so")
            }
        });
    let built = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if let Some(lib_time) = lib.as_deref().and_then(built) {
        for stem in ["mpi_pingpong.rivet-mpi", "hello.rivet-mpi"] {
            let prog = dir.join(stem);
            if built(&prog).is_some_and(|t| t < lib_time) {
                let _ = std::fs::remove_file(&prog);
            }
        }
    }
    peers::prepare(
        Mpi::Rivet,
        &path(&args.rivetrun, "rivetrun"),
        &rivetcc,
        peers_dir,
        &dir,
        want_pingpong,
        want_hello,
    )
    .map_err(|e| format!("{e} (build it: cargo build --release -p rivet-mpi -p rivet-capi)"))
}

fn rivet_stack(args: &Args, env: Vec<(&'static str, String)>) -> Result<StackRun, String> {
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
    Ok(StackRun::Rivet {
        rivetrun,
        bench,
        env,
    })
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
    if let Some(key) = target.key {
        let name = if table.bench == Bench::Idle {
            Kind::Latency.name()
        } else {
            table.name()
        };
        let rows = report::parse_json_rows(&out.stdout, name)?;
        let &(_, v, calls) = rows.first().ok_or("no row in the output")?;
        table.add(key, target.stack, v);
        if let Some(c) = calls {
            table.add_calls(key, target.stack, c);
        }
        let unit = table.unit();
        let mut note = format!(" — {}", fmt_value(unit, v));
        if let Some(m) = target.memory {
            let mem = report::parse_json_rows(&out.stdout, "memory")?;
            let &(_, rss, _) = mem.first().ok_or("no memory row in the output")?;
            tables[m].add(key, target.stack, rss);
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

/// One row of a table, summarised: per stack, then the ratios.
struct RowSummary {
    key: u64,
    per_stack: Vec<(usize, Option<(Summary, usize)>)>,
    /// The first Rivet stack's median / the best peer's median, and that
    /// peer (shm's rivet/best column).
    ratio: Option<(f64, usize)>,
    /// Every Rivet stack's ratios, in table order.
    rivets: Vec<RivetRatios>,
    /// rivet-uring's median / rivet-poll's.
    uring_over_poll: Option<f64>,
    /// rivet-mpi's median / rivet's: what the MPI layer costs.
    mpi_over_rivet: Option<f64>,
}

/// One Rivet stack's medians over the others'.
#[derive(Debug, Clone, Copy, PartialEq)]
struct RivetRatios {
    stack: usize,
    /// Over the best peer's (MPICH or Open MPI), and that peer.
    vs_best: Option<(f64, usize)>,
    /// Over its raw reference's: raw-tcp's, or over ofi the same
    /// provider's fi_pingpong.
    vs_raw: Option<f64>,
}

/// What a Rivet stack's ratio to its raw reference should be at a size.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    AtMost(f64),
    AtLeast(f64),
}

impl Target {
    fn met(self, ratio: f64) -> bool {
        match self {
            Target::AtMost(x) => ratio <= x,
            Target::AtLeast(x) => ratio >= x,
        }
    }

    fn describe(self) -> String {
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
fn raw_target(transport: Transport, bench: Bench, key: u64) -> Option<Target> {
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
fn mpi_target(bench: Bench, key: u64) -> Option<Target> {
    match (bench, key) {
        (Bench::P2p(Kind::Latency), 8) => Some(Target::AtMost(1.05)),
        (Bench::P2p(Kind::Mr), 8) => Some(Target::AtLeast(0.95)),
        _ => None,
    }
}

/// rivet-mpi / rivet for the text table, with the target where there is one.
fn fmt_mpi_ratio(bench: Bench, key: u64, ratio: Option<f64>) -> String {
    match (ratio, mpi_target(bench, key)) {
        (Some(v), Some(t)) => format!(
            "{v:.2} {} ({})",
            if t.met(v) { "met" } else { "MISSED" },
            t.describe()
        ),
        (Some(v), None) => format!("{v:.2}"),
        (None, _) => "-".into(),
    }
}

fn summarize_table(table: &Table, stacks: &[&str]) -> Vec<RowSummary> {
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

fn bench_title(transport: Transport, table: &Table, stacks: &[&str]) -> String {
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
fn text_report(
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
    for table in tables {
        out += &format!("\n# {}\n", bench_title(transport, table, stacks));
        let rows = summarize_table(table, stacks);
        let mut grid: Vec<Vec<String>> = Vec::new();
        let key_header = if table.key_name() == "size" {
            "Size".to_string()
        } else {
            "N".to_string()
        };
        let mut header = vec![key_header.clone()];
        header.extend(table.stacks.iter().map(|&i| stacks[i].to_string()));
        let has_ratio = transport == Transport::Shm
            && table.stacks.len() > 1
            && stacks.first() == Some(&"rivet");
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
                    None => "failed".into(),
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
        out += &scale_notes(table, stacks, &rows);
    }
    out
}

/// Below a table: the verdicts of the benchmarks of scale (idle peers /
/// none, memory per idle peer, fanin uring / poll) and rank 0's netmod
/// system calls per message, where the runs reported them.
fn scale_notes(table: &Table, stacks: &[&str], rows: &[RowSummary]) -> String {
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
        Bench::P2p(_) | Bench::Startup => {}
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

/// Over tcp and ofi, the ratios of a table, below its values: per Rivet
/// stack /best and /raw-tcp or /fi_pingpong (with the target where there
/// is one), and uring/poll.
fn ratio_grid(
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
                        (Some(v), Some(t)) => format!(
                            "{v:.2} {} ({})",
                            if t.met(v) { "met" } else { "MISSED" },
                            t.describe()
                        ),
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

/// The CSV report (`--csv`): a header, then per table, key and stack that
/// measures it, the summary; a Rivet stack's row adds its ratio to the best
/// peer and to its raw reference.
fn csv_doc(tables: &[Table], stacks: &[&str]) -> String {
    let mut out =
        String::from("bench,unit,better,key,value,stack,median,min,max,runs,vs_best_peer,vs_raw\n");
    let opt = |v: Option<f64>| v.map_or_else(String::new, json::num);
    for table in tables {
        let better = if table.lower_is_better() {
            "lower"
        } else {
            "higher"
        };
        for r in summarize_table(table, stacks) {
            for (i, s) in &r.per_stack {
                if s.is_none() && !table.measures(*i, r.key) {
                    continue;
                }
                let (med, min, max, runs) = match s {
                    Some((s, n)) => (
                        json::num(s.median),
                        json::num(s.min),
                        json::num(s.max),
                        n.to_string(),
                    ),
                    None => (String::new(), String::new(), String::new(), "0".into()),
                };
                let ratios = r.rivets.iter().find(|x| x.stack == *i);
                out += &format!(
                    "{},{},{better},{},{},{},{med},{min},{max},{runs},{},{}\n",
                    table.name(),
                    table.unit(),
                    table.key_name(),
                    r.key,
                    csv_field(stacks[*i]),
                    opt(ratios.and_then(|x| x.vs_best.map(|b| b.0))),
                    opt(ratios.and_then(|x| x.vs_raw)),
                );
            }
        }
    }
    out
}

/// A CSV field, quoted if it holds a comma, quote or semicolon.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', ';']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// A target in JSON: `{"at_most":1.1}`, `{"at_least":0.9}` or `null`.
fn json_target(target: Option<Target>) -> String {
    match target {
        Some(Target::AtMost(x)) => format!("{{\"at_most\":{}}}", json::num(x)),
        Some(Target::AtLeast(x)) => format!("{{\"at_least\":{}}}", json::num(x)),
        None => "null".into(),
    }
}

/// The JSON report:
/// `{"benchmark":"compare","reps":R,"stacks":["rivet",...],"skipped":[{"stack":..,"why":..}],
///   "other_load_pct":{"median":..,"max":..}|null,"failed_runs":F,
///   "results":[{"bench":"latency","unit":"us","better":"lower","rows":[
///     {"size":8,"stacks":{"rivet":{"median":..,"min":..,"max":..,"runs":5}|null,...},
///      "best_peer":"mpich"|null,"ratio":0.9|null}]}]}`
/// (startup rows have "ranks" instead of "size"). With the rivet-mpi stack
/// each row also has `"mpi_over_rivet":..|null,"mpi_target_met":bool|null`.
///
/// Over tcp, `"transport":"tcp"` follows "benchmark", and each row has,
/// instead of "best_peer" and "ratio":
/// `"ratios":{"rivet-uring":{"best_peer":"mpich"|null,"vs_best_peer":..|null,
///   "vs_raw_tcp":..|null,"target_met":true|false|null},"rivet-poll":{..}},
///  "uring_over_poll":..|null,"raw_tcp_target":{"at_most":1.1}|{"at_least":0.9}|null`;
/// a stack that does not measure a size at all (raw-tcp) is left out of
/// that row's "stacks" (a failed one is null).
///
/// Over ofi, `"transport":"ofi"`, stacks are named `rivet-ofi(P)` and
/// `fi_pingpong(P)` per provider P, and each row has instead
/// `"ratios":{"rivet-ofi(P)":{"vs_fi_pingpong":..|null,"target_met":true|false|null},..},
///  "fi_pingpong_target":{"at_most":1.1}|{"at_least":1}|null`
/// (rivet-ofi(P) over the same provider's fi_pingpong; mr, bibw and
/// startup rows have no ratio and a null target).
fn json_doc(
    transport: Transport,
    tables: &[Table],
    stacks: &[&str],
    skipped: &[(&str, &str)],
    reps: u32,
    loads: &harness::Loads,
) -> String {
    let opt = |v: Option<f64>| v.map_or_else(|| "null".to_string(), json::num);
    let results: Vec<String> = tables
        .iter()
        .map(|table| {
            let rows: Vec<String> = summarize_table(table, stacks)
                .iter()
                .map(|r| {
                    let per: Vec<String> = r
                        .per_stack
                        .iter()
                        .filter(|(i, s)| s.is_some() || table.measures(*i, r.key))
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
                    let ratios = match transport {
                        Transport::Ofi => {
                            let target = raw_target(transport, table.bench, r.key);
                            let each: Vec<String> = r
                                .rivets
                                .iter()
                                .map(|x| {
                                    let met = match (x.vs_raw, target) {
                                        (Some(v), Some(t)) => t.met(v).to_string(),
                                        _ => "null".into(),
                                    };
                                    format!(
                                        "{}:{{\"vs_fi_pingpong\":{},\"target_met\":{met}}}",
                                        json::string(stacks[x.stack]),
                                        opt(x.vs_raw)
                                    )
                                })
                                .collect();
                            format!(
                                "\"ratios\":{{{}}},\"fi_pingpong_target\":{}",
                                each.join(","),
                                json_target(target)
                            )
                        }
                        Transport::Shm => {
                            let (peer, ratio) = match r.ratio {
                                Some((x, p)) => (json::string(stacks[p]), json::num(x)),
                                None => ("null".into(), "null".into()),
                            };
                            // With the MPI layer's stack: its cost over the engine.
                            let layer = if stacks.contains(&"rivet-mpi") {
                                let met = match (r.mpi_over_rivet, mpi_target(table.bench, r.key)) {
                                    (Some(v), Some(t)) => t.met(v).to_string(),
                                    _ => "null".into(),
                                };
                                format!(
                                    ",\"mpi_over_rivet\":{},\"mpi_target_met\":{met}",
                                    opt(r.mpi_over_rivet)
                                )
                            } else {
                                String::new()
                            };
                            format!("\"best_peer\":{peer},\"ratio\":{ratio}{layer}")
                        }
                        Transport::Tcp => {
                            let target = raw_target(transport, table.bench, r.key);
                            let each: Vec<String> = r
                                .rivets
                                .iter()
                                .map(|x| {
                                    let peer = x
                                        .vs_best
                                        .map_or_else(|| "null".into(), |(_, p)| json::string(stacks[p]));
                                    let met = match (x.vs_raw, target) {
                                        (Some(v), Some(t)) => t.met(v).to_string(),
                                        _ => "null".into(),
                                    };
                                    format!(
                                        "{}:{{\"best_peer\":{peer},\"vs_best_peer\":{},\"vs_raw_tcp\":{},\"target_met\":{met}}}",
                                        json::string(stacks[x.stack]),
                                        opt(x.vs_best.map(|b| b.0)),
                                        opt(x.vs_raw)
                                    )
                                })
                                .collect();
                            format!(
                                "\"ratios\":{{{}}},\"uring_over_poll\":{},\"raw_tcp_target\":{}",
                                each.join(","),
                                opt(r.uring_over_poll),
                                json_target(target)
                            )
                        }
                    };
                    // Rank 0's netmod system calls per message, median per stack.
                    let calls: Vec<String> = table
                        .calls
                        .get(&r.key)
                        .into_iter()
                        .flatten()
                        .filter_map(|(i, v)| {
                            summarize(v).map(|c| {
                                format!("{}:{}", json::string(stacks[*i]), json::num(c.median))
                            })
                        })
                        .collect();
                    let calls = if calls.is_empty() {
                        String::new()
                    } else {
                        format!(",\"syscalls_per_msg\":{{{}}}", calls.join(","))
                    };
                    format!(
                        "{{\"{}\":{},\"stacks\":{{{}}},{ratios}{calls}}}",
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
    let transport = match transport {
        Transport::Shm => String::new(),
        t => format!(",\"transport\":{}", json::string(t.name())),
    };
    format!(
        "{{\"benchmark\":\"compare\"{transport},\"reps\":{reps},\"stacks\":[{}],\"skipped\":[{}],\"other_load_pct\":{load},\"failed_runs\":{},\"results\":[{}]}}",
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
            only: BTreeMap::new(),
            samples: BTreeMap::new(),
            calls: BTreeMap::new(),
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
    fn csv_report() {
        let names = [
            "rivet-uring",
            "raw-tcp",
            "mpich",
            "fi_pingpong(tcp;ofi_rxm)",
        ];
        let mut lat = table(
            Bench::P2p(Kind::Latency),
            Some(vec![8, 16]),
            vec![0, 1, 2, 3],
        );
        lat.only.insert(1, &[8]);
        lat.add(8, 0, 2.0);
        lat.add(8, 0, 4.0);
        lat.add(8, 1, 2.5);
        lat.add(8, 2, 4.0);
        lat.add(16, 0, 3.0);
        let csv = csv_doc(&[lat], &names);
        assert_eq!(
            csv,
            "bench,unit,better,key,value,stack,median,min,max,runs,vs_best_peer,vs_raw
latency,us,lower,size,8,rivet-uring,3,2,4,2,0.75,1.2
latency,us,lower,size,8,raw-tcp,2.5,2.5,2.5,1,,
latency,us,lower,size,8,mpich,4,4,4,1,,
latency,us,lower,size,8,\"fi_pingpong(tcp;ofi_rxm)\",,,,0,,
latency,us,lower,size,16,rivet-uring,3,3,3,1,,
latency,us,lower,size,16,mpich,,,,0,,
latency,us,lower,size,16,\"fi_pingpong(tcp;ofi_rxm)\",,,,0,,
"
        );
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
             \"other_load_pct\":null,\"failed_runs\":0,\"results\":[{\"bench\":\"latency\",\
             \"unit\":\"us\",\"better\":\"lower\",\"rows\":[{\"size\":0,\"stacks\":{\"rivet\":\
             {\"median\":0.25,\"min\":0.25,\"max\":0.25,\"runs\":1},\"mpich\":null},\
             \"best_peer\":null,\"ratio\":null}]}]}"
        );
        assert!(json::parse(&doc).is_ok());
    }

    #[test]
    fn stacks_per_transport() {
        let given = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            select_stacks(Transport::Shm, None, &[]).unwrap(),
            SHM_STACKS
        );
        assert_eq!(
            select_stacks(Transport::Tcp, None, &[]).unwrap(),
            TCP_STACKS
        );
        // Table order whatever the order asked; `rivet` = both Rivet stacks over tcp.
        assert_eq!(
            select_stacks(
                Transport::Tcp,
                Some(&given(&["openmpi", "raw-tcp", "rivet"])),
                &[]
            )
            .unwrap(),
            ["rivet-uring", "rivet-poll", "raw-tcp", "openmpi"]
        );
        assert_eq!(
            select_stacks(Transport::Tcp, Some(&given(&["rivet-poll", " mpich"])), &[]).unwrap(),
            ["rivet-poll", "mpich"]
        );
        assert_eq!(
            select_stacks(Transport::Shm, Some(&given(&["mpich", "rivet"])), &[]).unwrap(),
            ["rivet", "mpich"]
        );
        let err = select_stacks(Transport::Shm, Some(&given(&["rivet-uring"])), &[]).unwrap_err();
        assert!(err.contains("--transport shm"), "{err}");
        assert!(select_stacks(Transport::Shm, Some(&given(&["raw-tcp"])), &[]).is_err());
        assert!(select_stacks(Transport::Tcp, Some(&given(&["ucx"])), &[]).is_err());
        assert_eq!(role("rivet"), Role::Rivet);
        assert_eq!(role("rivet-poll"), Role::Rivet);
        assert_eq!(role("raw-tcp"), Role::Raw);
        assert_eq!(role("openmpi"), Role::Peer);
        assert_eq!(role("openmpi-rivetrun"), Role::Other);
        // Only when asked, after the transport's own stacks.
        assert!(!select_stacks(Transport::Shm, None, &[])
            .unwrap()
            .contains(&"openmpi-rivetrun".to_string()));
        assert_eq!(
            select_stacks(
                Transport::Shm,
                Some(&["openmpi-rivetrun".to_string(), "openmpi".to_string()]),
                &[]
            )
            .unwrap(),
            ["openmpi", "openmpi-rivetrun"]
        );
        assert!(
            select_stacks(Transport::Ofi, Some(&["openmpi-rivetrun".to_string()]), &[]).is_err()
        );
    }

    #[test]
    fn tcp_command_lines() {
        let rivet = |backend: &str| StackRun::Rivet {
            rivetrun: "rivetrun".into(),
            bench: "rivet-bench".into(),
            env: vec![
                ("RIVET_NETMOD", "tcp".to_string()),
                ("RIVET_TCP_BACKEND", backend.to_string()),
            ],
        };
        assert_eq!(
            rivet("uring")
                .p2p(Kind::Latency, 65536, &[])
                .unwrap()
                .to_string(),
            "RIVET_NETMOD=tcp RIVET_TCP_BACKEND=uring rivetrun -n 2 --bind-to core \
             rivet-bench latency --json --max 65536"
        );
        assert_eq!(
            rivet("poll").p2p(Kind::Mr, 65536, &[]).unwrap().to_string(),
            "RIVET_NETMOD=tcp RIVET_TCP_BACKEND=poll rivetrun -n 2 --bind-to core rivet-bench mr --json"
        );
        assert_eq!(
            rivet("poll").startup(8).unwrap().to_string(),
            "RIVET_NETMOD=tcp RIVET_TCP_BACKEND=poll rivetrun -n 8 rivet-bench startup"
        );
        let shm = StackRun::Rivet {
            rivetrun: "rivetrun".into(),
            bench: "rivet-bench".into(),
            env: Vec::new(),
        };
        assert_eq!(
            shm.p2p(Kind::Bw, 8, &[]).unwrap().to_string(),
            "rivetrun -n 2 --bind-to core rivet-bench bw --json --max 8"
        );
        assert_eq!(shm.fixed_sizes(Kind::Latency), None);
        let raw = StackRun::RawTcp("target/peers/tcp_pingpong".into());
        assert_eq!(
            raw.p2p(Kind::Latency, 8, &[]).unwrap().to_string(),
            "target/peers/tcp_pingpong lat"
        );
        assert_eq!(
            raw.p2p(Kind::Bw, 1 << 22, &[]).unwrap().to_string(),
            "target/peers/tcp_pingpong bw"
        );
        assert!(raw.p2p(Kind::Mr, 8, &[]).is_none());
        assert!(raw.p2p(Kind::Bibw, 8, &[]).is_none());
        assert!(raw.startup(2).is_none());
        // -i, -x, -W reach every program in its own spelling.
        let loops = Loops {
            iters: Some(50),
            warmup: Some(5),
            window: Some(16),
        };
        assert_eq!(
            shm.p2p_with(Kind::Bw, 8, &[], &loops).unwrap().to_string(),
            "rivetrun -n 2 --bind-to core rivet-bench bw --json --iters 50 --warmup 5 --window 16 --max 8"
        );
        assert_eq!(
            shm.p2p_with(Kind::Latency, 8, &[], &loops)
                .unwrap()
                .to_string(),
            "rivetrun -n 2 --bind-to core rivet-bench latency --json --iters 50 --warmup 5 --max 8"
        );
        assert_eq!(
            raw.p2p_with(Kind::Bw, 8, &[], &loops).unwrap().to_string(),
            "target/peers/tcp_pingpong bw -i 800"
        );
        assert_eq!(
            raw.p2p_with(Kind::Latency, 8, &[], &loops)
                .unwrap()
                .to_string(),
            "target/peers/tcp_pingpong lat -i 50"
        );
        assert_eq!(
            raw.fixed_sizes(Kind::Bw),
            Some(&peers::RAW_TCP_BW_SIZES[..])
        );
    }

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
        let note = record(&mut tables, &stacks, target, &out(RAW_LAT)).unwrap();
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
        assert!(record(&mut tables, &stacks, target, &out(&cut)).is_err());
    }

    /// The latency and bw tables of a tcp comparison, with raw-tcp missing
    /// sizes, a failed run, and targets met and missed.
    fn tcp_tables() -> Vec<Table> {
        let mut lat = table(
            Bench::P2p(Kind::Latency),
            Some(vec![8, 1024, 1 << 20]),
            vec![0, 1, 2, 3, 4],
        );
        lat.only.insert(2, &peers::RAW_TCP_LAT_SIZES);
        for (key, vals) in [
            (8, [3.2, 3.6, 3.0, 3.5, 3.8]),
            (1024, [3.5, 3.9, 3.3, 3.9, -1.0]),
            (1 << 20, [150.0, -1.0, -1.0, 149.7, 230.3]),
        ] {
            for (stack, v) in vals.into_iter().enumerate() {
                if v > 0.0 {
                    lat.add(key, stack, v);
                }
            }
        }
        let mut bw = table(
            Bench::P2p(Kind::Bw),
            Some(vec![1024, 1 << 20]),
            vec![0, 1, 2, 3, 4],
        );
        bw.only.insert(2, &peers::RAW_TCP_BW_SIZES);
        for (stack, v) in [4500.0, 4000.0, 4800.0, 5000.0, 5400.0]
            .into_iter()
            .enumerate()
        {
            bw.add(1 << 20, stack, v);
        }
        for (stack, v) in [(0, 400.0), (1, 380.0), (3, 131.0), (4, 361.0)] {
            bw.add(1024, stack, v);
        }
        vec![lat, bw]
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

    #[test]
    fn tcp_json_report() {
        let doc = json_doc(
            Transport::Tcp,
            &tcp_tables(),
            &TCP_STACKS,
            &[],
            1,
            &harness::Loads::default(),
        );
        let v = json::parse(&doc).unwrap();
        assert_eq!(v.get("transport").and_then(|t| t.as_str()), Some("tcp"));
        let results = v.get("results").and_then(|r| r.as_array()).unwrap();
        let lat_rows = results[0].get("rows").and_then(|r| r.as_array()).unwrap();
        let r8 = &lat_rows[0];
        let uring = r8.get("ratios").and_then(|r| r.get("rivet-uring")).unwrap();
        assert_eq!(
            uring.get("best_peer").and_then(|p| p.as_str()),
            Some("mpich")
        );
        assert_eq!(uring.get("target_met"), Some(&json::Value::Bool(true)));
        let poll = r8.get("ratios").and_then(|r| r.get("rivet-poll")).unwrap();
        assert_eq!(poll.get("target_met"), Some(&json::Value::Bool(false)));
        let limit = r8.get("raw_tcp_target").and_then(|t| t.get("at_most"));
        assert_eq!(limit.and_then(|l| l.as_f64()), Some(1.1));
        assert!(r8.get("uring_over_poll").and_then(|x| x.as_f64()).is_some());
        // raw-tcp does not measure 1 MiB latency: left out; openmpi failed at 1 KiB: null.
        let stacks_at =
            |row: &json::Value, name: &str| row.get("stacks").and_then(|s| s.get(name)).cloned();
        assert_eq!(stacks_at(&lat_rows[2], "raw-tcp"), None);
        assert_eq!(stacks_at(&lat_rows[1], "openmpi"), Some(json::Value::Null));
        assert!(stacks_at(&lat_rows[1], "raw-tcp").is_some());
        assert!(r8.get("ratio").is_none() && r8.get("best_peer").is_none());
    }

    #[test]
    fn ofi_stacks_and_providers() {
        let given = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let both = select_providers(Transport::Ofi, None).unwrap();
        assert_eq!(both, DEFAULT_PROVIDERS);
        assert_eq!(
            select_stacks(Transport::Ofi, None, &both).unwrap(),
            OFI_NAMES
        );
        let shm = select_providers(Transport::Ofi, Some(&given(&["shm", " shm"]))).unwrap();
        assert_eq!(shm, ["shm"]);
        // Table order whatever the order asked; `rivet` = rivet-ofi.
        assert_eq!(
            select_stacks(
                Transport::Ofi,
                Some(&given(&["fi_pingpong", "rivet"])),
                &shm
            )
            .unwrap(),
            ["rivet-ofi(shm)", "fi_pingpong(shm)"]
        );
        assert!(select_stacks(Transport::Ofi, Some(&given(&["mpich"])), &shm).is_err());
        assert!(select_stacks(Transport::Tcp, Some(&given(&["rivet-ofi"])), &shm).is_err());
        // --provider is for ofi only, and takes provider names.
        let err = select_providers(Transport::Tcp, Some(&given(&["shm"]))).unwrap_err();
        assert!(err.contains("--transport ofi"), "{err}");
        assert!(select_providers(Transport::Ofi, Some(&given(&[" "]))).is_err());
        assert!(select_providers(Transport::Ofi, Some(&given(&["a(b)"]))).is_err());
        assert_eq!(
            split_provider("rivet-ofi(tcp;ofi_rxm)"),
            ("rivet-ofi", Some("tcp;ofi_rxm"))
        );
        assert_eq!(split_provider("raw-tcp"), ("raw-tcp", None));
        assert_eq!(role("fi_pingpong(shm)"), Role::Raw);
        assert_eq!(role("rivet-ofi(shm)"), Role::Rivet);
    }

    #[test]
    fn ofi_command_lines() {
        let rivet = StackRun::Rivet {
            rivetrun: "rivetrun".into(),
            bench: "rivet-bench".into(),
            env: vec![
                ("RIVET_NETMOD", "ofi".to_string()),
                ("RIVET_OFI_PROVIDER", "tcp;ofi_rxm".to_string()),
            ],
        };
        assert_eq!(
            rivet
                .p2p(Kind::Latency, 65536, &[8, 65536])
                .unwrap()
                .to_string(),
            "RIVET_NETMOD=ofi RIVET_OFI_PROVIDER='tcp;ofi_rxm' rivetrun -n 2 --bind-to core \
             rivet-bench latency --json --max 65536"
        );
        let fi = StackRun::FiPingpong {
            wrapper: "rivet-bench".into(),
            program: "/usr/bin/fi_pingpong".into(),
            provider: "tcp;ofi_rxm".into(),
            timeout: 290,
        };
        assert_eq!(
            fi.p2p(Kind::Bw, 65536, &[8, 1024, 65536])
                .unwrap()
                .to_string(),
            "rivet-bench fi-pingpong --provider 'tcp;ofi_rxm' --sizes 8,1024,65536 \
             --program /usr/bin/fi_pingpong --timeout 290"
        );
        assert!(fi.p2p(Kind::Mr, 8, &[8]).is_none());
        assert!(fi.p2p(Kind::Bibw, 8, &[8]).is_none());
        assert!(fi.p2p(Kind::Latency, 8, &[]).is_none());
        assert!(fi.startup(2).is_none());
        assert_eq!(fi.fixed_sizes(Kind::Latency), None);
        let pairs = fi.fi_pairs(&[8, 1 << 20]);
        assert_eq!(pairs.len(), 2);
        assert_eq!(
            pairs[1].0.to_string(),
            "taskset -c 1 /usr/bin/fi_pingpong -p 'tcp;ofi_rxm' -e rdm -B PORT -S 1048576 -I 500"
        );
        assert_eq!(
            pairs[1].1.to_string(),
            "taskset -c 0 /usr/bin/fi_pingpong -p 'tcp;ofi_rxm' -e rdm -P PORT -S 1048576 -I 500 \
             127.0.0.1"
        );
        assert!(rivet.fi_pairs(&[8]).is_empty());
        // fi_pingpong runs exactly the sizes reported; `all`: the ladder.
        let lat = table(Bench::P2p(Kind::Latency), None, vec![0]);
        assert_eq!(lat.run_sizes(4), [0, 1, 2, 4]);
        let bw = table(Bench::P2p(Kind::Bw), None, vec![0]);
        assert_eq!(bw.run_sizes(4), [1, 2, 4]);
        let listed = table(Bench::P2p(Kind::Bw), Some(vec![8, 1024]), vec![0]);
        assert_eq!(listed.run_sizes(1 << 20), [8, 1024]);
    }

    const OFI_NAMES: [&str; 4] = [
        "rivet-ofi(tcp;ofi_rxm)",
        "fi_pingpong(tcp;ofi_rxm)",
        "rivet-ofi(shm)",
        "fi_pingpong(shm)",
    ];

    /// latency, bw and mr tables of an ofi comparison over two providers,
    /// one fi_pingpong run failed.
    fn ofi_tables() -> Vec<Table> {
        let mut lat = table(
            Bench::P2p(Kind::Latency),
            Some(vec![8, 65536]),
            vec![0, 1, 2, 3],
        );
        let mut bw = table(Bench::P2p(Kind::Bw), Some(vec![8, 65536]), vec![0, 1, 2, 3]);
        for (key, lats, bws) in [
            (8, [14.5, 13.8, 1.9, 1.71], [2.0, 0.58, 6.0, 4.678]),
            (
                65536,
                [120.0, 60.0, 55.0, -1.0],
                [900.0, 1092.0, 5200.0, 5168.0],
            ),
        ] {
            for (stack, (l, b)) in lats.into_iter().zip(bws).enumerate() {
                if l > 0.0 {
                    lat.add(key, stack, l);
                }
                bw.add(key, stack, b);
            }
        }
        let mut mr = table(Bench::P2p(Kind::Mr), Some(vec![8]), vec![0, 2]);
        mr.add(8, 0, 6.0e5);
        mr.add(8, 2, 2.0e6);
        vec![lat, bw, mr]
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

    #[test]
    fn ofi_json_report() {
        let doc = json_doc(
            Transport::Ofi,
            &ofi_tables(),
            &OFI_NAMES,
            &[],
            1,
            &harness::Loads::default(),
        );
        let v = json::parse(&doc).unwrap();
        assert_eq!(v.get("transport").and_then(|t| t.as_str()), Some("ofi"));
        let results = v.get("results").and_then(|r| r.as_array()).unwrap();
        let lat_rows = results[0].get("rows").and_then(|r| r.as_array()).unwrap();
        let ratio =
            |row: &json::Value, stack: &str| row.get("ratios").and_then(|r| r.get(stack)).cloned();
        let tcp = ratio(&lat_rows[0], "rivet-ofi(tcp;ofi_rxm)").unwrap();
        assert!(
            (tcp.get("vs_fi_pingpong").and_then(|x| x.as_f64()).unwrap() - 14.5 / 13.8).abs()
                < 1e-9
        );
        assert_eq!(tcp.get("target_met"), Some(&json::Value::Bool(true)));
        let shm = ratio(&lat_rows[1], "rivet-ofi(shm)").unwrap();
        assert_eq!(shm.get("vs_fi_pingpong"), Some(&json::Value::Null));
        assert_eq!(shm.get("target_met"), Some(&json::Value::Null));
        let target = lat_rows[0]
            .get("fi_pingpong_target")
            .and_then(|t| t.get("at_most"));
        assert_eq!(target.and_then(|t| t.as_f64()), Some(1.1));
        let bw_rows = results[1].get("rows").and_then(|r| r.as_array()).unwrap();
        let met =
            ratio(&bw_rows[1], "rivet-ofi(tcp;ofi_rxm)").and_then(|r| r.get("target_met").cloned());
        assert_eq!(met, Some(json::Value::Bool(false)));
        // mr: Rivet only, no reference, no target.
        let mr_rows = results[2].get("rows").and_then(|r| r.as_array()).unwrap();
        assert_eq!(
            mr_rows[0].get("fi_pingpong_target"),
            Some(&json::Value::Null)
        );
        assert!(lat_rows[0].get("raw_tcp_target").is_none());
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
