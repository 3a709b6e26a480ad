//! Communicator creation (`dup`, `split`, `create`) on 4 or more ranks,
//! meant for two IMPI clients of 2 ranks each (world ranks 0, 1 under
//! client 0, 2, 3 under client 1), where it runs seed 003's 4.4, 4.6 and
//! 4.7; it runs in a single job too.
//!
//! - `comms`: a dup of the world (a ring and an all-reduce on it), a split
//!   by parity with reversed keys, a create of `[n/2, 0]` (the first rank
//!   of each client, in reverse), a split where the last rank's colour is
//!   undefined; each new communicator's ranks, sizes and members checked
//!   by traffic between all its pairs, its barrier run, and messages on
//!   it and on the world with the same tag kept apart.
//! - `splitbad`: a colour above `i32::MAX` and a rank list with a rank
//!   twice fail at the rank given them while the others get their
//!   communicators; then the last rank skips a split and finalizes, and
//!   every other rank's split fails (no hang) with an error naming a rank.

use rivet::{Comm, Error, Threading, ANY_SOURCE, ANY_TAG};
use rivet_tests::ensure;
use rivet_tests::rank_check::OrDie;

use crate::check::swap_u32;
use crate::intercomms::check_members;

const TAG: i32 = 9;

/// Under `--impi-client` (the context ids then follow seed 003's rule).
fn impi() -> bool {
    std::env::var_os("IMPI_CLIENT_SIZE").is_some()
}

/// A fresh context id, and even across IMPI clients (4.4: `newcid =
/// maxcid + 1`, `maxcid` odd).
fn check_context<T: Threading>(what: &str, c: &Comm<T>, used: &mut Vec<u32>) {
    let id = c.context_id();
    ensure!(
        !used.contains(&id),
        "{what}: context id {id} reused: {used:?}"
    );
    ensure!(
        !impi() || id % 2 == 0,
        "{what}: context id {id} is odd (seed 003 4.4)"
    );
    used.push(id);
}

/// Around `new`'s ring (`order`: the world rank of each of its ranks),
/// each rank sends its successor a message on the world and then one on
/// `new`, same tag; an ANY/ANY receive on `new` gets `new`'s message, not
/// the world's one that arrived first.
fn kept_apart<T: Threading>(what: &str, world: &Comm<T>, new: &Comm<T>, order: &[u32]) {
    let (r, m) = (new.rank(), new.size());
    let (next, prev) = ((r + 1) % m, (r + m - 1) % m);
    let (wnext, wprev) = (order[next as usize], order[prev as usize]);
    let on_world = [b'w', r as u8];
    let on_new = [b'n', r as u8];
    let (mut a, mut b) = ([0u8; 8], [0u8; 8]);
    world.scope(|s| {
        let ww = s.isend(&on_world, wnext, TAG).or_die("isend on world");
        new.scope(|ns| {
            let wn = ns.isend(&on_new, next, TAG).or_die("isend on new");
            // The world's message is here before the receive on `new`.
            world.probe(wprev as i32, TAG).or_die("probe on world");
            let st = new.recv(&mut b, ANY_SOURCE, ANY_TAG).or_die("recv on new");
            ensure!(
                st.source == prev as i32 && st.tag == TAG && b[..st.count] == [b'n', prev as u8],
                "{what}: an ANY/ANY receive got {:?} from {} (tag {}), expected new's rank {prev}'s",
                &b[..st.count],
                st.source,
                st.tag
            );
            wn.wait().or_die("wait");
        });
        let st = world.recv(&mut a, wprev as i32, TAG).or_die("recv on world");
        ensure!(
            a[..st.count] == [b'w', prev as u8],
            "{what}: the world's receive got {:?}",
            &a[..st.count]
        );
        ww.wait().or_die("wait");
    });
}

/// A ring on `c` and an all-reduce (sum of rank + 1) by messages to all.
fn ring_and_allreduce<T: Threading>(what: &str, c: &Comm<T>) {
    let (r, n) = (c.rank(), c.size());
    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    let got = swap_u32(c, r, next, prev, TAG);
    ensure!(
        got == prev,
        "{what}: the ring brought {got} from rank {prev}"
    );
    let mine = u64::from(r + 1).to_be_bytes();
    let mut bufs = vec![[0u8; 8]; n as usize];
    c.scope(|s| {
        let sends: Vec<_> = (0..n)
            .filter(|&p| p != r)
            .map(|p| s.isend(&mine, p, TAG + 1).or_die("isend"))
            .collect();
        let recvs: Vec<_> = bufs
            .iter_mut()
            .enumerate()
            .filter(|&(p, _)| p as u32 != r)
            .map(|(p, b)| s.irecv(b, p as i32, TAG + 1).or_die("irecv"))
            .collect();
        for q in sends.into_iter().chain(recvs) {
            q.wait().or_die("wait");
        }
    });
    bufs[r as usize] = mine;
    let sum: u64 = bufs.iter().map(|b| u64::from_be_bytes(*b)).sum();
    let want = u64::from(n) * u64::from(n + 1) / 2;
    ensure!(sum == want, "{what}: all-reduce sum {sum}, expected {want}");
}

