//! `group_check`'s modes across two process groups: `parents` and the
//! `child`ren they spawn, and `jobs`, two separately started jobs; both
//! run the same five steps (`together`).

use std::time::{Duration, Instant};

use rivet::{
    Comm, ConnectAttrs, Connected, Engine, GroupEvent, GroupEventKind, ProcName, Threading,
};
use rivet_tests::ensure;
use rivet_tests::rank_check::{die, OrDie};

use crate::support::*;

/// How long `jobs` waits for the other job's name.
const OTHER_JOB_DEADLINE: Duration = Duration::from_secs(90);

/// The other side's namespace, swapped over the spawn intercommunicator:
/// every process sends its own to every remote rank.
fn swap_nspace<T: Threading>(engine: &Engine<T>, inter: &Comm<T>) -> String {
    let mine = engine.nspace();
    let remote = inter.remote_size().unwrap_or(0);
    let mut theirs = String::new();
    for r in 0..remote {
        inter.send(mine.as_bytes(), r, 3).or_die("send nspace");
    }
    for r in 0..remote {
        let st = inter.probe(r as i32, 3).or_die("probe nspace");
        let mut buf = vec![0u8; st.count];
        inter.recv(&mut buf, r as i32, 3).or_die("recv nspace");
        let got = String::from_utf8(buf).or_die("nspace is UTF-8");
        ensure!(
            theirs.is_empty() || theirs == got,
            "two namespaces on the other side: {theirs} and {got}"
        );
        theirs = got;
    }
    theirs
}

pub fn parents<T: Threading>(engine: &Engine<T>, n: u32) {
    let world = engine.world();
    world.barrier().or_die("barrier");
    let base = engine.counts();
    let me = std::env::current_exe().or_die("current_exe");
    let children = world
        .spawn(&me.to_string_lossy(), &["child"], n, 0)
        .or_die("spawn");
    let theirs = swap_nspace(engine, &children);
    children.disconnect().or_die("disconnect from the children");
    // Ours cluster-qualified (RFC0003's form): the same processes.
    let ours = engine.qualified_nspace().or_die("qualified_nspace");
    ensure!(
        engine.cluster().or_die("cluster").is_some() && ours.contains(':'),
        "rivetrun names a cluster, yet our id is {ours:?}"
    );
    let ours: ProcName = format!("{ours}:*").parse().or_die("parse our own id");
    let procs = [ours, whole(&theirs)];
    together(engine, &procs, &engine.nspace(), &theirs, world.size(), n);
    world.barrier().or_die("final barrier");
    let now = engine.counts();
    ensure!(
        now.pg == base.pg && now.vcrts == base.vcrts,
        "after the groups: counts {now:?}, baseline {base:?}"
    );
}

pub fn child<T: Threading>(engine: &Engine<T>) {
    let parent = engine
        .parent()
        .unwrap_or_else(|| die("a spawned process has no parent"));
    let theirs = swap_nspace(engine, &parent);
    parent.disconnect().or_die("disconnect from the parent");
    let procs = [whole(&engine.nspace()), whole(&theirs)];
    let world = engine.world();
    let parents = exchange_with_parents(&procs[1], engine);
    together(
        engine,
        &procs,
        &theirs,
        &engine.nspace(),
        parents,
        world.size(),
    );
    world.barrier().or_die("children's barrier");
}

/// Step 1 on a child: the `xchg_only` exchange with the parents' namespace
/// `ns`, which also tells how many parents there are (a child does not know).
fn exchange_with_parents<T: Threading>(ns: &ProcName, engine: &Engine<T>) -> u32 {
    let procs = [whole(&engine.nspace()), ns.clone()];
    let attrs = ConnectAttrs {
        xchg_only: true,
        ..attrs("x")
    };
    match engine.group_connect(&procs, &attrs).or_die("xchg_only") {
        Connected::Exchanged(members) => {
            let size = engine.world().size() as usize;
            let theirs = members.iter().filter(|m| m.nspace == ns.nspace).count();
            ensure!(
                members.len() == size + theirs && theirs > 0,
                "exchange named {members:?}"
            );
            theirs as u32
        }
        Connected::Group(g) => die(format!("xchg_only made group {}", g.id())),
    }
}

