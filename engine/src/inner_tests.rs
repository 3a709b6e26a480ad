//! `Inner` over several workers, built in-process: a failure on one worker
//! (worker 0, or worker 1's own netmod instance) reaches waits running on
//! another; a peer failed from outside fails on every worker; waits on
//! other processes progress every worker.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize};
use std::sync::{mpsc, Arc, Mutex, Weak};
use std::time::Duration;

use rivet_netmods::{Netmod, NetmodError, PeerId, Sink};

use super::Inner;
use crate::core::Core;
use crate::error::Error;
use crate::pg::{VcId, Vcrt};
use crate::state::protocol::tests::state_on_worker;
use crate::test_netmod::fake_netmod_rest;
use crate::thread::{EngineLock, ThreadLevel};

/// An `Inner` of rank 0 of 2 (one node, no transports) with `workers`
/// workers, each with its own request handles.
fn inner(workers: usize) -> Arc<Inner> {
    inner_at(workers, ThreadLevel::Multiple, |_| None)
}

/// The same at `level`, worker `w`'s shm lane `shm(w)`.
fn inner_at(
    workers: usize,
    level: ThreadLevel,
    shm: impl Fn(usize) -> Option<crate::shm::ShmNode>,
) -> Arc<Inner> {
    let pmi = Arc::new(Mutex::new(None));
    let core = |w: usize| {
        let st = state_on_worker(2, true, w);
        EngineLock::new(Core::new(shm(w), None, pmi.clone(), st), level)
    };
    Arc::new(Inner {
        core: core(0),
        lanes: (1..workers).map(core).collect(),
        spread: workers as u32,
        level,
        rank: 0,
        size: 2,
        yields: true,
        next_context: AtomicU32::new(64),
        pmi: pmi.clone(),
        pmi_watch: Mutex::new(None),
        finalized: AtomicBool::new(false),
        info: Vec::new(),
        local_size: 2,
        netmod_choice: crate::config::NetmodChoice::Auto,
        world_vcrt: Arc::new(Vcrt::world(2)),
        self_vcrt: Arc::new(Vcrt::table(vec![VcId::world(0)], Weak::<Inner>::new())),
        vcrts: AtomicUsize::new(0),
        parent: Mutex::new(None),
        groups: Mutex::default(),
        impi: std::sync::OnceLock::new(),
    })
}

/// Run `f` on a thread; its result, or a failed test if it never returns
/// (the bug this guards against is a wait that never ends).
fn bounded<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the wait never ended")
}

fn failed_with(r: crate::error::Result<impl std::fmt::Debug>, why: &str) {
    match r {
        Err(Error::Failed(msg)) => assert!(msg.contains(why), "{msg}"),
        other => panic!("expected the engine's failure ({why}), got {other:?}"),
    }
}

/// A netmod failure (here: any fatal error) on worker 0 ends a wait, a
/// wait on many requests and a probe running on worker 1 with that error.
#[test]
fn a_failure_on_worker_0_ends_waits_on_other_workers() {
    let inner = inner(2);
    let mut buf = vec![0u8; 8];
    let ptr = buf.as_mut_ptr();
    let id = inner
        .start_recv(1, 4, ptr, buf.len(), 1, Some(VcId::world(1)), 3)
        .unwrap();
    assert_eq!(crate::table::worker_of(id), 1);
    inner
        .lock()
        .unwrap()
        .st
        .fail("tcp netmod: connection reset".into());

    let i = inner.clone();
    failed_with(bounded(move || i.wait(id)), "connection reset");
    let i = inner.clone();
    let ids = [id];
    failed_with(
        bounded(move || i.wait_all_ids(1, |k, _| ids[k])),
        "connection reset",
    );
    let i = inner.clone();
    failed_with(bounded(move || i.probe(1, 4, 1, 3)), "connection reset");
    inner.abandon(&[id], false);
    drop(buf);
}

/// A netmod instance whose connection is gone: every poll fails.
struct BrokenNet;

