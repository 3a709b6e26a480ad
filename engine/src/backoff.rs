//! How an idle poll loop waits: spin while the CPU is ours, yield when the
//! node is oversubscribed (more local ranks than CPUs), or as told by
//! `RIVET_YIELD`. A spinning rank on a shared core starves the very peer it
//! waits for; a yielding one on its own core adds microseconds of latency.

use crate::config::YieldMode;

/// Empty polls before a yielding loop gives the CPU away.
const SPINS_BEFORE_YIELD: u32 = 64;

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
        if self.yields {
            self.idle += 1;
            if self.idle >= SPINS_BEFORE_YIELD {
                self.idle = 0;
                std::thread::yield_now();
                return;
            }
        }
        std::hint::spin_loop();
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
