//! Communicators made from an intracommunicator's group: `create` (a
//! subset of its ranks, in a given order) and `split` (by colour and key),
//! and the context agreement they and `dup` run. Within one IMPI client,
//! or outside IMPI, the agreement is the engine's (`collective.rs`: the
//! maximum of the members' next free ids, by dissemination) and split's
//! gather its gather and broadcast. On a communicator spanning IMPI
//! clients they follow seed 003's chapter 4 (`impi_coll.rs` runs the
//! collectives):
//!
//! * 4.7 split: make `IMPI_max_cid` odd, `MPI_Allreduce` it with
//!   `MPI_MAX` to `maxcid`, `newcid = maxcid + 1` (point-to-point) and
//!   `newcid + 1` (collectives), `IMPI_max_cid = maxcid + 2`; then
//!   `MPI_Allgather` of `(color, key, rank)` as three `MPI_INT`; processes
//!   of undefined colour stop there; the rest sort by colour, key, rank
//!   and take their colour's run as the new group.
//! * 4.4 create and 4.6 dup (intracommunicator): the text is cut before
//!   them; what survives is 4.4's tail (`newcid = maxcid + 1`,
//!   `IMPI_max_cid = maxcid + 2`, build from the group), which is split's
//!   agreement, so Rivet runs that: every member of the old communicator
//!   (in the group or not, as undefined colours in split) takes part in
//!   the all-reduce and takes the ids; non-members then return `None`.
//! * 4.6 dup of an intercommunicator (its surviving lines): each leader
//!   collects the remote non-leaders' proposals with `IMPI_DUP_TAG`, the
//!   leaders swap their maxima, and each leader sends the result to the
//!   remote non-leaders. Rivet's intercommunicators take four ids
//!   (`collective.rs`), so there `IMPI_max_cid = maxcid + 4`.
//!
//! Where the text is silent, Rivet chose: [`IMPI_DUP_TAG`] = 1006 (beside
//! the barrier's 1001, merge's 1002, free's 1003, the all-reduce's 1004
//! and the all-gather's 1005), all on the communicator's collective
//! context; `MPI_INT` as 4 big-endian bytes and `IMPI_Uint8` as 8
//! (external32, 4.1); `MPI_UNDEFINED` on the wire as [`UNDEFINED_COLOR`]
//! (-32766, MPICH's value; any negative colour reads as undefined);
//! `IMPI_MAX_CID` as the engine's limit of agreed ids (2^30: ids above it
//! are callers' own, `raw.rs`), so "out of contexts" is an error naming
//! it, on every member alike.
//!
//! Every member must call the same operation in the same order, as in
//! MPI. A member given a bad argument (a colour above `i32::MAX`, a rank
//! list with a rank out of range or twice) still takes part in the
//! messages, as undefined or as a non-member, then returns its error, so
//! the others do not wait for it. A member that does not take part at all
//! and finalizes or dies fails the others' call naming it (a receive from
//! a finalized or failed peer fails, `state/failure.rs`); one that calls
//! another collective instead leaves the others waiting, as in any MPI.
//! Members given different rank lists by `create` get communicators that
//! disagree: the seed sends no group to check against.

use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::impi_topo::Masters;
use crate::thread::Threading;

/// 4.6's intercommunicator tag (not given by the seed's text).
pub const IMPI_DUP_TAG: i32 = 1006;
/// `MPI_UNDEFINED` as a colour in split's all-gather (MPICH's value).
pub const UNDEFINED_COLOR: i32 = -32766;

/// One process's `(color, key, rank)` in split's all-gather.
const ENTRY: usize = 12;

