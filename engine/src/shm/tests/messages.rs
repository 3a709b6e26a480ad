//! ShmNode carrying messages: order, sizes, room and budget, lanes, idle
//! polls, multi-cell and claimed messages.

use super::*;

/// Each of `ranks` threads sends `msgs` messages of random sizes (ring and
/// cell paths mixed) to every other rank and checks what it receives:
/// per-sender order, headers and payload bytes.
fn all_to_all(ranks: usize, msgs: usize, cfg: ShmConfig) {
    let name = Name::new("a2a");
    let handles = nodes(&name, ranks, &cfg);
    assert!(!name.exists(), "name must be unlinked after all attached");
    let threads: Vec<_> = handles
        .into_iter()
        .map(|mut node| {
            std::thread::spawn(move || {
                let me = node.local_rank();
                // Messages of one cell and of several.
                let max = node.max_message();
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (me as u64 + 1));
                let mut sent = vec![0usize; ranks];
                let mut got = vec![0usize; ranks];
                let peers: Vec<usize> = (0..ranks).filter(|&p| p != me).collect();
                let total = msgs * peers.len();
                let (mut nsent, mut nrecv) = (0, 0);
                let mut idle = 0u64;
                while nsent < total || nrecv < total {
                    let mut progress = false;
                    for &p in &peers {
                        if sent[p] == msgs {
                            continue;
                        }
                        let i = sent[p];
                        let len = match rng.next() % 8 {
                            0 => 0,
                            1 => max,
                            2..=5 => (rng.next() % 200) as usize,
                            _ => (rng.next() % (max as u64 + 1)) as usize,
                        };
                        let body = pattern(me, i, len);
                        if node.try_send(p, &hdr(i as i32, me as u32), &body).unwrap() {
                            sent[p] += 1;
                            nsent += 1;
                            progress = true;
                        }
                    }
                    let k = node
                        .poll(1 + (rng.next() % 16) as usize, |s, h, b| {
                            let i = got[s];
                            assert_eq!(h.tag as usize, i, "rank {me}: from {s} out of order");
                            assert_eq!(*h, hdr(i as i32, s as u32));
                            assert_eq!(b, &pattern(s, i, b.len())[..], "payload from {s} #{i}");
                            got[s] += 1;
                        })
                        .unwrap();
                    nrecv += k;
                    if k > 0 {
                        progress = true;
                    }
                    if progress {
                        idle = 0;
                    } else {
                        idle += 1;
                        assert!(
                            idle < 50_000_000,
                            "rank {me} stuck: sent {sent:?} got {got:?}"
                        );
                        std::thread::yield_now();
                    }
                }
                (node.stats(), got)
            })
        })
        .collect();
    let mut cells = 0;
    for t in threads {
        let (stats, got) = t.join().unwrap();
        cells += stats.cell_sends;
        assert!(got.iter().all(|&g| g == msgs || g == 0));
    }
    assert!(cells > 0, "test should exercise the cell path");
}

#[test]
fn order_two_ranks_random_sizes() {
    all_to_all(2, 20_000, small());
}

#[test]
fn order_three_ranks_random_sizes() {
    all_to_all(3, 10_000, small());
}

#[test]
fn order_three_ranks_default_config() {
    let cfg = ShmConfig {
        cells_per_rank: 4,
        ..ShmConfig::default()
    };
    all_to_all(3, 3_000, cfg);
}

#[test]
fn order_cells_only() {
    let cfg = ShmConfig {
        fastbox_bytes: 0,
        ..small()
    };
    all_to_all(3, 5_000, cfg);
}

#[test]
fn ring_full_then_cells_then_no_room_then_resume() {
    let name = Name::new("full");
    let cfg = small();
    let mut v = nodes(&name, 2, &cfg);
    let (a, b) = v.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    let mut i = 0;
    while a
        .try_send(1, &hdr(i, 0), &pattern(0, i as usize, 8))
        .unwrap()
    {
        i += 1;
        assert!(i < 10_000);
    }
    let st = a.stats();
    assert_eq!(st.cell_sends, cfg.cells_per_rank as u64, "{st:?}");
    assert!(st.ring_full >= cfg.cells_per_rank as u64);
    assert_eq!(st.no_room, 1);
    // The ring held 2048/64 = 32 slots: at least 24 one-slot records.
    assert!(i as usize >= 24 + cfg.cells_per_rank, "sent {i}");
    // Big messages also get no room now.
    assert!(!a.try_send(1, &hdr(i, 0), &[1; 500]).unwrap());
    let got = drain(b);
    assert_eq!(got.len(), i as usize);
    for (k, (p, h, body)) in got.iter().enumerate() {
        assert_eq!((*p, h.tag), (0, k as i32));
        assert_eq!(body, &pattern(0, k, 8));
    }
    // Everything flows again, in order, through both paths.
    let body = pattern(0, i as usize, 500);
    assert!(a.try_send(1, &hdr(i, 0), &body).unwrap());
    assert!(a.try_send(1, &hdr(i + 1, 0), &[]).unwrap());
    let got = drain(b);
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].1.tag, &got[0].2), (i, &body));
    assert_eq!((got[1].1.tag, got[1].2.len()), (i + 1, 0));
}

