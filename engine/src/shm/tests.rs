//! ShmNode tests: several handles on one segment in one process, threads as
//! ranks.

use super::*;
use crate::wire::WireHeader;
use std::path::Path;
use std::sync::atomic::AtomicUsize;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A unique segment name that is unlinked when the guard drops (even when
/// the test fails).
struct Name(String);

impl Name {
    fn new(tag: &str) -> Name {
        Name(format!(
            "rivet-test-{}-{tag}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ))
    }
    fn exists(&self) -> bool {
        Path::new("/dev/shm").join(&self.0).exists()
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        let _ = segment::unlink(&self.0);
    }
}

fn small() -> ShmConfig {
    ShmConfig {
        fastbox_bytes: 2048,
        fastbox_max: 128,
        cells_per_rank: 8,
        cell_bytes: 1024,
    }
}

fn nodes(name: &Name, n: usize, cfg: &ShmConfig) -> Vec<ShmNode> {
    let mut v = vec![ShmNode::create(&name.0, n, 0, cfg).unwrap()];
    for r in 1..n {
        v.push(ShmNode::attach(&name.0, n, r).unwrap());
    }
    v
}

fn hdr(tag: i32, src: u32) -> WireHeader {
    WireHeader {
        kind: 1,
        tag,
        src,
        len: (tag as u64).wrapping_mul(3),
        sreq: 0xdead_beef,
        ..Default::default()
    }
}

fn pattern(src: usize, i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (k * 7 + i * 13 + src * 101) as u8)
        .collect()
}

/// xorshift64*.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn drain(n: &mut ShmNode) -> Vec<(usize, WireHeader, Vec<u8>)> {
    let mut out = Vec::new();
    loop {
        let k = n
            .poll(1000, |p, h, b| out.push((p, *h, b.to_vec())))
            .unwrap();
        if k == 0 {
            return out;
        }
    }
}

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

#[test]
fn a_rank_leaving_before_all_attached_takes_the_name_away() {
    let name = Name::new("leave");
    let a = ShmNode::create(&name.0, 3, 0, &small()).unwrap();
    let b = ShmNode::attach(&name.0, 3, 1).unwrap();
    assert!(name.exists());
    drop(b);
    assert!(
        !name.exists(),
        "rank 2 never came: the name must not outlive the job"
    );
    drop(a);
}

#[test]
fn a_rank_leaving_early_waits_for_a_slow_peer_to_attach() {
    let name = Name::new("slow");
    let a = ShmNode::create(&name.0, 2, 0, &small()).unwrap();
    let late = {
        let n = name.0.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            ShmNode::attach(&n, 2, 1)
        })
    };
    // Rank 0 is done before rank 1 started: its leaving must not take the
    // segment away from rank 1.
    drop(a);
    let b = late.join().unwrap();
    assert!(b.is_ok(), "the slow rank could not attach: {:?}", b.err());
    assert!(!name.exists(), "the last to attach unlinks the name");
}

#[test]
fn name_is_unlinked_once_all_attached() {
    let name = Name::new("unlink");
    let a = ShmNode::create(&name.0, 3, 0, &small()).unwrap();
    assert!(name.exists());
    let b = ShmNode::attach(&name.0, 3, 2).unwrap();
    assert!(name.exists());
    // The same local rank twice is refused.
    let e = ShmNode::attach(&name.0, 3, 2).unwrap_err();
    assert!(matches!(e, ShmError::AlreadyAttached { .. }), "{e}");
    let c = ShmNode::attach(&name.0, 3, 1).unwrap();
    assert!(!name.exists());
    assert_eq!(a.peer_pid(1), std::process::id());
    assert_eq!(c.peer_pid(2), std::process::id());
    assert_eq!(b.peer_pid(7), 0);
    assert_eq!(b.config(), &small());
    // A node of one unlinks at once.
    let one = Name::new("one");
    let _n = ShmNode::create(&one.0, 1, 0, &small()).unwrap();
    assert!(!one.exists());
}

#[test]
fn create_on_existing_name_fails_clearly() {
    let name = Name::new("exists");
    let _a = ShmNode::create(&name.0, 2, 0, &small()).unwrap();
    let e = ShmNode::create(&name.0, 2, 0, &small()).unwrap_err();
    assert!(matches!(e, ShmError::Exists { .. }), "{e}");
    assert!(e.to_string().contains(&name.0), "{e}");
    // The failed create must not remove the first one's file.
    assert!(name.exists());
}

#[test]
fn bad_arguments() {
    let name = Name::new("args");
    let e = ShmNode::create(&name.0, 2, 2, &small()).unwrap_err();
    assert!(matches!(e, ShmError::BadRank { .. }), "{e}");
    let e = ShmNode::create(&name.0, 0, 0, &small()).unwrap_err();
    assert!(matches!(e, ShmError::BadLocalSize(0)), "{e}");
    let e = ShmNode::create("a/b", 2, 0, &small()).unwrap_err();
    assert!(matches!(e, ShmError::Name { .. }), "{e}");
    let bad = ShmConfig {
        cell_bytes: 1000,
        ..small()
    };
    let e = ShmNode::create(&name.0, 2, 0, &bad).unwrap_err();
    assert!(e.to_string().contains("RIVET_SHM_CELL_SIZE"), "{e}");
    assert!(!name.exists());
    let e = ShmNode::attach(&name.0, 2, 1).unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
}

