//! ShmNode reading a corrupt segment: bad queue offsets, cells, records and
//! cell chains are errors, not crashes.

use super::*;

#[test]
fn corrupt_queue_offsets_are_errors() {
    let name = Name::new("corrupt");
    let cfg = ShmConfig {
        fastbox_bytes: 0,
        ..small()
    };
    let mut v = nodes(&name, 2, &cfg);
    let l = v[0].layout.clone();
    let seg = v[0].seg;
    let w = |off: usize| seg.word(off);
    // Receive queue tail pointing nowhere: the sender's enqueue notices.
    w(l.ctl(1) + C_RECV_TAIL).store(12345, Ordering::Relaxed);
    let e = v[0].try_send(1, &hdr(0, 0), &[1, 2, 3]).unwrap_err();
    assert!(matches!(e, ShmError::Corrupt { peer: 1, .. }), "{e}");
    // Receive queue head out of range: the receiver's poll notices.
    w(l.ctl(1) + C_RECV_HEAD).store(l.total as u64 + 64, Ordering::Relaxed);
    let e = v[1]
        .poll(10, |_, _, _| panic!("delivered garbage"))
        .unwrap_err();
    assert!(matches!(e, ShmError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("corrupted"), "{e}");
    // Free queue head misaligned: the sender's dequeue notices.
    let fresh_name = Name::new("corrupt3");
    let mut fresh = nodes(&fresh_name, 2, &cfg);
    let l = fresh[0].layout.clone();
    fresh[0]
        .seg
        .word(l.ctl(0) + C_FREE_HEAD)
        .store(l.cells_base as u64 + 8, Ordering::Relaxed);
    // Sends succeed while the shadow head still holds good cells, then the
    // dequeue reads the bad shared head.
    let mut sent = 0;
    let err = loop {
        match fresh[0].try_send(1, &hdr(sent, 0), &[0; 10]) {
            Ok(true) => sent += 1,
            Ok(false) => panic!("no error"),
            Err(e) => break e,
        }
        assert!(sent < 100);
    };
    assert!(matches!(err, ShmError::Corrupt { .. }), "{err}");
}

#[test]
fn corrupt_cells_and_records_are_errors() {
    // A cell claiming the wrong source.
    let name = Name::new("cellsrc");
    let cfg = ShmConfig {
        fastbox_bytes: 0,
        ..small()
    };
    let mut v = nodes(&name, 3, &cfg);
    assert!(v[0].try_send(1, &hdr(0, 0), &[9; 40]).unwrap());
    let off = v[0].cells.offset(0); // rank 0's first free cell went out
                                    // SAFETY: test: the cell is in flight, nobody else writes it now.
    unsafe { v[0].cells.ptr(off).add(CELL_SRC).cast::<u32>().write(2) };
    let e = v[1]
        .poll(10, |_, _, _| panic!("delivered garbage"))
        .unwrap_err();
    assert!(matches!(e, ShmError::Corrupt { peer: 0, .. }), "{e}");

    // A cell with a huge length.
    let name = Name::new("celllen");
    let mut v = nodes(&name, 2, &cfg);
    assert!(v[0].try_send(1, &hdr(0, 0), &[9; 40]).unwrap());
    let off = v[0].cells.offset(0);
    // SAFETY: as above.
    unsafe {
        v[0].cells
            .ptr(off)
            .add(CELL_LEN)
            .cast::<u32>()
            .write(u32::MAX)
    };
    let e = v[1]
        .poll(10, |_, _, _| panic!("delivered garbage"))
        .unwrap_err();
    assert!(matches!(e, ShmError::Corrupt { .. }), "{e}");

    // A ring record whose length exceeds the fastbox maximum.
    let name = Name::new("reclen");
    let mut v = nodes(&name, 2, &small());
    let ring = v[0].layout.ring(0, 1) + LINE;
    v[0].seg
        .word(ring)
        .store(1 | (0x7fff << 48), Ordering::Release);
    // Announce so the receiver polls the ring.
    v[0].announce(1);
    let e = v[1]
        .poll(10, |_, _, _| panic!("delivered garbage"))
        .unwrap_err();
    assert!(matches!(e, ShmError::Corrupt { peer: 0, .. }), "{e}");
}

/// A cell that claims to continue a message past the largest one is
/// corruption, not an overflow.
#[test]
fn overlong_cell_chain_is_corruption() {
    let name = Name::new("overlong");
    let mut v = nodes(&name, 2, &small());
    let max = v[0].max_payload();
    // Five cells flagged as one message: send four-cell messages' worth
    // by hand, the last flag left on, then one more cell.
    for i in 0..5u32 {
        let off = v[0].take_free_cell().unwrap().unwrap();
        let seq = v[0].tx[1].next_seq;
        v[0].fill_and_queue(
            1,
            off,
            seq,
            max as u32 | CELL_MORE,
            &hdr(i as i32, 0),
            &pattern(0, 0, max),
        )
        .unwrap();
        v[0].tx[1].next_seq = fastbox::next_seq(seq);
    }
    let e = v[1]
        .poll(100, |_, _, _| panic!("nothing whole to deliver"))
        .unwrap_err();
    assert!(matches!(e, ShmError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("continues a message"), "{e}");
}
