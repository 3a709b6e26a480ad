//! Thread levels and the engine lock that depends on them.
//!
//! MPI's four levels say how many threads may call into the library at
//! once. Below MULTIPLE only one thread calls at a time, so the engine's
//! state needs no lock at all: `EngineLock` then hands out its contents
//! behind a plain (non-atomic) busy flag, and the isend → progress →
//! complete path has no atomic read-modify-write. At MULTIPLE it is a spin
//! lock taken with one atomic swap and released with a plain store (a
//! mutex's release is a second atomic instruction); waiters yield after a
//! while. Measured cost (`cargo bench -p rivet-bench --bench engine_path`,
//! a round of irecv + isend + both waits on a singleton): 47 ns at
//! SINGLE, 59 ns at MULTIPLE with this lock, 74 ns with a mutex; and
//! `rivet-bench mr`, one thread: MULTIPLE at 0.94 of SINGLE (0.87 with a
//! mutex).
//!
//! # Workers (MULTIPLE)
//!
//! At MULTIPLE the state is split into workers, each a whole engine state
//! (`Core`: request table, matching, VCs with their send queues and
//! credit, its shared-memory lane, its netmod instance) behind its own
//! `EngineLock`, as UCX workers or MPICH's VCIs (whose netmod endpoints
//! are per VCI too). Worker 0 also holds everything cold or process-wide:
//! other process groups, ports and dynamic processes; PMI, the parent link
//! and group tables have their own mutexes in `Inner`.
//!
//! How many workers, alike on every rank:
//! - A one-node job on shared memory alone: the node leader, if it runs
//!   at MULTIPLE, lays out `RIVET_WORKERS` lanes in the node segment
//!   (`shm/layout.rs`), each a complete set of rings, queues and cells,
//!   and every rank on the node (at any level) gets one worker per lane.
//! - A job with a netmod (several nodes, or a netmod forced): each rank at
//!   MULTIPLE runs `RIVET_WORKERS` workers, one below. Each worker opens
//!   its own netmod instance (its own tcp listener or ofi endpoint) and
//!   publishes its card under its own key, `rivet-net-<rank>-w<k>of<W>`
//!   (`netmod::CardKeys`; one worker keeps the plain `rivet-net-<rank>`);
//!   worker k's VCs connect to the peer's worker k. Node leaders lay out
//!   as many lanes, and a rank whose node leader laid out another number
//!   fails its init saying so. Ranks that disagree across nodes find no
//!   card for their count on first contact and fail the send naming
//!   `RIVET_WORKERS`: every rank must run at MULTIPLE with the same
//!   `RIVET_WORKERS`, or all below it (as MPI programs do).
//! - Under IMPI or through `external.rs`: one worker. Spawned jobs
//!   follow the rules above like any other.
//!
//! A communicator whose groups are all of our world runs on worker
//! `(context / 4) % workers` (`Inner::worker_for`), the same on every
//! rank, so both ends of a pair use the same lane and netmod instances for
//! it: its order and `ANY_SOURCE` stay inside one worker, and protocol
//! replies (CTS, Ack, cancel, `Write`/`Written`, netmod reads) come back on
//! the worker of the request they answer. Anything else (intercommunicators,
//! foreign groups, ports, dynamic processes) runs on worker 0 and its
//! netmod. A netmod failure on any worker (a poll error) fails that
//! worker, and waits on the others see it when they look at it
//! (`Inner::progress_others`). A peer failed from outside the transports
//! (a group member's `Terminated` event) fails on every worker
//! (`Inner::peer_failed_everywhere`). Waits on other processes (ports,
//! group connect: `Inner::progress_until`) progress every worker each
//! turn: the other process may first need what sits in another worker's
//! queues (a barrier's last message on another worker's netmod queue hung
//! a spawned job's children in group connect before). A request handle carries its worker in its
//! top bits (`table::worker_of`). No thread holds two workers' locks at
//! once; a blocking call progresses its own worker every turn and, every
//! few idle turns, each other worker whose lock is free (`try_lock`), so
//! traffic owed on another worker never starves. Costs: the node segment
//! grows by the number of lanes; below MULTIPLE (one lane) the path is as
//! before but for choosing the worker (a load and a branch) and the worker
//! bits in a handle's generation. Measured with callgrind (instruction
//! counts, `rivet-bench mr -i 3000 -m 8:8`, 211,200 sends): `start_send`
//! costs 262.0 instructions per message at SINGLE (260.0 before workers),
//! 264.0 at MULTIPLE with one thread (262.0 before), 270.9 at MULTIPLE with
//! two threads on two workers (the extra is `progress_others` finding the
//! other worker's lock taken now and then). The same two-thread run
//! before workers executed about 35 times the instructions per process
//! (31.4 G against 0.88 G), nearly all in empty progress calls under
//! valgrind's one-thread-at-a-time scheduling: a timing artefact, not a
//! per-message cost. Per-worker netmods left SINGLE as it was (callgrind,
//! `rivet-bench mr -i 3000 -m 8:8`, 211,200 sends, against main at
//! 0a7275b): `Inner::start_send` 207.0 instructions per message over shm
//! before and after; over tcp (`RIVET_NETMOD=tcp`) 383.0 against 382.0
//! (the first contact out of line, `core.rs`, `connect_first`).
//!
//! Rust code cannot be trusted to keep a promise about threads, so the
//! promise is a type: handles are `Engine<Local>`, `Comm<Local>`, ...
//! (`!Send`, `!Sync`: they stay on the thread that made them) or
//! `Engine<Shared>` (`Send + Sync`; the engine then always locks). Only
//! `Local` handles may run unlocked; C callers declare a level instead.

