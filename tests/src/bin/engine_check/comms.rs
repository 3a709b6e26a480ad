//! Connections and communicators: `connect_all` (every pair connecting from
//! both sides at once), `dup` (context ids, isolation, barriers), `singleton`.

use rivet::{Comm, Request, Threading, ANY_SOURCE, ANY_TAG};
use rivet_tests::ensure;
use rivet_tests::rank_check::OrDie;

use crate::check::{
    check_by_checksum, check_recv, message, ok_status, same_bytes, sized_pattern, wait_all_ok,
};

const CONNECT_ALL_ROUNDS: u32 = 5;

const CONNECT_ALL_BURST: u32 = 20;

pub(crate) fn connect_all<T: Threading>(world: &Comm<T>) {
    let (me, n) = (world.rank(), world.size());
    let peers: Vec<u32> = (0..n).filter(|&p| p != me).collect();
    for round in 0..CONNECT_ALL_ROUNDS {
        // Sizes on both sides of every eager limit: 1 B to 300 kB.
        let size = |q: u32| [1usize, 100, 5000, 70_000, 300_000][(q % 5) as usize];
        let out: Vec<(u32, Vec<u8>)> = peers
            .iter()
            .flat_map(|&p| {
                (0..CONNECT_ALL_BURST)
                    .map(move |q| (p, message(me, p, round * 1000 + q, 7, size(q))))
            })
            .collect();
        let mut bufs: Vec<Vec<u8>> = peers
            .iter()
            .flat_map(|_| (0..CONNECT_ALL_BURST).map(|_| vec![0u8; 300_000]))
            .collect();
        let sts = world.scope(|s| {
            // Receives first, then every send at once: no rank waits for
            // another before its first message leaves.
            let mut recvs: Vec<Request<'_, T>> = bufs
                .iter_mut()
                .enumerate()
                .map(|(i, b)| {
                    let p = peers[i / CONNECT_ALL_BURST as usize];
                    s.irecv(b, p as i32, 7).or_die("irecv")
                })
                .collect();
            let mut sends: Vec<Request<'_, T>> = out
                .iter()
                .map(|(p, m)| s.isend(m, *p, 7).or_die("isend"))
                .collect();
            wait_all_ok("sends", &mut sends);
            wait_all_ok("receives", &mut recvs)
        });
        for (i, b) in bufs.iter().enumerate() {
            let p = peers[i / CONNECT_ALL_BURST as usize];
            let q = (i % CONNECT_ALL_BURST as usize) as u32;
            ensure!(
                sts[i].source == p as i32 && sts[i].count == size(q),
                "connect_all: receive {i} got {:?}, expected {} bytes from rank {p}",
                sts[i],
                size(q)
            );
            check_by_checksum(
                "connect_all",
                &b[..size(q)],
                p,
                me,
                round * 1000 + q,
                7,
                size(q),
            );
        }
    }
    world.barrier().or_die("barrier");
    println!(
        "engine_check connect_all: rank {me} exchanged {} messages with each of {} peers",
        CONNECT_ALL_ROUNDS * CONNECT_ALL_BURST,
        n - 1
    );
}

