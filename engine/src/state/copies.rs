//! What the shared single copies stand at (`copy.rs` does them). A copy
//! names its peer by shm slot; the pid to copy with is the shm transport's
//! (`ShmLink::pids`), looked up when the copy runs.

use crate::pg::VcId;

/// The copies under way: parts to copy now, and receives waiting for the
/// sender's part.
#[derive(Default)]
pub struct Copies {
    pub(crate) jobs: Vec<Job>,
    pub(crate) splits: Vec<Split>,
    /// Single-copy receives so far: read whole by the receiver, and shared
    /// with the sender (for `info`).
    pub whole: u64,
    pub shared: u64,
}

impl Copies {
    pub fn busy(&self) -> bool {
        !self.jobs.is_empty()
    }
}

/// One part to copy with a single syscall.
pub(crate) enum Job {
    /// Receiver: read `len` bytes at `src` in the process at shm slot
    /// `peer` into `dst`.
    Read {
        rreq: u64,
        from: VcId,
        peer: usize,
        src: u64,
        dst: *mut u8,
        len: usize,
    },
    /// Sender: write `len` bytes of `src` to `dst` in the process at shm
    /// slot `peer`, then answer `Written` for the peer's receive `rreq`.
    Write {
        sreq: u64,
        to: VcId,
        peer: usize,
        src: *const u8,
        dst: u64,
        len: usize,
        rreq: u64,
        context: u32,
    },
}

/// A receive whose second part the sender writes.
pub(crate) struct Split {
    pub(crate) rreq: u64,
    pub(crate) from: VcId,
    /// The sender's shm slot (its pid is the shm transport's).
    pub(crate) peer: usize,
    /// The sender's part: its address there, ours here, its length.
    pub(crate) src_rest: u64,
    pub(crate) dst_rest: *mut u8,
    pub(crate) rest: usize,
    /// For the final `Ack`.
    pub(crate) context: u32,
    pub(crate) sreq: u64,
}