impl<T: Threading> Comm<T> {
    /// A communicator of `ranks` (ranks of this intracommunicator, in the
    /// new order). Collective over this communicator: every member calls
    /// it with the same `ranks`; members listed get `Some`, the others
    /// `None`. Across IMPI clients, seed 003's 4.4 (see the module doc).
    pub fn create(&self, ranks: &[u32]) -> Result<Option<Comm<T>>> {
        if self.is_inter() {
            return Err(Error::InvalidArgument(
                "create takes an intracommunicator".into(),
            ));
        }
        let position = self.position_in(ranks);
        let context = self.new_intra_context()?;
        match position? {
            Some(rank) => Ok(Some(self.subset(ranks, rank, context)?)),
            None => Ok(None),
        }
    }

    /// Split this intracommunicator: processes of the same `color` form a
    /// new one, ordered by `key`, then by rank here; `None` as colour (MPI's
    /// `MPI_UNDEFINED`) gives `None`. Collective over this communicator.
    /// Across IMPI clients, seed 003's 4.7 (see the module doc).
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Comm<T>>> {
        if self.is_inter() {
            return Err(Error::InvalidArgument(
                "split takes an intracommunicator".into(),
            ));
        }
        let wire_color = match color.map(i32::try_from) {
            None => Ok(UNDEFINED_COLOR),
            Some(Ok(c)) => Ok(c),
            Some(Err(_)) => Err(Error::InvalidArgument(format!(
                "split colour {} is above {}",
                color.unwrap_or_default(),
                i32::MAX
            ))),
        };
        let masters = self.impi_masters();
        let context = self.intra_context(masters.as_ref())?;
        let mut mine = Vec::with_capacity(ENTRY);
        for v in [
            *wire_color.as_ref().unwrap_or(&UNDEFINED_COLOR),
            key,
            self.rank as i32,
        ] {
            mine.extend_from_slice(&v.to_be_bytes());
        }
        let all = match &masters {
            Some(m) => self.impi_allgather(m, &mine)?,
            None => self.gather_all(&mine)?,
        };
        let color = wire_color?;
        if color < 0 {
            return Ok(None);
        }
        let entries = entries(&all, self.size)?;
        let mut group: Vec<(i32, u32)> = entries
            .into_iter()
            .filter(|&(c, _, _)| c == color)
            .map(|(_, k, r)| (k, r))
            .collect();
        group.sort_unstable();
        let ranks: Vec<u32> = group.into_iter().map(|(_, r)| r).collect();
        let rank = ranks.iter().position(|&r| r == self.rank).ok_or_else(|| {
            Error::Failed("split: this process is missing from its colour".into())
        })?;
        Ok(Some(self.subset(&ranks, rank as u32, context)?))
    }

    /// The context id for a dup of this communicator (agreed over both
    /// groups of an intercommunicator), taken.
    pub(crate) fn dup_context(&self) -> Result<u32> {
        if self.is_inter() {
            if self.impi_inter_spans() {
                return self.impi_inter_dup_context();
            }
            return self.agree_context();
        }
        self.new_intra_context()
    }

    fn new_intra_context(&self) -> Result<u32> {
        self.intra_context(self.impi_masters().as_ref())
    }

    /// A new intracommunicator's context id: the seed's all-reduce across
    /// clients (`masters`), else the engine's agreement.
    fn intra_context(&self, masters: Option<&Masters>) -> Result<u32> {
        match masters {
            Some(m) => {
                let maxcid = self.impi_allreduce_max(m, self.impi_proposal())?;
                self.impi_take(maxcid, 2)
            }
            None => self.agree_context(),
        }
    }

    /// Everyone's `mine` (all the same length) in rank order, over the
    /// engine's own gather and broadcast (one client, or outside IMPI).
    fn gather_all(&self, mine: &[u8]) -> Result<Vec<u8>> {
        let outcome = self.gather_bytes(0, mine)?.map(|all| {
            if all.iter().any(|b| b.len() != mine.len()) {
                return Err(Error::Failed(
                    "split: a member sent an entry of another length".into(),
                ));
            }
            Ok(all.concat())
        });
        let all = self.bcast_outcome(0, outcome)?;
        if all.len() != mine.len() * self.size as usize {
            return Err(Error::Failed("split: a bad all-gather from rank 0".into()));
        }
        Ok(all)
    }

