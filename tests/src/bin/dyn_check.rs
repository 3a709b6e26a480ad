//! A test rank for dynamic processes, run by `tests/dynamic.rs` under
//! `rivetrun`. `dyn_check MODE [ARGS]`; every mode checks what it gets and
//! exits 1 with a `dyn_check rank R: FAILED: ...` line at the first
//! mismatch; a rank that passes prints `dyn_check MODE OK rank R of N at
//! thread level L` last. Every mode runs on one thread, on an
//! `Engine<Local>` initialised at SINGLE: the level provided must be the
//! one `RIVET_THREAD_LEVEL` asks for (unset: SINGLE), spawned children
//! included.
//!
//! - `refcounts` (2): seed 000's reference-count table step by step: dup,
//!   free, disconnect, and accept/connect between the two ranks of one job
//!   over COMM_SELF, then disconnect; after each, `Engine::counts()` is back
//!   at its baseline.
//! - `server NAME|file:PATH` (any) and `client NAME|file:PATH` (any): two
//!   separately started jobs. The server opens a port and publishes it under
//!   NAME (or writes it to PATH), accepts; the client looks it up (retrying
//!   while it is not there yet) and connects. Both then exchange a message
//!   between every pair across the groups in both directions, merge (server
//!   first), check ranks and run a barrier and a ring exchange on the merged
//!   communicator, disconnect both, and check the counts are back at the
//!   baseline.
//! - `spawn N` (any): rank 0 spawns N copies of this program in `child`
//!   mode; data flows both ways between every parent and child; parents
//!   disconnect; then a spawn of a program that does not exist must fail
//!   on every parent, which go on (a barrier) and exit 0 (`spawn N
//!   nomissing` leaves that out: Hydra and Open MPI's `mpirun` end the
//!   whole job on it). `spawn N refused`: the process manager cannot spawn
//!   (Slurm's PMIx plugin): the first spawn must fail on every parent,
//!   with rank 0 printing `dyn_check spawn: refused: ERROR`.
//! - `child` (spawned only): the mirror of `spawn`; each child prints
//!   `dyn_check child R bootstrap: HOW` (`rivet-bench info`'s wording)
//!   first.
//! - `badports` (2): a garbage port name, a port nobody listens on, and a
//!   closed port: connect fails on every rank of the connecting group, and
//!   the job goes on.
//! - `names`: publish, duplicate publish (error), lookup, unpublish, lookup
//!   of a missing name (error), unpublish of a missing name (error).
//!   `names pmix`: without the duplicate publish and the second unpublish,
//!   which a PMIx server may accept (Open MPI's does: a republish, and an
//!   unpublish of nothing).

use std::time::{Duration, Instant};

use rivet::{Comm, Counts, Engine, Local, SpawnCommand, ThreadLevel, Threading};
use rivet_tests::ensure;
use rivet_tests::rank_check::{self, die, OrDie};

fn main() {
    rank_check::start("dyn_check");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().cloned().unwrap_or_default();
    let arg = args.get(1).cloned().unwrap_or_default();
    // One thread per process in every mode: an `Engine<Local>` at SINGLE
    // (no lock unless RIVET_THREAD_LEVEL=multiple raises it; `init` checks
    // the level is the one asked for).
    let engine = rank_check::init::<Local>(ThreadLevel::Single);
    let world = engine.world();
    match mode.as_str() {
        "refcounts" => refcounts(&engine),
        "server" => server(&engine, &arg),
        "client" => client(&engine, &arg),
        "spawn" => spawn(
            &engine,
            arg.parse().unwrap_or(3),
            args.get(2).map(String::as_str),
        ),
        "child" => child(&engine),
        "names" => names(&engine, arg != "pmix"),
        "badports" => badports(&engine),
        other => die(format!("unknown mode {other:?}")),
    }
    let (rank, size) = (world.rank(), world.size());
    let level = engine.thread_level();
    drop(world);
    engine.finalize().or_die("finalize");
    println!("dyn_check {mode} OK rank {rank} of {size} at thread level {level}");
}

/// The counts that must come back after every dynamic operation.
fn expect_baseline<T: Threading>(engine: &Engine<T>, base: &Counts, after: &str) {
    let now = engine.counts();
    ensure!(
        now.pg == base.pg && now.vcrts == base.vcrts && now.ports == base.ports,
        "after {after}: counts {now:?}, baseline {base:?}"
    );
}

