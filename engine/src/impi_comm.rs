//! IMPI's communicator operations (seed 003, chapter 4): free (4.5),
//! intercommunicator create (4.8) and merge (4.9), with the seed's global
//! messages and its context-id rule (4.4: a process proposes
//! `IMPI_max_cid`, the largest id it uses, made odd; the group takes the
//! maximum `maxcid`; the new communicator gets `newcid = maxcid + 1` for
//! point-to-point and `newcid + 1` for collectives).
//!
//! `IMPI_max_cid` is the engine's next free context id minus one (the
//! world's 0 and 1 are in use from the start). A Rivet intercommunicator
//! also uses `newcid + 2` and `newcid + 3` for its local group's own
//! traffic (`collective.rs`), so the engine marks those taken too; the
//! next proposal is only larger, which the maximum absorbs.
//!
//! Where the text is silent or cut, Rivet chose:
//! * `IMPI_MERGE_TAG` = [`IMPI_MERGE_TAG`] (1002) and the free's tag
//!   [`IMPI_COMM_FREE_TAG`] (1003), beside the barrier's 1001, on the
//!   communicator's collective context (`newcid + 1`).
//! * `IMPI_Uint8` travels as 8 bytes and `MPI_INT` (the rank arrays of
//!   4.8) as 4 bytes, big-endian (external32, as 4.1 asks of packed data);
//!   4.8's size exchange, declared `IMPI_Uint8` but sent as `MPI_INT`,
//!   goes as two `IMPI_Uint8`.
//! * 4.5's intercommunicator free is cut after its first line; it is
//!   completed as 4.9's criss-cross: each non-leader sends an empty
//!   message to the remote leader, the leaders swap one, then each leader
//!   answers the remote non-leaders.
//! * The local phases (4.1 leaves them free): the reduce and broadcasts
//!   of 4.8 run as the engine's gather and broadcast on the local group.
//!
//! These apply to communicators of COMM_WORLD's processes (ranks the seed
//! names by their COMM_WORLD rank); `merge` keeps the engine's own
//! agreement for intercommunicators with other process groups.

use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::pg::VcId;
use crate::thread::Threading;

/// 4.9's tag (not given by the seed's text).
pub const IMPI_MERGE_TAG: i32 = 1002;
/// 4.5's intercommunicator tag (not given by the seed's text).
pub const IMPI_COMM_FREE_TAG: i32 = 1003;

fn bad(what: &str) -> Error {
    Error::Failed(format!("IMPI: {what}"))
}

