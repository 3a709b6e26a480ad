//! rivetrun's part in a whole-job PMIx fence's `PMIX_TIMEOUT`
//! (`proxy/pmix_fences.rs` has the whole exchange). Such a fence is one
//! barrier of the tree whose puts carry `pmix-fence/NODE`; rivetrun counts
//! those barriers, so fence N is the N-th. A node whose timeout passed
//! sends `fence_late N`: if barrier N has not completed, rivetrun tells
//! every proxy `fence_failed N PMIX_ERR_TIMEOUT` at once, and when barrier
//! N completes (the late hosts still enter it) adds `pmix-fence-failed
//! STATUS` to its `barrier_out`, so a node that missed the first message
//! (or reads the barrier first) still fails it. If barrier N completed
//! first, nothing changes: it succeeded on every host.

use std::collections::BTreeMap;

use rivet_pmi::pmix_ffi::PMIX_ERR_TIMEOUT;

use super::commands as cmd;
use super::wire;
use crate::proxy::pmix_fences::{FAILED_KEY, FENCE_KEY};

/// The whole-job fences' barriers: how many completed, which failed.
#[derive(Default)]
pub(super) struct FenceTimeouts {
    completed: u64,
    /// Failed fences whose barrier has not completed: number → status.
    failed: BTreeMap<u64, i32>,
}

impl FenceTimeouts {
    /// `fence_late N` from a proxy: the words of `fence_failed` for every
    /// proxy, unless fence N completed or failed already (or N is garbled).
    pub(super) fn late(&mut self, msg: &[Vec<u8>]) -> Option<Vec<Vec<u8>>> {
        let number: u64 = wire::text(msg.get(1)?).parse().ok()?;
        if number <= self.completed || self.failed.contains_key(&number) {
            return None;
        }
        self.failed.insert(number, PMIX_ERR_TIMEOUT);
        Some(vec![
            cmd::FENCE_FAILED.as_bytes().to_vec(),
            number.to_string().into_bytes(),
            PMIX_ERR_TIMEOUT.to_string().into_bytes(),
        ])
    }

    /// A barrier completed with `out` (`barrier_out K V ...`): if it is a
    /// PMIx fence's, counted, and if that fence failed, its status added.
    pub(super) fn barrier_done(&mut self, out: &mut Vec<Vec<u8>>) {
        let fence = (out.iter().skip(1).step_by(2)).any(|k| k.starts_with(FENCE_KEY.as_bytes()));
        if !fence {
            return;
        }
        self.completed += 1;
        if let Some(status) = self.failed.remove(&self.completed) {
            out.push(FAILED_KEY.as_bytes().to_vec());
            out.push(status.to_string().into_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<Vec<u8>> {
        w.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    fn fence_out() -> Vec<Vec<u8>> {
        words(&["barrier_out", "pmix-fence/0", "aa", "pmix-fence/1", "bb"])
    }

    #[test]
    fn a_late_fence_fails_everywhere_unless_its_barrier_completed_first() {
        let mut f = FenceTimeouts::default();
        let timeout = PMIX_ERR_TIMEOUT.to_string();
        // A PMI-1 barrier is not a fence; fence 1 completes in time.
        let mut pmi = words(&["barrier_out", "k", "v"]);
        f.barrier_done(&mut pmi);
        assert_eq!(pmi, words(&["barrier_out", "k", "v"]));
        let mut out = fence_out();
        f.barrier_done(&mut out);
        assert_eq!(out, fence_out(), "fence 1 succeeded");
        // A late word for fence 1 comes after its barrier: ignored.
        assert_eq!(f.late(&words(&["fence_late", "1"])), None);
        // Fence 2 is late on one node: every proxy hears it once.
        let failed = words(&["fence_failed", "2", &timeout]);
        assert_eq!(f.late(&words(&["fence_late", "2"])), Some(failed));
        assert_eq!(f.late(&words(&["fence_late", "2"])), None, "told once");
        // Its barrier completes later: it says so.
        let mut out = fence_out();
        f.barrier_done(&mut out);
        let mut want = fence_out();
        want.extend(words(&["pmix-fence-failed", &timeout]));
        assert_eq!(out, want);
        // Fence 3, of the same processes, is not touched by it.
        let mut out = fence_out();
        f.barrier_done(&mut out);
        assert_eq!(out, fence_out());
        assert!(f.failed.is_empty());
        // A fence late before an earlier one completes; garbled words.
        assert!(f.late(&words(&["fence_late", "5"])).is_some());
        assert_eq!(f.late(&words(&["fence_late", "x"])), None);
        assert_eq!(f.late(&words(&["fence_late"])), None);
        let mut out = fence_out();
        f.barrier_done(&mut out);
        assert_eq!(out, fence_out(), "fence 4 succeeded");
        let mut out = fence_out();
        f.barrier_done(&mut out);
        assert_eq!(out.len(), fence_out().len() + 2, "fence 5 failed");
    }
}
