//! Point-to-point modes: `pingpong`, `order` (non-overtaking under exact
//! and wildcard patterns), `mprobe` and `probe`.

use rivet::{Comm, Request, Status, Threading, ANY_SOURCE, ANY_TAG};
use rivet_tests::ensure;
use rivet_tests::rank_check::{die, OrDie};

use crate::check::{
    all_bytes, check_recv, message, ok_status, pat, same_bytes, sized_pattern, statuses,
    verify_full, wait_all_ok, Inbox, Rng, HDR,
};

pub(crate) fn pingpong<T: Threading>(world: &Comm<T>) {
    let me = world.rank();
    let peer = 1 - me;
    let sizes = [0usize, 1, 100, 4096, 65_536, 300_000, 4 << 20];
    for (i, &size) in sizes.iter().enumerate() {
        for rep in 0..4u64 {
            let index = (i as u64) * 100 + rep * 2;
            let ping = sized_pattern(size, index);
            let pong = sized_pattern(size, index + 1);
            let mut buf = vec![0u8; size];
            let tag = i as i32;
            let what = format!("{size} bytes, repetition {rep}");
            match (me, rep % 4) {
                // Blocking calls.
                (0, 0) => {
                    world.send(&ping, peer, tag).or_die("send");
                    let st = world.recv(&mut buf, peer as i32, tag).or_die("recv");
                    check_recv(&what, &st, peer, tag, &buf, &pong);
                }
                (1, 0) => {
                    let st = world.recv(&mut buf, peer as i32, tag).or_die("recv");
                    check_recv(&what, &st, peer, tag, &buf, &ping);
                    world.send(&pong, peer, tag).or_die("send");
                }
                // Scoped nonblocking calls, the receive posted first.
                (_, 1) => {
                    let (out, want) = if me == 0 {
                        (&ping, &pong)
                    } else {
                        (&pong, &ping)
                    };
                    let st = world.scope(|s| {
                        let r = s.irecv(&mut buf, ANY_SOURCE, tag).or_die("irecv");
                        let w = s.isend(out, peer, tag).or_die("isend");
                        let st = r.wait().or_die("wait irecv");
                        ok_status("isend", &w.wait().or_die("wait isend"));
                        st
                    });
                    check_recv(&what, &st, peer, tag, &buf, want);
                }
                // Raw calls.
                (_, 2) => {
                    let (out, want) = if me == 0 {
                        (&ping, &pong)
                    } else {
                        (&pong, &ping)
                    };
                    // SAFETY: both buffers outlive the requests, which are
                    // waited for before the buffers are touched again.
                    let st = unsafe {
                        let w = world
                            .isend_raw(out.as_ptr(), out.len(), peer, tag)
                            .or_die("isend_raw");
                        let r = world
                            .irecv_raw(buf.as_mut_ptr(), buf.len(), peer as i32, ANY_TAG)
                            .or_die("irecv_raw");
                        let mut reqs = [w, r];
                        let sts = wait_all_ok("raw wait_all", &mut reqs);
                        sts[1]
                    };
                    check_recv(&what, &st, peer, tag, &buf, want);
                }
                // Synchronous sends, receive polled with test().
                _ => {
                    let (out, want) = if me == 0 {
                        (&ping, &pong)
                    } else {
                        (&pong, &ping)
                    };
                    let st = world.scope(|s| {
                        let w = s.issend(out, peer, tag).or_die("issend");
                        let mut r = s.irecv(&mut buf, peer as i32, tag).or_die("irecv");
                        let st = loop {
                            if let Some(st) = r.test().or_die("test") {
                                break st;
                            }
                        };
                        ensure!(r.is_done(), "{what}: test() gave a status, is_done() false");
                        ok_status("issend", &w.wait().or_die("wait issend"));
                        st
                    });
                    check_recv(&what, &st, peer, tag, &buf, want);
                }
            }
        }
    }
    if me == 0 {
        println!("engine_check pingpong: sizes {sizes:?} both ways");
    }
}

const ORDER_K: u32 = 300;

const ORDER_BIG: usize = 300_000;

