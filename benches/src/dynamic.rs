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

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rivet::{Comm, Engine};

use crate::harness::{self, CmdSpec, JobOutput};
use crate::json::{self, Value};
use crate::peers::{self, Mpi};
use crate::progress::Progress;
use crate::stats::{summarize, Summary};

/// Tag of the pid message from each child to parent rank 0.
const PID_TAG: i32 = 77;

static RANK: AtomicU32 = AtomicU32::new(0);

// ------------------------------------------------------------ rank side

/// Options every rank-side dynamic benchmark has.
#[derive(clap::Args, Debug, Clone)]
pub struct RankCommon {
    /// Timed operations per N (spawn) or in all (accept, connect).
    #[arg(long, default_value_t = 5)]
    reps: u32,
    /// Print one JSON line (rank 0) instead of the table.
    #[arg(long)]
    json: bool,
    /// Seconds after which the process gives up and exits 1 (a peer job that
    /// never comes must not leave this one waiting forever).
    #[arg(long, default_value_t = 300)]
    deadline: u64,
}

#[derive(clap::Args, Debug)]
pub struct SpawnArgs {
    /// Numbers of children to spawn, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    children: Vec<u32>,
    #[command(flatten)]
    common: RankCommon,
}

#[derive(clap::Args, Debug)]
pub struct PortArgs {
    /// The file through which the accept side hands its port to the connect
    /// side (written by accept, read by connect).
    #[arg(long, value_name = "PATH")]
    port_file: PathBuf,
    /// Seconds the connect side waits for the port file to appear.
    #[arg(long, default_value_t = 60)]
    wait: u64,
    #[command(flatten)]
    common: RankCommon,
}

/// End the process after `secs` if it is still running then.
fn watchdog(secs: u64, what: &'static str) {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(secs));
        eprintln!(
            "rivet-bench: rank {}: {what} still running after --deadline {secs} s; giving up",
            RANK.load(Ordering::Relaxed)
        );
        std::process::exit(1);
    });
}

