//! The few collectives the engine needs itself, over point-to-point
//! messages on a communicator's collective context (`context + 1`, out of
//! the way of user tags): barrier, context-id agreement (dup, merge,
//! connect/accept), and the broadcast / gather / root swap that carry
//! seed 001's steps. Small groups and small payloads: simple algorithms.
//!
//! Intercommunicators reserve four context ids: `c` and `c+1` for traffic
//! across the groups, `c+2` and `c+3` for the local group's own
//! communicator (`local_comm`).

use std::sync::atomic::Ordering;

use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::thread::Threading;

const COLLECTIVE_OFFSET: u32 = 1;
/// Context ids from here up are never handed out by agreement.
const CONTEXT_LIMIT: u32 = 0x4000_0000;
const TAG_BARRIER: i32 = 1;
const TAG_AGREE: i32 = 2;
const TAG_BCAST: i32 = 3;
const TAG_GATHER: i32 = 4;
const TAG_SWAP: i32 = 5;

impl<T: Threading> Comm<T> {
    fn collective(&self) -> Comm<T> {
        self.with_context(self.context + COLLECTIVE_OFFSET)
    }

    /// This communicator on its collective context.
    pub(crate) fn collective_comm(&self) -> Comm<T> {
        self.collective()
    }

    /// An intercommunicator's local group as an intracommunicator.
    pub(crate) fn local_comm(&self) -> Comm<T> {
        match &self.remote {
            None => self.clone(),
            Some(_) => Comm {
                context: self.context + 2,
                remote: None,
                ..self.clone()
            },
        }
    }

    /// A rooted operation (`op`) runs on an intracommunicator with a root
    /// in range. Every member checks the same arguments, so all refuse alike.
    pub(crate) fn check_rooted(&self, op: &str, root: u32) -> Result<()> {
        if self.is_inter() {
            return Err(Error::InvalidArgument(format!(
                "{op} takes an intracommunicator"
            )));
        }
        if root >= self.size {
            return Err(Error::RankOutOfRange {
                rank: root.into(),
                size: self.size,
            });
        }
        Ok(())
    }

    /// Context ids one communicator of this kind uses.
    pub(crate) fn context_span(&self) -> u32 {
        if self.is_inter() {
            4
        } else {
            2
        }
    }

    /// Rounds k = 1, 2, 4, .. < size: talk to rank+k, hear from rank-k.
    fn dissemination(&self, mut round: impl FnMut(&Comm<T>, u32, u32) -> Result<()>) -> Result<()> {
        debug_assert!(!self.is_inter());
        let collective = self.collective();
        let mut k = 1u32;
        while k < self.size {
            let to = (self.rank + k) % self.size;
            let from = (self.rank + self.size - k) % self.size;
            round(&collective, to, from)?;
            k = k.saturating_mul(2);
        }
        Ok(())
    }

    /// Send `out` to `to` while receiving `inp` from `from` (no deadlock
    /// whatever the message size).
    fn exchange(&self, out: &[u8], to: u32, inp: &mut [u8], from: u32, tag: i32) -> Result<()> {
        self.scope(|s| {
            let send = s.isend(out, to, tag)?;
            let status = self.fail_on_peer(s.irecv(inp, from as i32, tag)?.wait()?)?;
            self.fail_on_peer(send.wait()?)?;
            status.check().map_err(|e| Error::Failed(e.to_string()))?;
            Ok(())
        })
    }

    /// Dissemination barrier (intracommunicators); an intercommunicator
    /// synchronises both groups: local barrier, roots meet, local barrier.
    pub fn barrier(&self) -> Result<()> {
        if self.is_inter() {
            let local = self.local_comm();
            local.barrier()?;
            self.root_swap(&[])?;
            return Ok(());
        }
        // Across IMPI clients: the seed's barrier (4.10).
        if let Some(done) = self.impi_barrier() {
            return done;
        }
        self.dissemination(|comm, to, from| {
            comm.scope(|s| {
                let send = s.isend(&[], to, TAG_BARRIER)?;
                comm.fail_on_peer(s.irecv(&mut [], from as i32, TAG_BARRIER)?.wait()?)?;
                comm.fail_on_peer(send.wait()?)?;
                Ok(())
            })
        })
    }

    /// The maximum of `value` over an intracommunicator (dissemination;
    /// correct because max is idempotent).
    pub(crate) fn agree_max(&self, value: u32) -> Result<u32> {
        let mut agreed = value;
        self.dissemination(|comm, to, from| {
            let mut got = [0u8; 4];
            comm.exchange(&agreed.to_le_bytes(), to, &mut got, from, TAG_AGREE)?;
            agreed = agreed.max(u32::from_le_bytes(got));
            Ok(())
        })?;
        Ok(agreed)
    }

