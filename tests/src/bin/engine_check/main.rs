//! A test rank that exercises the `rivet` engine, run by `tests/engine.rs`
//! under `rivetrun`, under MPICH's `mpiexec.hydra`, and as a singleton.
//!
//! `engine_check MODE [ARGS]`; every mode verifies what it receives and
//! exits 1 with an `engine_check rank R: FAILED: ...` line on stderr at the
//! first mismatch. A rank that passes prints `engine_check MODE OK rank R of
//! N at thread level L` last.
//!
//! Thread levels: `threads` and `node_workers` run on an `Engine<Shared>`
//! (MULTIPLE: their threads share the handles); every other mode on an
//! `Engine<Local>` initialised at SINGLE, so the engine runs without a lock
//! unless `RIVET_THREAD_LEVEL=multiple` raises the level. The level
//! provided must be the one `RIVET_THREAD_LEVEL` asks for (unset: SINGLE,
//! or MULTIPLE for those two), or the rank fails at once.
//!
//! Modes (the ranks they need):
//! - `pingpong` (2): both directions, a few sizes up to 4 MiB, blocking,
//!   scoped and raw calls.
//! - `order` (>= 2, meant for 4): ranks 1.. send K messages each to rank 0,
//!   which receives with exact and wildcard patterns and checks that every
//!   receive got the earliest matching message of its sender (non-overtaking).
//! - `probe` (>= 2): probe/iprobe report what the next receive gets.
//! - `park` (>= 2): rank 0 and each other rank in turn: one pauses, then
//!   sends while the other waits (with `RIVET_YIELD=always` over tcp
//!   alone: blocked in its netmod); each prints how often it parked.
//! - `mprobe` (2): matched probes take messages of every size out of
//!   matching (no other receive gets them), then receive them; a dropped
//!   matched message lets its sender finish.
//! - `cancel` (2): cancelled receives and sends, and cancels that come too
//!   late.
//! - `ssend` (2): a synchronous send stays pending until the receiver
//!   matches it.
//! - `sizes` (2): zero bytes to 4 MiB+1, around every threshold the engine
//!   reports or the environment sets, one by one and all at once.
//! - `trunc` (2): receive buffers smaller than the message.
//! - `stress [TOTAL] [SEED]` (>= 2, meant for 3): TOTAL (10^5) messages of
//!   random sizes and tags between all ranks, mixed receive patterns.
//! - `threads` (2): worker threads on dup'd and shared communicators, and a
//!   thread that only calls `progress()`.
//! - `node_workers` (>= 2, a netmod; meant for two nodes of two): two
//!   threads, each on its own communicator, exchange with every other
//!   rank; two workers' own netmods (and shm lanes) must have carried it.
//! - `kill [early]` (3): rank 2 kills itself while ranks 0 and 1 wait for
//!   it (`early`: before it starts its engine, while the others start theirs).
//! - `connect_all` (any): every rank sends to every other rank at once,
//!   first thing after init, so over tcp every pair connects from both
//!   sides simultaneously; every message must arrive exactly once, in order.
//! - `netkill` (3, tcp, under `rivetrun --disable-auto-cleanup`): rank 1
//!   kills itself while rank 0 streams messages to it and has a receive
//!   posted for it and an `ANY_SOURCE` one; rank 0 must see errors on
//!   all three (naming rank 1), then finish an exchange
//!   with rank 2 and exit cleanly.
//! - `readkill` (2, a netmod, under `rivetrun --disable-auto-cleanup`):
//!   rank 1 dies while rank 0 pulls its 48 MiB rendezvous message.
//!   `readkill dead`: rank 1 is dead before rank 0 posts the receive of
//!   its (probed) request, which must fail with `PeerFailed` naming it.
//! - `panic` (2, a netmod): rank 0 panics inside a scope while its
//!   receive of rank 1's rendezvous message is under way; the process must
//!   abort (SIGABRT) rather than unwind past the buffer the netmod writes.
//! - `early_exit` (3): rank 2 exchanges a message with rank 0, finalizes
//!   and exits while rank 0 waits in an `ANY_SOURCE` receive that rank 1
//!   fills only afterwards: a peer that finished must not fail it.
//! - `shmkill` (3, under `rivetrun --disable-auto-cleanup`): rank 2 kills
//!   itself while rank 0 waits in a receive from it and rank 1 in an
//!   `ANY_SOURCE` receive; both fail naming rank 2, then 0 and 1 go on.
//! - `hang DIR [release]` (>= 2): after a ring exchange, marks
//!   `DIR/ready-RANK` and waits forever in a receive nobody matches (the
//!   launcher-death tests); with `release`, until `DIR/go` exists.
//! - `dup [DIR]` (any): context ids, isolation of dup'd communicators,
//!   barriers (checked through marker files in DIR when given).
//! - `singleton` (1): messages to self.
//! - `intercomm` (>= 4): seed 003's intercommunicator create and merge
//!   (4.8, 4.9) between even and odd world ranks, a dup of it (4.6), then
//!   4.5's free.
//! - `comms` (>= 4): dup, split and create (seed 003's 4.6, 4.7, 4.4
//!   across IMPI clients): ranks, sizes, traffic, isolation.
//! - `splitbad` (>= 3): split and create with a bad argument at one rank,
//!   and a split one rank skips: errors, no hang.
//! - `mixmpi` (4, world ranks 2 and 3 of two IMPI clients, the other
//!   running tests/c/mpi_impi.c `mix`): a dup agreed with librivetmpi,
//!   external32 bytes on it.
//!
//! Payloads name their sender, receiver and sequence number: a 16-byte
//! header (sequence, size, tag, checksum of the body) then a pattern seeded
//! by (sender, receiver, sequence); messages under 16 bytes carry the first
//! bytes of the header.
//!
//! Here the dispatch on MODE; the checks every mode uses in `check.rs`, the
//! modes by theme in the other files.

