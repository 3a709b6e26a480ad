//! The header every engine message carries, on every transport.
//!
//! Transports move `(WireHeader, payload)` pairs and never look inside the
//! header; the protocols (`protocol/`) give the fields their meaning per kind.
//! The layout is fixed (`repr(C)`, 40 bytes) because shared memory and the
//! netmods copy it as bytes between processes of the same build.

/// What a message asks the receiver to do.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgKind {
    /// Eager data: the whole payload rides with the header.
    Eager = 1,
    /// Rendezvous request: `len` is the message size, `aux` the sender's
    /// buffer address (for a single-copy read), `sreq` the send request.
    Rts = 2,
    /// Clear to send (copy path): `sreq` names the send, `aux` the receive.
    Cts = 3,
    /// A piece of a rendezvous message: `aux` names the receive request,
    /// `len` is the offset of this piece.
    Data = 4,
    /// The receiver has the whole rendezvous message (single-copy path) or
    /// has matched a synchronous send: `sreq` names the send.
    Ack = 5,
    /// The sender asks to withdraw the message `sreq` if still unmatched.
    CancelReq = 6,
    /// Answer to `CancelReq`; `flags & FLAG_CANCELLED` says whether it was.
    CancelAck = 7,
    /// Eager flow control over a netmod: the receiver has consumed `aux`
    /// more bytes of eager data and the sender may send that much again.
    Credit = 8,
    /// The sender has finalized: everything it sent us has arrived, and its
    /// connection closing next is not a failure.
    Bye = 9,
    /// A chunk of a message on a temporary port connection (connect /
    /// accept): `len` is the whole message's size, `aux` this chunk's offset.
    Port = 10,
    /// Shared memory, a large rendezvous message the receiver copies with
    /// the sender's help: "write your bytes from offset `len` on into my
    /// buffer at `aux`" (payload: the byte count, then the receive's
    /// handle, little-endian u64s); `sreq` names the send. The receiver
    /// reads the part before `len` meanwhile.
    Write = 11,
    /// Answer to `Write`: done (or, with `FLAG_FAILED`, refused: the
    /// receiver copies that part itself); `aux` names the receive.
    Written = 12,
}

impl MsgKind {
    pub fn from_u8(v: u8) -> Option<MsgKind> {
        Some(match v {
            1 => MsgKind::Eager,
            2 => MsgKind::Rts,
            3 => MsgKind::Cts,
            4 => MsgKind::Data,
            5 => MsgKind::Ack,
            6 => MsgKind::CancelReq,
            7 => MsgKind::CancelAck,
            8 => MsgKind::Credit,
            9 => MsgKind::Bye,
            10 => MsgKind::Port,
            11 => MsgKind::Write,
            12 => MsgKind::Written,
            _ => return None,
        })
    }
}

/// The sender waits for an `Ack` once the message is matched (ssend).
pub const FLAG_SYNC: u8 = 1;
/// In a `CancelAck`: the message was withdrawn.
pub const FLAG_CANCELLED: u8 = 2;
/// In an `Rts`: the payload is the sender's pid and then the key of its
/// buffer, registered for one-sided reads over the netmod (`rma.rs`).
pub const FLAG_RMA_KEY: u8 = 4;
/// In a `Written`: the sender could not write its part.
pub const FLAG_FAILED: u8 = 8;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireHeader {
    pub kind: u8,
    pub flags: u8,
    pub reserved: u16,
    /// Communicator context id.
    pub context: u32,
    pub tag: i32,
    /// Sender's rank in the communicator (what the receiver matches on).
    pub src: u32,
    /// Message length (`Eager`, `Rts`) or offset (`Data`).
    pub len: u64,
    /// Sender-side request handle, 0 when there is none.
    pub sreq: u64,
    /// Kind-specific: buffer address (`Rts`) or receive request (`Cts`, `Data`).
    pub aux: u64,
}

/// A control message's header: no payload, no tag.
pub fn control(kind: MsgKind, context: u32, sreq: u64) -> WireHeader {
    WireHeader {
        kind: kind as u8,
        context,
        sreq,
        ..WireHeader::default()
    }
}

pub const HEADER_SIZE: usize = std::mem::size_of::<WireHeader>();
const _: () = assert!(HEADER_SIZE == 40);

impl WireHeader {
    pub fn kind(&self) -> Option<MsgKind> {
        MsgKind::from_u8(self.kind)
    }

    /// The header as the bytes a netmod sends.
    #[inline]
    pub fn as_bytes(&self) -> &[u8; HEADER_SIZE] {
        // SAFETY: `repr(C)` with fields laid out without padding (checked by
        // the size assertion above), so every byte is initialized.
        unsafe { &*(self as *const WireHeader as *const [u8; HEADER_SIZE]) }
    }

    /// A header from a netmod's bytes; `None` unless exactly one header.
    #[inline]
    pub fn from_bytes(bytes: &[u8]) -> Option<WireHeader> {
        let bytes: &[u8; HEADER_SIZE] = bytes.try_into().ok()?;
        // SAFETY: any bit pattern is a valid `WireHeader` (integers only);
        // the read is unaligned because netmod buffers need not be.
        Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const WireHeader) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_through_bytes() {
        let h = WireHeader {
            kind: MsgKind::Data as u8,
            flags: FLAG_SYNC,
            reserved: 0,
            context: 7,
            tag: -3,
            src: 5,
            len: 1 << 40,
            sreq: 99,
            aux: u64::MAX,
        };
        assert_eq!(WireHeader::from_bytes(h.as_bytes()), Some(h));
        assert_eq!(WireHeader::from_bytes(&h.as_bytes()[1..]), None);
        assert_eq!(MsgKind::from_u8(8), Some(MsgKind::Credit));
        assert_eq!(MsgKind::from_u8(9), Some(MsgKind::Bye));
        assert_eq!(MsgKind::from_u8(10), Some(MsgKind::Port));
        assert_eq!(MsgKind::from_u8(12), Some(MsgKind::Written));
        assert_eq!(MsgKind::from_u8(13), None);
    }
}
