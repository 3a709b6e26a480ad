//! The message protocols of seed 003, 3.7, for one channel, sans I/O:
//! what packets a send becomes ([`Outgoing`]) and what arriving packets
//! mean ([`Incoming`]). Matching stays with the engine: the receiver side
//! announces each new message and is told when it matched.
//!
//! * Short (at most `maxdatalen` bytes): one packet, `DATA`, or `DATASYNC`
//!   for a synchronous send, answered by `SYNCACK` once it matched.
//! * Long: the first `maxdatalen` bytes eagerly as `DATASYNC`; on its
//!   `SYNCACK` the rest as `DATA` packets carrying the receiver's `drqid`.
//! * Cancel: while the first packet is out and unacknowledged, `CANCEL`
//!   (by `srqid`) gets `CANCELYES` if the message was still unmatched (it
//!   is destroyed; of several with one `srqid`, the last) or `CANCELNO`.
//!
//! Where the text is silent: a first packet has `pk_drqid` 0 and the ids a
//! receiver hands out are never 0, so continuation packets are told apart
//! by a non-zero `pk_drqid`.

use std::collections::HashMap;
use std::ops::Range;

use super::flow::{counted, Acker};
use super::packet::{Kind, Packet, Proc};

/// A packet that breaks the protocol; the channel cannot be trusted after it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("IMPI protocol violation: {0}")]
pub struct ProtocolError(pub String);

/// Who a message is from and to, and its MPI envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope {
    pub src: Proc,
    pub dest: Proc,
    pub lsrank: i32,
    pub tag: i32,
    pub cid: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendPhase {
    /// The first packet went; a `SYNCACK` is awaited if it was `DATASYNC`.
    FirstSent { awaiting_sync: bool },
    /// Everything went and nothing more is awaited.
    Done,
}

/// The sender's side of one message.
#[derive(Debug, Clone)]
pub struct Outgoing {
    env: Envelope,
    srqid: u64,
    len: u64,
    sync: bool,
    maxdatalen: u32,
    phase: SendPhase,
    cancelling: bool,
    cancelled: bool,
}

impl Outgoing {
    /// A send of `len` bytes; `srqid` names it among the sender's active
    /// requests; `sync` for `MPI_Ssend`.
    pub fn new(env: Envelope, srqid: u64, len: u64, sync: bool, maxdatalen: u32) -> Outgoing {
        Outgoing {
            env,
            srqid,
            len,
            sync,
            maxdatalen: maxdatalen.max(1),
            phase: SendPhase::Done,
            cancelling: false,
            cancelled: false,
        }
    }

    pub fn is_long(&self) -> bool {
        self.len > self.maxdatalen as u64
    }

    fn data_packet(&self, kind: Kind, range: &Range<u64>, drqid: u64) -> Packet {
        let mut p = Packet::new(kind, self.env.src, self.env.dest);
        p.len = (range.end - range.start) as u32;
        p.srqid = self.srqid;
        p.drqid = drqid;
        p.msglen = self.len;
        p.lsrank = self.env.lsrank;
        p.tag = self.env.tag;
        p.cid = self.env.cid;
        p
    }

    /// The first packet and the bytes of the message it carries.
    pub fn first(&mut self) -> (Packet, Range<u64>) {
        let range = 0..self.len.min(self.maxdatalen as u64);
        let awaiting_sync = self.sync || self.is_long();
        let kind = if awaiting_sync {
            Kind::DataSync
        } else {
            Kind::Data
        };
        self.phase = SendPhase::FirstSent { awaiting_sync };
        (self.data_packet(kind, &range, 0), range)
    }

    /// The send is complete locally: nothing more to send or await.
    pub fn complete(&self) -> bool {
        self.phase == SendPhase::Done
            || self.phase
                == SendPhase::FirstSent {
                    awaiting_sync: false,
                }
    }

    /// The `SYNCACK` for this message: the rest of a long message, as
    /// `DATA` packets with the receiver's `drqid` (none for a short one).
    pub fn on_syncack(&mut self, ack: &Packet) -> Result<Vec<(Packet, Range<u64>)>, ProtocolError> {
        if ack.kind != Kind::SyncAck || ack.srqid != self.srqid {
            return Err(ProtocolError(format!(
                "{:?} is not this send's SYNCACK",
                ack.kind
            )));
        }
        if self.phase
            != (SendPhase::FirstSent {
                awaiting_sync: true,
            })
        {
            return Err(ProtocolError(format!(
                "SYNCACK for request {} which awaits none",
                self.srqid
            )));
        }
        self.phase = SendPhase::Done;
        let step = self.maxdatalen as u64;
        let mut out = Vec::new();
        let mut at = step.min(self.len);
        while at < self.len {
            let range = at..(at + step).min(self.len);
            out.push((
                self.data_packet(Kind::Data, &range, ack.drqid),
                range.clone(),
            ));
            at = range.end;
        }
        Ok(out)
    }