    /// This process's proposal for a new context id.
    pub(crate) fn next_free_context(&self) -> u32 {
        self.inner.next_context.load(Ordering::Relaxed)
    }

    /// Mark `context` and the `span` ids after it used on this process.
    pub(crate) fn take_context(&self, context: u32, span: u32) -> Result<()> {
        if context >= CONTEXT_LIMIT {
            return Err(Error::Failed("context ids exhausted".to_string()));
        }
        self.inner
            .next_context
            .fetch_max(context + span, Ordering::Relaxed);
        Ok(())
    }

    /// A context id free on every process of this communicator (both
    /// groups of an intercommunicator), taken for a communicator like it.
    pub(crate) fn agree_context(&self) -> Result<u32> {
        let local = self.local_comm().agree_max(self.next_free_context())?;
        let agreed = if self.is_inter() {
            let theirs = self.root_swap(&local.to_le_bytes())?;
            let theirs: [u8; 4] = theirs
                .as_slice()
                .try_into()
                .map_err(|_| Error::Failed("bad context agreement message".into()))?;
            local.max(u32::from_le_bytes(theirs))
        } else {
            local
        };
        self.take_context(agreed, self.context_span())?;
        Ok(agreed)
    }

    /// Broadcast from `root` of an intracommunicator: `data` at the root,
    /// ignored elsewhere; everyone returns the root's bytes.
    pub(crate) fn bcast_bytes(&self, root: u32, data: &[u8]) -> Result<Vec<u8>> {
        let c = self.local_comm().collective();
        if self.rank == root {
            for r in (0..self.size).filter(|&r| r != root) {
                c.send(data, r, TAG_BCAST)?;
            }
            return Ok(data.to_vec());
        }
        let probe = c.fail_on_peer(c.probe(root as i32, TAG_BCAST)?)?;
        let mut buf = vec![0u8; probe.count];
        c.recv(&mut buf, root as i32, TAG_BCAST)?;
        Ok(buf)
    }

    /// Broadcast the root's outcome: its bytes, or its error (as text) so
    /// that no member waits for a step the root could not take.
    pub(crate) fn bcast_outcome(
        &self,
        root: u32,
        outcome: Option<Result<Vec<u8>>>,
    ) -> Result<Vec<u8>> {
        let mut msg = Vec::new();
        let mut local_err = None;
        if let Some(outcome) = outcome {
            match outcome {
                Ok(bytes) => {
                    msg.push(0);
                    msg.extend_from_slice(&bytes);
                }
                Err(e) => {
                    msg.push(1);
                    msg.extend_from_slice(e.to_string().as_bytes());
                    local_err = Some(e);
                }
            }
        }
        let got = self.bcast_bytes(root, &msg)?;
        if let Some(e) = local_err {
            return Err(e);
        }
        match got.split_first() {
            Some((0, rest)) => Ok(rest.to_vec()),
            Some((_, why)) => Err(Error::RootFailed {
                root,
                why: String::from_utf8_lossy(why).into_owned(),
            }),
            None => Err(Error::Failed("empty broadcast from the root".into())),
        }
    }

    /// Everyone's bytes at `root`, in rank order (`None` elsewhere).
    pub(crate) fn gather_bytes(&self, root: u32, mine: &[u8]) -> Result<Option<Vec<Vec<u8>>>> {
        let c = self.local_comm().collective();
        if self.rank != root {
            c.send(mine, root, TAG_GATHER)?;
            return Ok(None);
        }
        let mut all = Vec::with_capacity(self.size as usize);
        for r in 0..self.size {
            if r == root {
                all.push(mine.to_vec());
                continue;
            }
            let probe = c.fail_on_peer(c.probe(r as i32, TAG_GATHER)?)?;
            let mut buf = vec![0u8; probe.count];
            c.recv(&mut buf, r as i32, TAG_GATHER)?;
            all.push(buf);
        }
        Ok(Some(all))
    }

    /// Intercommunicators: the two groups' rank-0 processes swap `mine`,
    /// and each broadcasts what it got to its group.
    pub(crate) fn root_swap(&self, mine: &[u8]) -> Result<Vec<u8>> {
        let got = if self.rank == 0 {
            let cross = self.collective();
            let send = cross.scope(|s| -> Result<Vec<u8>> {
                let send = s.isend(mine, 0, TAG_SWAP)?;
                let probe = cross.fail_on_peer(cross.probe(0, TAG_SWAP)?)?;
                let mut buf = vec![0u8; probe.count];
                cross.recv(&mut buf, 0, TAG_SWAP)?;
                cross.fail_on_peer(send.wait()?)?;
                Ok(buf)
            })?;
            Some(send)
        } else {
            None
        };
        let local = self.local_comm();
        local.bcast_bytes(0, got.as_deref().unwrap_or(&[]))
    }
}
