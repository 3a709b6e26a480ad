//! The connection table: who the engine's peers are, the per-pair state
//! the handshake builds (`wire` describes the messages), and the rules
//! that accept or refuse a HELLO. No libfabric calls: `xfer` posts what
//! this decides.
//!
//! A *connection* (`Conn`, keyed by the id we gave it) is one pair's
//! state; a *peer* is the engine's name for it (`PeerId` → connection id).
//! `disconnect` detaches the connection from its peer at once; a detached
//! connection still writes what was queued, then a BYE, and goes. Its
//! input is dropped, so nothing more reaches the engine from it.
//!
//! # Identities
//! A rank HELLO names the sender as (job, rank): its own job is group 0,
//! a job given to `add_group` is that group, any other job is refused.
//! The sender is then `peer_id(group, rank)`: an existing peer of that
//! name takes the HELLO (this is how two processes connecting to each
//! other at once end up with one pair of ids, with no tie-break needed:
//! each side's id for the other is fixed when its connection is made, and
//! both the HELLO and the VERDICT carry it), else a new one is made. A
//! port HELLO is always a new temporary peer, announced to the engine
//! before anything it sends.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Instant;

use crate::auth::{self, JobKey};
use crate::jobs::Jobs;
use crate::{peer_id, FxBuildHasher, PeerId, TEMP_GROUP};

use super::sys::fi_addr_t;
use super::wire::{self, Hello, Verdict, IDENT_PORT, IDENT_RANK, VERDICT_LEN};

/// A message waiting to be posted, in send order.
pub(crate) enum Tx {
    /// An engine message: `body` is the length prefix, header, payload.
    Msg { hlen: usize, body: Vec<u8> },
    /// The payload of LARGE `seq`, already posted: `body` as in `Msg`.
    Payload {
        seq: u32,
        hlen: usize,
        body: Vec<u8>,
    },
    /// Our answer to the peer's HELLO.
    Verdict([u8; VERDICT_LEN]),
    /// "Send the payload of your LARGE `seq`": its receive is posted.
    Cts(u32),
    /// "I handled `n` more of your messages."
    Credit(u32),
    /// Keepalive: "are you there?" (see `State::keepalive`).
    Ping,
    /// The answer to the peer's PING.
    Pong,
}

impl Tx {
    pub(crate) fn len(&self) -> usize {
        match self {
            Tx::Msg { body, .. } | Tx::Payload { body, .. } => body.len(),
            Tx::Verdict(b) => b.len(),
            Tx::Cts(_) | Tx::Credit(_) | Tx::Ping | Tx::Pong => 0,
        }
    }

    /// A PING or PONG.
    pub(crate) fn keepalive(&self) -> bool {
        matches!(self, Tx::Ping | Tx::Pong)
    }

    /// Bookkeeping whose loss costs no data (PING, PONG, CREDIT): not
    /// something `idle` waits to see flushed. A peer that has exited (its
    /// engine said goodbye first) would otherwise keep us waiting for the
    /// timeout on providers that retry a closed endpoint.
    pub(crate) fn optional(&self) -> bool {
        matches!(self, Tx::Ping | Tx::Pong | Tx::Credit(_))
    }
}

