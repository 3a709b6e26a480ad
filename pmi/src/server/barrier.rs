//! Barrier counting, including PMI-1.2 group barriers.
//!
//! A plain `cmd=barrier_in` waits for every rank of the namespace. MPICH
//! ≥ 4.1 talking to a 1.2 server sends `group=WORLD:tag`, `group=NODE:tag`
//! (the ranks on the caller's node) or `group=r1,r2,...:tag`; each distinct
//! group string (per node, for `NODE`) is its own barrier. The reply echoes
//! the tag. A rank entering the same pending barrier twice gets an error
//! answer; its first entry stays counted.

use std::collections::{HashMap, HashSet};

use crate::server::ConnId;

/// Most barriers pending at once in one namespace (bounds memory).
pub const MAX_PENDING_BARRIERS: usize = 4096;

/// Identifies one pending barrier.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    group: Option<String>,
    /// The node, for `NODE` groups (the same string names one barrier per node).
    node: Option<u32>,
}

#[derive(Debug)]
struct Pending {
    expected: usize,
    arrived: HashSet<u32>,
    waiters: Vec<ConnId>,
    tag: Option<i32>,
}

/// What a `barrier_in` led to.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Counted; not everyone is there yet.
    Waiting,
    /// Complete: send `barrier_out` (with `tag`) to these connections.
    Complete {
        waiters: Vec<ConnId>,
        tag: Option<i32>,
    },
}

/// The pending barriers of one namespace.
#[derive(Debug, Default)]
pub struct Barriers {
    pending: HashMap<Key, Pending>,
}

/// Who takes part in a group, and the tag.
struct Group {
    key: Key,
    expected: usize,
    tag: Option<i32>,
}

/// Parse `group=` into membership; errors are wire `msg=` tokens.
fn resolve(
    group: Option<&str>,
    rank: u32,
    node_of_rank: &[u32],
    world: usize,
) -> Result<Group, &'static str> {
    let size = node_of_rank.len();
    let Some(g) = group else {
        return Ok(Group {
            key: Key {
                group: None,
                node: None,
            },
            expected: world,
            tag: None,
        });
    };
    let (members, tag) = match g.split_once(':') {
        Some((m, t)) => (
            m,
            Some(t.trim().parse::<i32>().map_err(|_| "bad_barrier_tag")?),
        ),
        None => (g, None),
    };
    let mut node = None;
    let expected = match members.trim() {
        "WORLD" => world,
        "NODE" => {
            let mine = *node_of_rank.get(rank as usize).ok_or("rank_out_of_range")?;
            node = Some(mine);
            node_of_rank.iter().filter(|&&n| n == mine).count()
        }
        list => {
            let mut set = HashSet::new();
            for item in list.split(',') {
                let r: u32 = item.trim().parse().map_err(|_| "bad_barrier_group")?;
                if r as usize >= size {
                    return Err("barrier_group_rank_out_of_range");
                }
                set.insert(r);
            }
            if !set.contains(&rank) {
                return Err("caller_not_in_barrier_group");
            }
            set.len()
        }
    };
    Ok(Group {
        key: Key {
            group: Some(g.to_string()),
            node,
        },
        expected,
        tag,
    })
}

