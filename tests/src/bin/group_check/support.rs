//! What the modes of `group_check` share: process names, connect
//! attributes, a group connect that must make a group, group events
//! recorded and awaited, and a ring over a communicator.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rivet::{Comm, ConnectAttrs, Connected, Engine, Group, GroupEvent, ProcName, Threading};
use rivet_tests::ensure;
use rivet_tests::rank_check::{die, OrDie};

/// How long an awaited event may take.
pub const DEADLINE: Duration = Duration::from_secs(20);

pub fn whole(nspace: &str) -> ProcName {
    ProcName {
        cluster: None,
        nspace: nspace.to_string(),
        rank: None,
    }
}

pub fn proc(nspace: &str, rank: u32) -> ProcName {
    ProcName {
        rank: Some(rank),
        ..whole(nspace)
    }
}

pub fn attrs(id: &str) -> ConnectAttrs {
    ConnectAttrs {
        id: Some(id.to_string()),
        ..ConnectAttrs::default()
    }
}

pub fn connect<T: Threading>(
    engine: &Engine<T>,
    procs: &[ProcName],
    attrs: &ConnectAttrs,
) -> Group<T> {
    match engine.group_connect(procs, attrs).or_die("group_connect") {
        Connected::Group(g) => g,
        Connected::Exchanged(_) => die("group_connect without xchg_only made no group"),
    }
}

/// Events seen by this process's handler.
pub fn record_events<T: Threading>(engine: &Engine<T>) -> Arc<Mutex<Vec<GroupEvent>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    engine.on_group_event(move |e| sink.lock().unwrap().push(e.clone()));
    seen
}

/// Poll events until `want` has been seen (bounded).
pub fn await_event<T: Threading>(
    engine: &Engine<T>,
    seen: &Mutex<Vec<GroupEvent>>,
    want: &GroupEvent,
) {
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
pub fn ring<T: Threading>(comm: &Comm<T>, tag: i32) {
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
