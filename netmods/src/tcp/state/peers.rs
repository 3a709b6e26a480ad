//! The peer table ([`PeerMap`]): a hash map that remembers where the entry
//! its last `get_mut` found lives, so a run of sends to one peer (a window
//! of isends, a ping-pong) pays one compare rather than a hash probe each
//! (callgrind: the probe was some 30 instructions of a send's ~170 in the
//! netmod).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ops::Deref;
use std::ptr::NonNull;

use super::Peer;
use crate::{FxBuildHasher, PeerId};

/// Read access is the map's own (`Deref`); whatever may move or drop an
/// entry (`insert`, `remove`, `entry`) goes through methods that forget
/// the remembered one first.
#[derive(Default)]
pub(crate) struct PeerMap {
    map: HashMap<PeerId, Peer, FxBuildHasher>,
    /// The entry of the last `get_mut` hit, valid until the map's next
    /// insertion or removal.
    hot: Option<(PeerId, NonNull<Peer>)>,
}

// SAFETY: `hot` points into `map`, which this value owns; it is only
// dereferenced through `&mut self`, so moving the map to another thread
// moves the pointee with it.
unsafe impl Send for PeerMap {}

impl Deref for PeerMap {
    type Target = HashMap<PeerId, Peer, FxBuildHasher>;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl PeerMap {
    #[inline(always)]
    pub(crate) fn get_mut(&mut self, peer: &PeerId) -> Option<&mut Peer> {
        if let Some((id, mut p)) = self.hot {
            if id == *peer {
                // SAFETY: `hot` is cleared before anything that could move
                // or drop an entry (`insert`, `remove`, `entry`; the map is
                // not reachable mutably otherwise), so it still points at
                // `peer`'s entry; `&mut self` makes this the only reference.
                return Some(unsafe { p.as_mut() });
            }
        }
        self.get_mut_cold(peer)
    }

    #[inline(never)]
    fn get_mut_cold(&mut self, peer: &PeerId) -> Option<&mut Peer> {
        let p = self.map.get_mut(peer)?;
        self.hot = Some((*peer, NonNull::from(&mut *p)));
        Some(p)
    }

    pub(crate) fn insert(&mut self, peer: PeerId, p: Peer) -> Option<Peer> {
        self.hot = None;
        self.map.insert(peer, p)
    }

    pub(crate) fn remove(&mut self, peer: &PeerId) -> Option<Peer> {
        self.hot = None;
        self.map.remove(peer)
    }

    pub(crate) fn entry(&mut self, peer: PeerId) -> Entry<'_, PeerId, Peer> {
        self.hot = None;
        self.map.entry(peer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_entry_follows_inserts_and_removals() {
        let mut m = PeerMap::default();
        m.insert(1, Peer::default());
        m.get_mut(&1).unwrap().started = true;
        // Enough inserts to make the table grow and move its entries.
        for i in 2..200 {
            m.insert(i, Peer::default());
        }
        assert!(m.get_mut(&1).unwrap().started);
        assert!(!m.get_mut(&2).unwrap().started);
        m.get_mut(&2).unwrap().started = true;
        assert!(m.remove(&2).is_some());
        assert!(m.get_mut(&2).is_none());
        m.entry(2).or_default();
        assert!(!m.get_mut(&2).unwrap().started, "a new entry, not the old");
        assert!(m.get_mut(&1).unwrap().started);
        assert!(m.get_mut(&500).is_none());
    }
}