fn uint8s(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_be_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

fn put_uint8s(values: &[u64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_be_bytes()).collect()
}

impl<T: Threading> Comm<T> {
    /// `IMPI_max_cid` made odd: this process's proposal (4.4).
    pub(crate) fn impi_proposal(&self) -> u64 {
        let max_cid = u64::from(self.next_free_context().saturating_sub(1));
        max_cid | 1
    }

    /// Take `newcid = maxcid + 1` and `span` ids from it.
    pub(crate) fn impi_take(&self, maxcid: u64, span: u32) -> Result<u32> {
        let newcid = maxcid
            .checked_add(1)
            .and_then(|c| u32::try_from(c).ok())
            .ok_or_else(|| bad("out of context ids"))?;
        self.take_context(newcid, span)?;
        Ok(newcid)
    }

    /// Receive exactly `buf.len()` bytes.
    pub(crate) fn recv_exact(&self, buf: &mut [u8], from: u32, tag: i32) -> Result<()> {
        let st = self.fail_on_peer(self.recv(buf, from as i32, tag)?)?;
        let st = st.check().map_err(|e| bad(&e.to_string()))?;
        if st.count != buf.len() {
            return Err(bad(&format!(
                "rank {from} sent {} bytes where {} were due (tag {tag})",
                st.count,
                buf.len()
            )));
        }
        Ok(())
    }

    /// Send `out` to and receive exactly `inp.len()` bytes from `peer`.
    pub(crate) fn sendrecv_exact(
        &self,
        out: &[u8],
        peer: u32,
        inp: &mut [u8],
        tag: i32,
    ) -> Result<()> {
        let want = inp.len();
        let st = self.scope(|s| {
            let send = s.isend(out, peer, tag)?;
            let st = self.fail_on_peer(s.irecv(inp, peer as i32, tag)?.wait()?)?;
            self.fail_on_peer(send.wait()?)?;
            Ok::<_, Error>(st)
        })?;
        let st = st.check().map_err(|e| bad(&e.to_string()))?;
        if st.count != want {
            return Err(bad(&format!(
                "rank {peer} sent {} bytes where {want} were due (tag {tag})",
                st.count
            )));
        }
        Ok(())
    }

    /// The COMM_WORLD ranks of this side's members; an error for members
    /// of other process groups, which the seed cannot name.
    fn world_ranks(&self) -> Result<Vec<u32>> {
        self.local
            .members()
            .into_iter()
            .map(|id| {
                (id.group() == 0).then(|| id.rank()).ok_or_else(|| {
                    Error::InvalidArgument(
                        "IMPI: a communicator with processes outside COMM_WORLD".into(),
                    )
                })
            })
            .collect()
    }

    /// 4.8: an intercommunicator between this intracommunicator's group
    /// and the group whose leader is `remote_leader` of `peer`; the two
    /// leaders (`local_leader` here) talk over `peer` with `tag`.
    /// Collective over both groups. Every member must be of COMM_WORLD.
    pub fn intercomm_create(
        &self,
        local_leader: u32,
        peer: &Comm<T>,
        remote_leader: u32,
        tag: i32,
    ) -> Result<Comm<T>> {
        self.check_rooted("intercomm_create", local_leader)?;
        let lranks = self.world_ranks()?;
        let leader = self.rank == local_leader;
        // Reduce-max to the leader; the leaders swap (maxcid, group size).
        let mine = self.impi_proposal().to_be_bytes();
        let all = self.gather_bytes(local_leader, &mine)?;
        let outcome = all.map(|all| -> Result<Vec<u8>> {
            let maxcid = all.iter().flat_map(|b| uint8s(b)).max().unwrap_or(0);
            if remote_leader >= peer.peers().size() {
                return Err(Error::RankOutOfRange {
                    rank: remote_leader.into(),
                    size: peer.peers().size(),
                });
            }
            let mut inmsg = [0u8; 16];
            let out = put_uint8s(&[maxcid, u64::from(self.size)]);
            peer.sendrecv_exact(&out, remote_leader, &mut inmsg, tag)?;
            let got = uint8s(&inmsg);
            Ok(put_uint8s(&[got[0].max(maxcid), got[1]]))
        });
        let msg = self.bcast_outcome(local_leader, outcome)?;
        let [maxcid, rgsize] = uint8s(&msg)[..] else {
            return Err(bad("a bad context-id broadcast"));
        };
        let rgsize = u32::try_from(rgsize)
            .ok()
            .filter(|&n| n > 0 && n <= 1 << 24)
            .ok_or_else(|| bad(&format!("a remote group of {rgsize} processes")))?;
        let newcid = self.impi_take(maxcid, 4)?;
        // The leaders swap their COMM_WORLD rank arrays.
        let outcome = leader.then(|| -> Result<Vec<u8>> {
            let out: Vec<u8> = lranks.iter().flat_map(|r| r.to_be_bytes()).collect();
            let mut rranks = vec![0u8; 4 * rgsize as usize];
            peer.sendrecv_exact(&out, remote_leader, &mut rranks, tag)?;
            Ok(rranks)
        });
        let rranks: Vec<u32> = self
            .bcast_outcome(local_leader, outcome)?
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes(c.try_into().expect("4 bytes")))
            .collect();
        let world_size = self.inner.size;
        if rranks.len() != rgsize as usize || rranks.iter().any(|&r| r >= world_size) {
            return Err(bad("a bad remote group from the other leader"));
        }
        let remote = self
            .inner
            .new_vcrt(rranks.iter().map(|&r| VcId::world(r)).collect())?;
        Ok(Comm {
            context: newcid,
            remote: Some(remote),
            // merge's tie: the group whose leader has the lower world rank.
            first: lranks[0] < rranks[0],
            ..self.clone()
        })
    }

    /// 4.9's merge for an intercommunicator of COMM_WORLD's processes
    /// (`None` for other ones): context id and `high` cross over, each
    /// leader collecting the remote non-leaders' proposals.
    pub(crate) fn impi_merge(&self, high: bool) -> Option<Result<Comm<T>>> {
        let remote = self.remote.clone()?;
        if !(self.local.world_only() && remote.world_only()) {
            return None;
        }
        Some((|| {
            let c = self.collective_comm();
            let tag = IMPI_MERGE_TAG;
            let rgsize = remote.size();
            let (maxcid, rhigh) = if self.rank == 0 {
                let mut maxcid = self.impi_proposal();
                for i in 1..rgsize {
                    let mut b = [0u8; 8];
                    c.recv_exact(&mut b, i, tag)?;
                    maxcid = maxcid.max(u64::from_be_bytes(b));
                }
                let mut inmsg = [0u8; 16];
                c.sendrecv_exact(&put_uint8s(&[maxcid, high as u64]), 0, &mut inmsg, tag)?;
                let got = uint8s(&inmsg);
                let maxcid = maxcid.max(got[0]);
                let out = put_uint8s(&[maxcid, high as u64]);
                for i in 1..rgsize {
                    c.send(&out, i, tag)?;
                }
                (maxcid, got[1] != 0)
            } else {
                c.send(&self.impi_proposal().to_be_bytes(), 0, tag)?;
                let mut inmsg = [0u8; 16];
                c.recv_exact(&mut inmsg, 0, tag)?;
                let got = uint8s(&inmsg);
                (got[0], got[1] != 0)
            };
            let newcid = self.impi_take(maxcid, 2)?;
            let local_first = match (high, rhigh) {
                (true, false) => false,
                (false, true) => true,
                _ => self.local.vc(0).rank() < remote.vc(0).rank(),
            };
            let (a, b) = if local_first {
                (&self.local, &remote)
            } else {
                (&remote, &self.local)
            };
            let members: Vec<VcId> = a.members().into_iter().chain(b.members()).collect();
            let size = members.len() as u32;
            let rank = if local_first {
                self.rank
            } else {
                rgsize + self.rank
            };
            Ok(Comm {
                context: newcid,
                rank,
                size,
                local: self.inner.new_vcrt(members)?,
                remote: None,
                first: false,
                ..self.clone()
            })
        })())
    }

    /// 4.5: free a communicator once traffic on it ended: a barrier for
    /// an intracommunicator, for an intercommunicator the point-to-point
    /// criss-cross over both groups (see the module doc). Collective.
    /// Dropping the last handle frees it too, without the wait.
    pub fn free(self) -> Result<()> {
        let Some(remote) = self.remote.as_ref() else {
            return self.barrier();
        };
        let c = self.collective_comm();
        let tag = IMPI_COMM_FREE_TAG;
        let empty: &[u8] = &[];
        if self.rank == 0 {
            for i in 1..remote.size() {
                c.recv_exact(&mut [], i, tag)?;
            }
            c.sendrecv_exact(empty, 0, &mut [], tag)?;
            for i in 1..remote.size() {
                c.send(empty, i, tag)?;
            }
        } else {
            c.send(empty, 0, tag)?;
            c.recv_exact(&mut [], 0, tag)?;
        }
        Ok(())
    }
}

