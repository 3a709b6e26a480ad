//! `IMPI_Packet` (seed 003, 3.5): the fixed 128-byte header every packet
//! between hosts starts with, all fields in network byte order, followed
//! by `pk_len` bytes of user data for the data types.
//!
//! Layout (offset: field): 0 `pk_type` u32, 4 `pk_len` u32, 8 `pk_src`
//! (16-byte host id, 8-byte pid), 32 `pk_dest` (same), 56 `pk_srqid` u64,
//! 64 `pk_drqid` u64, 72 `pk_msglen` u64, 80 `pk_lsrank` i32, 84 `pk_tag`
//! i32, 88 `pk_cid` u64, 96 `pk_seqnum` u64, 104 `pk_count` i64, 112
//! `pk_dtype` u64, 120 `pk_reserved` u64.

/// Size of the header on the wire.
pub const HEADER_LEN: usize = 128;

/// `pk_type` values (3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// Message data.
    Data = 0,
    /// Message data; the sender wants a synchronization ACK.
    DataSync = 1,
    /// Protocol ACK: `ackmark` packets consumed (3.6).
    ProtoAck = 2,
    /// Synchronization ACK: the first packet matched (3.7).
    SyncAck = 3,
    /// Cancel request (3.7.4).
    Cancel = 4,
    /// Cancel succeeded: the buffered message was destroyed.
    CancelYes = 5,
    /// Cancel failed: the message was already received.
    CancelNo = 6,
    /// End of the connection (3.8).
    Fini = 7,
}

impl Kind {
    pub fn from_u32(v: u32) -> Option<Kind> {
        Some(match v {
            0 => Kind::Data,
            1 => Kind::DataSync,
            2 => Kind::ProtoAck,
            3 => Kind::SyncAck,
            4 => Kind::Cancel,
            5 => Kind::CancelYes,
            6 => Kind::CancelNo,
            7 => Kind::Fini,
            _ => return None,
        })
    }

    /// Data packets carry `pk_len` bytes after the header; the rest none.
    pub fn carries_data(self) -> bool {
        matches!(self, Kind::Data | Kind::DataSync)
    }
}

/// `IMPI_Proc` (3.2): a host id (an IPv6 address, or IPv4-mapped) and a
/// process id unique on that host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Proc {
    pub hostid: [u8; 16],
    pub pid: i64,
}

/// One packet header, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    pub kind: Kind,
    pub len: u32,
    pub src: Proc,
    pub dest: Proc,
    pub srqid: u64,
    pub drqid: u64,
    pub msglen: u64,
    pub lsrank: i32,
    pub tag: i32,
    pub cid: u64,
    pub seqnum: u64,
    pub count: i64,
    pub dtype: u64,
    pub reserved: u64,
}

/// Why header bytes are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    #[error("IMPI packet header truncated: {0} of 128 bytes")]
    Truncated(usize),
    #[error("IMPI packet of unknown type {0} (0..=7 are defined)")]
    UnknownType(u32),
    #[error("IMPI {kind:?} packet announces {len} data bytes, but it carries none")]
    DataOnHeaderOnly { kind: Kind, len: u32 },
    #[error("IMPI data packet of {len} bytes is over the negotiated maxdatalen {max}")]
    TooLong { len: u32, max: u32 },
    #[error("IMPI data packet of {len} bytes is longer than its whole message ({msglen})")]
    LongerThanMessage { len: u32, msglen: u64 },
}

impl Packet {
    /// A header of `kind` between two procs, every other field zero.
    pub fn new(kind: Kind, src: Proc, dest: Proc) -> Packet {
        Packet {
            kind,
            len: 0,
            src,
            dest,
            srqid: 0,
            drqid: 0,
            msglen: 0,
            lsrank: 0,
            tag: 0,
            cid: 0,
            seqnum: 0,
            count: 0,
            dtype: 0,
            reserved: 0,
        }
    }

    /// `IMPI_PK_FINI`: only `pk_type` is used (table 3.1).
    pub fn fini() -> Packet {
        Packet::new(Kind::Fini, Proc::default(), Proc::default())
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        let mut put = |at: usize, bytes: &[u8]| b[at..at + bytes.len()].copy_from_slice(bytes);
        put(0, &(self.kind as u32).to_be_bytes());
        put(4, &self.len.to_be_bytes());
        put(8, &self.src.hostid);
        put(24, &self.src.pid.to_be_bytes());
        put(32, &self.dest.hostid);
        put(48, &self.dest.pid.to_be_bytes());
        put(56, &self.srqid.to_be_bytes());
        put(64, &self.drqid.to_be_bytes());
        put(72, &self.msglen.to_be_bytes());
        put(80, &self.lsrank.to_be_bytes());
        put(84, &self.tag.to_be_bytes());
        put(88, &self.cid.to_be_bytes());
        put(96, &self.seqnum.to_be_bytes());
        put(104, &self.count.to_be_bytes());
        put(112, &self.dtype.to_be_bytes());
        put(120, &self.reserved.to_be_bytes());
        b
    }