#[test]
fn sizes_zero_max_and_too_large() {
    let name = Name::new("sizes");
    for cfg in [small(), ShmConfig::default()] {
        let name = Name::new("sizes");
        let mut v = nodes(&name, 2, &cfg);
        let max = v[0].max_payload();
        assert_eq!(max, cfg.cell_bytes - 64);
        let mm = v[0].max_message();
        assert_eq!(mm, 4 * max);
        let fmax = v[0].fastbox_max();
        let lens = [
            0,
            1,
            15,
            16,
            17,
            fmax - 1,
            fmax,
            fmax + 1,
            max - 1,
            max,
            max + 1,
            2 * max,
            2 * max + 1,
            mm - 1,
            mm,
        ];
        let mut got = Vec::new();
        for (i, &len) in lens.iter().enumerate() {
            assert!(v[0]
                .try_send(1, &hdr(i as i32, 0), &pattern(0, i, len))
                .unwrap());
            got.extend(drain(&mut v[1]));
        }
        assert_eq!(got.len(), lens.len());
        for (i, (_, h, b)) in got.iter().enumerate() {
            assert_eq!(*h, hdr(i as i32, 0));
            assert_eq!(b, &pattern(0, i, lens[i]));
        }
        let e = v[0].try_send(1, &hdr(0, 0), &vec![0; mm + 1]).unwrap_err();
        assert!(matches!(e, ShmError::TooLarge { .. }), "{e}");
        assert!(e.to_string().contains("exceeds"), "{e}");
        let e = v[0].try_send(0, &hdr(0, 0), &[]).unwrap_err();
        assert!(matches!(e, ShmError::BadPeer { .. }), "{e}");
        let e = v[0].try_send(2, &hdr(0, 0), &[]).unwrap_err();
        assert!(matches!(e, ShmError::BadPeer { .. }), "{e}");
    }
    drop(name);
}

#[test]
fn budget_is_respected_across_merge() {
    let name = Name::new("budget");
    let mut v = nodes(&name, 2, &small());
    // Ring, ring, cell (too big for the ring), ring: the cell's delivery
    // needs the two ring records first.
    let lens = [4, 4, 600, 4, 700, 0];
    for (i, &len) in lens.iter().enumerate() {
        assert!(v[0]
            .try_send(1, &hdr(i as i32, 0), &pattern(0, i, len))
            .unwrap());
    }
    let mut tags = Vec::new();
    for _ in 0..20 {
        let k = v[1].poll(1, |_, h, _| tags.push(h.tag)).unwrap();
        assert!(k <= 1);
    }
    assert_eq!(tags, (0..lens.len() as i32).collect::<Vec<_>>());
}

/// Lanes are separate transports: what one lane carries reaches only the
/// same lane of the peer, in order, whichever path (ring or cell) each
/// message took, and lanes are handed out once.
#[test]
fn lanes_carry_their_own_traffic_only() {
    let name = Name::new("lanes");
    let cfg = small();
    let mut a = ShmNode::create_lanes(&name.0, 2, 0, &cfg, 3).unwrap();
    let mut b = ShmNode::attach(&name.0, 2, 1).unwrap();
    assert_eq!((a.lanes(), b.lanes()), (3, 3));
    let mut a_lanes = a.take_lanes();
    let mut b_lanes = b.take_lanes();
    assert_eq!((a_lanes.len(), b_lanes.len()), (2, 2));
    assert!(
        a.take_lanes().is_empty(),
        "a lane has one handle per process"
    );
    assert!(a_lanes[0].take_lanes().is_empty());
    // Lane 2 gets small (ring) and large (cell) messages; lane 0 one.
    let sizes = [8usize, 600, 16, 900, 0];
    for (i, &len) in sizes.iter().enumerate() {
        let data = pattern(0, i, len);
        assert!(a_lanes[1].try_send(1, &hdr(i as i32, 0), &data).unwrap());
    }
    assert!(a.try_send(1, &hdr(77, 0), &[1, 2, 3]).unwrap());
    assert!(drain(&mut b_lanes[0]).is_empty(), "lane 1 carried nothing");
    let on_two = drain(&mut b_lanes[1]);
    let tags: Vec<i32> = on_two.iter().map(|(_, h, _)| h.tag).collect();
    assert_eq!(tags, vec![0, 1, 2, 3, 4]);
    for (i, (src, _, data)) in on_two.iter().enumerate() {
        assert_eq!(*src, 0);
        assert_eq!(data, &pattern(0, i, sizes[i]));
    }
    let on_zero = drain(&mut b);
    assert_eq!(on_zero.len(), 1);
    assert_eq!(on_zero[0].1.tag, 77);
    // Replies go back on the lane they came from.
    assert!(b_lanes[1].try_send(0, &hdr(5, 1), &[9]).unwrap());
    assert!(drain(&mut a).is_empty());
    assert_eq!(drain(&mut a_lanes[1])[0].1.tag, 5);
    // Lanes may outlive lane 0's handle: the mapping is shared.
    drop(a);
    assert!(a_lanes[0].try_send(1, &hdr(6, 0), &[]).unwrap());
    assert_eq!(drain(&mut b_lanes[0])[0].1.tag, 6);
}

