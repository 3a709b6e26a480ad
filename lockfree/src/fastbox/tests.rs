use super::*;

const N: u64 = 16;

/// A 16-slot ring and its counter in ordinary memory.
struct HeapRing {
    words: Vec<AtomicU64>,
    ctl: AtomicU64,
}

impl HeapRing {
    fn new() -> HeapRing {
        HeapRing {
            words: (0..(N as usize * SLOT / 8 + 8))
                .map(|_| AtomicU64::new(0))
                .collect(),
            ctl: AtomicU64::new(0),
        }
    }

    fn ends(&self, max_len: usize) -> (TxRing, RxRing) {
        let data = self.words.as_ptr() as *mut u8;
        // SAFETY: each test keeps the `HeapRing` alive longer than the
        // ends; the words are 8-aligned (the ring's atomics need 8, 64
        // only matters for speed).
        unsafe {
            (
                TxRing::new(data, &self.ctl, N),
                RxRing::new(data, &self.ctl, N, max_len),
            )
        }
    }
}

#[test]
fn seq_skips_zero_low_bits() {
    assert_eq!(next_seq(1), 2);
    assert_eq!(next_seq(SEQ_MASK), SEQ_MASK + 2);
    assert_ne!(next_seq(SEQ_MASK) & SEQ_MASK, 0);
    assert_eq!(record_slots(0), 1);
    assert_eq!(record_slots(16), 1);
    assert_eq!(record_slots(17), 2);
    assert_eq!(record_slots(1024), 17);
}

/// Single thread: many laps with varied sizes, wraps and a full ring.
#[test]
fn laps_and_wraps() {
    let mem = HeapRing::new();
    let (mut tx, mut rx) = mem.ends(100);
    let mut sseq = 1;
    let mut rseq = 1;
    let mut pending = std::collections::VecDeque::new();
    for i in 0..5000usize {
        let len = (i * 37) % 101;
        let payload: Vec<u8> = (0..len).map(|k| (k + i) as u8).collect();
        let h = WireHeader {
            tag: i as i32,
            ..Default::default()
        };
        while !tx.try_push(sseq, &h, &payload) {
            // Full: drain everything; the idle check sees each record
            // (or the wrap before it) before `peek` takes it, and
            // nothing once all are taken.
            loop {
                let ready = rx.holds(rseq);
                let Some(rec) = rx.peek(rseq).unwrap() else {
                    assert!(!rx.holds(rseq), "idle check sees a record peek does not");
                    break;
                };
                assert!(ready, "idle check missed record {rseq}");
                let (ei, ep): (usize, Vec<u8>) = pending.pop_front().unwrap();
                assert_eq!(rec.header.tag as usize, ei);
                // SAFETY: valid until `consume`.
                let got = unsafe { std::slice::from_raw_parts(rec.payload, rec.len) };
                assert_eq!(got, &ep[..]);
                rx.consume(&rec);
                rseq = next_seq(rseq);
            }
        }
        pending.push_back((i, payload));
        sseq = next_seq(sseq);
        // A record for a later seq is not accepted.
        assert!(rx.peek(rseq + 1000).unwrap().is_none());
    }
}

/// Payload words left from an earlier lap that look exactly like the
/// next marker must never be taken for a record: the receiver, fully
/// caught up, must see nothing until the sender publishes.
#[test]
fn stale_payload_forging_markers_is_never_read() {
    let mem = HeapRing::new();
    let (mut tx, mut rx) = mem.ends(200);
    let mut seq = 1;
    for i in 0..4000usize {
        // Sizes from 1 to 4 slots so record starts drift across laps.
        let len = [0usize, 40, 100, 150, 16, 70][i % 6] + i % 5;
        // Every payload word forges the marker of a record a lap or so
        // ahead, when this slot may be a record start again.
        let payload: Vec<u8> = (0..len.div_ceil(8))
            .flat_map(|j| {
                let ahead = seq + 3 + ((i + j) % 14) as u64;
                ((ahead & SEQ_MASK) | (8u64 << LEN_SHIFT)).to_ne_bytes()
            })
            .take(len)
            .collect();
        let h = WireHeader {
            tag: i as i32,
            ..Default::default()
        };
        assert!(tx.try_push(seq, &h, &payload), "drained ring is full");
        let rec = rx.peek(seq).unwrap().expect("published record");
        assert_eq!(rec.header.tag as usize, i);
        // SAFETY: valid until `consume`.
        let got = unsafe { std::slice::from_raw_parts(rec.payload, rec.len) };
        assert_eq!(got, &payload[..]);
        rx.consume(&rec);
        seq = next_seq(seq);
        assert!(
            rx.peek(seq).unwrap().is_none(),
            "record {i}: read a forged marker from stale payload"
        );
        assert!(
            !rx.holds(seq),
            "record {i}: the idle check took stale payload for a marker"
        );
    }
}
