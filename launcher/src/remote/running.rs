//! A multi-host job as rivetrun's event loop holds it while it runs: the
//! proxies, what they share job-wide (the barrier, PMIx collectives, names
//! and groups), the job's failure, and what each event does to them. The
//! loop itself (timeouts, signals, the teardown) is `run` in `mod.rs`; what
//! each proxy message does is `messages.rs`.

use std::collections::HashMap;
use std::net::TcpStream;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::mpsc;
use std::time::Instant;

use super::barrier::{self, TopBarrier};
use super::commands as cmd;
use super::events::{forward_stdin, read_proxy, Ev};
use super::fence_timeouts::FenceTimeouts;
use super::jobwide::JobWide;
use super::pmix::{self, Collectives};
use super::proxies::{fail, kill_launcher, stranded, Proxy};
use super::{start, wire, Options};
use crate::proxy::tree;

pub(super) struct Running<'a> {
    pub(super) opts: &'a Options,
    pub(super) kvsname: String,
    pub(super) size: u32,
    pub(super) proxies: Vec<Proxy>,
    /// The job's exit code once something failed.
    pub(super) failure: Option<i32>,
    pub(super) jobwide: JobWide,
    pub(super) barrier: TopBarrier,
    pub(super) colls: Collectives,
    /// Whole-job PMIx fences failed by a host's `PMIX_TIMEOUT`.
    pub(super) fence_timeouts: FenceTimeouts,
    /// The proxy that spawned each PMIx-spawned job (`pmix::spawned`).
    pub(super) spawned_at: HashMap<String, u32>,
    /// Where each proxy listens for its children (`listen`), once known.
    pub(super) listening: Vec<Option<Vec<u8>>>,
    pub(super) node_of_rank: Vec<u32>,
    /// rivetrun's children in the proxy tree: barriers come from them only.
    pub(super) top: Vec<u32>,
    pub(super) fanout: u32,
    /// Each proxy's job description, sent when it connects.
    pub(super) descriptions: Vec<Vec<Vec<u8>>>,
    /// The node of rank 0, which gets rivetrun's stdin.
    pub(super) stdin_node: u32,
    pub(super) started: Instant,
    pub(super) stats: Stats,
    /// Ranks that exited so far.
    pub(super) exits: u32,
    pub(super) tx: mpsc::Sender<Ev>,
}

/// `--launch-stats`: when the last proxy connected, the first and last
/// barrier completed (ms from the start), the slowest proxy's phases, and
/// how many messages rivetrun handled.
#[derive(Default)]
pub(super) struct Stats {
    pub(super) t_hello: u128,
    pub(super) t_first: u128,
    pub(super) t_last: u128,
    pub(super) slowest: [u64; 3],
    pub(super) barrier_msgs: u64,
    pub(super) msgs: u64,
}

