//! Rank side of the benchmarks of scale: `latency --idle-peers N` (8 B
//! ping-pong between ranks 0 and 1 while N more ranks hold open, idle
//! connections to both, and rank 0's RSS with those connections) and
//! `fanin` (every rank sends windows of 8 B messages to rank 0).
//!
//! Idle ranks must cost no CPU (a job of 66 ranks runs on machines with
//! two cores): once connected they sleep in a blocking PMI barrier, which
//! ranks 0 and 1 join when they are done, and only then does anyone
//! progress the engine again (the final barrier and finalize).

use std::time::Instant;

use rivet::{Comm, Engine, Local, Request, ThreadLevel};

use crate::p2p::{self, check, AlignedBuf, P2pArgs, ACK_LEN, TAG_ACK, TAG_DATA, TAG_SYNC};
use crate::report::{self, Row};
use crate::sizes::{self, Kind};

/// This process's resident set, KiB (`VmRSS` of /proc/self/status).
pub(crate) fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Ranks 0 and 1 line up (a zero-byte exchange) without the idle ranks.
fn sync_pair(world: &Comm<Local>) {
    let rank = world.rank();
    let mut none = [0u8; 0];
    if rank == 0 {
        check("sync send", world.send(&[], 1, TAG_SYNC));
        check("sync recv", world.recv(&mut none, 1, TAG_SYNC));
    } else {
        check("sync recv", world.recv(&mut none, 0, TAG_SYNC));
        check("sync send", world.send(&[], 0, TAG_SYNC));
    }
}

/// `latency --idle-peers idle`.
pub fn latency_idle(args: P2pArgs, idle: u32) -> Result<(), String> {
    if args.thread_level == ThreadLevel::Multiple {
        return Err("--idle-peers runs at thread level single, funneled or serialized".into());
    }
    let (min, max) = match args.range {
        Some(r) => r,
        None => (args.min, args.max),
    };
    let sizes = sizes::sizes_for(Kind::Latency, min, max)?;
    let engine: Engine<Local> = p2p::init(args.thread_level)?;
    let world = engine.world();
    let size = world.size();
    if u64::from(size) != u64::from(idle) + 2 {
        drop(world);
        engine.finalize().map_err(|e| format!("finalize: {e}"))?;
        return Err(format!(
            "--idle-peers {idle} needs exactly {} ranks; this job has {size}",
            u64::from(idle) + 2
        ));
    }
    let rank = world.rank();
    check("barrier", world.barrier());
    let rss_before = rss_kib();
    // Every idle rank exchanges one message with rank 0, then rank 1.
    let mut one = [0u8; 1];
    if rank >= 2 {
        for p in [0, 1] {
            check("connect send", world.send(&[1], p, TAG_SYNC));
            check("connect recv", world.recv(&mut one, p as i32, TAG_SYNC));
        }
    } else {
        for r in 2..size {
            check("connect recv", world.recv(&mut one, r as i32, TAG_SYNC));
            check("connect send", world.send(&[1], r, TAG_SYNC));
        }
    }
    let rss_after = rss_kib();
    let mut rows = Vec::new();
    if rank < 2 {
        let buf_len = sizes.iter().copied().max().unwrap_or(0);
        let sbuf = AlignedBuf::new(buf_len, b'a');
        let mut rbuf = AlignedBuf::new(buf_len, b'b');
        for &len in &sizes {
            let (warm, iters) = p2p::plan(Kind::Latency, len, &args);
            sync_pair(&world);
            let calls0 = engine.netmod_syscalls();
            let secs = p2p::ping_pong(
                &world,
                &sbuf.as_slice()[..len],
                &mut rbuf.as_mut_slice()[..len],
                warm,
                iters,
            );
            let syscalls = p2p::per_message(calls0, engine.netmod_syscalls(), 2, warm + iters);
            rows.push(Row {
                size: len,
                value: secs * 1e6 / (2.0 * f64::from(iters)),
                iters,
                syscalls,
            });
        }
    }
    // Idle ranks sleep here from the start; 0 and 1 join once done.
    engine
        .pmi_barrier()
        .map_err(|e| format!("PMI barrier: {e}"))?;
    check("barrier", world.barrier());
    if rank == 0 {
        let ranks = (size, 1, 1);
        let rss = rss_after.unwrap_or(0);
        let growth = rss_after.zip(rss_before).map(|(a, b)| a.saturating_sub(b));
        if args.json {
            println!(
                "{}",
                report::json_doc_named(Kind::Latency.name(), Kind::Latency.unit(), ranks, &rows)
            );
            // The memory line: rank 0's RSS once connected to every idle
            // peer, keyed by their number.
            let mem = Row {
                size: idle as usize,
                value: rss as f64,
                iters: 1,
                syscalls: None,
            };
            println!("{}", report::json_doc_named("memory", "KiB", ranks, &[mem]));
        } else {
            println!(
                "{}, {idle} idle peers",
                report::title(Kind::Latency, size, 1, 1)
            );
            println!(
                "# rank 0 RSS {rss} KiB once connected to {idle} idle peers ({} KiB more than before connecting)",
                growth.map_or("?".into(), |g| g.to_string())
            );
            println!(
                "{}{:>16}",
                report::column_header(Kind::Latency),
                "syscalls/msg"
            );
            for r in &rows {
                println!(
                    "{}{:>16}",
                    report::table_row(Kind::Latency, r.size, r.value),
                    r.syscalls.map_or("-".into(), |c| format!("{c:.2}"))
                );
            }
        }
    }
    drop(world);
    engine.finalize().map_err(|e| format!("finalize: {e}"))
}

