//! `latency`, `bw` and `bibw` between ranks 0 and 1: the OSU schemes, one
//! size after another, each after a barrier of all ranks.

use std::time::Instant;

use rivet::{Comm, Engine, Local, Request, Shared, ThreadLevel, Threading};

use crate::p2p::args::P2pArgs;
use crate::p2p::buf::{die_count, pattern, verify, AlignedBuf};
use crate::p2p::output::{level_note, Output};
use crate::p2p::startup::print_info;
use crate::p2p::{check, init, ACK_LEN, TAG_ACK, TAG_DATA, TAG_PING};
use crate::report::Row;
use crate::sizes::{self, Kind};

/// The (warm-up, timed) iterations of one size, after --iters/--warmup.
pub(crate) fn plan(kind: Kind, size: usize, args: &P2pArgs) -> (u32, u32) {
    let (warm, iters) = sizes::iterations(kind, size);
    match args.iters {
        Some(n) => (args.warmup.unwrap_or(n / 10), n),
        None => (args.warmup.unwrap_or(warm), iters),
    }
}

/// latency, bw and bibw (mr goes through [`mr`]).
pub fn run(kind: Kind, args: P2pArgs) -> Result<(), String> {
    if let Some(n) = args.idle_peers {
        if kind != Kind::Latency {
            return Err(format!(
                "--idle-peers is for latency only, not {}",
                kind.name()
            ));
        }
        return crate::scale::latency_idle(args.clone(), n);
    }
    match args.thread_level {
        ThreadLevel::Multiple => run_with::<Shared>(kind, args),
        _ => run_with::<Local>(kind, args),
    }
}

fn run_with<T: Threading>(kind: Kind, args: P2pArgs) -> Result<(), String> {
    assert!(kind != Kind::Mr, "mr has its own entry point");
    args.check()?;
    let (min, max) = args.bounds();
    let sizes = sizes::sizes_for(kind, min, max)?;
    let window = args.window;
    let Some((engine, world)) = start::<T>(kind, args.info, args.thread_level)? else {
        return Ok(());
    };
    let rank = world.rank();
    let buf_len = sizes.iter().copied().max().unwrap_or(0).max(ACK_LEN);
    let (sbuf, mut rbuf) = if rank < 2 {
        let mut sbuf = AlignedBuf::new(buf_len, 0);
        pattern(rank, sbuf.as_mut_slice());
        (sbuf, AlignedBuf::new(buf_len, b'b'))
    } else {
        (AlignedBuf::new(0, 0), AlignedBuf::new(0, 0))
    };
    let mut out = Output::new(
        kind,
        (world.size(), 1, window),
        level_note(args.thread_level, engine.thread_level(), 1),
        (args.json, args.csv),
        rank == 0,
    );
    let mut reqs: Vec<Request<'_, T>> = Vec::with_capacity(2 * window);
    for &size in &sizes {
        let (warm, iters) = plan(kind, size, &args);
        check("barrier", world.barrier());
        if rank >= 2 {
            continue;
        }
        let peer = 1 - rank;
        let s = &sbuf.as_slice()[..size];
        let calls0 = engine.netmod_syscalls();
        let secs = match kind {
            Kind::Latency => {
                let r = &mut rbuf.as_mut_slice()[..size];
                ping_pong(&world, s, r, warm, iters)
            }
            Kind::Bw => {
                let mut t0 = Instant::now();
                for i in 0..warm + iters {
                    if i == warm {
                        t0 = Instant::now();
                    }
                    bw_window(&world, &sbuf, &mut rbuf, size, window, &mut reqs);
                }
                t0.elapsed().as_secs_f64()
            }
            Kind::Bibw => {
                let mut t0 = Instant::now();
                for i in 0..warm + iters {
                    if i == warm {
                        t0 = Instant::now();
                    }
                    exchange_window(
                        &world, s, &mut rbuf, size, window, peer, TAG_DATA, &mut reqs,
                    );
                }
                t0.elapsed().as_secs_f64()
            }
            Kind::Mr => unreachable!(),
        };
        verify(&world, &sbuf, &mut rbuf, size);
        if rank == 0 {
            let value = match kind {
                Kind::Latency => secs * 1e6 / (2.0 * f64::from(iters)),
                Kind::Bw => bandwidth(size, window, iters, 1, secs),
                Kind::Bibw => bandwidth(size, window, iters, 2, secs),
                Kind::Mr => unreachable!(),
            };
            // Messages rank 0 sent or received (acks not counted).
            let per_iter = match kind {
                Kind::Latency => 2,
                Kind::Bibw => 2 * window,
                _ => window,
            };
            let syscalls = per_message(calls0, engine.netmod_syscalls(), per_iter, warm + iters);
            out.row(Row {
                size,
                value,
                iters,
                syscalls,
            });
        }
    }
    drop(reqs);
    out.finish();
    drop(world);
    engine.finalize().map_err(|e| format!("finalize: {e}"))
}

