//! Dynamic processes: how long `connect`/`accept` between two separately
//! started jobs and `spawn` of N children take, with Open MPI's
//! `MPI_Comm_spawn` as the reference (the Debian MPICH, ch4:ucx, refuses
//! `MPI_Open_port` and `MPI_Comm_spawn`, so it has no figures here).
//!
//! Rank side (run under `rivetrun`):
//! - `spawn`: for each N of `--children`, `--reps` times: a barrier on the
//!   world, then on every rank `world.spawn(<this executable>,
//!   ["spawn-child"], N, root 0)`, timed on rank 0 from call to return (the
//!   intercommunicator is ready: every child has connected back). Rank 0
//!   then receives each child's pid (4 bytes from every child), all parents
//!   `disconnect`, and rank 0 waits until every child is gone or a zombie
//!   (`/proc/PID/stat`, polled every 50 us while driving progress): the
//!   second figure, "exited", is from the call of spawn to then. One
//!   untimed spawn of 1 child comes first and is reported as `first`.
//! - `spawn-child` (hidden): what the children run: send the pid to parent
//!   rank 0, disconnect from the parent, finalize.
//! - `accept` and `connect`: two jobs. The accept side opens a port (timed,
//!   the first dynamic call: it opens the netmod), writes it to
//!   `--port-file` atomically (a temporary file, then rename), and `--reps`
//!   times accepts on its world, runs a barrier on the intercommunicator and
//!   disconnects. The connect side waits for the file (bounded), reads the
//!   port and does the same with `connect`, timed on rank 0 from call to
//!   return after a barrier on its own world. Its first connect (which opens
//!   its netmod) is reported apart from the others.
//!
//! Harness (`dynamic`): starts the jobs itself, like `launch-time`: per rep,
//! one accept job and one connect job at once (`rivetrun -n 2` each, a fresh
//! port file), one Rivet spawn job (`rivetrun -n 1 rivet-bench spawn`) and
//! one Open MPI job (`mpirun.openmpi -n 1 ompi_spawn`, the C program
//! `benches/peers/ompi_spawn.c` built with `mpicc.openmpi -O2`, which times
//! the same two figures the same way with `MPI_Wtime`), in an order that
//! rotates each rep. Rivet jobs run with `RIVET_YIELD=always` (16 children
//! on 2 cores oversubscribe them). The samples of every job are pooled; the
//! table gives median [min-max] per figure and Rivet / Open MPI.
//!
//! Debian's Open MPI 4.1.4 with its external PMIx 4.2 now and then hangs in
//! `MPI_Comm_spawn` (parent in `PMIx_Lookup`, children in `MPI_Init`;
//! openpmix/openpmix#2735 lists this pairing as hanging). `ompi_spawn` cuts
//! a spawn cycle off after `--hang` seconds, printing which one, and ends
//! its job; the harness keeps what that job measured before, counts the
//! hang and prints the count under the table. A hang is not a failure of
//! the run; any other failed job is.
//!
//! Here the harness's options and the samples it pools; the rank side in
//! `rank.rs`; the harness in `jobs.rs`, reading the jobs' output in
//! `parse.rs`, the report in `table.rs`.

mod jobs;
mod parse;
mod rank;
mod table;
#[cfg(test)]
mod tests;

pub use jobs::run;
pub use rank::{accept, connect, spawn, spawn_child, PortArgs, SpawnArgs};

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Jobs per stack: accept/connect job pairs, Rivet spawn jobs and Open
    /// MPI spawn jobs, interleaved (order rotated each rep).
    #[arg(long, default_value_t = 5)]
    reps: u32,
    /// Connects in each accept/connect job pair (the first is reported apart).
    #[arg(long, default_value_t = 20)]
    connects: u32,
    /// Timed spawns per N in each spawn job (after one untimed spawn of 1 child).
    #[arg(long, default_value_t = 2)]
    spawns: u32,
    /// Numbers of children to spawn, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    children: Vec<u32>,
    /// Ranks of each accept job and each connect job.
    #[arg(long, default_value_t = 2)]
    ranks: u32,
    /// Ranks of each spawn job (the parents; both stacks).
    #[arg(long, default_value_t = 1)]
    parents: u32,
    /// What to run: connect (the accept/connect pairs), spawn (Rivet's
    /// spawn jobs), openmpi (Open MPI's spawn jobs).
    #[arg(long, value_delimiter = ',', default_value = "connect,spawn,openmpi")]
    parts: Vec<String>,
    /// rivetrun to use (default: the one beside this executable, else PATH).
    #[arg(long)]
    rivetrun: Option<PathBuf>,
    /// Open MPI's launcher.
    #[arg(long, default_value = "mpirun.openmpi")]
    ompi_mpirun: String,
    /// Open MPI's compiler, for benches/peers/ompi_spawn.c.
    #[arg(long, default_value = "mpicc.openmpi")]
    mpicc_openmpi: String,
    /// ompi_spawn.c [default: benches/peers/ompi_spawn.c of this source tree].
    #[arg(long)]
    source: Option<PathBuf>,
    /// Where to build ompi_spawn [default: target/peers beside this executable's profile dir].
    #[arg(long)]
    build_dir: Option<PathBuf>,
    /// Seconds after which an Open MPI spawn cycle (spawn to children exited)
    /// counts as hung: ompi_spawn prints it and ends its job (Debian's Open
    /// MPI 4.1.4 with PMIx 4.2 now and then hangs in MPI_Comm_spawn).
    #[arg(long, default_value_t = 20)]
    hang: u32,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Seconds before a job is killed (and counted as failed).
    #[arg(long, default_value_t = 300)]
    timeout: u64,
}

/// Pooled samples of every figure, ms.
#[derive(Default)]
struct Samples {
    open_port: Vec<f64>,
    first_connect: Vec<f64>,
    connect: Vec<f64>,
    cycle: Vec<f64>,
    /// Per stack (0 rivet, 1 openmpi): first spawn (1 child) and its exit.
    first: [(Vec<f64>, Vec<f64>); 2],
    /// Per stack, per N: (spawn, exited).
    spawn: [Vec<(Vec<f64>, Vec<f64>)>; 2],
    /// Open MPI spawn cycles that hung ("N=4", "warm-up N=1"), and all it started.
    ompi_hangs: Vec<String>,
    ompi_cycles: usize,
}

enum Unit {
    Connect,
    Spawn(usize),
}
