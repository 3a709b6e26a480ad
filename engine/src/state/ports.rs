//! Ports' protocol state (seed 001, `MPID_Open_port`): the open ports and
//! the connections waiting on each, and the temporary VCs' own message
//! channel. Port names, and the calls that open, accept and connect, are
//! `dynamic/ports.rs`.
//!
//! Temporary VCs carry only `Port` messages: whole byte strings, split into
//! chunks the netmod takes (`len` = total, `aux` = offset), reassembled
//! into an inbox. They bypass matching, so two connections racing for one
//! port can never take each other's messages.

use std::collections::{HashMap, VecDeque};

use rivet_netmods::{FxBuildHasher, PeerId};

use crate::pg::{Vc, VcId};
use crate::state::State;
use crate::wire::WireHeader;

/// Longest message a temporary VC accepts (group descriptions of ~10^6
/// members fit).
const MAX_PORT_MESSAGE: usize = 64 << 20;

/// One temporary VC's incoming messages.
#[derive(Default)]
struct Inbox {
    partial: Vec<u8>,
    total: usize,
    done: VecDeque<Vec<u8>>,
}

#[derive(Default)]
pub struct Ports {
    /// Open ports: tag → temporary VCs connected to it, not yet accepted.
    open: HashMap<u64, VecDeque<VcId>, FxBuildHasher>,
    /// Connections the netmod closes after its poll: to tags not open, and
    /// from peers that broke the protocol (`State::misbehaved`).
    pub(super) refused: Vec<PeerId>,
    inbox: HashMap<VcId, Inbox, FxBuildHasher>,
}

impl State {
    /// The netmod accepted a connection to port `tag` (seed 001: the
    /// accept queue's enqueue).
    pub fn port_connection(&mut self, peer: PeerId, tag: u64) {
        if !self.ports.open.contains_key(&tag) {
            self.ports.refused.push(peer);
            return;
        }
        let id = self.pgs.add_temp(peer);
        self.ports.inbox.insert(id, Inbox::default());
        if let Some(q) = self.ports.open.get_mut(&tag) {
            q.push_back(id);
        }
    }

    /// A chunk of a port message from temporary VC `from`.
    pub fn on_port_chunk(&mut self, from: VcId, h: &WireHeader, payload: &[u8]) {
        let Some(inbox) = self.ports.inbox.get_mut(&from) else {
            return;
        };
        let (total, offset) = (h.len as usize, h.aux as usize);
        if offset == 0 {
            if total > MAX_PORT_MESSAGE || !inbox.partial.is_empty() {
                return self.peer_failed(from, "sent a malformed port message");
            }
            inbox.total = total;
            inbox.partial.reserve_exact(total);
        }
        if offset != inbox.partial.len() || offset + payload.len() > inbox.total {
            return self.peer_failed(from, "sent a port message out of order");
        }
        inbox.partial.extend_from_slice(payload);
        if inbox.partial.len() == inbox.total {
            let whole = std::mem::take(&mut inbox.partial);
            inbox.done.push_back(whole);
        }
    }

    /// Open a port under `tag`; false if one is open under it already.
    pub fn open_port(&mut self, tag: u64) -> bool {
        if self.ports.open.contains_key(&tag) {
            return false;
        }
        self.ports.open.insert(tag, VecDeque::new());
        true
    }

    /// Close the port under `tag`: the connections still waiting on it
    /// (for the caller to drop), `None` if no such port is open.
    pub fn close_port(&mut self, tag: u64) -> Option<VecDeque<VcId>> {
        self.ports.open.remove(&tag)
    }

    /// The next connection waiting on port `tag` (seed 001: the accept
    /// queue's dequeue): `None` if no such port is open, `Some(None)` if
    /// nobody waits yet.
    pub fn next_connection(&mut self, tag: u64) -> Option<Option<VcId>> {
        self.ports.open.get_mut(&tag).map(VecDeque::pop_front)
    }

    /// Ports open in this process.
    pub fn ports_open(&self) -> usize {
        self.ports.open.len()
    }

    /// A temporary VC to `peer`, the netmod's connection to a port
    /// (seed 001: connect_to_root), with an empty inbox.
    pub fn connect_temp(&mut self, peer: PeerId) -> VcId {
        let id = self.pgs.add_temp(peer);
        self.ports.inbox.insert(id, Inbox::default());
        id
    }

