//! Which peers share this process's node, and so which path reaches them.
//!
//! The process manager publishes the job's rank-to-node map as
//! `PMI_process_mapping` (rivetrun and Hydra alike); a PMIx server names
//! the local peers directly. It is parsed once; only
//! this node's ranks are kept, so the map costs O(local ranks), not O(job).
//! Without a usable map every peer is taken as remote: the network path works
//! everywhere, shared memory only where it is known to be shared.

use rivet_pmi::client::Client;
use rivet_pmi::server::{parse_process_mapping, PROCESS_MAPPING_KEY};

/// How a message reaches a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// The node's shared-memory segment.
    Shm,
    /// A network module (tcp, ofi).
    Netmod,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeMap {
    my_rank: u32,
    /// This node's ranks, sorted; always contains `my_rank`.
    local: Vec<u32>,
    /// False when the process manager gave no usable map.
    known: bool,
    /// A network module is forced (`RIVET_NETMOD`): use it even on the node.
    force_netmod: bool,
}

impl NodeMap {
    /// Ask the process manager (a singleton is alone on its node).
    pub fn from_client(pmi: &mut Client) -> NodeMap {
        if pmi.is_singleton() {
            return NodeMap {
                my_rank: 0,
                local: vec![0],
                known: true,
                force_netmod: false,
            };
        }
        if let Ok(Some(local)) = pmi.local_ranks() {
            return NodeMap::from_local(pmi.rank(), local);
        }
        let mapping = pmi
            .job_attribute(PROCESS_MAPPING_KEY)
            .ok()
            .flatten()
            .unwrap_or_default();
        NodeMap::from_mapping(&mapping, pmi.size(), pmi.rank())
    }

    /// From a `PMI_process_mapping` value; empty or malformed means unknown.
    pub fn from_mapping(mapping: &str, size: u32, my_rank: u32) -> NodeMap {
        let unknown = NodeMap {
            my_rank,
            local: vec![my_rank],
            known: false,
            force_netmod: false,
        };
        if mapping.is_empty() || my_rank >= size {
            return unknown;
        }
        let Ok(node_of) = parse_process_mapping(mapping, size as usize) else {
            return unknown;
        };
        let mine = node_of[my_rank as usize];
        let local = (0..size).filter(|&r| node_of[r as usize] == mine).collect();
        NodeMap {
            my_rank,
            local,
            known: true,
            force_netmod: false,
        }
    }

    /// From the ranks known to share this node (`my_rank` among them).
    pub fn from_local(my_rank: u32, mut local: Vec<u32>) -> NodeMap {
        if !local.contains(&my_rank) {
            local.push(my_rank);
        }
        local.sort_unstable();
        local.dedup();
        NodeMap {
            my_rank,
            local,
            known: true,
            force_netmod: false,
        }
    }

    /// The same map with every rank `offset` higher: an IMPI client's
    /// ranks in the world of all clients (seed 003).
    pub fn shifted(mut self, offset: u32) -> NodeMap {
        self.my_rank += offset;
        for r in &mut self.local {
            *r += offset;
        }
        self
    }

    /// Send on-node traffic through the network module too (the engine
    /// sets this from `RIVET_NETMOD`).
    pub fn with_force_netmod(mut self, force: bool) -> NodeMap {
        self.force_netmod = force;
        self
    }

    /// `RIVET_NETMOD` sends on-node traffic through a network module.
    pub fn netmod_forced(&self) -> bool {
        self.force_netmod
    }

    pub fn is_local(&self, peer: u32) -> bool {
        self.local.binary_search(&peer).is_ok()
    }

    /// Index of `peer` among this node's ranks. Block placement (the common
    /// case) makes them contiguous: then it is a subtraction.
    #[inline]
    pub fn local_index(&self, peer: u32) -> Option<usize> {
        let first = self.local[0];
        let i = peer.wrapping_sub(first) as usize;
        if i < self.local.len() && self.local[i] == peer {
            return Some(i);
        }
        self.local.binary_search(&peer).ok()
    }

    /// This process's index among this node's ranks.
    pub fn my_local_index(&self) -> usize {
        self.local_index(self.my_rank).unwrap_or(0)
    }

    /// This node's ranks, sorted.
    pub fn local_ranks(&self) -> &[u32] {
        &self.local
    }

    /// Whether the process manager told us the map.
    pub fn is_known(&self) -> bool {
        self.known
    }

    /// The path to `peer`: shared memory for node-local peers (unless
    /// `RIVET_NETMOD` forces a network module), a netmod otherwise.
    pub fn path_to(&self, peer: u32) -> Path {
        if peer == self.my_rank || (self.is_local(peer) && !self.force_netmod) {
            Path::Shm
        } else {
            Path::Netmod
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_ranks_follow_the_published_map() {
        // (mapping, size, me, expected local ranks)
        let cases: &[(&str, u32, u32, &[u32])] = &[
            ("(vector,(0,1,4))", 4, 2, &[0, 1, 2, 3]),
            ("(vector,(0,2,2))", 4, 0, &[0, 1]),
            ("(vector,(0,2,2))", 4, 3, &[2, 3]),
            ("(vector,(0,2,1))", 4, 1, &[1, 3]), // cyclic over 2 nodes, repeated
            ("(vector,(0,2,2),(2,2,1))", 6, 5, &[5]),
        ];
        for &(mapping, size, me, want) in cases {
            let map = NodeMap::from_mapping(mapping, size, me);
            assert!(map.is_known(), "{mapping}");
            assert_eq!(map.local_ranks(), want, "{mapping} rank {me}");
            for (i, &r) in want.iter().enumerate() {
                assert_eq!(map.local_index(r), Some(i), "{mapping} rank {r}");
            }
        }
    }

    #[test]
    fn an_unknown_map_sends_everything_but_self_over_the_network() {
        for mapping in ["", "(vector,(bogus", "(vector,(0,1,2))garbage"] {
            let map = NodeMap::from_mapping(mapping, 4, 1);
            assert!(!map.is_known(), "{mapping:?}");
            assert_eq!(map.path_to(1), Path::Shm);
            assert_eq!(map.path_to(0), Path::Netmod);
        }
    }

    #[test]
    fn paths_prefer_shm_on_the_node_unless_forced() {
        let map = NodeMap::from_mapping("(vector,(0,2,2))", 4, 0);
        assert_eq!(map.path_to(1), Path::Shm);
        assert_eq!(map.path_to(2), Path::Netmod);
        let forced = map.with_force_netmod(true);
        assert_eq!(forced.path_to(1), Path::Netmod);
        assert_eq!(
            forced.path_to(0),
            Path::Shm,
            "a rank always reaches itself directly"
        );
    }
}