fn order_tag(s: u32, q: u32) -> i32 {
    ((q + s) % 5) as i32
}

fn order_size(q: u32) -> usize {
    match q {
        q if q % 10 == 9 => ORDER_BIG,
        q if q % 23 == 0 => (q % 16) as usize,
        q => HDR + (q as usize * 37) % 300,
    }
}

fn order_plan(s: u32) -> Vec<(i32, usize)> {
    (0..ORDER_K)
        .map(|q| (order_tag(s, q), order_size(q)))
        .collect()
}

pub(crate) fn order<T: Threading>(world: &Comm<T>) {
    let (me, n) = (world.rank(), world.size());
    if me != 0 {
        let msgs: Vec<Vec<u8>> = (0..ORDER_K)
            .map(|q| message(me, 0, q, order_tag(me, q), order_size(q)))
            .collect();
        // Everything at once: small messages queue behind the large ones.
        world.scope(|s| {
            let mut reqs: Vec<Request<'_, T>> = msgs
                .iter()
                .enumerate()
                .map(|(q, m)| s.isend(m, 0, order_tag(me, q as u32)).or_die("isend"))
                .collect();
            wait_all_ok("sends to rank 0", &mut reqs);
        });
        return;
    }

    let plan: Vec<Vec<(i32, usize)>> = (0..n)
        .map(|s| if s == 0 { Vec::new() } else { order_plan(s) })
        .collect();
    let mut inbox = Inbox::new(0, plan);
    let check = verify_full(0);

    // Phase A: exact receives posted before wildcard ones, all at once.
    let mut pats: Vec<(i32, i32)> = Vec::new();
    for s in 1..n {
        // Not the tag of the sender's first message.
        pats.push((s as i32, order_tag(s, 3)));
    }
    pats.push((ANY_SOURCE, 4));
    for j in 0..24u32 {
        pats.push(match j % 4 {
            3 => ((1 + j % (n - 1)) as i32, ANY_TAG),
            _ => (ANY_SOURCE, ANY_TAG),
        });
    }
    let mut bufs: Vec<Vec<u8>> = pats.iter().map(|_| vec![0u8; ORDER_BIG]).collect();
    let sts = recv_batch(world, &pats, &mut bufs);
    for ((p, st), b) in pats.iter().zip(&sts).zip(&bufs) {
        inbox.accept(*p, st, b, &check);
    }

    // Phase B: one receive at a time, patterns at random.
    let mut rng = Rng::new(7);
    let mut buf = vec![0u8; ORDER_BIG];
    let mut kinds = [0usize; 4];
    while inbox.remaining() > 0 {
        let p = inbox.pick(&mut rng);
        kinds[(p.0 != ANY_SOURCE) as usize * 2 + (p.1 != ANY_TAG) as usize] += 1;
        let st = world.recv(&mut buf, p.0, p.1).or_die("recv");
        inbox.accept(p, &st, &buf, &check);
    }
    println!(
        "engine_check order: rank 0 got all {} messages of {} senders in order \
         ({} posted together, then {} any/any, {} any/tag, {} src/any, {} src/tag)",
        inbox.received,
        n - 1,
        pats.len(),
        kinds[0],
        kinds[1],
        kinds[2],
        kinds[3]
    );
}

/// Post one receive per pattern, in order, then wait for all of them.
fn recv_batch<T: Threading>(
    world: &Comm<T>,
    pats: &[(i32, i32)],
    bufs: &mut [Vec<u8>],
) -> Vec<Status> {
    world.scope(|s| {
        let mut reqs: Vec<Request<'_, T>> = bufs
            .iter_mut()
            .zip(pats)
            .map(|(b, &(sp, tp))| s.irecv(b, sp, tp).or_die("irecv"))
            .collect();
        Request::wait_all(&mut reqs).or_die("wait_all receives");
        statuses("receives", &reqs)
    })
}

// ---------------------------------------------------------------------------
// probe

// ---------------------------------------------------------------------------
// mprobe

