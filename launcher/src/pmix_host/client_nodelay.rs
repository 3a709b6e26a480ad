//! Nagle off on each client's end of its PMIx connection.
//!
//! OpenPMIx 4.2.2's client connects to the server over TCP on loopback and
//! never sets `TCP_NODELAY` (`pmix_ptl_base_setup_socket`, which would, is
//! called nowhere). Some of its messages get no answer: in `MPI_Finalize`
//! Open MPI's client sends several event deregistrations in a row, then its
//! finalize. The server reads the first at once but, having answered the
//! client's earlier requests quickly, the kernel delays its ACK (up to
//! 40 ms); Nagle holds the next message on the client until that ACK comes.
//! Every rank stalled about 40 ms in `MPI_Finalize` that way, under
//! `mpirun.openmpi` as under rivetrun (`strace -f -tt`, 2 ranks).
//!
//! The server cannot change the client's socket through its own end, but
//! rivetrun started the client: once the client has connected (the
//! library's `client_connected` upcall) rivetrun takes a copy of the
//! client's socket (`pidfd_getfd`, which needs the ptrace access a parent
//! has to its children) and sets `TCP_NODELAY` on it. The socket is known
//! by its peer, the server's own listening address (from the `PMIX_SERVER_URI*`
//! variables `PMIx_server_setup_fork` gives). Where the copy is refused, the
//! client keeps Nagle and only pays the stall.
//!
//! The upcall knows a client by its namespace and rank, the fork by its
//! pid: whichever of the two comes second does the work.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};

/// A client: (namespace, rank).
type Client = (String, u32);

/// What the forks and the upcalls have told so far.
#[derive(Default)]
struct Clients {
    /// The server's listening addresses (empty: no server here).
    server: Vec<SocketAddr>,
    /// Clients started, not yet connected, and their pids.
    pids: HashMap<Client, u32>,
    /// Clients connected before their fork was recorded.
    early: HashSet<Client>,
}

static CLIENTS: Mutex<Option<Clients>> = Mutex::new(None);

fn clients() -> MutexGuard<'static, Option<Clients>> {
    CLIENTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The addresses in `PMIx_server_setup_fork`'s variables
/// (`PMIX_SERVER_URI*=<name>;tcp4://127.0.0.1:<port>`) are the server's:
/// remembered for the clients to come.
pub(super) fn learn_server(env: &[(String, String)]) {
    let found: Vec<SocketAddr> = env
        .iter()
        .filter(|(k, _)| k.starts_with("PMIX_SERVER_URI"))
        .filter_map(|(_, v)| server_addr(v))
        .collect();
    if found.is_empty() {
        return;
    }
    let mut guard = clients();
    let c = guard.get_or_insert_with(Clients::default);
    for addr in found {
        if !c.server.contains(&addr) {
            c.server.push(addr);
        }
    }
}

/// The socket address of a PMIx server URI (`name;tcp4://ip:port` or
/// `name;tcp6://[ip]:port`).
fn server_addr(uri: &str) -> Option<SocketAddr> {
    let (_, rest) = uri.split_once("://")?;
    rest.parse().ok()
}

/// Process `rank` of `nspace` was forked as `pid` with this server's
/// variables (`launch.rs`).
pub fn started(nspace: &str, rank: u32, pid: u32) {
    let client = (nspace.to_string(), rank);
    let server = {
        let mut guard = clients();
        let Some(c) = guard.as_mut() else {
            return; // no server in this process
        };
        if !c.early.remove(&client) {
            c.pids.insert(client, pid);
            return;
        }
        c.server.clone()
    };
    let _ = set_nodelay(pid, &server);
}

/// The library's `client_connected` upcall for `nspace`'s `rank`.
pub(super) fn connected(nspace: String, rank: u32) {
    let client = (nspace, rank);
    let (pid, server) = {
        let mut guard = clients();
        let Some(c) = guard.as_mut() else {
            return;
        };
        match c.pids.remove(&client) {
            Some(pid) => (pid, c.server.clone()),
            None => {
                c.early.insert(client);
                return;
            }
        }
    };
    let _ = set_nodelay(pid, &server);
}

