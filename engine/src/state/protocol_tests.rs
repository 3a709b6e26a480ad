//! Protocol tests on a `State` of its own (no PMI, no transports): forged
//! control messages must be refused, and the send state machine must run
//! its legal sequences.

use std::sync::{Arc, Mutex};

use super::*;
use crate::core::Core;
use crate::node_map::NodeMap;
use crate::pg::{Pgs, ProcessGroup};
use crate::post::SendArgs;
use crate::route::RouteLimits;
use crate::shm::{ShmConfig, ShmNode};
use crate::state::Setup;
use crate::table::SendPhase;
use crate::wire::FLAG_RMA_KEY;
use rivet_netmods::NetmodError;

/// Rank 0 of `size` ranks: on one node (shared memory) or each on its own
/// node (every peer through the netmod).
pub(crate) fn state(size: u32, one_node: bool) -> State {
    state_of(size, one_node, 0)
}

/// As [`state`], for rank `rank`.
pub(crate) fn state_of(size: u32, one_node: bool, rank: u32) -> State {
    state_of_worker(size, one_node, rank, 0)
}

/// As [`state`], for worker `worker` (its own request handles).
pub(crate) fn state_on_worker(size: u32, one_node: bool, worker: usize) -> State {
    state_of_worker(size, one_node, 0, worker)
}

fn state_of_worker(size: u32, one_node: bool, rank: u32, worker: usize) -> State {
    let mapping = match one_node {
        true => format!("(vector,(0,1,{size}))"),
        false => format!("(vector,(0,{size},1))"),
    };
    let map = NodeMap::from_mapping(&mapping, size, rank);
    State::for_worker(
        Pgs::new(ProcessGroup::new("test".into(), size, rank, map, 1 << 20)),
        Setup {
            limits: RouteLimits::uniform(1024, 1024),
            cma_allowed: false,
            split_min: 0,
        },
        worker,
    )
}

const CONTEXT: u32 = 7;
static BUF: [u8; 4096] = [0x5a; 4096];

/// A send of `BUF` to world rank `to`, as `Core::start_send` makes it.
fn send(st: &mut State, to: u32, eager: bool, sync: bool) -> u64 {
    let vc = VcId::world(to);
    st.requests.insert(Req {
        op: Op::Send(SendOp::new(
            vc,
            BUF.as_ptr(),
            BUF.len(),
            CONTEXT,
            3,
            eager,
            sync,
        )),
        status: Status::default(),
        complete: false,
        detached: false,
    })
}

fn msg(kind: MsgKind, sreq: u64) -> WireHeader {
    let mut h = control(kind, CONTEXT, sreq);
    if kind == MsgKind::Cts {
        h.len = BUF.len() as u64;
        h.aux = 99;
    }
    h
}

pub(crate) fn phase(st: &State, id: u64) -> Option<SendPhase> {
    match st.requests.get(id) {
        Some(Req {
            op: Op::Send(s), ..
        }) => Some(s.phase()),
        _ => None,
    }
}

fn complete(st: &State, id: u64) -> bool {
    st.requests.get(id).is_some_and(|r| r.complete)
}

/// Streams of `BUF` queued to rank `to`.
fn streams(st: &mut State, to: u32) -> usize {
    st.pgs.vc(VcId::world(to)).map_or(0, |vc| {
        vc.pending
            .iter()
            .filter(|item| matches!(item, Outgoing::Stream { .. }))
            .count()
    })
}

fn failed(st: &mut State, rank: u32) -> bool {
    st.pgs.vc(VcId::world(rank)).is_ok_and(|vc| vc.failed)
}

pub(crate) fn violation(st: &State, rank: u32) -> bool {
    st.failed_peers
        .iter()
        .any(|(vc, why)| *vc == VcId::world(rank) && why.starts_with("protocol violation"))
}

