//! A test rank for PMI spawn and the name server, using `rivet_pmi::Client`
//! directly. Run under `rivetrun` by `tests/tests/spawn_launcher.rs`.
//!
//! Parent modes (rank 0 asks, every rank then barriers and finalizes and
//! prints `parent OK rank R`):
//! * `spawn N WDIR`: spawn N copies of this program in `child` mode, as two
//!   commands (1 and N-1 processes) named without a path (found through the
//!   `path` info key), with info `wdir=WDIR` and an unsupported key, and the
//!   preput `PARENT_ROOT_PORT_NAME=port-of-<kvsname>`.
//! * `missing`, `badhost`, `badwdir WDIR`: spawns that must fail; prints
//!   `spawn failed: codes [..]: MESSAGE`.
//! * `childfail N RANK CODE`: spawn N children of which RANK exits CODE.
//! * `nested`: spawn one `nest` child, which spawns one `child` itself.
//! * `orphan`: spawn 2 `sleep` children, then exit 5 without finalizing.
//! * `spawn_sleep`: spawn 2 `sleep` children, then sleep (until killed).
//! * `name OP SERVICE [PORT]` (OP: publish, lookup, unpublish): rank 0 asks
//!   and prints `name OP SERVICE -> ok [PORT]` or `-> error ...`.
//!
//! Child modes: `child SIZE PORT WDIR EXIT_RANK EXIT_CODE` checks what a
//! spawned process must see (`PMI_SPAWNED`, size, preput key, working
//! directory, appnum), prints `child R of S ...`, barriers and finalizes;
//! the child of rank EXIT_RANK exits EXIT_CODE right after init instead.
//! `nest` spawns a grandchild; `sleep` sleeps until killed.

use std::path::{Path, PathBuf};
use std::process::exit;

use rivet_pmi::client::Client;
use rivet_pmi::wire::{SpawnCommand, SpawnRequest};
use rivet_pmi::Error;

const PORT_KEY: &str = "PARENT_ROOT_PORT_NAME";

fn die(who: &str, what: String) -> ! {
    eprintln!("pmi_spawn_check {who}: FAILED: {what}");
    exit(1);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or("");
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    let mut pmi = Client::init().unwrap_or_else(|e| die(mode, format!("init: {e}")));
    match mode {
        "child" => child(pmi, &args[1..]),
        "nest" => {
            let request = self_request(&[(1, &["child", "1", "", "", "-1", "0"])], &[]);
            spawn_ok(&mut pmi, request, 1);
            finish(pmi, "nest");
        }
        "sleep" => {
            println!("sleeper {} running", pmi.rank());
            std::thread::sleep(std::time::Duration::from_secs(300));
            exit(0);
        }
        _ => parent(pmi, mode, &arg(1), &arg(2), &arg(3)),
    }
}

/// Barrier, finalize, say so.
fn finish(mut pmi: Client, who: &str) {
    let rank = pmi.rank();
    pmi.barrier()
        .unwrap_or_else(|e| die(who, format!("barrier: {e}")));
    pmi.finalize()
        .unwrap_or_else(|e| die(who, format!("finalize: {e}")));
    println!("{who} OK rank {rank}");
}

/// A request for copies of this program: (nprocs, args) per command. The
/// program is named without a path and found through the `path` info key.
fn self_request(commands: &[(u32, &[&str])], info: &[(&str, &str)]) -> SpawnRequest {
    let exe = std::env::current_exe().unwrap_or_else(|e| die("parent", format!("own path: {e}")));
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let name = exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    SpawnRequest {
        commands: commands
            .iter()
            .map(|(n, args)| {
                let mut info: Vec<(String, String)> = info
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                info.push(("path".into(), dir.display().to_string()));
                SpawnCommand {
                    execname: name.clone(),
                    nprocs: *n,
                    args: args.iter().map(|a| a.to_string()).collect(),
                    info,
                }
            })
            .collect(),
        preput: Vec::new(),
    }
}

/// Spawn with the parent-port preput; the children must all start.
fn spawn_ok(pmi: &mut Client, mut request: SpawnRequest, n: usize) {
    let port = format!("port-of-{}", pmi.kvs_name());
    request.preput.push((PORT_KEY.into(), port.clone()));
    // The children check the preput against the value they are told.
    for cmd in &mut request.commands {
        if cmd.args.first().map(String::as_str) == Some("child") {
            cmd.args[2] = port.clone();
        }
    }
    match pmi.spawn_job(&request) {
        Ok((codes, job)) if codes == vec![0; n] => match job {
            // PMIx and PMI-2 name the new job (PMI-1 does not).
            Some(job) => println!("spawned {n} from {} as job {job}", pmi.kvs_name()),
            None => println!("spawned {n} from {}", pmi.kvs_name()),
        },
        Ok((codes, _)) => die("parent", format!("spawn returned codes {codes:?}")),
        Err(e) => die("parent", format!("spawn: {e}")),
    }
}

/// A spawn that must fail with an error that carries per-process codes.
fn spawn_fails(pmi: &mut Client, request: SpawnRequest) {
    match pmi.spawn(&request) {
        Err(Error::SpawnFailed { errcodes, message }) => {
            println!("spawn failed: codes {errcodes:?}: {message}")
        }
        Ok(codes) => die("parent", format!("spawn succeeded with {codes:?}")),
        Err(e) => die("parent", format!("spawn failed without codes: {e}")),
    }
}

