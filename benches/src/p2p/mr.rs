//! `mr`: the bw scheme per thread, each thread on its own `comm.dup()`, on a
//! `Shared` engine (MULTIPLE) or one `Local` engine per thread.

use std::time::Instant;

use rivet::{Comm, Local, Request, Shared, ThreadLevel, Threading};

use crate::p2p::args::MrArgs;
use crate::p2p::buf::{die_count, pattern, AlignedBuf};
use crate::p2p::output::{level_note, Output};
use crate::p2p::pairs::{per_message, plan, recv_window, send_window, start};
use crate::p2p::{check, ACK_LEN, TAG_ACK, TAG_DATA, TAG_SYNC, TAG_VERIFY};
use crate::report::Row;
use crate::sizes::{self, Kind};

/// Message rate: `--threads` threads per rank, each on its own duplicate
/// of the world communicator, windows of 64 sends and a 4-byte ack, between
/// `--pairs` pairs of ranks (i → i + pairs).
pub fn mr(args: MrArgs) -> Result<(), String> {
    if args.threads == 0 || args.pairs == 0 {
        return Err("--threads and --pairs must be at least 1".into());
    }
    match args.common.thread_level {
        ThreadLevel::Multiple => mr_with::<Shared>(args),
        _ if args.threads > 1 => Err(format!(
            "--threads {} needs --thread-level multiple (threads call the engine at once)",
            args.threads
        )),
        _ => mr_with::<Local>(args),
    }
}

/// How the threads of one rank run their share: concurrently where the
/// handles may cross threads, else there is only the one.
trait MrThreads: Threading {
    fn spans(
        comms: &[Comm<Self>],
        bufs: &mut [(AlignedBuf, AlignedBuf)],
        job: MrJob,
    ) -> Vec<(Instant, Instant)>;
}

#[derive(Clone, Copy)]
struct MrJob {
    peer: u32,
    size: usize,
    window: usize,
    warm: u32,
    iters: u32,
}

