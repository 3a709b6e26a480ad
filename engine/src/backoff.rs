//! How an idle poll loop waits: spin while the CPU is ours, yield when the
//! node is oversubscribed (more local ranks than CPUs), or as told by
//! `RIVET_YIELD`. A spinning rank on a shared core starves the very peer it
//! waits for; a yielding one on its own core adds microseconds of latency.

use crate::config::YieldMode;

/// Empty polls before a yielding loop gives the CPU away.
const SPINS_BEFORE_YIELD: u32 = 64;

/// Empty polls before a spinning loop starts to pause (x86 `PAUSE`) between
/// polls. One `PAUSE` took about 30 ns on the AMD EPYC guest (a loop of
/// them at real-time priority), half of a raw 8 B hop through the cache,
/// so pausing after every empty poll found each message up to a pause
/// late. A wait that outlasts this many polls is not a ping-pong's; then
/// the hint spares the sibling hardware thread and the power.
const SPINS_BEFORE_PAUSE: u32 = 256;

/// See [`Backoff::polls_per_hold`].
const POLLS_PER_HOLD: u32 = 8;

#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    yields: bool,
    idle: u32,
}

impl Backoff {
    pub fn new(yields: bool) -> Backoff {
        Backoff { yields, idle: 0 }
    }

    /// Call after a poll that found nothing to do.
    #[inline]
    pub fn idle(&mut self) {
        self.idle = self.idle.saturating_add(1);
        if self.yields {
            // Oversubscribed: the pauses pace the polls before the yield.
            if self.idle >= SPINS_BEFORE_YIELD {
                self.idle = 0;
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        } else if self.idle >= SPINS_BEFORE_PAUSE {
            std::hint::spin_loop();
        }
    }

    /// Empty polls a blocking wait makes under one hold of its worker
    /// before it looks at anything else: a spinning wait's round is then
    /// just the poll, so it finds an arrival sooner. A yielding one looks
    /// after every poll, and at MULTIPLE this bounds how long another
    /// thread waits for the worker.
    #[inline]
    pub fn polls_per_hold(&self) -> u32 {
        if self.yields {
            1
        } else {
            POLLS_PER_HOLD
        }
    }

    /// Call after a poll that made progress.
    #[inline]
    pub fn busy(&mut self) {
        self.idle = 0;
    }
}

/// Resolve the mode: `auto` yields when local ranks outnumber online CPUs.
pub fn should_yield(mode: YieldMode, local_ranks: usize) -> bool {
    match mode {
        YieldMode::Always => true,
        YieldMode::Never => false,
        YieldMode::Auto => local_ranks > online_cpus(),
    }
}

pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as usize
    } else {
        1
    }
}
