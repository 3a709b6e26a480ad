//! `cancel` (receives, sends, cancels that come too late) and `ssend`
//! (a synchronous send pending until matched).

use rivet::{Comm, Threading, ANY_SOURCE, ANY_TAG};
use rivet_tests::ensure;
use rivet_tests::rank_check::{die, OrDie};

use crate::check::{all_bytes, check_recv, message, ok_status, pat, sized_pattern};

pub(crate) fn cancel<T: Threading>(world: &Comm<T>) {
    let me = world.rank();
    let big = 4 << 20;
    // Sends rank 0 cancels: (synchronous?, size).
    let sends: [(bool, usize); 4] = [(true, 100), (true, 0), (false, big), (true, big)];
    if me == 0 {
        // (a) Receives that nothing matches. Rank 1 sends nothing until told.
        for (sp, tp) in [
            (ANY_SOURCE, ANY_TAG),
            (1, 77),
            (ANY_SOURCE, 77),
            (1, ANY_TAG),
        ] {
            let what = format!("cancelled receive ({}, {})", pat(sp), pat(tp));
            let mut buf = vec![0xABu8; 1000];
            let st = world.scope(|s| {
                let mut r = s.irecv(&mut buf, sp, tp).or_die("irecv");
                for _ in 0..100 {
                    if let Some(st) = r.test().or_die("test") {
                        die(format!("{what}: completed before it was cancelled: {st:?}"));
                    }
                }
                r.cancel().or_die("cancel");
                r.wait().or_die("wait after cancel")
            });
            ensure!(st.cancelled, "{what}: status says not cancelled: {st:?}");
            all_bytes(&what, &buf, 0xAB);
        }
        let mut raw = vec![0xABu8; 64];
        // SAFETY: `raw` outlives the request, which is waited for.
        let st = unsafe {
            let r = world
                .irecv_raw(raw.as_mut_ptr(), raw.len(), 1, 78)
                .or_die("irecv_raw");
            r.cancel().or_die("cancel raw");
            r.wait().or_die("wait raw")
        };
        ensure!(st.cancelled, "cancelled raw receive: {st:?}");
        all_bytes("cancelled raw receive", &raw, 0xAB);

        // (b) A message with the cancelled receive's tag, sent afterwards,
        // is received normally.
        world.send(b"go", 1, 1).or_die("send go");
        let mut buf = vec![0u8; 100];
        let st = world.recv(&mut buf, 1, 77).or_die("recv(1, 77)");
        check_recv(
            "tag 77 after the cancelled receives",
            &st,
            1,
            77,
            &buf,
            &message(1, 0, 0, 77, 50),
        );

        // (c) Sends rank 1 never matches are withdrawn: its ANY_TAG receive
        // then gets the message after them.
        for (i, &(sync, size)) in sends.iter().enumerate() {
            let what = format!(
                "cancelled {} of {size} bytes",
                if sync { "issend" } else { "isend" }
            );
            let m = sized_pattern(size, i as u64);
            let tag = 50 + i as i32;
            let st = world.scope(|s| {
                let mut r = if sync {
                    s.issend(&m, 1, tag)
                } else {
                    s.isend(&m, 1, tag)
                }
                .or_die("send");
                for _ in 0..10 {
                    let _ = r.test().or_die("test");
                }
                if r.is_done() {
                    die(format!(
                        "{what}: completed although rank 1 has not received it"
                    ));
                }
                r.cancel().or_die("cancel");
                r.wait().or_die("wait after cancel")
            });
            ensure!(st.cancelled, "{what}: status says not cancelled: {st:?}");
            world.send(b"go", 1, 2).or_die("send go");
            let next = message(0, 1, i as u32, 60 + i as i32, 40);
            world.send(&next, 1, 60 + i as i32).or_die("send next");
        }

        // (d) Cancelling a send after rank 1 matched it fails.
        for (tag, size) in [(70, 1000usize), (72, big)] {
            let what = format!("cancel of an issend of {size} bytes after its match");
            let m = sized_pattern(size, tag as u64);
            let st = world.scope(|s| {
                let r = s.issend(&m, 1, tag).or_die("issend");
                let mut b = [0u8; 8];
                let st = world.recv(&mut b, 1, 71).or_die("recv(1, 71)");
                ok_status("matched notice", &st);
                r.cancel().or_die("cancel");
                r.wait().or_die("wait after cancel")
            });
            ensure!(!st.cancelled, "{what}: status says cancelled: {st:?}");
        }

        // (e) Rank 1 cancels receives that already matched.
        for (tag, size) in [(73, big), (76, 100)] {
            let mut b = [0u8; 8];
            let st = world.recv(&mut b, 1, 74).or_die("recv(1, 74)");
            ok_status("posted notice", &st);
            let m = sized_pattern(size, tag as u64);
            world.scope(|s| {
                let r = s.isend(&m, 1, tag).or_die("isend");
                world.send(b"sent", 1, 75).or_die("send(75)");
                ok_status("isend", &r.wait().or_die("wait isend"));
            });
        }
    } else {
        let mut b = [0u8; 8];
        let st = world.recv(&mut b, 0, 1).or_die("recv go");
        ok_status("go", &st);
        world
            .send(&message(1, 0, 0, 77, 50), 0, 77)
            .or_die("send(77)");

        for (i, &(_, size)) in sends.iter().enumerate() {
            let st = world.recv(&mut b, 0, 2).or_die("recv go");
            ok_status("go", &st);
            let mut buf = vec![0u8; size.max(100)];
            let st = world.recv(&mut buf, 0, ANY_TAG).or_die("recv(0, ANY)");
            let next = message(0, 1, i as u32, 60 + i as i32, 40);
            check_recv(
                &format!(
                    "the receive after a cancelled send of {size} bytes (tag {})",
                    50 + i
                ),
                &st,
                0,
                60 + i as i32,
                &buf,
                &next,
            );
        }

        for (tag, size) in [(70, 1000usize), (72, big)] {
            let mut buf = vec![0u8; size];
            let st = world.recv(&mut buf, 0, tag).or_die("recv");
            check_recv(
                "issend",
                &st,
                0,
                tag,
                &buf,
                &sized_pattern(size, tag as u64),
            );
            world.send(b"matched", 0, 71).or_die("send(71)");
        }

        for (tag, size) in [(73, big), (76, 100)] {
            let what = format!("cancel of a matched receive of {size} bytes");
            let mut buf = vec![0u8; size];
            let st = world.scope(|s| {
                let r = s.irecv(&mut buf, 0, tag).or_die("irecv");
                world.send(b"posted", 0, 74).or_die("send(74)");
                // Tag 75 comes after `tag`, so `tag` has matched by now.
                let mut b = [0u8; 8];
                ok_status(
                    "sent notice",
                    &world.recv(&mut b, 0, 75).or_die("recv(0, 75)"),
                );
                r.cancel().or_die("cancel");
                r.wait().or_die("wait after cancel")
            });
            ensure!(!st.cancelled, "{what}: status says cancelled: {st:?}");
            check_recv(&what, &st, 0, tag, &buf, &sized_pattern(size, tag as u64));
        }
    }
    world.barrier().or_die("barrier");
    if let Some(st) = world.iprobe(ANY_SOURCE, ANY_TAG).or_die("iprobe") {
        die(format!("a message is still waiting at the end: {st:?}"));
    }
    if me == 0 {
        println!(
            "engine_check cancel: 5 receives and {} sends cancelled, 4 late cancels refused",
            sends.len()
        );
    }
}