#[test]
fn legal_sequences_finish_sends() {
    let mut st = state(3, false);
    // Rendezvous, streamed: Cts, then the last piece leaves.
    let id = send(&mut st, 1, false, false);
    assert_eq!(phase(&st, id), Some(SendPhase::RtsSent));
    st.deliver(VcId::world(1), &msg(MsgKind::Cts, id), &[]);
    assert_eq!(phase(&st, id), Some(SendPhase::Streaming));
    assert_eq!(streams(&mut st, 1), 1);
    assert!(!complete(&st, id));
    st.streamed(id);
    assert_eq!(phase(&st, id), Some(SendPhase::Done));
    assert!(complete(&st, id));
    // Rendezvous, read by the receiver: Ack.
    let id = send(&mut st, 2, false, false);
    st.deliver(VcId::world(2), &msg(MsgKind::Ack, id), &[]);
    assert!(complete(&st, id));
    // Synchronous eager: taken, then Ack.
    let id = send(&mut st, 1, true, true);
    st.transmitted(id);
    assert_eq!(phase(&st, id), Some(SendPhase::AwaitingAck));
    assert!(!complete(&st, id));
    st.deliver(VcId::world(1), &msg(MsgKind::Ack, id), &[]);
    assert!(complete(&st, id));
    // Standard eager: finished once taken.
    let id = send(&mut st, 2, true, false);
    st.transmitted(id);
    assert!(complete(&st, id));
    // A freed send's late answer is ignored, not held against the peer.
    st.requests.remove(id);
    st.deliver(VcId::world(2), &msg(MsgKind::Ack, id), &[]);
    assert!(st.failed_peers.is_empty() && st.fatal.is_none());
}

/// A Cts or Ack from a peer the send is not for must not move it: before,
/// a Cts streamed the buffer to whoever asked.
#[test]
fn answers_from_another_peer_are_refused() {
    let mut st = state(3, false);
    let id = send(&mut st, 1, false, false);
    st.deliver(VcId::world(2), &msg(MsgKind::Cts, id), &[]);
    assert_eq!(streams(&mut st, 2), 0, "streamed to the wrong peer");
    assert_eq!(streams(&mut st, 1), 0);
    st.deliver(VcId::world(2), &msg(MsgKind::Ack, id), &[]);
    assert!(!complete(&st, id), "finished by another peer's Ack");
    assert_eq!(phase(&st, id), Some(SendPhase::RtsSent));
    assert!(failed(&mut st, 2) && violation(&st, 2));
    assert!(!failed(&mut st, 1));
    // The send's own peer still finishes it.
    st.deliver(VcId::world(1), &msg(MsgKind::Cts, id), &[]);
    assert_eq!(streams(&mut st, 1), 1);
    // Nor may a peer name one of our receives as a send.
    let rreq = st.requests.insert(Req {
        op: Op::Recv(crate::table::RecvOp {
            buf: std::ptr::null_mut(),
            cap: 0,
            source: 1,
            source_vc: Some(VcId::world(1)),
            phase: RecvPhase::Posted,
        }),
        status: Status::default(),
        complete: false,
        detached: false,
    });
    st.deliver(VcId::world(1), &msg(MsgKind::Ack, rreq), &[]);
    assert!(violation(&st, 1));
}

/// A second Cts must not queue a second stream of the buffer (the first
/// one's end completes the send and the user may free it while the second
/// still reads it).
#[test]
fn a_second_cts_streams_nothing_more() {
    let mut st = state(2, false);
    let id = send(&mut st, 1, false, false);
    st.deliver(VcId::world(1), &msg(MsgKind::Cts, id), &[]);
    assert_eq!(streams(&mut st, 1), 1);
    st.deliver(VcId::world(1), &msg(MsgKind::Cts, id), &[]);
    assert!(streams(&mut st, 1) <= 1, "the buffer is streamed twice");
    // The peer broke the protocol: it failed, and so did the send, whose
    // queued stream was dropped with the peer.
    assert!(violation(&st, 1));
    assert_eq!(streams(&mut st, 1), 0);
    assert_eq!(phase(&st, id), Some(SendPhase::Failed));
    let status = st.requests.get(id).map(|r| r.status.error);
    assert_eq!(status, Some(Some(MsgError::PeerFailed { rank: 1 })));
}

