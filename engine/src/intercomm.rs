//! Intercommunicator operations: `merge` into an intracommunicator, and
//! `disconnect` (which also applies to intracommunicators holding VCs of
//! other process groups).

use std::sync::Arc;

use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::inner::ParentLink;
use crate::thread::Threading;

impl<T: Threading> Comm<T> {
    /// An intracommunicator of both groups. The group that passes
    /// `high = false` comes first; if both pass the same value, the
    /// accepting (parent) side comes first, or, when both groups are of
    /// COMM_WORLD, the group whose rank 0 has the lower world rank (seed
    /// 003's 4.9, whose messages it then follows: `impi_comm.rs`).
    /// Collective over both groups.
    pub fn merge(&self, high: bool) -> Result<Comm<T>> {
        let Some(remote) = self.remote.clone() else {
            return Err(Error::InvalidArgument(
                "merge needs an intercommunicator".into(),
            ));
        };
        if let Some(merged) = self.impi_merge(high) {
            return merged;
        }
        let local = self.local_comm();
        let proposal = local.agree_max(self.next_free_context())?;
        let mut mine = vec![high as u8];
        mine.extend_from_slice(&proposal.to_le_bytes());
        let theirs = self.root_swap(&mine)?;
        let [their_high, c0, c1, c2, c3] = theirs[..] else {
            return Err(Error::Failed(
                "bad merge message from the other group".into(),
            ));
        };
        let context = proposal.max(u32::from_le_bytes([c0, c1, c2, c3]));
        let local_first = if high != (their_high != 0) {
            !high
        } else {
            self.first
        };
        let (first, second) = if local_first {
            (&self.local, &remote)
        } else {
            (&remote, &self.local)
        };
        let members: Vec<_> = first
            .members()
            .into_iter()
            .chain(second.members())
            .collect();
        let size = members.len() as u32;
        let rank = if local_first {
            self.rank
        } else {
            remote.size() + self.rank
        };
        let vcrt = self.inner.new_vcrt(members)?;
        self.take_context(context, 2)?;
        Ok(Comm {
            inner: self.inner.clone(),
            context,
            rank,
            size,
            local: vcrt,
            remote: None,
            first: false,
            _threads: std::marker::PhantomData,
        })
    }

    /// Wait for traffic on this communicator to end (a barrier over all of
    /// its processes), then free it; if this was the last handle on its VC
    /// tables, the connections to other process groups go too and groups
    /// nothing else uses are freed (seed 000). Collective.
    pub fn disconnect(self) -> Result<()> {
        self.barrier()?;
        // The engine's own handle on the parent goes too (MPI_Comm_get_parent
        // answers MPI_COMM_NULL after this).
        {
            let mut parent = self.inner.parent.lock().unwrap_or_else(|p| p.into_inner());
            let same = |p: &ParentLink| {
                self.remote
                    .as_ref()
                    .is_some_and(|r| Arc::ptr_eq(&p.remote, r))
            };
            if parent.as_ref().is_some_and(same) {
                parent.take();
            }
        }
        let Comm { local, remote, .. } = self;
        for table in std::iter::once(local).chain(remote) {
            if let Ok(table) = Arc::try_unwrap(table) {
                table.mark_disconnect();
            }
        }
        Ok(())
    }
}
