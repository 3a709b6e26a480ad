//! `group_check`'s modes within one job: `flat` (the whole job, then
//! all but rank 0), `optional` (a member gone before the connect),
//! `term` (a member that exits connected) and `unserved` (no process
//! manager support).

use rivet::{ConnectAttrs, Engine, GroupEvent, GroupEventKind, ProcName, Threading};
use rivet_tests::ensure;
use rivet_tests::rank_check::{die, OrDie};

use crate::support::*;

pub fn flat<T: Threading>(engine: &Engine<T>) {
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

pub fn optional<T: Threading>(engine: &Engine<T>) {
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

pub fn term<T: Threading>(engine: &Engine<T>, early: bool) {
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

pub fn unserved<T: Threading>(engine: &Engine<T>) {
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
