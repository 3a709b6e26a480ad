//! The TCP netmod moving data: message sizes, placement, three peers, flow
//! control, small messages coalesced among large ones, a second address and
//! many peers, between instances in this process, over loopback, for both
//! backends (io_uring skipped with a note where no ring can be made). Every
//! wait is bounded: a stuck test fails after its deadline.

mod common;

use common::tcp::*;
use common::*;
use rivet_netmods::tcp::Backend;
use rivet_netmods::Netmod;

fn lazy_connect_and_sizes(b: Backend) {
    let Some(mut nets) = open_n(b, "lazy", 2) else {
        return;
    };
    let mut sinks = vec![Rec::default(), Rec::default()];
    connect_all(&mut nets);
    assert!(nets[0].knows(1) && nets[1].knows(0));
    spin(&mut nets, &mut sinks, 50);
    for n in &nets {
        assert_eq!(
            n.connections_made(),
            0,
            "no connection before the first message"
        );
        assert!(n.idle());
    }
    let sizes = [0, 1, 64 << 10, (4 << 20) + 1, 5];
    for (i, &len) in sizes.iter().enumerate() {
        send(&mut nets, &mut sinks, 0, 1, i as u32, len);
        send(&mut nets, &mut sinks, 1, 0, i as u32, len);
    }
    pump(&mut nets, &mut sinks, |_, s| {
        s[0].msgs.len() == sizes.len() && s[1].msgs.len() == sizes.len()
    });
    assert_eq!(sinks[1].from(0), expect(0, &sizes));
    assert_eq!(sinks[0].from(1), expect(1, &sizes));
    pump(&mut nets, &mut sinks, |n, _| n.iter().all(|n| n.idle()));
    for n in &nets {
        assert_eq!(n.connections_made(), 1);
        assert_eq!(n.connected_peers(), 1);
        let d = n.describe();
        assert!(
            d.iter()
                .any(|(k, v)| k == "tcp.peers" && v == "1 connected"),
            "{d:?}"
        );
    }
    assert!(sinks.iter().all(|s| s.failed.is_empty()));
}

fn placement(b: Backend) {
    let Some(mut nets) = open_n(b, "place", 2) else {
        return;
    };
    let mut sinks = vec![
        Rec::default(),
        Rec {
            place: true,
            ..Rec::default()
        },
    ];
    connect_all(&mut nets);
    let sizes = [1 << 20, 100 << 10, 3 << 20, 17 << 10, 10];
    for (i, &len) in sizes.iter().enumerate() {
        send(&mut nets, &mut sinks, 0, 1, i as u32, len);
    }
    pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == sizes.len());
    assert_eq!(sinks[1].from(0), expect(0, &sizes));
    // The 1 MiB and 3 MiB payloads cannot be whole in the input buffer when
    // their header arrives: they must have gone straight to `place` memory.
    assert!(
        sinks[1].delivered_placed >= 2,
        "placed {}",
        sinks[1].delivered_placed
    );
    assert!(
        sinks[1].outstanding.is_empty(),
        "every placement was delivered"
    );
}

/// Sizes below 3000 bytes.
fn three_way(b: Backend) {
    common::connections::three_way(b, 50, |seq| (seq as usize * 37) % 3000)
}

fn flow_control(b: Backend) {
    const LEN: usize = 256 << 10;
    let Some(mut nets) = open_n(b, "flow", 2) else {
        return;
    };
    let mut sinks = vec![Rec::default(), Rec::default()];
    connect_all(&mut nets);
    send(&mut nets, &mut sinks, 0, 1, 0, 1);
    pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == 1);
    // Only the sender polls: the receiver's socket fills, then the queue.
    let mut taken = 1u32;
    let mut full = false;
    let p = payload(0, 0, LEN);
    for _ in 0..400 {
        if nets[0].try_send(1, &header(taken, LEN), &p).unwrap() {
            taken += 1;
        } else {
            full = true;
            break;
        }
        nets[0].poll(&mut sinks[0]).unwrap();
    }
    assert!(full, "never Ok(false) after {taken} messages");
    assert!(!nets[0].idle());
    pump(&mut nets, &mut sinks, |n, s| {
        s[1].msgs.len() == taken as usize && n[0].idle()
    });
    let got = sinks[1].from(0);
    for (i, m) in got.iter().enumerate().skip(1) {
        assert_eq!(*m, (i as u32, LEN, fnv(&p)));
    }
}