    /// `MPI_Cancel`: the `CANCEL` packet when the send is in the window of
    /// 3.7.4 (first packet out, no `SYNCACK` yet, or a short plain send),
    /// `None` when it must be resolved locally.
    pub fn cancel(&mut self) -> Option<Packet> {
        if self.cancelling || self.cancelled {
            return None;
        }
        match self.phase {
            SendPhase::FirstSent { .. } => {
                self.cancelling = true;
                let mut p = Packet::new(Kind::Cancel, self.env.src, self.env.dest);
                p.srqid = self.srqid;
                Some(p)
            }
            SendPhase::Done => None,
        }
    }

    /// `CANCELYES` / `CANCELNO`: whether the send was cancelled.
    pub fn on_cancel_reply(&mut self, reply: &Packet) -> Result<bool, ProtocolError> {
        if !self.cancelling || reply.srqid != self.srqid {
            return Err(ProtocolError(format!(
                "cancel reply for request {} which asked none",
                reply.srqid
            )));
        }
        self.cancelling = false;
        match reply.kind {
            Kind::CancelYes => {
                self.cancelled = true;
                self.phase = SendPhase::Done;
                Ok(true)
            }
            Kind::CancelNo => Ok(false),
            other => Err(ProtocolError(format!("{other:?} is not a cancel reply"))),
        }
    }
}

/// What the receiving side must do about arrivals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write this header-only packet to the channel.
    Send(Packet),
    /// A new message is available (probe sees it): match it or keep it;
    /// call [`Incoming::matched`] with `id` when a receive takes it.
    Message { id: u64, first: Packet },
    /// More bytes of matched message `id`, at `offset`.
    Continue { id: u64, offset: u64, len: u32 },
    /// Message `id` has all its bytes.
    Complete { id: u64 },
    /// Message `id` was cancelled by its sender before it matched: drop it.
    Destroy { id: u64 },
    /// A packet for the sending side (`SYNCACK`, cancel replies).
    ForSender(Packet),
    /// `ackmark` more packets to that destination were consumed.
    ProtoAck { from: Proc, to: Proc },
    /// The peer agent ends the channel.
    Fini,
}

#[derive(Debug, Clone)]
struct Unmatched {
    id: u64,
    first: Packet,
}

#[derive(Debug, Clone)]
struct Assembly {
    id: u64,
    src: Proc,
    got: u64,
    msglen: u64,
}

/// The receiving side of one channel: messages announced but not matched
/// (in arrival order, searched backwards for cancels), long messages
/// being assembled, and the protocol ACK counters per pair.
#[derive(Debug)]
pub struct Incoming {
    maxdatalen: u32,
    ackmark: u32,
    next_id: u64,
    unmatched: Vec<Unmatched>,
    assembling: HashMap<u64, Assembly>,
    /// Per (source, destination) pair; a linear list, since a channel
    /// between two procs carries one pair.
    ackers: Vec<((Proc, Proc), Acker)>,
    fini: bool,
}

impl Incoming {
    /// `ackmark`: this host's (it acknowledges what it receives).
    pub fn new(maxdatalen: u32, ackmark: u32) -> Incoming {
        Incoming {
            maxdatalen,
            ackmark,
            next_id: 1,
            unmatched: Vec::new(),
            assembling: HashMap::new(),
            ackers: Vec::new(),
            fini: false,
        }
    }

    /// Messages announced and not yet matched or destroyed.
    pub fn unmatched(&self) -> usize {
        self.unmatched.len()
    }