fn refcounts<T: Threading>(engine: &Engine<T>) {
    let world = engine.world();
    ensure!(world.size() == 2, "refcounts needs 2 ranks");
    world.barrier().or_die("barrier");
    let base = engine.counts();
    ensure!(
        base.pg.process_groups == 1 && base.pg.foreign_vcs == 0 && base.vcrts == 0,
        "baseline {base:?}"
    );

    // dup shares the VC table; free (drop) gives nothing back to free.
    let dup = world.dup().or_die("dup");
    ensure!(
        engine.counts().vcrts == base.vcrts,
        "dup made a new VC table"
    );
    dup.barrier().or_die("barrier on dup");
    drop(dup);
    expect_baseline(engine, &base, "dup + free");
    let dup = world.dup().or_die("dup");
    dup.disconnect().or_die("disconnect of a dup");
    expect_baseline(engine, &base, "dup + disconnect");

    // accept/connect inside one job, over COMM_SELF: rank 0 accepts.
    let me = engine.self_comm();
    let inter = if world.rank() == 0 {
        let port = engine.open_port().or_die("open_port");
        ensure!(engine.counts().ports == 1, "open port not counted");
        world.send(port.as_bytes(), 1, 7).or_die("send port");
        let inter = me.accept(&port, 0).or_die("accept");
        engine.close_port(&port).or_die("close_port");
        ensure!(
            engine.close_port(&port).is_err(),
            "closing a closed port must fail"
        );
        inter
    } else {
        let mut buf = vec![0u8; 4096];
        let st = world.recv(&mut buf, 0, 7).or_die("recv port");
        let port = String::from_utf8_lossy(&buf[..st.count]).into_owned();
        me.connect(&port, 0).or_die("connect")
    };
    ensure!(
        inter.is_inter() && inter.size() == 1 && inter.remote_size() == Some(1),
        "intercomm over SELF: size {} remote {:?}",
        inter.size(),
        inter.remote_size()
    );
    let c = engine.counts();
    ensure!(
        c.vcrts == base.vcrts + 1 && c.pg.process_groups == 1 && c.pg.temp_vcs == 0,
        "inside one job the remote group is our own PG and the temporary VC is gone: {c:?}"
    );
    exchange_across(&inter, world.rank());
    let merged = inter.merge(world.rank() == 1).or_die("merge");
    ensure!(
        merged.size() == 2 && merged.rank() == world.rank(),
        "merged rank {} of {}",
        merged.rank(),
        merged.size()
    );
    merged.barrier().or_die("merged barrier");
    merged.disconnect().or_die("disconnect merged");
    inter.disconnect().or_die("disconnect intercomm");
    expect_baseline(engine, &base, "accept/connect + disconnect");
    world.barrier().or_die("final barrier");
}

/// Every rank sends to every remote rank and receives from every one;
/// payloads name sender and receiver.
fn exchange_across<T: Threading>(inter: &Comm<T>, my_world_rank: u32) {
    let remote = inter
        .remote_size()
        .unwrap_or_else(|| die("not an intercomm"));
    let me = inter.rank();
    let msgs: Vec<Vec<u8>> = (0..remote)
        .map(|r| payload(me, r, 1000 + 37 * r as usize))
        .collect();
    inter
        .scope(|s| -> rivet::Result<()> {
            let mut sends = Vec::new();
            for (r, m) in msgs.iter().enumerate() {
                sends.push(s.isend(m, r as u32, 11)?);
            }
            for r in 0..remote {
                let mut buf = vec![0u8; 1 << 16];
                let st = inter.recv(&mut buf, r as i32, 11)?;
                let want = payload(r, me, 1000 + 37 * me as usize);
                ensure!(
                    buf[..st.count] == want[..],
                    "message from remote rank {r} to {me} (world rank {my_world_rank}) is wrong ({} bytes)",
                    st.count
                );
            }
            for send in sends {
                send.wait()?;
            }
            Ok(())
        })
        .or_die("exchange across the intercommunicator");
    // A large message (rendezvous) from local rank 0 to remote rank 0.
    let big = payload(7, 9, 3 << 20);
    if me == 0 {
        let mut buf = vec![0u8; big.len()];
        inter
            .scope(|s| -> rivet::Result<()> {
                let send = s.isend(&big, 0, 12)?;
                inter.recv(&mut buf, 0, 12)?;
                send.wait()?;
                Ok(())
            })
            .or_die("large exchange");
        ensure!(buf == big, "3 MiB message across the groups is wrong");
    }
}

