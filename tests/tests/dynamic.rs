//! Dynamic processes end to end (`dyn_check` ranks under rivetrun): the
//! PG/VC reference counts, accept/connect between two separately started
//! jobs found through a name server, spawn, and the name service. Each
//! runs with shared memory inside a job (the default; tcp between jobs),
//! and with a netmod forced everywhere: `RIVET_NETMOD=tcp`, and
//! `RIVET_NETMOD=ofi` on the `tcp;ofi_rxm` and `shm` providers; each of
//! those at thread level SINGLE (no `RIVET_THREAD_LEVEL`: the ranks'
//! `Engine<Local>` runs without a lock) and at MULTIPLE
//! (`RIVET_THREAD_LEVEL=multiple`: it locks), the ranks checking that they
//! run at the level asked for (`rivet_tests::every_transport_and_level`).
//! Every job must end by itself and leave no process and no shared-memory
//! segment behind.

use std::process::Command;
use std::time::Duration;

use rivet::ThreadLevel;
use rivet_tests::{
    bin, every_transport_and_level, job_over, level_env, oks_at, run_job, run_job_checking_shm,
    serial, NameServer, Outcome, ShmWatch, LEVELS,
};

const DEADLINE: Duration = Duration::from_secs(120);

fn dyn_job(n: u32, args: &[&str], env: &[(&str, &str)], extra: &[&str]) -> Command {
    job_over("dyn_check", n, args, env, extra)
}

/// Every one of `ranks` ranks passed `mode`, at thread level `level`.
fn expect_ok(o: &Outcome, what: &str, mode: &str, ranks: u32, level: ThreadLevel) {
    assert_eq!(o.code(), Some(0), "{what}: {}", o.show());
    assert_eq!(
        oks_at(&o.stdout, "dyn_check", mode, level),
        ranks as usize,
        "{what}: every rank must pass at thread level {level}\n{}",
        o.show()
    );
}

#[test]
fn reference_counts_return_to_their_baseline() {
    let _g = serial();
    for over in every_transport_and_level() {
        let o = run_job_checking_shm(dyn_job(2, &["refcounts"], &over.env, &[]), DEADLINE);
        expect_ok(&o, &over.to_string(), "refcounts", 2, over.level);
    }
}

#[test]
fn two_jobs_connect_through_a_published_name_merge_and_disconnect() {
    let _g = serial();
    for over in every_transport_and_level() {
        let (name, env, level) = (over.to_string(), &over.env, over.level);
        let ns = NameServer::start();
        let service = format!("dyn-test-{}-{level}-{}", over.transport, std::process::id());
        let server = dyn_job(2, &["server", &service], env, &["--nameserver", &ns.addr]);
        let client = dyn_job(3, &["client", &service], env, &["--nameserver", &ns.addr]);
        let shm = ShmWatch::new();
        let server = std::thread::spawn(move || run_job(server, DEADLINE));
        let c = run_job(client, DEADLINE);
        let s = server.join().expect("server thread");
        let leaked = shm.leaked();
        assert!(
            leaked.is_empty(),
            "{name}: segments left in /dev/shm: {leaked:?}"
        );
        expect_ok(
            &s,
            &format!("{name}: server job (-n 2)"),
            "server",
            2,
            level,
        );
        expect_ok(
            &c,
            &format!("{name}: client job (-n 3)"),
            "client",
            3,
            level,
        );
        let status = ns.stop();
        assert!(status.success(), "name server ended with {status:?}");
    }
}

#[test]
fn a_job_spawns_children_and_survives_a_missing_program() {
    let _g = serial();
    for over in every_transport_and_level() {
        let name = over.to_string();
        let o = run_job_checking_shm(dyn_job(2, &["spawn", "3"], &over.env, &[]), DEADLINE);
        expect_ok(&o, &name, "spawn", 2, over.level);
        assert_eq!(
            oks_at(&o.stdout, "dyn_check", "child", over.level),
            3,
            "{name}: three children must pass, at the parents' thread level\n{}",
            o.show()
        );
        assert!(
            o.stdout.contains("missing program refused"),
            "{name}: {}",
            o.show()
        );
    }
}