impl Running<'_> {
    pub(super) fn fail(&mut self, code: i32, msg: String) {
        fail(&mut self.failure, code, msg);
    }

    /// What one event does to the job.
    pub(super) fn on_event(&mut self, ev: Ev) {
        match ev {
            Ev::Hello(id, conn) => self.hello(id, conn),
            Ev::Stdin(data) => {
                if let Some(c) = &mut self.proxies[self.stdin_node as usize].conn {
                    let _ = match data {
                        Some(d) => wire::send(c, &[cmd::STDIN.as_bytes(), &d]),
                        None => wire::send(c, &[cmd::STDIN_EOF]),
                    };
                }
            }
            Ev::Msg(id, msg) => self.on_message(id, msg),
            Ev::NameAnswer(id, words) => {
                if let Some(c) = &mut self.proxies[id as usize].conn {
                    let _ = wire::send(c, &words);
                }
            }
            Ev::Closed(id) => self.closed(id),
            Ev::LauncherExit(ids, status) => self.launcher_exit(ids, status),
        }
    }

    /// Proxy `id` connected and proved itself: its job description, where
    /// its tree parent listens (if known yet), and a thread reading it.
    fn hello(&mut self, id: u32, mut conn: TcpStream) {
        let p = &mut self.proxies[id as usize];
        if p.connected || p.closed {
            return; // a second hello for one node, or too late
        }
        p.connected = true;
        self.stats.t_hello = self.started.elapsed().as_millis();
        for msg in &self.descriptions[id as usize] {
            let _ = std::io::Write::write_all(&mut conn, msg);
        }
        let Ok(read) = conn.try_clone() else {
            p.closed = true;
            return;
        };
        let listening = &self.listening;
        if let Some(addr) =
            tree::parent(id, self.fanout).and_then(|p| listening[p as usize].clone())
        {
            let _ = wire::send(&mut conn, &[cmd::PARENT.as_bytes(), &addr]);
        }
        p.conn = Some(conn);
        read_proxy(id, read, self.tx.clone());
        if id == self.stdin_node {
            forward_stdin(self.tx.clone());
        }
    }

    /// Proxy `id`'s connection closed: before its ranks ended, its host is
    /// lost; a barrier or PMIx collective that needed it cannot complete.
    pub(super) fn closed(&mut self, id: u32) {
        self.jobwide.proxy_gone(id);
        let p = &mut self.proxies[id as usize];
        p.closed = true;
        p.conn = None;
        if !p.done && (self.failure.is_none() || p.exited < p.ranks) {
            let msg = format!(
                "host {} lost: its proxy's connection closed before its ranks ended \
                 ({} of {} reported)",
                p.host, p.exited, p.ranks
            );
            self.fail(1, msg);
        }
        self.proxy_ended(id);
    }

    /// A barrier or PMIx collective waiting for proxy `id`, which ended.
    pub(super) fn proxy_ended(&mut self, id: u32) {
        if let barrier::Step::Stranded { ended, waiting } = self.barrier.ended(id) {
            stranded(&self.proxies, ended, waiting, &mut self.failure);
        }
        let (sends, k) = self.colls.ended(id);
        pmix::coll_lost(&self.proxies[id as usize].host, k);
        pmix::send(&mut self.proxies, sends);
    }

    /// The command that starts proxies `ids` (ssh, srun...) ended: fatal
    /// for any of them that never connected.
    fn launcher_exit(&mut self, ids: Vec<u32>, status: ExitStatus) {
        let how = match (status.code(), status.signal()) {
            (Some(c), _) => format!("exit code {c}"),
            (_, Some(s)) => format!("signal {s}"),
            _ => "an unknown status".into(),
        };
        for id in ids {
            let p = &mut self.proxies[id as usize];
            p.launcher_done = true;
            if p.connected || p.closed {
                continue;
            }
            p.closed = true;
            if self.failure.is_some() {
                continue; // stopped by the teardown
            }
            let hint = start::failure_hint(
                self.opts.launcher,
                self.opts.launcher_exec.as_deref(),
                status.code(),
            );
            let msg = format!(
                "host {}: the command starting its proxy ended ({how}) before the \
                 proxy connected back{hint}",
                p.host
            );
            self.fail(1, msg);
        }
    }

    /// The teardown's first step: every proxy still there ends its ranks
    /// (`term`); a proxy not yet connected has its launcher command killed.
    pub(super) fn terminate_all(&mut self) {
        for p in self.proxies.iter_mut().filter(|p| !p.closed) {
            match &mut p.conn {
                Some(c) => {
                    let _ = wire::send(c, &[cmd::TERM]);
                }
                None => kill_launcher(p),
            }
        }
    }

    /// `--launch-stats`, on stderr.
    pub(super) fn print_stats(&self) {
        let s = &self.stats;
        eprintln!(
            "rivetrun: launch times: last proxy connected at {} ms, first barrier \
             {} ms, last barrier {} ms, end {} ms; slowest proxy: job received \
             {} ms, ranks placed {} ms, all started {} ms after it began",
            s.t_hello,
            s.t_first,
            s.t_last,
            self.started.elapsed().as_millis(),
            s.slowest[0],
            s.slowest[1],
            s.slowest[2]
        );
        let completed = self.barrier.completed;
        eprintln!(
            "rivetrun: launch stats: {} hosts, {} ranks, proxy tree fan-out {}, {completed} \
             barriers, {} barrier messages from proxies ({:.1} per barrier), {} \
             messages in all",
            self.proxies.len(),
            self.size,
            self.fanout,
            s.barrier_msgs,
            if completed > 0 {
                s.barrier_msgs as f64 / completed as f64
            } else {
                0.0
            },
            s.msgs,
        );
    }
}