/// A message that arrived before its turn (out of order, or behind a
/// payload still coming in).
pub(crate) struct Held {
    pub kind: u8,
    pub body: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handshake {
    /// `connect` was called; nothing sent yet (lazy).
    Lazy,
    /// Our HELLO is to be posted (the provider said "again").
    Pending { since: Instant },
    /// Our HELLO is out; the VERDICT is awaited.
    Sent { since: Instant },
    /// The peer's id for us is known: messages may go.
    Done,
}

/// One pair's state; its key in `State::conns` is our id for the peer,
/// the tag id of everything the peer sends us.
pub(crate) struct Conn {
    /// The engine's name for it; `None` once disconnected.
    pub peer: Option<PeerId>,
    pub addr: fi_addr_t,
    /// The peer's id for us: the tag id of everything we send it.
    pub tx_id: u32,
    pub hs: Handshake,
    /// Largest inline payload the peer's receive buffers take.
    pub remote_inline: usize,
    /// A temporary peer of ours (`connect_port`): the port's tag.
    pub port: Option<u64>,
    pub out: VecDeque<Tx>,
    pub out_bytes: usize,
    /// Bytes of posted sends (from our copies) not completed yet, and of
    /// payloads awaiting the peer's CTS.
    pub inflight: usize,
    /// Payloads of LARGEs sent, by sequence number, until the peer's CTS
    /// says their receive is posted: (header length, body as in `Tx::Msg`).
    pub awaiting: BTreeMap<u32, (usize, Vec<u8>)>,
    /// Since when a payload has waited for its CTS (reset by each CTS).
    pub cts_since: Option<Instant>,
    /// Since when posting to the peer has met "again" throughout.
    pub stalled: Option<Instant>,
    pub failed: Option<String>,
    /// Sequence number of our next message to it.
    pub seq: u32,
    /// Messages we may still send it before it returns credits.
    pub credits: u32,
    /// Its messages handled since we last returned credits.
    pub consumed: u32,
    /// Sequence number of the next message to handle from it.
    pub rx_next: u32,
    /// A LARGE's payload is being received (its operation's context).
    pub rx_payload: Option<usize>,
    /// That receive writes into the engine's memory.
    pub rx_placed: bool,
    /// Messages that arrived before their turn, by sequence number.
    pub held: BTreeMap<u32, Held>,
    /// Detached: a BYE follows the queue.
    pub bye: bool,
    /// In `State::work`.
    pub in_work: bool,
    /// Something other than a PING or PONG was posted to the peer since
    /// the last keepalive round.
    pub active: bool,
    /// Our PINGs not answered yet (at most `wire::PINGS`).
    pub pings: u32,
    /// A message in sequence from the peer was handled in this keepalive
    /// round (the receive pool grows for busy peers).
    pub busy: bool,
}

impl Conn {
    fn new(peer: Option<PeerId>, addr: fi_addr_t) -> Conn {
        Conn {
            peer,
            addr,
            tx_id: 0,
            hs: Handshake::Lazy,
            remote_inline: 0,
            port: None,
            out: VecDeque::new(),
            out_bytes: 0,
            inflight: 0,
            awaiting: BTreeMap::new(),
            cts_since: None,
            stalled: None,
            failed: None,
            seq: 0,
            credits: wire::CREDITS,
            consumed: 0,
            rx_next: 0,
            rx_payload: None,
            rx_placed: false,
            held: BTreeMap::new(),
            bye: false,
            in_work: false,
            active: false,
            pings: 0,
            busy: false,
        }
    }

    pub(crate) fn ready(&self) -> bool {
        self.hs == Handshake::Done
    }

    pub(crate) fn push(&mut self, tx: Tx) {
        self.out_bytes += tx.len();
        self.out.push_back(tx);
    }

    pub(crate) fn push_front(&mut self, tx: Tx) {
        self.out_bytes += tx.len();
        self.out.push_front(tx);
    }

