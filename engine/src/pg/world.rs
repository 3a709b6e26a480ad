//! This process's own process group: the job it was started in.
//!
//! A VC is created the first time a rank is addressed, so a process that
//! talks to three peers of a million-rank job holds three VCs (seed 000's
//! scalability note). VCs of node-local peers sit in a table indexed by
//! local rank (O(ranks on this node)); the rest in a two-level table by rank
//! (`ranks.rs`: chunks only where ranks were used). Connection info
//! comes from the KVS, or, for an engine bootstrapped externally, from the
//! addresses the caller gave (`cards`). The world's VCs are never freed (seed 000, rule 4).

use super::ranks::RankTable;
use super::vc::Vc;
use crate::error::{Error, Result};
use crate::node_map::NodeMap;
use crate::route::Route;

/// The world process group: who is where, and the VCs opened so far.
pub struct ProcessGroup {
    /// The process manager's name for the job (its KVS name).
    pub id: String,
    pub size: u32,
    pub my_rank: u32,
    pub node_map: NodeMap,
    /// Eager flow-control window per netmod peer.
    pub window: usize,
    /// Netmod business cards by rank when they came with the ranks'
    /// addresses (external bootstrap); empty: ask the KVS.
    pub cards: Vec<String>,
    me: Vc,
    local: Vec<Option<Box<Vc>>>,
    remote: RankTable<Box<Vc>>,
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
            cards: Vec::new(),
            me: Vc::new(Route::Loopback, window),
            local: (0..local_count).map(|_| None).collect(),
            remote: RankTable::default(),
        }
    }

    /// The same group with no VC opened yet: another worker's view of it
    /// (each worker keeps its own VCs, send queues and flow control).
    pub fn fresh(&self) -> ProcessGroup {
        let mut pg = ProcessGroup::new(
            self.id.clone(),
            self.size,
            self.my_rank,
            self.node_map.clone(),
            self.window,
        );
        pg.cards = self.cards.clone();
        pg
    }

    /// The VC to `rank`, created on first use. An existing VC is the
    /// inline path (every send and arrival asks): shared memory's by local
    /// index, the netmod's by rank.
    #[inline(always)]
    pub fn vc(&mut self, rank: u32) -> Result<&mut Vc> {
        if rank != self.my_rank {
            if !self.node_map.netmod_forced() {
                if let Some(i) = self.node_map.local_index(rank) {
                    if self.local[i].is_some() {
                        return Ok(self.local[i].as_deref_mut().expect("checked just above"));
                    }
                    return self.vc_slow(rank);
                }
            }
            if self.remote.contains(rank) {
                return Ok(self.remote.get_mut(rank).expect("checked just above"));
            }
        }
        self.vc_slow(rank)
    }

    #[inline(never)]
    fn vc_slow(&mut self, rank: u32) -> Result<&mut Vc> {
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
        Ok(self.remote.get_or_insert_with(rank, || {
            Box::new(Vc::new(Route::Netmod(rank.into()), window))
        }))
    }

    /// Ranks with a netmod VC that has not failed.
    pub fn live_netmod_ranks(&self) -> Vec<u32> {
        self.remote
            .iter()
            .filter(|(_, vc)| !vc.failed && matches!(vc.route, Route::Netmod(_)))
            .map(|(rank, _)| rank)
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
