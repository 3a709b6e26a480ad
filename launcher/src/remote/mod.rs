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
//! Files: the event loop (`run`, here), what it hears and the threads that
//! hear it (`events`), each proxy's state and the failures naming its host
//! (`proxies`), rivetrun's signals (`signals`).

pub mod addr;
mod barrier;
pub mod commands;
mod describe;
mod events;
mod jobwide;
mod pmix;
mod proxies;
mod signals;
pub mod slurm;
pub mod start;
pub mod wire;

use std::ffi::OsString;
use std::net::TcpListener;
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::error::LaunchError;
use crate::hosts::{self, Node};
use crate::launch::JobSpec;
use crate::proxy::tree;
use commands as cmd;
use describe::{describe, fanout, Place};
use events::{accept_proxies, forward_stdin, read_proxy, Ev};
use proxies::{deliver, kill_launcher, stranded, Proxy};
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
        .find(|(k, _)| k == crate::JOB_SECRET_ENV)
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
    // The proxy that spawned each PMIx-spawned job (`pmix::spawned`).
    let mut spawned_at = std::collections::HashMap::new();
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
    // Where each proxy listens for its children (`listen`), once known.
    let mut listening: Vec<Option<Vec<u8>>> = vec![None; nodes.len()];

    let mut jobwide = jobwide::JobWide::new(
        &job.kvsname,
        job.size,
        &opts.cluster,
        opts.name_server.clone(),
    )
    .map_err(usage)?;
    let (tx, rx) = mpsc::channel();
    accept_proxies(listener, secret.clone(), nodes.len() as u32, tx.clone());
    catch_signals();
    let mut proxies: Vec<Proxy> = nodes
        .iter()
        .map(|n| Proxy {
            host: n.host.clone(),
            ranks: n.ranks.len(),
            ..Proxy::default()
        })
        .collect();
    let mut failure: Option<i32> = None;
    let fail = |failure: &mut Option<i32>, code: i32, msg: String| {
        eprintln!("rivetrun: {msg}");
        failure.get_or_insert(code);
    };
    for (argv, ids) in launches {
        let Some(argv) = argv else { continue };
        match start::spawn(&argv, &secret, slurm) {
            Ok(mut child) => {
                for &i in &ids {
                    proxies[i as usize].launcher_pid = Some(child.id());
                }
                let tx = tx.clone();
                std::thread::spawn(move || {
                    if let Ok(st) = child.wait() {
                        let _ = tx.send(Ev::LauncherExit(ids, st));
                    }
                });
            }
            Err(e) => {
                let mut names = Vec::new();
                for &i in &ids {
                    let p = &mut proxies[i as usize];
                    p.launcher_done = true;
                    p.closed = true;
                    names.push(p.host.clone());
                }
                let msg = format!("host {}: cannot start {:?}: {e}", names.join(", "), argv[0]);
                fail(&mut failure, 1, msg);
            }
        }
    }

    // The node of rank 0, which gets rivetrun's stdin.
    let stdin_node = nodes.iter().position(|n| n.ranks.contains(&0)).unwrap_or(0) as u32;
    let started = Instant::now();
    // --launch-stats: when the last proxy connected, the first and last
    // barrier completed (ms from here), the slowest proxy's phases.
    let (mut t_hello, mut t_first, mut t_last) = (0u128, 0u128, 0u128);
    let mut slowest = [0u64; 3];
    let mut teardown_at: Option<Instant> = None;
    let mut barrier = barrier::TopBarrier::new(top.clone());
    let mut colls = pmix::Collectives::default();
    let (mut barrier_msgs, mut msgs) = (0u64, 0u64);
    let mut exits = 0u32;
    let grace = Duration::from_secs_f64(opts.grace.clamp(0.0, crate::cli::MAX_KILL_GRACE));
    loop {
        if failure.is_some() && teardown_at.is_none() && !opts.keep_going {
            teardown_at = Some(Instant::now() + grace + Duration::from_secs(5));
            for p in proxies.iter_mut().filter(|p| !p.closed) {
                match &mut p.conn {
                    Some(c) => {
                        let _ = wire::send(c, &[cmd::TERM]);
                    }
                    None => kill_launcher(p),
                }
            }
        }
        if proxies.iter().all(|p| p.closed && p.launcher_done) {
            break;
        }
        if let Some(t) = teardown_at {
            if Instant::now() >= t {
                // Whatever has not gone by now is killed outright.
                for p in proxies.iter_mut() {
                    kill_launcher(p);
                    p.closed = true;
                }
                if proxies.iter().all(|p| p.launcher_done) {
                    break;
                }
                teardown_at = Some(Instant::now() + Duration::from_secs(2));
                if proxies
                    .iter()
                    .all(|p| p.launcher_pid.is_none() || p.launcher_done)
                {
                    break;
                }
            }
        }
        let sig = SIGNALLED.swap(0, Ordering::Relaxed);
        if sig != 0 {
            for p in proxies.iter_mut().filter(|p| !p.closed) {
                if let Some(c) = &mut p.conn {
                    let _ = wire::send(c, &[cmd::SIGNAL.to_string(), sig.to_string()]);
                }
            }
            if failure.is_none() && proxies.iter().any(|p| !p.connected) {
                fail(
                    &mut failure,
                    128 + sig,
                    format!("signal {sig} during start-up"),
                );
            }
        }
        if failure.is_none() && started.elapsed() > CONNECT_WITHIN {
            let late: Vec<&str> = proxies
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
                fail(&mut failure, 1, msg);
            }
        }
        let ev = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(ev) => ev,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        match ev {
            Ev::Hello(id, mut conn) => {
                let p = &mut proxies[id as usize];
                if p.connected || p.closed {
                    continue; // a second hello for one node, or too late
                }
                p.connected = true;
                t_hello = started.elapsed().as_millis();
                for msg in &descriptions[id as usize] {
                    let _ = std::io::Write::write_all(&mut conn, msg);
                }
                let Ok(read) = conn.try_clone() else {
                    p.closed = true;
                    continue;
                };
                if let Some(addr) =
                    tree::parent(id, fanout).and_then(|p| listening[p as usize].clone())
                {
                    let _ = wire::send(&mut conn, &[cmd::PARENT.as_bytes(), &addr]);
                }
                p.conn = Some(conn);
                read_proxy(id, read, tx.clone());
                if id == stdin_node {
                    forward_stdin(tx.clone());
                }
            }
            Ev::Stdin(data) => {
                if let Some(c) = &mut proxies[stdin_node as usize].conn {
                    let _ = match data {
                        Some(d) => wire::send(c, &[cmd::STDIN.as_bytes(), &d]),
                        None => wire::send(c, &[cmd::STDIN_EOF]),
                    };
                }
            }
            Ev::Msg(id, msg) => {
                msgs += 1;
                let i = id as usize;
                let word = |n: usize| msg.get(n).map(|w| wire::text(w)).unwrap_or_default();
                match word(0).as_str() {
                    cmd::BARRIER => {
                        barrier_msgs += 1;
                        match barrier.arrive(id, msg.into_iter().skip(1)) {
                            barrier::Step::Waiting => {}
                            barrier::Step::Complete(out) => {
                                t_last = started.elapsed().as_millis();
                                if barrier.completed == 1 {
                                    t_first = t_last;
                                }
                                let line = wire::line(&out);
                                for &t in &top {
                                    if let Some(c) = &mut proxies[t as usize].conn {
                                        let _ = std::io::Write::write_all(c, &line);
                                    }
                                }
                            }
                            barrier::Step::Stranded { ended, waiting } => {
                                stranded(&proxies, ended, waiting, &mut failure, &fail);
                            }
                        }
                    }
                    cmd::STRANDED => {
                        // A child of this proxy ended before its subtree's barrier came.
                        let child = word(1).parse::<u32>().ok();
                        if let Some(c) = child.filter(|&c| tree::parent(c, fanout) == Some(id)) {
                            stranded(&proxies, c, id, &mut failure, &fail);
                        }
                    }
                    cmd::EXIT => {
                        proxies[i].exited += 1;
                        exits += 1;
                        let (rank, code, sig) = (word(1), word(2), word(3));
                        if let Ok(r) = rank.parse() {
                            let routed = jobwide.ended(&job.kvsname, r);
                            deliver(&mut proxies, routed, &mut failure, &fail);
                        }
                        let code: i32 = code.parse().unwrap_or(1);
                        let sig: i32 = sig.parse().unwrap_or(0);
                        let host = &proxies[i].host;
                        if sig != 0 && failure.is_none() {
                            fail(
                                &mut failure,
                                code,
                                format!("rank {rank} on {host} was killed by signal {sig}"),
                            );
                        } else if code != 0 && failure.is_none() {
                            fail(
                                &mut failure,
                                code,
                                format!("rank {rank} on {host} exited with code {code}"),
                            );
                        } else if word(4) == "1" && failure.is_none() && exits < job.size {
                            let msg = format!(
                                "rank {rank} on {host} exited with code 0 without finalizing \
                                 PMI; the other processes could wait for it forever"
                            );
                            fail(&mut failure, 1, msg);
                        }
                    }
                    cmd::ABORT => {
                        let code: i32 = word(2).parse().unwrap_or(1);
                        let msg = format!(
                            "rank {} on {} called abort (exit code {code}): {}",
                            word(1),
                            proxies[i].host,
                            word(3)
                        );
                        if failure.is_none() {
                            fail(&mut failure, code, msg);
                        }
                    }
                    cmd::ERROR => {
                        let msg = format!("host {}: {}", proxies[i].host, word(1));
                        fail(&mut failure, 1, msg);
                    }
                    cmd::SEXIT => {
                        // A spawned process: (kvsname, index, code, signal).
                        let (kvs, index) = (word(1), word(2));
                        let code: i32 = word(3).parse().unwrap_or(1);
                        let sig: i32 = word(4).parse().unwrap_or(0);
                        let host = proxies[i].host.clone();
                        if failure.is_none() && (code != 0 || sig != 0) {
                            let how = if sig != 0 {
                                format!("was killed by signal {sig}")
                            } else {
                                format!("exited with code {code}")
                            };
                            let msg = format!("spawned process {index} of {kvs} on {host} {how}");
                            fail(&mut failure, if code != 0 { code } else { 1 }, msg);
                        }
                        if let Ok(r) = index.parse() {
                            let routed = jobwide.ended(&kvs, r);
                            deliver(&mut proxies, routed, &mut failure, &fail);
                        }
                    }
                    cmd::ORPHANED => {
                        // A barrier of this proxy's subtree needs its parent proxy, which ended.
                        let parent = tree::parent(id, fanout).map(|p| &proxies[p as usize]);
                        if let (Some(parent), None) = (parent, failure) {
                            let why = if parent.done {
                                ": its proxy ended (its ranks had all exited)"
                            } else {
                                " lost: its proxy's connection closed"
                            };
                            let msg = format!(
                                "host {}{why} while ranks on {} below it in the proxy tree \
                                 needed it for a barrier, which cannot complete",
                                parent.host, proxies[i].host
                            );
                            fail(&mut failure, 1, msg);
                        }
                    }
                    cmd::SPAWNED => {
                        if let Err(e) = jobwide.spawned(&msg) {
                            eprintln!("rivetrun: host {}: spawned namespace: {e}", proxies[i].host);
                        }
                    }
                    cmd::NAME => match jobwide.name(&msg) {
                        Some(jobwide::NameAction::Reply(words)) => {
                            if let Some(c) = &mut proxies[i].conn {
                                let _ = wire::send(c, &words);
                            }
                        }
                        Some(jobwide::NameAction::Ask(addr, request)) => {
                            let tx = tx.clone();
                            let conn = msg.get(3).cloned().unwrap_or_default();
                            std::thread::spawn(move || {
                                let result = crate::nameserver::ask(&addr, &request);
                                let words = jobwide::name_done(&conn, result);
                                let _ = tx.send(Ev::NameAnswer(id, words));
                            });
                        }
                        None => {}
                    },
                    cmd::GEND => {
                        pmix::member_ended(id, &msg, &mut proxies);
                        let left = pmix::group_left(&job.kvsname, &msg, &proxies[i].host);
                        if let (Some(why), None) = (left, failure) {
                            fail(&mut failure, 1, why);
                        }
                    }
                    cmd::PMIX_SPAWNED => pmix::spawned(id, &msg, &mut spawned_at, &mut proxies),
                    cmd::DMODEX => {
                        let target = pmix::target(&msg, &node_of_rank, &spawned_at);
                        pmix::ask(id, &msg, target, &mut proxies)
                    }
                    cmd::DMODEX_DATA => pmix::answer(&msg, &mut proxies),
                    cmd::COLL => {
                        let gone =
                            |n: u32| proxies.get(n as usize).is_some_and(|p| p.done || p.closed);
                        let (sends, lost) = colls.arrive(id, &msg, n, gone);
                        if let Some(l) = lost {
                            pmix::coll_lost(&proxies[l as usize].host, 1);
                        }
                        pmix::send(&mut proxies, sends);
                    }
                    cmd::PMI => {
                        let routed = jobwide.relay(id, &msg);
                        deliver(&mut proxies, routed, &mut failure, &fail);
                    }
                    cmd::LISTEN => {
                        let addr = msg.get(1).cloned().unwrap_or_default();
                        for c in tree::children(Some(id), n, fanout) {
                            if let Some(conn) = &mut proxies[c as usize].conn {
                                let _ = wire::send(conn, &[cmd::PARENT.as_bytes(), &addr]);
                            }
                        }
                        listening[i] = Some(addr);
                    }
                    cmd::DONE => {
                        proxies[i].done = true;
                        // Its parent proxy may never have heard from it (it
                        // can end before it learns where the parent listens):
                        // a barrier there must not wait for it.
                        if let Some(parent) = tree::parent(id, fanout) {
                            if let Some(conn) = &mut proxies[parent as usize].conn {
                                let _ = wire::send(conn, &[cmd::CHILD_DONE, &id.to_string()]);
                            }
                        }
                        if let barrier::Step::Stranded { ended, waiting } = barrier.ended(id) {
                            stranded(&proxies, ended, waiting, &mut failure, &fail);
                        }
                        let (sends, k) = colls.ended(id);
                        pmix::coll_lost(&proxies[i].host, k);
                        pmix::send(&mut proxies, sends);
                        for (k, slot) in slowest.iter_mut().enumerate() {
                            let t = word(k + 1).parse::<u64>().unwrap_or(0);
                            *slot = (*slot).max(t);
                        }
                    }
                    _ => {}
                }
            }
            Ev::NameAnswer(id, words) => {
                if let Some(c) = &mut proxies[id as usize].conn {
                    let _ = wire::send(c, &words);
                }
            }
            Ev::Closed(id) => {
                jobwide.proxy_gone(id);
                let p = &mut proxies[id as usize];
                p.closed = true;
                p.conn = None;
                if !p.done && (failure.is_none() || p.exited < p.ranks) {
                    let msg = format!(
                        "host {} lost: its proxy's connection closed before its ranks ended \
                         ({} of {} reported)",
                        p.host, p.exited, p.ranks
                    );
                    fail(&mut failure, 1, msg);
                }
                if let barrier::Step::Stranded { ended, waiting } = barrier.ended(id) {
                    stranded(&proxies, ended, waiting, &mut failure, &fail);
                }
                let (sends, k) = colls.ended(id);
                pmix::coll_lost(&proxies[id as usize].host, k);
                pmix::send(&mut proxies, sends);
            }
            Ev::LauncherExit(ids, status) => {
                let how = match (status.code(), status.signal()) {
                    (Some(c), _) => format!("exit code {c}"),
                    (_, Some(s)) => format!("signal {s}"),
                    _ => "an unknown status".into(),
                };
                for id in ids {
                    let p = &mut proxies[id as usize];
                    p.launcher_done = true;
                    if p.connected || p.closed {
                        continue;
                    }
                    p.closed = true;
                    if failure.is_some() {
                        continue; // stopped by the teardown
                    }
                    let hint = start::failure_hint(
                        opts.launcher,
                        opts.launcher_exec.as_deref(),
                        status.code(),
                    );
                    let msg = format!(
                        "host {}: the command starting its proxy ended ({how}) before the \
                         proxy connected back{hint}",
                        p.host
                    );
                    fail(&mut failure, 1, msg);
                }
            }
        }
    }
    if opts.stats {
        eprintln!(
            "rivetrun: launch times: last proxy connected at {t_hello} ms, first barrier \
             {t_first} ms, last barrier {t_last} ms, end {} ms; slowest proxy: job received \
             {} ms, ranks placed {} ms, all started {} ms after it began",
            started.elapsed().as_millis(),
            slowest[0],
            slowest[1],
            slowest[2]
        );
        eprintln!(
            "rivetrun: launch stats: {} hosts, {} ranks, proxy tree fan-out {fanout}, {} \
             barriers, {barrier_msgs} barrier messages from proxies ({:.1} per barrier), {msgs} \
             messages in all",
            nodes.len(),
            job.size,
            barrier.completed,
            if barrier.completed > 0 {
                barrier_msgs as f64 / barrier.completed as f64
            } else {
                0.0
            },
        );
    }
    Ok(failure.unwrap_or(0))
}