fn init() -> Result<Engine, String> {
    let engine = Engine::init().map_err(|e| format!("engine init: {e}"))?;
    RANK.store(engine.rank(), Ordering::Relaxed);
    Ok(engine)
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

fn e<T>(what: &str, r: rivet::Result<T>) -> Result<T, String> {
    r.map_err(|err| format!("rank {}: {what}: {err}", RANK.load(Ordering::Relaxed)))
}

/// Whether process `pid` has exited (gone, or a zombie not yet reaped).
fn exited(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // "pid (comm) S ...": the state follows the last ')'.
    match stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
    {
        Some(state) => state == "Z" || state == "X",
        None => true,
    }
}

/// Wait until every pid has exited, driving the engine meanwhile.
fn wait_exited(engine: &Engine, pids: &[u32], deadline: Instant) -> Result<(), String> {
    for &pid in pids {
        while !exited(pid) {
            if Instant::now() > deadline {
                return Err(format!("child {pid} did not exit"));
            }
            engine.progress();
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    Ok(())
}

/// One spawn of `n` children by every rank of `world`: (spawn, exited) in
/// ms, measured on rank 0 (other ranks get their own, unreported, times).
fn one_spawn(engine: &Engine, world: &Comm, me: &str, n: u32) -> Result<(f64, f64), String> {
    e("barrier", world.barrier())?;
    let t0 = Instant::now();
    let children = e("spawn", world.spawn(me, &["spawn-child"], n, 0))?;
    let spawn = ms(t0);
    if children.remote_size() != Some(n) {
        return Err(format!(
            "spawned {n}, the remote group has {:?}",
            children.remote_size()
        ));
    }
    let mut pids = Vec::new();
    if world.rank() == 0 {
        for r in 0..n {
            let mut buf = [0u8; 4];
            e("recv pid", children.recv(&mut buf, r as i32, PID_TAG))?;
            pids.push(u32::from_le_bytes(buf));
        }
    }
    e("disconnect", children.disconnect())?;
    wait_exited(engine, &pids, Instant::now() + Duration::from_secs(60))?;
    Ok((spawn, ms(t0)))
}

/// `rivet-bench spawn`.
pub fn spawn(args: SpawnArgs) -> Result<(), String> {
    let c = &args.common;
    if c.reps == 0 || args.children.is_empty() || args.children.contains(&0) {
        return Err("--reps and every --children count must be at least 1".into());
    }
    watchdog(c.deadline, "spawn");
    let me = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let me = me.to_string_lossy().into_owned();
    let engine = init()?;
    let world = engine.world();
    let first = one_spawn(&engine, &world, &me, 1)?;
    let mut rows = Vec::new();
    for &n in &args.children {
        let (mut spawn, mut exit) = (Vec::new(), Vec::new());
        for _ in 0..c.reps {
            let (s, x) = one_spawn(&engine, &world, &me, n)?;
            spawn.push(s);
            exit.push(x);
        }
        rows.push((n, spawn, exit));
    }
    let parents = world.size();
    let rank = world.rank();
    drop(world);
    engine.finalize().map_err(|e| format!("finalize: {e}"))?;
    if rank != 0 {
        return Ok(());
    }
    if c.json {
        let rows: Vec<String> = rows
            .iter()
            .map(|(n, s, x)| {
                format!(
                    "{{\"children\":{n},\"spawn\":{},\"exited\":{}}}",
                    samples_json(s),
                    samples_json(x)
                )
            })
            .collect();
        println!(
            "{{\"bench\":\"spawn\",\"parents\":{parents},\"unit\":\"ms\",\"reps\":{},\"first\":{{\"children\":1,\"spawn\":{},\"exited\":{}}},\"rows\":[{}]}}",
            c.reps,
            json::num(first.0),
            json::num(first.1),
            rows.join(",")
        );
    } else {
        println!(
            "# Rivet spawn ({parents} parent rank{}), ms, median [min-max] of {}; \
             exited = spawn + disconnect until every child has exited",
            if parents == 1 { "" } else { "s" },
            c.reps
        );
        println!(
            "# first spawn (1 child, untimed warm-up): {:.3} ms, exited {:.3} ms",
            first.0, first.1
        );
        println!("# {:>8}  {:>28}  {:>28}", "Children", "spawn", "exited");
        for (n, s, x) in &rows {
            println!("  {n:>8}  {:>28}  {:>28}", fmt_ms(s), fmt_ms(x));
        }
    }
    Ok(())
}

/// `rivet-bench spawn-child`: what `spawn` starts.
pub fn spawn_child() -> Result<(), String> {
    watchdog(120, "spawn-child");
    let engine = init()?;
    let parent = engine
        .parent()
        .ok_or("spawn-child is started by `rivet-bench spawn`, not by hand (no parent)")?;
    let pid = std::process::id();
    e("send pid", parent.send(&pid.to_le_bytes(), 0, PID_TAG))?;
    e("disconnect", parent.disconnect())?;
    engine.finalize().map_err(|e| format!("finalize: {e}"))
}

/// `rivet-bench accept`.
pub fn accept(args: PortArgs) -> Result<(), String> {
    let c = &args.common;
    if c.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    watchdog(c.deadline, "accept");
    let engine = init()?;
    let world = engine.world();
    let root = world.rank() == 0;
    let mut open_ms = 0.0;
    let port = if root {
        let t0 = Instant::now();
        let port = e("open_port", engine.open_port())?;
        open_ms = ms(t0);
        write_atomically(&args.port_file, &port)?;
        port
    } else {
        String::new()
    };
    let mut times = Vec::new();
    let mut remote = 0;
    for _ in 0..c.reps {
        e("barrier", world.barrier())?;
        let t0 = Instant::now();
        let inter = e("accept", world.accept(&port, 0))?;
        times.push(ms(t0));
        remote = inter.remote_size().unwrap_or(0);
        e("barrier on the intercommunicator", inter.barrier())?;
        e("disconnect", inter.disconnect())?;
    }
    if root {
        e("close_port", engine.close_port(&port))?;
        let _ = std::fs::remove_file(&args.port_file);
    }
    let ranks = world.size();
    drop(world);
    engine.finalize().map_err(|e| format!("finalize: {e}"))?;
    if !root {
        return Ok(());
    }
    if c.json {
        println!(
            "{{\"bench\":\"accept\",\"ranks\":{ranks},\"remote\":{remote},\"unit\":\"ms\",\"reps\":{},\"open_port\":{},\"accept\":{}}}",
            c.reps,
            json::num(open_ms),
            samples_json(&times)
        );
    } else {
        println!("# Rivet accept ({ranks} ranks, {remote} remote), ms");
        println!("# open_port (first dynamic call: opens the netmod): {open_ms:.3}");
        println!(
            "# accept, call to return (includes waiting for the connector), median [min-max] of {}: {}",
            c.reps,
            fmt_ms(&times)
        );
    }
    Ok(())
}

/// `rivet-bench connect`.
pub fn connect(args: PortArgs) -> Result<(), String> {
    let c = &args.common;
    if c.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    watchdog(c.deadline, "connect");
    let engine = init()?;
    let world = engine.world();
    let root = world.rank() == 0;
    let port = if root {
        read_port(&args.port_file, Duration::from_secs(args.wait))?
    } else {
        String::new()
    };
    let (mut connect, mut cycle) = (Vec::new(), Vec::new());
    let mut remote = 0;
    for _ in 0..c.reps {
        e("barrier", world.barrier())?;
        let t0 = Instant::now();
        let inter = e("connect", world.connect(&port, 0))?;
        connect.push(ms(t0));
        remote = inter.remote_size().unwrap_or(0);
        e("barrier on the intercommunicator", inter.barrier())?;
        e("disconnect", inter.disconnect())?;
        cycle.push(ms(t0));
    }
    let ranks = world.size();
    drop(world);
    engine.finalize().map_err(|e| format!("finalize: {e}"))?;
    if !root {
        return Ok(());
    }
    let (first, rest) = (connect[0], &connect[1..]);
    let (first_cycle, rest_cycle) = (cycle[0], &cycle[1..]);
    if c.json {
        println!(
            "{{\"bench\":\"connect\",\"ranks\":{ranks},\"remote\":{remote},\"unit\":\"ms\",\"reps\":{},\"first\":{},\"first_cycle\":{},\"connect\":{},\"cycle\":{}}}",
            c.reps,
            json::num(first),
            json::num(first_cycle),
            samples_json(rest),
            samples_json(rest_cycle)
        );
    } else {
        println!("# Rivet connect ({ranks} ranks to {remote}), ms; cycle = connect + barrier + disconnect");
        println!("# first connect (opens the netmod): {first:.3}, cycle {first_cycle:.3}");
        if rest.is_empty() {
            println!("# (--reps 1: no further connects)");
        } else {
            println!(
                "# connects 2..{}, median [min-max]: connect {}, cycle {}",
                c.reps,
                fmt_ms(rest),
                fmt_ms(rest_cycle)
            );
        }
    }
    Ok(())
}

fn write_atomically(path: &Path, text: &str) -> Result<(), String> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("cannot write the port file {}: {e}", path.display()))
}

fn read_port(path: &Path, wait: Duration) -> Result<String, String> {
    let deadline = Instant::now() + wait;
    loop {
        if let Ok(port) = std::fs::read_to_string(path) {
            if !port.trim().is_empty() {
                return Ok(port.trim().to_string());
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "no port in {} after {} s (is the accept side running?)",
                path.display(),
                wait.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn samples_json(samples: &[f64]) -> String {
    let list: Vec<String> = samples.iter().map(|&v| json::num(v)).collect();
    match summarize(samples) {
        Some(s) => format!(
            "{{\"median\":{},\"min\":{},\"max\":{},\"samples\":[{}]}}",
            json::num(s.median),
            json::num(s.min),
            json::num(s.max),
            list.join(",")
        ),
        None => "null".into(),
    }
}

fn fmt_ms(samples: &[f64]) -> String {
    summarize(samples).map_or("-".into(), |s| fmt_summary(&s))
}

fn fmt_summary(s: &Summary) -> String {
    format!("{:.2} [{:.2}-{:.2}]", s.median, s.min, s.max)
}

// -------------------------------------------------------------- harness

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

/// The C reference program, in this crate's source tree.
const OMPI_SPAWN_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/peers/ompi_spawn.c");

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

pub fn run(args: Args) -> Result<(), String> {
    if args.reps == 0 || args.spawns == 0 || args.children.is_empty() || args.children.contains(&0)
    {
        return Err("--reps, --spawns and every --children count must be at least 1".into());
    }
    if args.connects < 2 {
        return Err("--connects must be at least 2 (the first is reported apart)".into());
    }
    for p in &args.parts {
        if !["connect", "spawn", "openmpi"].contains(&p.as_str()) {
            return Err(format!(
                "unknown --parts entry {p:?}: connect, spawn, openmpi"
            ));
        }
    }
    let want = |p: &str| args.parts.iter().any(|x| x == p);
    let me = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let rivetrun = args
        .rivetrun
        .clone()
        .unwrap_or_else(|| harness::beside_me("rivetrun"));
    let timeout = Duration::from_secs(args.timeout);
    let children = args
        .children
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let rivet = |spec: CmdSpec| spec.env("RIVET_YIELD", "always");

    let ompi = if want("openmpi") {
        match prepare_ompi(&args) {
            Ok(x) => Some(x),
            Err(why) => {
                eprintln!("rivet-bench: skipping Open MPI: {why}");
                None
            }
        }
    } else {
        None
    };
    let spawn_spec = |stack: usize| -> CmdSpec {
        if stack == 0 {
            rivet(CmdSpec::new(&rivetrun))
                .args(["-n", &args.parents.to_string()])
                .arg(&me)
                .args(["spawn", "--children", &children, "--reps"])
                .arg(args.spawns.to_string())
                .arg("--json")
        } else {
            let (launcher, binary) = ompi.as_ref().expect("only with Open MPI");
            Mpi::OpenMpi
                .launch(launcher, args.parents, false)
                .arg(binary)
                .arg(&children)
                .arg(args.spawns.to_string())
                .arg(args.hang.to_string())
        }
    };
    let mut units = Vec::new();
    if want("connect") {
        units.push(Unit::Connect);
    }
    if want("spawn") {
        units.push(Unit::Spawn(0));
    }
    if ompi.is_some() {
        units.push(Unit::Spawn(1));
    }
    if units.is_empty() {
        return Err("nothing to run".into());
    }

    let port_dir = std::env::temp_dir().join(format!("rivet-bench-dynamic-{}", std::process::id()));
    std::fs::create_dir_all(&port_dir)
        .map_err(|e| format!("cannot create {}: {e}", port_dir.display()))?;
    let mut s = Samples::default();
    for stack in 0..2 {
        s.spawn[stack] = args.children.iter().map(|_| Default::default()).collect();
    }
    let mut failures = 0;
    let mut loads = Vec::new();
    let mut progress = Progress::new(units.len() * args.reps as usize);
    for rep in 0..args.reps {
        for u in harness::rotation(units.len(), rep) {
            let what = format!(
                "rep {}/{} {}",
                rep + 1,
                args.reps,
                match units[u] {
                    Unit::Connect => "accept/connect",
                    Unit::Spawn(0) => "rivet spawn",
                    Unit::Spawn(_) => "openmpi spawn",
                }
            );
            progress.start(&what);
            let prefix = format!("rivet-bench: {what}");
            let outcome = match units[u] {
                Unit::Connect => {
                    let port_file = port_dir.join(format!("port-{rep}"));
                    let _ = std::fs::remove_file(&port_file);
                    let side = |what: &str| {
                        rivet(CmdSpec::new(&rivetrun))
                            .args(["-n", &args.ranks.to_string()])
                            .arg(&me)
                            .args([what, "--port-file"])
                            .arg(&port_file)
                            .args(["--reps", &args.connects.to_string(), "--json"])
                    };
                    let (a, c) = (side("accept"), side("connect"));
                    let (a, c) = std::thread::scope(|scope| {
                        let acceptor = scope.spawn(|| harness::run_job(&a, timeout));
                        let connector = harness::run_job(&c, timeout);
                        (acceptor.join().expect("accept job thread"), connector)
                    });
                    let _ = std::fs::remove_file(&port_file);
                    a.and_then(|a| c.map(|c| (a, c)))
                        .and_then(|(a, c)| record_connect(&mut s, &a, &c))
                        .map(|note| format!("accept/connect: {note}"))
                }
                Unit::Spawn(stack) => {
                    let name = ["rivet spawn", "openmpi spawn"][stack];
                    // Open MPI's jobs keep what they measured before a hang.
                    let run = if stack == 0 {
                        harness::run_job(&spawn_spec(stack), timeout).map(|out| (out, None))
                    } else {
                        harness::run_job_lenient(&spawn_spec(stack), timeout)
                    };
                    run.and_then(|(out, problem)| {
                        if let Some(p) = out.foreign_pct {
                            loads.push(p);
                        }
                        let note = if stack == 0 {
                            record_rivet_spawn(&mut s, &args.children, &out)
                        } else {
                            record_ompi_spawn(&mut s, &args.children, &out, problem.as_deref())
                        }?;
                        let load = out
                            .foreign_pct
                            .map_or(String::new(), |p| format!(", other load {p:.0}%"));
                        Ok(format!("{name}: {:.3} s{load}; {note}", out.wall))
                    })
                }
            };
            match outcome {
                Ok(line) => progress.finished(&format!("{prefix}: {line}")),
                Err(e) => {
                    failures += 1;
                    progress.finished(&format!("{prefix}: FAILED: {e}"));
                }
            }
        }
    }
    progress.finish();
    let _ = std::fs::remove_dir(&port_dir);
    if args.json {
        print_json(&args, &s);
    } else {
        print_table(&args, &s, ompi.is_some());
    }
    if let Some(l) = (harness::Loads {
        samples: loads,
        failures,
    })
    .describe()
    {
        eprintln!("rivet-bench: spawn jobs: {l}");
    }
    if failures > 0 {
        return Err(format!("{failures} job(s) failed (see above)"));
    }
    Ok(())
}

/// Build ompi_spawn; the launcher and the binary, or why Open MPI is skipped.
fn prepare_ompi(args: &Args) -> Result<(PathBuf, PathBuf), String> {
    let launcher = harness::find_program(&args.ompi_mpirun)
        .ok_or_else(|| format!("{} not found", args.ompi_mpirun))?;
    if !harness::version_ok(&launcher) {
        return Err(format!("{} --version fails", args.ompi_mpirun));
    }
    let cc = harness::find_program(&args.mpicc_openmpi)
        .ok_or_else(|| format!("{} not found", args.mpicc_openmpi))?;
    let source = args
        .source
        .clone()
        .unwrap_or_else(|| PathBuf::from(OMPI_SPAWN_SOURCE));
    let dir = args
        .build_dir
        .clone()
        .unwrap_or_else(peers::default_build_dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let out = dir.join("ompi_spawn.openmpi");
    peers::compile(&cc, &source, &out)?;
    Ok((launcher, out))
}

/// The last line of `stdout` that is a JSON object, parsed.
fn json_line(stdout: &str) -> Result<Value, String> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or("no JSON line in the output")?;
    json::parse(line.trim())
}

fn num(v: &Value, key: &str) -> Result<f64, String> {
    v.get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("no number {key:?} in the JSON"))
}

fn list(v: &Value, key: &str) -> Result<Vec<f64>, String> {
    v.get(key)
        .and_then(|o| o.get("samples"))
        .and_then(Value::as_array)
        .ok_or_else(|| format!("no samples of {key:?} in the JSON"))?
        .iter()
        .map(|x| {
            x.as_f64()
                .ok_or_else(|| format!("a sample of {key:?} is not a number"))
        })
        .collect()
}

fn record_connect(
    s: &mut Samples,
    accept: &JobOutput,
    connect: &JobOutput,
) -> Result<String, String> {
    let a = json_line(&accept.stdout)?;
    let c = json_line(&connect.stdout)?;
    let open_port = num(&a, "open_port")?;
    let first = num(&c, "first")?;
    let rest = list(&c, "connect")?;
    let cycle = list(&c, "cycle")?;
    let note = format!(
        "open_port {open_port:.2} ms, first connect {first:.2} ms, connect median {}",
        summarize(&rest).map_or("-".into(), |x| format!("{:.3} ms", x.median))
    );
    s.open_port.push(open_port);
    s.first_connect.push(first);
    s.connect.extend(rest);
    s.cycle.extend(cycle);
    Ok(note)
}

fn record_rivet_spawn(
    s: &mut Samples,
    children: &[u32],
    out: &JobOutput,
) -> Result<String, String> {
    let v = json_line(&out.stdout)?;
    let first = v.get("first").ok_or("no \"first\" in the JSON")?;
    let rows = v
        .get("rows")
        .and_then(Value::as_array)
        .ok_or("no rows in the JSON")?;
    let mut got = Vec::new();
    for (i, &n) in children.iter().enumerate() {
        let row = rows
            .iter()
            .find(|r| r.get("children").and_then(Value::as_f64) == Some(n as f64))
            .ok_or_else(|| format!("no row for {n} children"))?;
        got.push((i, list(row, "spawn")?, list(row, "exited")?));
    }
    s.first[0].0.push(num(first, "spawn")?);
    s.first[0].1.push(num(first, "exited")?);
    Ok(store_spawn(s, 0, children, got))
}

/// ompi_spawn's lines: "warmup 1 0 SPAWN EXITED" and "spawn N REP SPAWN EXITED" (seconds, kept in ms).
fn parse_ompi(stdout: &str) -> Vec<(String, u32, f64, f64)> {
    stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 5 || !(f[0] == "spawn" || f[0] == "warmup") {
                return None;
            }
            Some((
                f[0].to_string(),
                f[1].parse().ok()?,
                f[3].parse::<f64>().ok()? * 1e3,
                f[4].parse::<f64>().ok()? * 1e3,
            ))
        })
        .collect()
}

/// ompi_spawn's "hang N REP SECS" or "hang warmup 1 SECS": which spawn hung.
fn parse_hang(stdout: &str) -> Option<String> {
    stdout.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f[..] {
            ["hang", "warmup", n, _] => Some(format!("warm-up N={n}")),
            ["hang", n, _, _] => Some(format!("N={n}")),
            _ => None,
        }
    })
}

