//! What the loom models share: loom's atomic as the engine's `Word`, and the
//! model builder.

use loom::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use rivet_lockfree::queue::Word;

/// loom's atomic as the queue's and the ring's word.
pub struct LWord(AtomicU64);

impl LWord {
    pub fn new() -> LWord {
        LWord(AtomicU64::new(0))
    }
}

impl Default for LWord {
    fn default() -> LWord {
        LWord::new()
    }
}

impl Word for LWord {
    fn load(&self, order: Ordering) -> u64 {
        self.0.load(order)
    }
    fn store(&self, value: u64, order: Ordering) {
        self.0.store(value, order)
    }
    fn swap(&self, value: u64, order: Ordering) -> u64 {
        self.0.swap(value, order)
    }
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        self.0.compare_exchange(current, new, success, failure)
    }
}

/// A model builder with preemptions bounded to `preemptions` unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise.
pub fn builder(preemptions: usize) -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(preemptions);
    }
    // Waiting threads yield in loops; each turn is a branch.
    b.max_branches = 100_000;
    b
}