    /// Whether an intercommunicator in an IMPI world spans clients, both
    /// its groups being COMM_WORLD's processes (the seed names no others).
    fn impi_inter_spans(&self) -> bool {
        let (Some(map), Some(remote)) = (self.inner.impi.get(), self.remote.as_ref()) else {
            return false;
        };
        if !(self.local.world_only() && remote.world_only()) {
            return false;
        }
        let mut clients = self
            .local
            .members()
            .into_iter()
            .chain(remote.members())
            .map(|id| map.client_of(id.rank()));
        let first = clients.next();
        clients.any(|c| Some(c) != first)
    }

    /// 4.6 for an intercommunicator: the criss-cross of proposals.
    fn impi_inter_dup_context(&self) -> Result<u32> {
        let c = self.collective_comm();
        let tag = IMPI_DUP_TAG;
        let rgsize = self.remote_size().unwrap_or(0);
        let mut b = [0u8; 8];
        let maxcid = if self.rank == 0 {
            let mut maxcid = self.impi_proposal();
            for i in 1..rgsize {
                c.recv_exact(&mut b, i, tag)?;
                maxcid = maxcid.max(u64::from_be_bytes(b));
            }
            c.sendrecv_exact(&maxcid.to_be_bytes(), 0, &mut b, tag)?;
            let maxcid = maxcid.max(u64::from_be_bytes(b));
            for i in 1..rgsize {
                c.send(&maxcid.to_be_bytes(), i, tag)?;
            }
            maxcid
        } else {
            c.send(&self.impi_proposal().to_be_bytes(), 0, tag)?;
            c.recv_exact(&mut b, 0, tag)?;
            u64::from_be_bytes(b)
        };
        self.impi_take(maxcid, 4)
    }

    /// This process's place in `ranks` (`None` if absent), once `ranks`
    /// is checked: every rank in range, none twice.
    pub(crate) fn position_in(&self, ranks: &[u32]) -> Result<Option<u32>> {
        let mut seen = vec![false; self.size as usize];
        let mut position = None;
        for (i, &r) in ranks.iter().enumerate() {
            let slot = seen.get_mut(r as usize).ok_or(Error::RankOutOfRange {
                rank: r.into(),
                size: self.size,
            })?;
            if std::mem::replace(slot, true) {
                return Err(Error::InvalidArgument(format!(
                    "rank {r} is listed twice for the new communicator"
                )));
            }
            if r == self.rank {
                position = Some(i as u32);
            }
        }
        Ok(position)
    }

    /// The intracommunicator of `ranks` (checked, this process at
    /// `rank`) on engine context `context`.
    pub(crate) fn subset(&self, ranks: &[u32], rank: u32, context: u32) -> Result<Comm<T>> {
        let members = ranks.iter().map(|&r| self.local.vc(r)).collect();
        Ok(Comm {
            context,
            rank,
            size: ranks.len() as u32,
            local: self.inner.new_vcrt(members)?,
            remote: None,
            first: false,
            ..self.clone()
        })
    }
}

/// Split's all-gather as `(color, key, rank)`, each entry's rank checked.
fn entries(all: &[u8], size: u32) -> Result<Vec<(i32, i32, u32)>> {
    if all.len() != ENTRY * size as usize {
        return Err(Error::Failed(format!(
            "split: an all-gather of {} bytes for {size} processes",
            all.len()
        )));
    }
    all.chunks_exact(ENTRY)
        .enumerate()
        .map(|(i, e)| {
            let int =
                |k: usize| i32::from_be_bytes(e[4 * k..4 * k + 4].try_into().expect("4 bytes"));
            if int(2) != i as i32 {
                return Err(Error::Failed(format!(
                    "split: rank {i}'s entry names rank {}",
                    int(2)
                )));
            }
            Ok((int(0), int(1), i as u32))
        })
        .collect()
}
