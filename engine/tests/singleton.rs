//! The engine as a singleton (no process manager): every message goes
//! through the loopback VC, which exercises the protocols and matching
//! without another process. Multi-process behaviour is in tests/tests/.

use rivet::{Engine, MsgError, ANY_SOURCE, ANY_TAG};

fn engine() -> Engine {
    // A singleton: make sure no launcher's variables leak in from outside.
    for var in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE"] {
        std::env::remove_var(var);
    }
    Engine::init().expect("singleton init")
}

#[test]
fn a_singleton_talks_to_itself() {
    let engine = engine();
    assert_eq!((engine.rank(), engine.size()), (0, 1));
    let world = engine.world();

    // Eager, then one big enough for the rendezvous path on other VCs.
    for len in [0usize, 1, 100, 70_000] {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        world.send(&data, 0, 3).unwrap();
        let mut got = vec![0u8; len];
        let st = world.recv(&mut got, 0, 3).unwrap();
        assert_eq!((st.source, st.tag, st.count, st.error), (0, 3, len, None));
        assert_eq!(got, data);
    }

    // Probe sees the waiting message, which then still arrives.
    world.send(b"probe me", 0, 9).unwrap();
    let st = world.probe(ANY_SOURCE, ANY_TAG).unwrap();
    assert_eq!((st.source, st.tag, st.count), (0, 9, 8));
    let mut got = [0u8; 8];
    world.recv(&mut got, 0, 9).unwrap();
    assert_eq!(&got, b"probe me");
    assert!(world.iprobe(ANY_SOURCE, ANY_TAG).unwrap().is_none());

    // Truncation is reported in the status; bytes past the buffer untouched.
    world.send(&[5u8; 10], 0, 1).unwrap();
    let mut big = [0xAAu8; 8];
    let st = world.recv(&mut big[..4], 0, 1).unwrap();
    assert_eq!(st.count, 4);
    assert_eq!(
        st.error,
        Some(MsgError::Truncated {
            sent: 10,
            capacity: 4
        })
    );
    assert_eq!(big, [5, 5, 5, 5, 0xAA, 0xAA, 0xAA, 0xAA]);
    engine.finalize().unwrap();
}

#[test]
fn scopes_cancel_and_sync_sends() {
    let engine = engine();
    let world = engine.world();
    // Buffers lent to a scope live outside it.
    let mut never = [0u8; 4];
    world.scope(|s| {
        // A posted receive that nothing matches can be cancelled.
        let r = s.irecv(&mut never, 0, 77).unwrap();
        r.cancel().unwrap();
        let st = r.wait().unwrap();
        assert!(st.cancelled);

        // A synchronous send completes only once matched.
        let mut sync = s.issend(b"sync", 0, 5).unwrap();
        assert!(sync.test().unwrap().is_none(), "ssend done before a match");
        let mut got = [0u8; 4];
        world.recv(&mut got, 0, 5).unwrap();
        assert_eq!(&got, b"sync");
        let st = sync.wait().unwrap();
        assert!(!st.cancelled);

        // An unmatched send can be withdrawn; the next message is received.
        let withdrawn = s.issend(b"gone", 0, 6).unwrap();
        withdrawn.cancel().unwrap();
        assert!(withdrawn.wait().unwrap().cancelled);
        world.send(b"next", 0, 6).unwrap();
        let mut got = [0u8; 4];
        world.recv(&mut got, 0, ANY_TAG).unwrap();
        assert_eq!(&got, b"next");
    });

    // Wildcard order: the earliest matching message wins.
    for tag in [4, 2, 4] {
        world.send(&[tag as u8], 0, tag).unwrap();
    }
    let mut b = [0u8; 1];
    let tags: Vec<i32> = (0..3)
        .map(|_| world.recv(&mut b, ANY_SOURCE, ANY_TAG).unwrap().tag)
        .collect();
    assert_eq!(tags, [4, 2, 4]);

    let dup = world.dup().unwrap();
    assert_ne!(dup.context_id(), world.context_id());
    dup.send(b"d", 0, 1).unwrap();
    world.send(b"w", 0, 1).unwrap();
    world.recv(&mut b, 0, 1).unwrap();
    assert_eq!(&b, b"w", "a dup's traffic stays on the dup");
    dup.recv(&mut b, 0, 1).unwrap();
    assert_eq!(&b, b"d");
    world.barrier().unwrap();
}

#[test]
fn bad_arguments_are_errors() {
    let engine = engine();
    let world = engine.world();
    assert!(world.send(b"x", 1, 0).is_err(), "rank out of range");
    assert!(world.send(b"x", 0, -5).is_err(), "negative tag");
    let mut b = [0u8; 1];
    assert!(world.recv(&mut b, 3, 0).is_err());
    assert!(world.recv(&mut b, 0, -7).is_err());
}
