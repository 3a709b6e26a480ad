//! The job-wide barrier at the top of the proxy tree: rivetrun's children
//! (`proxy::tree::children(None, ..)`) each send their subtree's barrier,
//! and once all have, the job's puts go back down as `barrier_out`.
//!
//! A barrier needs every rank of the job, as on one host. A top proxy that
//! ended (its ranks all exited, or its host was lost) before sending its
//! subtree's barrier makes that barrier impossible, whichever came first:
//! the barrier is then stranded, never completed without it.

use super::commands as cmd;

/// What an arrival or an end means for the barrier being gathered.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    Waiting,
    /// Every top proxy is in: the words of `barrier_out` for each of them.
    Complete(Vec<Vec<u8>>),
    /// Top proxy `ended` ended while proxy `waiting`'s subtree is in a barrier.
    Stranded {
        ended: u32,
        waiting: u32,
    },
}

/// The barrier being gathered from the top proxies.
pub struct TopBarrier {
    top: Vec<u32>,
    /// Top proxies whose subtree's barrier arrived, in order.
    arrived: Vec<u32>,
    ended: Vec<u32>,
    puts: Vec<Vec<u8>>,
    /// Barriers completed.
    pub completed: u64,
}

impl TopBarrier {
    pub fn new(top: Vec<u32>) -> TopBarrier {
        TopBarrier {
            top,
            arrived: Vec::new(),
            ended: Vec::new(),
            puts: Vec::new(),
            completed: 0,
        }
    }

    /// Top proxy `id`'s subtree is in, with its puts (key and value words).
    pub fn arrive(&mut self, id: u32, puts: impl IntoIterator<Item = Vec<u8>>) -> Step {
        if !self.top.contains(&id) || self.arrived.contains(&id) {
            return Step::Waiting;
        }
        self.arrived.push(id);
        self.puts.extend(puts);
        if let Some(step) = self.stranded() {
            return step;
        }
        if self.top.iter().all(|t| self.arrived.contains(t)) {
            self.arrived.clear();
            self.completed += 1;
            let mut out = vec![cmd::BARRIER_OUT.as_bytes().to_vec()];
            out.append(&mut self.puts);
            return Step::Complete(out);
        }
        Step::Waiting
    }

    /// Top proxy `id` ended (finished, or its connection closed).
    pub fn ended(&mut self, id: u32) -> Step {
        if self.top.contains(&id) && !self.ended.contains(&id) {
            self.ended.push(id);
        }
        self.stranded().unwrap_or(Step::Waiting)
    }

    fn stranded(&self) -> Option<Step> {
        let waiting = *self.arrived.first()?;
        let ended = self
            .ended
            .iter()
            .copied()
            .find(|e| !self.arrived.contains(e))?;
        Some(Step::Stranded { ended, waiting })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(p: &[&str]) -> Vec<Vec<u8>> {
        p.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn completes_once_every_top_proxy_is_in_and_gathers_afresh() {
        let mut b = TopBarrier::new(vec![0, 1, 2]);
        assert_eq!(b.arrive(1, words(&["k1", "v1"])), Step::Waiting);
        assert_eq!(b.arrive(7, words(&["x", "y"])), Step::Waiting); // not a top proxy
        assert_eq!(b.arrive(1, words(&["k1", "again"])), Step::Waiting); // twice
        assert_eq!(b.arrive(0, words(&[])), Step::Waiting);
        assert_eq!(
            b.arrive(2, words(&["k2", "v2"])),
            Step::Complete(words(&["barrier_out", "k1", "v1", "k2", "v2"]))
        );
        assert_eq!(b.completed, 1);
        assert_eq!(b.arrive(0, words(&[])), Step::Waiting);
    }

    #[test]
    fn never_completes_without_a_proxy_that_ended_before_arriving() {
        // Ended first, then the others arrive.
        let mut b = TopBarrier::new(vec![0, 1]);
        assert_eq!(b.ended(0), Step::Waiting); // no barrier under way
        assert_eq!(
            b.arrive(1, words(&[])),
            Step::Stranded {
                ended: 0,
                waiting: 1
            }
        );
        // Arrived first, then the other ends.
        let mut b = TopBarrier::new(vec![0, 1]);
        assert_eq!(b.arrive(0, words(&[])), Step::Waiting);
        assert_eq!(
            b.ended(1),
            Step::Stranded {
                ended: 1,
                waiting: 0
            }
        );
        // Proxies ending after the last barrier completed strand nothing.
        let mut b = TopBarrier::new(vec![0, 1]);
        b.arrive(0, words(&[]));
        assert!(matches!(b.arrive(1, words(&[])), Step::Complete(_)));
        assert_eq!(b.ended(0), Step::Waiting);
        assert_eq!(b.ended(1), Step::Waiting);
    }
}
