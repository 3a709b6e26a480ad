//! Rank side of the point-to-point benchmarks (`latency`, `bw`, `bibw`,
//! `mr`), the engine `info` and the `startup` hello world. Run under a
//! launcher: `rivetrun -n 2 rivet-bench latency` or
//! `mpiexec.hydra -n 2 rivet-bench latency`.
//!
//! The schemes are those of OSU (and of the peers' `mpi_p2p.c`):
//! - latency: blocking send/recv ping-pong between ranks 0 and 1;
//! - bw: rank 0 posts a window of 64 nonblocking sends, rank 1 64 receives
//!   (into one buffer), then rank 1 sends a 4-byte ack;
//! - bibw: both ranks post 64 receives and 64 sends, then wait for all;
//! - mr: as bw, per thread, each thread on its own `comm.dup()`.
//!
//! Every size starts with a barrier of all ranks. Ranks 2 and above take part
//! in the barriers (and `dup`s) only.

use std::alloc::{alloc, dealloc, Layout};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use rivet::{Comm, Engine, Local, Request, Shared, ThreadLevel, Threading};

use crate::report::{self, Row};
use crate::sizes::{self, Kind};

pub(crate) const TAG_PING: i32 = 1;
pub(crate) const TAG_DATA: i32 = 100;
pub(crate) const TAG_ACK: i32 = 101;
pub(crate) const TAG_SYNC: i32 = 102;
pub(crate) const ACK_LEN: usize = 4;
pub(crate) const TAG_VERIFY: i32 = 103;

/// This process's rank, for error messages (set after init).
static RANK: AtomicU32 = AtomicU32::new(u32::MAX);

/// Options shared by latency, bw, bibw and mr.
#[derive(clap::Args, Clone, Debug)]
pub struct P2pArgs {
    /// Smallest message size in bytes (suffixes K, M, G, KiB, MiB, GiB are binary).
    /// [default: 0; mr: 8 B only unless --min or --max is given]
    #[arg(long, value_parser = rivet::parse_size, value_name = "BYTES")]
    pub min: Option<usize>,
    /// Largest message size in bytes. [default: 4MiB]
    #[arg(long, value_parser = rivet::parse_size, value_name = "BYTES")]
    pub max: Option<usize>,
    /// Sizes as OSU's `-m`: `MIN:MAX`, `MAX` or `MIN:` (suffixes as --min).
    #[arg(short = 'm', value_parser = parse_range, value_name = "MIN:MAX",
          conflicts_with_all = ["min", "max"])]
    pub range: Option<(Option<usize>, Option<usize>)>,
    /// Messages per window of bw, bibw and mr (OSU's -W).
    #[arg(short = 'W', long, default_value_t = sizes::WINDOW, value_name = "N")]
    pub window: usize,
    /// Timed iterations per size (round trips, or windows), instead of
    /// mpi_p2p.c's defaults (latency 10000/1000/100, bw and bibw
    /// 500/100/20, mr 10000 up to 8 KiB, larger sizes shrinking with size).
    #[arg(short = 'i', long, value_name = "N")]
    pub iters: Option<u32>,
    /// Untimed iterations before each size [default: as mpi_p2p.c, a
    /// tenth of the timed ones (mr up to 8 KiB: 500); with --iters N: N/10].
    #[arg(short = 'x', long, value_name = "N")]
    pub warmup: Option<u32>,
    /// Print one JSON object at the end instead of the table (shape in `rivet-bench --help`).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print CSV at the end instead of the table:
    /// bench,ranks,threads,window,unit,size,value,iters, one line per size.
    #[arg(long)]
    pub csv: bool,
    /// Print the engine's configuration (rank 0) and exit.
    #[arg(long)]
    pub info: bool,
    /// latency only: the job has exactly 2 + N ranks; ranks 2 and up
    /// connect to ranks 0 and 1 (one message each way), then sleep in a
    /// blocking PMI barrier (no CPU) while 0 and 1 ping-pong. Rank 0 also
    /// reports its RSS once connected (a `memory` JSON line).
    #[arg(long, value_name = "N")]
    pub idle_peers: Option<u32>,
    /// The thread level asked for (single, funneled, serialized, multiple),
    /// as `MPI_Init_thread`. Below multiple the engine takes no lock;
    /// `RIVET_THREAD_LEVEL` may raise it.
    #[arg(long, default_value = "single", value_parser = parse_level, value_name = "LEVEL")]
    pub thread_level: ThreadLevel,
}

