//! The end of processes: reaping, freeing what they registered, judging
//! exits, and tearing the job down (SIGTERM, then SIGKILL after the grace).

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Instant;

use rivet_pmi::server::{ConnId, NsId};

use super::{Failure, Phase, Supervisor, Who};

impl Supervisor {
    /// Collect exited processes and judge how they ended. Runs only after a
    /// SIGCHLD: one `waitpid(-1)` per exited child, not one per process per event.
    pub(super) fn reap(&mut self) {
        if !std::mem::take(&mut self.child_exited) {
            return;
        }
        loop {
            let mut raw = 0;
            // SAFETY: waitpid writes the status into a local we own.
            let pid = unsafe { libc::waitpid(-1, &mut raw, libc::WNOHANG) };
            if pid <= 0 {
                break; // 0: none exited yet; -1: no children left (ECHILD) or EINTR, retried on the next SIGCHLD
            }
            let Some(proc) = self.procs.iter().position(|p| p.pid == pid as u32) else {
                continue;
            };
            let status = ExitStatus::from_raw(raw);
            self.procs[proc].status = Some(status);
            remove_fabric_segments(pid as u32);
            // Its last PMI words (finalize) may still be unread.
            let conns: Vec<ConnId> = self
                .conns
                .iter()
                .filter(|(_, c)| c.proc == Some(proc))
                .map(|(id, _)| *id)
                .collect();
            for conn in conns {
                self.read_conn(conn, true);
            }
            // Its own end is judged first, so a crash is reported as the
            // crash rather than as leaving a group.
            self.judge_exit(proc, status);
            let (ns, rank) = (self.procs[proc].ns, self.procs[proc].rank);
            let mut outputs = Vec::new();
            self.server.process_ended(ns, rank, &mut outputs);
            if let Some(link) = &self.group_link {
                link.process_ended(&self.server, ns, rank);
            }
            self.apply(outputs);
            self.pmix_member_ended(ns, rank);
            self.free_resources(proc);
        }
        if self.all_exited_at.is_none() && self.procs.iter().all(|p| p.status.is_some()) {
            self.all_exited_at = Some(Instant::now());
        }
    }

    /// PMIx groups the process was in hear that it ended; one that did not
    /// allow that fails the job, as a PMI-1 group does.
    fn pmix_member_ended(&mut self, ns: NsId, rank: u32) {
        // Once the job is going down, ends are our doing: nobody to tell.
        let (Some(host), Phase::Running) = (&self.pmix, &self.phase) else {
            return;
        };
        let nspace = self.server.namespace_name(ns).to_string();
        let ended = host.member_ended(&nspace, rank);
        for e in ended.errors {
            eprintln!("rivetrun: warning: {}: {e}", self.who(ns, rank));
        }
        if let Some(group) = ended.forbidden.into_iter().next() {
            let who = self.who(ns, rank);
            self.job_failed(Failure::GroupLeft { who, group });
        }
    }

    /// What the process registered and did not release (seed 002): freed
    /// now that it ended, each one that was still there named on stderr.
    pub(super) fn free_resources(&mut self, proc: usize) {
        let (ns, rank) = (self.procs[proc].ns, self.procs[proc].rank);
        let left = self.server.take_resources(ns, rank);
        crate::resources::free_left(&self.procs[proc].who, left);
    }

    pub(super) fn judge_exit(&mut self, proc: usize, status: ExitStatus) {
        if !matches!(self.phase, Phase::Running) {
            return; // we are stopping the job; its processes' ends are our doing
        }
        let who = self.procs[proc].who.clone();
        let failure = match (status.code(), status.signal()) {
            (Some(0), _) => {
                let state = &self.procs[proc];
                let others_running = self.procs.iter().any(|p| p.status.is_none());
                if state.spoke_pmi
                    && !self.server.is_finalized(state.ns, state.rank)
                    && others_running
                {
                    Failure::NoFinalize { who }
                } else {
                    return;
                }
            }
            (Some(code), _) => Failure::Exited { who, code },
            (None, Some(signal)) => Failure::Signaled { who, signal },
            (None, None) => Failure::Internal(format!("{who} ended with status {status}")),
        };
        self.job_failed(failure);
    }

    /// A process failed the job: tear it down, or with
    /// `--disable-auto-cleanup` report it and let the others run on.
    pub(super) fn job_failed(&mut self, failure: Failure) {
        if self.keep_going {
            eprintln!(
                "rivetrun: {}; {} keep running (--disable-auto-cleanup)",
                failure.describe(),
                self.alive_text(true, failure.who())
            );
            self.failure.get_or_insert(failure);
            return;
        }
        self.begin_teardown(failure);
    }

    /// "2 rank(s)", "1 rank(s) and 3 spawned process(es)", ... of the
    /// processes still running (`other`: "2 other rank(s)"), not counting
    /// `except` (the one that failed, which may still be running: an abort).
    pub(super) fn alive_text(&self, other: bool, except: Option<&Who>) -> String {
        let running = |spawned: bool| {
            self.procs
                .iter()
                .filter(|p| {
                    p.status.is_none()
                        && Some(&p.who) != except
                        && matches!(p.who, Who::Spawned { .. }) == spawned
                })
                .count()
        };
        let (ranks, children) = (running(false), running(true));
        let other = if other { "other " } else { "" };
        match (ranks, children) {
            (r, 0) => format!("{r} {other}rank(s)"),
            (0, c) => format!("{c} {other}spawned process(es)"),
            (r, c) => format!("{r} {other}rank(s) and {c} spawned process(es)"),
        }
    }

    pub(super) fn begin_teardown(&mut self, failure: Failure) {
        if self.failure.is_none() {
            if self.procs.iter().any(|p| p.status.is_none()) {
                let other = if failure.who().is_some() {
                    "other "
                } else {
                    ""
                };
                eprintln!(
                    "rivetrun: {}; terminating the {other}{}",
                    failure.describe(),
                    self.alive_text(false, failure.who())
                );
            } else {
                eprintln!("rivetrun: {}", failure.describe());
            }
            self.failure = Some(failure);
        }
        if matches!(self.phase, Phase::Running) {
            self.kill_all(libc::SIGTERM);
            self.phase = Phase::TearingDown {
                kill_at: Instant::now() + self.grace,
            };
        }
    }

    /// Signal the process group of every process still running (ranks and spawned).
    pub(super) fn kill_all(&self, signal: i32) {
        for p in self.procs.iter().filter(|p| p.status.is_none()) {
            // SAFETY: kill(2) takes no pointers; -pid names the process's own group.
            unsafe { libc::kill(-(p.pid as libc::pid_t), signal) };
        }
    }

    /// Signal every process group of the job, exited processes included (their children may linger).
    pub(super) fn kill_groups(&self, signal: i32) {
        for p in &self.procs {
            // SAFETY: as in `kill_all`.
            unsafe { libc::kill(-(p.pid as libc::pid_t), signal) };
        }
    }
}

/// Removes what libfabric's shm provider left in /dev/shm for process
/// `pid` (`<pid>:<n>:<m>`: its endpoints' queues, unlinked only by a
/// process that closes them, so a killed rank leaves them behind).
fn remove_fabric_segments(pid: u32) {
    let prefix = format!("{pid}:");
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let numbered = |s: &str| {
            s.split(':')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        };
        if name.starts_with(&prefix) && numbered(&name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
