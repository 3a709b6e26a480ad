//! VC reference tables (seed 000's VCRT): a communicator's ranks → VCs.
//!
//! A communicator and its dups share one table (`Arc<Vcrt>`); an
//! intercommunicator holds two, local and remote. Creating a table takes a
//! reference on each of its foreign VCs (`Inner::new_vcrt`); dropping the
//! last handle gives them back (`Drop`, through [`ReleaseVcs`]), with
//! `disconnect` semantics when `Comm::disconnect` dropped it. The world's table is an implicit identity
//! map, so COMM_WORLD and its dups cost O(1) memory whatever the job size.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Weak;

use super::VcId;

/// Who takes a table's references back when its last handle goes: the
/// engine (`Inner`, `groups.rs`). A trait, so that the PG/VC layer names
/// nothing above it.
pub trait ReleaseVcs: Send + Sync {
    fn release_vcrt(&self, members: &[VcId], disconnect: bool);
}

pub enum Members {
    /// Rank r is world rank r.
    World { size: u32 },
    /// Rank r is `table[r]`.
    Table(Box<[VcId]>),
}

pub struct Vcrt {
    members: Members,
    /// Every member is of our own world: a communicator on this table alone
    /// may run on any worker (`Inner::worker_for`).
    world_only: bool,
    /// Set by `Comm::disconnect` on the last handle: release as disconnect.
    disconnect: AtomicBool,
    /// `None` for the world's table, which holds no references.
    engine: Option<Weak<dyn ReleaseVcs>>,
}

impl Vcrt {
    pub fn world(size: u32) -> Vcrt {
        Vcrt {
            members: Members::World { size },
            world_only: true,
            disconnect: AtomicBool::new(false),
            engine: None,
        }
    }

    /// A table whose references `engine` has already taken.
    pub(crate) fn table(members: Vec<VcId>, engine: Weak<dyn ReleaseVcs>) -> Vcrt {
        Vcrt {
            world_only: members.iter().all(|vc| vc.group() == 0),
            members: Members::Table(members.into_boxed_slice()),
            disconnect: AtomicBool::new(false),
            engine: Some(engine),
        }
    }

    /// The VC of communicator rank `rank` (< `size()`).
    #[inline]
    pub fn vc(&self, rank: u32) -> VcId {
        match &self.members {
            Members::World { .. } => VcId::world(rank),
            Members::Table(t) => t[rank as usize],
        }
    }

    /// The VC of `rank`, or `None` unless it is below `size()`: the size
    /// check and the table's bounds check are one compare.
    #[inline]
    pub fn vc_of(&self, rank: u32) -> Option<VcId> {
        match &self.members {
            Members::World { size } => (rank < *size).then(|| VcId::world(rank)),
            Members::Table(t) => t.get(rank as usize).copied(),
        }
    }

    #[inline]
    pub fn world_only(&self) -> bool {
        self.world_only
    }

    pub fn size(&self) -> u32 {
        match &self.members {
            Members::World { size } => *size,
            Members::Table(t) => t.len() as u32,
        }
    }

    pub fn members(&self) -> Vec<VcId> {
        (0..self.size()).map(|r| self.vc(r)).collect()
    }

    /// Release this table's references as `disconnect` does.
    pub fn mark_disconnect(&self) {
        self.disconnect.store(true, Ordering::Relaxed);
    }
}

impl Drop for Vcrt {
    fn drop(&mut self) {
        let Members::Table(members) = &self.members else {
            return;
        };
        if let Some(engine) = self.engine.as_ref().and_then(Weak::upgrade) {
            engine.release_vcrt(members, self.disconnect.load(Ordering::Relaxed));
        }
    }
}
