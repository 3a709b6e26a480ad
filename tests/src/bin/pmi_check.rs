//! A test rank that exercises the `rivet-pmi` client, run by the integration
//! tests under `rivetrun`, under MPICH's `mpiexec.hydra`, and as a singleton.
//!
//! `pmi_check` alone: put, barrier, get of every other rank's key, name
//! publish/lookup/unpublish, a missing-name lookup, finalize. It prints one
//! `pmi_check OK` line per rank, or a reason and exits 1.
//! Failure modes for the launcher tests (R = the rank that misbehaves):
//! `exit R CODE`, `signal R SIGNUM`, `nofinalize R`, `garbage R` (R sends a
//! bad line first, checks the error answer, then goes on normally),
//! `abort R CODE`. The ranks that behave wait in a barrier.
//! `early R`: rank R finalizes and exits 0 at once; the others wait 2 s
//! (R's proxy has ended by then), then enter a barrier, which cannot
//! complete and must fail (not hang).
//! `spawn`: rank 0 asks to spawn a program that does not exist and must get
//! an error; every rank then finishes normally.
//! `topology`: print what PMI says about this rank's placement next to the
//! CPU affinity the rank really has, one `topo rank ...` line per rank.
//! `resources DIR`: every rank makes a file in DIR, a shm segment and a
//! child process (in its own process group), registers the three with the
//! process manager, registers and releases a second file, marks
//! `DIR/ready-<rank>` and waits to be killed (at most 60 s). Without a
//! process manager that frees resources, registering must fail: it says so
//! and finishes normally.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::FromRawFd;
use std::process::exit;

use rivet_pmi::client::Client;
use rivet_pmi::Error;

fn die(rank: i64, what: String) -> ! {
    eprintln!("pmi_check rank {rank}: FAILED: {what}");
    exit(1);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or("check");
    let who: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(u32::MAX);
    let arg: i32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(0);

    if mode == "garbage" && env_rank() == Some(who) {
        send_garbage_first(who);
    }

    let mut pmi = Client::init().unwrap_or_else(|e| die(-1, format!("init: {e}")));
    let rank = pmi.rank();
    let size = pmi.size();
    let r = rank as i64;
    println!(
        "pmi_check rank {rank} of {size} pid {} kvs {} appnum {} over {}",
        std::process::id(),
        pmi.kvs_name(),
        pmi.appnum(),
        pmi.kind()
    );

    match mode {
        "check" | "garbage" => check(&mut pmi),
        "topology" => topology(&mut pmi),
        "spawn" => spawn_is_refused(&mut pmi),
        "resources" => resources(&mut pmi, args.get(1).map_or("/tmp", String::as_str)),
        "early" => {
            if rank != who {
                std::thread::sleep(std::time::Duration::from_secs(2));
                let got = pmi.barrier();
                die(r, format!("barrier after rank {who} ended: {got:?}"));
            }
        }
        "exit" | "signal" | "nofinalize" | "abort" => {
            if rank == who {
                match mode {
                    "exit" => exit(arg),
                    // SAFETY: raise(3) takes no pointers.
                    "signal" => unsafe {
                        libc::raise(arg);
                    },
                    "nofinalize" => exit(0),
                    _ => {
                        let _ = pmi.abort(arg, "pmi_check abort");
                        exit(arg);
                    }
                }
            }
            // The well-behaved ranks wait for the one that is gone.
            pmi.barrier()
                .unwrap_or_else(|e| die(r, format!("barrier: {e}")));
            die(r, "the barrier completed although a rank was gone".into());
        }
        other => die(r, format!("unknown mode {other}")),
    }
    pmi.finalize()
        .unwrap_or_else(|e| die(r, format!("finalize: {e}")));
    println!("pmi_check OK rank {rank}");
}

