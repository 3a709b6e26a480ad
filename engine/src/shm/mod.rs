//! Shared memory between the ranks of one node.
//!
//! One segment per node and job (`segment`), created by the node's lowest
//! rank, attached by the others and unlinked by the last to attach, so a
//! crash after start-up leaks nothing. Inside it:
//! - per ordered pair, a fastbox ring (`fastbox`) of cache-line slots for
//!   small messages: the receiver polls memory only it and one writer touch;
//! - per rank, a Nemesis-style lock-free MPSC receive queue and a free queue
//!   of cells (`queue`) for everything bigger and for fan-in;
//! - per-pair sequence numbers that merge the two back into send order.
//!
//! Large messages do not pass through here whole: the engine's rendezvous
//! protocol reads them with `cma` (process_vm_readv) or streams them as cell
//! sized pieces through `ShmNode::try_send`.

pub mod cma;

use crate::wire::WireHeader;

/// Sizes of the node segment; read from `RIVET_SHM_*` by the leader and
/// recorded in the segment so every rank agrees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShmConfig {
    /// Bytes of each per-pair fastbox ring (`RIVET_SHM_FASTBOX_SIZE`).
    pub fastbox_bytes: usize,
    /// Largest payload sent through a fastbox ring (`RIVET_SHM_FASTBOX_MAX`).
    pub fastbox_max: usize,
    /// Cells per rank (`RIVET_SHM_CELLS`).
    pub cells_per_rank: usize,
    /// Bytes per cell, header included (`RIVET_SHM_CELL_SIZE`).
    pub cell_bytes: usize,
}

impl ShmConfig {
    pub fn from_env() -> Result<ShmConfig, ShmError> {
        todo!()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    #[error("{0}")]
    Todo(String),
}

/// This process's view of the node segment: the sending and receiving ends
/// of every local channel.
pub struct ShmNode {}

impl ShmNode {
    /// Create, size (mode 0600) and initialise the segment `name` for
    /// `local_size` ranks, then attach as local rank `my_local`.
    pub fn create(
        name: &str,
        local_size: usize,
        my_local: usize,
        config: &ShmConfig,
    ) -> Result<ShmNode, ShmError> {
        let _ = (name, local_size, my_local, config);
        todo!()
    }

    /// Attach to a segment the leader created; the last rank to attach
    /// unlinks its name.
    pub fn attach(name: &str, local_size: usize, my_local: usize) -> Result<ShmNode, ShmError> {
        let _ = (name, local_size, my_local);
        todo!()
    }

    /// Largest payload `try_send` accepts.
    pub fn max_payload(&self) -> usize {
        todo!()
    }

    /// Queue one message for local rank `peer`. `Ok(false)`: no room now;
    /// try again after polling (the caller keeps its own order).
    pub fn try_send(
        &mut self,
        peer: usize,
        header: &WireHeader,
        payload: &[u8],
    ) -> Result<bool, ShmError> {
        let _ = (peer, header, payload);
        todo!()
    }

    /// Hand up to `budget` arrived messages to `deliver(peer, header,
    /// payload)`, in each sender's send order. The payload borrows shared
    /// memory and is valid only during the call.
    pub fn poll(
        &mut self,
        budget: usize,
        deliver: impl FnMut(usize, &WireHeader, &[u8]),
    ) -> Result<usize, ShmError> {
        let _ = (budget, deliver);
        todo!()
    }

    /// Process id of local rank `peer` (for single-copy reads).
    pub fn peer_pid(&self, peer: usize) -> u32 {
        let _ = peer;
        todo!()
    }

    pub fn config(&self) -> &ShmConfig {
        todo!()
    }
}