/// OSU's `-m [MIN:]MAX` (also `MIN:`).
pub(crate) fn parse_range(s: &str) -> Result<(Option<usize>, Option<usize>), String> {
    let size = |t: &str| -> Result<Option<usize>, String> {
        if t.is_empty() {
            Ok(None)
        } else {
            rivet::parse_size(t).map(Some)
        }
    };
    match s.split_once(':') {
        Some((min, max)) => Ok((size(min)?, size(max)?)),
        None if !s.is_empty() => Ok((None, size(s)?)),
        None => Err("empty size range".into()),
    }
}

impl P2pArgs {
    /// (--min or -m's MIN, --max or -m's MAX).
    fn bounds(&self) -> (Option<usize>, Option<usize>) {
        match self.range {
            Some((min, max)) => (min, max),
            None => (self.min, self.max),
        }
    }

    /// The checks every point-to-point benchmark makes of its options.
    fn check(&self) -> Result<(), String> {
        if self.iters == Some(0) {
            return Err("--iters must be at least 1".into());
        }
        if self.window == 0 {
            return Err("--window must be at least 1".into());
        }
        Ok(())
    }
}

fn parse_level(s: &str) -> Result<ThreadLevel, String> {
    s.parse().map_err(|e: rivet::Error| e.to_string())
}

/// Options of `mr`.
#[derive(clap::Args, Clone, Debug)]
pub struct MrArgs {
    #[command(flatten)]
    pub common: P2pArgs,
    /// Threads per rank, each on its own duplicate of the world communicator;
    /// the rate reported is that of all threads together.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub threads: u32,
    /// Pairs of ranks measuring at once, as osu_mbw_mr: rank i sends to
    /// rank i + N (the job needs 2N ranks or more); the rate reported is
    /// that of all pairs, timed on rank 0 between two barriers.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub pairs: u32,
}

pub(crate) fn init<T: Threading>(level: ThreadLevel) -> Result<Engine<T>, String> {
    let engine = Engine::init_thread(level).map_err(|e| format!("engine init: {e}"))?;
    RANK.store(engine.rank(), Ordering::Relaxed);
    Ok(engine)
}

/// Print an engine failure in the middle of a window and end the process.
/// Exiting (rather than returning) keeps the `*_raw` buffers alive while
/// the engine may still use them: the process ends before anyone frees them.
fn die(what: &str, err: rivet::Error) -> ! {
    let rank = RANK.load(Ordering::Relaxed);
    eprintln!("rivet-bench: rank {rank}: {what}: {err}");
    std::process::exit(1)
}

pub(crate) fn check<T>(what: &str, r: rivet::Result<T>) -> T {
    r.unwrap_or_else(|e| die(what, e))
}

/// `rivet-bench info` and `--info`: rank 0 prints the engine's configuration.
/// `all`: also every `RIVET_*` setting in force on rank 0 and its source.
pub fn info(all: bool) -> Result<(), String> {
    let engine = init::<Local>(ThreadLevel::Single)?;
    print_info(&engine);
    if all && engine.rank() == 0 {
        let names: Vec<String> = std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .collect();
        print!(
            "{}",
            rivet_settings::listing(|k| std::env::var(k).ok(), &names)
        );
    }
    engine.finalize().map_err(|e| format!("finalize: {e}"))
}

fn print_info<T: Threading>(engine: &Engine<T>) {
    if engine.rank() == 0 {
        let info = engine.info();
        println!(
            "# Rivet engine info (rank 0 of {}, {} on this node)",
            info.size, info.local_size
        );
        print!("{info}");
    }
}

/// A zero-copy-friendly buffer: page-aligned (`posix_memalign(4096)`, as
/// the peers' `mpi_p2p.c`), filled so every page is touched before timing.
pub(crate) struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

