//! How an idle poll loop waits: spin while the CPU is ours, yield when the
//! node is oversubscribed (more local ranks than CPUs), or as told by
//! `RIVET_YIELD`. A spinning rank on a shared core starves the very peer it
//! waits for; a yielding one on its own core adds microseconds of latency.
//!
//! A yielding loop that has yielded `YIELDS_BEFORE_PARK` times with
//! nothing to do parks instead, where its caller can (`Inner::idle_turn`):
//! it blocks in the netmod's kernel wait until something arrives or a
//! short timeout passes. `sched_yield` under CFS/EEVDF hands the CPU
//! straight back when the others are runnable too, so sixteen waiting
//! senders yielding in turn kept the one receiver with work to a small
//! share of the CPU (`fanin`); asleep in the kernel they do not compete.

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

/// Yields in a row, with no poll finding anything, after which each
/// yield becomes a park (see the module doc): a wait that outlasts them is
/// not a ping-pong's answer on its way, and a park and its wake-up cost
/// about what a few yields do.
const YIELDS_BEFORE_PARK: u32 = 4;

/// Empty polls since the last busy one at which a yielding loop parks.
const POLLS_BEFORE_PARK: u32 = SPINS_BEFORE_YIELD * (YIELDS_BEFORE_PARK + 1);

#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    yields: bool,
    /// Empty polls since the last busy one (a yielding loop's stays below
    /// `POLLS_BEFORE_PARK`).
    idle: u32,
}

impl Backoff {
    pub fn new(yields: bool) -> Backoff {
        Backoff { yields, idle: 0 }
    }

    /// Call after a poll that found nothing to do, where the caller cannot
    /// park: a yielding loop yields instead.
    #[inline]
    pub fn idle(&mut self) {
        if self.idle_or_park() {
            std::thread::yield_now();
        }
    }

    /// Call after a poll that found nothing to do: spins, pauses or
    /// yields as `idle` does, or, once a yielding loop has yielded
    /// `YIELDS_BEFORE_PARK` times since the last busy poll, returns true
    /// instead of yielding: the caller should park (and yield if it
    /// cannot). After a park the next one comes a yield's worth of empty
    /// polls later.
    #[inline]
    pub fn idle_or_park(&mut self) -> bool {
        if self.yields {
            return self.idle_yielding();
        }
        // Spinning: the same few instructions as before parking existed.
        self.idle = self.idle.saturating_add(1);
        if self.idle >= SPINS_BEFORE_PAUSE {
            std::hint::spin_loop();
        }
        false
    }

    /// Oversubscribed: the pauses pace the polls before each yield. Out
    /// of line: a spinning loop's code stays as short as it was.
    #[inline(never)]
    fn idle_yielding(&mut self) -> bool {
        self.idle = self.idle.saturating_add(1);
        if self.idle % SPINS_BEFORE_YIELD != 0 {
            std::hint::spin_loop();
            return false;
        }
        if self.idle >= POLLS_BEFORE_PARK {
            self.idle = POLLS_BEFORE_PARK - SPINS_BEFORE_YIELD;
            return true;
        }
        std::thread::yield_now();
        false
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Empty polls until `idle_or_park` asks for a park (at most `limit`).
    fn polls_to_park(b: &mut Backoff, limit: u32) -> Option<u32> {
        (1..=limit).find(|_| b.idle_or_park())
    }

    #[test]
    fn a_spinning_loop_never_parks() {
        let mut b = Backoff::new(false);
        assert_eq!(polls_to_park(&mut b, 100_000), None);
    }

    #[test]
    fn a_yielding_loop_parks_after_its_yields_then_once_per_yield_round() {
        let mut b = Backoff::new(true);
        assert_eq!(polls_to_park(&mut b, 100_000), Some(POLLS_BEFORE_PARK));
        for _ in 0..3 {
            assert_eq!(polls_to_park(&mut b, 100_000), Some(SPINS_BEFORE_YIELD));
        }
        // A busy poll starts over: the yields come first again.
        b.busy();
        assert_eq!(polls_to_park(&mut b, 100_000), Some(POLLS_BEFORE_PARK));
    }
}