mod cancel;
mod check;
mod comms;
mod failures;
mod intercomms;
mod mixmpi;
mod p2p;
mod sizes;
mod splits;
mod stress;
mod workers;

use rivet::{Comm, Engine, Local, Shared, ThreadLevel, Threading};
use rivet_tests::ensure;
use rivet_tests::rank_check::{self, die, OrDie};

use crate::cancel::{cancel, ssend};
use crate::comms::{connect_all, dup, singleton};
use crate::failures::{
    early_exit, hang, kill, kill_before_init, netkill, panic_mid_rendezvous, readkill,
    readkill_dead, shmkill,
};
use crate::intercomms::intercomm;
use crate::mixmpi::mixmpi;
use crate::p2p::{mprobe, order, park, pingpong, probe};
use crate::sizes::{print_info, sizes, trunc};
use crate::splits::{comms, splitbad};
use crate::stress::{stress, threads};
use crate::workers::node_workers;

fn main() {
    rank_check::start("engine_check");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().cloned().unwrap_or_else(|| "pingpong".into());
    let rest = &args[args.len().min(1)..];

    if mode == "kill" && rest.first().map(String::as_str) == Some("early") {
        kill_before_init();
    }

    // `threads` calls the engine from several threads at once: its handles
    // must be `Send + Sync` (`Engine<Shared>`, always MULTIPLE). Every other
    // mode runs on one thread, on an `Engine<Local>` at SINGLE: no lock,
    // unless RIVET_THREAD_LEVEL=multiple raises the level.
    if mode == "threads" {
        run(
            rank_check::init::<Shared>(ThreadLevel::Multiple),
            &mode,
            |engine, world| {
                need(&mode, world, 2);
                threads(engine, world)
            },
        );
    } else if mode == "node_workers" {
        run(
            rank_check::init::<Shared>(ThreadLevel::Multiple),
            &mode,
            |engine, world| {
                at_least(&mode, world, 2);
                node_workers(engine, world)
            },
        );
    } else {
        run(
            rank_check::init::<Local>(ThreadLevel::Single),
            &mode,
            |engine, world| one_thread(engine, world, &mode, rest),
        );
    }
}