/// Steps 1-5 of `parents`, on both sides. `parents_ns` was created first,
/// so its processes come first in every group.
fn together<T: Threading>(
    engine: &Engine<T>,
    procs: &[ProcName],
    parents_ns: &str,
    children_ns: &str,
    parents: u32,
    children: u32,
) {
    let i_am_parent = engine.nspace() == parents_ns;
    let my_world = engine.rank();
    let expect_rank = if i_am_parent {
        my_world
    } else {
        parents + my_world
    };
    let size = parents + children;
    let expect_members: Vec<ProcName> = (0..parents)
        .map(|r| proc(parents_ns, r))
        .chain((0..children).map(|r| proc(children_ns, r)))
        .collect();

    // 1. (The children's exchange ran in exchange_with_parents.)
    if i_am_parent {
        let before = engine.counts().pg.process_groups;
        let attrs = ConnectAttrs {
            xchg_only: true,
            ..attrs("x")
        };
        match engine.group_connect(procs, &attrs).or_die("xchg_only") {
            Connected::Exchanged(members) => ensure!(
                members == expect_members,
                "exchange named {members:?}, expected {expect_members:?}"
            ),
            Connected::Group(g) => die(format!("xchg_only made group {}", g.id())),
        }
        let after = engine.counts().pg.process_groups;
        ensure!(
            after == before + 1,
            "xchg_only: {before} process groups before, {after} after"
        );
    }

    // 2.
    let g1 = connect(engine, procs, &attrs("g1"));
    ensure!(
        g1.size() == size && g1.rank() == expect_rank,
        "g1: rank {} of {}, expected {expect_rank} of {size}",
        g1.rank(),
        g1.size()
    );
    ensure!(
        g1.members() == expect_members,
        "g1 members {:?}, expected {expect_members:?}",
        g1.members()
    );
    ring(g1.comm(), 1);

    // 3.
    let seen = record_events(engine);
    let g2 = connect(
        engine,
        procs,
        &ConnectAttrs {
            notify_each: true,
            ..attrs("g2")
        },
    );
    ensure!(
        g2.id() != g1.id() && g2.rank() == expect_rank && g2.size() == size,
        "g2 {} rank {} of {}; g1 is {}",
        g2.id(),
        g2.rank(),
        g2.size(),
        g1.id()
    );
    for (i, m) in expect_members.iter().enumerate() {
        if i as u32 != expect_rank {
            await_event(
                engine,
                &seen,
                &GroupEvent {
                    group: g2.id().to_string(),
                    kind: GroupEventKind::Connected,
                    proc: m.clone(),
                },
            );
        }
    }
    // Same tag, same peers, two groups: each message stays in its group.
    let next = (g1.rank() + 1) % size;
    let prev = (g1.rank() + size - 1) % size;
    g1.comm().send(b"one", next, 9).or_die("send on g1");
    g2.comm().send(b"two", next, 9).or_die("send on g2");
    let mut buf = [0u8; 3];
    g2.comm()
        .recv(&mut buf, prev as i32, 9)
        .or_die("recv on g2");
    ensure!(&buf == b"two", "g2 received {buf:?}");
    g1.comm()
        .recv(&mut buf, prev as i32, 9)
        .or_die("recv on g1");
    ensure!(&buf == b"one", "g1 received {buf:?}");

    // 4.
    let first = expect_members[0].clone();
    let g2_id = g2.id().to_string();
    if g2.rank() == 0 {
        engine.group_disconnect(g2).or_die("disconnect g2");
        g1.comm().barrier().or_die("barrier after g2's rank 0 left");
    } else {
        g1.comm().barrier().or_die("barrier after g2's rank 0 left");
        await_event(
            engine,
            &seen,
            &GroupEvent {
                group: g2_id,
                kind: GroupEventKind::Disconnected,
                proc: first,
            },
        );
        engine.group_disconnect(g2).or_die("disconnect g2");
    }

    // 5.
    g1.comm().barrier().or_die("barrier on g1");
    engine.group_disconnect(g1).or_die("disconnect g1");
}

pub fn jobs<T: Threading>(engine: &Engine<T>, side: &str, service: &str) {
    let other = match side {
        "a" => "b",
        "b" => "a",
        _ => die(format!("jobs: side {side:?} is neither a nor b")),
    };
    let world = engine.world();
    world.barrier().or_die("barrier");
    let base = engine.counts();
    let ours = engine.qualified_nspace().or_die("qualified_nspace");
    if world.rank() == 0 {
        let card = format!("{}/{ours}", world.size());
        engine
            .publish_name(&format!("{service}-{side}"), &card)
            .or_die("publish_name");
    }
    let start = Instant::now();
    let card = loop {
        if let Ok(card) = engine.lookup_name(&format!("{service}-{other}")) {
            break card;
        }
        // The other job starts on its own, perhaps much later under load.
        ensure!(
            start.elapsed() < OTHER_JOB_DEADLINE,
            "job {other} published nothing within {OTHER_JOB_DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let (size, theirs) = card
        .split_once('/')
        .unwrap_or_else(|| die(format!("job {other} published {card:?}")));
    let their_size: u32 = size.parse().or_die("the other job's size");
    let theirs: ProcName = format!("{theirs}:*").parse().or_die("the other job's id");
    let mine: ProcName = format!("{ours}:*").parse().or_die("our own id");
    let procs = [mine.clone(), theirs.clone()];
    if side == "a" {
        together(
            engine,
            &procs,
            &mine.nspace,
            &theirs.nspace,
            world.size(),
            their_size,
        );
    } else {
        let parents = exchange_with_parents(&theirs, engine);
        ensure!(
            parents == their_size,
            "the exchange named {parents} processes of job a, which has {their_size}"
        );
        together(
            engine,
            &procs,
            &theirs.nspace,
            &mine.nspace,
            their_size,
            world.size(),
        );
    }
    world.barrier().or_die("final barrier");
    if world.rank() == 0 {
        engine
            .unpublish_name(&format!("{service}-{side}"))
            .or_die("unpublish_name");
    }
    let now = engine.counts();
    ensure!(
        now.pg == base.pg && now.vcrts == base.vcrts,
        "after the groups: counts {now:?}, baseline {base:?}"
    );
}
