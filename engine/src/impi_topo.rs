//! The shapes IMPI collectives (seed 003, chapter 4) work on, as data:
//! which client runs each world rank (`ClientMap`, set at init under
//! `--impi-client`), 4.2's masters of a communicator, and the binomial
//! tree of the barrier's global phase. `impi_coll.rs` runs the collectives.

/// Which client each world rank runs under: client `c` holds world ranks
/// `firsts[c]..firsts[c + 1]`.
#[derive(Debug, Clone)]
pub struct ClientMap {
    pub firsts: Vec<u32>,
}

impl ClientMap {
    pub fn client_of(&self, world_rank: u32) -> usize {
        self.firsts.partition_point(|&f| f <= world_rank) - 1
    }
}

/// 4.2's view of one communicator: masters in rank order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Masters {
    /// The master rank of each comm rank's client.
    pub master_of: Vec<u32>,
    /// Master ranks, master number order (ascending rank).
    pub masters: Vec<u32>,
}

impl Masters {
    /// From the client of each comm rank.
    pub fn new(client_of_rank: &[usize]) -> Masters {
        let mut first: Vec<(usize, u32)> = Vec::new();
        let mut master_of = Vec::with_capacity(client_of_rank.len());
        for (r, &c) in client_of_rank.iter().enumerate() {
            let m = match first.iter().find(|(x, _)| *x == c) {
                Some(&(_, m)) => m,
                None => {
                    first.push((c, r as u32));
                    r as u32
                }
            };
            master_of.push(m);
        }
        let masters = first.iter().map(|&(_, m)| m).collect();
        Masters { master_of, masters }
    }

    pub fn is_master(&self, r: u32) -> bool {
        self.master_of[r as usize] == r
    }

    /// `master_num`: -1 for a non-master.
    pub fn master_num(&self, r: u32) -> i32 {
        self.masters
            .iter()
            .position(|&m| m == r)
            .map_or(-1, |i| i as i32)
    }

    /// The comm ranks local to `r` (same client), `r` included.
    pub fn locals_of(&self, r: u32) -> Vec<u32> {
        let m = self.master_of[r as usize];
        (0..self.master_of.len() as u32)
            .filter(|&x| self.master_of[x as usize] == m)
            .collect()
    }
}

/// `cubedim(n)`: the dimension of the smallest hypercube with at least
/// `n` vertices (-1 for n <= 0).
pub fn cubedim(n: i32) -> i32 {
    if n <= 0 {
        return -1;
    }
    let mut dim = 0;
    while (1 << dim) < n {
        dim += 1;
    }
    dim
}

/// The global phase's steps for master `mynum` of `n`: children to hear
/// from (in order), parent, children to release (in order).
pub fn tree(mynum: u32, n: u32) -> (Vec<u32>, Option<u32>, Vec<u32>) {
    let dim = cubedim(n as i32).max(0) as u32;
    let hibit = if mynum == 0 {
        None
    } else {
        Some(31 - mynum.leading_zeros())
    };
    let from = hibit.map_or(0, |h| h + 1);
    let children: Vec<u32> = (from..dim)
        .map(|i| mynum | (1 << i))
        .filter(|&p| p < n)
        .collect();
    let parent = hibit.map(|h| mynum & !(1 << h));
    let release = children.iter().rev().copied().collect();
    (children, parent, release)
}

/// The masters in `k`'s subtree of [`tree`] (`k` first, ascending):
/// whose contributions master `k` sends its parent in a gather.
pub fn subtree(k: u32, n: u32) -> Vec<u32> {
    let mut all = vec![k];
    let mut i = 0;
    while i < all.len() {
        all.extend(tree(all[i], n).0);
        i += 1;
    }
    all.sort_unstable();
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_master_example() {
        // 4.2: size 8 over clients A, B, C: ranks 0,1,4 under A, 2,3,5
        // under B, 6,7 under C; masters 0, 2, 6 numbered 0, 1, 2.
        let m = Masters::new(&[0, 0, 1, 1, 0, 1, 2, 2]);
        assert_eq!(m.masters, vec![0, 2, 6]);
        assert_eq!(
            (m.master_num(0), m.master_num(2), m.master_num(6)),
            (0, 1, 2)
        );
        assert_eq!(m.master_num(4), -1);
        assert!(m.is_master(6) && !m.is_master(7));
        assert_eq!(m.locals_of(5), vec![2, 3, 5]);
        let map = ClientMap {
            firsts: vec![0, 3, 5],
        };
        assert_eq!(
            (0..7).map(|r| map.client_of(r)).collect::<Vec<_>>(),
            vec![0, 0, 0, 1, 1, 2, 2]
        );
    }

    #[test]
    fn the_global_tree_pairs_every_child_with_its_parent() {
        assert_eq!(
            (cubedim(1), cubedim(2), cubedim(3), cubedim(8), cubedim(9)),
            (0, 1, 2, 3, 4)
        );
        assert_eq!(cubedim(0), -1);
        for n in 1..40u32 {
            let mut heard = vec![0u32; n as usize];
            for k in 0..n {
                let (children, parent, release) = tree(k, n);
                assert_eq!(parent.is_none(), k == 0);
                for &c in &children {
                    assert_eq!(tree(c, n).1, Some(k), "n {n}: {c}'s parent is {k}");
                    heard[c as usize] += 1;
                }
                let mut r = release.clone();
                r.reverse();
                assert_eq!(r, children);
            }
            assert!(heard[1..].iter().all(|&h| h == 1), "n {n}: {heard:?}");
            // Master 0's subtree is everyone; each child's is disjoint.
            assert_eq!(subtree(0, n), (0..n).collect::<Vec<_>>());
            for k in 0..n {
                let (children, _, _) = tree(k, n);
                let mut parts: Vec<u32> = children.iter().flat_map(|&c| subtree(c, n)).collect();
                parts.push(k);
                parts.sort_unstable();
                assert_eq!(parts, subtree(k, n), "n {n}: {k}'s subtree");
            }
        }
        assert_eq!(subtree(1, 4), vec![1, 3]);
        assert_eq!(subtree(2, 7), vec![2, 6]);
    }
}
