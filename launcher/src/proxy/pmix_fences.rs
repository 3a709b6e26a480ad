//! A node's whole-job PMIx fences: each is one barrier of the proxy tree,
//! the node's blob put as `pmix-fence/NODE` (hex); the job's `barrier_out`
//! brings every node's, concatenated for the library. They run one at a
//! time, in the order they come; every node sees the same order, so the
//! N-th whole-job fence of every node is the same fence, and rivetrun,
//! counting the barriers that carry `pmix-fence/` puts, knows it as N too.
//!
//! A fence given `PMIX_TIMEOUT` (OpenPMIx 4.2.2 stops its own timer once
//! the node's clients are in, `pmix_host/timeouts.rs`) is timed here, from
//! its upcall. When the time passes before its `barrier_out`, the node
//! asks rivetrun to fail it (`fence_late N`); rivetrun alone decides, so
//! that every host agrees: if barrier N has not completed it tells every
//! proxy (`fence_failed N STATUS`), and when the barrier does complete
//! (the late hosts still enter it, so the tree stays in step) its
//! `barrier_out` carries [`FAILED_KEY`]. A node completes fence N with
//! that status when it hears either: at once if the fence is under way
//! (its barrier then only keeps the tree in step), when it begins if it
//! has not yet. If barrier N completed first, the `fence_late` is ignored
//! and the fence succeeds everywhere. Later fences have later numbers,
//! so a failure never reaches them. An untimed fence is never asked
//! about here; only another host's timeout can fail it.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use rivet_pmi::pmix_ffi::{PMIX_ERROR, PMIX_ERR_UNREACH, PMIX_SUCCESS};

use crate::pmix_host::node::FenceCall;

/// The prefix of the keys that carry each node's fence blob.
pub const FENCE_KEY: &str = "pmix-fence/";

/// The key rivetrun adds to a failed fence's `barrier_out`: its status.
pub const FAILED_KEY: &str = "pmix-fence-failed";

/// One whole-job fence of this node, from its upcall to its `barrier_out`.
struct Fence {
    /// Its number among the node's whole-job fences, from 1.
    number: u64,
    data: Vec<u8>,
    /// None once completed (failed before its barrier came back).
    call: Option<FenceCall>,
    /// When to ask rivetrun to fail it; None: untimed, or asked.
    deadline: Option<Instant>,
}

/// The node's whole-job fences.
pub struct Fences {
    node: u32,
    /// Begun and not yet out of the tree, oldest first; the first is in
    /// the tree once `in_tree`.
    queue: VecDeque<Fence>,
    in_tree: bool,
    /// Whole-job fences begun so far.
    begun: u64,
    /// Fences rivetrun failed before they began here: number → status.
    failed_ahead: HashMap<u64, i32>,
}

impl Fences {
    pub fn new(node: u32) -> Fences {
        Fences {
            node,
            queue: VecDeque::new(),
            in_tree: false,
            begun: 0,
            failed_ahead: HashMap::new(),
        }
    }

    /// Whether a fence is in the tree (its `barrier_out` is ours).
    pub fn in_tree(&self) -> bool {
        self.in_tree
    }

    /// A whole-job fence's upcall at `now`: the puts of its barrier, if it
    /// goes into the tree at once.
    pub fn begin(&mut self, call: FenceCall, now: Instant) -> Option<Vec<(String, String)>> {
        self.begun += 1;
        let number = self.begun;
        let data = call.data.clone();
        let (call, deadline) = match self.failed_ahead.remove(&number) {
            Some(status) => {
                // Another host's time passed already: our part still
                // enters the barrier, for the tree's sake.
                call.finish(status, Vec::new());
                (None, None)
            }
            None => {
                let deadline = call.timeout.and_then(|t| now.checked_add(t));
                (Some(call), deadline)
            }
        };
        self.queue.push_back(Fence {
            number,
            data,
            call,
            deadline,
        });
        self.next_barrier()
    }

    fn next_barrier(&mut self) -> Option<Vec<(String, String)>> {
        if self.in_tree {
            return None;
        }
        let first = self.queue.front()?;
        self.in_tree = true;
        Some(vec![(
            format!("{FENCE_KEY}{}", self.node),
            hex(&first.data),
        )])
    }

    /// The job's `barrier_out` for the fence in the tree: every node's
    /// blob to the library (or the failure rivetrun put in it); then the
    /// next fence's puts, if one waits.
    pub fn barrier_out(&mut self, puts: &[(String, String)]) -> Option<Vec<(String, String)>> {
        if !self.in_tree {
            return None;
        }
        self.in_tree = false;
        let mut blobs: Vec<(u32, Vec<u8>)> = Vec::new();
        let mut status = PMIX_SUCCESS;
        for (k, v) in puts {
            if let Some(n) = k.strip_prefix(FENCE_KEY) {
                match (n.parse::<u32>(), unhex(v)) {
                    (Ok(n), Some(b)) => blobs.push((n, b)),
                    _ => {
                        eprintln!("rivetrun: proxy {}: a fence blob came garbled", self.node);
                        status = PMIX_ERROR;
                    }
                }
            } else if k == FAILED_KEY {
                status = v.parse().unwrap_or(PMIX_ERROR);
            }
        }
        blobs.sort_by_key(|(n, _)| *n);
        if let Some(Fence {
            call: Some(call), ..
        }) = self.queue.pop_front()
        {
            match status {
                PMIX_SUCCESS => call.finish(
                    PMIX_SUCCESS,
                    blobs.into_iter().flat_map(|(_, b)| b).collect(),
                ),
                failed => call.finish(failed, Vec::new()),
            }
        }
        self.next_barrier()
    }

    /// When the next timed fence's time passes, if one is timed.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.queue.iter().filter_map(|f| f.deadline).min()
    }

    /// The fences whose time passed by `now`, to ask rivetrun to fail
    /// (`fence_late N`), each once. They stay under way: rivetrun's
    /// answer, or their `barrier_out`, completes them.
    pub fn late(&mut self, now: Instant) -> Vec<u64> {
        let mut late = Vec::new();
        for f in &mut self.queue {
            if f.deadline.is_some_and(|d| now >= d) {
                f.deadline = None;
                late.push(f.number);
            }
        }
        late
    }

    /// rivetrun's `fence_failed N STATUS`: fence `number` fails on every
    /// host, this one's now or when it begins.
    pub fn failed(&mut self, number: u64, status: i32) {
        if number > self.begun {
            self.failed_ahead.insert(number, status);
            return;
        }
        if let Some(f) = self.queue.iter_mut().find(|f| f.number == number) {
            f.deadline = None;
            if let Some(call) = f.call.take() {
                call.finish(status, Vec::new());
            }
        }
    }

    /// The tree can complete no barrier: every fence fails.
    pub fn fail_all(&mut self) {
        self.in_tree = false;
        for f in self.queue.drain(..) {
            if let Some(call) = f.call {
                call.finish(PMIX_ERR_UNREACH, Vec::new());
            }
        }
    }
}

pub fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
#[path = "pmix_fences_tests.rs"]
mod tests;
