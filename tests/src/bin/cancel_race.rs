//! A test rank (2 ranks) that races cancels against matches, many times,
//! eager and rendezvous sizes, with the moment of the cancel moved a
//! little each round. Every round must end exactly one way, with the data
//! intact (payloads seeded by sender and round):
//!
//! - receive side: rank 0 posts a receive for rank 1's message and cancels
//!   it. Cancelled: its buffer is untouched and a later receive gets the
//!   whole message. Not cancelled: the receive got the whole message.
//! - send side: rank 1 sends and cancels; rank 0 has a receive posted.
//!   Rank 1 then says which way its send ended. Cancelled: rank 0's
//!   receive never completes (its own cancel succeeds, buffer untouched)
//!   and no such message is waiting. Sent: rank 0's receive has it whole.
//!   (A posted receive matches at once, so here the send nearly always wins.)
//! - send side, receive not posted: rank 1 sends and cancels while rank 0
//!   waits for something else (progressing, with no receive for it), so
//!   the cancel must win, every time: synchronous sends of every size and
//!   standard rendezvous sends (a standard eager send the transport took
//!   at once has no request left to cancel: finished, as MPI allows). Rank 0 then finds no
//!   such message waiting, and a second message with the same tag arrives
//!   whole in its place (the cancelled one is neither delivered nor
//!   mistaken for it).
//!
//! Prints `cancel_race OK rank R: receive side C cancelled / M matched,
//! send side C cancelled / S sent, unposted sends U cancelled`.

use rivet::{Comm, Local, ThreadLevel};
use rivet_tests::ensure;
use rivet_tests::pattern::{pattern, seed_of};
use rivet_tests::rank_check::{self, die, OrDie};

const ROUNDS: u32 = 120;
/// Rounds of the send side with no receive posted: synchronous sends of
/// each size, then a standard rendezvous send, in turn.
const UNPOSTED: u32 = 12;
const TAG_ACK2: i32 = 3;
const TAG_ACK: i32 = 1;
const TAG_VERDICT: i32 = 2;
const SIZES: [usize; 3] = [64, 8 << 10, 256 << 10];

/// The payload of `round` from `sender`.
fn payload(sender: u32, round: u32, len: usize) -> Vec<u8> {
    pattern(len, seed_of(&[u64::from(sender), u64::from(round)]))
}

/// A short, round-dependent delay that yields (moves the cancel around).
fn jitter(round: u32) {
    for _ in 0..round % 7 {
        std::thread::yield_now();
    }
}

fn main() {
    rank_check::start("cancel_race");
    let engine = rank_check::init::<Local>(ThreadLevel::Single);
    let world = engine.world();
    ensure!(world.size() == 2, "needs 2 ranks, not {}", world.size());
    let rank = world.rank();
    let (recv_side, send_side, unposted) = if rank == 0 {
        (
            receive_side_0(&world),
            send_side_0(&world),
            unposted_0(&world),
        )
    } else {
        receive_side_1(&world);
        send_side_1(&world);
        ((0, 0), (0, 0), unposted_1(&world))
    };
    drop(world);
    engine.finalize().or_die("finalize");
    println!(
        "cancel_race OK rank {rank}: receive side {} cancelled / {} matched, send side {} \
         cancelled / {} sent, unposted sends {unposted} cancelled",
        recv_side.0, recv_side.1, send_side.0, send_side.1
    );
}

fn tag(round: u32) -> i32 {
    100 + round as i32
}

fn size(round: u32) -> usize {
    SIZES[round as usize % SIZES.len()]
}

fn receive_side_0(world: &Comm<Local>) -> (u32, u32) {
    let (mut cancelled, mut matched) = (0, 0);
    for round in 0..ROUNDS {
        let want = payload(1, round, size(round));
        let mut buf = vec![0xABu8; want.len()];
        let st = world.scope(|s| {
            let mut r = s.irecv(&mut buf, 1, tag(round)).or_die("irecv");
            jitter(round);
            for _ in 0..round % 3 {
                if r.test().or_die("test").is_some() {
                    break;
                }
            }
            r.cancel().or_die("cancel");
            r.wait().or_die("wait after cancel")
        });
        if st.cancelled {
            ensure!(
                buf.iter().all(|&b| b == 0xAB),
                "round {round}: a cancelled receive wrote into its buffer"
            );
            let st = world
                .recv(&mut buf, 1, tag(round))
                .or_die("recv after cancel");
            ensure!(
                st.count == want.len() && buf == want,
                "round {round}: the message after a cancelled receive is wrong: {st:?}"
            );
            cancelled += 1;
        } else {
            ensure!(
                st.count == want.len() && st.error.is_none() && buf == want,
                "round {round}: a receive that was not cancelled has wrong data: {st:?}"
            );
            matched += 1;
        }
        world.send(&[], 1, TAG_ACK).or_die("ack");
    }
    (cancelled, matched)
}

fn receive_side_1(world: &Comm<Local>) {
    for round in 0..ROUNDS {
        let data = payload(1, round, size(round));
        world.send(&data, 0, tag(round)).or_die("send");
        world.recv(&mut [], 0, TAG_ACK).or_die("ack");
    }
}