/// Record an Open MPI job. A job that hung (and so failed) gives what it
/// measured before, and the hang is counted; any other failure is an error.
fn record_ompi_spawn(
    s: &mut Samples,
    children: &[u32],
    out: &JobOutput,
    problem: Option<&str>,
) -> Result<String, String> {
    if let Some(err) = out.stdout.lines().find(|l| l.starts_with("error")) {
        return Err(err.to_string());
    }
    let hang = parse_hang(&out.stdout);
    if let (Some(p), None) = (problem, &hang) {
        return Err(p.to_string());
    }
    let lines = parse_ompi(&out.stdout);
    let warm = lines.iter().find(|l| l.0 == "warmup");
    if warm.is_none() && hang.is_none() {
        return Err("no warmup line in ompi_spawn's output".into());
    }
    let mut got = Vec::new();
    for (i, &n) in children.iter().enumerate() {
        let rows: Vec<_> = lines
            .iter()
            .filter(|l| l.0 == "spawn" && l.1 == n)
            .collect();
        if rows.is_empty() && hang.is_none() {
            return Err(format!("no spawn lines for {n} children"));
        }
        got.push((
            i,
            rows.iter().map(|l| l.2).collect(),
            rows.iter().map(|l| l.3).collect(),
        ));
    }
    if let Some(w) = warm {
        s.first[1].0.push(w.2);
        s.first[1].1.push(w.3);
    }
    s.ompi_cycles += lines.len() + usize::from(hang.is_some());
    let mut note = store_spawn(s, 1, children, got);
    if let Some(h) = hang {
        note.push_str(&format!("; HUNG in a spawn cycle at {h}, job ended"));
        s.ompi_hangs.push(h);
    }
    Ok(note)
}

