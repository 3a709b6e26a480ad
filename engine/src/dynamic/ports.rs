//! Ports (seed 001, `MPID_Open_port`): a name other processes connect to,
//! and the calls that open, accept on and connect to one; the open ports,
//! their accept queues and the temporary VCs' message channel are protocol
//! state (`state/ports.rs`).
//!
//! A port name is `rivet-port:<tag>:<business card>`: the card says how to
//! reach the process that opened it, the tag which of its open ports is
//! meant. A connection naming a tag that is not open is refused (closed),
//! so the connector fails instead of waiting forever.

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::inner::Inner;
use crate::pg::{Outgoing, VcId};
use crate::wire::{MsgKind, WireHeader};

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
        let tag = loop {
            let tag = random_tag()?;
            if core.st.open_port(tag) {
                break tag;
            }
        };
        Ok(PortName { tag, card }.to_string())
    }

    /// Close a port; connections still waiting on it are refused.
    pub(crate) fn close_port(&self, name: &str) -> Result<()> {
        let port = PortName::parse(name)?;
        let mut core = self.lock()?;
        let Some(waiting) = core.st.close_port(port.tag) else {
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
        self.progress_until(|core| match core.st.next_connection(port.tag) {
            Some(next) => next.map(Ok),
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
        Ok(core.st.connect_temp(peer))
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
            if let Some(msg) = core.st.port_message(from) {
                return Some(Ok(msg));
            }
            match core.st.vc(from) {
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
        self.progress_until(|core| match core.st.vc(id) {
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
        if let Some(vc) = self.st.forget_temp(id) {
            if let (Some(net), crate::route::Route::Netmod(peer)) = (self.netmod_mut(), vc.route) {
                net.disconnect(peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