/// Options of `fanin`.
#[derive(clap::Args, Clone, Debug)]
pub struct FaninArgs {
    /// Messages per window, per sender.
    #[arg(short = 'W', long, default_value_t = sizes::WINDOW, value_name = "N")]
    pub window: usize,
    /// Timed windows.
    #[arg(short = 'i', long, default_value_t = 1000, value_name = "N")]
    pub iters: u32,
    /// Untimed windows first.
    #[arg(short = 'x', long, default_value_t = 100, value_name = "N")]
    pub warmup: u32,
    /// Print one JSON object (bench "fanin", unit msg/s, one row of size 8).
    #[arg(long)]
    pub json: bool,
}

/// Message size of `fanin`.
const FANIN_SIZE: usize = 8;

/// `fanin`: per window, every rank but 0 sends `window` 8 B messages to
/// rank 0, which receives them all (posted per sender) and acks each
/// sender; rank 0 reports messages received per second.
pub fn fanin(args: FaninArgs) -> Result<(), String> {
    if args.window == 0 || args.iters == 0 {
        return Err("--window and --iters must be at least 1".into());
    }
    let engine: Engine<Local> = p2p::init(ThreadLevel::Single)?;
    let world = engine.world();
    let size = world.size();
    if size < 2 {
        drop(world);
        engine.finalize().map_err(|e| format!("finalize: {e}"))?;
        return Err("fanin needs at least 2 ranks: run `rivetrun -n 17 rivet-bench fanin`".into());
    }
    let rank = world.rank();
    let senders = size - 1;
    let sbuf = AlignedBuf::new(FANIN_SIZE.max(ACK_LEN), b'a');
    let mut rbuf = AlignedBuf::new(FANIN_SIZE.max(ACK_LEN), b'b');
    let mut reqs: Vec<Request<'_, Local>> =
        Vec::with_capacity(args.window * senders as usize + senders as usize);
    check("barrier", world.barrier());
    let calls0 = engine.netmod_syscalls();
    let mut t0 = Instant::now();
    for i in 0..args.warmup + args.iters {
        if i == args.warmup {
            t0 = Instant::now();
        }
        reqs.clear();
        if rank == 0 {
            for src in 1..size {
                p2p::post_recvs(
                    &world,
                    &mut rbuf.as_mut_slice()[..FANIN_SIZE],
                    args.window,
                    src,
                    TAG_DATA,
                    &mut reqs,
                );
            }
            check("wait_all (receives)", Request::wait_all(&mut reqs));
            reqs.clear();
            for dst in 1..size {
                p2p::post_sends(
                    &world,
                    &sbuf.as_slice()[..ACK_LEN],
                    1,
                    dst,
                    TAG_ACK,
                    &mut reqs,
                );
            }
            check("wait_all (acks)", Request::wait_all(&mut reqs));
        } else {
            p2p::post_sends(
                &world,
                &sbuf.as_slice()[..FANIN_SIZE],
                args.window,
                0,
                TAG_DATA,
                &mut reqs,
            );
            check("wait_all (sends)", Request::wait_all(&mut reqs));
            let ack = &mut rbuf.as_mut_slice()[..ACK_LEN];
            let _ = check("ack recv", world.recv(ack, 0, TAG_ACK));
        }
        reqs.clear();
    }
    let secs = t0.elapsed().as_secs_f64();
    let calls1 = engine.netmod_syscalls();
    drop(reqs);
    check("barrier", world.barrier());
    if rank == 0 {
        let per_window = args.window * senders as usize;
        let msgs = per_window as f64 * f64::from(args.iters);
        let row = Row {
            size: FANIN_SIZE,
            value: msgs / secs,
            iters: args.iters,
            syscalls: p2p::per_message(calls0, calls1, per_window, args.warmup + args.iters),
        };
        if args.json {
            println!(
                "{}",
                report::json_doc_named("fanin", "msg/s", (size, 1, args.window), &[row])
            );
        } else {
            println!(
                "# Rivet fanin ({size} ranks: {senders} senders to rank 0), window {}",
                args.window
            );
            println!("{:<10}{:>18}{:>16}", "# Size", "Messages/s", "syscalls/msg");
            println!(
                "{:<10}{:>18.0}{:>16}",
                row.size,
                row.value,
                row.syscalls.map_or("-".into(), |c| format!("{c:.2}"))
            );
        }
    }
    drop(world);
    engine.finalize().map_err(|e| format!("finalize: {e}"))
}
