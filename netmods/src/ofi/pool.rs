//! The shared receive pool: how many generic receive buffers are posted,
//! and the buffers themselves.
//!
//! Generic receives are posted with `FI_ADDR_UNSPEC`, so every peer's
//! messages land in one pool. Its size follows the peers that are *busy*
//! (sent us a message in sequence in this or the last keepalive round),
//! not the peers connected: `RX_DEPTH` plus a credit window
//! (`wire::CONN_RECVS`) for each busy peer, up to `cap` of them. An idle
//! connected peer therefore costs no receive memory. A peer that wakes up
//! still cannot have more than its credit window of messages unhandled
//! here; what finds no posted buffer waits in the provider's store of
//! unexpected messages (`FI_RM_ENABLED`; `ofi_rxm` keeps it in its own
//! buffers) until the pool grows at the next poll. The shm provider of
//! libfabric 1.17 loses messages beyond a small unexpected store, so
//! there every connection keeps its window posted, as before
//! ([`Pool::per_connection`]).
//!
//! The buffers are anonymous mappings of their own, not heap memory: a
//! posted buffer that nothing was received into costs no resident memory,
//! and one given back returns its pages. (libfabric 1.17's `ofi_rxm` takes
//! `FI_MULTI_RECV` only for untagged receives, and this netmod's are
//! tagged, so one large multi-receive buffer is not an option.)

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use super::wire::CONN_RECVS;

/// Receive buffers kept posted whatever the peers do: control messages
/// and the first messages of a peer that just woke up.
pub(crate) const RX_DEPTH: usize = 32;
/// Busy peers whose credit windows get buffers of their own in the shared
/// pool; beyond them they share what is posted and the provider's store.
pub(crate) const SHARED_BUSY_MAX: usize = 16;
/// With per-connection windows (shm): connections that get one.
pub(crate) const CONN_MAX: usize = 64;

/// How many generic receives to keep posted.
pub(crate) struct Pool {
    /// Every connection keeps its window posted (providers that lose
    /// unexpected messages).
    per_connection: bool,
    /// Busy peers in this keepalive round and in the last one.
    busy_now: usize,
    busy_last: usize,
}

impl Pool {
    pub(crate) fn new(provider: &str) -> Pool {
        Pool {
            per_connection: Pool::per_connection(provider),
            busy_now: 0,
            busy_last: 0,
        }
    }

    /// Providers whose store of unexpected messages is too small to take
    /// what the credit windows of idle peers allow: libfabric's `shm`.
    pub(crate) fn per_connection(provider: &str) -> bool {
        provider.split(';').next() == Some("shm")
    }

    /// A peer sent its first message in sequence of this round.
    pub(crate) fn busy(&mut self) {
        self.busy_now += 1;
    }

    /// A new keepalive round (the connections' busy flags are cleared).
    pub(crate) fn round(&mut self) {
        self.busy_last = std::mem::take(&mut self.busy_now);
    }

    /// Buffers to keep posted with `conns` connections.
    pub(crate) fn target(&self, conns: usize) -> usize {
        let windows = if self.per_connection {
            conns.min(CONN_MAX)
        } else {
            self.busy_now.max(self.busy_last).min(SHARED_BUSY_MAX)
        };
        RX_DEPTH + CONN_RECVS * windows
    }

    /// The rule in use, for `describe`.
    pub(crate) fn describe(&self) -> &'static str {
        if self.per_connection {
            "a credit window per connection"
        } else {
            "a credit window per busy peer"
        }
    }

    /// The most `target` can be.
    pub(crate) fn most(&self) -> usize {
        let cap = if self.per_connection {
            CONN_MAX
        } else {
            SHARED_BUSY_MAX
        };
        RX_DEPTH + CONN_RECVS * cap
    }
}

/// A receive buffer in an anonymous mapping of its own: its pages become
/// resident only when written, and go back to the kernel when it drops.
pub(crate) struct PageBuf {
    p: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by the buffer alone (like a Box<[u8]>).
unsafe impl Send for PageBuf {}

impl PageBuf {
    /// `len` (> 0) zero bytes.
    pub(crate) fn new(len: usize) -> std::io::Result<PageBuf> {
        let len = len.max(1);
        // SAFETY: a fresh private anonymous mapping; no existing memory
        // is named.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let p = NonNull::new(p.cast()).ok_or_else(|| std::io::Error::other("mmap gave null"))?;
        Ok(PageBuf { p, len })
    }
}

impl Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` readable bytes mapped for the buffer's lifetime.
        unsafe { std::slice::from_raw_parts(self.p.as_ptr(), self.len) }
    }
}

impl DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.p.as_ptr(), self.len) }
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; no operation
        // still uses it (the buffer is dropped with its completed or
        // never-posted operation, or after the endpoint closed).
        unsafe { libc::munmap(self.p.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_follows_busy_peers_not_connections() {
        let mut p = Pool::new("tcp;ofi_rxm");
        assert_eq!(p.target(1000), RX_DEPTH, "idle peers cost nothing");
        p.busy();
        p.busy();
        assert_eq!(p.target(1000), RX_DEPTH + 2 * CONN_RECVS);
        // Busy in the last round still counts; two rounds idle do not.
        p.round();
        p.busy();
        assert_eq!(p.target(1000), RX_DEPTH + 2 * CONN_RECVS);
        p.round();
        assert_eq!(p.target(1000), RX_DEPTH + CONN_RECVS);
        p.round();
        assert_eq!(p.target(1000), RX_DEPTH);
        for _ in 0..1000 {
            p.busy();
        }
        assert_eq!(p.target(1000), p.most());
        assert_eq!(p.most(), RX_DEPTH + SHARED_BUSY_MAX * CONN_RECVS);
    }

    #[test]
    fn shm_keeps_a_window_per_connection() {
        let p = Pool::new("shm");
        assert_eq!(p.target(3), RX_DEPTH + 3 * CONN_RECVS);
        assert_eq!(p.target(1000), p.most());
        assert!(!Pool::per_connection("tcp;ofi_rxm"));
        assert!(!Pool::per_connection("verbs;ofi_rxm"));
    }

    #[test]
    fn page_buffers_are_zeroed_and_writable() {
        let mut b = PageBuf::new(70_000).unwrap();
        assert_eq!(b.len(), 70_000);
        assert!(b.iter().all(|&x| x == 0));
        b[69_999] = 7;
        assert_eq!(b[69_999], 7);
    }
}
