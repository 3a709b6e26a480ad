//! Failure and teardown: a socket or peer that failed, `disconnect`,
//! and the close/release of sockets.

use super::*;

impl State {
    /// `slot` hit an error or end of stream. A failure of an accepted
    /// connection (or of our own before the verdict, when the peer has no
    /// other) fails the peer; any other socket just goes.
    pub(crate) fn sock_failed(&mut self, slot: u32, why: String) {
        if self.redialed(slot, &why) {
            return;
        }
        let Some(s) = self.sock(slot) else { return };
        let (peer, phase) = (s.peer, s.phase);
        let fails_peer = match phase {
            Phase::Verdict { accept: true } | Phase::Open => true,
            Phase::Connecting { .. } | Phase::Hello { .. } => peer
                .and_then(|q| self.peers.get(&q))
                .is_some_and(|p| p.conn.is_none()),
            Phase::AwaitHello | Phase::Verdict { accept: false } | Phase::Closing => false,
        };
        match peer {
            Some(q) if fails_peer => self.fail_peer(q, why),
            _ => self.close(slot, None),
        }
    }

    /// `peer` is gone: drop its queue, close its sockets, and report it
    /// once the socket that may hold a placement pointer is released.
    pub(crate) fn fail_peer(&mut self, peer: PeerId, why: String) {
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        if p.failed.is_some() {
            return;
        }
        self.failed_peers += 1;
        p.failed = Some(why.clone());
        p.out.clear();
        p.open = false;
        let (conn, mine) = (p.conn.take(), p.mine.take());
        let mut report = Some((peer, why));
        for id in [conn, mine].into_iter().flatten() {
            if self.sock_at(id).is_some_and(|s| s.phase != Phase::Closing) {
                self.close(id.slot, report.take());
            }
        }
        if let Some(r) = report {
            self.failures.push(r);
        }
    }

    /// Forgets `peer` (`Netmod::disconnect`): detaches its sockets (see the
    /// module docs) and drops any failure or port report not yet made.
    pub(crate) fn disconnect(&mut self, peer: PeerId) {
        let Some(mut p) = self.peers.remove(&peer) else {
            return;
        };
        let alive = p.failed.is_none();
        if !alive {
            self.failed_peers -= 1;
        }
        self.failures.retain(|f| f.0 != peer);
        self.ports.retain(|f| f.0 != peer);
        let mut out = Some(std::mem::take(&mut p.out));
        for slot in 0..self.slot_count() {
            let Some(s) = self.sock(slot).filter(|s| s.peer == Some(peer)) else {
                continue;
            };
            let id = s.id(slot);
            s.peer = None;
            s.detached = true;
            s.report = None;
            let keep = alive
                && match s.phase {
                    Phase::Open | Phase::Verdict { accept: true } => p.conn == Some(id),
                    Phase::Connecting { .. } | Phase::Hello { .. } => {
                        p.conn.is_none()
                            && p.mine == Some(id)
                            && out.as_ref().is_some_and(|q| !q.is_empty())
                    }
                    _ => false,
                };
            // The queue goes where its buffer may be in flight, else to the
            // socket that will write it.
            if s.out_flight || keep {
                if let Some(q) = out.take() {
                    s.drain = q;
                }
            }
            if keep {
                if let Some(rx) = &mut s.rx {
                    rx.discard();
                }
            }
            self.detached += 1;
            if keep {
                self.mark_dirty(slot);
            } else {
                self.close(slot, None);
            }
        }
    }

    /// Starts tearing `slot` down; the backend releases it when safe.
    pub(crate) fn close(&mut self, slot: u32, report: Option<(PeerId, String)>) {
        let Some(s) = self.sock(slot) else { return };
        if s.phase == Phase::Closing {
            return;
        }
        let (id, peer) = (s.id(slot), s.peer);
        s.phase = Phase::Closing;
        s.report = report;
        self.live -= 1;
        self.closing.push(slot);
        if let Some(p) = peer.and_then(|q| self.peers.get_mut(&q)) {
            if p.mine == Some(id) {
                p.mine = None;
            }
            if p.conn == Some(id) {
                p.conn = None;
                p.open = false;
            }
        }
    }

    /// Frees a closing socket (closing its descriptor); its failure report,
    /// if any, becomes reportable. Only once no operation uses its memory.
    pub(crate) fn release(&mut self, slot: u32) -> Option<Sock> {
        let s = self.slots.get_mut(slot as usize)?.sock.take()?;
        self.free.push(slot);
        self.detached -= s.detached as usize;
        if let Some(i) = self.open.iter().position(|&o| o == slot) {
            self.open.swap_remove(i);
        }
        if let Some(i) = self.dirty.iter().position(|&o| o == slot) {
            self.dirty.swap_remove(i);
        }
        Some(s)
    }

    /// Moves a released socket's report to `failures` and drops it.
    pub(crate) fn finish(&mut self, mut s: Sock) {
        if let Some(r) = s.report.take() {
            self.failures.push(r);
        }
    }

    /// Forgets every socket and peer without freeing them: their memory may
    /// still be in use by io_uring operations that did not finish.
    pub(crate) fn leak(&mut self) {
        for s in &mut self.slots {
            if let Some(sock) = s.sock.take() {
                std::mem::forget(sock);
            }
        }
        std::mem::forget(std::mem::take(&mut self.peers));
    }
}
