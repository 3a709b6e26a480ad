//! `rivetrun --impi-server` against fake clients that speak seed 003's
//! chapter 2 byte for byte (the worked examples), and the IMPI client
//! startup of `rivetrun --impi-client`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rivet_tests::{bin, serial};

const DEADLINE: Duration = Duration::from_secs(30);

/// A running `rivetrun --impi-server`: its address, killed when dropped.
struct Server {
    child: Child,
    addr: String,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Server {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(bin("rivetrun"));
        cmd.arg("--impi-server")
            .args(args)
            .env_remove("IMPI_AUTH_NONE")
            .env_remove("IMPI_AUTH_KEY")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("starting rivetrun --impi-server");
        let mut err = child.stderr.take().expect("piped");
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("reading the server's first line");
        let addr = line.trim().to_string();
        let (ip, port) = addr.rsplit_once(':').expect("IP:PORT");
        assert!(ip.parse::<std::net::Ipv4Addr>().is_ok(), "{addr:?}");
        assert!(port.parse::<u16>().is_ok(), "{addr:?}");
        Server {
            child,
            addr,
            stderr: Some(stderr),
        }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(&self.addr).expect("connecting to the IMPI server");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    /// Wait for the server to exit by itself: exit code and stderr.
    fn wait(mut self) -> (Option<i32>, String) {
        let start = Instant::now();
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            assert!(start.elapsed() < DEADLINE, "the IMPI server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        };
        let err = self.stderr.take().unwrap().join().unwrap();
        (status.code(), err)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    s.read_exact(&mut b).expect("reading from the server");
    b
}

/// The server closed the connection (a read sees end of stream or a reset).
fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Ok(0) | Err(_))
}

const AUTH: u32 = 0x4155_5448;
const IMPI: u32 = 0x494D_5049;
const COLL: u32 = 0x434F_4C4C;
const DONE: u32 = 0x444F_4E45;
const FINI: u32 = 0x4649_4E49;

/// AUTH with KEY 5678, as the seed's example: {AUTH,4}{0x2} / {1,0} / key.
fn auth_key(s: &mut TcpStream, key: u64) {
    s.write_all(&words(&[AUTH, 4, 2])).unwrap();
    assert_eq!(read_n(s, 8), words(&[1, 0]), "server picks IMPI_AUTH_KEY");
    s.write_all(&key.to_be_bytes()).unwrap();
}

#[test]
fn server_relays_the_seed_examples_for_three_fake_clients() {
    let _serial = serial();
    let server = Server::start(&["3"], &[("IMPI_AUTH_KEY", "5678")]);
    // A stranger with the wrong key is cut off and does not count.
    let mut stranger = server.connect();
    auth_key(&mut stranger, 1234);
    assert!(
        closed(&mut stranger),
        "a wrong key must close the connection"
    );

    let mut c: Vec<TcpStream> = (0..3).map(|_| server.connect()).collect();
    for s in &mut c {
        auth_key(s, 5678);
    }
    for (rank, s) in c.iter_mut().enumerate() {
        s.write_all(&words(&[IMPI, 4, rank as u32])).unwrap();
    }
    for s in &mut c {
        assert_eq!(read_n(s, 12), words(&[IMPI, 4, 3]));
    }
    // IMPI_C_VERSION: 0.0 0.1 / 0.0 0.1 0.2 / 0.0 0.1 0.2, relayed as len 72.
    let lists: [&[u32]; 3] = [&[0, 0, 0, 1], &[0, 0, 0, 1, 0, 2], &[0, 0, 0, 1, 0, 2]];
    for (s, list) in c.iter_mut().zip(lists) {
        let mut cmd = words(&[COLL, 4 + 4 * list.len() as u32, 0x1000]);
        cmd.extend(words(list));
        s.write_all(&cmd).unwrap();
    }
    let mut want = words(&[COLL, 72, 0x1000, 0x7]);
    want.extend(words(&lists.concat()));
    for s in &mut c {
        assert_eq!(read_n(s, 80), want);
    }
    // IMPI_C_NHOSTS 3, 2, 2.
    for (s, n) in c.iter_mut().zip([3, 2, 2]) {
        s.write_all(&words(&[COLL, 8, 0x1100, n])).unwrap();
    }
    for s in &mut c {
        assert_eq!(read_n(s, 28), words(&[COLL, 20, 0x1100, 0x7, 3, 2, 2]));
    }
    // IMPI_C_DATALEN without client 1 (mask 0x5); an unknown command in between.
    c[1].write_all(&words(&[0x1234_5678, 4, 99])).unwrap();
    c[0].write_all(&words(&[COLL, 8, 0x1300, 8000])).unwrap();
    c[2].write_all(&words(&[COLL, 8, 0x1300, 4000])).unwrap();
    // Client 1's next label says it skipped DATALEN.
    c[1].write_all(&words(&[COLL, 12, 0x2100, 6001, 6002]))
        .unwrap();
    for s in &mut c {
        assert_eq!(read_n(s, 24), words(&[COLL, 16, 0x1300, 0x5, 8000, 4000]));
    }
    // IMPI_H_PORT, figure 2.3.
    c[0].write_all(&words(&[COLL, 16, 0x2100, 5001, 5002, 5003]))
        .unwrap();
    c[2].write_all(&words(&[COLL, 12, 0x2100, 7001, 7002]))
        .unwrap();
    let ports = words(&[
        COLL, 36, 0x2100, 0x7, 5001, 5002, 5003, 6001, 6002, 7001, 7002,
    ]);
    for s in &mut c {
        assert_eq!(read_n(s, 44), ports);
    }
    // A label this server does not know is relayed as opaque bytes.
    c[2].write_all(&words(&[COLL, 7, 0x7000])).unwrap();
    c[2].write_all(b"abc").unwrap();
    c[0].write_all(&words(&[DONE, 0])).unwrap();
    c[1].write_all(&words(&[DONE, 0])).unwrap();
    let mut want = words(&[COLL, 11, 0x7000, 0x4]);
    want.extend_from_slice(b"abc");
    for s in &mut c {
        assert_eq!(read_n(s, 19), want);
    }
    c[2].write_all(&words(&[DONE, 0])).unwrap();
    for s in &mut c {
        assert_eq!(read_n(s, 8), words(&[DONE, 0]));
    }
    for s in &mut c {
        s.write_all(&words(&[FINI, 0])).unwrap();
    }
    let (code, err) = server.wait();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("wrong IMPI_AUTH_KEY key"), "{err}");
}