pub(crate) fn mprobe<T: Threading>(world: &Comm<T>) {
    let me = world.rank();
    // (tag, size): eager (ring, cell), rendezvous (single copy, shared
    // copy from 64 KiB), and one dropped unreceived (tag 66).
    let msgs: [(i32, usize); 7] = [
        (5, 0),
        (6, 8),
        (7, 3000),
        (8, 40_000),
        (9, 300_000),
        (66, 2 << 20),
        (10, 1 << 20),
    ];
    if me == 1 {
        let data: Vec<Vec<u8>> = msgs
            .iter()
            .enumerate()
            .map(|(q, &(tag, size))| message(1, 0, q as u32, tag, size))
            .collect();
        world.scope(|s| {
            let mut reqs: Vec<Request<'_, T>> = data
                .iter()
                .zip(&msgs)
                // Synchronous: each completes only once rank 0 took it,
                // the dropped one included.
                .map(|(m, &(tag, _))| s.issend(m, 0, tag).or_die("issend"))
                .collect();
            wait_all_ok("synchronous sends", &mut reqs);
        });
        world.send(&[], 0, 1).or_die("done");
        println!("engine_check mprobe: rank 1 sends all finished");
    } else {
        let mut got = 0;
        // Wildcards take the earliest; an exact probe its own message.
        let m = world.mprobe(ANY_SOURCE, ANY_TAG).or_die("mprobe(ANY, ANY)");
        ensure!(
            m.status().tag == 5 && m.status().count == 0 && m.status().source == 1,
            "mprobe(ANY, ANY): {:?}",
            m.status()
        );
        // Taken: another probe sees the next message, not this one.
        let next = world.probe(1, ANY_TAG).or_die("probe after mprobe");
        ensure!(
            next.tag == 6,
            "probe after mprobe saw tag {}, not 6",
            next.tag
        );
        let st = m.recv(&mut []).or_die("mrecv of 0 bytes");
        ensure!(st.count == 0 && st.tag == 5, "mrecv of 0 bytes: {st:?}");
        got += 1;
        for (q, &(tag, size)) in msgs.iter().enumerate().skip(1) {
            let m = loop {
                match world.improbe(1, tag).or_die("improbe") {
                    Some(m) => break m,
                    None => std::hint::spin_loop(),
                }
            };
            ensure!(
                m.status().count == size && m.status().tag == tag,
                "improbe(1, {tag}): {:?}, expected {size} bytes",
                m.status()
            );
            ensure!(
                world.iprobe(1, tag).or_die("iprobe").is_none(),
                "tag {tag}: iprobe still sees a message a matched probe took"
            );
            if tag == 66 {
                drop(m);
                continue;
            }
            let mut b = vec![0u8; size];
            let st = m.recv(&mut b).or_die("mrecv");
            ok_status("mrecv", &st);
            same_bytes(
                &format!("matched message tag {tag}"),
                &b,
                &message(1, 0, q as u32, tag, size),
            );
            got += 1;
        }
        world.recv(&mut [], 1, 1).or_die("done");
        println!("engine_check mprobe: rank 0 took and received {got} messages, dropped 1");
    }
}

