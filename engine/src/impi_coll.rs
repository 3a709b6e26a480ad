//! IMPI collectives (seed 003, chapter 4) on communicators that span
//! several IMPI clients: the master utilities of 4.2, the barrier of
//! 4.10, and the `MPI_Allreduce` (max of one `IMPI_Uint8`) and
//! `MPI_Allgather` that 4.4, 4.6 and 4.7 create communicators with
//! (`split.rs`). The engine's other internal collectives (its bcast and
//! gather for connect/accept) run over point-to-point whatever the
//! clients, so they work across clients but not with the seed's global
//! phases.
//!
//! Where the text is silent (the source of chapter 4 is cut short: the
//! collective tag values and the rest of the barrier's global phase are
//! missing), Rivet chose (the clients, masters and tree as data:
//! `impi_topo.rs`):
//! * `IMPI_BARRIER_TAG` = [`IMPI_BARRIER_TAG`] (1001: the engine refuses
//!   negative tags, and its own collective tags are 1..=5), on the
//!   communicator's collective context (`context + 1`, as 4.4 gives every
//!   communicator a point-to-point context `newcid` and a collective one
//!   `newcid + 1`); local phases use the same tag (4.1 leaves them free).
//! * The global phase is the binomial tree the surviving lines begin
//!   (`peer = mynum | mask` children, parent `mynum & ~(1 << hibit)`,
//!   `cubedim`): masters receive from their children, send to and
//!   receive from their parent, then release their children.
//! * The all-reduce and all-gather are cut entirely; they take the
//!   barrier's shape: fan-in to the local master, up the same tree to
//!   master 0 (the all-reduce's masters send the maximum so far, the
//!   all-gather's the blocks of their subtree's processes in ascending
//!   rank order), the result back down the tree and out to the locals;
//!   tags [`IMPI_ALLREDUCE_TAG`] (1004) and [`IMPI_ALLGATHER_TAG`] (1005),
//!   the collective crossovers (`IMPI_COLL_XSIZE`, `IMPI_COLL_MAXLINEAR`)
//!   not consulted: the payloads are a few bytes per process.

use crate::comm::Comm;
use crate::error::Result;
use crate::impi_topo::{subtree, tree, Masters};
use crate::thread::Threading;

/// The tag of the barrier's messages (not given by the seed's text).
pub const IMPI_BARRIER_TAG: i32 = 1001;
/// The tag of the maximum all-reduce of context ids that 4.4, 4.6 and
/// 4.7 call `MPI_Allreduce` (not given by the seed's text).
pub const IMPI_ALLREDUCE_TAG: i32 = 1004;
/// The tag of 4.7's `MPI_Allgather` (not given by the seed's text).
pub const IMPI_ALLGATHER_TAG: i32 = 1005;

impl<T: Threading> Comm<T> {
    /// 4.2's masters of this intracommunicator when it spans several IMPI
    /// clients (`None` within one client or outside IMPI). Processes of
    /// other process groups count as a client each.
    pub(crate) fn impi_masters(&self) -> Option<Masters> {
        let map = self.inner.impi.get()?;
        let client_of: Vec<usize> = (0..self.size)
            .map(|r| {
                let id = self.local.vc(r);
                if id.group() == 0 {
                    map.client_of(id.rank())
                } else {
                    usize::MAX - id.group() as usize
                }
            })
            .collect();
        if client_of.iter().all(|&c| c == client_of[0]) {
            return None;
        }
        Some(Masters::new(&client_of))
    }

    /// 4.10: fan in to the local master, masters meet on a binomial tree,
    /// fan out. `None` when this communicator lies within one client.
    pub(crate) fn impi_barrier(&self) -> Option<Result<()>> {
        let m = self.impi_masters()?;
        let c = self.collective_comm();
        let tag = IMPI_BARRIER_TAG;
        let me = self.rank;
        let run = || -> Result<()> {
            let empty: &[u8] = &[];
            if !m.is_master(me) {
                let master = m.master_of[me as usize];
                c.send(empty, master, tag)?;
                c.recv(&mut [], master as i32, tag)?;
                return Ok(());
            }
            let locals: Vec<u32> = m.locals_of(me).into_iter().filter(|&r| r != me).collect();
            for &r in &locals {
                c.recv(&mut [], r as i32, tag)?;
            }
            let mynum = m.master_num(me) as u32;
            let (children, parent, release) = tree(mynum, m.masters.len() as u32);
            for k in children {
                c.recv(&mut [], m.masters[k as usize] as i32, tag)?;
            }
            if let Some(p) = parent {
                let p = m.masters[p as usize];
                c.send(empty, p, tag)?;
                c.recv(&mut [], p as i32, tag)?;
            }
            for k in release {
                c.send(empty, m.masters[k as usize], tag)?;
            }
            for &r in &locals {
                c.send(empty, r, tag)?;
            }
            Ok(())
        };
        Some(run())
    }