fn store_spawn(
    s: &mut Samples,
    stack: usize,
    children: &[u32],
    got: Vec<(usize, Vec<f64>, Vec<f64>)>,
) -> String {
    let mut notes = Vec::new();
    for (i, spawn, exited) in got {
        if let Some(m) = summarize(&spawn) {
            notes.push(format!("N={} {:.1} ms", children[i], m.median));
        }
        s.spawn[stack][i].0.extend(spawn);
        s.spawn[stack][i].1.extend(exited);
    }
    notes.join(", ")
}

/// One row of the table: what, Rivet's samples, Open MPI's (if any).
struct Row<'a> {
    what: String,
    ours: &'a [f64],
    theirs: Option<&'a [f64]>,
}

fn rows<'a>(args: &Args, s: &'a Samples) -> Vec<Row<'a>> {
    let mut rows = Vec::new();
    let mut row = |what: String, ours: &'a [f64], theirs: Option<&'a [f64]>| {
        rows.push(Row { what, ours, theirs })
    };
    let pair = format!("{}+{} ranks", args.ranks, args.ranks);
    if !s.connect.is_empty() || !s.first_connect.is_empty() {
        row("open_port (opens the netmod)".into(), &s.open_port, None);
        row(
            format!("first connect of a job ({pair})"),
            &s.first_connect,
            None,
        );
        row(format!("connect ({pair})"), &s.connect, None);
        row(
            format!("connect+barrier+disconnect ({pair})"),
            &s.cycle,
            None,
        );
    }
    let some = |v: &'a Vec<f64>| (!v.is_empty()).then_some(v.as_slice());
    if !s.first[0].0.is_empty() || !s.first[1].0.is_empty() {
        row(
            "first spawn of a job, N=1".into(),
            &s.first[0].0,
            some(&s.first[1].0),
        );
    }
    for (i, n) in args.children.iter().enumerate() {
        let (r, o) = (&s.spawn[0][i], &s.spawn[1][i]);
        if r.0.is_empty() && o.0.is_empty() {
            continue;
        }
        row(format!("spawn N={n}"), &r.0, some(&o.0));
        row(
            format!("spawn N={n} until children exited"),
            &r.1,
            some(&o.1),
        );
    }
    rows
}

