//! Ports (seed 001, `MPID_Open_port`): a name other processes connect to,
//! the queue of connections waiting on each, and the temporary VCs' own
//! message channel.
//!
//! A port name is `rivet-port:<tag>:<business card>`: the card says how to
//! reach the process that opened it, the tag which of its open ports is
//! meant. A connection naming a tag that is not open is refused (closed),
//! so the connector fails instead of waiting forever.
//!
//! Temporary VCs carry only `Port` messages: whole byte strings, split into
//! chunks the netmod takes (`len` = total, `aux` = offset), reassembled
//! into an inbox. They bypass matching, so two connections racing for one
//! port can never take each other's messages.

use std::collections::{HashMap, VecDeque};

use rivet_netmods::{FxBuildHasher, PeerId};

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::inner::Inner;
use crate::pg::{Outgoing, VcId};
use crate::state::State;
use crate::wire::{MsgKind, WireHeader};

/// Longest message a temporary VC accepts (group descriptions of ~10^6
/// members fit).
const MAX_PORT_MESSAGE: usize = 64 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortName {
    pub tag: u64,
    pub card: String,
}

impl PortName {
    const PREFIX: &'static str = "rivet-port:";

    pub fn parse(name: &str) -> Result<PortName> {
        let bad = |why: &str| Error::BadPort {
            name: name.to_string(),
            why: why.to_string(),
        };
        let rest = name
            .trim()
            .strip_prefix(Self::PREFIX)
            .ok_or_else(|| bad("not a Rivet port name (rivet-port:<tag>:<card>)"))?;
        let (tag, card) = rest
            .split_once(':')
            .ok_or_else(|| bad("no business card"))?;
        let tag = tag.parse().map_err(|_| bad("the tag is not a number"))?;
        if card.is_empty() {
            return Err(bad("no business card"));
        }
        Ok(PortName {
            tag,
            card: card.to_string(),
        })
    }
}

impl std::fmt::Display for PortName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}:{}", Self::PREFIX, self.tag, self.card)
    }
}

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
    pub refused: Vec<PeerId>,
    inbox: HashMap<VcId, Inbox, FxBuildHasher>,
}

impl Ports {
    pub fn open_count(&self) -> usize {
        self.open.len()
    }
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
}

/// A port tag nobody can guess (a stranger who could would reach the
/// accept queue): 64 random bits, never 0.
fn random_tag() -> Result<u64> {
    let bytes = rivet_pmi::server::random_bytes(8).map_err(|source| Error::Io {
        what: "drawing a random port tag".into(),
        source,
    })?;
    let tag = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
    Ok(tag.max(1))
}

impl Inner {
    /// Open a port: its name carries this process's business card.
    pub(crate) fn open_port(&self) -> Result<String> {
        let card = self.ensure_netmod()?;
        let mut core = self.lock()?;
        let ports = &mut core.st.ports;
        let tag = loop {
            let tag = random_tag()?;
            if !ports.open.contains_key(&tag) {
                break tag;
            }
        };
        ports.open.insert(tag, VecDeque::new());
        Ok(PortName { tag, card }.to_string())
    }

    /// Close a port; connections still waiting on it are refused.
    pub(crate) fn close_port(&self, name: &str) -> Result<()> {
        let port = PortName::parse(name)?;
        let mut core = self.lock()?;
        let Some(waiting) = core.st.ports.open.remove(&port.tag) else {
            return Err(Error::BadPort {
                name: name.to_string(),
                why: "no such port is open in this process".into(),
            });
        };
        for id in waiting {
            core.drop_temp(id);
        }
        Ok(())
    }

    /// Wait for a connection on the port (seed 001: accept queue dequeue).
    pub(crate) fn wait_port_connection(&self, name: &str) -> Result<VcId> {
        let port = PortName::parse(name)?;
        self.progress_until(|core| match core.st.ports.open.get_mut(&port.tag) {
            Some(q) => q.pop_front().map(Ok),
            None => Some(Err(Error::BadPort {
                name: name.to_string(),
                why: "no such port is open in this process".into(),
            })),
        })
    }

    /// Open a temporary VC to the port's owner (seed 001: connect_to_root).
    pub(crate) fn connect_port(&self, name: &str) -> Result<VcId> {
        let port = PortName::parse(name)?;
        self.ensure_netmod()?;
        let mut core = self.lock()?;
        let net = core
            .netmod_mut()
            .ok_or_else(|| Error::Failed("no netmod".into()))?;
        let peer = net.connect_port(&port.card, port.tag)?;
        let id = core.st.pgs.add_temp(peer);
        core.st.ports.inbox.insert(id, Inbox::default());
        Ok(id)
    }

    /// Send one whole message over a temporary VC.
    pub(crate) fn port_send(&self, to: VcId, data: &[u8]) -> Result<()> {
        let mut core = self.lock()?;
        let piece = core.st.limits().net.piece.max(1);
        let mut offset = 0;
        loop {
            let end = (offset + piece).min(data.len());
            let header = WireHeader {
                kind: MsgKind::Port as u8,
                len: data.len() as u64,
                aux: offset as u64,
                ..WireHeader::default()
            };
            let item = Outgoing::Owned {
                header,
                data: data[offset..end].to_vec(),
            };
            core.send_or_queue(to, item)?;
            offset = end;
            if offset >= data.len() {
                return Ok(());
            }
        }
    }