fn send_side_0(world: &Comm<Local>) -> (u32, u32) {
    let (mut cancelled, mut sent) = (0, 0);
    for round in 0..ROUNDS {
        let want = payload(1, round + ROUNDS, size(round));
        let t = tag(round + ROUNDS);
        let mut buf = vec![0xABu8; want.len()];
        let mut verdict = [0u8; 1];
        let (was_cancelled, st) = world.scope(|s| {
            let mut r = s.irecv(&mut buf, 1, t).or_die("irecv");
            world.recv(&mut verdict, 1, TAG_VERDICT).or_die("verdict");
            match verdict[0] {
                1 => {
                    if let Some(st) = r.test().or_die("test") {
                        die(format!(
                            "round {round}: rank 1's send was cancelled, yet it arrived: {st:?}"
                        ));
                    }
                    r.cancel().or_die("cancel");
                    (true, r.wait().or_die("wait after cancel"))
                }
                0 => (false, r.wait().or_die("wait")),
                v => die(format!("round {round}: verdict {v}")),
            }
        });
        if was_cancelled {
            ensure!(
                st.cancelled && buf.iter().all(|&b| b == 0xAB),
                "round {round}: after a cancelled send our receive ended with {st:?}"
            );
            ensure!(
                world.iprobe(1, t).or_die("iprobe").is_none(),
                "round {round}: a cancelled send's message is waiting"
            );
            cancelled += 1;
        } else {
            ensure!(
                !st.cancelled && st.count == want.len() && buf == want,
                "round {round}: a send that was not cancelled arrived wrong: {st:?}"
            );
            sent += 1;
        }
        world.send(&[], 1, TAG_ACK).or_die("ack");
    }
    (cancelled, sent)
}

fn send_side_1(world: &Comm<Local>) {
    for round in 0..ROUNDS {
        let data = payload(1, round + ROUNDS, size(round));
        let st = world.scope(|s| {
            let mut r = s.isend(&data, 0, tag(round + ROUNDS)).or_die("isend");
            jitter(round);
            for _ in 0..round % 3 {
                if r.test().or_die("test").is_some() {
                    break;
                }
            }
            r.cancel().or_die("cancel");
            r.wait().or_die("wait after cancel")
        });
        world
            .send(&[u8::from(st.cancelled)], 0, TAG_VERDICT)
            .or_die("verdict");
        world.recv(&mut [], 0, TAG_ACK).or_die("ack");
    }
}

/// The tag of unposted round `round`.
fn unposted_tag(round: u32) -> i32 {
    tag(2 * ROUNDS + round)
}

/// Unposted round `round`: (size, synchronous).
fn unposted_kind(round: u32) -> (usize, bool) {
    match round % 4 {
        3 => (SIZES[2], false),
        i => (SIZES[i as usize], true),
    }
}

/// Rank 0 of the unposted send side: waits for rank 1's verdict (its
/// engine progressing, no receive for the message), checks nothing is
/// left of the cancelled send, then takes the second message whole.
fn unposted_0(world: &Comm<Local>) -> u32 {
    let mut cancelled = 0;
    for round in 0..UNPOSTED {
        let t = unposted_tag(round);
        let mut verdict = [0u8; 1];
        world
            .recv(&mut verdict, 1, TAG_VERDICT)
            .or_die("unposted verdict");
        ensure!(
            verdict[0] == 1,
            "unposted round {round}: rank 1's send to no posted receive was not cancelled"
        );
        ensure!(
            world.iprobe(1, t).or_die("iprobe").is_none(),
            "unposted round {round}: a cancelled send's message is waiting"
        );
        world.send(&[], 1, TAG_ACK).or_die("ack");
        let want = payload(1, 2 * ROUNDS + UNPOSTED + round, unposted_kind(round).0);
        let mut buf = vec![0xABu8; want.len() + 1];
        let st = world.recv(&mut buf, 1, t).or_die("second message");
        ensure!(
            st.count == want.len() && buf[..want.len()] == want[..] && buf[want.len()] == 0xAB,
            "unposted round {round}: the message after a cancelled send is wrong: {st:?}"
        );
        cancelled += 1;
        world.send(&[], 1, TAG_ACK2).or_die("ack");
    }
    cancelled
}

/// Rank 1 of the unposted send side: send, cancel, wait: cancelled (rank
/// 0 has no receive for it), then a second message with the same tag.
fn unposted_1(world: &Comm<Local>) -> u32 {
    for round in 0..UNPOSTED {
        let t = unposted_tag(round);
        let (len, sync) = unposted_kind(round);
        let data = payload(1, 2 * ROUNDS + round, len);
        let st = world.scope(|s| {
            let r = if sync {
                s.issend(&data, 0, t).or_die("issend")
            } else {
                s.isend(&data, 0, t).or_die("isend")
            };
            r.cancel().or_die("cancel");
            r.wait().or_die("wait after cancel")
        });
        ensure!(
            st.cancelled,
            "unposted round {round} ({len} bytes, synchronous {sync}): a send nobody had a \
             receive for was not cancelled: {st:?}"
        );
        world.send(&[1], 0, TAG_VERDICT).or_die("verdict");
        world.recv(&mut [], 0, TAG_ACK).or_die("ack");
        let second = payload(1, 2 * ROUNDS + UNPOSTED + round, len);
        world.send(&second, 0, t).or_die("second message");
        world.recv(&mut [], 0, TAG_ACK2).or_die("ack");
    }
    UNPOSTED
}