fn print_table(args: &Args, s: &Samples, with_ompi: bool) {
    println!(
        "# Dynamic processes, ms: median [min-max] (samples); {} parent rank(s) per spawn job; \
         Rivet jobs with RIVET_YIELD=always",
        args.parents
    );
    println!(
        "# {:<44}  {:>30}  {:>30}  {:>7}",
        "what",
        "Rivet",
        if with_ompi {
            "Open MPI"
        } else {
            "Open MPI (skipped)"
        },
        "ratio"
    );
    for Row { what, ours, theirs } in rows(args, s) {
        let cell = |v: &[f64]| {
            summarize(v).map_or("-".into(), |x| format!("{} ({})", fmt_summary(&x), v.len()))
        };
        let ratio = match (summarize(ours), theirs.and_then(summarize)) {
            (Some(a), Some(b)) => fmt_ratio(a.median / b.median),
            _ => "-".into(),
        };
        println!(
            "  {what:<44}  {:>30}  {:>30}  {ratio:>7}",
            cell(ours),
            theirs.map_or("-".into(), cell)
        );
    }
    if with_ompi {
        println!("# {}", hang_note(args, s));
    }
}

fn hang_note(args: &Args, s: &Samples) -> String {
    if s.ompi_hangs.is_empty() {
        return format!(
            "Open MPI: none of {} spawn cycles hung (limit {} s)",
            s.ompi_cycles, args.hang
        );
    }
    format!(
        "Open MPI: {} of {} spawn cycles hung in MPI_Comm_spawn (at {}) and were cut off after {} s, \
         ending their jobs; the figures are over the cycles that finished",
        s.ompi_hangs.len(),
        s.ompi_cycles,
        s.ompi_hangs.join(", "),
        args.hang
    )
}