impl Netmod for BrokenNet {
    fake_netmod_rest!("broken");
    fn try_send(&mut self, _: PeerId, _: &[u8], _: &[u8]) -> Result<bool, NetmodError> {
        Ok(false)
    }
    fn poll(&mut self, _: &mut dyn Sink) -> Result<usize, NetmodError> {
        Err(NetmodError::Io {
            what: "reading from rank 1".into(),
            source: std::io::Error::from(std::io::ErrorKind::ConnectionReset),
        })
    }
    fn idle(&self) -> bool {
        true
    }
}

/// Worker 1's own netmod instance fails (a job over several nodes at
/// MULTIPLE, `thread.rs`): a wait, a wait on many requests and a probe on
/// worker 0, which has no netmod failure of its own, end with that error,
/// and so does a wait on worker 1 itself.
#[test]
fn a_netmod_failure_on_worker_1_ends_waits_on_worker_0() {
    let inner = inner(2);
    inner.worker(1).lock().open_netmod(Box::new(BrokenNet));
    let mut buf = vec![0u8; 8];
    let ptr = buf.as_mut_ptr();
    let on_0 = inner
        .start_recv(0, 8, ptr, buf.len(), 1, Some(VcId::world(1)), 3)
        .unwrap();
    assert_eq!(crate::table::worker_of(on_0), 0);

    let i = inner.clone();
    failed_with(bounded(move || i.wait(on_0)), "broken netmod");
    let i = inner.clone();
    let ids = [on_0];
    failed_with(
        bounded(move || i.wait_all_ids(1, |k, _| ids[k])),
        "broken netmod",
    );
    let i = inner.clone();
    failed_with(bounded(move || i.probe(0, 8, 1, 3)), "connection reset");
    let mut other = vec![0u8; 8];
    let on_1 = inner.start_recv(1, 4, other.as_mut_ptr(), 8, 1, Some(VcId::world(1)), 3);
    // Worker 1 failed already: nothing new starts there.
    failed_with(on_1, "broken netmod");
    inner.abandon(&[on_0], false);
    drop((buf, other));
}

/// A netmod instance holding a message in its send queue until it is
/// polled (as tcp holds what is sent before its connection is up).
struct QueuedNet(Arc<AtomicBool>);

