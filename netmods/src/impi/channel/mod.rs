//! One channel between two procs of different clients: a socket carrying
//! chapter 3's packets, driven without blocking. Usually a direct TCP
//! connection; for a pair without one, the socket to the agent (rivetrun),
//! which moves the packets over its host link (`IMPI_FUNNEL_FDS`).
//!
//! Each engine message is one IMPI message whose user data is the engine's
//! header (after a 4-byte big-endian length) and payload: the agent acts
//! as a funnel (3.5's advice), the engine matching on top. So a first
//! packet "matches" as soon as it has arrived, and a receiver answers a
//! long message's `DATASYNC` at once; `CANCEL` is answered (`CANCELNO`,
//! the message having been taken) but never sent, since the engine cancels
//! with messages of its own. Messages are delivered in the order of their
//! first packets, so a short one sent behind a long one waits for it.
//!
//! The envelope fields of 3.5 (`pk_lsrank`, `pk_tag`, `pk_cid`) are read
//! from the engine's header ([`Envelope`](super::protocol::Envelope) fields at fixed offsets, see
//! [`engine_envelope`]); the engine keeps the contexts of 3.3 (the world
//! is 0, a communicator `c` and its collectives `c + 1`).
//!
//! Sending obeys the pair's flow control (the destination host's
//! ackmark/hiwater, Rivet's own between two Rivet hosts over a direct
//! channel): a counted packet goes only with credit. A short message with
//! credit and no message queued is written straight from the caller's
//! buffers, behind the bytes `out` still holds, in one vectored `sendmsg`;
//! only what the socket does not take is copied into `out`, and a short
//! write ends the flush (the socket is full). A short message without
//! credit, behind queued packets, or large (`HOLD_FROM`) behind unwritten
//! bytes, is refused (`take` says full): the engine keeps it by reference
//! and offers it again after its next poll, so waiting copies nothing.
//! Long messages (a peer with a smaller `maxdatalen`) wait encoded in `out`.
//!
//! Receiving reads straight into a buffer the channel keeps and cuts
//! packets in place: a whole short message is handed to the engine from
//! that buffer (no allocation, no copy); only long messages are assembled
//! in memory of their own. A large short message whose headers are in is
//! received straight into the engine's memory (`Sink::place`); after one,
//! the next read takes only a few hundred bytes, so in a stream of large
//! messages each payload but the first goes straight there too, not
//! through this buffer. A protocol ACK that falls due is written before
//! the read returns, at the next packet boundary of `out` (never behind
//! data queued there): a peer at its hiwater waits one read for it.
//!
//! By concept: the channel's state and life (here), sending under flow
//! control (`send.rs`), receiving and the protocol actions (`receive.rs`),
//! the receive buffer (`rx.rs`), what crosses to the engine (`arrivals.rs`).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::ops::Range;
use std::os::fd::OwnedFd;

use super::flow::Credit;
use super::packet::{Packet, Proc};
use super::protocol::{Incoming, Outgoing};

mod arrivals;
mod receive;
mod rx;
mod send;

use arrivals::Placing;
pub use arrivals::{engine_envelope, split_message, Arrivals};
use rx::Rx;

/// Encoded bytes a channel holds before it stops encoding more.
const OUT_HIGH: usize = 1 << 20;
/// Messages a channel queues before `try_send` says "full".
const QUEUE_MAX: usize = 64;
/// The receive buffer: many small packets per read (see `Rx`).
const RX_BUF: usize = 256 * 1024;
/// Reads per poll, so one busy channel cannot starve the others.
const READS_PER_POLL: usize = 8;
/// Below this a message written while others went since the last poll is
/// queued and leaves with them (one write for a burst of small ones).
const COALESCE_BELOW: usize = 16 * 1024;
/// Queued bytes written at once rather than at the next poll.
const COALESCE_FLUSH: usize = 64 * 1024;
/// A short message of at least this size is refused while `out` holds
/// unwritten bytes (the socket is full): queued, it would be copied whole.
const HOLD_FROM: usize = 64 * 1024;
/// Bytes before the engine's header in an IMPI message: its length.
const LEN_PREFIX: usize = 4;
/// Payloads from this size on are offered to the engine (`Arrivals::place`)
/// when their packet is not all in yet: below it, copying out of the
/// receive buffer costs less than the extra receive call.
const PLACE_MIN: usize = 16 * 1024;

/// A message not yet started: its user data (length, header, payload).
struct Pending {
    data: Vec<u8>,
    out: Outgoing,
}