#[test]
fn a_bad_lane_count_is_refused() {
    let name = Name::new("badlanes");
    for lanes in [0, 33] {
        let e = ShmNode::create_lanes(&name.0, 2, 0, &small(), lanes).unwrap_err();
        assert!(e.to_string().contains("RIVET_WORKERS"), "{e}");
        assert!(!name.exists(), "nothing left behind");
    }
}

/// The inline idle answer (`ShmNode::idle`) never hides a message: a new
/// sender's first ring record (found through the generation word), a ring
/// record of a known sender, a cell, and a cell left pending for budget
/// are each delivered by the next poll; with nothing sent, polls find
/// nothing.
#[test]
fn an_idle_poll_never_hides_a_message() {
    let name = Name::new("idle");
    let mut v = nodes(&name, 3, &small());
    let got = |n: &mut ShmNode, budget: usize| {
        let mut out = Vec::new();
        n.poll(budget, |p, h, _| out.push((p, h.tag))).unwrap();
        out
    };
    assert!(got(&mut v[0], 8).is_empty(), "nothing sent yet");
    // A sender rank 0 has never heard from: its announcement bumps the
    // generation, which the idle check compares first.
    assert!(v[1].try_send(0, &hdr(1, 1), &[1; 8]).unwrap());
    assert_eq!(got(&mut v[0], 8), vec![(1, 1)]);
    assert!(got(&mut v[0], 8).is_empty());
    // A known sender's ring, then a second new sender, then cells (too big
    // for the ring) from both.
    assert!(v[1].try_send(0, &hdr(2, 1), &[2; 16]).unwrap());
    assert_eq!(got(&mut v[0], 8), vec![(1, 2)]);
    assert!(v[2].try_send(0, &hdr(3, 2), &[]).unwrap());
    assert_eq!(got(&mut v[0], 8), vec![(2, 3)]);
    let big = vec![9u8; v[1].fastbox_max() + 1];
    assert!(v[1].try_send(0, &hdr(4, 1), &big).unwrap());
    assert_eq!(got(&mut v[0], 8), vec![(1, 4)]);
    // A cell behind two ring records with a budget of one: the cell waits
    // in `pending`, which the idle check must see.
    assert!(v[2].try_send(0, &hdr(5, 2), &[5; 8]).unwrap());
    assert!(v[2].try_send(0, &hdr(6, 2), &[6; 8]).unwrap());
    assert!(v[2].try_send(0, &hdr(7, 2), &big).unwrap());
    let mut order = Vec::new();
    for _ in 0..6 {
        order.extend(got(&mut v[0], 1));
    }
    assert_eq!(order, vec![(2, 5), (2, 6), (2, 7)]);
    assert!(got(&mut v[0], 8).is_empty());
    assert!(got(&mut v[1], 8).is_empty() && got(&mut v[2], 8).is_empty());
}

