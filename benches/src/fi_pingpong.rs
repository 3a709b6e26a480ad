//! libfabric's own ping-pong, `fi_pingpong` (Debian package libfabric-bin),
//! the raw reference for Rivet's libfabric netmod in `compare --transport
//! ofi`.
//!
//! `fi_pingpong` measures one size per server/client pair, so `compare`
//! runs it through this hidden subcommand, one job per benchmark like every
//! other stack's run:
//!
//! ```text
//! rivet-bench fi-pingpong --provider P --sizes 8,1024,65536 [--program fi_pingpong] [--timeout S]
//! ```
//!
//! For each size in turn it starts, as the anchors' `run_all.sh` does (same
//! iteration counts: 50000 up to 1 KiB, 5000 up to 64 KiB, 500 above),
//!
//! ```text
//! taskset -c 1 fi_pingpong -p P -e rdm -B PORT -S SIZE -I ITERS
//! taskset -c 0 fi_pingpong -p P -e rdm -P PORT -S SIZE -I ITERS 127.0.0.1
//! ```
//!
//! with PORT a TCP port free at the time (fi_pingpong's control connection),
//! and the client only once the server listens on it (/proc/net/tcp). From
//! the client's result line (`bytes #sent #ack total time MB/sec usec/xfer
//! Mxfers/sec`) it takes usec/xfer, which is half a round trip, and prints
//! one table on stdout:
//!
//! ```text
//! # fi_pingpong -p shm -e rdm (server CPU 1, client CPU 0): ping-pong; MB/s = size / usec/xfer
//! # Size     usec/xfer          MB/s
//! 8              1.710         4.678
//! ```
//!
//! MB/s (1 MB = 1e6 B) is ping-pong bandwidth, one message in flight: the
//! size over half a round trip. It is fi_pingpong's MB/sec column, computed
//! from usec/xfer, which has more significant digits at small sizes (8 B
//! over tcp: 13.80 us, 0.58 MB/s). It is not a streaming figure like
//! Rivet's bw (a window of 64 messages).
//!
//! Neither process outlives the run: both get SIGKILL if this process dies
//! (`PR_SET_PDEATHSIG`, so also when `compare` kills this job on its
//! timeout); a client that fails or overruns gets the server stopped
//! (SIGTERM, SIGKILL 1 s later); a server still running 5 s after its
//! client ended is stopped too; every process started is reaped, each wait
//! bounded; the shm regions (`/dev/shm/PID:*`) of a process this run ended
//! are removed (not those of the processes PR_SET_PDEATHSIG ends). The first pair that fails ends the run with an error (exit
//! status 1), which `compare` counts as a failed run.

use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::harness::{drain, CmdSpec};

/// The program unless `--fi-pingpong` / `--program` says otherwise.
pub const DEFAULT_PROGRAM: &str = "fi_pingpong";

/// How long a server may take to listen, and may run on after its client.
const SERVER_GRACE: Duration = Duration::from_secs(5);

#[derive(clap::Args, Debug)]
pub struct Args {
    /// libfabric provider as fi_info prints it (fi_pingpong -p), e.g. "tcp;ofi_rxm" or shm.
    #[arg(long)]
    provider: String,
    /// Message sizes in bytes, comma-separated: one server/client pair each, in this order.
    #[arg(long, value_delimiter = ',', required = true)]
    sizes: Vec<u64>,
    /// fi_pingpong to run (a path, or a name looked up in PATH).
    #[arg(long, default_value = DEFAULT_PROGRAM)]
    program: PathBuf,
    /// Seconds all pairs together may take; a pair still running then is stopped.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
}

/// Round trips per size, as run_all.sh's fi_pair calls.
pub fn iterations(size: u64) -> u64 {
    if size <= 1024 {
        50000
    } else if size <= 65536 {
        5000
    } else {
        500
    }
}

/// The server's and the client's command lines for one size.
pub fn pair(
    program: &Path,
    provider: &str,
    port: &str,
    size: u64,
    iters: u64,
) -> (CmdSpec, CmdSpec) {
    let side = |cpu: &str, port_flag: &str| {
        CmdSpec::new("taskset")
            .args(["-c", cpu])
            .arg(program)
            .args(["-p", provider, "-e", "rdm", port_flag, port])
            .args(["-S", &size.to_string(), "-I", &iters.to_string()])
    };
    (side("1", "-B"), side("0", "-P").arg("127.0.0.1"))
}

