//! rivetrun's side of a multi-host job (`-hosts`, `-hostfile`): one proxy
//! per node (`crate::proxy`), started through the chosen launcher
//! (`start`), connects back to a TCP port on the address `addr` picks and
//! authenticates with the job secret. rivetrun then only sees proxies:
//! each gets the job (its programs, MPMD apps included) and its node's
//! ranks; barriers go up a tree of proxies (`proxy::tree`, fan-out
//! `RIVET_PROXY_FANOUT`), so each costs rivetrun one message in and one out
//! (the job's new keys) per child of its own: its work per barrier grows
//! with hosts up to the fan-out, never with ranks (`--launch-stats` prints
//! the counts). A rank failing, or a proxy whose connection ends before its
//! ranks did (a dead host), fails the job: the message names the host,
//! the other proxies are told to terminate their ranks, and the exit code
//! is non-zero.
//!
//! Files: setting the job up and the event loop (`run`, here), the job as
//! the loop holds it and what each event does to it (`running`), what each
//! proxy message does (`messages`), what the loop hears and the threads that
//! hear it (`events`), each proxy's state and the failures naming its host
//! (`proxies`), rivetrun's signals (`signals`), the control wire (`wire`,
//! its commands in `commands`).

pub mod addr;
mod barrier;
pub mod commands;
mod describe;
mod events;
mod fence_timeouts;
mod jobwide;
mod messages;
mod pmix;
mod proxies;
mod running;
mod signals;
pub mod slurm;
pub mod start;
pub mod wire;

use std::ffi::OsString;
use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::error::LaunchError;
use crate::hosts::{self, Node};
use crate::launch::JobSpec;
use crate::proxy::tree;
use commands as cmd;
use describe::{describe, fanout, Place};
use events::{accept_proxies, Ev};
use proxies::{kill_launcher, Proxy};
use running::Running;
use signals::{catch_signals, SIGNALLED};

/// How long proxies have to connect back after rivetrun starts them.
const CONNECT_WITHIN: Duration = Duration::from_secs(30);

/// What the command line says about a multi-host job.
pub struct Options {
    pub launcher: start::Kind,
    pub launcher_exec: Option<String>,
    pub iface: Option<String>,
    pub label: bool,
    pub report_bindings: bool,
    pub genvnone: bool,
    pub map_by: String,
    pub bind_to: Option<String>,
    pub grace: f64,
    pub cluster: String,
    pub stats: bool,
    /// `--disable-auto-cleanup`: a failure is reported, the others run on.
    pub keep_going: bool,
    /// `--nameserver`: where names are published instead of rivetrun's table.
    pub name_server: Option<String>,
    /// `--pmi-port`: each proxy's ranks reach it over TCP (`PMI_PORT`).
    pub pmi_port: bool,
}

