//! The world process group and its virtual connections (seed 000).
//!
//! A process group is one MPI_COMM_WORLD: here, the job this process was
//! started in. A virtual connection (VC) is the path to one rank of it and
//! is created the first time that rank is addressed, so a process that talks
//! to three peers of a million-rank job holds three VCs. VCs of node-local
//! peers sit in a table indexed by local rank (O(ranks on this node)); the
//! rest in a map. Every communicator of this issue (world and its dups)
//! shares the world's rank numbering, so a communicator rank names a VC
//! directly; other process groups come with dynamic processes.

use std::collections::{HashMap, VecDeque};

use rivet_netmods::{FxBuildHasher, PeerId};

use crate::error::{Error, Result};
use crate::node_map::NodeMap;
use crate::wire::WireHeader;

/// How bytes reach the peer of a VC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// This process: delivered straight into its own matching.
    Loopback,
    /// Node-local rank, by index into the node's local ranks.
    Shm(usize),
    /// Through a network module.
    Netmod(PeerId),
}

/// Whether single-copy reads from the peer work (learned on first use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmaState {
    Untried,
    Works,
    Refused,
}

/// A message waiting for room in its transport, in send order.
pub enum Outgoing {
    /// One message; `buf` stays valid while request `done` (if any) is not
    /// complete, or is empty for control messages.
    Msg {
        header: WireHeader,
        buf: *const u8,
        len: usize,
        /// Send request to mark transmitted once the message is taken.
        done: u64,
    },
    /// The pieces of a rendezvous message on the copy path: `Data`
    /// messages of `piece` bytes from `buf[offset..len]`.
    Stream {
        header: WireHeader,
        buf: *const u8,
        len: usize,
        offset: usize,
        piece: usize,
        /// The send request, completed when the last piece is taken.
        sreq: u64,
    },
}

impl Outgoing {
    pub fn request(&self) -> u64 {
        match self {
            Outgoing::Msg { done, .. } => *done,
            Outgoing::Stream { sreq, .. } => *sreq,
        }
    }
}

pub struct Vc {
    pub route: Route,
    /// Messages that found the transport full; sent before anything newer.
    pub pending: VecDeque<Outgoing>,
    /// Listed in the engine's set of VCs with pending messages.
    pub listed: bool,
    pub cma: CmaState,
    /// The peer is gone: sends to it fail at once.
    pub failed: bool,
    /// The peer said `Bye` (it finalized): its connection closing is the
    /// end of a finished conversation, not a failure.
    pub finalized: bool,
    /// Netmod routes: eager bytes we may still send before the peer
    /// returns credit (see `protocol.rs`, flow control).
    pub credit: usize,
    /// Netmod routes: eager bytes from the peer consumed here but not yet
    /// returned to it as credit.
    pub owed: usize,
}

impl Vc {
    fn new(route: Route, window: usize) -> Vc {
        Vc {
            route,
            pending: VecDeque::new(),
            listed: false,
            cma: CmaState::Untried,
            failed: false,
            finalized: false,
            credit: window,
            owed: 0,
        }
    }
}

/// The world process group: who is where, and the VCs opened so far.
pub struct ProcessGroup {
    /// The process manager's name for the job (its KVS name).
    pub id: String,
    pub size: u32,
    pub my_rank: u32,
    pub node_map: NodeMap,
    /// Eager flow-control window per netmod peer.
    pub window: usize,
    me: Vc,
    local: Vec<Option<Box<Vc>>>,
    remote: HashMap<u32, Box<Vc>, FxBuildHasher>,
}

impl ProcessGroup {
    pub fn new(
        id: String,
        size: u32,
        my_rank: u32,
        node_map: NodeMap,
        window: usize,
    ) -> ProcessGroup {
        let local_count = node_map.local_ranks().len();
        ProcessGroup {
            id,
            size,
            my_rank,
            node_map,
            window,
            me: Vc::new(Route::Loopback, window),
            local: (0..local_count).map(|_| None).collect(),
            remote: HashMap::default(),
        }
    }

    /// The VC to `rank`, created on first use.
    #[inline]
    pub fn vc(&mut self, rank: u32) -> Result<&mut Vc> {
        if rank == self.my_rank {
            return Ok(&mut self.me);
        }
        if !self.node_map.netmod_forced() {
            if let Some(i) = self.node_map.local_index(rank) {
                let window = self.window;
                return Ok(
                    self.local[i].get_or_insert_with(|| Box::new(Vc::new(Route::Shm(i), window)))
                );
            }
        }
        if rank >= self.size {
            return Err(Error::RankOutOfRange {
                rank: rank.into(),
                size: self.size,
            });
        }
        let window = self.window;
        Ok(self
            .remote
            .entry(rank)
            .or_insert_with(|| Box::new(Vc::new(Route::Netmod(rank.into()), window))))
    }

    /// Ranks with a netmod VC that has not failed.
    pub fn live_netmod_ranks(&self) -> Vec<u32> {
        self.remote
            .iter()
            .filter(|(_, vc)| !vc.failed && matches!(vc.route, Route::Netmod(_)))
            .map(|(&rank, _)| rank)
            .collect()
    }

    /// Open VCs by path: (shared memory, netmod).
    pub fn vcs_by_path(&self) -> (usize, usize) {
        let shm = self.local.iter().filter(|v| v.is_some()).count();
        (shm, self.remote.len())
    }

    /// VCs opened so far (loopback excluded).
    pub fn open_vcs(&self) -> usize {
        self.local.iter().filter(|v| v.is_some()).count() + self.remote.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vcs_are_created_on_first_use_only() {
        let map = NodeMap::from_mapping("(vector,(0,2,2))", 4, 1);
        let mut pg = ProcessGroup::new("kvs".into(), 4, 1, map, 1 << 20);
        assert_eq!(pg.open_vcs(), 0);
        assert_eq!(pg.vc(1).unwrap().route, Route::Loopback);
        assert_eq!(pg.vc(0).unwrap().route, Route::Shm(0));
        assert_eq!(pg.vc(3).unwrap().route, Route::Netmod(3));
        assert_eq!(pg.open_vcs(), 2);
        assert!(matches!(pg.vc(4), Err(Error::RankOutOfRange { .. })));
    }
}
