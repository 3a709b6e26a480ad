//! `rivetrun --proxy ADDR --proxy-id N`: the per-node proxy of a multi-host
//! job (Hydra's `hydra_pmi_proxy`). rivetrun's launcher (ssh, rsh,
//! `--launcher-exec`, fork, or a user by hand) starts one on each host; it
//! connects back (`upstream`), proves it belongs to the job with the job
//! secret (read from its stdin, or `RIVETRUN_PROXY_SECRET`), receives the
//! job (having first made a session of its own whose scheduling group
//! outranks its ranks', `session`), discovers this node's topology, places and binds the node's ranks
//! (`place`) and starts them. It serves their PMI itself (`pmi`: PMI-1 and PMI-2
//! through the PMI server core, with the job's process mapping, appnums
//! and this node's topology keys, `node_server`, over each rank's `PMI_FD` or, with
//! `--pmi-port`, a port of the proxy's that admits only its ranks; the
//! node's puts batched upstream, one barrier message per subtree up a tree
//! of proxies, `tree`; and PMIx, where
//! OpenPMIx is installed, through a server of its own, `pmix`), forwards their
//! output a whole line at a time to its own stdout/stderr (`output`; the
//! launcher carries it back), frees what an ended rank registered and did not
//! release (seed 002, `crate::resources`, as rivetrun on one host), and
//! reports each exit. rivetrun's commands are read on a thread of their own
//! (`control`). When the connection to
//! rivetrun ends, the proxy kills its ranks and exits; the ranks die with
//! the proxy (parent-death signal) and with their PMI connection.

mod control;
mod job;
mod node_server;
mod output;
mod place;
mod pmi;
mod pmix;
pub mod pmix_fences;
mod pmix_names;
mod pmix_subset;
mod session;
mod spawn;
pub mod tree;
mod upstream;

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::launch::{self, JobSpec, PmiChannel};
use crate::leftovers::{JobDir, ShmSweep};
use crate::remote::commands as cmd;
use job::{read_secret, receive_job};
use node_server::node_server;
use output::output_threads;
use place::place;

/// Where the proxy may read the job secret instead of its stdin (`manual`).
pub const SECRET_ENV: &str = "RIVETRUN_PROXY_SECRET";

enum Event {
    /// A rank ended; whether it spoke PMI without finalizing.
    Exited(u32, std::process::ExitStatus, bool),
    /// A rank asked to spawn (from the PMI loop).
    Spawn(pmi::SpawnAsk),
    /// A spawned process ended: its namespace, index and pid.
    SpawnedExited(String, u32, u32, std::process::ExitStatus),
    /// A process of another node ended (`gend`): for PMIx groups.
    MemberEnded(String, u32),
    /// Another node's proxy spawned a job (`pmix_spawned`).
    PmixSpawned(Vec<Vec<u8>>),
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

/// An exit's code (128 + the signal when killed) and signal (0: none).
fn code_and_signal(status: std::process::ExitStatus) -> (i32, i32) {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => (c, 0),
        (None, Some(s)) => (128 + s, s),
        _ => (1, 0),
    }
}

fn signal_all(pids: &[(u32, u32, bool)], sig: i32) {
    for &(_, pid, alive) in pids {
        if alive {
            // SAFETY: kill(2) takes no pointers; the negative pid is the
            // rank's own process group (its session, `forkexec`).
            unsafe { libc::kill(-(pid as libc::pid_t), sig) };
        }
    }
}

