//! The connection table: who the engine's peers are, the connections
//! (`conn`) the handshake builds (`wire` describes the messages, `handshake`
//! holds the rules that accept or refuse a HELLO), failures and detaching.
//! No libfabric calls: `send` and `recv` post and take what this decides.
//!
//! A *connection* (`Conn`, keyed by the id we gave it) is one pair's
//! state; a *peer* is the engine's name for it (`PeerId` → connection id).
//! `disconnect` detaches the connection from its peer at once; a detached
//! connection still writes what was queued, then a BYE, and goes. Its
//! input is dropped, so nothing more reaches the engine from it.

use std::collections::HashMap;

use crate::auth::JobKey;
use crate::jobs::Jobs;
use crate::{peer_id, FxBuildHasher, PeerId, TEMP_GROUP};

use super::conn::{Conn, Handshake, Tx};
use super::sys::fi_addr_t;
use super::wire;

pub(crate) struct State {
    /// Our rank in our own job.
    pub me: u32,
    /// Our inline limit, told to peers in VERDICTs.
    pub inline: u32,
    pub jobs: Jobs,
    /// The job secret: rank HELLOs from our own job must prove it.
    pub key: Option<JobKey>,
    next_temp: u32,
    next_id: u32,
    /// Makes connection ids unguessable (a keyed permutation of the
    /// counter): every message's tag carries the id its receiver gave the
    /// sender, and RDM endpoints take messages from anyone, so a stranger
    /// must not be able to name another peer's connection. `None` in
    /// tests and the fuzz target: ids count up from 1.
    pub id_key: Option<JobKey>,
    pub peers: HashMap<PeerId, u32, FxBuildHasher>,
    pub conns: HashMap<u32, Conn, FxBuildHasher>,
    /// Endpoint names inserted in the address vector.
    pub names: HashMap<Vec<u8>, fi_addr_t>,
    /// Addresses whose endpoint name gives the owner's process id (the
    /// shm provider's `fi_shm://PID:...`): a same-node peer whose process
    /// is gone fails at the next keepalive round (see `OfiNetmod::keepalive`).
    pub pids: HashMap<fi_addr_t, i32, FxBuildHasher>,
    /// Connections with something to post or a deadline to watch.
    pub work: Vec<u32>,
    /// Peer failures to report at the end of this poll.
    pub failures: Vec<(PeerId, String)>,
    /// Handshakes completed (ours answered, or theirs accepted).
    pub made: u64,
    /// Messages dropped as malformed or from unknown connections, and why
    /// the last one was.
    pub dropped: u64,
    pub last_drop: Option<String>,
}

impl State {
    pub(crate) fn new(me: u32, job: &[u8], inline: u32) -> State {
        State {
            me,
            inline,
            jobs: Jobs::new(job),
            key: None,
            next_temp: 0,
            next_id: 1,
            id_key: None,
            peers: HashMap::default(),
            conns: HashMap::default(),
            names: HashMap::new(),
            pids: HashMap::default(),
            work: Vec::new(),
            failures: Vec::new(),
            made: 0,
            dropped: 0,
            last_drop: None,
        }
    }

    /// A temporary peer id not in use.
    pub(crate) fn new_temp(&mut self) -> PeerId {
        loop {
            let p = peer_id(TEMP_GROUP, self.next_temp);
            self.next_temp = self.next_temp.wrapping_add(1);
            if !self.peers.contains_key(&p) {
                return p;
            }
        }
    }

    /// A new connection to `addr` for `peer` (or detached); its id. Ids are
    /// not reused while another connection might still send with them:
    /// they are a counter's values (through `id_key`'s permutation), 0 is
    /// never one, and a live one is skipped after wrapping.
    pub(crate) fn add_conn(&mut self, peer: Option<PeerId>, addr: fi_addr_t) -> u32 {
        let id = loop {
            let n = self.next_id;
            self.next_id = self.next_id.wrapping_add(1).max(1);
            let id = match &self.id_key {
                Some(k) => permute(k, n),
                None => n,
            };
            if id != 0 && !self.conns.contains_key(&id) {
                break id;
            }
        };
        let mut c = Conn::new(peer, addr);
        c.rx_token = self.rx_token(peer, id);
        self.conns.insert(id, c);
        if let Some(p) = peer {
            self.peers.insert(p, id);
        }
        id
    }