#[test]
fn names_are_published_looked_up_and_refused_twice() {
    let _g = serial();
    for level in LEVELS {
        let env: Vec<_> = level_env(level).into_iter().collect();
        let o = run_job_checking_shm(dyn_job(2, &["names"], &env, &[]), DEADLINE);
        expect_ok(
            &o,
            &format!("names at thread level {level}"),
            "names",
            2,
            level,
        );
    }
}

#[test]
fn bad_and_closed_ports_fail_every_rank_without_a_hang() {
    let _g = serial();
    for over in every_transport_and_level() {
        let name = over.to_string();
        let o = run_job_checking_shm(dyn_job(2, &["badports"], &over.env, &[]), DEADLINE);
        expect_ok(&o, &name, "badports", 2, over.level);
        assert!(
            o.stdout.contains("closed port refused"),
            "{name}: {}",
            o.show()
        );
    }
}

/// The same spawn bootstrapped by MPICH's Hydra: its PMI spawn starts the
/// children with the parent's port pre-put, and they connect back.
#[test]
fn spawn_works_under_mpich_hydra() {
    let _g = serial();
    for level in LEVELS {
        let mut cmd = Command::new("mpiexec.hydra");
        cmd.args(["-n", "2"])
            .arg(bin("dyn_check"))
            .args(["spawn", "3", "nomissing"])
            .env("RIVET_YIELD", "always")
            .env_remove("RIVET_NETMOD")
            .env_remove("RIVET_THREAD_LEVEL")
            .envs(level_env(level));
        let o = run_job_checking_shm(cmd, DEADLINE);
        let what = format!("hydra at thread level {level}");
        expect_ok(&o, &what, "spawn", 2, level);
        assert_eq!(
            oks_at(&o.stdout, "dyn_check", "child", level),
            3,
            "{what}: three children must pass, at the parents' thread level\n{}",
            o.show()
        );
    }
}

/// A name-server client that sends requests and never reads the answers
/// is cut off once a bounded amount of answers waits for it (checked after
/// every read), so the name server's memory stays bounded; the next client
/// is served.
#[test]
fn a_name_server_client_that_never_reads_is_cut_off() {
    use std::io::{Read, Write};
    let ns = NameServer::start();
    let mut s = std::net::TcpStream::connect(&ns.addr).expect("connect to the name server");
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    let requests = b"cmd=lookup_name service=nothing-here\n".repeat(1 << 14);
    let mut sent = 0usize;
    // Until the server closes on us (a write fails) or far past its bound.
    while sent < 256 << 20 && s.write_all(&requests).is_ok() {
        sent += requests.len();
    }
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut sink = Vec::new();
    let end = s.read_to_end(&mut sink);
    assert!(
        end.is_ok()
            || end
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the name server kept a client that never reads: {end:?} after {sent} bytes"
    );
    assert!(sent < 256 << 20, "{sent} bytes of requests were all taken");
    let peak = rivet_tests::procfs::peak_rss(ns.child.id()).expect("name server alive");
    assert!(peak < 128 << 20, "the name server peaked at {peak} bytes");
    // The next client is served.
    let mut c = std::net::TcpStream::connect(&ns.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(b"cmd=lookup_name service=nothing-here\n")
        .unwrap();
    let mut answer = [0u8; 256];
    let n = c.read(&mut answer).unwrap();
    assert!(
        String::from_utf8_lossy(&answer[..n]).starts_with("cmd=lookup_result rc="),
        "{:?}",
        String::from_utf8_lossy(&answer[..n])
    );
    let status = ns.stop();
    assert!(status.success(), "{status:?}");
}
