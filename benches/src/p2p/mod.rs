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
//!
//! Here the tags and the engine start shared by all; the options in
//! `args.rs`, buffers in `buf.rs`, the schemes in `pairs.rs` and `mr.rs`,
//! rows in `output.rs`, `info` and `startup` in `startup.rs`.

mod args;
mod buf;
mod mr;
mod output;
mod pairs;
mod startup;

pub(crate) use args::{parse_range, MrArgs, P2pArgs};
pub(crate) use buf::AlignedBuf;
pub(crate) use mr::mr;
pub(crate) use pairs::{per_message, ping_pong, plan, post_recvs, post_sends, run};
pub(crate) use startup::{info, startup};

use std::sync::atomic::{AtomicU32, Ordering};

use rivet::{Engine, ThreadLevel, Threading};

pub(crate) const TAG_PING: i32 = 1;
pub(crate) const TAG_DATA: i32 = 100;
pub(crate) const TAG_ACK: i32 = 101;
pub(crate) const TAG_SYNC: i32 = 102;
pub(crate) const ACK_LEN: usize = 4;
pub(crate) const TAG_VERIFY: i32 = 103;

/// This process's rank, for error messages (set after init).
static RANK: AtomicU32 = AtomicU32::new(u32::MAX);

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