fn check(pmi: &mut Client) {
    let rank = pmi.rank();
    let size = pmi.size();
    let r = rank as i64;
    if rank >= size {
        die(r, format!("rank {rank} >= size {size}"));
    }
    let kvs = pmi.kvs_name().to_string();
    pmi.put(&format!("key-{rank}"), &format!("value-{rank}-{kvs}"))
        .unwrap_or_else(|e| die(r, format!("put: {e}")));
    pmi.commit()
        .unwrap_or_else(|e| die(r, format!("commit: {e}")));
    pmi.barrier()
        .unwrap_or_else(|e| die(r, format!("barrier: {e}")));
    for peer in 0..size {
        let got = pmi
            .get(&format!("key-{peer}"))
            .unwrap_or_else(|e| die(r, format!("get key-{peer}: {e}")));
        if got != format!("value-{peer}-{kvs}") {
            die(r, format!("key-{peer} = {got:?}"));
        }
    }
    match pmi.get("no-such-key") {
        Err(Error::KeyNotFound { .. }) => {}
        other => die(r, format!("get of a missing key gave {other:?}")),
    }

    let service = format!("svc-{kvs}");
    if rank == 0 {
        pmi.publish_name(&service, "port-for-test")
            .unwrap_or_else(|e| die(r, format!("publish: {e}")));
        if pmi.publish_name(&service, "again").is_ok() {
            die(r, "a duplicate publish succeeded".into());
        }
    }
    pmi.barrier()
        .unwrap_or_else(|e| die(r, format!("barrier: {e}")));
    let port = pmi
        .lookup_name(&service)
        .unwrap_or_else(|e| die(r, format!("lookup: {e}")));
    if port != "port-for-test" {
        die(r, format!("lookup gave {port:?}"));
    }
    pmi.barrier()
        .unwrap_or_else(|e| die(r, format!("barrier: {e}")));
    if rank == 0 {
        pmi.unpublish_name(&service)
            .unwrap_or_else(|e| die(r, format!("unpublish: {e}")));
    }
    pmi.barrier()
        .unwrap_or_else(|e| die(r, format!("barrier: {e}")));
    if pmi.lookup_name(&service).is_ok() {
        die(r, "lookup of an unpublished name succeeded".into());
    }
}

fn spawn_is_refused(pmi: &mut Client) {
    let r = pmi.rank() as i64;
    if pmi.rank() == 0 {
        let request = rivet_pmi::wire::SpawnRequest {
            commands: vec![rivet_pmi::wire::SpawnCommand {
                execname: "/nonexistent/rivet-no-such-program".into(),
                nprocs: 1,
                args: vec!["an argument with spaces".into()],
                info: vec![("wdir".into(), "/tmp".into())],
            }],
            preput: vec![("PARENT_ROOT_PORT_NAME".into(), "port".into())],
        };
        match pmi.spawn(&request) {
            Ok(codes) => die(r, format!("spawn succeeded with {codes:?}")),
            Err(e) => println!("pmi_check rank 0: spawn refused: {e}"),
        }
    }
    pmi.barrier()
        .unwrap_or_else(|e| die(r, format!("barrier after spawn: {e}")));
}

fn topology(pmi: &mut Client) {
    let r = pmi.rank() as i64;
    let kind = pmi
        .topo_type()
        .unwrap_or_else(|e| die(r, format!("topo_type: {e}")));
    let me = pmi
        .my_topology()
        .unwrap_or_else(|e| die(r, format!("my_topology: {e}")));
    let Some(me) = me else {
        die(r, "the launcher published no placement".into())
    };
    let cluster: Vec<String> = pmi
        .cluster_info()
        .unwrap_or_else(|e| die(r, format!("cluster_info: {e}")))
        .map(|c| {
            c.levels
                .iter()
                .map(|l| format!("{}.{}.{}", l.kind, l.my_cluster, l.my_rank))
                .collect()
        })
        .unwrap_or_default();
    let xml = pmi
        .hwloc_xmlfile()
        .unwrap_or_else(|e| die(r, format!("hwloc_xmlfile: {e}")));
    let xml = match xml {
        Some(path) if path.is_file() => "readable",
        Some(_) => "missing",
        None => "none",
    };
    let node_map = rivet::node_map::NodeMap::from_client(pmi);
    let shm_peers: Vec<String> = (0..pmi.size())
        .filter(|&p| node_map.path_to(p) == rivet::node_map::Path::Shm)
        .map(|p| p.to_string())
        .collect();
    let cpuset = me
        .cpuset
        .as_deref()
        .map_or("none".to_string(), rivet_pmi::topology::format_cpu_list);
    println!(
        "topo rank {} type {} node {} local {}/{} cpuset {} bound {} cluster {} affinity {} xml {} shm_peers {}",
        pmi.rank(),
        kind.to_value(),
        me.node,
        me.local_rank,
        me.local_size,
        cpuset,
        me.bound.replace(' ', "_"),
        cluster.join(","),
        rivet_pmi::topology::format_cpu_list(&own_affinity()),
        xml,
        shm_peers.join(",")
    );
}

/// The CPUs this process may run on, from the kernel.
fn own_affinity() -> Vec<u32> {
    // SAFETY: all-zero is a valid cpu_set_t; sched_getaffinity fills the one passed.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a writable cpu_set_t of the size given.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        die(-1, "sched_getaffinity failed".into());
    }
    // SAFETY: CPU_ISSET reads the set for indices below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .map(|c| c as u32)
        .collect()
}