#[test]
fn auth_none_by_preference_and_no_common_method() {
    let _serial = serial();
    // Both methods available, `-auth 0-1` prefers NONE.
    let server = Server::start(
        &["1", "-auth", "0-1"],
        &[("IMPI_AUTH_KEY", "9"), ("IMPI_AUTH_NONE", "")],
    );
    // A client offering both gets NONE, the first of the list.
    let mut s = server.connect();
    s.write_all(&words(&[AUTH, 4, 0x3])).unwrap();
    assert_eq!(read_n(&mut s, 8), words(&[0, 0]), "the seed's NONE reply");
    s.write_all(&words(&[IMPI, 4, 0])).unwrap();
    assert_eq!(read_n(&mut s, 12), words(&[IMPI, 4, 1]));
    s.write_all(&words(&[DONE, 0])).unwrap();
    assert_eq!(read_n(&mut s, 8), words(&[DONE, 0]));
    s.write_all(&words(&[FINI, 0])).unwrap();
    let (code, err) = server.wait();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("IMPI_AUTH_NONE"), "the NONE warning: {err}");

    // KEY only on the server, NONE only on the client: refused with a message.
    let server = Server::start(&["1"], &[("IMPI_AUTH_KEY", "9")]);
    let mut s = server.connect();
    s.write_all(&words(&[AUTH, 4, 0x1])).unwrap();
    assert!(closed(&mut s));
    // Anything but AUTH first is refused too.
    let mut s = server.connect();
    s.write_all(&words(&[IMPI, 4, 0])).unwrap();
    assert!(closed(&mut s));
    drop(s);
    let mut server = server;
    let _ = server.child.kill();
    let (_, err) = server.wait();
    assert!(err.contains("no authentication method"), "{err}");
    assert!(err.contains("sent IMPI before AUTH"), "{err}");

    // A server with no method at all refuses to start.
    let out = Command::new(bin("rivetrun"))
        .args(["--impi-server", "2"])
        .env_remove("IMPI_AUTH_NONE")
        .env_remove("IMPI_AUTH_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no authentication methods"));
}