fn parent(mut pmi: Client, mode: &str, a1: &str, a2: &str, a3: &str) {
    if pmi.spawned() || std::env::var_os("PMI_SPAWNED").is_some() {
        die(
            "parent",
            "a rank started by rivetrun says it was spawned".into(),
        );
    }
    if pmi.rank() == 0 {
        match mode {
            "spawn" => {
                let n: u32 = a1.parse().unwrap_or(2).max(2);
                let size = n.to_string();
                let child: &[&str] = &["child", &size, "", a2, "-1", "0"];
                let request = self_request(
                    &[(1, child), (n - 1, child)],
                    &[("wdir", a2), ("soft", "1:4")],
                );
                spawn_ok(&mut pmi, request, n as usize);
            }
            "missing" => {
                let mut request = self_request(&[(1, &["child", "1", "", "", "-1", "0"])], &[]);
                request.commands.push(SpawnCommand {
                    execname: "/nonexistent/rivet-no-such-program".into(),
                    nprocs: 2,
                    ..Default::default()
                });
                spawn_fails(&mut pmi, request);
            }
            "badhost" => spawn_fails(
                &mut pmi,
                self_request(
                    &[(2, &["child", "2", "", "", "-1", "0"])],
                    &[("host", "elsewhere.invalid")],
                ),
            ),
            "badwdir" => spawn_fails(
                &mut pmi,
                self_request(&[(1, &["child", "1", "", "", "-1", "0"])], &[("wdir", a1)]),
            ),
            "childfail" => {
                let n: u32 = a1.parse().unwrap_or(2);
                let size = n.to_string();
                let request = self_request(&[(n, &["child", &size, "", "", a2, a3])], &[]);
                spawn_ok(&mut pmi, request, n as usize);
            }
            "nested" => spawn_ok(&mut pmi, self_request(&[(1, &["nest"])], &[]), 1),
            "orphan" => {
                spawn_ok(&mut pmi, self_request(&[(2, &["sleep"])], &[]), 2);
                // Wait until both sleepers run, so the teardown has something to kill.
                std::thread::sleep(std::time::Duration::from_millis(500));
                exit(5);
            }
            "spawn_sleep" => {
                spawn_ok(&mut pmi, self_request(&[(2, &["sleep"])], &[]), 2);
                println!("parent spawned 2 sleepers");
                std::thread::sleep(std::time::Duration::from_secs(300));
                exit(0);
            }
            "name" => name(&mut pmi, a1, a2, a3),
            other => die("parent", format!("unknown mode {other:?}")),
        }
    }
    finish(pmi, "parent");
}

fn name(pmi: &mut Client, op: &str, service: &str, port: &str) {
    let result = match op {
        "publish" => pmi.publish_name(service, port).map(|()| String::new()),
        "lookup" => pmi.lookup_name(service),
        "unpublish" => pmi.unpublish_name(service).map(|()| String::new()),
        other => die("parent", format!("unknown name operation {other:?}")),
    };
    match result {
        Ok(v) => println!("name {op} {service} -> ok {v}"),
        Err(Error::Server { rc, msg, .. }) => println!(
            "name {op} {service} -> error rc={rc} msg={}",
            msg.unwrap_or_default()
        ),
        Err(e) => die("parent", format!("{op}: {e}")),
    }
}

fn child(mut pmi: Client, args: &[String]) {
    let who = format!("child {}", pmi.rank());
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let (size, port, wdir) = (arg(0), arg(1), arg(2));
    let exit_rank: i64 = arg(3).parse().unwrap_or(-1);
    let exit_code: i32 = arg(4).parse().unwrap_or(0);
    if i64::from(pmi.rank()) == exit_rank {
        println!("child {} exits with {exit_code}", pmi.rank());
        exit(exit_code);
    }
    if !pmi.spawned() || std::env::var("PMI_SPAWNED").as_deref() != Ok("1") {
        die(&who, "PMI_SPAWNED=1 is not set".into());
    }
    if pmi.size().to_string() != size || pmi.rank() >= pmi.size() {
        die(
            &who,
            format!(
                "size {} rank {}, expected size {size}",
                pmi.size(),
                pmi.rank()
            ),
        );
    }
    let got = pmi
        .get(PORT_KEY)
        .unwrap_or_else(|e| die(&who, format!("get {PORT_KEY}: {e}")));
    if !port.is_empty() && got != port {
        die(&who, format!("{PORT_KEY} is {got:?}, expected {port:?}"));
    }
    let cwd = std::env::current_dir().unwrap_or_default();
    if !wdir.is_empty() && cwd.canonicalize().ok() != PathBuf::from(wdir).canonicalize().ok() {
        die(&who, format!("runs in {}, expected {wdir}", cwd.display()));
    }
    let mapping = pmi
        .get("PMI_process_mapping")
        .unwrap_or_else(|e| die(&who, format!("get PMI_process_mapping: {e}")));
    if mapping != format!("(vector,(0,1,{}))", pmi.size()) {
        die(&who, format!("PMI_process_mapping is {mapping}"));
    }
    println!(
        "child {} of {} appnum {} kvs {} port {got} cwd {}",
        pmi.rank(),
        pmi.size(),
        pmi.appnum(),
        pmi.kvs_name(),
        cwd.display()
    );
    finish(pmi, "child");
}