fn env_rank() -> Option<u32> {
    std::env::var("PMI_RANK").ok()?.parse().ok()
}

/// Speak bad PMI on the inherited socket and check that the server answers
/// with an error instead of hanging up; the client then starts normally.
fn send_garbage_first(rank: u32) {
    let Some(fd) = std::env::var("PMI_FD")
        .ok()
        .and_then(|s| s.parse::<i32>().ok())
    else {
        die(rank as i64, "garbage mode needs PMI_FD".into());
    };
    // SAFETY: the fd is inherited from the launcher for this process's use;
    // `dup` gives this function its own descriptor to own and close.
    let mut stream = unsafe { std::fs::File::from_raw_fd(libc::dup(fd)) };
    stream
        .write_all(b"cmd=no_such_command a=b\n")
        .unwrap_or_else(|e| die(rank as i64, format!("write: {e}")));
    let mut reader = BufReader::new(&stream);
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .unwrap_or_else(|e| die(rank as i64, format!("read: {e}")));
    let rc_ok = line
        .split_whitespace()
        .any(|t| t.starts_with("rc=") && t != "rc=0");
    if !rc_ok {
        die(rank as i64, format!("bad line answered with {line:?}"));
    }
    println!(
        "pmi_check rank {rank}: bad line answered: {}",
        line.trim_end()
    );
}

/// The `resources DIR` mode (see the file's doc).
fn resources(pmi: &mut Client, dir: &str) {
    use rivet_pmi::resource::Resource;
    let rank = pmi.rank();
    let r = i64::from(rank);
    let fail = |what: &str, e: String| -> ! { die(r, format!("{what}: {e}")) };
    let file = format!("{dir}/file-{rank}");
    let kept = format!("{dir}/kept-{rank}");
    for f in [&file, &kept] {
        std::fs::write(f, b"x").unwrap_or_else(|e| fail(f, e.to_string()));
    }
    let shm = format!("rivet-restest-{}", std::process::id());
    let c = std::ffi::CString::new(format!("/{shm}")).unwrap();
    // SAFETY: a valid C string; plain syscall.
    let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_CREAT | libc::O_RDWR, 0o600) };
    if fd < 0 {
        fail("shm_open", std::io::Error::last_os_error().to_string());
    }
    // SAFETY: fd was just opened by us.
    unsafe { libc::close(fd) };
    let mut child = std::process::Command::new("sleep");
    std::os::unix::process::CommandExt::process_group(&mut child, 0);
    // Left running on purpose: whoever frees the registration kills it.
    #[allow(clippy::zombie_processes)]
    let child = child
        .arg("60")
        .spawn()
        .unwrap_or_else(|e| fail("sleep", e.to_string()));
    let list = [
        Resource::file(&file).unwrap(),
        Resource::shm(&shm).unwrap(),
        Resource::child(child.id()).unwrap_or_else(|e| fail("child", e)),
    ];
    if !pmi.frees_resources() {
        match pmi.register_resource(&list[0]) {
            Ok(()) => die(
                r,
                "registered with a process manager that does not free".into(),
            ),
            Err(e) => println!("pmi_check resources refused: {e}"),
        }
        for res in &list {
            let _ = rivet_pmi_free(res);
        }
        let _ = std::fs::remove_file(&kept);
        return;
    }
    for res in &list {
        pmi.register_resource(res)
            .unwrap_or_else(|e| fail(&format!("register {res}"), e.to_string()));
    }
    let k = Resource::file(&kept).unwrap();
    pmi.register_resource(&k)
        .and_then(|()| pmi.release_resource(&k))
        .unwrap_or_else(|e| fail("register and release", e.to_string()));
    println!(
        "pmi_check resources rank {rank} shm {shm} child {}",
        child.id()
    );
    std::fs::write(format!("{dir}/ready-{rank}"), b"")
        .unwrap_or_else(|e| fail("ready mark", e.to_string()));
    std::thread::sleep(std::time::Duration::from_secs(60));
    die(r, "was not killed within 60 s".into());
}

/// Free a resource without a process manager (the singleton case).
fn rivet_pmi_free(r: &rivet_pmi::resource::Resource) -> std::io::Result<()> {
    use rivet_pmi::resource::ResourceKind;
    match r.kind() {
        ResourceKind::File => std::fs::remove_file(r.name()),
        ResourceKind::Shm => std::fs::remove_file(format!("/dev/shm/{}", r.name())),
        ResourceKind::Pid => {
            if let Some((pid, _)) = r.pid() {
                // SAFETY: plain syscall on our own child.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                // SAFETY: reaps our own child; a null status pointer is allowed.
                unsafe { libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), 0) };
            }
            Ok(())
        }
    }
}
