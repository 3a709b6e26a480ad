//! The VCs and process groups as the protocol state holds them, and the
//! list of VCs with messages queued: what code above `state/` asks of them
//! (the VC of an id, our own group, a foreign group's registration and
//! references), each a method saying what it is for.

use crate::error::Result;
use crate::pg::{ForeignPg, PgCounts, ProcessGroup, Vc, VcId};
use crate::state::State;

impl State {
    /// The VC `id` names (a world rank's is created on first use): its
    /// route, send queue and flow-control state. On the send path.
    #[inline]
    pub fn vc(&mut self, id: VcId) -> Result<&mut Vc> {
        self.pgs.vc(id)
    }

    /// Whether `id` names a VC that exists or may be created (a netmod's
    /// straggler from a group already gone does not).
    #[inline]
    pub fn knows(&self, id: VcId) -> bool {
        self.pgs.knows(id)
    }

    /// The world rank at slot `peer` of the node segment. On the shared
    /// memory receive path.
    #[inline]
    pub fn local_rank(&self, peer: usize) -> Option<u32> {
        self.pgs.world.node_map.local_ranks().get(peer).copied()
    }

    /// Our own process group, whole and read-only: callers describe us
    /// from it (its id, size, our rank, the node map and VC counts for
    /// `info`, our member description for other groups), several of its
    /// parts at once, none of which they change.
    pub fn world(&self) -> &ProcessGroup {
        &self.pgs.world
    }

    /// The business card cached for `id` (see `Pgs::card`); `None`: look
    /// it up in the KVS.
    pub fn card(&self, id: VcId) -> Option<&str> {
        self.pgs.card(id)
    }

    /// Register foreign process group `id` of `size` ranks, if new:
    /// `(slot, new)`.
    pub fn add_group(&mut self, id: &str, size: u32) -> Result<(u32, bool)> {
        self.pgs.add_group(id, size)
    }

    /// The business card a group description gave for foreign VC `id`.
    pub fn set_card(&mut self, id: VcId, card: String) {
        if let Some(pg) = self.pgs.group(id.group()) {
            pg.set_card(id.rank(), card);
        }
    }

    /// A VC table now holds `id` (seed 000's reference counts).
    pub fn add_ref(&mut self, id: VcId) -> Result<()> {
        self.pgs.add_ref(id)
    }

    /// A VC table no longer holds `id`: the foreign group, if this was
    /// its last reference, for the caller to retire (`Core::retire_group`).
    pub fn release_ref(&mut self, id: VcId, disconnect: bool) -> Option<ForeignPg> {
        self.pgs.release(id, disconnect)
    }

    /// Live process groups and VCs (`Engine::counts`).
    pub fn pg_counts(&self) -> PgCounts {
        self.pgs.counts()
    }

    /// Foreign groups, for `info`: (name, size, VCs, references).
    pub fn foreign_groups(&self) -> Vec<(String, u32, usize, u32)> {
        self.pgs.foreign_groups()
    }

    /// Whether some VC has messages queued (`Core::flush` has work).
    #[inline]
    pub fn sends_queued(&self) -> bool {
        !self.pending_vcs.is_empty()
    }

    /// The `i`-th VC with messages queued, for `Core::flush` to walk.
    #[inline]
    pub fn queued_vc(&self, i: usize) -> Option<VcId> {
        self.pending_vcs.get(i).copied()
    }

    /// The `i`-th VC with messages queued has none left (or can send none
    /// any more): take it off the list; the last one takes its place.
    pub fn unlist_queued(&mut self, i: usize) {
        let id = self.pending_vcs.swap_remove(i);
        if let Ok(vc) = self.pgs.vc(id) {
            vc.listed = false;
        }
    }
}
