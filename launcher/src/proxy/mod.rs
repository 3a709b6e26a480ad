//! `rivetrun --proxy ADDR --proxy-id N`: the per-node proxy of a multi-host
//! job (Hydra's `hydra_pmi_proxy`). rivetrun's launcher (ssh, rsh,
//! `--launcher-exec`, fork, or a user by hand) starts one on each host; it
//! connects back (`upstream`), proves it belongs to the job with the job
//! secret (read from its stdin, or `RIVETRUN_PROXY_SECRET`), receives the
//! job, discovers this node's topology, places and binds the node's ranks
//! and starts them. It serves their PMI-1 itself (`pmi`: a node KVS cache,
//! puts batched upstream, one barrier message per node), forwards their
//! output a whole line at a time to its own stdout/stderr (which the
//! launcher carries back), and reports each exit. When the connection to
//! rivetrun ends, the proxy kills its ranks and exits; the ranks die with
//! the proxy (parent-death signal) and with their PMI connection.

mod pmi;
mod upstream;

use std::ffi::OsString;
use std::io::{BufRead, Read, Write};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::process::{ChildStderr, ChildStdout};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::launch::{self, JobSpec, PmiChannel, RankPlace};
use crate::leftovers::ShmSweep;
use crate::output::LineBuffer;
use crate::remote::wire;
use crate::topology::{self, PlacementRequest, Topology};

use pmi::NodeKvs;

/// Where the proxy may read the job secret instead of its stdin (`manual`).
pub const SECRET_ENV: &str = "RIVETRUN_PROXY_SECRET";

/// The job as rivetrun describes it.
#[derive(Debug, Default)]
struct Job {
    size: u32,
    kvsname: String,
    program: PathBuf,
    argv0: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    wdir: Option<PathBuf>,
    ranks: Vec<u32>,
    attrs: Vec<(String, String)>,
    label: bool,
    map_by: Option<String>,
    bind_to: Option<String>,
    grace: f64,
    /// `--report-bindings`: one line per rank on stderr before it starts.
    report: bool,
}

enum Event {
    /// A rank ended; whether it spoke PMI without finalizing.
    Exited(u32, std::process::ExitStatus, bool),
    Signal(i32),
    Term,
    Lost,
}

/// Run the proxy; its exit code.
pub fn run(control: &str, proxy_id: u32) -> i32 {
    let host = crate::info::hostname();
    match serve(control, proxy_id, &host) {
        Ok(code) => code,
        Err(why) => {
            eprintln!("rivetrun: proxy {proxy_id} on {host}: {why}");
            1
        }
    }
}

fn read_secret() -> Result<String, String> {
    if let Ok(s) = std::env::var(SECRET_ENV) {
        return Ok(s);
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| format!("reading the job secret from stdin: {e}"))?;
    let s = line.trim().to_string();
    if s.is_empty() {
        return Err(format!("no job secret on stdin or in {SECRET_ENV}"));
    }
    Ok(s)
}

fn receive_job(reader: &mut impl BufRead) -> Result<Job, String> {
    let mut job = Job {
        grace: 3.0,
        ..Job::default()
    };
    loop {
        let msg = wire::recv(reader)
            .map_err(|e| format!("reading the job: {e}"))?
            .ok_or("rivetrun closed the connection (wrong secret?)")?;
        let w = |i: usize| msg.get(i).cloned().unwrap_or_default();
        let t = |i: usize| wire::text(&w(i));
        let num = |i: usize| {
            t(i).parse::<u32>()
                .map_err(|_| format!("bad number in {msg:?}"))
        };
        match t(0).as_str() {
            "job" => {
                job.size = num(1)?;
                job.kvsname = t(2);
            }
            "prog" => {
                job.program = PathBuf::from(OsString::from_vec(w(1)));
                job.argv0 = OsString::from_vec(w(2));
            }
            "arg" => job.args.push(OsString::from_vec(w(1))),
            "env" => job
                .env
                .push((OsString::from_vec(w(1)), OsString::from_vec(w(2)))),
            "wdir" => job.wdir = Some(PathBuf::from(OsString::from_vec(w(1)))),
            "rank" => job.ranks.push(num(1)?),
            "attr" => job.attrs.push((t(1), t(2))),
            "label" => job.label = true,
            "report-bindings" => job.report = true,
            "map-by" => job.map_by = Some(t(1)),
            "bind-to" => job.bind_to = Some(t(1)),
            "grace" => job.grace = t(1).parse().unwrap_or(3.0),
            "start" => break,
            other => return Err(format!("unexpected {other:?} in the job description")),
        }
    }
    if job.ranks.is_empty() || job.ranks.iter().any(|&r| r >= job.size) {
        return Err(format!(
            "bad rank list {:?} for size {}",
            job.ranks, job.size
        ));
    }
    Ok(job)
}