impl AlignedBuf {
    pub(crate) fn new(len: usize, fill: u8) -> AlignedBuf {
        let layout = Layout::from_size_align(len.max(1), 4096).expect("buffer layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: `ptr` is a fresh allocation of at least `len` bytes.
        unsafe { ptr.write_bytes(fill, len.max(1)) };
        AlignedBuf { ptr, len }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` holds `len` initialised bytes owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len.max(1), 4096).expect("buffer layout");
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, layout) };
    }
}

// SAFETY: AlignedBuf owns its memory exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: as for Vec<u8>: `&AlignedBuf` only gives out `&[u8]`.
unsafe impl Sync for AlignedBuf {}

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
fn start<T: Threading>(
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

/// The bytes rank `rank` sends: a pseudo-random stream seeded by the
/// sender (no period a misplaced piece could hide in).
fn pattern(rank: u32, buf: &mut [u8]) {
    let mut x = (u64::from(rank) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// Once per size, after its timing: one `size`-byte exchange each way
/// into a cleared buffer, checked byte for byte against the sender's
/// pattern, so no benchmark times a path that delivers wrong bytes.
fn verify<T: Threading>(comm: &Comm<T>, sbuf: &AlignedBuf, rbuf: &mut AlignedBuf, size: usize) {
    let rank = comm.rank();
    let peer = 1 - rank;
    let r = &mut rbuf.as_mut_slice()[..size];
    r.fill(0);
    let s = &sbuf.as_slice()[..size];
    let st = if rank == 0 {
        check("verify send", comm.send(s, peer, TAG_VERIFY));
        check("verify recv", comm.recv(r, peer as i32, TAG_VERIFY))
    } else {
        let st = check("verify recv", comm.recv(r, peer as i32, TAG_VERIFY));
        check("verify send", comm.send(s, peer, TAG_VERIFY));
        st
    };
    if st.count != size {
        die_count(size, st.count);
    }
    let mut want = vec![0u8; size];
    pattern(peer, &mut want);
    if let Some(at) = r.iter().zip(&want).position(|(a, b)| a != b) {
        eprintln!(
            "rivet-bench: rank {rank}: a {size}-byte message from rank {peer} is wrong at byte {at}"
        );
        std::process::exit(1);
    }
}

fn die_count(expected: usize, got: usize) -> ! {
    let rank = RANK.load(Ordering::Relaxed);
    eprintln!("rivet-bench: rank {rank}: received {got} bytes, expected {expected}");
    std::process::exit(1)
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
fn send_window<'c, T: Threading>(
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
fn recv_window<'c, T: Threading>(
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

/// The comment line under a table's title: the thread level asked for and
/// provided, and the pairs of ranks measuring.
fn level_note(asked: ThreadLevel, provided: ThreadLevel, pairs: u32) -> String {
    format!("# thread level {asked} (provided {provided}), {pairs} pair(s) measuring")
}

/// Where rows go: the table as they come (rank 0), or the JSON at the end.
struct Output {
    kind: Kind,
    csv: bool,
    ranks: u32,
    threads: u32,
    window: usize,
    json: bool,
    print: bool,
    rows: Vec<Row>,
}

impl Output {
    /// `note`: a comment line printed between the title and the header.
    fn new(
        kind: Kind,
        (ranks, threads, window): (u32, u32, usize),
        note: String,
        (json, csv): (bool, bool),
        print: bool,
    ) -> Output {
        if print && !json && !csv {
            println!("{}", report::title(kind, ranks, threads, window));
            println!("{note}");
            println!("{}", report::column_header(kind));
        }
        Output {
            kind,
            csv,
            ranks,
            threads,
            window,
            json,
            print,
            rows: Vec::new(),
        }
    }

    fn row(&mut self, row: Row) {
        if self.print && !self.json && !self.csv {
            println!("{}", report::table_row(self.kind, row.size, row.value));
        }
        self.rows.push(row);
    }

    fn finish(self) {
        if self.print && self.csv {
            print!(
                "{}",
                report::csv_doc(self.kind, self.ranks, self.threads, self.window, &self.rows)
            );
        }
        if self.print && self.json {
            println!(
                "{}",
                report::json_doc(self.kind, self.ranks, self.threads, self.window, &self.rows)
            );
        }
    }
}

/// `rivet-bench startup`: init, barrier, finalize. Rank 0 prints the time
/// from the start of `main` (taken as the first thing main does, so it
/// excludes exec and the dynamic loader, about 1 ms) to the end of
/// finalize, and the three phases.
pub fn startup(main_start: Instant, json: bool) -> Result<(), String> {
    let t_main = main_start;
    let engine = init::<Local>(ThreadLevel::Single)?;
    let t_init = Instant::now();
    let world = engine.world();
    let (rank, size) = (world.rank(), world.size());
    world.barrier().map_err(|e| format!("barrier: {e}"))?;
    let t_barrier = Instant::now();
    drop(world);
    engine.finalize().map_err(|e| format!("finalize: {e}"))?;
    let t_end = Instant::now();
    if rank == 0 {
        let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
        let (total, init, barrier, fin) = (
            ms(t_main, t_end),
            ms(t_main, t_init),
            ms(t_init, t_barrier),
            ms(t_barrier, t_end),
        );
        if json {
            println!(
                "{{\"bench\":\"startup\",\"ranks\":{size},\"unit\":\"ms\",\"from\":\"main\",\"total\":{},\"init\":{},\"barrier\":{},\"finalize\":{}}}",
                crate::json::num(total),
                crate::json::num(init),
                crate::json::num(barrier),
                crate::json::num(fin)
            );
        } else {
            println!(
                "# Rivet startup ({size} ranks): {total:.3} ms from main() to the end of finalize on rank 0 \
                 (init {init:.3}, barrier {barrier:.3}, finalize {fin:.3} ms)"
            );
        }
    }
    Ok(())
}
