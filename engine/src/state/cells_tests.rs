//! An eager message longer than one shared-memory cell, taken cell by
//! cell into the receive that matched its first cell
//! (`protocol/cells.rs`), against the whole-message path it replaces.

use super::tests::{shm_core, shm_pair, state};
use super::*;
use crate::core::Core;
use crate::shm::ShmNode;
use crate::status::MsgError;

const CONTEXT: u32 = 7;

fn bytes(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// What rank 1 (`peer`) sends as a `len`-byte eager message to rank 0.
fn send_long(peer: &mut ShmNode, tag: i32, data: &[u8], sync: bool) {
    let h = WireHeader {
        kind: MsgKind::Eager as u8,
        flags: if sync { FLAG_SYNC } else { 0 },
        context: CONTEXT,
        tag,
        src: 1,
        len: data.len() as u64,
        sreq: 42,
        ..WireHeader::default()
    };
    assert!(data.len() > peer.max_payload() && data.len() <= peer.max_message());
    assert!(peer.try_send(0, &h, data).unwrap());
}

fn direct(core: &Core) -> u64 {
    core.tx.shm.as_ref().unwrap().node().stats().direct
}

fn wait(core: &mut Core, rreq: u64) -> Status {
    while !core.st.requests.get(rreq).is_some_and(|r| r.complete) {
        assert!(core.progress() > 0, "nothing more arrives");
    }
    core.st.requests.get(rreq).unwrap().status
}

/// A posted receive takes the cells straight in, with the whole-message
/// path's result: all of it, or (shorter buffer) its first `cap` bytes,
/// nothing past them and a truncation error; a synchronous send is
/// acknowledged. A message that arrived before its receive was posted is
/// put together and matched whole, as before.
#[test]
fn long_eager_messages_go_straight_into_posted_receives() {
    let (me, mut peer) = shm_pair("cells");
    let mut core = shm_core(me, state(2, true));
    core.progress();
    let len = 3 * peer.max_payload() + 17;

    // Posted first: taken cell by cell, acknowledged (synchronous).
    let data = bytes(1, len);
    let mut dst = vec![0u8; len + 64];
    let rreq = core.start_recv(CONTEXT, dst.as_mut_ptr(), len + 64, 1, None, 5);
    send_long(&mut peer, 5, &data, true);
    let st = wait(&mut core, rreq);
    assert_eq!((st.source, st.tag, st.count, st.error), (1, 5, len, None));
    assert_eq!(&dst[..len], &data[..]);
    assert!(
        dst[len..].iter().all(|&b| b == 0),
        "nothing past the message"
    );
    assert_eq!(direct(&core), 1, "taken piece by piece");
    let mut kinds = Vec::new();
    peer.poll(8, |_, h, _| kinds.push((h.kind(), h.sreq)))
        .unwrap();
    assert_eq!(kinds, [(Some(MsgKind::Ack), 42)]);

    // A receive shorter than the message, ending inside its second cell.
    let data = bytes(2, len);
    let cap = peer.max_payload() + 100;
    let mut dst = vec![0u8; cap + 64];
    let rreq = core.start_recv(CONTEXT, dst.as_mut_ptr(), cap, 1, None, 6);
    send_long(&mut peer, 6, &data, false);
    let st = wait(&mut core, rreq);
    let truncated = MsgError::Truncated {
        sent: len,
        capacity: cap,
    };
    assert_eq!((st.count, st.error), (cap, Some(truncated)));
    assert_eq!(&dst[..cap], &data[..cap]);
    assert!(
        dst[cap..].iter().all(|&b| b == 0),
        "nothing past the buffer"
    );
    assert_eq!(direct(&core), 2);

    // Arrived before its receive: matched whole, the same result.
    let data = bytes(3, len);
    send_long(&mut peer, 7, &data, false);
    while core.progress() > 0 {}
    let mut dst = vec![0u8; cap];
    let rreq = core.start_recv(CONTEXT, dst.as_mut_ptr(), cap, 1, None, 7);
    let st = wait(&mut core, rreq);
    let truncated = MsgError::Truncated {
        sent: len,
        capacity: cap,
    };
    assert_eq!((st.count, st.error), (cap, Some(truncated)));
    assert_eq!(&dst[..], &data[..cap]);
    assert_eq!(direct(&core), 2, "put together: no receive was posted");
}

/// A receive that matched a message's first cell fails with its peer,
/// and takes nothing from cells handed on after that (nor after it was
/// withdrawn).
#[test]
fn a_receive_matched_at_the_first_cell_fails_with_its_peer() {
    let mut st = state(3, true);
    let h = WireHeader {
        kind: MsgKind::Eager as u8,
        context: CONTEXT,
        tag: 1,
        src: 1,
        len: 200,
        ..WireHeader::default()
    };
    let mut dst = [0u8; 200];
    let rreq = st.post_recv(CONTEXT, dst.as_mut_ptr(), 200, 1, Some(VcId::world(1)), 1);
    let token = st.shm_first_piece(VcId::world(1), &h, &[7; 100]);
    assert_eq!(token, Some(rreq));
    // Another peer's cells do not reach it.
    st.shm_piece(VcId::world(2), rreq, 100, &[8; 100], true);
    assert!(!st.requests.get(rreq).unwrap().complete);
    st.peer_failed(VcId::world(1), "gone");
    let r = st.requests.get(rreq).unwrap();
    assert!(r.complete);
    assert_eq!(r.status.error, Some(MsgError::PeerFailed { rank: 1 }));
    st.shm_piece(VcId::world(1), rreq, 100, &[9; 100], true);
    assert_eq!(&dst[..100], &[7; 100]);
    assert_eq!(&dst[100..], &[0; 100], "nothing after the failure");

    // Withdrawn (its buffer about to be released): nothing more either.
    let h = WireHeader { src: 2, ..h };
    let mut dst = [0u8; 200];
    let rreq = st.post_recv(CONTEXT, dst.as_mut_ptr(), 200, 2, Some(VcId::world(2)), 1);
    assert_eq!(
        st.shm_first_piece(VcId::world(2), &h, &[7; 100]),
        Some(rreq)
    );
    st.withdraw(rreq);
    st.shm_piece(VcId::world(2), rreq, 100, &[9; 100], true);
    assert_eq!(&dst[100..], &[0; 100]);
}