impl Barriers {
    /// Rank `rank` (on connection `conn`) entered the barrier named by `group`.
    #[cfg(test)]
    ///
    /// `Err` carries the `msg=` of the error answer.
    pub fn arrive(
        &mut self,
        conn: ConnId,
        rank: u32,
        group: Option<&str>,
        node_of_rank: &[u32],
    ) -> Result<Arrival, &'static str> {
        self.arrive_counting(conn, rank, group, node_of_rank, node_of_rank.len())
    }

    /// [`Barriers::arrive`] where a WORLD barrier completes once `world`
    /// ranks arrived (a node's own ranks, `node.rs`).
    pub fn arrive_counting(
        &mut self,
        conn: ConnId,
        rank: u32,
        group: Option<&str>,
        node_of_rank: &[u32],
        world: usize,
    ) -> Result<Arrival, &'static str> {
        let g = resolve(group, rank, node_of_rank, world)?;
        if !self.pending.contains_key(&g.key) && self.pending.len() >= MAX_PENDING_BARRIERS {
            return Err("too_many_pending_barriers");
        }
        let p = self
            .pending
            .entry(g.key.clone())
            .or_insert_with(|| Pending {
                expected: g.expected,
                arrived: HashSet::new(),
                waiters: Vec::new(),
                tag: g.tag,
            });
        if !p.arrived.insert(rank) {
            return Err("barrier_in_twice_in_one_epoch");
        }
        p.waiters.push(conn);
        if p.arrived.len() < p.expected {
            return Ok(Arrival::Waiting);
        }
        let done = self.pending.remove(&g.key).map(|p| Arrival::Complete {
            waiters: p.waiters,
            tag: p.tag,
        });
        Ok(done.unwrap_or(Arrival::Waiting))
    }

    /// A connection went away: stop answering it, but keep its rank counted
    /// (the launcher decides what a vanished rank means for the job).
    pub fn forget_conn(&mut self, conn: ConnId) {
        for p in self.pending.values_mut() {
            p.waiters.retain(|&c| c != conn);
        }
    }

    /// Number of barriers not yet complete.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn world_barrier_completes_when_all_arrive() {
        let nodes = [0, 0, 1];
        let mut b = Barriers::default();
        assert_eq!(b.arrive(10, 0, None, &nodes), Ok(Arrival::Waiting));
        assert_eq!(b.arrive(11, 1, None, &nodes), Ok(Arrival::Waiting));
        assert_eq!(
            b.arrive(12, 1, None, &nodes),
            Err("barrier_in_twice_in_one_epoch")
        );
        assert_eq!(
            b.arrive(13, 2, None, &nodes),
            Ok(Arrival::Complete {
                waiters: vec![10, 11, 13],
                tag: None
            })
        );
        // Next epoch starts fresh.
        assert_eq!(b.arrive(10, 0, None, &nodes), Ok(Arrival::Waiting));
        assert_eq!(b.pending(), 1);
    }

    #[test]
    fn group_barriers() {
        let nodes = [0, 0, 1, 1];
        let mut b = Barriers::default();
        // NODE barriers are per node.
        assert_eq!(b.arrive(1, 0, Some("NODE:7"), &nodes), Ok(Arrival::Waiting));
        assert_eq!(b.arrive(3, 2, Some("NODE:7"), &nodes), Ok(Arrival::Waiting));
        assert_eq!(
            b.arrive(2, 1, Some("NODE:7"), &nodes),
            Ok(Arrival::Complete {
                waiters: vec![1, 2],
                tag: Some(7)
            })
        );
        // Explicit list.
        assert_eq!(b.arrive(4, 3, Some("1,3:2"), &nodes), Ok(Arrival::Waiting));
        assert_eq!(
            b.arrive(2, 1, Some("1,3:2"), &nodes),
            Ok(Arrival::Complete {
                waiters: vec![4, 2],
                tag: Some(2)
            })
        );
        // WORLD with a tag.
        for r in 0..3 {
            assert_eq!(
                b.arrive(r as u64, r, Some("WORLD:0"), &nodes),
                Ok(Arrival::Waiting)
            );
        }
        assert!(matches!(
            b.arrive(9, 3, Some("WORLD:0"), &nodes),
            Ok(Arrival::Complete { tag: Some(0), .. })
        ));
        // Errors.
        assert_eq!(
            b.arrive(1, 0, Some("1,3:2"), &nodes),
            Err("caller_not_in_barrier_group")
        );
        assert_eq!(
            b.arrive(1, 0, Some("0,9"), &nodes),
            Err("barrier_group_rank_out_of_range")
        );
        assert_eq!(
            b.arrive(1, 0, Some("0,x"), &nodes),
            Err("bad_barrier_group")
        );
        assert_eq!(
            b.arrive(1, 0, Some("WORLD:x"), &nodes),
            Err("bad_barrier_tag")
        );
    }

    #[test]
    fn forgotten_connections_are_not_answered() {
        let nodes = [0, 0];
        let mut b = Barriers::default();
        b.arrive(1, 0, None, &nodes).unwrap();
        b.forget_conn(1);
        assert_eq!(
            b.arrive(2, 1, None, &nodes),
            Ok(Arrival::Complete {
                waiters: vec![2],
                tag: None
            })
        );
    }

    #[test]
    fn pending_barriers_are_bounded() {
        let nodes = [0, 0];
        let mut b = Barriers::default();
        for t in 0..MAX_PENDING_BARRIERS {
            b.arrive(1, 0, Some(&format!("WORLD:{t}")), &nodes).unwrap();
        }
        assert_eq!(
            b.arrive(1, 0, Some("WORLD:-1"), &nodes),
            Err("too_many_pending_barriers")
        );
    }
}