/// Netmod system calls per message between two counter readings, over
/// `iters` iterations of `per_iter` messages; `None` without a counter.
pub(crate) fn per_message(
    before: Option<u64>,
    after: Option<u64>,
    per_iter: usize,
    iters: u32,
) -> Option<f64> {
    let (b, a) = before.zip(after)?;
    let msgs = per_iter as f64 * f64::from(iters);
    (msgs > 0.0).then(|| a.saturating_sub(b) as f64 / msgs)
}

/// An engine and its world communicator.
type Started<T> = (Engine<T>, Comm<T>);

/// The start every benchmark shares: init; with `--info`, print it and
/// finish (`None`); else the world, which must have two ranks or more.
pub(crate) fn start<T: Threading>(
    kind: Kind,
    info: bool,
    level: ThreadLevel,
) -> Result<Option<Started<T>>, String> {
    let engine = init::<T>(level)?;
    let finalize = |engine: Engine<T>| engine.finalize().map_err(|e| format!("finalize: {e}"));
    if info {
        print_info(&engine);
        return finalize(engine).map(|()| None);
    }
    let world = engine.world();
    if world.size() < 2 {
        drop(world);
        finalize(engine)?;
        return Err(need_two(kind));
    }
    Ok(Some((engine, world)))
}

fn need_two(kind: Kind) -> String {
    format!(
        "{} needs at least 2 ranks (ranks 0 and 1 measure, others wait in barriers); \
         this job has 1: run `rivetrun -n 2 rivet-bench {}`",
        kind.name(),
        kind.name()
    )
}

/// MB/s, 1 MB = 1e6 B: `directions` × `window` messages of `size` per iteration.
fn bandwidth(size: usize, window: usize, iters: u32, directions: u32, secs: f64) -> f64 {
    size as f64 * (window as f64) * f64::from(iters) * f64::from(directions) / secs / 1e6
}

/// Blocking ping-pong between ranks 0 and 1; seconds of the timed part.
pub(crate) fn ping_pong<T: Threading>(
    comm: &Comm<T>,
    sbuf: &[u8],
    rbuf: &mut [u8],
    warm: u32,
    iters: u32,
) -> f64 {
    let rank = comm.rank();
    let peer = 1 - rank;
    let size = sbuf.len();
    let mut t0 = Instant::now();
    for i in 0..warm + iters {
        if i == warm {
            t0 = Instant::now();
        }
        if rank == 0 {
            check("send", comm.send(sbuf, peer, TAG_PING));
            let st = check("recv", comm.recv(rbuf, peer as i32, TAG_PING));
            if st.count != size {
                die_count(size, st.count);
            }
        } else {
            let st = check("recv", comm.recv(rbuf, peer as i32, TAG_PING));
            if st.count != size {
                die_count(size, st.count);
            }
            check("send", comm.send(sbuf, peer, TAG_PING));
        }
    }
    t0.elapsed().as_secs_f64()
}