/// One result of a client: the size, fi_pingpong's MB/sec and usec/xfer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClientResult {
    pub size: u64,
    pub mb_per_s: f64,
    pub usec: f64,
}

/// `8`, `1k`, `64k`, `1m`, `1.5k` (binary multiples, as fi_pingpong's size_str).
fn parse_count(text: &str) -> Option<u64> {
    let (num, mult) = match text.chars().last()? {
        'k' => (&text[..text.len() - 1], 1u64 << 10),
        'm' => (&text[..text.len() - 1], 1 << 20),
        'g' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    let v = num.parse::<f64>().ok()?;
    (v.is_finite() && v >= 0.0).then(|| (v * mult as f64).round() as u64)
}

/// The result lines of fi_pingpong's output: `bytes #sent #ack total time
/// MB/sec usec/xfer Mxfers/sec` rows under their header, with `#ack`
/// written `=N` (every message acknowledged), as the anchors' summarize.py
/// reads them.
pub fn parse_output(stdout: &str) -> Vec<ClientResult> {
    stdout
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 || !f[2].starts_with('=') || !f[4].ends_with('s') {
                return None;
            }
            let size = parse_count(f[0])?;
            let mb_per_s = f[5].parse::<f64>().ok()?;
            let usec = f[6].parse::<f64>().ok()?;
            (mb_per_s.is_finite() && usec.is_finite()).then_some(ClientResult {
                size,
                mb_per_s,
                usec,
            })
        })
        .collect()
}

/// Ping-pong bandwidth, MB/s with 1 MB = 1e6 B: the size over half a round trip.
pub fn pingpong_mb_per_s(size: u64, usec: f64) -> f64 {
    if usec > 0.0 {
        size as f64 / usec
    } else {
        0.0
    }
}

/// The table this subcommand prints, read back by `compare`: per size,
/// usec/xfer for `latency`, MB/s for `bw`.
pub fn parse_table(stdout: &str, bench: &str) -> Result<Vec<(u64, f64)>, String> {
    let column = match bench {
        "latency" => 1,
        "bw" => 2,
        other => return Err(format!("fi_pingpong has no {other}")),
    };
    let rows: Vec<(u64, f64)> = stdout
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let size = f.first()?.parse::<u64>().ok()?;
            let v = f.get(column)?.parse::<f64>().ok()?;
            v.is_finite().then_some((size, v))
        })
        .collect();
    if rows.is_empty() {
        return Err("no fi_pingpong result in the output".into());
    }
    Ok(rows)
}

/// A TCP port nobody listens on or uses now (the kernel's pick).
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind(("0.0.0.0", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free TCP port: {e}"))
}

/// Whether some socket listens on TCP `port` (any address), from
/// /proc/net/tcp and tcp6 (state 0A = LISTEN).
fn listening(port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|file| {
        std::fs::read_to_string(file).is_ok_and(|text| {
            text.lines().skip(1).any(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                f.len() > 3
                    && f[3] == "0A"
                    && f[1]
                        .rsplit(':')
                        .next()
                        .and_then(|p| u16::from_str_radix(p, 16).ok())
                        == Some(port)
            })
        })
    })
}

