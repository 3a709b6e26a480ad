//! The process manager's death ends the rank.
//!
//! A rank whose launcher died (`kill -9` of rivetrun, a lost node daemon)
//! can never finish: it cannot reach the KVS, and nobody will reap it. A
//! rank busy in a wait loop would spin forever. So while the engine is
//! initialised through PMI, a thread blocks in `poll(2)` on a duplicate of
//! the PMI connection, asking only for hang-up (`POLLRDHUP`: no data is
//! read, so the client's replies are untouched). When the connection
//! hangs up the thread says so on stderr and ends the process at once
//! (`_exit(1)`), whatever its other threads are doing. Finalize stops the
//! watch before it says goodbye to the process manager, which may then
//! close the connection.
//!
//! rivetrun also gives its children a parent-death signal; this watch
//! covers what that cannot: a rank started under a wrapper (`sh -c`, a
//! debugger), and launchers that set none (Hydra).

use std::io::{self, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::thread::JoinHandle;

/// A running watch; [`PmiWatch::stop`] (or drop) ends it.
pub(crate) struct PmiWatch {
    /// Writing a byte here wakes the watching thread to stop.
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

impl PmiWatch {
    /// Watch the PMI connection `fd` on behalf of rank `rank`.
    pub(crate) fn start(fd: BorrowedFd<'_>, rank: u32) -> io::Result<PmiWatch> {
        // Our own descriptor: the client may close its own at any time.
        let conn = fd.try_clone_to_owned()?;
        let (wake, stop) = pipe()?;
        let thread = std::thread::Builder::new()
            .name("rivet-pmi-watch".into())
            .spawn(move || watch(conn, wake, rank))?;
        Ok(PmiWatch {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// End the watch and wait for its thread (which then closes its
    /// duplicate of the connection).
    pub(crate) fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // SAFETY: write(2) reads one byte from a local array.
            let _ = unsafe { libc::write(stop.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for PmiWatch {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `(read end, write end)` of a close-on-exec pipe.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [RawFd; 2] = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and nothing else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Block until the connection hangs up (then end the process) or `wake`
/// becomes readable (then return).
fn watch(conn: OwnedFd, wake: OwnedFd, rank: u32) {
    let mut fds = [
        libc::pollfd {
            fd: conn.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        },
        libc::pollfd {
            fd: wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: poll(2) reads and writes exactly the two pollfds we own.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return; // cannot watch; the rank still sees errors on its next PMI call
        }
        if fds[1].revents != 0 {
            return;
        }
        let hung_up = libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR;
        if fds[0].revents & hung_up != 0 {
            // Not eprintln!: with the launcher gone stderr may be a broken
            // pipe, and a panic here would end this thread, not the process.
            let _ = writeln!(
                io::stderr(),
                "rivet: rank {rank}: the process manager closed the PMI connection \
                 (the launcher died?); exiting"
            );
            // SAFETY: _exit takes no pointers; it ends the process without
            // running destructors, which other threads may be using.
            unsafe { libc::_exit(1) };
        }
        if fds[0].revents & libc::POLLNVAL != 0 {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_stopped_watch_ends_quietly_and_reads_nothing() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let mut watch = PmiWatch::start(a.as_fd(), 0).unwrap();
        // Data towards the client stays for the client to read.
        b.write_all(b"y").unwrap();
        watch.stop();
        let mut got = [0u8; 1];
        a.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"y");
        // The watch's duplicate is closed: the other end sees only `a`.
        drop(a);
        assert_eq!(b.read(&mut got).unwrap(), 0);
    }
}
