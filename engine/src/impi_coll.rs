//! IMPI collectives (seed 003, chapter 4) on communicators that span
//! several IMPI clients: the master utilities of 4.2 and the barrier of
//! 4.10. The engine's other collectives (context agreement, its internal
//! bcast and gather) run over point-to-point whatever the clients, so
//! they work across clients but not with the seed's global phases.
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

use crate::comm::Comm;
use crate::error::Result;
use crate::impi_topo::{tree, Masters};
use crate::thread::Threading;

/// The tag of the barrier's messages (not given by the seed's text).
pub const IMPI_BARRIER_TAG: i32 = 1001;

impl<T: Threading> Comm<T> {
    /// 4.10: fan in to the local master, masters meet on a binomial tree,
    /// fan out. `None` when this communicator lies within one client.
    pub(crate) fn impi_barrier(&self) -> Option<Result<()>> {
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
        let m = Masters::new(&client_of);
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
}