/// Run `body` on the world, finalize, and say `OK` with the thread level
/// the engine ran at.
fn run<T: Threading>(engine: Engine<T>, mode: &str, body: impl FnOnce(&Engine<T>, &Comm<T>)) {
    let world = engine.world();
    let (rank, size) = (world.rank(), world.size());
    ensure!(
        engine.rank() == rank && engine.size() == size,
        "engine says rank {} of {}, the world communicator {rank} of {size}",
        engine.rank(),
        engine.size()
    );
    ensure!(rank < size, "rank {rank} >= size {size}");
    body(&engine, &world);
    let level = engine.thread_level();
    drop(world);
    engine.finalize().or_die("finalize");
    println!("engine_check {mode} OK rank {rank} of {size} at thread level {level}");
}

fn need<T: Threading>(mode: &str, world: &Comm<T>, n: u32) {
    let size = world.size();
    ensure!(size == n, "mode {mode} needs {n} ranks, not {size}");
}

fn at_least<T: Threading>(mode: &str, world: &Comm<T>, n: u32) {
    let size = world.size();
    ensure!(size >= n, "mode {mode} needs {n} ranks or more, not {size}");
}

/// Every mode but `threads`.
fn one_thread<T: Threading>(engine: &Engine<T>, world: &Comm<T>, mode: &str, rest: &[String]) {
    let need = |n: u32| need(mode, world, n);
    let at_least = |n: u32| at_least(mode, world, n);
    match mode {
        "pingpong" => {
            need(2);
            print_info(engine);
            pingpong(world)
        }
        "order" => {
            at_least(2);
            order(world)
        }
        "probe" => {
            at_least(2);
            probe(world)
        }
        "park" => {
            at_least(2);
            print_info(engine);
            park(engine, world)
        }
        "mprobe" => {
            need(2);
            mprobe(world)
        }
        "cancel" => {
            need(2);
            cancel(world)
        }
        "ssend" => {
            need(2);
            ssend(world)
        }
        "sizes" => {
            need(2);
            sizes(engine, world)
        }
        "trunc" => {
            need(2);
            trunc(world)
        }
        "stress" => {
            at_least(2);
            let total = rest.first().map_or(100_000, |s| s.parse().or_die("TOTAL"));
            let seed = rest.get(1).map_or(1, |s| s.parse().or_die("SEED"));
            print_info(engine);
            stress(world, total, seed)
        }
        "kill" => {
            need(3);
            kill(world)
        }
        "connect_all" => {
            connect_all(world);
            // After the traffic: the info names the VCs each path carried.
            print_info(engine)
        }
        "netkill" => {
            need(3);
            netkill(world)
        }
        "early_exit" => {
            need(3);
            early_exit(world)
        }
        "readkill" => {
            need(2);
            if rest.first().map(String::as_str) == Some("dead") {
                readkill_dead(world)
            } else {
                readkill(world)
            }
        }
        "panic" => {
            need(2);
            panic_mid_rendezvous(world)
        }
        "shmkill" => {
            need(3);
            shmkill(world)
        }
        "hang" => {
            at_least(2);
            let Some(dir) = rest.first() else {
                die("hang needs a DIR")
            };
            let release = rest.get(1).map(String::as_str) == Some("release");
            hang(world, std::path::Path::new(dir), release)
        }
        "dup" => dup(world, rest.first().map(String::as_str)),
        "intercomm" => {
            at_least(4);
            intercomm(world)
        }
        "comms" => {
            at_least(4);
            comms(world)
        }
        "splitbad" => {
            at_least(3);
            splitbad(world)
        }
        "mixmpi" => {
            need(4);
            mixmpi(world)
        }
        "singleton" => {
            need(1);
            singleton(world)
        }
        other => die(format!("unknown mode {other}")),
    }
}

// ---------------------------------------------------------------------------
// Patterns, payloads, random numbers.

/// Every decimal number in `s`.
fn numbers(s: &str) -> Vec<usize> {
    s.split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect()
}