    /// Parse a header and check what a receiver can check alone: the type
    /// is defined, only data packets carry data, at most `maxdatalen`
    /// bytes, never more than the message.
    pub fn decode(bytes: &[u8], maxdatalen: u32) -> Result<Packet, PacketError> {
        let b: &[u8; HEADER_LEN] = bytes
            .get(..HEADER_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(PacketError::Truncated(bytes.len()))?;
        let u32_at = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let u64_at = |at: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[at..at + 8]);
            u64::from_be_bytes(a)
        };
        let proc_at = |at: usize| {
            let mut hostid = [0u8; 16];
            hostid.copy_from_slice(&b[at..at + 16]);
            Proc {
                hostid,
                pid: u64_at(at + 16) as i64,
            }
        };
        let raw = u32_at(0);
        let kind = Kind::from_u32(raw).ok_or(PacketError::UnknownType(raw))?;
        let p = Packet {
            kind,
            len: u32_at(4),
            src: proc_at(8),
            dest: proc_at(32),
            srqid: u64_at(56),
            drqid: u64_at(64),
            msglen: u64_at(72),
            lsrank: u32_at(80) as i32,
            tag: u32_at(84) as i32,
            cid: u64_at(88),
            seqnum: u64_at(96),
            count: u64_at(104) as i64,
            dtype: u64_at(112),
            reserved: u64_at(120),
        };
        if !kind.carries_data() && p.len != 0 {
            return Err(PacketError::DataOnHeaderOnly { kind, len: p.len });
        }
        if kind.carries_data() {
            if p.len > maxdatalen {
                return Err(PacketError::TooLong {
                    len: p.len,
                    max: maxdatalen,
                });
            }
            if p.len as u64 > p.msglen {
                return Err(PacketError::LongerThanMessage {
                    len: p.len,
                    msglen: p.msglen,
                });
            }
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Packet {
        Packet {
            kind: Kind::DataSync,
            len: 100,
            src: Proc {
                hostid: [1; 16],
                pid: 0x0102_0304_0506_0708,
            },
            dest: Proc {
                hostid: [2; 16],
                pid: -2,
            },
            srqid: 0x1111_2222_3333_4444,
            drqid: 5,
            msglen: 1000,
            lsrank: 3,
            tag: -7,
            cid: 0,
            seqnum: 9,
            count: 250,
            dtype: 0xdead_beef,
            reserved: 0,
        }
    }

    #[test]
    fn header_is_128_bytes_in_network_order_at_the_spec_offsets() {
        let b = sample().encode();
        assert_eq!(b.len(), 128);
        assert_eq!(&b[0..4], &[0, 0, 0, 1]);
        assert_eq!(&b[4..8], &[0, 0, 0, 100]);
        assert_eq!(&b[8..24], &[1; 16]);
        assert_eq!(&b[24..32], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[32..48], &[2; 16]);
        assert_eq!(&b[48..56], &(-2i64).to_be_bytes());
        assert_eq!(
            &b[56..64],
            &[0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x44]
        );
        assert_eq!(&b[64..72], &5u64.to_be_bytes());
        assert_eq!(&b[72..80], &1000u64.to_be_bytes());
        assert_eq!(&b[80..84], &[0, 0, 0, 3]);
        assert_eq!(&b[84..88], &[0xff, 0xff, 0xff, 0xf9]);
        assert_eq!(
            &b[88..96],
            &[0; 8],
            "MPI_COMM_WORLD's context id is 0 (3.3)"
        );
        assert_eq!(&b[96..104], &9u64.to_be_bytes());
        assert_eq!(&b[104..112], &250u64.to_be_bytes());
        assert_eq!(&b[112..120], &0xdead_beefu64.to_be_bytes());
        assert_eq!(&b[120..128], &[0; 8]);
        assert_eq!(Packet::decode(&b, 1000), Ok(sample()));
    }

    #[test]
    fn every_type_round_trips_and_fini_is_the_type_alone() {
        for v in 0..8 {
            let kind = Kind::from_u32(v).unwrap();
            let mut p = Packet::new(kind, sample().src, sample().dest);
            p.srqid = 77;
            assert_eq!(Packet::decode(&p.encode(), 1), Ok(p));
        }
        let f = Packet::fini().encode();
        assert_eq!(&f[..4], &[0, 0, 0, 7]);
        assert!(f[4..].iter().all(|&x| x == 0));
    }

    #[test]
    fn bad_headers_are_refused() {
        let b = sample().encode();
        assert_eq!(
            Packet::decode(&b[..127], 1000),
            Err(PacketError::Truncated(127))
        );
        let mut t = b;
        t[3] = 8;
        assert_eq!(Packet::decode(&t, 1000), Err(PacketError::UnknownType(8)));
        assert!(matches!(
            Packet::decode(&b, 99),
            Err(PacketError::TooLong { len: 100, max: 99 })
        ));
        let mut ack = b;
        ack[3] = Kind::ProtoAck as u8;
        assert!(matches!(
            Packet::decode(&ack, 1000),
            Err(PacketError::DataOnHeaderOnly { .. })
        ));
        let mut short = sample();
        short.msglen = 10;
        assert!(matches!(
            Packet::decode(&short.encode(), 1000),
            Err(PacketError::LongerThanMessage { .. })
        ));
        // Never a panic, whatever the bytes.
        let mut x: u32 = 0x1234_5678;
        for n in 0..2000usize {
            let bytes: Vec<u8> = (0..(n % 140))
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    (x % 9) as u8
                })
                .collect();
            let _ = Packet::decode(&bytes, 64);
        }
    }
}
