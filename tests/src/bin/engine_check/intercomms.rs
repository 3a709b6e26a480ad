//! `intercomm`: seed 003's 4.8 and 4.9 on 4 or more ranks (even world
//! ranks form group A, odd ones group B, so under two IMPI clients of 2
//! ranks each both groups span the clients): `intercomm_create` over the
//! world, traffic across it, `merge` with `high` deciding the order and
//! with a tie (the group whose leader has the lower world rank first),
//! barriers on the merged communicators, then 4.5's `free` of each.

use rivet::{Comm, Threading};
use rivet_tests::ensure;
use rivet_tests::rank_check::OrDie;

use crate::check::swap_u32;

const TAG: i32 = 77;

/// Every rank of `c` tells every other its world rank and `c`'s context
/// id; each checks they match `order` (world ranks by rank of `c`).
pub(crate) fn check_members<T: Threading>(what: &str, c: &Comm<T>, me: u32, order: &[u32]) {
    ensure!(
        c.size() as usize == order.len() && order[c.rank() as usize] == me,
        "{what}: world rank {me} is rank {} of {}, expected order {order:?}",
        c.rank(),
        c.size()
    );
    let mut out = me.to_le_bytes().to_vec();
    out.extend_from_slice(&c.context_id().to_le_bytes());
    let n = c.size();
    for k in 1..n {
        let to = (c.rank() + k) % n;
        let from = (c.rank() + n - k) % n;
        let mut got = [0u8; 8];
        c.scope(|s| {
            let w = s.isend(&out, to, TAG).or_die("isend");
            let st = s.irecv(&mut got, from as i32, TAG).or_die("irecv").wait();
            ensure!(st.or_die("wait").count == 8, "{what}: a short message");
            w.wait().or_die("wait");
        });
        let world = u32::from_le_bytes(got[..4].try_into().unwrap());
        let cid = u32::from_le_bytes(got[4..].try_into().unwrap());
        ensure!(
            world == order[from as usize] && cid == c.context_id(),
            "{what}: rank {from} says world rank {world}, context {cid}; expected {} and {}",
            order[from as usize],
            c.context_id()
        );
    }
}

pub(crate) fn intercomm<T: Threading>(world: &Comm<T>) {
    let (me, n) = (world.rank(), world.size());
    let in_a = me % 2 == 0;
    let a: Vec<u32> = (0..n).step_by(2).collect();
    let b: Vec<u32> = (1..n).step_by(2).collect();
    let (mine, theirs) = if in_a { (&a, &b) } else { (&b, &a) };
    let local = world.create_with_context(mine, 5).or_die("the local group");
    // The leaders are each group's rank 0: world ranks 0 and 1.
    let inter = local
        .intercomm_create(0, world, theirs[0], TAG)
        .or_die("intercomm_create");
    ensure!(
        inter.is_inter()
            && inter.rank() == local.rank()
            && inter.remote_size() == Some(theirs.len() as u32),
        "intercomm_create: rank {} remote size {:?}",
        inter.rank(),
        inter.remote_size()
    );
    // 4.4: newcid = maxcid + 1 with maxcid odd.
    ensure!(
        inter.context_id() % 2 == 0,
        "context id {} is odd",
        inter.context_id()
    );
    // Across: rank r of each group swaps world ranks with rank r of the other.
    let r = inter.rank();
    if (r as usize) < theirs.len() {
        let peer = swap_u32(&inter, me, r, r, TAG);
        ensure!(
            peer == theirs[r as usize],
            "across the intercommunicator: rank {r} is world rank {peer}, not {}",
            theirs[r as usize]
        );
    }
    // 4.6: a dup of the intercommunicator, and traffic across it.
    let dup = inter.dup().or_die("dup of the intercommunicator");
    ensure!(
        dup.is_inter()
            && dup.remote_size() == inter.remote_size()
            && dup.context_id() % 2 == 0
            && dup.context_id() > inter.context_id(),
        "dup of the intercommunicator: context {} after {}",
        dup.context_id(),
        inter.context_id()
    );
    if (r as usize) < theirs.len() {
        let peer = swap_u32(&dup, me, r, r, TAG);
        ensure!(
            peer == theirs[r as usize],
            "across the dup: rank {r} is world rank {peer}"
        );
    }
    dup.free().or_die("free of the dup");
    // high: A passes true, so B comes first.
    let m1 = inter.merge(in_a).or_die("merge (high)");
    let b_first: Vec<u32> = b.iter().chain(&a).copied().collect();
    check_members("merge with A high", &m1, me, &b_first);
    m1.barrier().or_die("barrier on the first merge");
    // A tie: A's leader (world rank 0) is lower, so A comes first.
    let m2 = inter.merge(false).or_die("merge (tie)");
    let a_first: Vec<u32> = a.iter().chain(&b).copied().collect();
    check_members("merge with a tie", &m2, me, &a_first);
    ensure!(
        m2.context_id() != m1.context_id() && m1.context_id() != inter.context_id(),
        "context ids reused: {} {} {}",
        inter.context_id(),
        m1.context_id(),
        m2.context_id()
    );
    m2.barrier().or_die("barrier on the second merge");
    m1.free().or_die("free (intra)");
    m2.free().or_die("free (intra)");
    inter.free().or_die("free (inter)");
    println!(
        "engine_check intercomm: world rank {me}: groups {a:?} / {b:?}, merged as {b_first:?} and {a_first:?}"
    );
}