/// Windows of small messages, which `try_send` queues between polls and
/// writes together (one send per window), interleaved with large ones
/// (written directly, placed or through the overflow buffer), both ways at
/// once: every message arrives whole and in order on both sides.
fn coalesced_small_among_large(b: Backend) {
    let Some(mut nets) = open_n(b, "coalesce", 2) else {
        return;
    };
    let mut sinks = vec![Rec::default(), Rec::placing()];
    connect_all(&mut nets);
    let pattern = [
        8,
        0,
        1,
        8,
        33,
        8,
        20_000,
        8,
        8,
        255,
        70_000,
        8,
        16 * 1024 - 30,
        16 * 1024,
        8,
        (256 << 10) + 3,
        8,
        8,
    ];
    let sizes: Vec<usize> = (0..700).map(|i| pattern[i % pattern.len()]).collect();
    for (w, window) in sizes.chunks(64).enumerate() {
        // No poll within a window unless a queue is full.
        for (k, &len) in window.iter().enumerate() {
            let seq = (w * 64 + k) as u32;
            send(&mut nets, &mut sinks, 0, 1, seq, len);
            send(&mut nets, &mut sinks, 1, 0, seq, len);
        }
        spin(&mut nets, &mut sinks, 1);
    }
    pump(&mut nets, &mut sinks, |_, s| {
        s[0].msgs.len() == sizes.len() && s[1].msgs.len() == sizes.len()
    });
    assert_eq!(sinks[1].from(0), expect(0, &sizes));
    assert_eq!(sinks[0].from(1), expect(1, &sizes));
    assert!(sinks[1].delivered_placed > 0, "the large ones were placed");
    assert!(sinks.iter().all(|s| s.failed.is_empty()));
    pump(&mut nets, &mut sinks, |n, _| n.iter().all(|n| n.idle()));
}

fn second_address(b: Backend) {
    let Some(mut nets) = open_n(b, "second", 2) else {
        return;
    };
    let mut sinks = vec![Rec::default(), Rec::default()];
    // Nobody listens on the first address of the card: connect moves on.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = l.local_addr().unwrap();
    drop(l);
    let live = nets[1]
        .business_card()
        .strip_prefix("tcp:")
        .unwrap()
        .to_string();
    nets[0].connect(1, &format!("tcp:{dead},{live}")).unwrap();
    send(&mut nets, &mut sinks, 0, 1, 0, 100);
    pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == 1);
    assert!(sinks.iter().all(|s| s.failed.is_empty()));
    assert_eq!(nets[0].connections_made(), 1);
}

/// Many connections: everything arrives, and an idle poll costs at most
/// one system call whatever their number (the poll backend's one
/// `epoll_wait`; io_uring enters the kernel only with work), plus the
/// slow tick's accept and connect checks every 64th poll.
fn many_peers(b: Backend) {
    const PEERS: u64 = 10;
    let Some(mut nets) = open_n(b, "many", PEERS) else {
        return;
    };
    let mut sinks: Vec<Rec> = (0..PEERS).map(|_| Rec::default()).collect();
    connect_all(&mut nets);
    for seq in 0..10 {
        for r in 1..PEERS {
            send(&mut nets, &mut sinks, r as usize, 0, seq, 100);
            send(&mut nets, &mut sinks, 0, r, seq, 100);
        }
    }
    let want = 10 * (PEERS as usize - 1);
    pump(&mut nets, &mut sinks, |_, s| {
        s[0].msgs.len() == want && s[1..].iter().all(|s| s.msgs.len() == 10)
    });
    for r in 1..PEERS {
        assert_eq!(sinks[0].from(r), expect(r, &[100; 10]));
        assert_eq!(sinks[r as usize].from(0), expect(0, &[100; 10]));
    }
    assert_eq!(nets[0].connected_peers(), PEERS as usize - 1);
    assert!(sinks.iter().all(|s| s.failed.is_empty()));
    pump(&mut nets, &mut sinks, |n, _| n.iter().all(|n| n.idle()));
    const POLLS: u64 = 640;
    let before = nets[0].syscalls();
    for _ in 0..POLLS {
        nets[0].poll(&mut sinks[0]).unwrap();
    }
    let idle_calls = nets[0].syscalls() - before;
    assert!(
        idle_calls <= POLLS + 2 * POLLS / 64,
        "{idle_calls} system calls in {POLLS} idle polls with {} connections",
        PEERS - 1
    );
    // One message still arrives at once through that single call.
    send(&mut nets, &mut sinks, 3, 0, 10, 8);
    pump(&mut nets, &mut sinks, |_, s| s[0].msgs.len() == want + 1);
}

both_backends!(
    lazy_connect_and_sizes,
    placement,
    three_way,
    flow_control,
    coalesced_small_among_large,
    second_address,
    many_peers
);
