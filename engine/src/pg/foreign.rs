//! A process group other than our own: another job's COMM_WORLD, met
//! through connect/accept or spawn (seed 000, "all other process groups").
//!
//! Its KVS is not ours to read, so the connection info of its members
//! (business cards) arrives with its description and is cached here. Its
//! VCs are counted: the group holds one reference per VC that some VC table
//! uses, and is freed when the last goes (`Pgs::release`).

use std::collections::HashMap;

use rivet_netmods::{peer_id, FxBuildHasher};

use super::vc::Vc;
use crate::route::Route;

pub struct ForeignPg {
    /// The group's name as its process manager gave it (its KVS name).
    pub id: String,
    pub size: u32,
    /// Our slot number for it: the high half of its VCs' ids.
    pub slot: u32,
    cards: HashMap<u32, String, FxBuildHasher>,
    pub(super) vcs: HashMap<u32, Box<Vc>, FxBuildHasher>,
    /// VCs with a nonzero reference count (seed 000: the group's own count).
    pub refs: u32,
}

impl ForeignPg {
    pub fn new(id: String, size: u32, slot: u32) -> ForeignPg {
        ForeignPg {
            id,
            size,
            slot,
            cards: HashMap::default(),
            vcs: HashMap::default(),
            refs: 0,
        }
    }

    /// The VC to `rank`, created on first use.
    pub fn vc(&mut self, rank: u32, window: usize) -> Option<&mut Vc> {
        if rank >= self.size {
            return None;
        }
        let peer = peer_id(self.slot, rank);
        Some(
            self.vcs
                .entry(rank)
                .or_insert_with(|| Box::new(Vc::new(Route::Netmod(peer), window))),
        )
    }

    pub fn set_card(&mut self, rank: u32, card: String) {
        self.cards.insert(rank, card);
    }

    pub fn card(&self, rank: u32) -> Option<&str> {
        self.cards.get(&rank).map(String::as_str)
    }

    /// Every VC, for retiring the group: (rank, VC).
    pub fn into_vcs(self) -> impl Iterator<Item = (u32, Box<Vc>)> {
        self.vcs.into_iter()
    }

    pub fn vc_count(&self) -> usize {
        self.vcs.len()
    }
}