/// A long message whose `SYNCACK` came: its remaining packets.
struct Streaming {
    data: Vec<u8>,
    packets: VecDeque<(Packet, Range<u64>)>,
}

/// A message arriving: its bytes so far, and whether all came.
struct Arriving {
    buf: Vec<u8>,
    complete: bool,
}

pub struct Channel {
    /// A connected stream socket (TCP, or a Unix socket to the agent).
    pub sock: Option<OwnedFd>,
    me: Proc,
    them: Proc,
    maxdatalen: u32,
    /// Largest message this side accepts (`msglen`).
    max_msg: u64,
    out: Vec<u8>,
    out_at: usize,
    /// Ends of the packets (or packet tails) in `out`, ascending, those
    /// from `out_at` on: where a protocol ACK may cut in.
    bounds: VecDeque<usize>,
    /// A protocol ACK was queued since the last flush.
    ack_due: bool,
    rx: Rx,
    /// The payload of the packet being read goes to the engine's memory.
    placing: Option<Placing>,
    /// Its engine header (kept for `deliver`).
    placed_header: Vec<u8>,
    /// Payload bytes still to come of a placed message given up on.
    skip: usize,
    incoming: Incoming,
    credit: Credit,
    next_srqid: u64,
    queue: VecDeque<Pending>,
    /// Counted header-only packets (SYNCACK, cancel replies) awaiting credit.
    ctl: VecDeque<Packet>,
    streaming: VecDeque<Streaming>,
    awaiting: HashMap<u64, Pending>,
    arriving: HashMap<u64, Arriving>,
    order: VecDeque<u64>,
    pub fini_sent: bool,
    pub fini_got: bool,
    /// A message was written since the last poll (see `take`).
    wrote_since_poll: bool,
    /// The socket took less than offered since the last poll: a refused
    /// `take` does not try it again (an `EAGAIN` per offer), the poll does.
    socket_full: bool,
    /// Packets written, for tests and `describe`.
    pub packets_out: u64,
    pub syscalls: u64,
    /// `take` calls answered "full", for tests.
    pub refused: u64,
    /// Bytes copied into `out` (packets waiting for the socket), for tests.
    pub copied_out: u64,
    /// Payload bytes copied from the receive buffer into placed memory
    /// (the rest of a placed payload is received there directly).
    pub copied: u64,
}

fn protocol(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

impl Channel {
    /// `ackmark`/`hiwater`: the destination host's (it buffers and acks);
    /// `my_ackmark`: this host's, for what this side receives.
    pub fn new(
        me: Proc,
        them: Proc,
        maxdatalen: u32,
        max_msg: u64,
        their_flow: (u32, u32),
        my_ackmark: u32,
    ) -> Channel {
        Channel {
            sock: None,
            me,
            them,
            maxdatalen,
            max_msg,
            out: Vec::new(),
            out_at: 0,
            bounds: VecDeque::new(),
            ack_due: false,
            rx: Rx::new(),
            placing: None,
            placed_header: Vec::new(),
            skip: 0,
            incoming: Incoming::new(maxdatalen, my_ackmark),
            credit: Credit::new(their_flow.0, their_flow.1),
            next_srqid: 1,
            queue: VecDeque::new(),
            ctl: VecDeque::new(),
            streaming: VecDeque::new(),
            awaiting: HashMap::new(),
            arriving: HashMap::new(),
            order: VecDeque::new(),
            fini_sent: false,
            fini_got: false,
            wrote_since_poll: false,
            socket_full: false,
            packets_out: 0,
            syscalls: 0,
            refused: 0,
            copied_out: 0,
            copied: 0,
        }
    }

    /// Nothing waits to be encoded or written.
    pub fn idle(&self) -> bool {
        self.out_at == self.out.len()
            && self.queue.is_empty()
            && self.ctl.is_empty()
            && self.streaming.is_empty()
            && self.awaiting.is_empty()
    }

    /// Encoded bytes not yet written.
    pub fn wants_write(&self) -> bool {
        self.out_at < self.out.len()
    }

    /// A new poll began: the next small message may be written at once.
    pub fn new_poll(&mut self) {
        self.wrote_since_poll = false;
        self.socket_full = false;
    }

    /// Stop writing into the engine's memory (the engine is going away):
    /// the rest of a placed payload is read and dropped.
    pub fn abandon_placing(&mut self) {
        if let Some(pl) = self.placing.take() {
            self.skip = pl.len - pl.got;
        }
    }
}

#[cfg(test)]
#[path = "../channel_tests.rs"]
mod tests;
