//! Protocol tests on a `State` of its own (no PMI, no transports): forged
//! control messages must be refused, and the send state machine must run
//! its legal sequences.

use std::sync::{Arc, Mutex};

use super::*;
use crate::core::Core;
use crate::node_map::NodeMap;
use crate::pg::{Pgs, ProcessGroup};
use crate::route::RouteLimits;
use crate::shm::{ShmConfig, ShmNode};
use crate::state::Setup;
use crate::table::SendPhase;

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

pub(crate) const CONTEXT: u32 = 7;
pub(crate) static BUF: [u8; 4096] = [0x5a; 4096];

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

pub(crate) fn complete(st: &State, id: u64) -> bool {
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