/// Remove `/dev/shm/PID:*`, the shm provider's regions of process `pid`
/// (ours, ended by a signal and reaped: nobody else has that pid now).
fn remove_shm_regions(pid: u32) {
    let prefix = format!("{pid}:");
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in dir.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// A process of a pair, stopped and reaped when dropped.
struct Proc {
    child: Child,
    stdout: Option<mpsc::Receiver<String>>,
    stderr: mpsc::Receiver<String>,
}

impl Proc {
    /// Start `spec` with stdin closed, stderr captured and stdout captured
    /// or discarded; it gets SIGKILL when this process dies.
    fn start(spec: &CmdSpec, keep_stdout: bool) -> Result<Proc, String> {
        let mut cmd = spec.command();
        cmd.stdin(Stdio::null())
            .stdout(if keep_stdout {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::piped());
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the closure makes only async-signal-safe calls (prctl,
        // getppid) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // This process died before prctl took effect: do not run.
                if libc::getppid() != parent {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| format!("cannot run {spec}: {e}"))?;
        let stdout = child.stdout.take().map(drain);
        let stderr = drain(child.stderr.take().expect("piped"));
        Ok(Proc {
            child,
            stdout,
            stderr,
        })
    }

    /// Its exit status once it has ended (and is reaped) by `deadline`.
    fn wait_until(&mut self, deadline: Instant) -> Option<ExitStatus> {
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) => {}
                Err(_) => return None,
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(10)));
        }
    }

    /// End it if it still runs (SIGTERM, SIGKILL 1 s later) and reap it,
    /// waiting at most 6 s in all; its status if it was reaped. A process
    /// ended so leaves the shm provider's regions behind (`/dev/shm/PID:*`,
    /// 16 MiB each): they are removed once it is reaped.
    fn stop(&mut self) -> Option<ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        // SAFETY: a plain syscall on our own child, not reaped yet (checked
        // just above, and only this thread waits for it).
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let status = self
            .wait_until(Instant::now() + Duration::from_secs(1))
            .or_else(|| {
                let _ = self.child.kill();
                self.wait_until(Instant::now() + Duration::from_secs(5))
            });
        if status.is_some() {
            remove_shm_regions(self.child.id());
        }
        status
    }

    /// Its output, once it has been reaped (the pipes are at their end).
    fn output(&mut self) -> (String, String) {
        let wait = Duration::from_secs(2);
        let out = self
            .stdout
            .take()
            .and_then(|rx| rx.recv_timeout(wait).ok())
            .unwrap_or_default();
        (out, self.stderr.recv_timeout(wait).unwrap_or_default())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.stop().is_none() {
            eprintln!(
                "rivet-bench: fi_pingpong (pid {}) could not be reaped",
                self.child.id()
            );
        }
    }
}

/// The last lines of the stderr of the process `who`, for an error message.
fn tail(who: &str, stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(6)..].join("\n  ");
    if tail.is_empty() {
        String::new()
    } else {
        format!("; {who}'s stderr:\n  {tail}")
    }
}