impl<T: Threading> Comm<T> {
    /// For each rank this communicator sends to (the remote group's of an
    /// intercommunicator), whether it runs under another IMPI client than
    /// this process: user data to it travels as external32 (seed 003,
    /// 1.2.2), which an MPI layer on top converts. All `false` outside an
    /// IMPI job; processes outside COMM_WORLD (the seed names none) count
    /// as this client's.
    pub fn foreign_peers(&self) -> Vec<bool> {
        let peers = self.remote.as_ref().unwrap_or(&self.local);
        let Some(map) = self.inner.impi.get() else {
            return vec![false; peers.size() as usize];
        };
        let me = self.local.vc(self.rank);
        let client = |id: VcId| (id.group() == 0).then(|| map.client_of(id.rank()));
        let mine = client(me);
        (0..peers.size())
            .map(|r| {
                let theirs = client(peers.vc(r));
                mine.is_some() && theirs.is_some() && theirs != mine
            })
            .collect()
    }

    /// For each rank of this communicator's (local) group, its rank in
    /// `other`'s local group, if there: an MPI layer names a new
    /// communicator's processes without a message another IMPI
    /// implementation would not send.
    pub fn ranks_in(&self, other: &Comm<T>) -> Vec<Option<u32>> {
        let theirs: std::collections::HashMap<VcId, u32> =
            other.local.members().into_iter().zip(0..).collect();
        self.local
            .members()
            .into_iter()
            .map(|id| theirs.get(&id).copied())
            .collect()
    }

    /// This communicator on its collective context (`context + 1`: the
    /// seed's `newcid + 1`, which the engine's own collectives use too,
    /// on tags 1 to 5 and 1001 to 1006), for a layer's collectives.
    pub fn on_collective_context(&self) -> Comm<T> {
        self.collective_comm()
    }
}