    pub(crate) fn conn_of(&mut self, peer: PeerId) -> Option<&mut Conn> {
        let id = *self.peers.get(&peer)?;
        self.conns.get_mut(&id)
    }

    /// Marks `id` for the poll's flush and deadline checks.
    pub(crate) fn mark(&mut self, id: u32) {
        if let Some(c) = self.conns.get_mut(&id) {
            if !c.in_work {
                c.in_work = true;
                self.work.push(id);
            }
        }
    }

    /// A keepalive round (`OfiNetmod::keepalive` runs one every interval):
    /// a PING is queued to each connection that is ready (handshake done),
    /// attached to a peer (no BYE said or heard), not failed, with nothing
    /// but PONGs queued (anything else queued is watched by the flush
    /// already), to which nothing but keepalives was posted since the last
    /// round, and that has fewer than `wire::PINGS` PINGs unanswered. The
    /// number of PINGs queued. Every connection's `busy` starts over.
    pub(crate) fn keepalive(&mut self) -> usize {
        let mut n = 0;
        for (&id, c) in self.conns.iter_mut() {
            c.busy = false;
            if std::mem::take(&mut c.active)
                || !c.ready()
                || c.peer.is_none()
                || c.bye
                || c.failed.is_some()
                || !c.out.iter().all(|t| matches!(t, Tx::Pong))
                || c.pings >= wire::PINGS
            {
                continue;
            }
            c.pings += 1;
            c.push(Tx::Ping);
            if !c.in_work {
                c.in_work = true;
                self.work.push(id);
            }
            n += 1;
        }
        n
    }

    /// Peers known and not failed.
    pub(crate) fn peer_count(&self) -> usize {
        self.peers
            .values()
            .filter(|id| self.conns.get(id).is_some_and(|c| c.failed.is_none()))
            .count()
    }

    /// Counts a message dropped for `why`.
    pub(crate) fn drop_msg(&mut self, why: String) {
        self.dropped += 1;
        self.last_drop = Some(why);
    }

    /// `id` failed: its queue and held input go; the failure is reported
    /// (once) if it still has a peer, a detached connection is forgotten.
    /// A receive into the engine's memory must have been stopped first.
    pub(crate) fn fail(&mut self, id: u32, why: String) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if c.failed.is_some() {
            return;
        }
        c.out.clear();
        c.out_bytes = 0;
        c.awaiting.clear();
        c.held.clear();
        c.failed = Some(why.clone());
        match c.peer {
            Some(p) => self.failures.push((p, why)),
            None => {
                self.conns.remove(&id);
            }
        }
    }

    /// Detaches `peer` (`Netmod::disconnect`); its connection id, if it
    /// had one. Unreported failures and held input go.
    pub(crate) fn detach(&mut self, peer: PeerId) -> Option<u32> {
        let id = self.peers.remove(&peer)?;
        self.failures.retain(|f| f.0 != peer);
        let c = self.conns.get_mut(&id)?;
        c.peer = None;
        c.held.clear();
        if c.failed.is_some() || c.hs == Handshake::Lazy {
            // Nothing was ever sent, or nothing more will be.
            self.conns.remove(&id);
            return Some(id);
        }
        c.bye = true;
        self.mark(id);
        Some(id)
    }
}

