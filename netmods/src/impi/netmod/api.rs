//! The `Netmod` calls: this client's ranks and other groups to the inner
//! netmod, other clients' ranks to their channels; the poll (queued
//! writes, hellos, the ready channels, failures to report).

use std::os::fd::AsRawFd;

use super::sinks::{Shift, ToSink};
use super::{io_err, ImpiNetmod, LISTENER};
use crate::{peer_id, split_peer, Limits, Netmod, NetmodError, PeerId, Sink};

impl ImpiNetmod {
    /// Read channel `g`, delivering to `sink`; returns the messages delivered.
    fn read(&mut self, g: u32, sink: &mut dyn Sink) -> usize {
        let Some(c) = self.chans.get_mut(&g) else {
            return 0;
        };
        let mut to = ToSink {
            sink,
            peer: peer_id(0, g),
            n: 0,
        };
        let r = c.read(&mut to);
        let n = to.n;
        self.syscalls += std::mem::take(&mut c.syscalls);
        match r {
            Ok(true) => {
                if c.fini_got && !c.fini_sent {
                    // 3.8: the peer finished with the channel (its engine
                    // said goodbye first): answer at once, so its drop
                    // need not wait for ours.
                    c.send_fini();
                    if let Err(e) = c.flush() {
                        self.failures
                            .push((g, format!("IMPI: writing to world rank {g}: {e}")));
                    }
                    self.syscalls += std::mem::take(&mut c.syscalls);
                }
                if c.wants_write() && self.dirty.last() != Some(&g) {
                    self.dirty.push(g);
                }
            }
            // 3.8's orderly end, reported as the engine's contract asks of
            // a closed connection: after the peer's `Bye` it fails only
            // what names the peer, which nothing can satisfy any more (a
            // receive posted for it would otherwise wait forever).
            Ok(false) if c.fini_got => self.fail(
                g,
                format!(
                    "IMPI: world rank {g} has finalized (its IMPI_PK_FINI came) and closed its \
                     channel"
                ),
            ),
            Ok(false) => self.fail(
                g,
                format!(
                    "IMPI: world rank {g} closed its channel without IMPI_PK_FINI: its \
                     process or its client failed"
                ),
            ),
            Err(e) => self.fail(g, format!("IMPI: channel to world rank {g}: {e}")),
        }
        n
    }
}