#[test]
fn a_client_vanishing_before_fini_fails_the_server() {
    let _serial = serial();
    let server = Server::start(&["2"], &[("IMPI_AUTH_NONE", "1")]);
    let mut c: Vec<TcpStream> = (0..2).map(|_| server.connect()).collect();
    for (rank, s) in c.iter_mut().enumerate() {
        s.write_all(&words(&[AUTH, 4, 1])).unwrap();
        assert_eq!(read_n(s, 8), words(&[0, 0]));
        s.write_all(&words(&[IMPI, 4, rank as u32])).unwrap();
    }
    for s in &mut c {
        assert_eq!(read_n(s, 12), words(&[IMPI, 4, 2]));
    }
    c[0].write_all(&words(&[FINI, 0])).unwrap();
    drop(c.pop());
    let (code, err) = server.wait();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("client 1 disconnected before FINI"), "{err}");
}

/// `rivetrun --impi-client RANK ADDR -n N sh -c SCRIPT` with this auth env.
fn client(rank: u32, addr: &str, n: u32, script: &str, env: &[(&str, &str)]) -> Command {
    let mut cmd = rivet_tests::rivetrun(&[
        "--impi-client",
        &rank.to_string(),
        addr,
        "-n",
        &n.to_string(),
        "sh",
        "-c",
        script,
    ]);
    cmd.env_remove("IMPI_AUTH_NONE")
        .env_remove("IMPI_AUTH_KEY")
        .envs(env.iter().copied());
    cmd
}

/// Run the commands at once; their outcomes in the same order.
fn run_all(cmds: Vec<Command>) -> Vec<rivet_tests::Outcome> {
    let handles: Vec<_> = cmds
        .into_iter()
        .map(|cmd| std::thread::spawn(move || rivet_tests::run_job(cmd, DEADLINE)))
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

const SHOW: &str = "echo rank=$PMI_RANK client=$IMPI_CLIENT_RANK/$IMPI_CLIENT_SIZE \
                    offset=$IMPI_WORLD_OFFSET world=$IMPI_WORLD_SIZE procs=$IMPI_CLIENT_NPROCS \
                    hosts=$IMPI_HOSTS version=$IMPI_VERSION; echo flow=$IMPI_PROCS";

#[test]
fn two_rivetrun_clients_start_up_and_learn_each_other() {
    let _serial = serial();
    let key = [("IMPI_AUTH_KEY", "5678")];
    let server = Server::start(&["2"], &key);
    let outs = run_all(vec![
        client(0, &server.addr, 2, SHOW, &key),
        client(1, &server.addr, 3, SHOW, &key),
    ]);
    for o in &outs {
        assert_eq!(o.code(), Some(0), "{}", o.show());
    }
    let hosts: Vec<String> = outs
        .iter()
        .map(|o| {
            let line = o.stdout.lines().next().unwrap_or_default();
            line.split("hosts=").nth(1).unwrap_or_default().to_string()
        })
        .collect();
    assert_eq!(hosts[0], hosts[1], "both learn the same hosts");
    assert_eq!(hosts[0].split(',').count(), 2, "{hosts:?}");
    for r in 0..2 {
        let want = format!("rank={r} client=0/2 offset=0 world=5 procs=2,3 hosts=");
        assert!(outs[0].stdout.contains(&want), "{}", outs[0].show());
    }
    for r in 0..3 {
        let want = format!("rank={r} client=1/2 offset=2 world=5 procs=2,3 hosts=");
        assert!(outs[1].stdout.contains(&want), "{}", outs[1].show());
    }
    assert!(outs[0].stdout.contains("version=0.0"));
    // Every proc's entry carries its host's standard flow control and,
    // both clients being Rivet, Rivet's own pair (RIVET_H_ACKMARK/HIWATER).
    for o in &outs {
        let procs = o
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("flow="))
            .unwrap_or_default();
        let entries: Vec<&str> = procs.split(',').collect();
        assert_eq!(entries.len(), 5, "{}", o.show());
        assert!(
            entries.iter().all(|e| e.ends_with("/16/32/32/128")),
            "{procs}"
        );
    }
    assert!(
        outs[1]
            .stderr
            .contains("IMPI client 1 of 2: world ranks 2..5 of 5"),
        "{}",
        outs[1].show()
    );
    let (code, err) = server.wait();
    assert_eq!(code, Some(0), "every client sent FINI: {err}");
}

