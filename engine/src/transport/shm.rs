//! Shared memory as a transport: this worker's lane of the node segment
//! (`shm::ShmNode`: fastbox rings and cell queues), its limits, and its
//! RMA, the single-copy read (`shm::cma`, `process_vm_readv`) from the
//! process the node segment has at the sender's slot, never a pid a
//! message names. Once every local rank has attached, their pids are kept
//! here (`ShmLink::pids`: the one owner; the shared copies of `state/copy.rs` get
//! them through `Core::progress`) and their processes watched
//! (`peer_watch.rs`).

use crate::error::Result;
use crate::peer_watch::LocalPeers;
use crate::pg::VcId;
use crate::route::{CmaState, Limits};
use crate::shm::{cma, Deliver, ShmNode};
use crate::state::{ReadWant, State};
use crate::transport::{ReadStart, Transport, POLL_BUDGET};
use crate::wire::WireHeader;

pub struct ShmLink {
    node: ShmNode,
    limits: Limits,
    /// The pid of each local rank as its slot in the node segment says,
    /// for single copies; empty until every local rank has attached.
    pids: Vec<u32>,
    /// The local peers' processes, watched for their end once all attached.
    local_peers: Option<LocalPeers>,
}

impl ShmLink {
    /// The lane `node` with the limits set up at init (`engine.rs`:
    /// `RIVET_SHM_EAGER_MAX` within what one message of the lane holds).
    pub fn new(node: ShmNode, limits: Limits) -> ShmLink {
        ShmLink {
            node,
            limits,
            pids: Vec::new(),
            local_peers: None,
        }
    }

    pub fn node(&self) -> &ShmNode {
        &self.node
    }

    /// The local ranks' pids by slot, once all attached (else empty).
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    #[cfg(test)]
    pub fn node_mut(&mut self) -> &mut ShmNode {
        &mut self.node
    }

    /// Hand up to a budget of arrivals to the protocols.
    #[inline(always)]
    fn deliver_all(node: &mut ShmNode, st: &mut State) -> Result<usize> {
        Ok(node.poll_with(POLL_BUDGET, ToProtocols(st))?)
    }

    /// Nothing arrived and nothing waits (`ShmNode::idle`): a poll would
    /// deliver nothing.
    #[inline(always)]
    pub fn looks_idle(&self) -> bool {
        !self.pids.is_empty() && self.node.idle()
    }

    /// After a poll that found nothing: now and then, look at the local
    /// peers' processes (`local_deaths`); the events that made.
    #[inline(always)]
    pub fn idle_turn(&mut self, st: &mut State) -> usize {
        if self.local_peers.as_mut().is_some_and(LocalPeers::due) {
            self.local_deaths(st)
        } else {
            0
        }
    }

    /// Fail the local peers whose process ended (`peer_watch.rs`): what
    /// they wrote before is delivered first, so a death counts only once
    /// a poll after seeing it finds nothing. A peer that had finalized
    /// fails only what names it, as after a netmod `Bye`. Only peers
    /// reached through shared memory: the netmod judges its own.
    #[cold]
    pub fn local_deaths(&mut self, st: &mut State) -> usize {
        let Some(watch) = self.local_peers.as_mut() else {
            return 0;
        };
        let ended = watch.ended();
        if ended.is_empty() {
            return 0;
        }
        match Self::deliver_all(&mut self.node, st) {
            Ok(0) => {}
            Ok(n) => return n, // the next look decides
            Err(e) => {
                st.fail(format!("shared memory: {e}"));
                return 0;
            }
        }
        for (peer, pid) in ended {
            watch.report(peer);
            let Some(rank) = st.local_rank(peer) else {
                continue;
            };
            let id = VcId::world(rank);
            // A peer reached over the netmod (RIVET_NETMOD forced) is the
            // netmod's to judge: what it sent may still be in a socket.
            match st.vc(id) {
                Ok(vc) if matches!(vc.route, crate::route::Route::Shm(_)) => {
                    if self.node.peer_finalized(peer) {
                        vc.finalized = true;
                    }
                }
                _ => continue,
            }
            st.peer_failed(id, &format!("its process (pid {pid}) on this node ended"));
        }
        1
    }
}