impl Netmod for ImpiNetmod {
    fn name(&self) -> &'static str {
        "impi"
    }

    fn business_card(&self) -> &str {
        &self.card
    }

    fn knows(&self, peer: PeerId) -> bool {
        match self.inner_peer(peer) {
            Some(p) => self.inner.as_ref().is_some_and(|n| n.knows(p)),
            None => self.chans.contains_key(&split_peer(peer).1),
        }
    }

    fn connect(&mut self, peer: PeerId, card: &str) -> Result<(), NetmodError> {
        match self.inner_peer(peer) {
            Some(p) => self.inner()?.connect(p, card),
            None => {
                let g = split_peer(peer).1;
                if g >= self.cfg.size() {
                    return Err(NetmodError::Peer {
                        peer,
                        what: format!("no world rank {g} (the job has {})", self.cfg.size()),
                    });
                }
                // Higher ranks connect to us; lower ones were dialled at open.
                self.channel(g);
                Ok(())
            }
        }
    }

    fn add_group(&mut self, group: u32, job: &str) -> Result<(), NetmodError> {
        self.inner()?.add_group(group, job)
    }

    fn remove_group(&mut self, group: u32) {
        if let Some(n) = self.inner.as_mut() {
            n.remove_group(group)
        }
    }

    fn connect_port(&mut self, card: &str, tag: u64) -> Result<PeerId, NetmodError> {
        self.inner()?.connect_port(card, tag)
    }

    fn disconnect(&mut self, peer: PeerId) {
        match self.inner_peer(peer) {
            Some(p) => {
                if let Some(n) = self.inner.as_mut() {
                    n.disconnect(p)
                }
            }
            None => {
                let g = split_peer(peer).1;
                if let Some(mut c) = self.chans.remove(&g) {
                    c.send_fini();
                    let _ = c.flush();
                    if let Some(s) = c.sock.take() {
                        self.epoll.del(s.as_raw_fd());
                    }
                }
                self.open.retain(|&x| x != g);
            }
        }
    }

    fn peer_count(&self) -> usize {
        self.inner.as_ref().map_or(0, |n| n.peer_count()) + self.chans.len()
    }

    fn try_send(
        &mut self,
        peer: PeerId,
        header: &[u8],
        payload: &[u8],
    ) -> Result<bool, NetmodError> {
        if let Some(p) = self.inner_peer(peer) {
            return self.inner()?.try_send(p, header, payload);
        }
        let g = split_peer(peer).1;
        if let Some(why) = self.dead.get(&g) {
            return Err(NetmodError::Peer {
                peer,
                what: why.clone(),
            });
        }
        let c = self.chans.get_mut(&g).ok_or_else(|| NetmodError::Peer {
            peer,
            what: "not connected".into(),
        })?;
        if c.fini_got {
            return Err(NetmodError::Peer {
                peer,
                what: format!(
                    "IMPI: world rank {g} has finalized (its IMPI_PK_FINI came): it takes no \
                     more messages"
                ),
            });
        }
        let r = c.take(header, payload);
        self.syscalls += std::mem::take(&mut c.syscalls);
        if c.wants_write() && self.dirty.last() != Some(&g) {
            self.dirty.push(g);
        }
        match r {
            Ok(took) => Ok(took),
            Err(e) => {
                let why = format!("IMPI: writing to world rank {g}: {e}");
                self.fail(g, why);
                Ok(true)
            }
        }
    }

    fn poll(&mut self, sink: &mut dyn Sink) -> Result<usize, NetmodError> {
        let mut events = 0;
        if let Some(n) = self.inner.as_mut() {
            events += n.poll(&mut Shift {
                sink,
                offset: self.cfg.offset,
            })?;
        }
        // What waited for this poll: queued ACKs, coalesced small sends.
        while let Some(g) = self.dirty.pop() {
            if let Some(c) = self.chans.get_mut(&g) {
                c.new_poll();
                c.pump();
                let r = c.flush();
                self.syscalls += std::mem::take(&mut c.syscalls);
                if let Err(e) = r {
                    self.fail(g, format!("IMPI: writing to world rank {g}: {e}"));
                }
            }
        }
        if !self.accepting.is_empty() {
            self.serve_hellos();
        }
        if self.open.len() == 1 && self.listener.is_none() {
            // One channel: its receive is the readiness check.
            events += self.read(self.open[0], sink);
        } else if !self.open.is_empty() || self.listener.is_some() {
            self.syscalls += 1;
            let ready = self.epoll.ready().map_err(io_err("IMPI: epoll_wait"))?;
            self.ready.clear();
            self.ready.extend(ready);
            for i in 0..self.ready.len() {
                match self.ready[i] {
                    LISTENER => {
                        self.accept();
                        self.serve_hellos();
                    }
                    g => events += self.read(g as u32, sink),
                }
            }
        }
        for (g, why) in std::mem::take(&mut self.failures) {
            if self.dead.contains_key(&g) {
                continue;
            }
            self.close(g);
            sink.peer_failed(peer_id(0, g), &why);
            self.dead.insert(g, why);
            events += 1;
        }
        Ok(events)
    }

    fn idle(&self) -> bool {
        self.inner.as_ref().is_none_or(|n| n.idle())
            && self
                .chans
                .iter()
                .all(|(g, c)| c.idle() || c.fini_got || self.dead.contains_key(g))
    }

    fn limits(&self) -> Limits {
        self.limits
    }

    fn syscalls(&self) -> Option<u64> {
        Some(self.syscalls + self.inner.as_ref().and_then(|n| n.syscalls()).unwrap_or(0))
    }

    fn describe(&self) -> Vec<(String, String)> {
        let mut out = vec![
            (
                "impi".to_string(),
                format!(
                    "world rank {} of {}, this client's ranks {}..{}, maxdatalen {}, one direct \
                     channel per peer of another client (dialled to lower ranks at init, hello \
                     MAC checked; {} refused), {} through the agent",
                    self.cfg.rank,
                    self.cfg.size(),
                    self.cfg.offset,
                    self.cfg.offset + self.cfg.client_size,
                    self.cfg.maxdatalen,
                    self.refused,
                    self.cfg.funnel.len(),
                ),
            ),
            (
                "impi_inner".to_string(),
                self.inner
                    .as_ref()
                    .map_or("none (this client's ranks share the node)".into(), |n| {
                        n.name().to_string()
                    }),
            ),
        ];
        if let Some(n) = &self.inner {
            out.extend(n.describe());
        }
        out
    }
}
