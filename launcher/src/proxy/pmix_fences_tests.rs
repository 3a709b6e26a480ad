//! Tests of `pmix_fences`: whole-job fences in the tree, and their
//! `PMIX_TIMEOUT`.

use super::*;
use std::ffi::{c_int, c_void};
use std::time::Duration;

use rivet_pmi::pmix_ffi::PMIX_ERR_TIMEOUT;

use crate::proxy::pmix::tests::{seen, Seen};

fn fence(data: &[u8], timeout: Option<u64>, s: &Seen) -> FenceCall {
    let procs = vec![("kvs".to_string(), rivet_pmi::pmix_ffi::PMIX_RANK_WILDCARD)];
    let cbdata = s as *const Seen as *mut c_void;
    let mut call = FenceCall::for_test(procs, data.to_vec(), seen, cbdata);
    call.timeout = timeout.map(Duration::from_secs);
    call
}

fn put(node: u32, data: &[u8]) -> (String, String) {
    (format!("{FENCE_KEY}{node}"), hex(data))
}

fn pop(s: &Seen) -> Option<(c_int, Vec<u8>)> {
    s.lock().unwrap().pop()
}

/// The node whose time passes first asks rivetrun, and waits for its
/// word; rivetrun's `fence_failed` completes it at once, and its barrier,
/// still ahead, only keeps the tree in step. The next fence goes up after
/// it and succeeds.
#[test]
fn a_late_fence_is_asked_about_once_and_fails_on_rivetruns_word() {
    let s = Seen::default();
    let mut f = Fences::new(0);
    let t0 = Instant::now();
    assert_eq!(
        f.begin(fence(b"a", Some(1), &s), t0),
        Some(vec![put(0, b"a")])
    );
    assert_eq!(f.next_deadline(), Some(t0 + Duration::from_secs(1)));
    assert!(f.late(t0 + Duration::from_millis(999)).is_empty());
    assert_eq!(f.late(t0 + Duration::from_secs(1)), vec![1]);
    assert!(f.late(t0 + Duration::from_secs(9)).is_empty(), "asked once");
    assert_eq!(f.next_deadline(), None);
    assert_eq!(pop(&s), None, "rivetrun decides");
    f.failed(1, PMIX_ERR_TIMEOUT);
    assert_eq!(pop(&s), Some((PMIX_ERR_TIMEOUT, Vec::new())));
    // The next fence, untimed, waits behind fence 1's barrier.
    assert_eq!(f.begin(fence(b"b", None, &s), t0), None);
    assert!(f.in_tree());
    // Fence 1's barrier comes (the late host entered it), saying it failed.
    let failed = (FAILED_KEY.to_string(), PMIX_ERR_TIMEOUT.to_string());
    let out1 = [put(0, b"a"), put(1, b"z"), failed];
    assert_eq!(f.barrier_out(&out1), Some(vec![put(0, b"b")]));
    assert_eq!(pop(&s), None, "completed once only");
    // Fence 2 succeeds with both blobs.
    assert_eq!(f.barrier_out(&[put(1, b"y"), put(0, b"b")]), None);
    assert_eq!(pop(&s), Some((PMIX_SUCCESS, b"by".to_vec())));
    assert!(!f.in_tree());
}

/// The late host: rivetrun's `fence_failed` comes before its fence
/// begins. The fence fails at once yet still enters the barrier; the
/// failure is for that fence alone.
#[test]
fn a_fence_failed_before_it_begins_fails_at_once_and_still_enters_the_barrier() {
    let s = Seen::default();
    let mut f = Fences::new(1);
    let t0 = Instant::now();
    f.failed(1, PMIX_ERR_TIMEOUT);
    assert_eq!(
        f.begin(fence(b"z", Some(1), &s), t0),
        Some(vec![put(1, b"z")])
    );
    assert_eq!(pop(&s), Some((PMIX_ERR_TIMEOUT, Vec::new())));
    assert_eq!(f.next_deadline(), None, "nothing to ask about");
    let failed = (FAILED_KEY.to_string(), PMIX_ERR_TIMEOUT.to_string());
    assert_eq!(f.barrier_out(&[put(0, b"a"), put(1, b"z"), failed]), None);
    assert_eq!(pop(&s), None);
    // Fence 2, of the same processes, untimed: it succeeds.
    assert!(f.begin(fence(b"y", None, &s), t0).is_some());
    assert_eq!(f.barrier_out(&[put(0, b"b"), put(1, b"y")]), None);
    assert_eq!(pop(&s), Some((PMIX_SUCCESS, b"by".to_vec())));
}

/// A node that hears of the failure only from the barrier (the tree's
/// `barrier_out` came before rivetrun's `fence_failed`): it fails there;
/// the word that follows finds nothing to fail. Garbled failures fail.
#[test]
fn the_barrier_alone_says_a_fence_failed_and_a_late_word_changes_nothing() {
    let s = Seen::default();
    let mut f = Fences::new(0);
    let t0 = Instant::now();
    f.begin(fence(b"a", None, &s), t0);
    let failed = (FAILED_KEY.to_string(), PMIX_ERR_TIMEOUT.to_string());
    assert_eq!(f.barrier_out(&[put(0, b"a"), failed]), None);
    assert_eq!(pop(&s), Some((PMIX_ERR_TIMEOUT, Vec::new())));
    f.failed(1, PMIX_ERR_TIMEOUT);
    assert_eq!(pop(&s), None);
    f.begin(fence(b"b", None, &s), t0);
    let garbled = (FAILED_KEY.to_string(), "x".to_string());
    f.barrier_out(&[put(0, b"b"), garbled]);
    assert_eq!(pop(&s), Some((PMIX_ERROR, Vec::new())));
    // A timed fence under way when the tree fails: it fails, nothing is
    // left to ask about.
    f.begin(fence(b"c", Some(1), &s), t0);
    f.fail_all();
    assert_eq!(pop(&s), Some((PMIX_ERR_UNREACH, Vec::new())));
    assert_eq!(f.next_deadline(), None);
    // A barrier_out with no fence in the tree is not ours.
    assert_eq!(f.barrier_out(&[put(0, b"d")]), None);
    assert_eq!(pop(&s), None);
}

#[test]
fn a_timeout_of_many_years_is_a_deadline_far_off_not_an_overflow() {
    let s = Seen::default();
    let mut f = Fences::new(0);
    let t0 = Instant::now();
    f.begin(fence(b"a", Some(u32::MAX.into()), &s), t0);
    assert!(f.late(t0 + Duration::from_secs(3600)).is_empty());
    f.barrier_out(&[put(0, b"a")]);
    assert_eq!(pop(&s), Some((PMIX_SUCCESS, b"a".to_vec())));
}