fn serve(control: &str, proxy_id: u32, host: &str) -> Result<i32, String> {
    // Phases, for rivetrun's --launch-stats (ms since the proxy started).
    let t0 = Instant::now();
    let ms = move || t0.elapsed().as_millis().to_string();
    // First, so that all the start-up below has the CPU it needs.
    session::own_group();
    let secret = read_secret()?;
    let (mut reader, up) =
        upstream::connect(control, &secret, proxy_id, host).map_err(|e| e.to_string())?;
    let job = receive_job(&mut reader)?;
    let t_job = ms();
    // Like rivetrun on one host: the proxy runs a little ahead of its
    // ranks (which wait on its answers), each rank back at our old nice.
    // Raised first: threads made later (the PMI loop's) inherit it.
    let mut priority = launch::Priority::raise_own();
    priority.slack_when_oversubscribed(job.ranks.len());
    // PMIx beside PMI-1/PMI-2, where OpenPMIx is installed (`pmix`): its
    // server loads its plugins while the ranks are placed.
    let envs: Vec<Vec<(std::ffi::OsString, std::ffi::OsString)>> = (job.apps.iter())
        .map(|app| job.env.iter().chain(&app.env).cloned().collect())
        .collect();
    let programs: Vec<crate::pmix_need::Program<'_>> = (job.apps.iter().zip(&envs))
        .map(|(app, env)| crate::pmix_need::Program {
            path: &app.program,
            env,
        })
        .collect();
    let mut pmix_starting = if crate::pmix_need::may_want_pmix(&programs) {
        pmix::begin(&job.kvsname, &job.hosts, proxy_id)
    } else {
        None
    };
    let dir = JobDir::create(&std::env::temp_dir())
        .map_err(|e| format!("creating the job's temp directory: {e}"))?;
    let (places, default_affinity, topology_keys) =
        place(&job, proxy_id, host, dir.path(), &mut pmix_starting)?;
    let t_placed = ms();
    let _segments = ShmSweep(std::process::id());
    // --pmi-port: a port on this host's address facing rivetrun (`pmi/port.rs`).
    let port = match job.pmi_port {
        true => {
            let ip = up.local_ip().map_err(|e| e.to_string())?;
            let opened = pmi::open_port(ip, job.size, &job.ranks, &secret);
            Some(opened.map_err(|e| format!("opening the PMI port: {e}"))?)
        }
        false => None,
    };
    let channel = match &port {
        Some(p) => PmiChannel::Port(p.addr.clone(), p.auth.clone()),
        None => PmiChannel::Fd,
    };
    let specs: Vec<JobSpec> = job
        .apps
        .iter()
        .map(|app| JobSpec {
            program: app.program.clone(),
            argv0: app.argv0.clone(),
            args: app.args.clone(),
            env: job.env.iter().chain(&app.env).cloned().collect(),
            clear_env: true,
            wdir: app.wdir.clone(),
            size: job.size,
            kvsname: job.kvsname.clone(),
            channel: channel.clone(),
            default_affinity,
            spawned: false,
        })
        .collect();
    let server = node_server(&job, proxy_id, topology_keys)?;
    let tree = tree::Tree::new(job.has_parent, &job.children);
    let (tx, rx) = mpsc::channel();
    let attr = |key: &str| job.attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    let node_of_rank = attr(rivet_pmi::server::PROCESS_MAPPING_KEY)
        .and_then(|m| rivet_pmi::server::parse_process_mapping(m, job.size as usize).ok())
        .unwrap_or_default();
    let pmix_host = pmix::finish(
        pmix_starting,
        &job.hosts,
        &node_of_rank,
        job.all_appnums()?,
        proxy_id,
        &dir.path().join("topology.xml"),
        attr(rivet_pmi::group::KEY_CLUSTER).cloned(),
    );
    let pmix_state = pmix::State::new(
        proxy_id,
        &job.kvsname,
        job.size,
        node_of_rank.clone(),
        job.ranks.clone(),
    );
    let pmi = pmi::start(server, 0, up.clone(), tree, tx.clone(), pmix_state)
        .map_err(|e| e.to_string())?;
    // What each rank did over PMI, read when it exits.
    let saids: HashMap<u32, Arc<pmi::Said>> =
        job.ranks.iter().map(|&r| (r, Arc::default())).collect();
    if let Some(opened) = port {
        let (saids, host) = (saids.clone(), host.to_string());
        pmi.send(pmi::Cmd::Port {
            opened,
            saids,
            host,
        });
    }
    let pmix_envs: Vec<Vec<(String, String)>> = match &pmix_host {
        Some(h) => {
            h.wake(pmi.waker());
            // Open MPI's settings for this host's ranks, as on one host
            // (`pmix_host::open_mpi_env`: yield when they outnumber its
            // CPUs, segments in this proxy's directory in /dev/shm), unless
            // the job's environment says otherwise.
            let user_set = |var: &str| (specs.iter().flat_map(|s| &s.env)).any(|(k, _)| k == var);
            let settings: Vec<(String, String)> =
                crate::pmix_host::open_mpi_env(job.ranks.len(), std::process::id())
                    .into_iter()
                    .filter(|(k, _)| !user_set(k))
                    .collect();
            let env = |&r: &u32| {
                let mut env = h.fork_env(r).unwrap_or_else(|why| {
                    eprintln!("rivetrun: warning: rank {r} on {host} gets no PMIx: {why}");
                    Vec::new()
                });
                env.extend(settings.iter().cloned());
                env
            };
            job.ranks.iter().map(env).collect()
        }
        None => vec![Vec::new(); job.ranks.len()],
    };
    if !job.children.is_empty() {
        let ip = up.local_ip().map_err(|e| e.to_string())?;
        let addr = tree::listen(ip, secret.clone(), job.children.clone(), pmi.clone())
            .map_err(|e| format!("listening for child proxies: {e}"))?;
        up.send(&[cmd::LISTEN, &addr]).map_err(|e| e.to_string())?;
    }
    // rivetrun's stdin, for rank 0 (None: end of input).
    let (stdin_tx, stdin_rx) = mpsc::channel::<Option<Vec<u8>>>();
    let mut stdin_rx = Some(stdin_rx);
    control::start_reader(reader, pmi.clone(), tx.clone(), stdin_tx, secret, proxy_id);

    // Ranks are started by this (the main) thread: their parent-death
    // signal is armed against it, and it lives as long as the proxy.
    let mut pids: Vec<(u32, u32, bool)> = Vec::new();
    let mut outputs = Vec::new();
    let procs = job.ranks.iter().enumerate().map(|(i, &rank)| {
        let spec = &specs[job.appnums[i] as usize];
        (spec, rank, &places[i], &pmix_envs[i][..])
    });
    // Each rank is served as soon as it is forked; whether every exec
    // succeeded is known after (a failure kills them all, below).
    let (started, execs) = launch::fork_all(procs, &priority);
    for (started, &rank) in started.into_iter().zip(&job.ranks) {
        let mut child = started.child;
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
        let said = saids.get(&rank).cloned().unwrap_or_default();
        if let Some(conn) = started.pmi {
            let said = said.clone();
            pmi.send(pmi::Cmd::Rank { rank, conn, said });
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
    let start_error = execs.wait().err().map(|(_, e)| e);
    let t_started = ms();
    if let Some(e) = start_error {
        let _ = up.send(&[cmd::ERROR, &format!("{e}")]);
        signal_all(&pids, libc::SIGKILL);
    }
    let grace = Duration::from_secs_f64(job.grace.clamp(0.0, crate::cli::MAX_KILL_GRACE));
    let mut kill_at: Option<Instant> = None;
    let mut lost = false;
    let mut left = pids.len();
    let mut spawner = spawn::Spawner::new(&job, proxy_id, host);
    // Spawned processes: (pid, alive).
    let mut children: Vec<(u32, u32, bool)> = Vec::new();
    while left > 0 {
        let event = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(e) => Some(e),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        if kill_at.is_some_and(|t| Instant::now() >= t) {
            signal_all(&pids, libc::SIGKILL);
            signal_all(&children, libc::SIGKILL);
            kill_at = None;
        }
        match event {
            None => {}
            Some(Event::Exited(rank, status, unfinished)) => {
                left -= 1;
                if let Some(p) = pids.iter_mut().find(|p| p.0 == rank) {
                    p.2 = false;
                }
                // Freed before the exit is reported: once rivetrun ends,
                // nothing a rank registered is left.
                let (done, freed) = mpsc::channel();
                let who = format!("rank {rank} (on {host})");
                pmi.send(pmi::Cmd::Ended { rank, who, done });
                let _ = freed.recv_timeout(Duration::from_secs(10));
                let (code, sig) = code_and_signal(status);
                if !lost {
                    let _ = up.send(&[
                        cmd::EXIT.to_string(),
                        rank.to_string(),
                        code.to_string(),
                        sig.to_string(),
                        u8::from(unfinished).to_string(),
                    ]);
                }
                if !lost && kill_at.is_none() {
                    pmix::member_ended(pmix_host.as_ref(), &job.kvsname, rank, Some(&up));
                }
            }
            Some(Event::Spawn(ask)) if lost || kill_at.is_some() => {
                let why = "the job is being torn down".to_string();
                eprintln!(
                    "rivetrun: spawn requested by rank {} of {} failed: {why}",
                    ask.rank, ask.kvs
                );
                spawn::refuse_or_answer(ask.asker, Err(why.into()), &pmi);
            }
            Some(Event::Spawn(ask)) => {
                for c in spawner.spawn(ask, &pmi, &up, &priority, pmix_host.as_ref()) {
                    let spawn::Child {
                        kvs,
                        index,
                        started,
                        said: _,
                    } = c;
                    let mut child = started.child;
                    let pid = child.id();
                    children.push((index, pid, true));
                    left += 1;
                    let label = job.label.then(|| format!("[{kvs}:{index}] "));
                    outputs.extend(output_threads(started.stdout, started.stderr, label));
                    let tx = tx.clone();
                    std::thread::spawn(move || {
                        if let Ok(status) = child.wait() {
                            let _ = tx.send(Event::SpawnedExited(kvs, index, pid, status));
                        }
                    });
                }
            }
            Some(Event::SpawnedExited(kvs, index, pid, status)) => {
                left -= 1;
                if let Some(c) = children.iter_mut().find(|c| c.1 == pid) {
                    c.2 = false;
                }
                let (code, sig) = code_and_signal(status);
                if !lost {
                    let _ = up.send(&[
                        cmd::SEXIT.to_string(),
                        kvs.clone(),
                        index.to_string(),
                        code.to_string(),
                        sig.to_string(),
                    ]);
                }
                if !lost && kill_at.is_none() {
                    pmix::member_ended(pmix_host.as_ref(), &kvs, index, Some(&up));
                }
            }
            Some(Event::MemberEnded(ns, rank)) if !lost && kill_at.is_none() => {
                pmix::member_ended(pmix_host.as_ref(), &ns, rank, None);
            }
            Some(Event::MemberEnded(..)) => {}
            Some(Event::PmixSpawned(words)) => {
                pmix::spawned_elsewhere(pmix_host.as_ref(), &job.hosts, &words);
            }
            Some(Event::Signal(sig)) => {
                signal_all(&pids, sig);
                signal_all(&children, sig);
            }
            Some(Event::Term) => {
                signal_all(&pids, libc::SIGTERM);
                signal_all(&children, libc::SIGTERM);
                kill_at.get_or_insert(Instant::now() + grace);
            }
            Some(Event::Lost) => {
                lost = true;
                signal_all(&pids, libc::SIGKILL);
                signal_all(&children, libc::SIGKILL);
            }
        }
    }
    for t in outputs {
        let _ = t.join();
    }
    if lost {
        return Err("lost the connection to rivetrun; killed this node's ranks".into());
    }
    let _ = up.send(&[cmd::DONE, &t_job, &t_placed, &t_started]);
    Ok(0)
}
