//! Peers that die or finish early: `kill`, `shmkill`, `netkill`, `readkill`,
//! `panic`, `early_exit`, `hang` (the launcher-death tests) and a rank killed
//! before its engine starts.

use std::io::Write;

use rivet::{Comm, MsgError, Threading, ANY_SOURCE, ANY_TAG};
use rivet_tests::ensure;
use rivet_tests::rank_check::{die, OrDie};

use crate::check::{check_by_checksum, message, ok_status, same_bytes, sized_pattern};

pub(crate) fn kill<T: Threading>(world: &Comm<T>) {
    let me = world.rank();
    world.barrier().or_die("barrier");
    if me == 2 {
        let mut b = [0u8; 8];
        for s in [0, 1] {
            ok_status("ready", &world.recv(&mut b, s, 1).or_die("recv ready"));
        }
        println!("engine_check kill: rank 2 raises SIGKILL");
        let _ = std::io::stdout().flush();
        // SAFETY: raise(3) takes no pointers.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
        die("still alive after SIGKILL");
    }
    world.send(b"ready", 2, 1).or_die("send ready");
    let mut b = [0u8; 64];
    match world.recv(&mut b, 2, 2) {
        Ok(st) => die(format!("a receive from the killed rank returned {st:?}")),
        Err(e) => {
            // Leave the exit code to the launcher's teardown.
            eprintln!("engine_check rank {me}: the receive from rank 2 failed: {e}");
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
    }
}

/// Rank 2 SIGKILLs itself once ranks 0 and 1 wait on it: rank 0 in a
/// receive from rank 2, rank 1 in an `ANY_SOURCE` receive. Both must fail
/// with `PeerFailed` naming rank 2 (over shared memory nothing breaks: the
/// engine must see the process gone); then ranks 0 and 1 still exchange a
/// message and finalize.
pub(crate) fn shmkill<T: Threading>(world: &Comm<T>) {
    let me = world.rank();
    world.barrier().or_die("barrier");
    let mut b = [0u8; 16];
    if me == 2 {
        for s in [0, 1] {
            ok_status("ready", &world.recv(&mut b, s, 1).or_die("recv ready"));
        }
        println!("engine_check shmkill: rank 2 raises SIGKILL");
        let _ = std::io::stdout().flush();
        // SAFETY: raise(3) takes no pointers.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
        die("still alive after SIGKILL");
    }
    let source = if me == 0 { 2 } else { ANY_SOURCE };
    // The receive is posted before rank 2 may die: it waits for our ready.
    let got = world.scope(|s| {
        let r = s.irecv(&mut b, source, 2)?;
        world.send(b"ready", 2, 1)?;
        r.wait()
    });
    // The failure comes as the request's status (or as the wait's error).
    let failed = match &got {
        Ok(st) => st.error == Some(MsgError::PeerFailed { rank: 2 }),
        Err(rivet::Error::PeerFailed { rank: 2, .. }) => true,
        Err(_) => false,
    };
    ensure!(failed, "the receive from {source} ended with {got:?}");
    println!("engine_check shmkill: rank {me}'s receive from {source} failed: rank 2 failed");
    let other = 1 - me;
    let mut c = [0u8; 8];
    if me == 0 {
        world.send(b"after", other, 7).or_die("send after");
        world.recv(&mut c, other as i32, 8).or_die("recv after");
    } else {
        world.recv(&mut c, other as i32, 7).or_die("recv after");
        world.send(b"after", other, 8).or_die("send after");
    }
    ensure!(&c[..5] == b"after", "got {c:?}");
    println!("engine_check shmkill: rank {me} exchanged a message after the failure");
}

/// Exchange a message around the ring (so every path is up), mark
/// `DIR/ready-RANK`, then wait forever in a receive nobody sends to: only
/// the launcher's death, through the engine, may end this rank. With
/// `release`, wait instead for `DIR/go` to appear, then end normally.
pub(crate) fn hang<T: Threading>(world: &Comm<T>, dir: &std::path::Path, release: bool) {
    let (me, n) = (world.rank(), world.size());
    let mut b = [0u8; 8];
    // Four bytes go eagerly: the send returns before the peer receives.
    world.send(b"ring", (me + 1) % n, 1).or_die("send ring");
    world
        .recv(&mut b, ((me + n - 1) % n) as i32, 1)
        .or_die("recv ring");
    // Every rank's ring message arrived: none waits on a rank that sleeps.
    world.barrier().or_die("barrier after the ring");
    std::fs::write(dir.join(format!("ready-{me}")), b"").or_die("mark ready");
    if release {
        // Progressing meanwhile: connections to this rank get answers.
        while !dir.join("go").exists() {
            let _ = world.iprobe(ANY_SOURCE, ANY_TAG).or_die("iprobe");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        world.barrier().or_die("barrier after go");
        return;
    }
    let got = world.recv(&mut b, ANY_SOURCE, 999);
    die(format!("the receive nobody sends to returned {got:?}"));
}

pub(crate) fn early_exit<T: Threading>(world: &Comm<T>) {
    let me = world.rank();
    let mut b = [0u8; 16];
    match me {
        2 => {
            world.send(b"bye", 0, 1).or_die("send to rank 0");
            world.recv(&mut b, 0, 2).or_die("recv from rank 0");
        }
        1 => {
            // Long enough for rank 2 to finalize and its connection to close.
            std::thread::sleep(std::time::Duration::from_millis(500));
            world.send(b"late", 0, 3).or_die("send to rank 0");
        }
        _ => {
            world.recv(&mut b, 2, 1).or_die("recv from rank 2");
            world.send(b"ok", 2, 2).or_die("send to rank 2");
            let st = world.recv(&mut b, ANY_SOURCE, 3).or_die("ANY_SOURCE recv");
            ensure!(
                st.source == 1 && &b[..st.count] == b"late",
                "the ANY_SOURCE receive got {st:?}"
            );
            println!("engine_check early_exit: rank 0 received from rank 1 after rank 2 finished");
        }
    }
}

pub(crate) fn netkill<T: Threading>(world: &Comm<T>) {
    let me = world.rank();
    match me {
        1 => {
            let mut b = vec![0u8; 1 << 20];
            for i in 0..20 {
                world.recv(&mut b, 0, 1).or_die("recv from rank 0");
                if i == 10 {
                    println!("engine_check netkill: rank 1 raises SIGKILL");
                    let _ = std::io::stdout().flush();
                    // SAFETY: raise(3) takes no pointers.
                    unsafe {
                        libc::raise(libc::SIGKILL);
                    }
                }
            }
            die("still alive after SIGKILL");
        }
        0 => {
            let mut msgs = 0u32;
            let payload: Vec<Vec<u8>> = [100usize, 200_000, 1 << 20]
                .iter()
                .map(|&n| vec![0x5a; n])
                .collect();
            let mut never = [0u8; 8];
            let mut never_any = [0u8; 8];
            let failure = world.scope(|s| {
                // Nothing will ever come from rank 1 on tag 99, nor from
                // anyone on tag 98 (rank 2 sends only tag 4, and only later).
                let posted = s.irecv(&mut never, 1, 99).or_die("irecv");
                let any = s.irecv(&mut never_any, ANY_SOURCE, 98).or_die("irecv any");
                let mut send_error = None;
                for i in 0..1_000_000usize {
                    match world.send(&payload[i % 3], 1, 1) {
                        Ok(()) => msgs += 1,
                        Err(e) => {
                            send_error = Some(e.to_string());
                            break;
                        }
                    }
                }
                let recv_error = match posted.wait() {
                    Ok(st) => match st.error {
                        Some(MsgError::PeerFailed { rank: 1 }) => {
                            "PeerFailed { rank: 1 }".to_string()
                        }
                        other => die(format!(
                            "the posted receive from rank 1 ended with {other:?}"
                        )),
                    },
                    Err(e) => e.to_string(),
                };
                // ARCHITECTURE.md: an ANY_SOURCE receive fails on a netmod
                // peer's death too (any peer could have been its sender).
                let any_error = match any.wait() {
                    Ok(st) if st.error == Some(MsgError::PeerFailed { rank: 1 }) => {
                        "PeerFailed { rank: 1 }".to_string()
                    }
                    Err(e) if e.to_string().contains("rank 1") => e.to_string(),
                    other => die(format!(
                        "the ANY_SOURCE receive ended with {other:?}, not rank 1's failure"
                    )),
                };
                println!("engine_check netkill: the ANY_SOURCE receive: {any_error}");
                (send_error, recv_error)
            });
            let (Some(send_error), recv_error) = failure else {
                die("a million sends to a dead rank all succeeded")
            };
            ensure!(
                send_error.contains("rank 1"),
                "the send error does not name rank 1: {send_error}"
            );
            println!(
                "engine_check netkill: rank 0 sent {msgs} messages, then the send failed: {send_error}; the posted receive: {recv_error}"
            );
            // The rest of the job still works.
            let mut b = [0u8; 16];
            for q in 0..10u32 {
                let m = message(0, 2, q, 3, 16);
                world.send(&m, 2, 3).or_die("send to rank 2");
                world.recv(&mut b, 2, 4).or_die("recv from rank 2");
                check_by_checksum("netkill", &b, 2, 0, q, 4, 16);
            }
            println!(
                "engine_check netkill: rank 0 and rank 2 exchanged 10 messages after the failure"
            );
        }
        _ => {
            let mut b = [0u8; 16];
            for q in 0..10u32 {
                world.recv(&mut b, 0, 3).or_die("recv from rank 0");
                check_by_checksum("netkill", &b, 0, 2, q, 3, 16);
                world
                    .send(&message(2, 0, q, 4, 16), 0, 4)
                    .or_die("send to rank 0");
            }
        }
    }
}

/// `readkill`: rank 1 starts a 48 MiB rendezvous send to rank 0 and kills
/// itself once rank 0 has answered (so the two know each other), while
/// rank 0 pulls the data (read or streamed, as the netmod does it). Rank
/// 0's receive must end: with the whole message (if the pull was quick) or
/// with an error naming rank 1; never a hang.
pub(crate) fn readkill<T: Threading>(world: &Comm<T>) {
    const LEN: usize = 48 << 20;
    match world.rank() {
        1 => {
            let data = sized_pattern(LEN, 7);
            world.scope(|s| {
                let _pending = s.isend(&data, 0, 5).or_die("isend");
                let mut go = [0u8; 1];
                world.recv(&mut go, 0, 6).or_die("recv go");
                println!("engine_check readkill: rank 1 raises SIGKILL");
                let _ = std::io::stdout().flush();
                // SAFETY: raise(3) takes no pointers.
                unsafe {
                    libc::raise(libc::SIGKILL);
                }
            });
            die("still alive after SIGKILL");
        }
        _ => {
            let mut buf = vec![0u8; LEN];
            let ended = world.scope(|s| {
                let big = s.irecv(&mut buf, 1, 5).or_die("irecv");
                world.send(&[1], 1, 6).or_die("send go");
                big.wait()
            });
            let outcome = match ended {
                Ok(st) => match st.error {
                    None => {
                        same_bytes("readkill", &buf, &sized_pattern(LEN, 7));
                        "the whole message (the pull beat the kill)".to_string()
                    }
                    Some(MsgError::PeerFailed { rank: 1 }) => "PeerFailed { rank: 1 }".into(),
                    other => die(format!("the receive from rank 1 ended with {other:?}")),
                },
                Err(e) => {
                    ensure!(
                        e.to_string().contains("rank 1"),
                        "error without rank 1: {e}"
                    );
                    e.to_string()
                }
            };
            println!("engine_check readkill: rank 0's receive ended: {outcome}");
        }
    }
}

/// `readkill dead`: the deterministic case of `readkill`. Rank 1's 48 MiB
/// rendezvous request reaches rank 0 (probed), then rank 1 dies; only
/// once its process is gone does rank 0 post the receive. Nothing of the
/// payload can come any more: the receive must end with `PeerFailed`
/// naming rank 1 (in its status or as the error), never hang or complete.
pub(crate) fn readkill_dead<T: Threading>(world: &Comm<T>) {
    const LEN: usize = 48 << 20;
    match world.rank() {
        1 => {
            let data = sized_pattern(LEN, 7);
            world
                .send(&std::process::id().to_le_bytes(), 0, 7)
                .or_die("send pid");
            world.scope(|s| {
                let _pending = s.isend(&data, 0, 5).or_die("isend");
                world.recv(&mut [0u8; 1], 0, 6).or_die("recv go");
                println!("engine_check readkill: rank 1 raises SIGKILL");
                let _ = std::io::stdout().flush();
                // SAFETY: raise(3) takes no pointers.
                unsafe {
                    libc::raise(libc::SIGKILL);
                }
            });
            die("still alive after SIGKILL");
        }
        _ => {
            let mut pid = [0u8; 4];
            world.recv(&mut pid, 1, 7).or_die("recv pid");
            let pid = u32::from_le_bytes(pid);
            let st = world.probe(1, 5).or_die("probe the request");
            ensure!(st.count == LEN, "probed {st:?}");
            world.send(&[1], 1, 6).or_die("send go");
            // Gone: no /proc entry, or a zombie not yet reaped.
            let gone = || {
                std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
                    s.rsplit(')')
                        .next()
                        .is_some_and(|r| r.trim_start().starts_with('Z'))
                })
            };
            let start = std::time::Instant::now();
            while !gone() {
                ensure!(start.elapsed().as_secs() < 60, "rank 1 ({pid}) did not die");
                // Keep the engine moving ("go" may still sit in a queue);
                // nothing is ever sent on tag 99.
                let _ = world.iprobe(1, 99);
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            let mut buf = vec![0u8; LEN];
            let ended = world.recv(&mut buf, 1, 5);
            let outcome = match ended {
                Ok(st) if st.error == Some(MsgError::PeerFailed { rank: 1 }) => {
                    "PeerFailed { rank: 1 }".to_string()
                }
                Err(rivet::Error::PeerFailed { rank: 1, .. }) => "PeerFailed { rank: 1 }".into(),
                other => die(format!(
                    "the receive from dead rank 1 must end with PeerFailed naming it, not {other:?}"
                )),
            };
            println!("engine_check readkill: rank 0's receive ended: {outcome}");
        }
    }
}

/// `panic`: rank 0 waits until rank 1's 16 MiB rendezvous request has
/// arrived, posts the receive in a scope (it matches at once and the data
/// starts flowing into the buffer through the netmod) and panics. The
/// unwind would free the buffer under the netmod: the engine must abort.
pub(crate) fn panic_mid_rendezvous<T: Threading>(world: &Comm<T>) {
    const LEN: usize = 16 << 20;
    match world.rank() {
        1 => {
            let data = sized_pattern(LEN, 3);
            // Rank 0 dies meanwhile: this fails, or the job ends first.
            let _ = world.send(&data, 0, 5);
            println!("engine_check panic: rank 1's send ended");
        }
        _ => {
            let mut buf = vec![0u8; LEN];
            world.probe(1, 5).or_die("probe");
            world.scope(|s| {
                let _big = s.irecv(&mut buf, 1, 5).or_die("irecv");
                println!("engine_check panic: rank 0 panics with its receive under way");
                let _ = std::io::stdout().flush();
                panic!("engine_check panic: a deliberate panic inside the scope");
            });
            die("the scope returned after a panic");
        }
    }
}

/// `kill early`: rank 2 dies before starting its engine, while the others
/// start theirs (rank 0 has created the node segment, which waits for rank 2
/// to attach).
pub(crate) fn kill_before_init() {
    let env_rank = std::env::var("PMI_RANK")
        .ok()
        .and_then(|r| r.parse::<u32>().ok());
    if env_rank == Some(2) {
        // Best effort: give rank 0 the time to create the segment.
        let segments = || -> Vec<String> {
            std::fs::read_dir("/dev/shm")
                .map(|d| {
                    d.flatten()
                        .filter_map(|e| e.file_name().into_string().ok())
                        .filter(|n| n.starts_with("rivet-"))
                        .collect()
                })
                .unwrap_or_default()
        };
        // The engine names segments after rivetrun's job id.
        let job: String = std::env::var("RIVET_JOBID")
            .unwrap_or_default()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let ours = format!("rivet-{job}-");
        let before = segments();
        let start = std::time::Instant::now();
        let seen = loop {
            if segments()
                .iter()
                .any(|n| (!job.is_empty() && n.starts_with(&ours)) || !before.contains(n))
            {
                break "once its node segment existed";
            }
            if start.elapsed() > std::time::Duration::from_secs(10) {
                break "without seeing its node segment";
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        println!("engine_check kill: rank 2 raises SIGKILL before Engine::init, {seen}");
        let _ = std::io::stdout().flush();
        // SAFETY: raise(3) takes no pointers.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
    }
}

// ---------------------------------------------------------------------------
// dup
