//! The name of a virtual connection, on its own so that error types can
//! name VCs without depending on the PG/VC layer.

use rivet_netmods::{peer_id, split_peer, PeerId, TEMP_GROUP};

/// A VC's name: (process-group slot, rank in that group). The same number is
/// the netmod's peer id for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VcId(pub u64);

impl VcId {
    #[inline]
    pub const fn world(rank: u32) -> VcId {
        VcId(rank as u64)
    }

    pub fn new(group: u32, rank: u32) -> VcId {
        VcId(peer_id(group, rank))
    }

    #[inline]
    pub fn from_peer(peer: PeerId) -> VcId {
        VcId(peer)
    }

    #[inline]
    pub fn group(self) -> u32 {
        split_peer(self.0).0
    }

    #[inline]
    pub fn rank(self) -> u32 {
        split_peer(self.0).1
    }

    #[inline]
    pub fn is_temp(self) -> bool {
        self.group() == TEMP_GROUP
    }
}

impl std::fmt::Display for VcId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.group() {
            0 => write!(f, "rank {}", self.rank()),
            TEMP_GROUP => write!(f, "port connection {}", self.rank()),
            g => write!(f, "rank {} of process group #{g}", self.rank()),
        }
    }
}