    /// The next whole message from a temporary VC; an error if it failed.
    pub(crate) fn port_recv(&self, from: VcId) -> Result<Vec<u8>> {
        self.progress_until(|core| {
            if let Some(msg) = core
                .st
                .ports
                .inbox
                .get_mut(&from)
                .and_then(|i| i.done.pop_front())
            {
                return Some(Ok(msg));
            }
            match core.st.pgs.vc(from) {
                Ok(vc) if !vc.failed => None,
                _ => Some(Err(Error::PortClosed(
                    core.st
                        .why_failed(from)
                        .unwrap_or("connection lost")
                        .to_string(),
                ))),
            }
        })
    }

    /// Close a temporary VC once what was sent on it has left.
    pub(crate) fn close_temp(&self, id: VcId) -> Result<()> {
        self.progress_until(|core| match core.st.pgs.vc(id) {
            Ok(vc) if !vc.pending.is_empty() && !vc.failed => None,
            _ => Some(Ok(())),
        })?;
        self.lock_even_finalized().drop_temp(id);
        Ok(())
    }

    /// Drive progress until `done` (on worker 0's state) has an answer.
    /// Every worker progresses each turn, not worker 0 alone: these waits
    /// are for other processes (a port's peer, the process manager's
    /// group connect), which may first need what sits in another worker's
    /// queues, e.g. the last message of a barrier on a communicator of
    /// another worker, still in its netmod instance's send queue (a
    /// spawned job's children hung so in group connect at MULTIPLE, one
    /// in `disconnect`'s barrier waiting for it, the other in the group
    /// connect that waited for the first).
    pub(crate) fn progress_until<T>(
        &self,
        mut done: impl FnMut(&mut crate::core::Core) -> Option<Result<T>>,
    ) -> Result<T> {
        // Waits here are for other jobs and the process manager (seconds,
        // not microseconds): yield the CPU they need.
        let mut backoff = Backoff::new(true);
        loop {
            let mut events = {
                let mut core = self.lock()?;
                if let Some(r) = done(&mut core) {
                    return r;
                }
                let events = core.progress();
                if let Some(r) = done(&mut core) {
                    return r;
                }
                Self::check(&core)?;
                events
            };
            events += self.progress_all_but(0)?;
            match events {
                0 => backoff.idle(),
                _ => backoff.busy(),
            }
        }
    }
}

impl crate::core::Core {
    /// Forget a temporary VC and close its connection.
    pub fn drop_temp(&mut self, id: VcId) {
        if let Some(vc) = self.st.pgs.remove_temp(id) {
            if let (Some(net), crate::route::Route::Netmod(peer)) = (self.netmod_mut(), vc.route) {
                net.disconnect(peer);
            }
        }
        self.st.ports.inbox.remove(&id);
        self.st.pending_vcs.retain(|&v| v != id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::protocol::tests::state;
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
    fn port_tags_are_random_64_bit_numbers() {
        let tags: std::collections::HashSet<u64> =
            (0..256).map(|_| random_tag().unwrap()).collect();
        assert_eq!(tags.len(), 256);
        assert!(!tags.contains(&0));
        // Counting up from 1 would never leave the low 32 bits.
        assert!(tags.iter().filter(|&&t| t > u64::from(u32::MAX)).count() > 200);
    }

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
    /// port's random tag cannot join: its connection is refused, nothing
    /// reaches the accept queue or an inbox, and a message it sends is
    /// dropped; the right tag is queued.
    #[test]
    fn a_connection_without_the_ports_tag_is_refused() {
        let mut st = state(2, false);
        let tag = random_tag().unwrap();
        st.ports.open.insert(tag, VecDeque::new());
        let (stranger, real) = (peer_id(TEMP_GROUP, 1), peer_id(TEMP_GROUP, 2));
        for guess in [0, 1, tag ^ 1, tag.wrapping_add(1)] {
            st.port_connection(stranger, guess);
        }
        assert_eq!(st.ports.refused, [stranger; 4]);
        assert!(st.ports.open[&tag].is_empty());
        let id = VcId::from_peer(stranger);
        assert!(!st.ports.inbox.contains_key(&id));
        st.deliver(id, &header(MsgKind::Port, 2), b"hi");
        assert!(!st.ports.inbox.contains_key(&id));
        st.port_connection(real, tag);
        assert_eq!(st.ports.open[&tag], [VcId::from_peer(real)]);
    }

    #[test]
    fn port_names_round_trip_and_bad_ones_are_refused() {
        let p = PortName {
            tag: 7,
            card: "tcp:10.0.0.2:4000,127.0.0.1:4000".into(),
        };
        assert_eq!(PortName::parse(&p.to_string()).unwrap(), p);
        for bad in [
            "",
            "tag#0$",
            "rivet-port:",
            "rivet-port:x:tcp:1:2",
            "rivet-port:3:",
        ] {
            assert!(PortName::parse(bad).is_err(), "{bad:?}");
        }
    }
}