/// An Ack must not finish a send whose pieces are still queued (the user
/// would free the buffer the queue reads), nor a send that wanted none.
#[test]
fn stray_acks_finish_nothing() {
    let mut st = state(3, false);
    let id = send(&mut st, 1, false, false);
    st.deliver(VcId::world(1), &msg(MsgKind::Cts, id), &[]);
    st.deliver(VcId::world(1), &msg(MsgKind::Ack, id), &[]);
    let ok = st
        .requests
        .get(id)
        .is_some_and(|r| r.complete && r.status.error.is_none());
    assert!(
        !(ok && streams(&mut st, 1) > 0),
        "complete while its buffer is still queued"
    );
    assert!(violation(&st, 1));
    // An eager standard send asked for no Ack.
    let eager = send(&mut st, 2, true, false);
    st.transmitted(eager);
    st.deliver(VcId::world(2), &msg(MsgKind::Ack, eager), &[]);
    assert!(violation(&st, 2));
}

/// A CancelAck nobody asked for must not complete a send, least of all one
/// whose message is still queued (pointing at the buffer).
#[test]
fn unasked_cancel_acks_are_refused() {
    let mut st = state(3, false);
    let id = send(&mut st, 1, true, false);
    st.queue(
        VcId::world(1),
        Outgoing::Msg {
            header: msg(MsgKind::Eager, id),
            buf: BUF.as_ptr(),
            len: BUF.len(),
            done: id,
        },
    )
    .unwrap();
    let mut answer = msg(MsgKind::CancelAck, id);
    answer.flags = FLAG_CANCELLED;
    st.deliver(VcId::world(1), &answer, &[]);
    let cancelled = st.requests.get(id).is_some_and(|r| r.status.cancelled);
    assert!(!cancelled, "cancelled by an unasked CancelAck");
    assert!(violation(&st, 1));
    // On a finished send too.
    let done = send(&mut st, 2, true, false);
    st.transmitted(done);
    st.deliver(VcId::world(2), &answer_for(done), &[]);
    assert!(!st.requests.get(done).is_some_and(|r| r.status.cancelled));
    assert!(violation(&st, 2));
}

fn answer_for(sreq: u64) -> WireHeader {
    let mut answer = msg(MsgKind::CancelAck, sreq);
    answer.flags = FLAG_CANCELLED;
    answer
}

#[test]
fn cancel_phases() {
    let vc = VcId::world(1);
    // Withdrawn before matching.
    let mut s = SendOp::new(vc, BUF.as_ptr(), 1, 0, 0, false, false);
    assert!(s.start_cancel());
    assert!(!s.start_cancel(), "one cancel at a time");
    assert!(!s.finished());
    assert_eq!(s.on_cancel_ack(true), Ok(()));
    assert_eq!(s.phase(), SendPhase::Cancelled);
    assert!(s.finished());
    assert!(s.on_cts().is_err() && s.on_ack().is_err());
    // Matched first: the Cts comes before the CancelAck saying so.
    let mut s = SendOp::new(vc, BUF.as_ptr(), 1, 0, 0, false, false);
    assert!(s.start_cancel());
    assert_eq!(s.on_cts(), Ok(()));
    assert!(s.on_cancel_ack(true).is_err(), "withdrawn after matching");
    assert_eq!(s.on_cancel_ack(false), Ok(()));
    assert!(!s.finished(), "still streaming");
    s.streamed();
    assert!(s.finished());
    assert!(!s.start_cancel());
    // An eager message still queued cannot have been withdrawn.
    let mut s = SendOp::new(vc, BUF.as_ptr(), 1, 0, 0, true, true);
    assert!(s.start_cancel());
    assert!(s.on_cancel_ack(true).is_err());
    s.taken();
    assert_eq!(s.phase(), SendPhase::AwaitingAck);
    assert_eq!(s.on_cancel_ack(true), Ok(()));
}