// ---------------------------------------------------------------------------
// ssend

pub(crate) fn ssend<T: Threading>(world: &Comm<T>) {
    const TESTS: usize = 2000;
    let me = world.rank();
    let sizes = [0usize, 1, 100, 4000, 65_536, 1 << 20, 4 << 20];
    let mut early = 0;
    for (i, &size) in sizes.iter().enumerate() {
        let i = i as u64;
        let m = sized_pattern(size, i * 10);
        let plain = sized_pattern(size, i * 10 + 1);
        let blocking = sized_pattern(size, i * 10 + 2);
        if me == 0 {
            world.scope(|s| {
                let mut r = s.issend(&m, 1, 10).or_die("issend");
                for k in 0..TESTS {
                    if let Some(st) = r.test().or_die("test") {
                        die(format!(
                            "an issend of {size} bytes completed ({st:?}) at test {k}, before \
                             rank 1 could post its receive (it waits for a go message)"
                        ));
                    }
                }
                world.send(b"go", 1, 11).or_die("send go");
                ok_status("issend", &r.wait().or_die("wait issend"));
            });
            // The same with a standard send: it may complete early.
            world.scope(|s| {
                let mut r = s.isend(&plain, 1, 12).or_die("isend");
                let mut done = false;
                for _ in 0..TESTS {
                    if let Some(st) = r.test().or_die("test") {
                        ok_status("isend", &st);
                        done = true;
                        break;
                    }
                }
                early += done as usize;
                world.send(b"go", 1, 13).or_die("send go");
                if !done {
                    ok_status("isend", &r.wait().or_die("wait isend"));
                }
            });
            world.ssend(&blocking, 1, 14).or_die("ssend");
        } else {
            let mut b = [0u8; 8];
            let mut buf = vec![0u8; size];
            ok_status("go", &world.recv(&mut b, 0, 11).or_die("recv go"));
            let st = world.recv(&mut buf, 0, 10).or_die("recv(0, 10)");
            check_recv("issend", &st, 0, 10, &buf, &m);
            ok_status("go", &world.recv(&mut b, 0, 13).or_die("recv go"));
            let st = world.recv(&mut buf, 0, 12).or_die("recv(0, 12)");
            check_recv("isend", &st, 0, 12, &buf, &plain);
            let st = world.recv(&mut buf, 0, 14).or_die("recv(0, 14)");
            check_recv("ssend", &st, 0, 14, &buf, &blocking);
        }
    }
    if me == 0 {
        println!(
            "engine_check ssend: {} issends stayed pending for {TESTS} tests each until matched; \
             {early} standard sends completed before their match",
            sizes.len()
        );
    }
}

// ---------------------------------------------------------------------------
// sizes
