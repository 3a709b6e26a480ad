//! The rank side: `spawn`, `spawn-child`, `accept` and `connect`, each
//! printing its samples as one JSON line.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rivet::{Comm, Engine};

use crate::dynamic::table::fmt_ms;
use crate::json;
use crate::stats::summarize;

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
pub(crate) fn exited(pid: u32) -> bool {
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

pub(crate) fn samples_json(samples: &[f64]) -> String {
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