#[test]
fn wrong_key_no_common_method_and_a_failing_client() {
    let _serial = serial();
    let server = Server::start(&["1"], &[("IMPI_AUTH_KEY", "5678")]);
    let outs = run_all(vec![
        client(0, &server.addr, 1, "true", &[("IMPI_AUTH_KEY", "1234")]),
        client(0, &server.addr, 1, "true", &[("IMPI_AUTH_NONE", "")]),
        client(0, &server.addr, 1, "true", &[]),
    ]);
    assert_ne!(outs[0].code(), Some(0));
    assert!(
        outs[0].stderr.contains("wrong authentication key?"),
        "{}",
        outs[0].show()
    );
    assert_ne!(outs[1].code(), Some(0));
    assert!(
        outs[1].stderr.contains("no method in common"),
        "{}",
        outs[1].show()
    );
    assert_eq!(outs[2].code(), Some(2));
    assert!(
        outs[2]
            .stderr
            .contains("no authentication methods available"),
        "{}",
        outs[2].show()
    );
    drop(server);

    // A client whose rank fails sends no FINI: the server reports it, exit 1.
    let none = [("IMPI_AUTH_NONE", "")];
    let server = Server::start(&["2"], &none);
    let outs = run_all(vec![
        client(0, &server.addr, 1, "true", &none),
        client(1, &server.addr, 1, "exit 3", &none),
    ]);
    assert_eq!(outs[1].code(), Some(3), "{}", outs[1].show());
    let (code, err) = server.wait();
    assert_eq!(code, Some(1), "{err}");
    // Client 1 hangs up first, or client 0 after learning of it: either
    // way a client vanished before its FINI.
    assert!(err.contains("disconnected before FINI"), "{err}");
    // Client 0 learns of it from host 1's link closing without IMPI_PK_FINI.
    assert_ne!(outs[0].code(), Some(0), "{}", outs[0].show());
    assert!(
        outs[0].stderr.contains("closed before its IMPI_PK_FINI"),
        "{}",
        outs[0].show()
    );
}

/// Deadline of a job whose ranks move data across clients (debug builds,
/// four or more processes on two shared cores).
const DATA_DEADLINE: Duration = Duration::from_secs(180);

/// `rivetrun --impi-client RANK ADDR -n N PROGRAM ARGS...` with this env.
fn data_client(rank: u32, addr: &str, n: u32, prog: &[&str], env: &[(&str, &str)]) -> Command {
    let n = n.to_string();
    let rank = rank.to_string();
    let mut args = vec!["--impi-client", &rank, addr, "-n", &n];
    args.extend_from_slice(prog);
    let mut cmd = rivet_tests::rivetrun(&args);
    cmd.env_remove("IMPI_AUTH_NONE")
        .env_remove("IMPI_AUTH_KEY")
        .env("RIVET_YIELD", "always")
        .envs(env.iter().copied());
    cmd
}

/// A server and two clients of two ranks each, all running `prog`; both
/// clients' outcomes, after the server ended (it must exit 0).
fn across_two_clients(prog: &[&str], env: &[(&str, &str)]) -> Vec<rivet_tests::Outcome> {
    across_two_clients_of(2, prog, env)
}