/// Local ranks 0 and 1 of a small node segment, both in this process.
pub(crate) fn shm_pair(tag: &str) -> (ShmNode, ShmNode) {
    let name = format!("rivet-test-{}-{tag}", std::process::id());
    let cfg = ShmConfig {
        fastbox_bytes: 4096,
        fastbox_max: 128,
        cells_per_rank: 8,
        cell_bytes: 1024,
    };
    let a = ShmNode::create(&name, 2, 0, &cfg).unwrap();
    let b = ShmNode::attach(&name, 2, 1).unwrap();
    (a, b)
}

/// A `Core` on `shm` (no netmod, no PMI) with single copy allowed.
pub(crate) fn shm_core(shm: ShmNode, mut st: State) -> Core {
    st.cma_allowed = true;
    Core::new(Some(shm), None, Arc::new(Mutex::new(None)), st)
}

/// The single-copy read takes the pid from the node segment: an `Rts`
/// naming another process (here one that does not exist) is read from the
/// process at the sender's slot all the same.
#[test]
fn single_copy_reads_use_the_segment_pid() {
    let (me, mut peer) = shm_pair("cma-pid");
    let mut core = shm_core(me, state(2, true));
    core.progress();
    assert_eq!(core.tx.shm_pids(), [std::process::id(); 2]);

    let source: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    let mut dst = vec![0u8; source.len()];
    let rreq = core.start_recv(CONTEXT, dst.as_mut_ptr(), dst.len(), 1, None, 5);
    let rts = WireHeader {
        kind: MsgKind::Rts as u8,
        context: CONTEXT,
        tag: 5,
        src: 1,
        len: source.len() as u64,
        sreq: 42,
        aux: source.as_ptr() as u64,
        ..WireHeader::default()
    };
    let forged_pid = (i32::MAX as u32 - 7).to_le_bytes();
    assert!(peer.try_send(0, &rts, &forged_pid).unwrap());
    while !core.st.requests.get(rreq).is_some_and(|r| r.complete) {
        assert!(
            core.progress() > 0,
            "the receive is waiting for a Cts answer"
        );
    }
    assert_eq!(dst, source);
    // And the sender is told it was read (Ack), not asked to stream.
    let mut kinds = Vec::new();
    peer.poll(8, |_, h, _| kinds.push(h.kind())).unwrap();
    assert_eq!(kinds, [Some(MsgKind::Ack)]);
}

/// What `FakeNet` holds, shared with the test.
#[derive(Default)]
struct FakeState {
    /// Keys registered now.
    registered: Vec<u64>,
    /// Reads accepted (else refused), and those not ended: (peer, buffer).
    accept_reads: bool,
    reads: Vec<(rivet_netmods::PeerId, usize)>,
    /// `stop_reads` gives up (a provider that never ends them).
    stuck: bool,
    /// Reported failed at the next poll.
    fail_at_poll: Option<rivet_netmods::PeerId>,
}

/// A netmod that takes every message and offers one-sided reads, which
/// never end by themselves: the test sees which buffers it still holds.
struct FakeNet {
    st: Arc<Mutex<FakeState>>,
}

impl FakeNet {
    fn new() -> (FakeNet, Arc<Mutex<FakeState>>) {
        let st = Arc::new(Mutex::new(FakeState::default()));
        (FakeNet { st: st.clone() }, st)
    }
}

