//! IMPI jobs for the integration tests: a `rivetrun --impi-server` whose
//! address is read from its first line (killed when dropped), clients
//! started with `rivetrun --impi-client`, and a server with two clients
//! running one program, every process reaped within a deadline.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to exit once its clients are done.
const SERVER_DEADLINE: Duration = Duration::from_secs(30);

/// A running `rivetrun --impi-server`: its address, killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: String,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Server {
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(crate::bin("rivetrun"));
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

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(&self.addr).expect("connecting to the IMPI server");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    /// Wait for the server to exit by itself: exit code and stderr.
    pub fn wait(mut self) -> (Option<i32>, String) {
        let start = Instant::now();
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            assert!(
                start.elapsed() < SERVER_DEADLINE,
                "the IMPI server did not exit"
            );
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

/// Deadline of a job whose ranks move data across clients (debug builds,
/// four or more processes on two shared cores).
pub const DATA_DEADLINE: Duration = Duration::from_secs(180);

/// `rivetrun --impi-client RANK ADDR -n N PROGRAM ARGS...` with this env.
pub fn data_client(rank: u32, addr: &str, n: u32, prog: &[&str], env: &[(&str, &str)]) -> Command {
    let n = n.to_string();
    let rank = rank.to_string();
    let mut args = vec!["--impi-client", &rank, addr, "-n", &n];
    args.extend_from_slice(prog);
    let mut cmd = crate::rivetrun(&args);
    cmd.env_remove("IMPI_AUTH_NONE")
        .env_remove("IMPI_AUTH_KEY")
        .env("RIVET_YIELD", "always")
        .envs(env.iter().copied());
    cmd
}

/// A server and two clients of two ranks each, all running `prog`; both
/// clients' outcomes, after the server ended (it must exit 0).
pub fn across_two_clients(prog: &[&str], env: &[(&str, &str)]) -> Vec<crate::Outcome> {
    across_two_clients_of(2, prog, env)
}

/// As `across_two_clients`, with `n` ranks per client.
pub fn across_two_clients_of(n: u32, prog: &[&str], env: &[(&str, &str)]) -> Vec<crate::Outcome> {
    across_two_clients_running(n, [prog, prog], env)
}

/// As `across_two_clients_of`, client `c` running `progs[c]`.
pub fn across_two_clients_running(
    n: u32,
    progs: [&[&str]; 2],
    env: &[(&str, &str)],
) -> Vec<crate::Outcome> {
    let server = Server::start(&["2"], env);
    let handles: Vec<_> = (0..2)
        .map(|c| {
            let cmd = data_client(c, &server.addr, n, progs[c as usize], env);
            std::thread::spawn(move || crate::run_job(cmd, DATA_DEADLINE))
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