fn write_file(name: &Name, bytes: &[u8]) {
    use std::os::unix::fs::PermissionsExt;
    let path = Path::new("/dev/shm").join(&name.0);
    std::fs::write(&path, bytes).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Attach checks the segment before mapping it: a segment others may
/// read or write, or one another user owns, is refused (someone could
/// have planted it under our name, or write into our queues); once it is
/// ours and 0600 again it attaches.
#[test]
fn attach_checks_the_segments_owner_and_mode() {
    use std::os::unix::fs::PermissionsExt;
    let name = Name::new("owner");
    let _a = ShmNode::create(&name.0, 2, 0, &small()).unwrap();
    let path = Path::new("/dev/shm").join(&name.0);
    let mode = |m: u32| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m));
    for m in [0o644, 0o606, 0o660, 0o666] {
        mode(m).unwrap();
        let e = ShmNode::attach(&name.0, 2, 1).unwrap_err();
        assert!(matches!(e, ShmError::Untrusted { .. }), "mode {m:o}: {e}");
        assert!(e.to_string().contains("mode"), "{e}");
    }
    mode(0o600).unwrap();
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    // Only root can give a file away; as another user the open itself is
    // refused by the kernel already for 0600 segments.
    if me == 0 {
        std::os::unix::fs::chown(&path, Some(12345), None).unwrap();
        let e = ShmNode::attach(&name.0, 2, 1).unwrap_err();
        assert!(matches!(e, ShmError::Untrusted { .. }), "{e}");
        assert!(e.to_string().contains("uid 12345"), "{e}");
        std::os::unix::fs::chown(&path, Some(me), None).unwrap();
    }
    let _b = ShmNode::attach(&name.0, 2, 1).unwrap();
}

#[test]
fn attach_to_garbage_fails_clearly() {
    let name = Name::new("garbage");
    write_file(&name, b"hello");
    let e = ShmNode::attach(&name.0, 2, 1).unwrap_err();
    assert!(matches!(e, ShmError::TooSmall { .. }), "{e}");
    write_file(&name, &[0x5a; 8192]);
    let e = ShmNode::attach(&name.0, 2, 1).unwrap_err();
    assert!(matches!(e, ShmError::NotASegment { .. }), "{e}");
    write_file(&name, &[]);
    let e = ShmNode::attach(&name.0, 2, 1).unwrap_err();
    assert!(matches!(e, ShmError::TooSmall { .. }), "{e}");

    // A real header, then tampered with.
    let good = Name::new("good");
    let a = ShmNode::create(&good.0, 2, 0, &small()).unwrap();
    let header = |off: usize| a.seg.word(off);
    let e = ShmNode::attach(&good.0, 3, 1).unwrap_err();
    assert!(matches!(e, ShmError::LocalSizeMismatch { .. }), "{e}");
    header(H_VERSION).store(99, Ordering::Relaxed);
    let e = ShmNode::attach(&good.0, 2, 1).unwrap_err();
    assert!(matches!(e, ShmError::Version { found: 99, .. }), "{e}");
    header(H_VERSION).store(VERSION, Ordering::Relaxed);
    header(H_CELL_BYTES).store(1 << 40, Ordering::Relaxed);
    let e = ShmNode::attach(&good.0, 2, 1).unwrap_err();
    assert!(matches!(e, ShmError::BadHeader { .. }), "{e}");
    header(H_CELL_BYTES).store(1 << 20, Ordering::Relaxed);
    let e = ShmNode::attach(&good.0, 2, 1).unwrap_err();
    assert!(matches!(e, ShmError::BadHeader { .. }), "{e}");
    header(H_CELL_BYTES).store(small().cell_bytes as u64, Ordering::Relaxed);
    // Truncated copy of a good segment.
    let bytes = std::fs::read(Path::new("/dev/shm").join(&good.0)).unwrap();
    write_file(&name, &bytes[..bytes.len() / 2]);
    let e = ShmNode::attach(&name.0, 2, 1).unwrap_err();
    assert!(matches!(e, ShmError::TooSmall { .. }), "{e}");
    // And the untouched one still works.
    let _b = ShmNode::attach(&good.0, 2, 1).unwrap();
}

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