impl MrThreads for Shared {
    fn spans(
        comms: &[Comm<Shared>],
        bufs: &mut [(AlignedBuf, AlignedBuf)],
        job: MrJob,
    ) -> Vec<(Instant, Instant)> {
        let start_line = std::sync::Barrier::new(comms.len());
        std::thread::scope(|ts| {
            let handles: Vec<_> = comms
                .iter()
                .zip(bufs.iter_mut())
                .map(|(comm, (s, r))| {
                    let start_line = &start_line;
                    let s = &*s;
                    ts.spawn(move || mr_thread(comm, s, r, job, start_line))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("mr thread panicked"))
                .collect()
        })
    }
}

impl MrThreads for Local {
    fn spans(
        comms: &[Comm<Local>],
        bufs: &mut [(AlignedBuf, AlignedBuf)],
        job: MrJob,
    ) -> Vec<(Instant, Instant)> {
        let start_line = std::sync::Barrier::new(1);
        let (s, r) = &mut bufs[0];
        vec![mr_thread(&comms[0], s, r, job, &start_line)]
    }
}

fn mr_with<T: MrThreads>(args: MrArgs) -> Result<(), String> {
    let kind = Kind::Mr;
    let common = &args.common;
    common.check()?;
    let (min, max) = common.bounds();
    let sizes = sizes::sizes_for(kind, min, max)?;
    let Some((engine, world)) = start::<T>(kind, common.info, common.thread_level)? else {
        return Ok(());
    };
    let rank = world.rank();
    let pairs = args.pairs;
    if u64::from(world.size()) < 2 * u64::from(pairs) {
        return Err(format!(
            "--pairs {pairs} needs {} ranks or more; this job has {}",
            2 * u64::from(pairs),
            world.size()
        ));
    }
    let measures = rank < 2 * pairs;
    let peer = if rank < pairs {
        rank + pairs
    } else {
        rank.wrapping_sub(pairs)
    };
    // dup is collective: every rank, main thread, same order.
    let comms: Vec<Comm<T>> = if args.threads == 1 {
        vec![world.clone()]
    } else {
        (0..args.threads)
            .map(|i| world.dup().map_err(|e| format!("dup #{i}: {e}")))
            .collect::<Result<_, _>>()?
    };
    let buf_len = sizes.iter().copied().max().unwrap_or(0).max(ACK_LEN);
    let mut out = Output::new(
        kind,
        (world.size(), args.threads, common.window),
        level_note(common.thread_level, engine.thread_level(), pairs),
        (common.json, common.csv),
        rank == 0,
    );
    let mut bufs: Vec<(AlignedBuf, AlignedBuf)> = if measures {
        comms
            .iter()
            .map(|_| {
                let mut sbuf = AlignedBuf::new(buf_len, b'a');
                pattern(rank, sbuf.as_mut_slice());
                (sbuf, AlignedBuf::new(buf_len, b'b'))
            })
            .collect()
    } else {
        Vec::new()
    };
    for &size in &sizes {
        let (warm, iters) = plan(kind, size, common);
        check("barrier", world.barrier());
        let job = MrJob {
            peer,
            size,
            window: common.window,
            warm,
            iters,
        };
        let calls0 = engine.netmod_syscalls();
        let spans = if measures {
            T::spans(&comms, &mut bufs, job)
        } else {
            Vec::new()
        };
        if pairs > 1 {
            // Every pair's windows end before the second barrier.
            check("barrier", world.barrier());
        }
        if rank == 0 {
            let t0 = spans.iter().map(|s| s.0).min().expect("one thread");
            let t1 = if pairs > 1 {
                Instant::now()
            } else {
                spans.iter().map(|s| s.1).max().expect("one thread")
            };
            let secs = (t1 - t0).as_secs_f64();
            let msgs =
                f64::from(pairs) * comms.len() as f64 * common.window as f64 * f64::from(iters);
            let per_iter = comms.len() * common.window;
            let syscalls = per_message(calls0, engine.netmod_syscalls(), per_iter, warm + iters);
            out.row(Row {
                size,
                value: msgs / secs,
                iters,
                syscalls,
            });
        }
    }
    out.finish();
    drop(comms);
    drop(world);
    engine.finalize().map_err(|e| format!("finalize: {e}"))
}

/// One thread of `mr`: warm up, line up with the peer thread and with this
/// rank's other threads, then time `iters` windows. Returns when the timed
/// part started and ended. The lower rank of a pair sends.
fn mr_thread<T: Threading>(
    comm: &Comm<T>,
    sbuf: &AlignedBuf,
    rbuf: &mut AlignedBuf,
    job: MrJob,
    start_line: &std::sync::Barrier,
) -> (Instant, Instant) {
    let mut reqs: Vec<Request<'_, T>> = Vec::with_capacity(job.window);
    let sender = comm.rank() < job.peer;
    for _ in 0..job.warm {
        pair_window(comm, sbuf, rbuf, job, sender, &mut reqs);
    }
    // Line up with the peer thread: a zero-byte round trip (not a barrier,
    // which would need the ranks that do not take part).
    if sender {
        check("sync send", comm.send(&[], job.peer, TAG_SYNC));
        let _ = check("sync recv", comm.recv(&mut [], job.peer as i32, TAG_SYNC));
    } else {
        let _ = check("sync recv", comm.recv(&mut [], job.peer as i32, TAG_SYNC));
        check("sync send", comm.send(&[], job.peer, TAG_SYNC));
    }
    start_line.wait();
    let t0 = Instant::now();
    for _ in 0..job.iters {
        pair_window(comm, sbuf, rbuf, job, sender, &mut reqs);
    }
    let t1 = Instant::now();
    verify_pair(comm, sbuf, rbuf, job, sender);
    (t0, t1)
}

/// [`verify`] for one pair of `mr`, after its timing: the sender's
/// pattern, one way, into a cleared buffer, checked byte for byte.
fn verify_pair<T: Threading>(
    comm: &Comm<T>,
    sbuf: &AlignedBuf,
    rbuf: &mut AlignedBuf,
    job: MrJob,
    sender: bool,
) {
    let size = job.size;
    if sender {
        check(
            "verify send",
            comm.send(&sbuf.as_slice()[..size], job.peer, TAG_VERIFY),
        );
        return;
    }
    let r = &mut rbuf.as_mut_slice()[..size];
    r.fill(0);
    let st = check("verify recv", comm.recv(r, job.peer as i32, TAG_VERIFY));
    if st.count != size {
        die_count(size, st.count);
    }
    let mut want = vec![0u8; size];
    pattern(job.peer, &mut want);
    if let Some(at) = r.iter().zip(&want).position(|(a, b)| a != b) {
        eprintln!(
            "rivet-bench: rank {}: a {size}-byte mr message from rank {} is wrong at byte {at}",
            comm.rank(),
            job.peer
        );
        std::process::exit(1);
    }
}

/// `bw_window` between any pair: the sender posts 64 sends, the receiver
/// 64 receives and answers with the ack.
fn pair_window<'c, T: Threading>(
    comm: &'c Comm<T>,
    sbuf: &AlignedBuf,
    rbuf: &mut AlignedBuf,
    job: MrJob,
    sender: bool,
    reqs: &mut Vec<Request<'c, T>>,
) {
    let size = job.size;
    if sender {
        send_window(
            comm,
            &sbuf.as_slice()[..size],
            job.window,
            job.peer,
            TAG_DATA,
            reqs,
        );
        let ack = &mut rbuf.as_mut_slice()[..ACK_LEN];
        let _ = check("ack recv", comm.recv(ack, job.peer as i32, TAG_ACK));
    } else {
        recv_window(comm, rbuf, size, job.window, job.peer, TAG_DATA, reqs);
        check(
            "ack send",
            comm.send(&sbuf.as_slice()[..ACK_LEN], job.peer, TAG_ACK),
        );
    }
}
