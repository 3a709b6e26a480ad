//! One connection's state (`Conn`): its queue of messages to post (`Tx`),
//! the handshake's phase, credits and payloads in flight, and its receive
//! order (messages held for their turn). `State` owns the table of them.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use crate::PeerId;

use super::sys::fi_addr_t;
use super::wire::{self, VERDICT_LEN};

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
    /// A port connection's key (from the port's tag), both ways; `None`:
    /// the keys of the peer's job group (`proof.rs`).
    pub key: Option<crate::auth::JobKey>,
    /// Our HELLO's nonce, which the peer's VERDICT must prove.
    pub nonce: [u8; 8],
    /// What the peer's messages must open with (`proof.rs`); `None`:
    /// nothing to check (a port, no key).
    pub rx_token: Option<[u8; wire::TOKEN]>,
    /// What ours open with, set when the peer's id is known.
    pub tx_token: [u8; wire::TOKEN],
}

impl Conn {
    pub(super) fn new(peer: Option<PeerId>, addr: fi_addr_t) -> Conn {
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
            key: None,
            nonce: [0; 8],
            rx_token: None,
            tx_token: [0; wire::TOKEN],
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