/// What the lane delivers goes to the protocols: whole messages, and the
/// pieces of a message longer than a cell that a posted receive takes
/// as they come (`State::shm_first_piece`).
struct ToProtocols<'a>(&'a mut State);

impl ToProtocols<'_> {
    #[cold]
    #[inline(never)]
    fn unknown(&mut self, peer: usize) {
        self.0
            .fail(format!("shared memory names unknown local rank {peer}"))
    }
}

impl Deliver for ToProtocols<'_> {
    /// Out of line, as the closure it replaced was: inlined into the
    /// lane's poll it cost the 8 B path 11 instructions (callgrind).
    #[inline(never)]
    fn message(&mut self, peer: usize, header: &WireHeader, payload: &[u8]) {
        match self.0.local_rank(peer) {
            Some(rank) => self.0.deliver_shm(VcId::world(rank), header, payload),
            None => self
                .0
                .fail(format!("shared memory names unknown local rank {peer}")),
        }
    }

    fn first_piece(&mut self, peer: usize, header: &WireHeader, payload: &[u8]) -> Option<u64> {
        match self.0.local_rank(peer) {
            Some(rank) => self.0.shm_first_piece(VcId::world(rank), header, payload),
            None => {
                self.unknown(peer);
                None
            }
        }
    }

    fn piece(&mut self, peer: usize, token: u64, offset: usize, payload: &[u8], last: bool) {
        match self.0.local_rank(peer) {
            Some(rank) => self
                .0
                .shm_piece(VcId::world(rank), token, offset, payload, last),
            None => self.unknown(peer),
        }
    }
}

impl Transport for ShmLink {
    /// Index into the node's local ranks.
    type Peer = usize;

    #[inline(always)]
    fn limits(&self) -> Limits {
        self.limits
    }

    #[inline(always)]
    fn try_send(&mut self, peer: usize, header: &WireHeader, payload: &[u8]) -> Result<bool> {
        Ok(self.node.try_send(peer, header, payload)?)
    }

    #[inline(always)]
    fn poll(&mut self, st: &mut State) -> Result<usize> {
        if self.pids.is_empty() {
            self.learn_pids();
        }
        Self::deliver_all(&mut self.node, st)
    }

    /// Single copy: `process_vm_readv` from the pid the segment has at the
    /// sender's slot (0 until it attached: refused, the sender streams).
    /// The VC learns whether it works; once refused it is not tried again.
    unsafe fn read(
        &mut self,
        st: &mut State,
        peer: usize,
        w: &ReadWant,
        dst: *mut u8,
    ) -> ReadStart {
        let pid = self.pids.get(peer).copied().unwrap_or(0);
        let Ok(vc) = st.vc(w.from) else {
            return ReadStart::Refused;
        };
        if pid == 0 || vc.cma == CmaState::Refused {
            return ReadStart::Refused;
        }
        // SAFETY: the caller's contract: `dst..dst+len` is the receive's.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst, w.len) };
        match cma::read(pid, w.addr, dst) {
            Ok(()) => {
                vc.cma = CmaState::Works;
                ReadStart::Done
            }
            // Refused (ptrace rules, seccomp): copy from now on.
            Err(_) => {
                vc.cma = CmaState::Refused;
                ReadStart::Refused
            }
        }
    }
}

impl ShmLink {
    /// Once every local rank has attached: their pids, and their watch.
    #[cold]
    fn learn_pids(&mut self) {
        let pids: Vec<u32> = (0..self.node.local_size())
            .map(|p| self.node.peer_pid(p))
            .collect();
        if !pids.contains(&0) {
            self.local_peers = Some(LocalPeers::new(&pids, self.node.me()));
            self.pids = pids;
        }
    }
}