/// Set `TCP_NODELAY` on every socket of process `pid` whose peer is one of
/// `server`; how many it set.
pub(super) fn set_nodelay(pid: u32, server: &[SocketAddr]) -> io::Result<usize> {
    // SAFETY: pidfd_open(pid, 0) takes no pointers; a negative result is
    // an error, anything else a new fd we own.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if pidfd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd of our own, closed when dropped.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    let mut set = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let Ok(entry) = entry else { continue };
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if !is_socket {
            continue;
        }
        // SAFETY: pidfd_getfd(pidfd, fd, 0) takes no pointers; it returns
        // a new fd of ours for the target's socket, or -1.
        let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
        if copy < 0 {
            continue;
        }
        // SAFETY: a fresh fd of our own (a socket), closed when dropped;
        // TcpStream only calls getpeername and setsockopt on it.
        let sock = unsafe { TcpStream::from_raw_fd(copy as i32) };
        if sock.peer_addr().is_ok_and(|peer| server.contains(&peer))
            && sock.set_nodelay(true).is_ok()
        {
            set += 1;
        }
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::process::{Child, Command, Stdio};

    /// A child holding one connection to each of `addrs` (bash's /dev/tcp),
    /// once both are accepted.
    fn child_connected_to(listeners: &[&TcpListener]) -> (Child, Vec<TcpStream>) {
        let mut script = String::new();
        for (i, l) in listeners.iter().enumerate() {
            let a = l.local_addr().unwrap();
            script += &format!("exec {}<>/dev/tcp/{}/{}; ", 3 + i, a.ip(), a.port());
        }
        script += "read -r _";
        let child = Command::new("bash")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let accepted = listeners.iter().map(|l| l.accept().unwrap().0).collect();
        (child, accepted)
    }

    /// TCP_NODELAY of the child's socket connected to `server`.
    fn nodelay_of(pid: u32, server: SocketAddr) -> bool {
        // SAFETY: as in set_nodelay.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        assert!(pidfd >= 0, "{}", io::Error::last_os_error());
        // SAFETY: a fresh fd of ours.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
        for fd in 0..64 {
            // SAFETY: as in set_nodelay.
            let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
            if copy < 0 {
                continue;
            }
            // SAFETY: a fresh fd of ours.
            let sock = unsafe { TcpStream::from_raw_fd(copy as i32) };
            if sock.peer_addr().is_ok_and(|p| p == server) {
                return sock.nodelay().unwrap();
            }
        }
        panic!("the child has no socket connected to {server}");
    }

    #[test]
    fn sets_nodelay_on_the_clients_server_socket_only() {
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let (mut child, _accepted) = child_connected_to(&[&server, &other]);
        let pid = child.id();
        let (s, o) = (server.local_addr().unwrap(), other.local_addr().unwrap());
        assert!(!nodelay_of(pid, s), "Nagle is on before");
        assert_eq!(set_nodelay(pid, &[s]).unwrap(), 1);
        assert!(nodelay_of(pid, s));
        assert!(
            !nodelay_of(pid, o),
            "a socket to another peer is left alone"
        );
        drop(child.stdin.take());
        child.wait().unwrap();
    }

    /// Whichever comes second, the fork's record or the upcall, sets it.
    #[test]
    fn the_fork_and_the_upcall_meet_in_either_order() {
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = server.local_addr().unwrap();
        learn_server(&[(
            "PMIX_SERVER_URI41".into(),
            format!("pmix-server.1;tcp4://{s}"),
        )]);
        let (mut first, _a) = child_connected_to(&[&server]);
        started("nodelay-test-a", 0, first.id());
        assert!(!nodelay_of(first.id(), s), "not before it connects");
        connected("nodelay-test-a".into(), 0);
        assert!(nodelay_of(first.id(), s));

        let (mut second, _b) = child_connected_to(&[&server]);
        connected("nodelay-test-b".into(), 3);
        started("nodelay-test-b", 3, second.id());
        assert!(nodelay_of(second.id(), s));
        for child in [&mut first, &mut second] {
            drop(child.stdin.take());
            child.wait().unwrap();
        }
    }

    #[test]
    fn a_process_that_is_gone_is_an_error() {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(set_nodelay(pid, &["127.0.0.1:1".parse().unwrap()]).is_err());
    }

    #[test]
    fn server_addresses_come_from_the_uris() {
        assert_eq!(
            server_addr("pmix-server.12;tcp4://127.0.0.1:38587"),
            Some("127.0.0.1:38587".parse().unwrap())
        );
        assert_eq!(
            server_addr("pmix-server.12;tcp6://[::1]:40000"),
            Some("[::1]:40000".parse().unwrap())
        );
        assert_eq!(server_addr("pmix-server.12"), None);
    }
}
