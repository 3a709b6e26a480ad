//! A test rank for group connect (seed 004), run by `tests/group.rs` under
//! `rivetrun`. `group_check MODE`; every mode checks what it gets and exits
//! 1 with a `group_check rank R: FAILED: ...` line at the first mismatch; a
//! rank that passes prints `group_check MODE OK rank R of N at thread
//! level L` last. Every mode runs on one thread, on an `Engine<Local>`
//! initialised at SINGLE: the level provided must be the one
//! `RIVET_THREAD_LEVEL` asks for (unset: SINGLE), spawned children included.
//!
//! - `parents N` (any size P): rank 0 spawns N copies in `child` mode, so
//!   the processes span two process groups. The groups swap namespace
//!   names over the spawn intercommunicator and disconnect it. Then, over
//!   `parents:*` and `children:*` (listed in opposite orders on the two
//!   sides, ours cluster-qualified):
//!   1. `xchg_only` (id "x"): no group; the other process group is known;
//!   2. group "g1": size P+N, parents first, ranks checked; a ring;
//!   3. group "g2" with `notify_each`: another id and context; a
//!      `Connected` event for every other member; messages on g1 and g2
//!      with the same tag do not mix;
//!   4. g2's rank 0 disconnects; every other member sees its
//!      `Disconnected` event, then disconnects;
//!   5. g1 is disconnected; the counts are back at the baseline.
//! - `child` (spawned only): the mirror of `parents`.
//! - `optional` (3, `--disable-auto-cleanup`): rank 2 aborts at once; ranks
//!   0 and 1 make an `optional` group over the whole job (size 2), run a
//!   ring on it, and a group connect without `optional` fails with an
//!   error naming rank 2 (no hang).
//! - `term [early]` (3): all three connect (with `early_term_allowed` when
//!   `early`); rank 2 then finalizes and exits without disconnecting. The
//!   others get a `Terminated` event for it, and a receive from it on the
//!   group is complete with an error at its first test (whichever worker
//!   the group runs on), instead of waiting; they disconnect.
//!   Without `early`, rivetrun must fail the job.
//! - `flat` (any size, also under a PMIx server): the job connects as
//!   group "f1" (size N, new rank = world rank; named cluster-qualified
//!   where the process manager names a cluster), runs a ring on it, then
//!   ranks 1.. connect as "f2" (rank 0 not named), run a ring there; both
//!   groups are disconnected.
//! - `jobs a|b SERVICE` (two separately started jobs, both rivetrun with
//!   one `--nameserver`; job `a` registered first): rank 0 of each
//!   publishes `SIZE/CLUSTER:NSPACE` as `SERVICE-a` or `SERVICE-b` and
//!   every rank looks up the other's. Then steps 1-5 of `parents` across
//!   the two jobs, job `a` in the parents' place, every name
//!   cluster-qualified (the jobs may name different clusters); the counts
//!   are back at the baseline after.
//! - `unserved` (under mpiexec.hydra): group connect is refused with a
//!   clear error before anything reaches Hydra (which would end the job).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rivet::{
    Comm, ConnectAttrs, Connected, Engine, Group, GroupEvent, GroupEventKind, Local, ProcName,
    ThreadLevel, Threading,
};
use rivet_tests::ensure;
use rivet_tests::rank_check::{self, die, OrDie};

const DEADLINE: Duration = Duration::from_secs(20);
/// How long `jobs` waits for the other job's name.
const OTHER_JOB_DEADLINE: Duration = Duration::from_secs(90);

fn main() {
    rank_check::start("group_check");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().cloned().unwrap_or_default();
    let arg = args.get(1).cloned().unwrap_or_default();
    // One thread per process in every mode (event handlers run on the
    // thread that polls): an `Engine<Local>` at SINGLE, no lock unless
    // RIVET_THREAD_LEVEL=multiple raises it; `init` checks the level.
    let engine = rank_check::init::<Local>(ThreadLevel::Single);
    let world = engine.world();
    match mode.as_str() {
        "parents" => parents(&engine, arg.parse().unwrap_or(2)),
        "child" => child(&engine),
        "optional" => optional(&engine),
        "term" => term(&engine, arg == "early"),
        "unserved" => unserved(&engine),
        "flat" => flat(&engine),
        "jobs" => jobs(&engine, &arg, args.get(2).map_or("", String::as_str)),
        other => die(format!("unknown mode {other:?}")),
    }
    let (rank, size) = (world.rank(), world.size());
    let level = engine.thread_level();
    drop(world);
    engine.finalize().or_die("finalize");
    println!("group_check {mode} OK rank {rank} of {size} at thread level {level}");
}