pub(crate) fn dup<T: Threading>(world: &Comm<T>, dir: Option<&str>) {
    let (me, n) = (world.rank(), world.size());
    let d1 = world.dup().or_die("dup");
    let d2 = world.dup().or_die("second dup");
    let d3 = d1.dup().or_die("dup of a dup");
    let ids = [
        world.context_id(),
        d1.context_id(),
        d2.context_id(),
        d3.context_id(),
    ];
    for i in 0..ids.len() {
        for j in 0..i {
            ensure!(ids[i] != ids[j], "context ids not distinct: {ids:?}");
        }
    }
    for c in [&d1, &d2, &d3] {
        ensure!(
            c.rank() == me && c.size() == n,
            "a dup is rank {} of {}, its parent {me} of {n}",
            c.rank(),
            c.size()
        );
    }
    // Every rank agrees on the ids.
    let mine: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let mut theirs = vec![0u8; mine.len()];
    world.scope(|s| {
        let r = s.irecv(&mut theirs, prev as i32, 3).or_die("irecv ids");
        let w = s.isend(&mine, next, 3).or_die("isend ids");
        ok_status("ids", &r.wait().or_die("wait"));
        ok_status("ids", &w.wait().or_die("wait"));
    });
    same_bytes(&format!("context ids of rank {prev}"), &theirs, &mine);

    // A message on the dup does not match receives on the parent.
    for wild in [false, true] {
        let on_dup = message(me, next, 1, 5, 24);
        let on_parent = message(me, next, 2, 5, 24);
        let (sp, tp) = if wild {
            (ANY_SOURCE, ANY_TAG)
        } else {
            (prev as i32, 5)
        };
        let mut a = vec![0u8; 64];
        let mut b = vec![0u8; 64];
        let (sa, sb) = d1.scope(|ds| {
            let w_dup = ds.isend(&on_dup, next, 5).or_die("isend on dup");
            world.scope(|s| {
                // Parent traffic, sent after the dup's.
                let w_parent = s.isend(&on_parent, next, 5).or_die("isend on parent");
                let sa = world.recv(&mut a, sp, tp).or_die("recv on parent");
                let sb = d1.recv(&mut b, sp, tp).or_die("recv on dup");
                ok_status("isend on parent", &w_parent.wait().or_die("wait"));
                ok_status("isend on dup", &w_dup.wait().or_die("wait"));
                (sa, sb)
            })
        });
        let what = if wild { "ANY/ANY" } else { "exact" };
        check_recv(
            &format!("{what} receive on the parent (the dup's message was sent first)"),
            &sa,
            prev,
            5,
            &a,
            &message(prev, me, 2, 5, 24),
        );
        check_recv(
            &format!("{what} receive on the dup"),
            &sb,
            prev,
            5,
            &b,
            &message(prev, me, 1, 5, 24),
        );
    }

    // Barriers: marker files written before a barrier are all there after.
    for (c, name) in [(world, "world"), (&d1, "dup"), (&d3, "dup-of-dup")] {
        for round in 0..15 {
            if let Some(dir) = dir {
                let f = format!("{dir}/{name}-{round}-{me}");
                std::fs::write(&f, b"").or_die(&format!("writing {f}"));
            }
            c.barrier().or_die(&format!("barrier on {name}"));
            if let Some(dir) = dir {
                for r in 0..n {
                    let f = format!("{dir}/{name}-{round}-{r}");
                    ensure!(
                        std::path::Path::new(&f).exists(),
                        "left barrier {round} on {name} before rank {r} entered it ({f} missing)"
                    );
                }
            }
            // Barrier traffic never matches user receives: a ring exchange
            // with ANY_TAG after each barrier gets exactly the ring message.
            let m = message(me, next, round, round as i32, 8);
            let mut b = vec![0u8; 32];
            let st = c.scope(|s| {
                let w = s.isend(&m, next, round as i32).or_die("isend");
                let st = c.recv(&mut b, ANY_SOURCE, ANY_TAG).or_die("recv");
                ok_status("isend", &w.wait().or_die("wait"));
                st
            });
            check_recv(
                &format!("ring message after barrier {round} on {name}"),
                &st,
                prev,
                round as i32,
                &b,
                &message(prev, me, round, round as i32, 8),
            );
        }
    }
    println!(
        "engine_check dup: rank {me} of {n}: context ids {ids:?}, isolation and 45 barriers checked"
    );
}

// ---------------------------------------------------------------------------
// singleton

pub(crate) fn singleton<T: Threading>(world: &Comm<T>) {
    ensure!(world.rank() == 0, "singleton rank {}", world.rank());
    let small = message(0, 0, 0, 4, 100);
    world.send(&small, 0, 4).or_die("send to self");
    let st = world.probe(0, ANY_TAG).or_die("probe self");
    ensure!(
        st.source == 0 && st.tag == 4 && st.count == 100,
        "probe of a message to self: {st:?}"
    );
    let mut b = vec![0u8; 100];
    let st = world.recv(&mut b, 0, 4).or_die("recv from self");
    check_recv("message to self", &st, 0, 4, &b, &small);
    for size in [0usize, 65_536, 4 << 20] {
        let m = sized_pattern(size, 9);
        let mut b = vec![0u8; size];
        let st = world.scope(|s| {
            let w = s.isend(&m, 0, 6).or_die("isend to self");
            let st = world
                .recv(&mut b, ANY_SOURCE, ANY_TAG)
                .or_die("recv from self");
            ok_status("isend to self", &w.wait().or_die("wait"));
            st
        });
        check_recv(&format!("{size} bytes to self"), &st, 0, 6, &b, &m);
    }
    let d = world.dup().or_die("dup");
    ensure!(
        d.size() == 1 && d.context_id() != world.context_id(),
        "dup of a singleton"
    );
    world.barrier().or_die("barrier");
    d.barrier().or_die("barrier on dup");
    println!("engine_check singleton: rank 0 of 1, messages to self verified");
}