#[test]
fn config_from_lookup() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    assert_eq!(
        ShmConfig::from_lookup(env(&[])).unwrap(),
        ShmConfig::default()
    );
    let c = ShmConfig::from_lookup(env(&[
        ("RIVET_SHM_FASTBOX_SIZE", "64k"),
        ("RIVET_SHM_FASTBOX_MAX", "2048"),
        ("RIVET_SHM_CELLS", "128"),
        ("RIVET_SHM_CELL_SIZE", "64KiB"),
    ]))
    .unwrap();
    assert_eq!(
        c,
        ShmConfig {
            fastbox_bytes: 65536,
            fastbox_max: 2048,
            cells_per_rank: 128,
            cell_bytes: 65536
        }
    );
    assert_eq!(
        ShmConfig::from_lookup(env(&[("RIVET_SHM_FASTBOX_SIZE", "0")]))
            .unwrap()
            .fastbox_bytes,
        0
    );
    for bad in [
        &[("RIVET_SHM_CELLS", "lots")][..],
        &[("RIVET_SHM_CELLS", "0")],
        &[("RIVET_SHM_CELL_SIZE", "1000")],
        &[("RIVET_SHM_FASTBOX_SIZE", "3000")],
        &[("RIVET_SHM_FASTBOX_SIZE", "512")],
        &[("RIVET_SHM_FASTBOX_MAX", "40000")],
    ] {
        let e = ShmConfig::from_lookup(env(bad)).unwrap_err();
        assert!(e.to_string().contains(bad[0].0), "{e}");
    }
}

#[test]
fn cma_probe_between_handles() {
    let name = Name::new("cma");
    let v = nodes(&name, 2, &small());
    // Same process: works wherever process_vm_readv works at all.
    assert_eq!(v[0].cma_probe(1), cma::probe().is_ok());
    assert!(!v[0].cma_probe(5));
}

const CHILD_ENV: &str = "RIVET_SHM_TEST_CHILD";

/// Child half of `two_processes_echo` (does nothing when run normally):
/// attaches as local rank 1, echoes every message back to rank 0 until tag
/// -1, then reports whether it can read rank 0's memory with CMA.
#[test]
fn cross_process_child() {
    let Ok(name) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut node = ShmNode::attach(&name, 2, 1).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut inbox: std::collections::VecDeque<(WireHeader, Vec<u8>)> = Default::default();
    let mut done = false;
    while !(done && inbox.is_empty()) {
        assert!(std::time::Instant::now() < deadline, "child timed out");
        node.poll(64, |p, h, b| {
            assert_eq!(p, 0);
            inbox.push_back((*h, b.to_vec()));
        })
        .unwrap();
        while let Some((h, b)) = inbox.front() {
            if h.tag == -1 {
                done = true;
                inbox.pop_front();
                continue;
            }
            if !node.try_send(0, h, b).unwrap() {
                break;
            }
            inbox.pop_front();
        }
        std::thread::yield_now();
    }
    let cma = node.cma_probe(0) as u8;
    while !node.try_send(0, &hdr(-2, 1), &[cma]).unwrap() {
        node.poll(64, |_, _, _| {}).unwrap();
        std::thread::yield_now();
    }
}

/// Two real processes on one segment: the child echoes random-sized
/// messages (both paths), the parent checks order and bytes.
#[test]
fn two_processes_echo() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let name = Name::new("proc");
    let mut node = ShmNode::create(&name.0, 2, 0, &small()).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "shm::tests::cross_process_child",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &name.0)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    const N: usize = 5_000;
    let max = node.max_payload();
    let mut rng = Rng(42);
    let (mut sent, mut got) = (0, 0);
    let mut cma = None;
    let mut parent_cma = None;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while cma.is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("parent timed out: sent {sent}, got {got}");
        }
        let exited = child.try_wait().unwrap();
        if sent < N {
            let len = (rng.next() % (max as u64 + 1)) as usize;
            let len = if sent % 3 == 0 { len } else { len % 40 };
            if node
                .try_send(1, &hdr(sent as i32, 0), &pattern(0, sent, len))
                .unwrap()
            {
                sent += 1;
            }
        } else if sent == N && node.try_send(1, &hdr(-1, 0), &[]).unwrap() {
            sent += 1;
        }
        let delivered = node
            .poll(32, |p, h, b| {
                assert_eq!(p, 1);
                if h.tag == -2 {
                    cma = Some(b[0] == 1);
                    return;
                }
                assert_eq!(h.tag as usize, got, "echo out of order");
                assert_eq!(b, &pattern(0, got, b.len())[..]);
                got += 1;
            })
            .unwrap();
        // A child that has exited may still have echoes (and its last
        // message) queued: it is early only once they are all drained.
        if let (Some(status), None, 0) = (exited, cma, delivered) {
            panic!("child exited early ({status}): sent {sent}, got {got}");
        }
        if got > 0 && parent_cma.is_none() {
            // The child is attached and alive (it has not seen tag -1 yet).
            parent_cma = Some(node.cma_probe(1));
        }
        std::thread::yield_now();
    }
    assert!(child.wait().unwrap().success());
    assert_eq!(got, N);
    assert!(!name.exists(), "the child's attach must unlink the name");
    assert!(node.stats().cell_sends > 0);
    // The parent may read its child wherever CMA works at all (even with
    // ptrace_scope=1); the child reading its parent may be refused.
    assert_eq!(parent_cma, Some(cma::probe().is_ok()));
    eprintln!("CMA parent->child {parent_cma:?}, child->parent {cma:?}");
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