/// As `across_two_clients`, with `n` ranks per client.
fn across_two_clients_of(n: u32, prog: &[&str], env: &[(&str, &str)]) -> Vec<rivet_tests::Outcome> {
    let server = Server::start(&["2"], env);
    let handles: Vec<_> = (0..2)
        .map(|c| {
            let cmd = data_client(c, &server.addr, n, prog, env);
            std::thread::spawn(move || rivet_tests::run_job(cmd, DATA_DEADLINE))
        })
        .collect();
    let outs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for o in &outs {
        assert_eq!(o.code(), Some(0), "{}", o.show());
    }
    let (code, err) = server.wait();
    assert_eq!(code, Some(0), "every client sent FINI: {err}");
    outs
}

#[test]
fn exchange_across_two_clients_with_key_and_with_none() {
    let _serial = serial();
    let exchange = bin("rivet-bench");
    let exchange = exchange.to_str().unwrap();
    for env in [
        &[("IMPI_AUTH_KEY", "5678")][..],
        &[("IMPI_AUTH_NONE", "")],
        // This client's ranks over tcp (the impi netmod's inner netmod).
        &[("IMPI_AUTH_NONE", ""), ("RIVET_NETMOD", "tcp")],
    ] {
        let outs = across_two_clients(&[exchange, "exchange"], env);
        assert!(
            outs[0].stdout.contains("exchange ok: 4 ranks"),
            "{env:?}: {}",
            outs[0].show()
        );
    }
}

#[test]
fn the_point_to_point_suite_runs_across_two_clients() {
    let _serial = serial();
    let check = bin("engine_check");
    let check = check.to_str().unwrap();
    let none = [("IMPI_AUTH_NONE", "")];
    for mode in [
        &["order"][..],
        &["probe"],
        &["stress", "3000", "7"],
        &["connect_all"],
    ] {
        let mut prog = vec![check];
        prog.extend_from_slice(mode);
        let outs = across_two_clients(&prog, &none);
        for (c, o) in outs.iter().enumerate() {
            for r in [0, 1] {
                let g = 2 * c + r;
                let want = format!("engine_check {} OK rank {g} of 4 at thread level", mode[0]);
                assert!(o.stdout.contains(&want), "{mode:?}: {}", o.show());
            }
        }
        if mode[0] == "connect_all" {
            // Rank 0 reached rank 1 through shm, ranks 2 and 3 through the impi netmod.
            for want in [
                "engine_check info: transport.netmod: impi for peers on other nodes (IMPI world \
                 rank 0 of 4",
                "engine_check info: vcs: 1 shm, 2 netmod",
            ] {
                assert!(outs[0].stdout.contains(want), "{}", outs[0].show());
            }
        }
    }
}

/// Client 1 sends no `RIVET_P_PORT` (`RIVET_IMPI_DIRECT=0`), as a client
/// of another implementation would not: every channel to it runs through
/// both agents and their host link, and the job still checks out.
#[test]
fn a_client_without_direct_ports_is_reached_through_the_host_links() {
    let _serial = serial();
    let exchange = bin("rivet-bench");
    let check = bin("engine_check");
    let none = [("IMPI_AUTH_NONE", "")];
    for (n, prog) in [
        (2, vec![exchange.to_str().unwrap(), "exchange"]),
        (1, vec![check.to_str().unwrap(), "sizes"]),
        (1, vec![check.to_str().unwrap(), "ssend"]),
    ] {
        let server = Server::start(&["2"], &none);
        let handles: Vec<_> = (0..2u32)
            .map(|c| {
                let mut cmd = data_client(c, &server.addr, n, &prog, &none);
                if c == 1 {
                    cmd.env("RIVET_IMPI_DIRECT", "0");
                }
                std::thread::spawn(move || rivet_tests::run_job(cmd, DATA_DEADLINE))
            })
            .collect();
        let outs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        for o in &outs {
            assert_eq!(o.code(), Some(0), "{prog:?}: {}", o.show());
            // Each of this client's ranks reaches each of the other's through the agent.
            let pairs = format!(", {} channel(s) through this agent", n * n);
            assert!(o.stderr.contains(&pairs), "{prog:?}: {}", o.show());
        }
        let (code, err) = server.wait();
        assert_eq!(code, Some(0), "every client sent FINI: {err}");
        if n == 2 {
            assert!(
                outs[0].stdout.contains("exchange ok: 4 ranks"),
                "{}",
                outs[0].show()
            );
        } else {
            for (g, o) in outs.iter().enumerate() {
                let want = format!("engine_check {} OK rank {g} of 2", prog[1]);
                assert!(o.stdout.contains(&want), "{prog:?}: {}", o.show());
            }
        }
    }
}