use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};

/// MPI's thread levels, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ThreadLevel {
    /// One thread in the whole process (`MPI_THREAD_SINGLE`).
    Single,
    /// Only the thread that initialised calls Rivet (`MPI_THREAD_FUNNELED`).
    Funneled,
    /// Any thread, one at a time (`MPI_THREAD_SERIALIZED`).
    Serialized,
    /// Any thread, concurrently (`MPI_THREAD_MULTIPLE`).
    Multiple,
}

impl ThreadLevel {
    pub const ALL: [ThreadLevel; 4] = [
        ThreadLevel::Single,
        ThreadLevel::Funneled,
        ThreadLevel::Serialized,
        ThreadLevel::Multiple,
    ];

    /// The lower-case name `RIVET_THREAD_LEVEL` takes.
    pub fn name(self) -> &'static str {
        match self {
            ThreadLevel::Single => "single",
            ThreadLevel::Funneled => "funneled",
            ThreadLevel::Serialized => "serialized",
            ThreadLevel::Multiple => "multiple",
        }
    }

    /// Whether the engine must lock its state at this level.
    pub fn locks(self) -> bool {
        self == ThreadLevel::Multiple
    }

    /// The level a program asks for, raised to `setting`
    /// (`RIVET_THREAD_LEVEL`) when that is higher. A level can always be
    /// raised safely, never lowered: the program's threads are what they are.
    pub fn provided(required: ThreadLevel, setting: Option<ThreadLevel>) -> ThreadLevel {
        setting.map_or(required, |s| s.max(required))
    }
}

impl std::fmt::Display for ThreadLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ThreadLevel {
    type Err = Error;

    fn from_str(s: &str) -> Result<ThreadLevel> {
        ThreadLevel::ALL
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| Error::Config {
                name: "RIVET_THREAD_LEVEL",
                value: s.into(),
                why: "use single, funneled, serialized or multiple".into(),
            })
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Shared {}
    impl Sealed for super::Local {}
}

/// Whether handles may cross threads: [`Shared`] or [`Local`].
pub trait Threading: sealed::Sealed + Sized + 'static {
    /// The level an engine with these handles provides at least.
    const FLOOR: ThreadLevel;
}

/// Handles that are `Send + Sync`: any thread may call at any time, so the
/// engine locks (MULTIPLE). The default.
#[derive(Debug, Clone, Copy)]
pub struct Shared;

/// Handles that stay on the thread that made them (`!Send`, `!Sync`): the
/// engine runs without a lock unless `RIVET_THREAD_LEVEL=multiple`.
#[derive(Debug, Clone, Copy)]
pub struct Local(PhantomData<*const ()>);

impl Threading for Shared {
    const FLOOR: ThreadLevel = ThreadLevel::Multiple;
}

impl Threading for Local {
    const FLOOR: ThreadLevel = ThreadLevel::Single;
}

/// The engine's state: behind a spin lock at MULTIPLE, behind a busy flag
/// below it.
pub(crate) struct EngineLock<T> {
    /// MULTIPLE: `held` is the lock.
    shared: bool,
    held: AtomicBool,
    /// Below MULTIPLE: a guard is alive. Entering twice would alias the
    /// state, so it is refused (an engine bug, never a user's doing).
    busy: Cell<bool>,
    data: UnsafeCell<T>,
}