/// Run the job on `nodes`: `apps` are its programs (MPMD sections; one
/// for most jobs), `appnums` the app of each rank. rivetrun's exit code.
pub fn run(
    job: &JobSpec,
    apps: &[JobSpec],
    appnums: &[u32],
    nodes: Vec<Node>,
    opts: &Options,
) -> Result<i32, LaunchError> {
    let usage = LaunchError::Usage;
    let host_names: Vec<&str> = nodes.iter().map(|n| n.host.as_str()).collect();
    let ip = addr::control_address(opts.iface.as_deref(), &host_names).map_err(usage)?;
    let listener = TcpListener::bind((ip, 0)).map_err(LaunchError::Io)?;
    let control = format!(
        "{ip}:{}",
        listener.local_addr().map_err(LaunchError::Io)?.port()
    );
    let secret = job
        .env
        .iter()
        .find(|(k, _)| k == crate::job::JOB_SECRET_ENV)
        .map(|(_, v)| v.to_string_lossy().into_owned())
        .ok_or_else(|| usage("no job secret".into()))?;
    let exe = std::env::current_exe().map_err(LaunchError::Io)?;
    let slurm = opts.launcher == start::Kind::Slurm;
    // (argv, the proxies it starts); None: printed for starting by hand.
    let mut launches: Vec<(Option<Vec<OsString>>, Vec<u32>)> = Vec::new();
    let proxy_argv = |id: Option<usize>| {
        let mut v = vec![exe.display().to_string(), "--proxy".into(), control.clone()];
        if let Some(i) = id {
            v.extend(["--proxy-id".into(), i.to_string()]);
        }
        v
    };
    if slurm {
        let ids = (0..nodes.len() as u32).collect();
        launches.push((Some(slurm::srun_argv(&host_names, &proxy_argv(None))), ids));
    } else {
        let extra = start::extra_args();
        for (i, node) in nodes.iter().enumerate() {
            let proxy = proxy_argv(Some(i));
            let argv = start::argv(
                opts.launcher,
                opts.launcher_exec.as_deref(),
                &node.host,
                &proxy,
                &extra,
            )
            .map_err(usage)?;
            if argv.is_none() {
                let words: Vec<String> = proxy.iter().map(|w| start::shell_quote(w)).collect();
                println!(
                    "rivetrun: start on {}: {}={} {}",
                    node.host,
                    crate::proxy::SECRET_ENV,
                    secret,
                    words.join(" ")
                );
            }
            launches.push((argv, vec![i as u32]));
        }
    }
    // Ranks on different hosts are on different nodes (`PMI_process_mapping`),
    // so the engine uses shared memory only within a host.
    let node_of_rank = hosts::node_of_rank(&nodes, job.size);
    let map = rivet_pmi::server::process_mapping(&node_of_rank);
    let n = nodes.len() as u32;
    let fanout = fanout();
    let descriptions: Vec<Vec<Vec<u8>>> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let place = Place {
                apps,
                appnums,
                mapping: &map,
                has_parent: tree::parent(i as u32, fanout).is_some(),
                children: tree::children(Some(i as u32), n, fanout),
                hosts: &host_names,
            };
            describe(job, node, opts, &place)
        })
        .collect();
    // Barriers come from rivetrun's children in the tree only.
    let top = tree::children(None, n, fanout);
    let jobwide = jobwide::JobWide::new(
        &job.kvsname,
        job.size,
        &opts.cluster,
        opts.name_server.clone(),
    )
    .map_err(usage)?;
    let (tx, rx) = mpsc::channel();
    accept_proxies(listener, secret.clone(), n, tx.clone());
    catch_signals();
    let mut r = Running {
        opts,
        kvsname: job.kvsname.clone(),
        size: job.size,
        proxies: nodes
            .iter()
            .map(|n| Proxy {
                host: n.host.clone(),
                ranks: n.ranks.len(),
                ..Proxy::default()
            })
            .collect(),
        failure: None,
        jobwide,
        barrier: barrier::TopBarrier::new(top.clone()),
        colls: pmix::Collectives::default(),
        fence_timeouts: Default::default(),
        spawned_at: Default::default(),
        listening: vec![None; nodes.len()],
        node_of_rank,
        top,
        fanout,
        descriptions,
        stdin_node: nodes.iter().position(|n| n.ranks.contains(&0)).unwrap_or(0) as u32,
        started: Instant::now(),
        stats: Default::default(),
        exits: 0,
        tx,
    };
    for (argv, ids) in launches {
        let Some(argv) = argv else { continue };
        match start::spawn(&argv, &secret, slurm) {
            Ok(mut child) => {
                for &i in &ids {
                    r.proxies[i as usize].launcher_pid = Some(child.id());
                }
                let tx = r.tx.clone();
                std::thread::spawn(move || {
                    if let Ok(st) = child.wait() {
                        let _ = tx.send(Ev::LauncherExit(ids, st));
                    }
                });
            }
            Err(e) => {
                let mut names = Vec::new();
                for &i in &ids {
                    let p = &mut r.proxies[i as usize];
                    p.launcher_done = true;
                    p.closed = true;
                    names.push(p.host.clone());
                }
                let msg = format!("host {}: cannot start {:?}: {e}", names.join(", "), argv[0]);
                r.fail(1, msg);
            }
        }
    }
    r.started = Instant::now();
    let mut teardown_at: Option<Instant> = None;
    let grace = Duration::from_secs_f64(opts.grace.clamp(0.0, crate::cli::MAX_KILL_GRACE));
    loop {
        if r.failure.is_some() && teardown_at.is_none() && !opts.keep_going {
            teardown_at = Some(Instant::now() + grace + Duration::from_secs(5));
            r.terminate_all();
        }
        if r.proxies.iter().all(|p| p.closed && p.launcher_done) {
            break;
        }
        if let Some(t) = teardown_at {
            if Instant::now() >= t {
                // Whatever has not gone by now is killed outright.
                for p in r.proxies.iter_mut() {
                    kill_launcher(p);
                    p.closed = true;
                }
                if r.proxies.iter().all(|p| p.launcher_done) {
                    break;
                }
                teardown_at = Some(Instant::now() + Duration::from_secs(2));
                if r.proxies
                    .iter()
                    .all(|p| p.launcher_pid.is_none() || p.launcher_done)
                {
                    break;
                }
            }
        }
        let sig = SIGNALLED.swap(0, Ordering::Relaxed);
        if sig != 0 {
            for p in r.proxies.iter_mut().filter(|p| !p.closed) {
                if let Some(c) = &mut p.conn {
                    let _ = wire::send(c, &[cmd::SIGNAL.to_string(), sig.to_string()]);
                }
            }
            if r.failure.is_none() && r.proxies.iter().any(|p| !p.connected) {
                r.fail(128 + sig, format!("signal {sig} during start-up"));
            }
        }
        if r.failure.is_none() && r.started.elapsed() > CONNECT_WITHIN {
            let late: Vec<&str> = r
                .proxies
                .iter()
                .filter(|p| !p.connected)
                .map(|p| p.host.as_str())
                .collect();
            if !late.is_empty() {
                let msg = format!(
                    "the proxies on {} did not connect back to {control} within {}s",
                    late.join(", "),
                    CONNECT_WITHIN.as_secs()
                );
                r.fail(1, msg);
            }
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(ev) => r.on_event(ev),
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    if opts.stats {
        r.print_stats();
    }
    Ok(r.failure.unwrap_or(0))
}