/// One osu_bw iteration between ranks 0 and 1: rank 0 sends a window of
/// 64 messages of `size` bytes, rank 1 receives them and answers with a
/// 4-byte ack.
fn bw_window<'c, T: Threading>(
    comm: &'c Comm<T>,
    sbuf: &AlignedBuf,
    rbuf: &mut AlignedBuf,
    size: usize,
    window: usize,
    reqs: &mut Vec<Request<'c, T>>,
) {
    if comm.rank() == 0 {
        send_window(comm, &sbuf.as_slice()[..size], window, 1, TAG_DATA, reqs);
        let ack = &mut rbuf.as_mut_slice()[..ACK_LEN];
        let _ = check("ack recv", comm.recv(ack, 1, TAG_ACK));
    } else {
        recv_window(comm, rbuf, size, window, 0, TAG_DATA, reqs);
        check(
            "ack send",
            comm.send(&sbuf.as_slice()[..ACK_LEN], 0, TAG_ACK),
        );
    }
}

/// Post `window` sends of `buf` to `dest` and wait for all of them.
pub(crate) fn send_window<'c, T: Threading>(
    comm: &'c Comm<T>,
    buf: &[u8],
    window: usize,
    dest: u32,
    tag: i32,
    reqs: &mut Vec<Request<'c, T>>,
) {
    reqs.clear();
    post_sends(comm, buf, window, dest, tag, reqs);
    check("wait_all (sends)", Request::wait_all(reqs));
    reqs.clear();
}

/// Post `window` receives of `size` bytes from `src`, all into the start
/// of `rbuf` as osu_bw does, and wait for all of them.
pub(crate) fn recv_window<'c, T: Threading>(
    comm: &'c Comm<T>,
    rbuf: &mut AlignedBuf,
    size: usize,
    window: usize,
    src: u32,
    tag: i32,
    reqs: &mut Vec<Request<'c, T>>,
) {
    reqs.clear();
    post_recvs(
        comm,
        &mut rbuf.as_mut_slice()[..size],
        window,
        src,
        tag,
        reqs,
    );
    check("wait_all (receives)", Request::wait_all(reqs));
    reqs.clear();
}

/// osu_bibw's iteration: `window` receives from `peer` (into one buffer),
/// then `window` sends to it, then wait for all of them.
#[allow(clippy::too_many_arguments)]
fn exchange_window<'c, T: Threading>(
    comm: &'c Comm<T>,
    sbuf: &[u8],
    rbuf: &mut AlignedBuf,
    size: usize,
    window: usize,
    peer: u32,
    tag: i32,
    reqs: &mut Vec<Request<'c, T>>,
) {
    reqs.clear();
    post_recvs(
        comm,
        &mut rbuf.as_mut_slice()[..size],
        window,
        peer,
        tag,
        reqs,
    );
    post_sends(comm, &sbuf[..size], window, peer, tag, reqs);
    check("wait_all", Request::wait_all(reqs));
    reqs.clear();
}

/// Append `window` sends of `buf` to `reqs`. The caller waits for all of
/// `reqs` before `buf`'s borrow ends.
pub(crate) fn post_sends<'c, T: Threading>(
    comm: &'c Comm<T>,
    buf: &[u8],
    window: usize,
    dest: u32,
    tag: i32,
    reqs: &mut Vec<Request<'c, T>>,
) {
    for _ in 0..window {
        // SAFETY: every caller waits for all of `reqs` while `buf` is still
        // borrowed unchanged; on any error `check` ends the process without
        // returning, so `buf` is never freed or written while a send is in
        // flight.
        let r = unsafe { comm.isend_raw(buf.as_ptr(), buf.len(), dest, tag) };
        reqs.push(check("isend", r));
    }
}

/// Append `window` receives into the same `buf` (as osu_bw: its contents
/// are never read). The caller waits for all of `reqs` before `buf`'s
/// borrow ends.
pub(crate) fn post_recvs<'c, T: Threading>(
    comm: &'c Comm<T>,
    buf: &mut [u8],
    window: usize,
    src: u32,
    tag: i32,
    reqs: &mut Vec<Request<'c, T>>,
) {
    for _ in 0..window {
        // SAFETY: `buf` is mutably borrowed by the caller until it has waited
        // for all of `reqs`, so nothing else touches it meanwhile; errors end
        // the process; the 64 receives share it on purpose, only the engine
        // writes it.
        let r = unsafe { comm.irecv_raw(buf.as_mut_ptr(), buf.len(), src as i32, tag) };
        reqs.push(check("irecv", r));
    }
}