    /// The next whole message temporary VC `from` received, if one is in.
    pub fn port_message(&mut self, from: VcId) -> Option<Vec<u8>> {
        self.ports
            .inbox
            .get_mut(&from)
            .and_then(|i| i.done.pop_front())
    }

    /// Forget temporary VC `id`: its inbox, its place among the VCs with
    /// queued messages, and the VC itself (returned, for the caller to
    /// close its connection).
    pub fn forget_temp(&mut self, id: VcId) -> Option<Box<Vc>> {
        let vc = self.pgs.remove_temp(id);
        self.ports.inbox.remove(&id);
        self.pending_vcs.retain(|&v| v != id);
        vc
    }

    /// The connections the netmod is to close after its poll (refused, or
    /// from peers that broke the protocol); empty most of the time.
    #[inline]
    pub fn take_refused(&mut self) -> Vec<PeerId> {
        std::mem::take(&mut self.ports.refused)
    }

    /// Whether a connection waits to be closed (`take_refused`): asked
    /// after every netmod poll, so a swap of empty lists is not.
    #[inline]
    pub fn any_refused(&self) -> bool {
        !self.ports.refused.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::protocol::tests::state;
    use crate::wire::MsgKind;
    use rivet_netmods::{peer_id, TEMP_GROUP};

    fn header(kind: MsgKind, len: u64) -> WireHeader {
        WireHeader {
            kind: kind as u8,
            len,
            ..WireHeader::default()
        }
    }

    /// A port connection carries `Port` messages only: anything else is
    /// refused (not matched) and the connection is dropped as bad; and a
    /// `Port` message on a rank's VC is refused too.
    #[test]
    fn temporary_vcs_carry_only_port_messages() {
        let mut st = state(2, false);
        st.ports.open.insert(5, VecDeque::new());
        let (good, bad) = (peer_id(TEMP_GROUP, 1), peer_id(TEMP_GROUP, 2));
        st.port_connection(good, 5);
        st.port_connection(bad, 5);
        let (good, bad) = (VcId::from_peer(good), VcId::from_peer(bad));
        st.deliver(good, &header(MsgKind::Port, 2), b"hi");
        assert_eq!(
            st.ports.inbox[&good].done.front().map(Vec::as_slice),
            Some(&b"hi"[..])
        );

        st.deliver(bad, &header(MsgKind::Eager, 2), b"hi");
        assert!(
            st.matcher
                .probe(0, crate::ANY_SOURCE, crate::ANY_TAG)
                .is_none(),
            "a port connection's message reached matching"
        );
        assert!(st.pgs.vc(bad).is_ok_and(|vc| vc.failed));
        assert_eq!(st.ports.refused, [bad.0], "its connection is closed");
        assert!(!st.pgs.vc(good).unwrap().failed);

        let rank = VcId::world(1);
        st.ports.inbox.insert(rank, Inbox::default());
        st.deliver(rank, &header(MsgKind::Port, 2), b"hi");
        assert!(st.ports.inbox[&rank].done.is_empty());
        assert!(st.pgs.vc(rank).unwrap().failed);
    }

    /// A process that knows where a port's process listens but not the
    /// port's tag cannot join: its connection is refused, nothing reaches
    /// the accept queue or an inbox, and a message it sends is dropped;
    /// the right tag is queued. (Tags are random, `dynamic/ports.rs`.)
    #[test]
    fn a_connection_without_the_ports_tag_is_refused() {
        let mut st = state(2, false);
        let tag = 0x9e37_79b9_7f4a_7c15;
        assert!(st.open_port(tag));
        assert!(!st.open_port(tag), "a tag is open once");
        let (stranger, real) = (peer_id(TEMP_GROUP, 1), peer_id(TEMP_GROUP, 2));
        for guess in [0, 1, tag ^ 1, tag.wrapping_add(1)] {
            st.port_connection(stranger, guess);
        }
        assert_eq!(st.take_refused(), [stranger; 4]);
        assert_eq!(st.next_connection(tag), Some(None));
        let id = VcId::from_peer(stranger);
        assert!(!st.ports.inbox.contains_key(&id));
        st.deliver(id, &header(MsgKind::Port, 2), b"hi");
        assert!(!st.ports.inbox.contains_key(&id));
        st.port_connection(real, tag);
        assert_eq!(st.next_connection(tag), Some(Some(VcId::from_peer(real))));
        assert_eq!(st.close_port(tag), Some(VecDeque::new()));
        assert_eq!(st.next_connection(tag), None);
    }
}