pub(crate) fn probe<T: Threading>(world: &Comm<T>) {
    let (me, n) = (world.rank(), world.size());
    let fixed: [(i32, usize); 4] = [(7, 100), (9, 0), (11, 200_000), (13, 5000)];
    // Phase 1: rank 1 sends four messages; rank 0 probes each before
    // receiving it.
    if me == 1 {
        for (q, &(tag, size)) in fixed.iter().enumerate() {
            let m = message(1, 0, q as u32, tag, size);
            world.send(&m, 0, tag).or_die("send");
        }
    } else if me == 0 {
        let want = |q: usize| message(1, 0, q as u32, fixed[q].0, fixed[q].1);
        let same = |what: &str, st: &Status, source: i32, (tag, count): (i32, usize)| {
            ok_status(what, st);
            ensure!(
                st.source == source && st.tag == tag && st.count == count,
                "{what}: {st:?}, expected source {source} tag {tag} count {count}"
            );
        };
        let st = world.probe(1, 7).or_die("probe(1, 7)");
        same("probe(1, 7)", &st, 1, fixed[0]);
        let again = world.probe(1, 7).or_die("probe(1, 7) again");
        same("a second probe(1, 7)", &again, 1, fixed[0]);
        let st = world
            .iprobe(1, 7)
            .or_die("iprobe(1, 7)")
            .unwrap_or_else(|| die("iprobe(1, 7) after probe(1, 7) found nothing"));
        same("iprobe(1, 7) after probe", &st, 1, fixed[0]);
        let mut b = vec![0u8; 100];
        let st = world.recv(&mut b, 1, 7).or_die("recv(1, 7)");
        same("recv after probe(1, 7)", &st, 1, fixed[0]);
        same_bytes("message tag 7", &b, &want(0));

        let st = loop {
            if let Some(st) = world.iprobe(ANY_SOURCE, ANY_TAG).or_die("iprobe") {
                break st;
            }
        };
        same("iprobe(ANY, ANY)", &st, 1, fixed[1]);
        let mut b = vec![0xEEu8; 16];
        let st = world.recv(&mut b, ANY_SOURCE, ANY_TAG).or_die("recv");
        same("recv(ANY, ANY) after iprobe", &st, 1, fixed[1]);
        all_bytes("buffer of the 0-byte receive", &b, 0xEE);

        ensure!(
            world.iprobe(1, 99).or_die("iprobe(1, 99)").is_none(),
            "iprobe(1, 99) found a message no one sent"
        );
        let st = world.probe(ANY_SOURCE, 11).or_die("probe(ANY, 11)");
        same("probe(ANY, 11) of a large message", &st, 1, fixed[2]);
        let mut b = vec![0u8; st.count];
        let st = world.recv(&mut b, st.source, st.tag).or_die("recv(1, 11)");
        same("recv after probe(ANY, 11)", &st, 1, fixed[2]);
        same_bytes("message tag 11", &b, &want(2));

        let st = world.probe(1, ANY_TAG).or_die("probe(1, ANY)");
        same("probe(1, ANY)", &st, 1, fixed[3]);
        let mut b = vec![0u8; st.count];
        let st = world.recv(&mut b, ANY_SOURCE, 13).or_die("recv(ANY, 13)");
        same("recv after probe(1, ANY)", &st, 1, fixed[3]);
        same_bytes("message tag 13", &b, &want(3));
    }
    world.barrier().or_die("barrier");

    // Phase 2: every other rank sends K messages; rank 0 probes (blocking or
    // polling, wildcard or not) and the next receive must get that message.
    const K: u32 = 40;
    let tag_of = |s: u32, q: u32| (100 + (q + s) % 3) as i32;
    let size_of = |q: u32| match q % 8 {
        7 => 150_000,
        3 => 0,
        _ => HDR + (q as usize * 101) % 3000,
    };
    if me != 0 {
        let msgs: Vec<Vec<u8>> = (0..K)
            .map(|q| message(me, 0, 4 + q, tag_of(me, q), size_of(q)))
            .collect();
        world.scope(|s| {
            let mut reqs: Vec<Request<'_, T>> = msgs
                .iter()
                .enumerate()
                .map(|(q, m)| s.isend(m, 0, tag_of(me, q as u32)).or_die("isend"))
                .collect();
            wait_all_ok("sends", &mut reqs);
        });
    } else {
        // Sequence numbers 0..4 were phase 1's; mark them received.
        let plan: Vec<Vec<(i32, usize)>> = (0..n)
            .map(|s| {
                let mut p: Vec<(i32, usize)> = Vec::new();
                if s != 0 {
                    p.extend(fixed.iter().copied().filter(|_| s == 1));
                    while p.len() < 4 {
                        p.push((-2, 0));
                    }
                    p.extend((0..K).map(|q| (tag_of(s, q), size_of(q))));
                }
                p
            })
            .collect();
        let mut inbox = Inbox::new(0, plan);
        for s in 1..n as usize {
            for q in 0..4 {
                inbox.got[s][q] = true;
            }
            inbox.low[s] = 4;
        }
        inbox.received = 4 * (n as usize - 1);
        let check = verify_full(0);
        let mut rng = Rng::new(11);
        let mut i = 0u32;
        while inbox.remaining() > 0 {
            let (ps, pt) = inbox.pick_message(&mut rng);
            let probe_pat = match i % 3 {
                0 => (ANY_SOURCE, ANY_TAG),
                1 => (ps, ANY_TAG),
                _ => (ANY_SOURCE, pt),
            };
            let st = if i % 2 == 0 {
                world.probe(probe_pat.0, probe_pat.1).or_die("probe")
            } else {
                loop {
                    if let Some(st) = world.iprobe(probe_pat.0, probe_pat.1).or_die("iprobe") {
                        break st;
                    }
                }
            };
            let what = format!("probe #{i} ({}, {})", pat(probe_pat.0), pat(probe_pat.1));
            ok_status(&what, &st);
            if let Some(again) = world.iprobe(probe_pat.0, probe_pat.1).or_die("iprobe") {
                ensure!(
                    again == st,
                    "{what}: gave {st:?}, an iprobe right after gave {again:?}"
                );
            } else {
                die(format!(
                    "{what}: found {st:?}, an iprobe right after found nothing"
                ));
            }
            // Receive with the same pattern, or exactly what was probed,
            // into a buffer of exactly the probed size.
            let recv_pat = if i % 4 < 2 {
                probe_pat
            } else {
                (st.source, st.tag)
            };
            let mut b = vec![0u8; st.count];
            let got = world.recv(&mut b, recv_pat.0, recv_pat.1).or_die("recv");
            ensure!(
                got.source == st.source && got.tag == st.tag && got.count == st.count,
                "{what}: probed {st:?}, the receive ({}, {}) after it got {got:?}",
                pat(recv_pat.0),
                pat(recv_pat.1)
            );
            inbox.accept(probe_pat, &got, &b, &check);
            i += 1;
        }
        ensure!(
            world.iprobe(ANY_SOURCE, ANY_TAG).or_die("iprobe").is_none(),
            "a message is waiting after all were received"
        );
        println!(
            "engine_check probe: rank 0 probed and received {} messages",
            inbox.received
        );
    }
}