fn whole(nspace: &str) -> ProcName {
    ProcName {
        cluster: None,
        nspace: nspace.to_string(),
        rank: None,
    }
}

fn proc(nspace: &str, rank: u32) -> ProcName {
    ProcName {
        rank: Some(rank),
        ..whole(nspace)
    }
}

fn attrs(id: &str) -> ConnectAttrs {
    ConnectAttrs {
        id: Some(id.to_string()),
        ..ConnectAttrs::default()
    }
}

fn connect<T: Threading>(engine: &Engine<T>, procs: &[ProcName], attrs: &ConnectAttrs) -> Group<T> {
    match engine.group_connect(procs, attrs).or_die("group_connect") {
        Connected::Group(g) => g,
        Connected::Exchanged(_) => die("group_connect without xchg_only made no group"),
    }
}

/// Events seen by this process's handler.
fn record_events<T: Threading>(engine: &Engine<T>) -> Arc<Mutex<Vec<GroupEvent>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    engine.on_group_event(move |e| sink.lock().unwrap().push(e.clone()));
    seen
}

/// Poll events until `want` has been seen (bounded).
fn await_event<T: Threading>(engine: &Engine<T>, seen: &Mutex<Vec<GroupEvent>>, want: &GroupEvent) {
    let start = Instant::now();
    loop {
        engine.poll_group_events().or_die("poll_group_events");
        if seen.lock().unwrap().contains(want) {
            return;
        }
        ensure!(
            start.elapsed() < DEADLINE,
            "no event {want:?} within {DEADLINE:?}; seen {:?}",
            seen.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Everyone sends its group rank to the next and checks what the previous sent.
fn ring<T: Threading>(comm: &Comm<T>, tag: i32) {
    let (rank, size) = (comm.rank(), comm.size());
    let next = (rank + 1) % size;
    let prev = (rank + size - 1) % size;
    let mut got = [0u8; 4];
    let mine = rank.to_le_bytes();
    comm.scope(|s| {
        let send = s.isend(&mine, next, tag)?;
        s.irecv(&mut got, prev as i32, tag)?
            .wait()?
            .check()
            .map_err(|e| rivet::Error::Failed(e.to_string()))?;
        send.wait()?;
        Ok::<(), rivet::Error>(())
    })
    .or_die("ring");
    ensure!(
        u32::from_le_bytes(got) == prev,
        "ring: got {} from group rank {prev}",
        u32::from_le_bytes(got)
    );
}

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

fn parents<T: Threading>(engine: &Engine<T>, n: u32) {
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

fn child<T: Threading>(engine: &Engine<T>) {
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

fn jobs<T: Threading>(engine: &Engine<T>, side: &str, service: &str) {
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

fn flat<T: Threading>(engine: &Engine<T>) {
    let world = engine.world();
    let (rank, size) = (world.rank(), world.size());
    let ns = engine.nspace();
    // Named as other jobs would name us: cluster-qualified where the
    // process manager names a cluster (rivetrun, over PMI-1 or PMIx).
    let qualified = engine.qualified_nspace().or_die("qualified_nspace");
    let everyone: ProcName = format!("{qualified}:*").parse().or_die("our own id");
    let g = connect(engine, &[everyone], &attrs("f1"));
    ensure!(
        g.size() == size && g.rank() == rank,
        "f1: rank {} of {}, expected {rank} of {size}",
        g.rank(),
        g.size()
    );
    let all: Vec<ProcName> = (0..size).map(|r| proc(&ns, r)).collect();
    ensure!(g.members() == all, "f1 members {:?}", g.members());
    ring(g.comm(), 1);
    if rank > 0 && size > 2 {
        // Named one by one, in reverse: the same group for everyone.
        let some: Vec<ProcName> = (1..size).rev().map(|r| proc(&ns, r)).collect();
        let h = connect(engine, &some, &attrs("f2"));
        ensure!(
            h.size() == size - 1 && h.rank() == rank - 1,
            "f2: rank {} of {}",
            h.rank(),
            h.size()
        );
        ring(h.comm(), 2);
        engine.group_disconnect(h).or_die("disconnect f2");
    }
    engine.group_disconnect(g).or_die("disconnect f1");
}

fn optional<T: Threading>(engine: &Engine<T>) {
    let world = engine.world();
    ensure!(world.size() == 3, "optional needs 3 ranks");
    if world.rank() == 2 {
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: setrlimit reads the struct we pass; no core file is left.
        unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
        std::process::abort();
    }
    let everyone = [whole(&engine.nspace())];
    let g = connect(
        engine,
        &everyone,
        &ConnectAttrs {
            optional: true,
            ..attrs("opt")
        },
    );
    ensure!(
        g.size() == 2 && g.rank() == world.rank(),
        "optional group: rank {} of {}",
        g.rank(),
        g.size()
    );
    let ns = engine.nspace();
    ensure!(
        g.members() == [proc(&ns, 0), proc(&ns, 1)],
        "optional group members {:?}",
        g.members()
    );
    ring(g.comm(), 1);
    match engine.group_connect(&everyone, &attrs("strict")) {
        Ok(_) => die("a group connect without optional succeeded without rank 2"),
        Err(e) => {
            let text = e.to_string();
            ensure!(
                text.contains(&format!("{ns}:2")),
                "the error does not name rank 2: {text}"
            );
            println!(
                "group_check optional: rank {} refused: {text}",
                world.rank()
            );
        }
    }
    engine.group_disconnect(g).or_die("disconnect");
}

fn term<T: Threading>(engine: &Engine<T>, early: bool) {
    let world = engine.world();
    ensure!(world.size() == 3, "term needs 3 ranks");
    let seen = record_events(engine);
    let g = connect(
        engine,
        &[whole(&engine.nspace())],
        &ConnectAttrs {
            early_term_allowed: early,
            ..attrs("t")
        },
    );
    ensure!(g.size() == 3, "group of {}", g.size());
    g.comm().barrier().or_die("barrier");
    if world.rank() == 2 {
        // Leave without disconnecting: main finalizes and exits.
        std::mem::forget(g);
        return;
    }
    let dead = proc(&engine.nspace(), 2);
    await_event(
        engine,
        &seen,
        &GroupEvent {
            group: g.id().to_string(),
            kind: GroupEventKind::Terminated,
            proc: dead,
        },
    );
    // The event failed the member's VC on every worker, the one the
    // group's communicator runs on included: a receive from it fails at
    // its first test, whatever the transport has noticed yet.
    let mut buf = [0u8; 1];
    let (first, outcome) = g
        .comm()
        .scope(|s| {
            let mut r = s.irecv(&mut buf, 2, 5)?;
            let first = r.test();
            Ok::<_, rivet::Error>((first, r.wait()))
        })
        .or_die("irecv from the terminated member");
    ensure!(
        !matches!(first, Ok(None)),
        "a receive from the terminated member was still pending after the event"
    );
    ensure!(
        outcome.as_ref().map_or(true, |st| st.check().is_err()),
        "a receive from the terminated member succeeded: {outcome:?}"
    );
    engine.group_disconnect(g).or_die("disconnect");
}

fn unserved<T: Threading>(engine: &Engine<T>) {
    match engine.group_connect(&[whole(&engine.nspace())], &attrs("h")) {
        Ok(_) => die("group connect succeeded under a process manager that cannot serve it"),
        Err(rivet::Error::Unsupported(why)) => {
            if engine.rank() == 0 {
                println!("group_check unserved: refused: {why}");
            }
        }
        Err(e) => die(format!("group connect failed with the wrong error: {e}")),
    }
    engine.world().barrier().or_die("barrier");
}