/// A message of several cells is all or nothing: with too few free cells
/// `try_send` takes none (and says no room); once the receiver frees some
/// it goes, whole and in order with the ring messages around it, even when
/// the receiver polls one message at a time.
#[test]
fn message_of_several_cells_is_all_or_nothing() {
    let name = Name::new("multi");
    let mut v = nodes(&name, 2, &small());
    let (max, mm) = (v[0].max_payload(), v[0].max_message());
    // 8 cells: two messages of 3 cells leave 2, too few for a third.
    let big = |i: usize| pattern(0, i, 2 * max + 5);
    assert!(v[0].try_send(1, &hdr(0, 0), &big(0)).unwrap());
    assert!(v[0].try_send(1, &hdr(1, 0), b"ring").unwrap());
    assert!(v[0].try_send(1, &hdr(2, 0), &big(2)).unwrap());
    let before = v[0].stats();
    assert!(!v[0].try_send(1, &hdr(3, 0), &big(3)).unwrap());
    assert_eq!(v[0].stats().no_room, before.no_room + 1);
    // The two cells it took for a moment are back: two one-cell messages go.
    assert!(v[0].try_send(1, &hdr(3, 0), &pattern(0, 3, max)).unwrap());
    assert!(v[0].try_send(1, &hdr(4, 0), &pattern(0, 4, max)).unwrap());
    let mut got = Vec::new();
    loop {
        let k = v[1]
            .poll(1, |p, h, b| got.push((p, *h, b.to_vec())))
            .unwrap();
        if k == 0 {
            break;
        }
    }
    let tags: Vec<i32> = got.iter().map(|g| g.1.tag).collect();
    assert_eq!(&tags[..5], &[0, 1, 2, 3, 4]);
    assert_eq!(got[0].2, big(0));
    assert_eq!(got[1].2, b"ring");
    assert_eq!(got[2].2, big(2));
    assert_eq!(got[3].2, pattern(0, 3, max));
    // All cells are free again: the largest message fits twice.
    assert!(v[0].try_send(1, &hdr(6, 0), &pattern(0, 6, mm)).unwrap());
    assert!(v[0].try_send(1, &hdr(7, 0), &pattern(0, 7, mm)).unwrap());
    let got = drain(&mut v[1]);
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].1.tag, &got[0].2), (6, &pattern(0, 6, mm)));
    assert_eq!((got[1].1.tag, &got[1].2), (7, &pattern(0, 7, mm)));
}

/// A receiver that claims the longer messages with even tags at their
/// first cell and writes down everything it is handed.
#[derive(Default)]
struct Claims {
    /// Whole messages: (tag, payload).
    whole: Vec<(i32, Vec<u8>)>,
    /// Claimed messages: tag, bytes put together from the pieces, ended.
    claimed: Vec<(i32, Vec<u8>, bool)>,
}

impl Deliver for &mut Claims {
    fn message(&mut self, _: usize, h: &WireHeader, payload: &[u8]) {
        self.whole.push((h.tag, payload.to_vec()));
    }
    fn first_piece(&mut self, _: usize, h: &WireHeader, payload: &[u8]) -> Option<u64> {
        if h.tag % 2 != 0 {
            return None;
        }
        self.claimed.push((h.tag, payload.to_vec(), false));
        Some(1000 + self.claimed.len() as u64 - 1)
    }
    fn piece(&mut self, _: usize, token: u64, offset: usize, payload: &[u8], last: bool) {
        let (_, got, ended) = &mut self.claimed[(token - 1000) as usize];
        assert!(!*ended, "a piece after the last");
        assert_eq!(offset, got.len(), "pieces come in order, at their offsets");
        got.extend_from_slice(payload);
        *ended = last;
    }
}

/// A message longer than one cell that the receiver claims at its first
/// cell comes piece by piece, at the right offsets and ended once; one it
/// does not claim comes whole; both in order with the ring message
/// between them, also one message per poll.
#[test]
fn claimed_messages_come_piece_by_piece() {
    let name = Name::new("claims");
    let mut v = nodes(&name, 2, &small());
    let (max, mm) = (v[0].max_payload(), v[0].max_message());
    assert!(v[0].try_send(1, &hdr(0, 0), &pattern(0, 0, mm)).unwrap());
    assert!(v[0]
        .try_send(1, &hdr(1, 0), &pattern(0, 1, max + 1))
        .unwrap());
    let mut c = Claims::default();
    while v[1].poll_with(1, &mut c).unwrap() > 0 {}
    assert!(v[0].try_send(1, &hdr(3, 0), b"ring").unwrap());
    assert!(v[0]
        .try_send(1, &hdr(2, 0), &pattern(0, 2, 2 * max + 7))
        .unwrap());
    while v[1].poll_with(1, &mut c).unwrap() > 0 {}
    assert_eq!(
        c.claimed,
        [
            (0, pattern(0, 0, mm), true),
            (2, pattern(0, 2, 2 * max + 7), true)
        ]
    );
    assert_eq!(
        c.whole,
        [(1, pattern(0, 1, max + 1)), (3, b"ring".to_vec())]
    );
    assert_eq!(v[1].stats().direct, 2);
}
