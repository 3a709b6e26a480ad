//! Message sizes: `sizes` around every threshold the engine reports or the
//! environment sets, and `trunc` (receive buffers smaller than the message).

use rivet::{Comm, Engine, MsgError, Request, Threading, ANY_SOURCE, ANY_TAG};
use rivet_tests::ensure;
use rivet_tests::rank_check::OrDie;

use crate::check::{all_bytes, check_recv, same_bytes, sized_pattern, wait_all_ok};
use crate::numbers;

/// Sizes to try: fixed ones, plus one around every number the engine's info
/// or the environment gives as a threshold.
fn interesting_sizes<T: Threading>(engine: &Engine<T>) -> Vec<usize> {
    let mut sizes: Vec<usize> = vec![
        0,
        1,
        2,
        7,
        8,
        9,
        15,
        16,
        17,
        31,
        63,
        64,
        65,
        100,
        1000,
        4095,
        4096,
        4097,
        65_535,
        65_536,
        65_537,
        1 << 20,
        (1 << 20) + 1,
        (4 << 20) - 1,
        4 << 20,
        (4 << 20) + 1,
    ];
    let mut around = |v: usize| {
        for d in [0usize, 1, 40, 41, 64] {
            sizes.push(v.saturating_sub(d));
        }
        sizes.push(v + 1);
    };
    for k in [1usize, 2, 8, 16, 32, 64, 128, 256] {
        around(k << 10);
    }
    for name in [
        "RIVET_SHM_EAGER_MAX",
        "RIVET_EAGER_MAX",
        "RIVET_TCP_EAGER_MAX",
        "RIVET_TCP_PIECE",
        "RIVET_SHM_CELL_SIZE",
        "RIVET_SHM_FASTBOX_MAX",
    ] {
        if let Some(v) = std::env::var(name).ok().and_then(|v| v.parse().ok()) {
            around(v);
        }
    }
    for (key, value) in &engine.info().items {
        let key = key.to_ascii_lowercase();
        if ["shm", "eager", "lmt", "threshold", "piece"]
            .iter()
            .any(|w| key.contains(w))
        {
            for v in numbers(value).into_iter().filter(|&v| v >= 16) {
                around(v);
                // Piece boundaries of a pipelined copy.
                if v >= 1024 {
                    around(2 * v);
                    around(3 * v);
                }
            }
        }
    }
    sizes.retain(|&s| s <= (4 << 20) + 1);
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// Rank 0 prints what the engine runs with, one `engine_check info:` line
/// per item.
pub(crate) fn print_info<T: Threading>(engine: &Engine<T>) {
    if engine.rank() == 0 {
        for (k, v) in &engine.info().items {
            println!("engine_check info: {k}: {v}");
        }
    }
}

pub(crate) fn sizes<T: Threading>(engine: &Engine<T>, world: &Comm<T>) {
    let me = world.rank();
    let peer = 1 - me;
    let sizes = interesting_sizes(engine);
    print_info(engine);
    if me == 0 {
        println!("engine_check sizes: {} sizes: {sizes:?}", sizes.len());
    }
    const GUARD: usize = 64;
    // One at a time, both ways, into buffers larger than the message.
    for (i, &size) in sizes.iter().enumerate() {
        let i = i as u64;
        let ping = sized_pattern(size, 4 * i);
        let pong = sized_pattern(size, 4 * i + 1);
        let mut buf = vec![0xEEu8; size + GUARD];
        let tag = (i % 1000) as i32;
        let what = format!("{size} bytes");
        let (out, want) = if me == 0 {
            (&ping, &pong)
        } else {
            (&pong, &ping)
        };
        if me == 0 {
            world.send(out, peer, tag).or_die("send");
        }
        let st = world.recv(&mut buf, peer as i32, tag).or_die("recv");
        check_recv(&what, &st, peer, tag, &buf, want);
        all_bytes(
            &format!("{what}: bytes after the message"),
            &buf[size..],
            0xEE,
        );
        if me == 1 {
            world.send(out, peer, tag).or_die("send");
        }
    }
    // All at once, both ways; receives posted in reverse order.
    let outs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &s)| sized_pattern(s, 4 * i as u64 + 2 + me as u64))
        .collect();
    let mut ins: Vec<Vec<u8>> = sizes.iter().map(|&s| vec![0u8; s]).collect();
    world.scope(|s| {
        let mut reqs: Vec<Request<'_, T>> = Vec::new();
        for (i, b) in ins.iter_mut().enumerate().rev() {
            reqs.push(s.irecv(b, peer as i32, i as i32).or_die("irecv"));
        }
        for (i, m) in outs.iter().enumerate() {
            reqs.push(s.isend(m, peer, i as i32).or_die("isend"));
        }
        wait_all_ok("all sizes at once", &mut reqs);
    });
    for (i, b) in ins.iter().enumerate() {
        let want = sized_pattern(sizes[i], 4 * i as u64 + 2 + peer as u64);
        same_bytes(&format!("{} bytes, all at once", sizes[i]), b, &want);
    }
    println!(
        "engine_check sizes: rank {me} verified {} sizes from {} to {} bytes",
        sizes.len(),
        sizes[0],
        sizes[sizes.len() - 1]
    );
    if let Some((_, reads)) = engine
        .info()
        .items
        .iter()
        .find(|(k, _)| k == "netmod.rendezvous_reads")
    {
        println!("engine_check sizes: rank {me} rendezvous reads: {reads}");
    }
    if let Some((_, reads)) = engine
        .info()
        .items
        .iter()
        .find(|(k, _)| k == "shm.single_copy_reads")
    {
        println!("engine_check sizes: rank {me} single-copy reads: {reads}");
    }
}