    /// `MPI_Allreduce` of one `IMPI_Uint8` with `MPI_MAX` (4.4, 4.6,
    /// 4.7) over a communicator spanning clients, with the barrier's
    /// shape: each master takes the maximum of its locals', the masters
    /// reduce up the binomial tree to master 0, and the result comes back
    /// down the tree and out to the locals. Messages are 8 bytes,
    /// big-endian, tagged [`IMPI_ALLREDUCE_TAG`] on the collective context.
    pub(crate) fn impi_allreduce_max(&self, m: &Masters, value: u64) -> Result<u64> {
        let c = self.collective_comm();
        let tag = IMPI_ALLREDUCE_TAG;
        let me = self.rank;
        let mut b = [0u8; 8];
        if !m.is_master(me) {
            let master = m.master_of[me as usize];
            c.send(&value.to_be_bytes(), master, tag)?;
            c.recv_exact(&mut b, master, tag)?;
            return Ok(u64::from_be_bytes(b));
        }
        let locals: Vec<u32> = m.locals_of(me).into_iter().filter(|&r| r != me).collect();
        let mut max = value;
        for &r in &locals {
            c.recv_exact(&mut b, r, tag)?;
            max = max.max(u64::from_be_bytes(b));
        }
        let mynum = m.master_num(me) as u32;
        let (children, parent, release) = tree(mynum, m.masters.len() as u32);
        for k in children {
            c.recv_exact(&mut b, m.masters[k as usize], tag)?;
            max = max.max(u64::from_be_bytes(b));
        }
        if let Some(p) = parent {
            let p = m.masters[p as usize];
            c.send(&max.to_be_bytes(), p, tag)?;
            c.recv_exact(&mut b, p, tag)?;
            max = u64::from_be_bytes(b);
        }
        for k in release {
            c.send(&max.to_be_bytes(), m.masters[k as usize], tag)?;
        }
        for &r in &locals {
            c.send(&max.to_be_bytes(), r, tag)?;
        }
        Ok(max)
    }

    /// `MPI_Allgather` of `mine` (the same length on every member) over a
    /// communicator spanning clients: everyone's bytes in rank order. The
    /// barrier's shape again: locals send theirs to their master, each
    /// master sends its parent the blocks of its subtree's processes in
    /// ascending rank order, master 0 sends the whole array (rank order)
    /// back down the tree and the masters pass it to their locals. Tagged
    /// [`IMPI_ALLGATHER_TAG`] on the collective context.
    pub(crate) fn impi_allgather(&self, m: &Masters, mine: &[u8]) -> Result<Vec<u8>> {
        let c = self.collective_comm();
        let tag = IMPI_ALLGATHER_TAG;
        let me = self.rank;
        let len = mine.len();
        let mut all = vec![0u8; len * self.size as usize];
        if !m.is_master(me) {
            let master = m.master_of[me as usize];
            c.send(mine, master, tag)?;
            c.recv_exact(&mut all, master, tag)?;
            return Ok(all);
        }
        let block = |r: u32| len * r as usize..len * (r as usize + 1);
        // The comm ranks under masters `nums` (a subtree), ascending.
        let ranks_under = |nums: &[u32]| -> Vec<u32> {
            let mut ranks: Vec<u32> = nums
                .iter()
                .flat_map(|&k| m.locals_of(m.masters[k as usize]))
                .collect();
            ranks.sort_unstable();
            ranks
        };
        all[block(me)].copy_from_slice(mine);
        let locals: Vec<u32> = m.locals_of(me).into_iter().filter(|&r| r != me).collect();
        for &r in &locals {
            c.recv_exact(&mut all[block(r)], r, tag)?;
        }
        let n = m.masters.len() as u32;
        let mynum = m.master_num(me) as u32;
        let (children, parent, release) = tree(mynum, n);
        for k in children {
            let ranks = ranks_under(&subtree(k, n));
            let mut got = vec![0u8; len * ranks.len()];
            c.recv_exact(&mut got, m.masters[k as usize], tag)?;
            for (&r, part) in ranks.iter().zip(got.chunks_exact(len.max(1))) {
                all[block(r)].copy_from_slice(&part[..len]);
            }
        }
        if let Some(p) = parent {
            let ours: Vec<u8> = ranks_under(&subtree(mynum, n))
                .into_iter()
                .flat_map(|r| all[block(r)].to_vec())
                .collect();
            let p = m.masters[p as usize];
            c.send(&ours, p, tag)?;
            c.recv_exact(&mut all, p, tag)?;
        }
        for k in release {
            c.send(&all, m.masters[k as usize], tag)?;
        }
        for &r in &locals {
            c.send(&all, r, tag)?;
        }
        Ok(all)
    }
}