    pub(crate) fn pop(&mut self) -> Option<Tx> {
        let tx = self.out.pop_front()?;
        self.out_bytes -= tx.len();
        Some(tx)
    }
}

/// What to do about a HELLO.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HelloOutcome {
    /// Accepted on connection `conn`; `port`: a new temporary peer to
    /// announce with its tag.
    Accept {
        conn: u32,
        port: Option<(PeerId, u64)>,
    },
    Refuse(Verdict),
}

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
        self.conns.insert(id, Conn::new(peer, addr));
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

    /// Decides on a HELLO whose sender's endpoint is `addr`; on acceptance
    /// the connection knows the sender's id and inline limit.
    pub(crate) fn hello(&mut self, h: &Hello<'_>, addr: fi_addr_t) -> HelloOutcome {
        let found = match h.ident {
            IDENT_PORT => {
                let peer = self.new_temp();
                let id = self.add_conn(Some(peer), addr);
                self.accept(id, h, addr);
                return HelloOutcome::Accept {
                    conn: id,
                    port: Some((peer, h.who)),
                };
            }
            IDENT_RANK => match (self.jobs.group_of(h.job), u32::try_from(h.who)) {
                (None, _) => return HelloOutcome::Refuse(Verdict::OtherJob),
                (Some(0), Ok(r)) if r == self.me => {
                    return HelloOutcome::Refuse(Verdict::Unsupported)
                }
                (Some(0), Ok(r)) if !self.proven(h) => {
                    self.drop_msg(format!(
                        "HELLO as rank {r} without the job secret's proof: refused"
                    ));
                    return HelloOutcome::Refuse(Verdict::Unsupported);
                }
                (Some(g), Ok(r)) => peer_id(g, r),
                (Some(_), Err(_)) => return HelloOutcome::Refuse(Verdict::Unsupported),
            },
            _ => return HelloOutcome::Refuse(Verdict::Unsupported),
        };
        let id = match self.peers.get(&found) {
            Some(&id) => {
                if self.conns.get(&id).is_none_or(|c| c.failed.is_some()) {
                    return HelloOutcome::Refuse(Verdict::Unsupported);
                }
                id
            }
            None => self.add_conn(Some(found), addr),
        };
        self.accept(id, h, addr);
        HelloOutcome::Accept {
            conn: id,
            port: None,
        }
    }

    /// A rank HELLO from our own job carries the secret's MAC (always
    /// true without a secret).
    fn proven(&self, h: &Hello<'_>) -> bool {
        self.key
            .as_ref()
            .is_none_or(|k| auth::same(&wire::hello_mac(k, h, self.me), &h.mac))
    }

    fn accept(&mut self, id: u32, h: &Hello<'_>, addr: fi_addr_t) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if c.hs != Handshake::Done {
            self.made += 1;
        } else if c.tx_id != h.conn {
            // The peer connected anew (it had disconnected us): both
            // directions start over.
            c.out.clear();
            c.out_bytes = 0;
            c.awaiting.clear();
            c.cts_since = None;
            c.seq = 0;
            c.credits = wire::CREDITS;
            c.consumed = 0;
            c.rx_next = 0;
            c.held.clear();
            c.pings = 0;
        }
        c.tx_id = h.conn;
        c.remote_inline = h.inline as usize;
        c.addr = addr;
        c.hs = Handshake::Done;
        c.stalled = None;
        let v = wire::encode_verdict(Verdict::Accept, id, self.inline);
        c.push_front(Tx::Verdict(v));
        self.mark(id);
    }

    /// The VERDICT `v` for our HELLO on `id` arrived: `Err(why)` if refused.
    pub(crate) fn verdict(
        &mut self,
        id: u32,
        v: Verdict,
        their_id: u32,
        inline: u32,
    ) -> Result<(), String> {
        let Some(c) = self.conns.get_mut(&id) else {
            return Ok(());
        };
        match v {
            Verdict::Accept => {
                if c.hs != Handshake::Done {
                    self.made += 1;
                }
                c.tx_id = their_id;
                c.remote_inline = inline as usize;
                c.hs = Handshake::Done;
                c.stalled = None;
                self.mark(id);
                Ok(())
            }
            Verdict::OtherJob => Err("connection rejected: the peer is in another job".into()),
            Verdict::Unsupported => Err("connection rejected by the peer".into()),
        }
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

    fn hello<'a>(ident: u8, who: u64, job: &'a [u8], conn: u32) -> Hello<'a> {
        Hello {
            ident,
            who,
            conn,
            inline: 100,
            job,
            name: b"x",
            nonce: [1; 8],
            mac: [0; 8],
        }
    }

    #[test]
    fn identities_and_refusals() {
        let mut st = State::new(1, b"job", 100);
        st.jobs.add(4, b"other").unwrap();
        // Our own rank, unknown jobs, wide ranks and unknown kinds are refused.
        for (h, v) in [
            (hello(IDENT_RANK, 1, b"job", 5), Verdict::Unsupported),
            (hello(IDENT_RANK, 0, b"stranger", 5), Verdict::OtherJob),
            (hello(IDENT_RANK, 1 << 32, b"job", 5), Verdict::Unsupported),
            (hello(9, 0, b"job", 5), Verdict::Unsupported),
        ] {
            assert_eq!(st.hello(&h, 7), HelloOutcome::Refuse(v));
        }
        assert!(st.conns.is_empty());
        // Rank 0 of our job and rank 1 of group 4 (same rank as ours).
        let HelloOutcome::Accept {
            conn: a,
            port: None,
        } = st.hello(&hello(IDENT_RANK, 0, b"job", 11), 7)
        else {
            panic!()
        };
        let HelloOutcome::Accept {
            conn: b,
            port: None,
        } = st.hello(&hello(IDENT_RANK, 1, b"other", 12), 8)
        else {
            panic!()
        };
        assert_eq!(st.peers[&0], a);
        assert_eq!(st.peers[&peer_id(4, 1)], b);
        let c = &st.conns[&a];
        assert_eq!((c.tx_id, c.remote_inline, c.ready()), (11, 100, true));
        assert!(matches!(c.out.front(), Some(Tx::Verdict(_))));
        assert_eq!(st.made, 2);
        // A second HELLO from the same identity updates the same connection.
        assert_eq!(
            st.hello(&hello(IDENT_RANK, 0, b"job", 13), 9),
            HelloOutcome::Accept {
                conn: a,
                port: None
            }
        );
        assert_eq!((st.conns[&a].tx_id, st.conns[&a].addr), (13, 9));
        assert_eq!(st.made, 2);
        // A failed peer refuses; a removed group is another job again.
        st.fail(a, "gone".into());
        assert_eq!(st.failures, [(0, "gone".to_string())]);
        assert_eq!(
            st.hello(&hello(IDENT_RANK, 0, b"job", 14), 7),
            HelloOutcome::Refuse(Verdict::Unsupported)
        );
        st.jobs.remove(4);
        assert_eq!(
            st.hello(&hello(IDENT_RANK, 2, b"other", 15), 7),
            HelloOutcome::Refuse(Verdict::OtherJob)
        );
        assert_eq!(st.peer_count(), 1);
    }

    #[test]
    fn with_a_secret_rank_hellos_of_our_job_prove_it() {
        let key = JobKey::new([5; 16]);
        let mut st = State::new(1, b"job", 100);
        st.key = Some(key);
        st.jobs.add(4, b"other").unwrap();
        let proven = |mut h: Hello<'static>, target: u32, k: &JobKey| {
            h.mac = wire::hello_mac(k, &h, target);
            h
        };
        // No MAC, a MAC for another target, or made with another key.
        for h in [
            hello(IDENT_RANK, 0, b"job", 5),
            proven(hello(IDENT_RANK, 0, b"job", 5), 2, &key),
            proven(hello(IDENT_RANK, 0, b"job", 5), 1, &JobKey::new([6; 16])),
        ] {
            assert_eq!(st.hello(&h, 7), HelloOutcome::Refuse(Verdict::Unsupported));
        }
        assert!(st.conns.is_empty() && st.peers.is_empty(), "nothing held");
        assert_eq!(st.dropped, 3);
        assert!(st.last_drop.as_deref().unwrap().contains("job secret"));
        // A MAC over other fields than those sent: another endpoint name.
        let mut h = proven(hello(IDENT_RANK, 0, b"job", 5), 1, &key);
        h.name = b"y";
        assert_eq!(st.hello(&h, 7), HelloOutcome::Refuse(Verdict::Unsupported));
        // The genuine rank 0 is then accepted.
        let h = proven(hello(IDENT_RANK, 0, b"job", 5), 1, &key);
        assert!(matches!(
            st.hello(&h, 7),
            HelloOutcome::Accept { port: None, .. }
        ));
        // Other jobs (added groups) and ports are not checked (yet).
        assert!(matches!(
            st.hello(&hello(IDENT_RANK, 0, b"other", 6), 8),
            HelloOutcome::Accept { port: None, .. }
        ));
        assert!(matches!(
            st.hello(&hello(IDENT_PORT, 9, b"x", 7), 9),
            HelloOutcome::Accept { port: Some(_), .. }
        ));
    }

    #[test]
    fn simultaneous_connect_needs_no_tie_break() {
        // Both sides connected and sent HELLOs carrying their ids.
        let mut a = State::new(0, b"j", 100);
        let mut b = State::new(1, b"j", 100);
        let ab = a.add_conn(Some(1), 100);
        let ba = b.add_conn(Some(0), 200);
        a.conns.get_mut(&ab).unwrap().hs = Handshake::Sent {
            since: Instant::now(),
        };
        b.conns.get_mut(&ba).unwrap().hs = Handshake::Sent {
            since: Instant::now(),
        };
        // Each gets the other's HELLO: the same connection takes it.
        let ha = hello(IDENT_RANK, 0, b"j", ab);
        let hb = hello(IDENT_RANK, 1, b"j", ba);
        assert!(matches!(b.hello(&ha, 200), HelloOutcome::Accept { conn, .. } if conn == ba));
        assert!(matches!(a.hello(&hb, 100), HelloOutcome::Accept { conn, .. } if conn == ab));
        // ... and the VERDICTs that follow agree with what the HELLOs said.
        assert_eq!(a.verdict(ab, Verdict::Accept, ba, 100), Ok(()));
        assert_eq!(b.verdict(ba, Verdict::Accept, ab, 100), Ok(()));
        assert_eq!((a.conns[&ab].tx_id, b.conns[&ba].tx_id), (ba, ab));
        assert_eq!((a.made, b.made), (1, 1));
        assert!(a.verdict(ab, Verdict::OtherJob, 0, 0).is_err());
        assert_eq!(
            a.verdict(999, Verdict::Accept, 1, 1),
            Ok(()),
            "stale: ignored"
        );
    }

    #[test]
    fn ports_are_new_temporary_peers() {
        let mut st = State::new(0, b"j", 100);
        let h = hello(IDENT_PORT, 77, b"anyone", 3);
        let HelloOutcome::Accept {
            conn: c1,
            port: Some((p1, 77)),
        } = st.hello(&h, 5)
        else {
            panic!()
        };
        let HelloOutcome::Accept {
            conn: c2,
            port: Some((p2, 77)),
        } = st.hello(&h, 5)
        else {
            panic!()
        };
        assert_ne!(c1, c2);
        assert_eq!((p1, p2), (peer_id(TEMP_GROUP, 0), peer_id(TEMP_GROUP, 1)));
    }

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
