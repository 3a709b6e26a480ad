//! Process groups and virtual connections (seed 000), explicit.
//!
//! A process group (PG) is one COMM_WORLD. This process's own (`world.rs`)
//! is described by the KVS; every other one (`foreign.rs`) arrives with a
//! description shipped by connect/accept or spawn (`desc.rs`) and caches its
//! members' connection info. A VC (`vc.rs`) is named `VcId` = (PG slot,
//! rank); slot 0 is our own world, `TEMP_GROUP` holds the temporary VCs of
//! port connections. Communicators see VCs through VC reference tables
//! (`vcrt.rs`), shared by dups.
//!
//! Reference counts follow seed 000's table: Comm → VCRT (an `Arc`) → VC
//! (`Vc::refs`, 0 → 2 on first use, so `free` leaves the connection and
//! `disconnect` ends it) → PG (`ForeignPg::refs`, the number of VCs in use).
//! A foreign PG whose count returns to 0 is freed: its connections are
//! closed after a `Bye` and its slot is never reused.

mod desc;
mod foreign;
mod ranks;
mod vc;
mod vcrt;
mod world;

use std::collections::HashMap;

use rivet_netmods::{FxBuildHasher, PeerId, TEMP_GROUP};

pub use crate::vc_id::VcId;
pub use desc::{contact, split_contact, GroupDesc, MemberDesc};
pub use foreign::ForeignPg;
pub use vc::{Outgoing, Vc};
pub use vcrt::{ReleaseVcs, Vcrt};
pub use world::ProcessGroup;

use crate::error::{Error, Result};
use crate::route::Route;

/// Live objects of the PG/VC layer, for tests and `--info`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PgCounts {
    /// Process groups known: ours plus foreign ones.
    pub process_groups: usize,
    /// VCs of foreign groups (ours are never freed, so not counted).
    pub foreign_vcs: usize,
    /// Foreign VCs with a nonzero reference count.
    pub referenced_vcs: usize,
    /// Temporary VCs of port connections.
    pub temp_vcs: usize,
}

/// Every process group this process knows, and their VCs.
pub struct Pgs {
    pub world: ProcessGroup,
    foreign: HashMap<u32, ForeignPg, FxBuildHasher>,
    next_slot: u32,
    temp: HashMap<u32, Box<Vc>, FxBuildHasher>,
}

impl Pgs {
    pub fn new(world: ProcessGroup) -> Pgs {
        Pgs {
            world,
            foreign: HashMap::default(),
            next_slot: 1,
            temp: HashMap::default(),
        }
    }

    /// The VC `id` names; world VCs are created on first use.
    #[inline]
    pub fn vc(&mut self, id: VcId) -> Result<&mut Vc> {
        if id.0 >> 32 == 0 {
            return self.world.vc(id.0 as u32);
        }
        self.other_vc(id)
    }

    #[cold]
    fn other_vc(&mut self, id: VcId) -> Result<&mut Vc> {
        let window = self.world.window;
        let vc = match id.group() {
            TEMP_GROUP => self.temp.get_mut(&id.rank()).map(|v| &mut **v),
            g => self
                .foreign
                .get_mut(&g)
                .and_then(|pg| pg.vc(id.rank(), window)),
        };
        vc.ok_or(Error::NoRoute(id))
    }

    /// Whether `id` names a VC that exists or may be created (its group
    /// is known and the rank in range).
    /// Inline for a world rank (every netmod arrival asks); the other
    /// groups' map lookups out of line.
    #[inline]
    pub fn knows(&self, id: VcId) -> bool {
        if id.0 >> 32 == 0 {
            return (id.0 as u32) < self.world.size;
        }
        self.knows_other(id)
    }

    #[cold]
    #[inline(never)]
    fn knows_other(&self, id: VcId) -> bool {
        match id.group() {
            0 => id.rank() < self.world.size,
            TEMP_GROUP => self.temp.contains_key(&id.rank()),
            g => self.foreign.get(&g).is_some_and(|pg| id.rank() < pg.size),
        }
    }

    /// The slot of the foreign group called `id`, if known.
    pub fn slot_of(&self, id: &str) -> Option<u32> {
        self.foreign
            .values()
            .find(|pg| pg.id == id)
            .map(|pg| pg.slot)
    }

    /// The slot of group `id` (of `size` ranks), added if new: `(slot, new)`.
    pub fn add_group(&mut self, id: &str, size: u32) -> Result<(u32, bool)> {
        if let Some(slot) = self.slot_of(id) {
            return Ok((slot, false));
        }
        if self.next_slot == TEMP_GROUP {
            return Err(Error::Failed("process group slots exhausted".into()));
        }
        let slot = self.next_slot;
        self.next_slot += 1;
        self.foreign
            .insert(slot, ForeignPg::new(id.to_string(), size, slot));
        Ok((slot, true))
    }

    pub fn group(&mut self, slot: u32) -> Option<&mut ForeignPg> {
        self.foreign.get_mut(&slot)
    }

    /// The cached business card of a VC: a world rank's from the addresses
    /// an external bootstrap was given, a foreign one's from its group
    /// description. `None` for a world rank whose card is in the KVS.
    pub fn card(&self, id: VcId) -> Option<&str> {
        if id.group() == 0 {
            return self
                .world
                .cards
                .get(id.rank() as usize)
                .map(String::as_str)
                .filter(|c| !c.is_empty());
        }
        self.foreign.get(&id.group())?.card(id.rank())
    }

    /// A VC table now uses `id` (seed 000, rule 1).
    pub fn add_ref(&mut self, id: VcId) -> Result<()> {
        if id.group() == 0 {
            return Ok(());
        }
        let window = self.world.window;
        let pg = self
            .foreign
            .get_mut(&id.group())
            .ok_or(Error::NoRoute(id))?;
        let vc = pg.vc(id.rank(), window).ok_or(Error::NoRoute(id))?;
        if vc.refs == 0 {
            vc.refs = 2;
            pg.refs += 1;
        } else {
            vc.refs += 1;
        }
        Ok(())
    }