/// A pseudo-random stream seeded by (sender, receiver, length): no period
/// a misplaced piece could hide in.
fn payload(from: u32, to: u32, len: usize) -> Vec<u8> {
    let mut x = ((from as u64) << 40 ^ (to as u64) << 20 ^ len as u64)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Where the server's port is found: a published name or a file.
enum Rendezvous {
    Name(String),
    File(String),
}

fn rendezvous(arg: &str) -> Rendezvous {
    match arg.strip_prefix("file:") {
        Some(path) => Rendezvous::File(path.to_string()),
        None if !arg.is_empty() => Rendezvous::Name(arg.to_string()),
        None => die("server/client need NAME or file:PATH"),
    }
}

fn server<T: Threading>(engine: &Engine<T>, arg: &str) {
    let world = engine.world();
    world.barrier().or_die("barrier");
    let base = engine.counts();
    let how = rendezvous(arg);
    let port = if world.rank() == 0 {
        let port = engine.open_port().or_die("open_port");
        match &how {
            Rendezvous::Name(name) => engine.publish_name(name, &port).or_die("publish_name"),
            Rendezvous::File(path) => {
                let tmp = format!("{path}.tmp");
                std::fs::write(&tmp, &port).or_die("write port file");
                std::fs::rename(&tmp, path).or_die("rename port file");
            }
        }
        port
    } else {
        String::new()
    };
    let inter = world.accept(&port, 0).or_die("accept");
    if world.rank() == 0 {
        if let Rendezvous::Name(name) = &how {
            engine.unpublish_name(name).or_die("unpublish_name");
        }
        engine.close_port(&port).or_die("close_port");
    }
    across_jobs(engine, &world, inter, false, &base);
}

fn client<T: Threading>(engine: &Engine<T>, arg: &str) {
    let world = engine.world();
    world.barrier().or_die("barrier");
    let base = engine.counts();
    let port = if world.rank() == 0 {
        let how = rendezvous(arg);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let found = match &how {
                Rendezvous::Name(name) => engine.lookup_name(name).ok(),
                Rendezvous::File(path) => std::fs::read_to_string(path).ok(),
            };
            if let Some(port) = found {
                break port;
            }
            ensure!(
                Instant::now() < deadline,
                "the server's port never appeared"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    } else {
        String::new()
    };
    let inter = world.connect(&port, 0).or_die("connect");
    across_jobs(engine, &world, inter, true, &base);
}

fn across_jobs<T: Threading>(
    engine: &Engine<T>,
    world: &Comm<T>,
    inter: Comm<T>,
    is_client: bool,
    base: &Counts,
) {
    let remote = inter
        .remote_size()
        .unwrap_or_else(|| die("not an intercomm"));
    let c = engine.counts();
    ensure!(
        c.pg.process_groups == 2 && c.pg.referenced_vcs == remote as usize,
        "connected to {remote} ranks of one other group, counts {c:?}"
    );
    exchange_across(&inter, world.rank());
    let merged = inter.merge(is_client).or_die("merge");
    let (server_size, client_size) = if is_client {
        (remote, world.size())
    } else {
        (world.size(), remote)
    };
    let want_rank = if is_client {
        server_size + world.rank()
    } else {
        world.rank()
    };
    ensure!(
        merged.size() == server_size + client_size && merged.rank() == want_rank,
        "merged: rank {} of {}, want {want_rank} of {}",
        merged.rank(),
        merged.size(),
        server_size + client_size
    );
    merged
        .barrier()
        .or_die("barrier on the merged communicator");
    // Ring on the merged communicator: everyone sends its merged rank on.
    let n = merged.size();
    let me = merged.rank();
    let mut got = [0u8; 4];
    let mine = me.to_le_bytes();
    merged
        .scope(|s| -> rivet::Result<()> {
            let send = s.isend(&mine, (me + 1) % n, 5)?;
            merged.recv(&mut got, ((me + n - 1) % n) as i32, 5)?;
            send.wait()?;
            Ok(())
        })
        .or_die("ring on the merged communicator");
    ensure!(
        u32::from_le_bytes(got) == (me + n - 1) % n,
        "ring: got {}, want {}",
        u32::from_le_bytes(got),
        (me + n - 1) % n
    );
    let dup = merged.dup().or_die("dup of the merged communicator");
    dup.barrier().or_die("barrier on its dup");
    drop(dup);
    merged.disconnect().or_die("disconnect merged");
    let c = engine.counts();
    ensure!(
        c.pg.process_groups == 2,
        "the intercommunicator still holds the other group: {c:?}"
    );
    inter.disconnect().or_die("disconnect intercomm");
    expect_baseline(engine, base, "connect/accept across jobs + disconnect");
    let c = engine.counts();
    ensure!(c.pg.foreign_vcs == 0, "foreign VCs left: {c:?}");
    world.barrier().or_die("final barrier");
}

fn spawn<T: Threading>(engine: &Engine<T>, n: u32, variant: Option<&str>) {
    let world = engine.world();
    world.barrier().or_die("barrier");
    let base = engine.counts();
    let me = std::env::current_exe().or_die("current_exe");
    let me = me.to_string_lossy().into_owned();
    if variant == Some("refused") {
        match world.spawn(&me, &["child"], n, 0) {
            Ok(_) => die("the process manager was expected to refuse the spawn"),
            Err(e) if world.rank() == 0 => println!("dyn_check spawn: refused: {e}"),
            Err(_) => {}
        }
        expect_baseline(engine, &base, "a refused spawn");
        world.barrier().or_die("barrier after the refused spawn");
        return;
    }
    let children = world.spawn(&me, &["child"], n, 0).or_die("spawn");
    ensure!(
        children.remote_size() == Some(n),
        "spawned {n}, remote group has {:?}",
        children.remote_size()
    );
    ensure!(engine.parent().is_none(), "a parent must not have a parent");
    exchange_across(&children, world.rank());
    children.disconnect().or_die("disconnect from the children");
    expect_baseline(engine, &base, "spawn + disconnect");
    if variant == Some("nomissing") {
        return;
    }

    // A program that does not exist: an error on every parent, no hang.
    let missing = world.spawn_multiple(
        &[
            SpawnCommand::new(&me, &["child"], 1),
            SpawnCommand::new("/nonexistent/rivet-no-such-program", &[], 2),
        ],
        0,
    );
    match missing {
        Ok(_) => die("spawn of a missing program succeeded"),
        Err(e) => {
            if world.rank() == 0 {
                println!("dyn_check spawn: missing program refused: {e}");
            }
        }
    }
    expect_baseline(engine, &base, "a failed spawn");
    world.barrier().or_die("barrier after the failed spawn");
}

fn child<T: Threading>(engine: &Engine<T>) {
    let world = engine.world();
    let info = engine.info();
    let how = (info.items.iter())
        .find(|(k, _)| k == "bootstrap")
        .map_or("unknown", |(_, v)| v.as_str());
    println!("dyn_check child {} bootstrap: {how}", world.rank());
    let parent = engine
        .parent()
        .unwrap_or_else(|| die("a spawned process has no parent"));
    ensure!(
        parent.is_inter(),
        "the parent communicator is not an intercommunicator"
    );
    exchange_across(&parent, world.rank());
    parent.disconnect().or_die("disconnect from the parent");
    world.barrier().or_die("children's barrier");
}

fn names<T: Threading>(engine: &Engine<T>, strict: bool) {
    let world = engine.world();
    if world.rank() == 0 {
        let port = engine.open_port().or_die("open_port");
        engine
            .publish_name("dyn-check-svc", &port)
            .or_die("publish");
        if strict {
            ensure!(
                engine.publish_name("dyn-check-svc", "other").is_err(),
                "a duplicate publish must fail"
            );
        }
        let got = engine.lookup_name("dyn-check-svc").or_die("lookup");
        ensure!(got == port, "lookup gave {got:?}, published {port:?}");
        engine.unpublish_name("dyn-check-svc").or_die("unpublish");
        ensure!(
            engine.lookup_name("dyn-check-svc").is_err(),
            "lookup of an unpublished name must fail"
        );
        if strict {
            ensure!(
                engine.unpublish_name("dyn-check-svc").is_err(),
                "unpublish of a missing name must fail"
            );
        }
        engine.close_port(&port).or_die("close_port");
    }
    world.barrier().or_die("barrier");
}

fn badports<T: Threading>(engine: &Engine<T>) {
    let world = engine.world();
    ensure!(world.size() == 2, "badports needs 2 ranks");
    let base = engine.counts();
    for bad in ["garbage", "rivet-port:1:tcp:127.0.0.1:1"] {
        match world.connect(bad, 0) {
            Ok(_) => die(format!("connect to {bad:?} succeeded")),
            Err(e) => println!(
                "dyn_check badports: rank {} connect {bad:?}: {e}",
                world.rank()
            ),
        }
    }
    // A port that was open and is closed again.
    if world.rank() == 0 {
        let port = engine.open_port().or_die("open_port");
        engine.close_port(&port).or_die("close_port");
        world.send(port.as_bytes(), 1, 3).or_die("send port");
    } else {
        let mut buf = vec![0u8; 4096];
        let st = world.recv(&mut buf, 0, 3).or_die("recv port");
        let port = String::from_utf8_lossy(&buf[..st.count]).into_owned();
        match engine.self_comm().connect(&port, 0) {
            Ok(_) => die("connect to a closed port succeeded"),
            Err(e) => println!("dyn_check badports: closed port refused: {e}"),
        }
    }
    world.barrier().or_die("barrier");
    let now = engine.counts();
    ensure!(
        now.pg == base.pg && now.ports == 0 && now.vcrts == base.vcrts,
        "after refused connects: {now:?}, baseline {base:?}"
    );
}