/// `n` through a four-round Feistel network keyed by `key` (16-bit
/// halves, SipHash rounds): a bijection of `u32`, so distinct counter
/// values give distinct ids.
fn permute(key: &JobKey, n: u32) -> u32 {
    let (mut l, mut r) = ((n >> 16) as u16, n as u16);
    for round in 0u8..4 {
        let f = key.mac(&[&[round], &r.to_le_bytes()]);
        (l, r) = (r, l ^ u16::from_le_bytes([f[0], f[1]]));
    }
    (u32::from(l) << 16) | u32::from(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn keepalive_rounds() {
        let mut st = State::new(0, b"j", 100);
        st.add_conn(Some(1), 1); // lazy
        let sent = st.add_conn(Some(2), 2);
        st.conns.get_mut(&sent).unwrap().hs = Handshake::Sent {
            since: Instant::now(),
        };
        let ready = st.add_conn(Some(3), 3);
        let busy = st.add_conn(Some(4), 4);
        let gone = st.add_conn(Some(5), 5);
        let failed = st.add_conn(Some(6), 6);
        for id in [ready, busy, gone, failed] {
            st.conns.get_mut(&id).unwrap().hs = Handshake::Done;
        }
        st.conns.get_mut(&busy).unwrap().push(Tx::Msg {
            hlen: 0,
            body: vec![0, 0],
        });
        st.detach(5);
        st.fail(failed, "x".into());
        let pinged = |st: &State| -> Vec<u32> {
            let mut v: Vec<u32> = st
                .conns
                .iter()
                .filter(|(_, c)| matches!(c.out.back(), Some(Tx::Ping)))
                .map(|(&id, _)| id)
                .collect();
            v.sort();
            v
        };
        // Only the ready, attached, live connection with nothing queued.
        st.work.clear();
        assert_eq!(st.keepalive(), 1);
        assert_eq!(pinged(&st), [ready]);
        assert_eq!(st.work, [ready]);
        assert!(st.conns[&ready].out.iter().all(Tx::keepalive));
        // Nothing more while the PING is queued.
        assert_eq!(st.keepalive(), 0);
        // A PONG queued is no reason to wait.
        let c = st.conns.get_mut(&ready).unwrap();
        c.out.clear();
        c.pings = 0;
        c.push(Tx::Pong);
        assert_eq!(st.keepalive(), 1);
        // Posted: another round pings again, up to the window.
        st.conns.get_mut(&ready).unwrap().out.clear();
        assert_eq!(st.keepalive(), 1);
        st.conns.get_mut(&ready).unwrap().out.clear();
        assert_eq!(st.conns[&ready].pings, wire::PINGS);
        assert_eq!(st.keepalive(), 0, "window full");
        // An answer opens it; a message posted skips one round.
        let c = st.conns.get_mut(&ready).unwrap();
        c.pings -= 1;
        c.active = true;
        assert_eq!(st.keepalive(), 0);
        assert!(!st.conns[&ready].active);
        assert_eq!(st.keepalive(), 1);
    }

    #[test]
    fn detach_and_ids() {
        let mut st = State::new(0, b"j", 100);
        let lazy = st.add_conn(Some(3), 1);
        assert_eq!(st.detach(3), Some(lazy));
        assert!(st.conns.is_empty(), "never started: gone at once");
        let id = st.add_conn(Some(4), 1);
        st.conns.get_mut(&id).unwrap().hs = Handshake::Done;
        st.conns.get_mut(&id).unwrap().push(Tx::Msg {
            hlen: 1,
            body: vec![1, 2],
        });
        st.failures.push((4, "x".into()));
        assert_eq!(st.detach(4), Some(id));
        let c = &st.conns[&id];
        assert!(c.peer.is_none() && c.bye && c.out_bytes == 2);
        assert!(st.failures.is_empty());
        assert_eq!(st.detach(4), None);
        // Failing a detached connection just forgets it.
        st.fail(id, "x".into());
        assert!(st.conns.is_empty() && st.failures.is_empty());
        // Ids skip 0 and live ones when they wrap.
        st.next_id = u32::MAX;
        let a = st.add_conn(None, 0);
        let b = st.add_conn(None, 0);
        assert_eq!((a, b), (u32::MAX, 1));
    }

    #[test]
    fn keyed_ids_are_a_permutation() {
        let k = JobKey::new([3; 16]);
        let mut seen = std::collections::HashSet::new();
        for n in 0..1u32 << 17 {
            assert!(seen.insert(permute(&k, n)), "{n} collides");
        }
        // Not the counter, and another key gives others.
        assert!((1..100).filter(|&n| permute(&k, n) == n).count() < 2);
        let other = JobKey::new([4; 16]);
        assert!((1..100).all(|n| permute(&k, n) != permute(&other, n)));
        let mut st = State::new(0, b"j", 100);
        st.id_key = Some(k);
        let a = st.add_conn(Some(1), 1);
        let b = st.add_conn(Some(2), 1);
        assert!(a != 0 && b != 0 && a != b && b != a.wrapping_add(1));
    }
}