// ---------------------------------------------------------------------------
// trunc

pub(crate) fn trunc<T: Threading>(world: &Comm<T>) {
    let me = world.rank();
    let mut cases: Vec<(usize, usize)> = vec![
        (10, 5),
        (100, 0),
        (100, 100),
        (5000, 4096),
        (5000, 1),
        (16_320, 10_000),
        (16_321, 16_320),
        (200_000, 100_000),
        (200_000, 1000),
        (200_000, 200_000),
        ((4 << 20) + 1, 4 << 20),
        ((4 << 20) + 1, 65_536),
    ];
    for name in ["RIVET_SHM_EAGER_MAX", "RIVET_EAGER_MAX"] {
        if let Some(t) = std::env::var(name)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
        {
            cases.extend([(t + 1, t), (t, t.saturating_sub(1)), (t + 100, t + 99)]);
        }
    }
    const GUARD: usize = 64;
    for (i, &(size, cap)) in cases.iter().enumerate() {
        let m = sized_pattern(size, i as u64);
        let next = sized_pattern(64, 1000 + i as u64);
        if me == 1 {
            world.send(&m, 0, 30).or_die("send");
            world.send(&next, 0, 31).or_die("send next");
            continue;
        }
        let what = format!("{size}-byte message into {cap} bytes");
        let mut alloc = vec![0xEEu8; cap + GUARD];
        let st = if i % 2 == 0 {
            world.recv(&mut alloc[..cap], 1, 30).or_die("recv")
        } else {
            world.scope(|s| {
                s.irecv(&mut alloc[..cap], ANY_SOURCE, ANY_TAG)
                    .or_die("irecv")
                    .wait()
                    .or_die("wait")
            })
        };
        ensure!(!st.cancelled, "{what}: status says cancelled: {st:?}");
        ensure!(st.source == 1 && st.tag == 30, "{what}: {st:?}");
        if cap < size {
            ensure!(
                st.error
                    == Some(MsgError::Truncated {
                        sent: size,
                        capacity: cap
                    }),
                "{what}: status error {:?}, expected Truncated {{ sent: {size}, capacity: {cap} }}",
                st.error
            );
        } else {
            ensure!(st.error.is_none(), "{what}: status error {:?}", st.error);
        }
        ensure!(st.count == cap.min(size), "{what}: count {}", st.count);
        same_bytes(&what, &alloc[..cap.min(size)], &m[..cap.min(size)]);
        all_bytes(
            &format!("{what}: bytes past the buffer"),
            &alloc[cap.min(size)..],
            0xEE,
        );
        let mut b = vec![0u8; 100];
        let st = world.recv(&mut b, 1, ANY_TAG).or_die("recv next");
        check_recv(
            &format!("the message after the {what}"),
            &st,
            1,
            31,
            &b,
            &next,
        );
    }
    if me == 0 {
        println!("engine_check trunc: {} cases checked", cases.len());
    }
}

// ---------------------------------------------------------------------------
// stress