// ---------------------------------------------------------------------------
// cancel

/// `park` (>= 2): for each rank k > 0 in turn, rank k pauses, then
/// sends 8 B, 64 KiB and 1 MiB to rank 0, which waits in blocking
/// receives; then the same from rank 0 to rank k. Run with
/// `RIVET_YIELD=always`: a waiting rank on tcp alone blocks in its netmod
/// (parks) and must be woken by what arrives; one with a shared-memory
/// lane must not park (nothing would wake it there) and gets it all the
/// same. Each rank prints its parks.
pub(crate) fn park<T: Threading>(engine: &rivet::Engine<T>, world: &Comm<T>) {
    let me = world.rank();
    let sizes = [8usize, 65_536, 1 << 20];
    for k in 1..world.size() {
        for (from, to) in [(k, 0), (0, k)] {
            if me != from && me != to {
                continue;
            }
            for (i, &size) in sizes.iter().enumerate() {
                let tag = (from * 10 + i as u32) as i32;
                let data = sized_pattern(size, (k * 100) as u64 + tag as u64);
                if me == from {
                    // Long enough for the receiver's yields to run out
                    // (not needed for correctness: a message there before
                    // the wait is found all the same).
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    world.send(&data, to, tag).or_die("send");
                } else {
                    let mut buf = vec![0u8; size];
                    let st = world.recv(&mut buf, from as i32, tag).or_die("recv");
                    let what = format!("{size} bytes from {from}");
                    check_recv(&what, &st, from, tag, &buf, &data);
                }
            }
        }
    }
    let parks = engine
        .info()
        .items
        .into_iter()
        .find(|(k, _)| k == "netmod.parks")
        .map_or("none (no netmod)".to_string(), |(_, v)| v);
    println!("engine_check park: rank {me} parks {parks}");
}