    /// A VC table no longer uses `id` (rule 2). With `disconnect`, a VC
    /// left with only its "connected" reference loses that too. Returns the
    /// group if this freed it.
    pub fn release(&mut self, id: VcId, disconnect: bool) -> Option<ForeignPg> {
        if id.group() == 0 {
            return None;
        }
        let pg = self.foreign.get_mut(&id.group())?;
        let vc = pg.vcs.get_mut(&id.rank())?;
        if vc.refs == 0 {
            return None;
        }
        vc.refs -= 1;
        if disconnect && vc.refs == 1 {
            vc.refs = 0;
        }
        if vc.refs > 0 {
            return None;
        }
        pg.refs -= 1;
        if pg.refs > 0 {
            return None;
        }
        self.foreign.remove(&id.group())
    }

    /// A temporary VC for a port connection known to the netmod as `peer`.
    pub fn add_temp(&mut self, peer: PeerId) -> VcId {
        let window = self.world.window;
        let id = VcId::from_peer(peer);
        self.temp
            .insert(id.rank(), Box::new(Vc::new(Route::Netmod(peer), window)));
        id
    }

    pub fn remove_temp(&mut self, id: VcId) -> Option<Box<Vc>> {
        self.temp.remove(&id.rank())
    }

    /// Netmod VCs (any group) that have not failed.
    pub fn live_netmod_vcs(&self) -> Vec<VcId> {
        let world = self.world.live_netmod_ranks().into_iter().map(VcId::world);
        let foreign = self.foreign.values().flat_map(|pg| {
            pg.vcs
                .iter()
                .filter(|(_, vc)| !vc.failed)
                .map(|(&r, _)| VcId::new(pg.slot, r))
        });
        world.chain(foreign).collect()
    }

    pub fn counts(&self) -> PgCounts {
        PgCounts {
            process_groups: 1 + self.foreign.len(),
            foreign_vcs: self.foreign.values().map(ForeignPg::vc_count).sum(),
            referenced_vcs: self
                .foreign
                .values()
                .map(|pg| pg.vcs.values().filter(|vc| vc.refs > 0).count())
                .sum(),
            temp_vcs: self.temp.len(),
        }
    }

    /// Foreign groups, for `--info`: (name, size, VCs, references).
    pub fn foreign_groups(&self) -> Vec<(String, u32, usize, u32)> {
        let mut v: Vec<_> = self
            .foreign
            .values()
            .map(|pg| (pg.id.clone(), pg.size, pg.vc_count(), pg.refs))
            .collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_map::NodeMap;

    fn pgs() -> Pgs {
        let map = NodeMap::from_mapping("(vector,(0,1,2))", 2, 0);
        Pgs::new(ProcessGroup::new("me".into(), 2, 0, map, 1 << 20))
    }

    /// Seed 000's table, step by step: tables referencing VCs of a foreign
    /// group keep it; `free` leaves it connected; `disconnect` frees it.
    #[test]
    fn reference_counts_follow_the_seed() {
        let mut p = pgs();
        let (slot, new) = p.add_group("other", 3).unwrap();
        assert!(new);
        assert_eq!(p.add_group("other", 3).unwrap(), (slot, false));
        let a = VcId::new(slot, 0);
        let b = VcId::new(slot, 1);
        // Two tables use `a`, one uses `b`.
        p.add_ref(a).unwrap();
        p.add_ref(a).unwrap();
        p.add_ref(b).unwrap();
        assert_eq!(p.vc(a).unwrap().refs, 3);
        assert_eq!(p.vc(b).unwrap().refs, 2);
        assert_eq!(p.group(slot).unwrap().refs, 2, "one per VC in use");
        // A rank no table uses has a VC with no references.
        p.vc(VcId::new(slot, 2)).unwrap();
        assert_eq!(p.counts().foreign_vcs, 3);
        assert_eq!(p.counts().referenced_vcs, 2);
        // free: references drop, the connection stays.
        assert!(p.release(a, false).is_none());
        assert!(p.release(b, false).is_none());
        assert_eq!(p.vc(b).unwrap().refs, 1, "free leaves the connection");
        assert_eq!(p.group(slot).unwrap().refs, 2);
        // disconnect of the last table using `a`: 2 → 1 → 0.
        assert!(p.release(a, true).is_none());
        assert_eq!(p.vc(a).unwrap().refs, 0);
        assert_eq!(p.group(slot).unwrap().refs, 1);
        // `b` is only "connected" now; another table's disconnect frees all.
        p.add_ref(b).unwrap();
        assert_eq!(p.vc(b).unwrap().refs, 2);
        let freed = p.release(b, true).expect("the last VC frees the group");
        assert_eq!(freed.id, "other");
        assert_eq!(
            p.counts(),
            PgCounts {
                process_groups: 1,
                ..PgCounts::default()
            }
        );
        // The slot is not reused.
        let (again, _) = p.add_group("other", 3).unwrap();
        assert_ne!(again, slot);
    }

    #[test]
    fn the_world_is_never_counted_or_freed() {
        let mut p = pgs();
        p.add_ref(VcId::world(1)).unwrap();
        assert!(p.release(VcId::world(1), true).is_none());
        assert_eq!(p.vc(VcId::world(1)).unwrap().route, Route::Shm(1));
        assert!(matches!(p.vc(VcId::new(5, 0)), Err(Error::NoRoute(_))));
        assert!(!p.knows(VcId::new(5, 0)));
        assert!(p.knows(VcId::world(1)));
    }
}
