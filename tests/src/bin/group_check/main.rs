//! A test rank for group connect (seed 004), run by `tests/group.rs` under
//! `rivetrun`. `group_check MODE`; every mode checks what it gets and exits
//! 1 with a `group_check rank R: FAILED: ...` line at the first mismatch; a
//! rank that passes prints `group_check MODE OK rank R of N at thread
//! level L` last. Every mode runs on one thread, on an `Engine<Local>`
//! initialised at SINGLE: the level provided must be the one
//! `RIVET_THREAD_LEVEL` asks for (unset: SINGLE), spawned children included.
//!
//! - `parents N` (any size P): rank 0 spawns N copies in `child` mode, so
//!   the processes span two process groups. The groups swap namespace
//!   names over the spawn intercommunicator and disconnect it. Then, over
//!   `parents:*` and `children:*` (listed in opposite orders on the two
//!   sides, ours cluster-qualified):
//!   1. `xchg_only` (id "x"): no group; the other process group is known;
//!   2. group "g1": size P+N, parents first, ranks checked; a ring;
//!   3. group "g2" with `notify_each`: another id and context; a
//!      `Connected` event for every other member; messages on g1 and g2
//!      with the same tag do not mix;
//!   4. g2's rank 0 disconnects; every other member sees its
//!      `Disconnected` event, then disconnects;
//!   5. g1 is disconnected; the counts are back at the baseline.
//! - `child` (spawned only): the mirror of `parents`.
//! - `optional` (3, `--disable-auto-cleanup`): rank 2 aborts at once; ranks
//!   0 and 1 make an `optional` group over the whole job (size 2), run a
//!   ring on it, and a group connect without `optional` fails with an
//!   error naming rank 2 (no hang).
//! - `term [early]` (3): all three connect (with `early_term_allowed` when
//!   `early`); rank 2 then finalizes and exits without disconnecting. The
//!   others get a `Terminated` event for it, and a receive from it on the
//!   group is complete with an error at its first test (whichever worker
//!   the group runs on), instead of waiting; they disconnect.
//!   Without `early`, rivetrun must fail the job.
//! - `flat` (any size, also under a PMIx server): the job connects as
//!   group "f1" (size N, new rank = world rank; named cluster-qualified
//!   where the process manager names a cluster), runs a ring on it, then
//!   ranks 1.. connect as "f2" (rank 0 not named), run a ring there; both
//!   groups are disconnected.
//! - `jobs a|b SERVICE` (two separately started jobs, both rivetrun with
//!   one `--nameserver`; job `a` registered first): rank 0 of each
//!   publishes `SIZE/CLUSTER:NSPACE` as `SERVICE-a` or `SERVICE-b` and
//!   every rank looks up the other's. Then steps 1-5 of `parents` across
//!   the two jobs, job `a` in the parents' place, every name
//!   cluster-qualified (the jobs may name different clusters); the counts
//!   are back at the baseline after.
//! - `unserved` (under mpiexec.hydra): group connect is refused with a
//!   clear error before anything reaches Hydra (which would end the job).
//!
//! The modes of two process groups (`parents`, `child`, `jobs`) are in
//! `two_groups.rs`, those of one job (`flat`, `optional`, `term`,
//! `unserved`) in `one_job.rs`; what they share in `support.rs`.

mod one_job;
mod support;
mod two_groups;

use rivet::{Local, ThreadLevel};
use rivet_tests::rank_check::{self, die, OrDie};

use one_job::{flat, optional, term, unserved};
use two_groups::{child, jobs, parents};

fn main() {
    rank_check::start("group_check");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().cloned().unwrap_or_default();
    let arg = args.get(1).cloned().unwrap_or_default();
    // One thread per process in every mode (event handlers run on the
    // thread that polls): an `Engine<Local>` at SINGLE, no lock unless
    // RIVET_THREAD_LEVEL=multiple raises it; `init` checks the level.
    let engine = rank_check::init::<Local>(ThreadLevel::Single);
    let world = engine.world();
    match mode.as_str() {
        "parents" => parents(&engine, arg.parse().unwrap_or(2)),
        "child" => child(&engine),
        "optional" => optional(&engine),
        "term" => term(&engine, arg == "early"),
        "unserved" => unserved(&engine),
        "flat" => flat(&engine),
        "jobs" => jobs(&engine, &arg, args.get(2).map_or("", String::as_str)),
        other => die(format!("unknown mode {other:?}")),
    }
    let (rank, size) = (world.rank(), world.size());
    let level = engine.thread_level();
    drop(world);
    engine.finalize().or_die("finalize");
    println!("group_check {mode} OK rank {rank} of {size} at thread level {level}");
}