    /// One packet (its data already read: `p.len` bytes for data packets).
    pub fn on_packet(&mut self, p: &Packet) -> Result<Vec<Action>, ProtocolError> {
        let mut out = Vec::new();
        if counted(p.kind) {
            if let Some(ack) = self.count(p) {
                out.push(Action::Send(ack));
            }
        }
        match p.kind {
            Kind::Data | Kind::DataSync if p.drqid == 0 => {
                if p.len > self.maxdatalen {
                    return Err(ProtocolError(format!(
                        "{} data bytes over maxdatalen {}",
                        p.len, self.maxdatalen
                    )));
                }
                if (p.len as u64) < p.msglen && p.kind != Kind::DataSync {
                    return Err(ProtocolError(
                        "the first packet of a long message must be DATASYNC".into(),
                    ));
                }
                if (p.len as u64) < p.msglen && p.len != self.maxdatalen {
                    return Err(ProtocolError(format!(
                        "the first packet of a long message carries {} bytes, not maxdatalen {}",
                        p.len, self.maxdatalen
                    )));
                }
                let id = self.next_id;
                self.next_id += 1;
                self.unmatched.push(Unmatched { id, first: *p });
                out.push(Action::Message { id, first: *p });
            }
            Kind::Data | Kind::DataSync => {
                let a = self.assembling.get_mut(&p.drqid).ok_or_else(|| {
                    ProtocolError(format!("data for unknown receive {}", p.drqid))
                })?;
                if a.src != p.src || p.kind != Kind::Data {
                    return Err(ProtocolError("continuation from the wrong sender".into()));
                }
                let end = a.got + p.len as u64;
                if end > a.msglen || p.len == 0 {
                    return Err(ProtocolError(format!(
                        "continuation of {} bytes at {} of a {}-byte message",
                        p.len, a.got, a.msglen
                    )));
                }
                out.push(Action::Continue {
                    id: a.id,
                    offset: a.got,
                    len: p.len,
                });
                a.got = end;
                if end == a.msglen {
                    out.push(Action::Complete { id: a.id });
                    self.assembling.remove(&p.drqid);
                }
            }
            Kind::Cancel => {
                let last = self
                    .unmatched
                    .iter()
                    .rposition(|u| u.first.src == p.src && u.first.srqid == p.srqid);
                let kind = match last {
                    Some(i) => {
                        let u = self.unmatched.remove(i);
                        out.push(Action::Destroy { id: u.id });
                        Kind::CancelYes
                    }
                    None => Kind::CancelNo,
                };
                let mut reply = Packet::new(kind, p.dest, p.src);
                reply.srqid = p.srqid;
                out.push(Action::Send(reply));
            }
            Kind::SyncAck | Kind::CancelYes | Kind::CancelNo => out.push(Action::ForSender(*p)),
            Kind::ProtoAck => out.push(Action::ProtoAck {
                from: p.src,
                to: p.dest,
            }),
            Kind::Fini => {
                self.fini = true;
                out.push(Action::Fini);
            }
        }
        Ok(out)
    }

    /// A counted packet from `p.src` to `p.dest` arrived: the protocol
    /// ACK that is due now, if one is.
    fn count(&mut self, p: &Packet) -> Option<Packet> {
        let key = (p.src, p.dest);
        let i = match self.ackers.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                self.ackers.push((key, Acker::new(self.ackmark)));
                self.ackers.len() - 1
            }
        };
        self.ackers[i]
            .1
            .received()
            .then(|| Packet::new(Kind::ProtoAck, p.dest, p.src))
    }

    /// A funnel's fast path: `p` is a plain `DATA` packet holding a whole
    /// message (`pk_drqid` 0, `pk_len == pk_msglen`) which the receiver
    /// takes at once. It is checked and counted as `on_packet` and then
    /// `matched` would, without announcing it or allocating; the protocol
    /// ACK it makes due, if any, is returned. `None` from
    /// [`Incoming::is_short_data`] means the general path must take it.
    pub fn take_short(&mut self, p: &Packet) -> Result<Option<Packet>, ProtocolError> {
        if !Self::is_short_data(p) {
            return Err(ProtocolError(format!(
                "{:?} of {} of {} bytes is not a whole short message",
                p.kind, p.len, p.msglen
            )));
        }
        if p.len > self.maxdatalen {
            return Err(ProtocolError(format!(
                "{} data bytes over maxdatalen {}",
                p.len, self.maxdatalen
            )));
        }
        Ok(self.count(p))
    }

    /// Whether `p` may go through [`Incoming::take_short`].
    pub fn is_short_data(p: &Packet) -> bool {
        p.kind == Kind::Data && p.drqid == 0 && p.len as u64 == p.msglen
    }

    /// A receive took message `id`: the `SYNCACK` it is owed (synchronous
    /// or long), and for a long one the continuation's `drqid` (= `id`).
    pub fn matched(&mut self, id: u64) -> Result<Vec<Action>, ProtocolError> {
        let i = self
            .unmatched
            .iter()
            .position(|u| u.id == id)
            .ok_or_else(|| ProtocolError(format!("message {id} is not waiting to match")))?;
        let first = self.unmatched.remove(i).first;
        let mut out = Vec::new();
        if first.kind == Kind::DataSync {
            let mut ack = Packet::new(Kind::SyncAck, first.dest, first.src);
            ack.srqid = first.srqid;
            ack.drqid = id;
            out.push(Action::Send(ack));
        }
        if (first.len as u64) < first.msglen {
            self.assembling.insert(
                id,
                Assembly {
                    id,
                    src: first.src,
                    got: first.len as u64,
                    msglen: first.msglen,
                },
            );
        } else {
            out.push(Action::Complete { id });
        }
        Ok(out)
    }
}

#[cfg(test)]
#[path = "protocol_tests.rs"]
mod tests;
