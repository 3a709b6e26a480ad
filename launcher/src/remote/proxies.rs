//! The proxies as rivetrun tracks them, one per host: their state, the
//! failures that name their hosts, answers delivered to them, and killing
//! the command that started one.

use std::net::TcpStream;

use super::{jobwide, wire};

#[derive(Default)]
pub(super) struct Proxy {
    pub(super) host: String,
    pub(super) ranks: usize,
    pub(super) conn: Option<TcpStream>,
    pub(super) connected: bool,
    pub(super) closed: bool,
    pub(super) done: bool,
    pub(super) exited: usize,
    pub(super) launcher_pid: Option<u32>,
    pub(super) launcher_done: bool,
}

/// Report a failure of the job; the first one's code is rivetrun's.
pub(super) fn fail(failure: &mut Option<i32>, code: i32, msg: String) {
    eprintln!("rivetrun: {msg}");
    failure.get_or_insert(code);
}

/// Proxy `ended` ended while ranks of proxy `waiting`'s subtree are in a
/// barrier, which needs every rank: the job fails naming its host.
pub(super) fn stranded(proxies: &[Proxy], ended: u32, waiting: u32, failure: &mut Option<i32>) {
    if failure.is_some() {
        return; // a lost host has said so already
    }
    let (e, w) = (&proxies[ended as usize], &proxies[waiting as usize]);
    let how = if e.done {
        " (its ranks had all exited)"
    } else {
        ""
    };
    let msg = format!(
        "host {}: its proxy ended{how} while ranks on {} entered a barrier, which cannot \
         complete without them",
        e.host, w.host
    );
    fail(failure, 1, msg);
}

/// Send the job-wide server's answers to their proxies; its failures fail the job.
pub(super) fn deliver(proxies: &mut [Proxy], routed: jobwide::Routed, failure: &mut Option<i32>) {
    for (p, words) in routed.to {
        if let Some(c) = proxies.get_mut(p as usize).and_then(|p| p.conn.as_mut()) {
            let _ = wire::send(c, &words);
        }
    }
    for msg in routed.failures {
        if failure.is_none() {
            fail(failure, 1, msg);
        }
    }
}

/// SIGKILL the process group of a proxy's launcher command, if it runs.
pub(super) fn kill_launcher(p: &mut Proxy) {
    if let (Some(pid), false) = (p.launcher_pid, p.launcher_done) {
        // SAFETY: kill(2) takes no pointers; the group is the launcher
        // command's own (started in a session of its own), not yet reaped.
        unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
    }
}