/// This node's placement: one `RankPlace` per local rank, and the mask
/// unbound ranks get once any rank is bound.
fn place(
    job: &Job,
    node: u32,
    host: &str,
) -> Result<(Vec<RankPlace>, Option<libc::cpu_set_t>), String> {
    let topo = Topology::discover().map_err(|e| e.to_string())?;
    let map_by = match &job.map_by {
        Some(m) => m
            .parse()
            .map_err(|e: topology::TopologyError| e.to_string())?,
        None => "core"
            .parse()
            .map_err(|e: topology::TopologyError| e.to_string())?,
    };
    let bind_to = match &job.bind_to {
        Some(b) => Some(
            b.parse()
                .map_err(|e: topology::TopologyError| e.to_string())?,
        ),
        None => None,
    };
    let placement = topology::plan(
        &topo,
        &PlacementRequest {
            nranks: job.ranks.len(),
            map_by,
            bind_to,
            ppn: None,
            cpu_list: None,
            mesh_dims: None,
        },
    )
    .map_err(|e| e.to_string())?;
    for note in &placement.notes {
        eprintln!("rivetrun: note: {host}: {note}");
    }
    if job.report {
        for (p, &rank) in placement.ranks.iter().zip(&job.ranks) {
            let mut p = p.clone();
            (p.rank, p.node) = (rank as usize, node);
            eprintln!("{}", topology::report_line(&p, host));
        }
    }
    let places: Vec<RankPlace> = placement
        .ranks
        .iter()
        .map(|r| RankPlace {
            local_rank: r.local_rank,
            local_size: r.local_size,
            affinity: r.cpuset.as_ref().map(|set| set.to_libc()),
        })
        .collect();
    let default = if places.iter().any(|p| p.affinity.is_some()) {
        Some(
            topology::current_affinity()
                .map_err(|e| e.to_string())?
                .to_libc(),
        )
    } else {
        None
    };
    Ok((places, default))
}

/// Copy a rank's stream to ours, a whole line at a time.
fn forward<R: Read + Send + 'static>(
    mut from: R,
    label: Option<String>,
    err: bool,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut lines = LineBuffer::default();
        let mut buf = vec![0u8; 16384];
        let sink = |bytes: &[u8], lines: &mut LineBuffer, end: bool| {
            let label = label.as_deref();
            let mut out = Vec::new();
            let _ = if end {
                lines.finish(label, &mut out)
            } else {
                lines.push(bytes, label, &mut out)
            };
            if !out.is_empty() {
                let _ = if err {
                    std::io::stderr().lock().write_all(&out)
                } else {
                    std::io::stdout().lock().write_all(&out)
                };
            }
        };
        loop {
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => sink(&buf[..n], &mut lines, false),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        sink(&[], &mut lines, true);
    })
}

fn output_threads(
    stdout: ChildStdout,
    stderr: ChildStderr,
    label: Option<String>,
) -> [JoinHandle<()>; 2] {
    [
        forward(stdout, label.clone(), false),
        forward(stderr, label, true),
    ]
}

fn signal_all(pids: &[(u32, u32, bool)], sig: i32) {
    for &(_, pid, alive) in pids {
        if alive {
            // SAFETY: kill(2) takes no pointers; the negative pid is the
            // rank's own process group (started with process_group(0)).
            unsafe { libc::kill(-(pid as libc::pid_t), sig) };
        }
    }
}