impl rivet_netmods::Netmod for FakeNet {
    fn name(&self) -> &'static str {
        "fake"
    }
    fn business_card(&self) -> &str {
        "fake"
    }
    fn knows(&self, _: rivet_netmods::PeerId) -> bool {
        true
    }
    fn connect(&mut self, _: rivet_netmods::PeerId, _: &str) -> Result<(), NetmodError> {
        Ok(())
    }
    fn add_group(&mut self, _: u32, _: &str) -> Result<(), NetmodError> {
        Ok(())
    }
    fn remove_group(&mut self, _: u32) {}
    fn connect_port(&mut self, _: &str, _: u64) -> Result<rivet_netmods::PeerId, NetmodError> {
        Err(NetmodError::Unavailable("fake".into()))
    }
    fn disconnect(&mut self, _: rivet_netmods::PeerId) {}
    fn peer_count(&self) -> usize {
        0
    }
    fn try_send(
        &mut self,
        _: rivet_netmods::PeerId,
        _: &[u8],
        _: &[u8],
    ) -> Result<bool, NetmodError> {
        Ok(true)
    }
    fn poll(&mut self, sink: &mut dyn rivet_netmods::Sink) -> Result<usize, NetmodError> {
        let failed = self.st.lock().unwrap().fail_at_poll.take();
        if let Some(peer) = failed {
            sink.peer_failed(peer, "connection reset");
        }
        Ok(failed.is_some() as usize)
    }
    fn idle(&self) -> bool {
        true
    }
    fn limits(&self) -> rivet_netmods::Limits {
        rivet_netmods::Limits {
            max_payload: 1 << 20,
            eager_max: 1024,
        }
    }
    fn rma(&mut self) -> Option<&mut dyn rivet_netmods::Rma> {
        Some(self)
    }
    fn describe(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

impl rivet_netmods::Rma for FakeNet {
    fn register(&mut self, addr: usize, _: usize) -> Result<u64, NetmodError> {
        self.st.lock().unwrap().registered.push(addr as u64);
        Ok(addr as u64)
    }
    fn deregister(&mut self, key: u64) -> Result<(), NetmodError> {
        self.st.lock().unwrap().registered.retain(|&k| k != key);
        Ok(())
    }
    unsafe fn read(
        &mut self,
        peer: rivet_netmods::PeerId,
        local: *mut u8,
        _: usize,
        _: u64,
        _: u64,
    ) -> Result<u64, NetmodError> {
        let mut st = self.st.lock().unwrap();
        if !st.accept_reads {
            return Err(NetmodError::Unavailable("fake".into()));
        }
        st.reads.push((peer, local as usize));
        Ok(st.reads.len() as u64)
    }
    fn poll_reads(&mut self, _: &mut dyn FnMut(u64, Result<(), String>)) {}
    fn stop_reads(&mut self, peer: rivet_netmods::PeerId) -> bool {
        let mut st = self.st.lock().unwrap();
        if st.stuck {
            return false;
        }
        st.reads.retain(|&(p, _)| p != peer);
        true
    }
}

/// An abandoned rendezvous send (a scope unwinding, a blocking send that
/// failed) gives back its buffer's registration at once: the buffer is
/// released next, and a remote read the netmod serves during the next
/// poll must not find it still registered.
#[test]
fn abandoned_sends_deregister_their_buffer_at_once() {
    let (net, fake) = FakeNet::new();
    let mut core = Core::new(
        None,
        Some(Box::new(net)),
        Arc::new(Mutex::new(None)),
        state(2, false),
    );
    let id = core
        .start_send(&SendArgs {
            context: CONTEXT,
            src: 0,
            buf: BUF.as_ptr(),
            len: BUF.len(),
            dest: VcId::world(1),
            tag: 3,
            sync: false,
        })
        .unwrap();
    assert_eq!(fake.lock().unwrap().registered, [BUF.as_ptr() as u64]);
    core.abandon(&[id]);
    assert!(
        fake.lock().unwrap().registered.is_empty(),
        "the abandoned buffer is still readable by the peer"
    );
}

/// How a netmod peer fails in `failed_peers_reads_end_before_their_receive`.
#[derive(Clone, Copy, Debug)]
enum Death {
    /// The netmod reports it (`Sink::peer_failed`).
    Netmod,
    /// The engine finds out itself (a group event, a protocol violation,
    /// the process watch): the netmod still holds the read.
    Engine,
}

/// A receive matched to a netmod `Rts` from rank 1, its read posted into
/// `dst` by the netmod of `core`.
fn reading_receive(core: &mut Core, fake: &Mutex<FakeState>, dst: &mut [u8]) -> u64 {
    fake.lock().unwrap().accept_reads = true;
    let rreq = core.start_recv(CONTEXT, dst.as_mut_ptr(), dst.len(), 1, None, 5);
    let rts = WireHeader {
        kind: MsgKind::Rts as u8,
        flags: FLAG_RMA_KEY,
        context: CONTEXT,
        tag: 5,
        src: 1,
        len: dst.len() as u64,
        sreq: 42,
        aux: 0x1000,
        ..WireHeader::default()
    };
    let mut payload = 0u32.to_le_bytes().to_vec();
    payload.extend_from_slice(&77u64.to_le_bytes());
    core.st.deliver(VcId::world(1), &rts, &payload);
    core.progress();
    assert_eq!(
        fake.lock().unwrap().reads,
        [(1, dst.as_ptr() as usize)],
        "the netmod reads into the receive buffer"
    );
    assert!(!complete(&core.st, rreq));
    rreq
}

/// A peer dies while the netmod reads its data into a receive buffer: the
/// receive fails only once the netmod has let go of the buffer (the user
/// may free it as soon as the receive completes), and until then it is
/// still written by someone (`abandon` waits for it).
#[test]
fn failed_peers_reads_end_before_their_receive() {
    for death in [Death::Netmod, Death::Engine] {
        let (net, fake) = FakeNet::new();
        let mut core = Core::new(
            None,
            Some(Box::new(net)),
            Arc::new(Mutex::new(None)),
            state(2, false),
        );
        let mut dst = vec![0u8; 4096];
        let rreq = reading_receive(&mut core, &fake, &mut dst);
        let holds = |fake: &Mutex<FakeState>| !fake.lock().unwrap().reads.is_empty();
        match death {
            Death::Netmod => fake.lock().unwrap().fail_at_poll = Some(1),
            Death::Engine => {
                core.st
                    .peer_failed(VcId::world(1), "it terminated (group event)");
                assert!(
                    !complete(&core.st, rreq),
                    "{death:?}: the receive completed while the netmod still reads into it"
                );
                assert_eq!(core.st.remote_writer(rreq), Some(VcId::world(1)));
            }
        }
        core.progress();
        assert!(
            complete(&core.st, rreq),
            "{death:?}: the receive never failed"
        );
        assert!(
            !holds(&fake),
            "{death:?}: the netmod still holds the buffer"
        );
        let status = &core.st.requests.get(rreq).unwrap().status;
        assert_eq!(
            status.error,
            Some(MsgError::PeerFailed { rank: 1 }),
            "{death:?}"
        );
        assert_eq!(core.st.remote_writer(rreq), None);
        assert!(core.st.fatal.is_none(), "{death:?}: {:?}", core.st.fatal);
        assert!(!core.st.rma.busy(), "{death:?}: reads left behind");
    }
}

/// A netmod that cannot stop a failed peer's read in time: the receive
/// never completes (its buffer is still written), the engine fails, so
/// waits end with the error and releasing the buffer aborts (`abandon`).
#[test]
fn reads_not_stopped_fail_the_engine_and_keep_the_buffer() {
    let (net, fake) = FakeNet::new();
    let mut core = Core::new(
        None,
        Some(Box::new(net)),
        Arc::new(Mutex::new(None)),
        state(2, false),
    );
    let mut dst = vec![0u8; 4096];
    let rreq = reading_receive(&mut core, &fake, &mut dst);
    fake.lock().unwrap().stuck = true;
    fake.lock().unwrap().fail_at_poll = Some(1);
    core.progress();
    core.progress();
    assert!(!complete(&core.st, rreq));
    assert_eq!(core.st.remote_writer(rreq), Some(VcId::world(1)));
    let fatal = core.st.fatal.clone().expect("the engine failed");
    assert!(fatal.contains("could not stop its reads"), "{fatal}");
}