// SAFETY: at MULTIPLE every access holds the lock (`held`, acquire on
// taking, release on giving back). Without one (below MULTIPLE)
// the lock is reachable only through `Local` handles, which are neither
// `Send` nor `Sync`, so all access comes from one thread; or through the C
// ABI, whose caller declared a level that promises the same. `T: Send`
// because the state may be dropped on another thread than it was made on.
unsafe impl<T: Send> Sync for EngineLock<T> {}
// SAFETY: as above; the contents move with the lock.
unsafe impl<T: Send> Send for EngineLock<T> {}

impl<T> EngineLock<T> {
    pub fn new(data: T, level: ThreadLevel) -> EngineLock<T> {
        EngineLock {
            shared: level.locks(),
            held: AtomicBool::new(false),
            busy: Cell::new(false),
            data: UnsafeCell::new(data),
        }
    }

    /// Exclusive access; waits for another thread at MULTIPLE.
    #[inline]
    pub fn lock(&self) -> EngineGuard<'_, T> {
        if self.shared {
            if self.held.swap(true, Ordering::Acquire) {
                self.wait_for_lock();
            }
        } else if self.busy.replace(true) {
            reentered();
        }
        EngineGuard { lock: self }
    }

    /// Another thread has the lock: spin on a plain load (no line
    /// traffic) until it looks free, yielding now and then.
    #[cold]
    #[inline(never)]
    fn wait_for_lock(&self) {
        let mut spins = 0u32;
        loop {
            while self.held.load(Ordering::Relaxed) {
                spins = spins.wrapping_add(1);
                if spins % 64 == 0 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            if !self.held.swap(true, Ordering::Acquire) {
                return;
            }
        }
    }

    /// Exclusive access if nobody else has it now.
    #[inline]
    pub fn try_lock(&self) -> Option<EngineGuard<'_, T>> {
        let taken = if self.shared {
            self.held.load(Ordering::Relaxed) || self.held.swap(true, Ordering::Acquire)
        } else {
            self.busy.replace(true)
        };
        // Not `then_some`: it would build (and drop, releasing the lock
        // of whoever holds it) a guard even when the lock was taken.
        if taken {
            None
        } else {
            Some(EngineGuard { lock: self })
        }
    }
}

#[cold]
#[inline(never)]
fn reentered() -> ! {
    // Unreachable by design (no engine path calls back into the engine
    // while holding its state); aborting beats aliasing it.
    eprintln!("rivet: internal error: the engine's state was entered twice");
    std::process::abort()
}

pub(crate) struct EngineGuard<'a, T> {
    lock: &'a EngineLock<T>,
}

impl<T> Deref for EngineGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: a guard is exclusive (lock held, or busy flag set on the
        // only thread that can reach the lock), so no `&mut` aliases this.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> DerefMut for EngineGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this borrow unique.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T> Drop for EngineGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.lock.shared {
            self.lock.held.store(false, Ordering::Release);
        } else {
            self.lock.busy.set(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_order_and_raise() {
        assert_eq!(
            "Multiple".parse::<ThreadLevel>().unwrap(),
            ThreadLevel::Multiple
        );
        assert_eq!(
            "funneled".parse::<ThreadLevel>().unwrap(),
            ThreadLevel::Funneled
        );
        assert!("many".parse::<ThreadLevel>().is_err());
        assert!(ThreadLevel::Single < ThreadLevel::Serialized);
        assert!(ThreadLevel::Multiple.locks());
        assert!(!ThreadLevel::Serialized.locks());
    }

    #[test]
    fn unlocked_mode_refuses_a_second_guard_and_frees_on_drop() {
        let lock = EngineLock::new(5u32, ThreadLevel::Single);
        {
            let mut g = lock.lock();
            *g += 1;
            assert!(lock.try_lock().is_none(), "busy while a guard lives");
        }
        assert_eq!(*lock.try_lock().expect("free again"), 6);
    }

    #[test]
    fn a_refused_try_lock_leaves_the_holder_its_lock() {
        for level in [ThreadLevel::Single, ThreadLevel::Multiple] {
            let lock = EngineLock::new(0u32, level);
            let held = lock.try_lock().expect("free");
            assert!(lock.try_lock().is_none(), "{level}: taken");
            assert!(
                lock.try_lock().is_none(),
                "{level}: still taken after a refusal"
            );
            drop(held);
            assert!(lock.try_lock().is_some(), "{level}: free again");
        }
    }

    #[test]
    fn locked_mode_serialises_threads() {
        let lock = EngineLock::new(0u64, ThreadLevel::Multiple);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        *lock.lock() += 1;
                    }
                });
            }
        });
        assert_eq!(*lock.lock(), 40_000);
    }
}