impl Netmod for QueuedNet {
    fake_netmod_rest!("queued");
    fn try_send(&mut self, _: PeerId, _: &[u8], _: &[u8]) -> Result<bool, NetmodError> {
        Ok(true)
    }
    fn poll(&mut self, _: &mut dyn Sink) -> Result<usize, NetmodError> {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(0)
    }
    fn idle(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A wait on another process (a port, the process manager's group
/// connect: `progress_until`, whose condition is on worker 0) progresses
/// worker 1 too: what sits in worker 1's netmod queue may be what the
/// other process needs before it can answer (a spawned job's children hung
/// so in group connect, one of them in a barrier on worker 1).
#[test]
fn waits_on_other_processes_progress_every_worker() {
    let inner = inner(2);
    let flushed = Arc::new(AtomicBool::new(false));
    inner
        .worker(1)
        .lock()
        .open_netmod(Box::new(QueuedNet(flushed.clone())));
    let i = inner.clone();
    let seen = flushed.clone();
    bounded(move || {
        i.progress_until(|_| {
            seen.load(std::sync::atomic::Ordering::Relaxed)
                .then_some(Ok(()))
        })
    })
    .expect("progress_until");
    assert!(inner.worker(1).lock().netmod().is_some_and(|n| n.idle()));
}

/// A peer failed from outside the transports (a group member's
/// `Terminated` event) fails on every worker: a receive from it posted on
/// worker 1, where a communicator of our world may run, is complete with
/// the error at once instead of waiting for the transport to notice.
#[test]
fn a_peer_failed_from_outside_fails_on_every_worker() {
    let inner = inner(2);
    let mut buf = vec![0u8; 8];
    let id = inner
        .start_recv(
            1,
            4,
            buf.as_mut_ptr(),
            buf.len(),
            1,
            Some(VcId::world(1)),
            3,
        )
        .unwrap();
    assert_eq!(crate::table::worker_of(id), 1);
    assert!(matches!(inner.test(id), Ok(None)));
    inner.peer_failed_everywhere(VcId::world(1), "it terminated (group event)");
    match inner.test(id) {
        Ok(Some(st)) => assert!(st.check().is_err(), "{st:?}"),
        other => panic!("the receive from the failed peer: {other:?}"),
    }
    let on_0 = inner.start_recv(
        0,
        8,
        buf.as_mut_ptr(),
        buf.len(),
        1,
        Some(VcId::world(1)),
        3,
    );
    match on_0.map(|id| inner.test(id)) {
        Ok(Ok(Some(st))) => assert!(st.check().is_err(), "{st:?}"),
        other => panic!("a receive on worker 0 from the failed peer: {other:?}"),
    }
    drop(buf);
}

/// A netmod whose `park` counts its calls (blocking for nothing), and
/// whose poll fails once `fail_after` parks or polls have been made: the
/// end of the wait under test.
struct ParkNet {
    parks: Arc<AtomicUsize>,
    polls: usize,
    fail_after: usize,
}

impl Netmod for ParkNet {
    fake_netmod_rest!("parking");
    fn try_send(&mut self, _: PeerId, _: &[u8], _: &[u8]) -> Result<bool, NetmodError> {
        Ok(true)
    }
    fn poll(&mut self, _: &mut dyn Sink) -> Result<usize, NetmodError> {
        self.polls += 1;
        let parks = self.parks.load(std::sync::atomic::Ordering::Relaxed);
        if parks >= self.fail_after || self.polls >= 20 * self.fail_after * 64 {
            return Err(NetmodError::Unavailable("done".into()));
        }
        Ok(0)
    }
    fn park(&mut self, _: Duration) -> bool {
        self.parks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        true
    }
    fn idle(&self) -> bool {
        true
    }
}

/// Waits on `inner`'s worker 0 with a `ParkNet`; the parks it made.
fn parks_in_a_wait(inner: Arc<Inner>) -> usize {
    let parks = Arc::new(AtomicUsize::new(0));
    inner.worker(0).lock().open_netmod(Box::new(ParkNet {
        parks: parks.clone(),
        polls: 0,
        fail_after: 3,
    }));
    let mut buf = vec![0u8; 8];
    let ptr = buf.as_mut_ptr();
    let id = inner
        .start_recv(0, 8, ptr, buf.len(), 1, Some(VcId::world(1)), 3)
        .unwrap();
    let i = inner.clone();
    failed_with(bounded(move || i.wait(id)), "done");
    inner.abandon(&[id], false);
    drop(buf);
    parks.load(std::sync::atomic::Ordering::Relaxed)
}

/// A yielding wait of one thread on one worker, with nothing but its
/// netmod to wake it, parks there (again and again while nothing comes).
#[test]
fn a_yielding_wait_parks_in_the_netmod() {
    let inner = inner_at(1, ThreadLevel::Single, |_| None);
    assert_eq!(parks_in_a_wait(inner), 3);
}

/// It never parks with a shared-memory lane (whose arrivals would not
/// end the netmod's wait), nor at MULTIPLE (another thread may want the
/// worker's lock): it yields instead.
#[test]
fn no_park_with_shared_memory_or_at_multiple() {
    let inner = inner_at(1, ThreadLevel::Multiple, |_| None);
    assert_eq!(parks_in_a_wait(inner), 0);
    let name = format!("rivet-park-test-{}", std::process::id());
    let node = crate::shm::ShmNode::create(&name, 2, 0, &crate::shm::ShmConfig::default())
        .expect("a node segment");
    let peer = crate::shm::ShmNode::attach(&name, 2, 1).expect("attach");
    let lane = std::sync::Mutex::new(Some(node));
    let inner = inner_at(1, ThreadLevel::Single, |_| lane.lock().unwrap().take());
    assert!(inner.worker(0).lock().shm().is_some());
    assert_eq!(parks_in_a_wait(inner), 0);
    drop(peer);
}