/// Three significant digits: 0.00874, 0.0312, 0.87, 1.20.
fn fmt_ratio(r: f64) -> String {
    if !r.is_finite() || r <= 0.0 || r >= 0.1 {
        return format!("{r:.2}");
    }
    let decimals = (2.0 - r.log10().floor()) as usize;
    format!("{r:.decimals$}")
}

fn print_json(args: &Args, s: &Samples) {
    let stat = |v: &[f64]| match summarize(v) {
        Some(x) => format!(
            "{{\"median\":{},\"min\":{},\"max\":{},\"n\":{}}}",
            json::num(x.median),
            json::num(x.min),
            json::num(x.max),
            v.len()
        ),
        None => "null".into(),
    };
    let items: Vec<String> = rows(args, s)
        .into_iter()
        .map(|Row { what, ours, theirs }| {
            let ratio = match (summarize(ours), theirs.and_then(summarize)) {
                (Some(a), Some(b)) => json::num(a.median / b.median),
                _ => "null".into(),
            };
            format!(
                "{{\"what\":{},\"rivet\":{},\"openmpi\":{},\"ratio\":{ratio}}}",
                json::string(&what),
                stat(ours),
                theirs.map_or("null".into(), stat)
            )
        })
        .collect();
    let hangs: Vec<String> = s.ompi_hangs.iter().map(|h| json::string(h)).collect();
    println!(
        "{{\"benchmark\":\"dynamic\",\"unit\":\"ms\",\"parents\":{},\"ranks\":{},\"rows\":[{}],\"openmpi_cycles\":{},\"openmpi_hangs\":[{}]}}",
        args.parents,
        args.ranks,
        items.join(","),
        s.ompi_cycles,
        hangs.join(",")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ompi_spawn_output() {
        let out = "\
# Library: Open MPI v4.1.4, package: Debian OpenMPI
# parents: 1
# spawn N REP SPAWN_SECONDS EXITED_SECONDS
warmup 1 0 0.300000 0.350000
spawn 1 0 0.228619 0.283713
spawn 4 0 0.364835 0.431183
[host:123] some launcher warning
";
        let lines = parse_ompi(out);
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].0, "warmup");
        assert_eq!(lines[2].1, 4);
        assert!((lines[2].2 - 364.835).abs() < 1e-9);
        let mut s = Samples::default();
        s.spawn[1] = vec![Default::default(), Default::default()];
        let job = JobOutput {
            wall: 1.0,
            stdout: out.into(),
            stderr: String::new(),
            foreign_pct: None,
        };
        record_ompi_spawn(&mut s, &[1, 4], &job, None).unwrap();
        assert_eq!(s.first[1].0, vec![300.0]);
        assert_eq!(s.spawn[1][1].1.len(), 1);
        assert_eq!(s.ompi_cycles, 3);
        assert!(record_ompi_spawn(&mut s, &[16], &job, None).is_err());
        assert!(record_ompi_spawn(&mut s, &[1], &job, Some("failed (exit 1)")).is_err());
        // A hang: what came before counts, the hang is noted, no error.
        let hung = JobOutput {
            stdout: format!("{out}hang 4 1 60\n"),
            ..job.clone()
        };
        let note = record_ompi_spawn(&mut s, &[1, 4], &hung, Some("failed (exit 3)")).unwrap();
        assert!(note.contains("HUNG"), "{note}");
        assert_eq!(s.ompi_hangs, vec!["N=4".to_string()]);
        assert_eq!(s.spawn[1][1].0.len(), 2);
        assert_eq!(s.ompi_cycles, 7);
        let early = JobOutput {
            stdout: "# header\nhang warmup 1 60\n".into(),
            ..job
        };
        record_ompi_spawn(&mut s, &[1, 4], &early, Some("failed")).unwrap();
        assert_eq!(s.ompi_hangs[1], "warm-up N=1");
        let error = JobOutput {
            stdout: "error MPI_Comm_spawn: MPI_ERR_SPAWN\n".into(),
            ..hung
        };
        assert!(record_ompi_spawn(&mut s, &[1], &error, Some("failed")).is_err());
    }

    #[test]
    fn reads_rivet_spawn_and_connect_json() {
        let out = format!(
            "noise\n{{\"bench\":\"spawn\",\"parents\":1,\"unit\":\"ms\",\"reps\":2,\"first\":{{\"children\":1,\"spawn\":9,\"exited\":12}},\"rows\":[{{\"children\":1,\"spawn\":{},\"exited\":{}}}]}}\n",
            samples_json(&[2.0, 3.0]),
            samples_json(&[4.0, 5.0])
        );
        let job = |stdout: String| JobOutput {
            wall: 1.0,
            stdout,
            stderr: String::new(),
            foreign_pct: None,
        };
        let mut s = Samples::default();
        s.spawn[0] = vec![Default::default()];
        record_rivet_spawn(&mut s, &[1], &job(out)).unwrap();
        assert_eq!(s.spawn[0][0].0, vec![2.0, 3.0]);
        assert_eq!(s.first[0].1, vec![12.0]);
        let accept = format!(
            "{{\"bench\":\"accept\",\"open_port\":0.5,\"accept\":{}}}",
            samples_json(&[1.0])
        );
        let connect = format!(
            "{{\"bench\":\"connect\",\"first\":3,\"first_cycle\":4,\"connect\":{},\"cycle\":{}}}",
            samples_json(&[1.0, 2.0]),
            samples_json(&[1.5, 2.5])
        );
        record_connect(&mut s, &job(accept), &job(connect)).unwrap();
        assert_eq!(s.first_connect, vec![3.0]);
        assert_eq!(s.connect, vec![1.0, 2.0]);
        assert!(record_connect(&mut s, &job("{}".into()), &job("x".into())).is_err());
    }

    #[test]
    fn ratios_keep_three_digits() {
        assert_eq!(fmt_ratio(0.008741), "0.00874");
        assert_eq!(fmt_ratio(0.0312), "0.0312");
        assert_eq!(fmt_ratio(0.87), "0.87");
        assert_eq!(fmt_ratio(1.2), "1.20");
    }

    #[test]
    fn exited_tells_live_from_gone() {
        assert!(!exited(std::process::id()));
        assert!(exited(u32::MAX - 1));
    }
}