pub(crate) fn comms<T: Threading>(world: &Comm<T>) {
    let (me, n) = (world.rank(), world.size());
    let mut used = vec![world.context_id()];

    let d = world.dup().or_die("dup");
    check_context("dup", &d, &mut used);
    ensure!(
        d.rank() == me && d.size() == n,
        "dup: rank {} of {}",
        d.rank(),
        d.size()
    );
    ring_and_allreduce("dup", &d);
    d.barrier().or_die("barrier on the dup");
    kept_apart("dup", world, &d, &(0..n).collect::<Vec<_>>());

    // Parity, keys reversed: the new order is descending world rank.
    let s = world
        .split(Some(me % 2), (n - 1 - me) as i32)
        .or_die("split")
        .unwrap_or_else(|| rivet_tests::rank_check::die("split by parity gave no communicator"));
    check_context("split", &s, &mut used);
    let parity: Vec<u32> = (0..n).rev().filter(|r| r % 2 == me % 2).collect();
    check_members("split by parity", &s, me, &parity);
    ring_and_allreduce("split", &s);
    s.barrier().or_die("barrier on the split");
    kept_apart("split", world, &s, &parity);
    let sd = s.dup().or_die("dup of the split");
    check_context("dup of the split", &sd, &mut used);
    check_members("dup of the split", &sd, me, &parity);

    // One rank of each client (0 and n/2 under two equal clients).
    let group = [n / 2, 0];
    let c = world.create(&group).or_die("create");
    ensure!(
        c.is_some() == group.contains(&me),
        "create: world rank {me} got {} communicator",
        if c.is_some() { "a" } else { "no" }
    );
    if let Some(c) = &c {
        check_context("create", c, &mut used);
        check_members("create", c, me, &group);
        c.barrier().or_die("barrier on the created communicator");
        kept_apart("create", world, c, &group);
    }

    // The last rank's colour is undefined.
    let colour = (me != n - 1).then_some(7);
    let u = world
        .split(colour, 0)
        .or_die("split with an undefined colour");
    ensure!(
        u.is_some() == (me != n - 1),
        "split: world rank {me} with colour {colour:?} got {:?}",
        u.as_ref().map(|c| c.size())
    );
    if let Some(u) = &u {
        check_context("split without the last rank", u, &mut used);
        check_members(
            "split without the last rank",
            u,
            me,
            &(0..n - 1).collect::<Vec<_>>(),
        );
    }
    world.barrier().or_die("barrier");
    println!(
        "engine_check comms: world rank {me}: parity {parity:?}, create {group:?}, context ids {used:?}"
    );
}

pub(crate) fn splitbad<T: Threading>(world: &Comm<T>) {
    let (me, n) = (world.rank(), world.size());
    // Rank 1's colour is out of range: its split fails, the others' go on
    // without it.
    let colour = if me == 1 { Some(u32::MAX) } else { Some(0) };
    match world.split(colour, 0) {
        Err(Error::InvalidArgument(why)) if me == 1 => {
            ensure!(why.contains("colour"), "rank 1's error: {why}");
            println!("engine_check splitbad: rank 1: {why}");
        }
        Ok(Some(c)) if me != 1 => {
            let order: Vec<u32> = (0..n).filter(|&r| r != 1).collect();
            check_members("split without rank 1", &c, me, &order);
        }
        other => ensure!(
            false,
            "split with a bad colour at rank 1: {:?}",
            other.map(|c| c.map(|c| c.size()))
        ),
    }
    // Rank 1 lists a rank twice; the others' list holds 0 and n/2.
    let group = if me == 1 { vec![0, 0] } else { vec![0, n / 2] };
    match world.create(&group) {
        Err(Error::InvalidArgument(why)) if me == 1 => {
            ensure!(why.contains("twice"), "rank 1's error: {why}");
        }
        Ok(c) if me != 1 => {
            ensure!(
                c.is_some() == group.contains(&me),
                "create: world rank {me}: {:?}",
                c.map(|c| c.size())
            );
        }
        other => ensure!(
            false,
            "create with a bad list at rank 1: {:?}",
            other.map(|c| c.map(|c| c.size()))
        ),
    }
    world.barrier().or_die("barrier");
    // The last rank does not take part: it finalizes (in `run`).
    if me == n - 1 {
        println!("engine_check splitbad: rank {me} skips the split");
        return;
    }
    match world.split(Some(0), 0) {
        Err(e @ Error::PeerFailed { .. }) => {
            println!("engine_check splitbad: rank {me}: the split failed: {e}");
        }
        other => ensure!(
            false,
            "a split the last rank skipped: {:?}",
            other.map(|c| c.map(|c| c.size()))
        ),
    }
}