fn serve(control: &str, proxy_id: u32, host: &str) -> Result<i32, String> {
    let secret = read_secret()?;
    let (mut reader, up) =
        upstream::connect(control, &secret, proxy_id, host).map_err(|e| e.to_string())?;
    let job = receive_job(&mut reader)?;
    let (places, default_affinity) = place(&job, proxy_id, host)?;
    let _segments = ShmSweep(std::process::id());
    let spec = JobSpec {
        program: job.program.clone(),
        argv0: job.argv0.clone(),
        args: job.args.clone(),
        env: job.env.clone(),
        clear_env: true,
        wdir: job.wdir.clone(),
        size: job.size,
        kvsname: job.kvsname.clone(),
        channel: PmiChannel::Fd,
        default_affinity,
        spawned: false,
    };
    let kvs = NodeKvs::new(&job.kvsname, job.size, job.ranks.len(), job.attrs.clone());
    let (tx, rx) = mpsc::channel();
    // rivetrun's stdin, for rank 0 (None: end of input).
    let (stdin_tx, stdin_rx) = mpsc::channel::<Option<Vec<u8>>>();
    let mut stdin_rx = Some(stdin_rx);
    {
        let (kvs, tx) = (kvs.clone(), tx.clone());
        std::thread::spawn(move || {
            while let Ok(Some(msg)) = wire::recv(&mut reader) {
                match wire::text(msg.first().map_or(&[][..], |w| &w[..])).as_str() {
                    "barrier_out" => {
                        let puts = msg[1..]
                            .chunks(2)
                            .filter(|kv| kv.len() == 2)
                            .map(|kv| (wire::text(&kv[0]), wire::text(&kv[1])))
                            .collect();
                        kvs.barrier_out(puts);
                    }
                    "signal" => {
                        let sig = msg.get(1).and_then(|s| wire::text(s).parse().ok());
                        let _ = tx.send(Event::Signal(sig.unwrap_or(libc::SIGTERM)));
                    }
                    "stdin" => {
                        let _ = stdin_tx.send(msg.into_iter().nth(1));
                    }
                    "stdin_eof" => {
                        let _ = stdin_tx.send(None);
                    }
                    "term" => {
                        let _ = tx.send(Event::Term);
                    }
                    _ => {}
                }
            }
            kvs.break_off();
            let _ = tx.send(Event::Lost);
        });
    }

    // Ranks are started by this (the main) thread: their parent-death
    // signal is armed against it, and it lives as long as the proxy.
    // Like rivetrun on one host: the proxy runs a little ahead of its
    // ranks (which wait on its answers), each rank back at our old nice.
    let priority = launch::Priority::raise_own();
    let mut pids: Vec<(u32, u32, bool)> = Vec::new();
    let mut outputs = Vec::new();
    let mut start_error = None;
    for (i, &rank) in job.ranks.iter().enumerate() {
        let started = match launch::start_rank(&spec, rank, &places[i], &[]) {
            Ok(s) => s,
            Err(e) => {
                start_error = Some(e);
                break;
            }
        };
        let mut child = started.child;
        priority.reset_child(child.id());
        pids.push((rank, child.id(), true));
        if let (Some(mut to_rank), Some(from)) = (started.stdin, stdin_rx.take()) {
            // Rank 0's input, on a thread of its own: a rank that does not
            // read must not stall the control connection.
            std::thread::spawn(move || {
                while let Ok(Some(data)) = from.recv() {
                    if to_rank.write_all(&data).is_err() {
                        return;
                    }
                }
            });
        }
        let label = job.label.then(|| format!("[{rank}] "));
        outputs.extend(output_threads(started.stdout, started.stderr, label));
        let said = Arc::new(pmi::Said::default());
        if let Some(conn) = started.pmi {
            let (kvs, up, said) = (kvs.clone(), up.clone(), said.clone());
            std::thread::spawn(move || pmi::serve(conn, rank, kvs, up, said));
        }
        let tx = tx.clone();
        std::thread::spawn(move || {
            if let Ok(status) = child.wait() {
                let unfinished =
                    said.spoke.load(Ordering::Relaxed) && !said.finalized.load(Ordering::Relaxed);
                let _ = tx.send(Event::Exited(rank, status, unfinished));
            }
        });
    }
    if let Some(e) = start_error {
        let _ = up.send(&["error", &format!("{e}")]);
        signal_all(&pids, libc::SIGKILL);
    }
    let grace = Duration::from_secs_f64(job.grace.clamp(0.0, crate::cli::MAX_KILL_GRACE));
    let mut kill_at: Option<Instant> = None;
    let mut lost = false;
    let mut left = pids.len();
    while left > 0 {
        let event = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(e) => Some(e),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        if kill_at.is_some_and(|t| Instant::now() >= t) {
            signal_all(&pids, libc::SIGKILL);
            kill_at = None;
        }
        match event {
            None => {}
            Some(Event::Exited(rank, status, unfinished)) => {
                left -= 1;
                if let Some(p) = pids.iter_mut().find(|p| p.0 == rank) {
                    p.2 = false;
                }
                use std::os::unix::process::ExitStatusExt;
                let (code, sig) = match (status.code(), status.signal()) {
                    (Some(c), _) => (c, 0),
                    (None, Some(s)) => (128 + s, s),
                    _ => (1, 0),
                };
                if !lost {
                    let _ = up.send(&[
                        "exit".to_string(),
                        rank.to_string(),
                        code.to_string(),
                        sig.to_string(),
                        u8::from(unfinished).to_string(),
                    ]);
                }
            }
            Some(Event::Signal(sig)) => signal_all(&pids, sig),
            Some(Event::Term) => {
                signal_all(&pids, libc::SIGTERM);
                kill_at.get_or_insert(Instant::now() + grace);
            }
            Some(Event::Lost) => {
                lost = true;
                signal_all(&pids, libc::SIGKILL);
            }
        }
    }
    for t in outputs {
        let _ = t.join();
    }
    if lost {
        return Err("lost the connection to rivetrun; killed this node's ranks".into());
    }
    let _ = up.send(&["done"]);
    Ok(0)
}