#[test]
fn the_two_rank_modes_run_between_ranks_of_two_clients() {
    let _serial = serial();
    let check = bin("engine_check");
    let check = check.to_str().unwrap();
    let none = [("IMPI_AUTH_NONE", "")];
    // World rank 0 under client 0, world rank 1 under client 1: every
    // message between them crosses the impi netmod.
    for mode in ["pingpong", "ssend", "cancel", "sizes", "trunc", "mprobe"] {
        let outs = across_two_clients_of(1, &[check, mode], &none);
        for (g, o) in outs.iter().enumerate() {
            let want = format!("engine_check {mode} OK rank {g} of 2 at thread level");
            assert!(o.stdout.contains(&want), "{mode}: {}", o.show());
        }
    }
}

#[test]
fn intercommunicators_are_created_merged_and_freed_across_two_clients() {
    let _serial = serial();
    let check = bin("engine_check");
    let check = check.to_str().unwrap();
    // World ranks 0, 1 under client 0 and 2, 3 under client 1: groups
    // {0, 2} and {1, 3} each span both clients.
    let outs = across_two_clients_of(2, &[check, "intercomm"], &[("IMPI_AUTH_NONE", "")]);
    for o in &outs {
        assert!(
            o.stdout.contains("merged as [1, 3, 0, 2] and [0, 2, 1, 3]"),
            "{}",
            o.show()
        );
        assert_eq!(
            o.stdout.matches("engine_check intercomm OK").count(),
            2,
            "{}",
            o.show()
        );
    }
}

#[test]
fn a_client_that_dies_fails_the_others_and_the_server() {
    let _serial = serial();
    let dir = tempfile_dir();
    let none = [("IMPI_AUTH_NONE", "")];
    let server = Server::start(&["2"], &none);
    let check = bin("engine_check");
    let check = check.to_str().unwrap();
    let prog = [check, "hang", dir.0.to_str().unwrap()];
    let c0 = data_client(0, &server.addr, 2, &prog, &none);
    let survivor = std::thread::spawn(move || rivet_tests::run_job(c0, DATA_DEADLINE));
    let mut c1 = data_client(1, &server.addr, 2, &prog, &none);
    let ready = dir.0.clone();
    let victim = rivet_tests::run_job_with(&mut c1, DATA_DEADLINE, move |pid| {
        // Once all four ranks wait (their ring and barrier went across
        // clients), client 1's rivetrun dies; its ranks die with it.
        std::thread::spawn(move || {
            let start = Instant::now();
            while !(0..4).all(|r| ready.join(format!("ready-{r}")).exists()) {
                if start.elapsed() > DATA_DEADLINE {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            // SAFETY: kill takes no pointers; the pid is our child's.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        });
    });
    assert_eq!(
        victim.status.code(),
        None,
        "client 1 was killed: {}",
        victim.show()
    );
    let o = survivor.join().unwrap();
    assert_ne!(o.code(), Some(0), "{}", o.show());
    // Its ranks see their channels to client 1 close, or its rivetrun sees
    // host 1's link close first and ends the job: either way it says so.
    assert!(
        o.stderr
            .contains("closed its channel without IMPI_PK_FINI: its process or its client failed")
            || o.stderr
                .contains("host 1 (client 1) closed before its IMPI_PK_FINI"),
        "{}",
        o.show()
    );
    let (code, err) = server.wait();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("disconnected before FINI"), "{err}");
}

/// A fresh empty directory for ready marks, removed when dropped (also
/// when an assertion fails).
struct MarkDir(std::path::PathBuf);

impl Drop for MarkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempfile_dir() -> MarkDir {
    let dir = std::env::temp_dir().join(format!("rivet-impi-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating a temp directory");
    MarkDir(dir)
}