/// Run one server/client pair to its end, by `deadline`; the client's stdout.
fn run_pair(
    program: &Path,
    provider: &str,
    size: u64,
    deadline: Instant,
) -> Result<String, String> {
    let port = free_port()?;
    let (server_spec, client_spec) =
        pair(program, provider, &port.to_string(), size, iterations(size));
    eprintln!("rivet-bench: server: {server_spec}");
    let mut server = Proc::start(&server_spec, false)?;
    let listen_by = deadline.min(Instant::now() + SERVER_GRACE);
    while !listening(port) {
        if let Some(status) = server.wait_until(Instant::now()) {
            let (_, err) = server.output();
            return Err(format!(
                "server ended ({status}) before listening on port {port}{}",
                tail("server", &err)
            ));
        }
        if Instant::now() >= listen_by {
            server.stop();
            let (_, err) = server.output();
            return Err(format!(
                "server not listening on port {port} after {} s{}",
                SERVER_GRACE.as_secs(),
                tail("server", &err)
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!("rivet-bench: client: {client_spec}");
    let mut client = Proc::start(&client_spec, true)?;
    let client_status = client.wait_until(deadline);
    if client_status.is_none() {
        client.stop();
    }
    let (out, client_err) = client.output();
    let client_ok = client_status.is_some_and(|s| s.success());
    // The server ends right after a successful client; otherwise stop it.
    let server_status = if client_ok {
        server.wait_until(deadline.min(Instant::now() + SERVER_GRACE))
    } else {
        server.stop()
    };
    let server_overran = server_status.is_none();
    let server_status = server_status.or_else(|| server.stop());
    let (_, server_err) = server.output();
    match client_status {
        None => {
            return Err(format!(
                "client still running at the deadline: client and server stopped{}",
                tail("client", &client_err)
            ))
        }
        Some(s) if !s.success() => {
            return Err(format!(
                "client failed ({s}), server stopped{}{}",
                tail("client", &client_err),
                tail("server", &server_err)
            ))
        }
        Some(_) => {}
    }
    match server_status {
        _ if server_overran => Err(format!(
            "server still running {} s after its client ended: stopped{}",
            SERVER_GRACE.as_secs(),
            tail("server", &server_err)
        )),
        Some(s) if s.success() => Ok(out),
        Some(s) => Err(format!(
            "server failed ({s}){}",
            tail("server", &server_err)
        )),
        None => Err("server could not be reaped".into()),
    }
}

/// The hidden subcommand: every pair in turn, the table on stdout.
pub fn run(args: Args) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    println!(
        "# fi_pingpong -p {} -e rdm (server CPU 1, client CPU 0): ping-pong; MB/s = size / usec/xfer",
        args.provider
    );
    println!("{:<10}{:>14}{:>14}", "# Size", "usec/xfer", "MB/s");
    for &size in &args.sizes {
        let out = run_pair(&args.program, &args.provider, size, deadline)
            .map_err(|e| format!("fi_pingpong -p {} -S {size}: {e}", args.provider))?;
        let result = parse_output(&out)
            .into_iter()
            .find(|r| r.size == size)
            .ok_or_else(|| {
                format!(
                    "fi_pingpong -p {} -S {size}: no result line for {size} B in its output:\n{}",
                    args.provider,
                    out.trim_end()
                )
            })?;
        println!(
            "{:<10}{:>14.3}{:>14.3}",
            size,
            result.usec,
            pingpong_mb_per_s(size, result.usec)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from fi_pingpong 1.17 clients on the project machine
    /// (`-p 'tcp;ofi_rxm' -S 8 -I 20000`, `-p shm -S 1048576 -I 500`).
    const TCP_8: &str = "\
bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec
8       20k     =20k     312k        0.55s      0.58      13.80       0.07
";
    const SHM_1M: &str = "\
bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec
1m      500     =500     1000m       0.18s   5984.44     175.22       0.01
";

    #[test]
    fn reads_client_output() {
        assert_eq!(
            parse_output(TCP_8),
            vec![ClientResult {
                size: 8,
                mb_per_s: 0.58,
                usec: 13.80
            }]
        );
        let r = parse_output(SHM_1M)[0];
        assert_eq!(r.size, 1 << 20);
        // Its MB/sec column is size / usec/xfer (1 MB = 1e6 B), to the
        // rounding of usec/xfer's two decimals.
        let mb = pingpong_mb_per_s(r.size, r.usec);
        assert!((mb - r.mb_per_s).abs() / r.mb_per_s < 1e-4, "{mb}");
        assert!((pingpong_mb_per_s(8, 13.80) - 0.58).abs() < 0.005);
        assert!(parse_output("[error] util/pingpong.c:408 : failed to connect").is_empty());
        assert_eq!(parse_count("64k"), Some(65536));
        assert_eq!(parse_count("4m"), Some(4 << 20));
        assert_eq!(parse_count("1.5k"), Some(1536));
        assert_eq!(parse_count("0"), Some(0));
        assert_eq!(parse_count("x"), None);
    }

    #[test]
    fn command_lines_match_run_all_sh() {
        let (server, client) = pair(Path::new("fi_pingpong"), "tcp;ofi_rxm", "47600", 8, 50000);
        assert_eq!(
            server.to_string(),
            "taskset -c 1 fi_pingpong -p 'tcp;ofi_rxm' -e rdm -B 47600 -S 8 -I 50000"
        );
        assert_eq!(
            client.to_string(),
            "taskset -c 0 fi_pingpong -p 'tcp;ofi_rxm' -e rdm -P 47600 -S 8 -I 50000 127.0.0.1"
        );
        assert_eq!(
            [8, 1024, 1025, 65536, 1 << 20].map(iterations),
            [50000, 50000, 5000, 5000, 500]
        );
    }

    #[test]
    fn reads_its_own_table() {
        let table = "\
# fi_pingpong -p shm -e rdm (server CPU 1, client CPU 0): ping-pong; MB/s = size / usec/xfer
# Size         usec/xfer          MB/s
8                  1.710         4.678
65536             12.680      5168.454
";
        assert_eq!(
            parse_table(table, "latency").unwrap(),
            vec![(8, 1.71), (65536, 12.68)]
        );
        assert_eq!(
            parse_table(table, "bw").unwrap(),
            vec![(8, 4.678), (65536, 5168.454)]
        );
        assert!(parse_table(table, "mr").is_err());
        assert!(parse_table("# only a title\n", "latency").is_err());
    }
}
