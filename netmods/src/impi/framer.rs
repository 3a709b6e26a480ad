//! Bytes of a host link → packets (header and data), with bounded memory:
//! a header is checked (type, lengths against `maxdatalen`) before any of
//! its data is buffered, so at most one header plus `maxdatalen` bytes are
//! ever held.

use super::packet::{Packet, PacketError, HEADER_LEN};

/// Cuts a byte stream into packets.
#[derive(Debug)]
pub struct Framer {
    maxdatalen: u32,
    buf: Vec<u8>,
    header: Option<Packet>,
}

impl Framer {
    pub fn new(maxdatalen: u32) -> Framer {
        Framer {
            maxdatalen,
            buf: Vec::new(),
            header: None,
        }
    }

    /// Feed bytes; every packet they complete, in order. After an error the
    /// stream cannot be trusted: the caller closes the link.
    pub fn push(&mut self, mut bytes: &[u8]) -> Result<Vec<(Packet, Vec<u8>)>, PacketError> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            match self.header {
                None => {
                    let take = (HEADER_LEN - self.buf.len()).min(bytes.len());
                    self.buf.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if self.buf.len() == HEADER_LEN {
                        let p = Packet::decode(&self.buf, self.maxdatalen)?;
                        self.buf.clear();
                        if p.kind.carries_data() && p.len > 0 {
                            self.header = Some(p);
                        } else {
                            out.push((p, Vec::new()));
                        }
                    }
                }
                Some(p) => {
                    let take = (p.len as usize - self.buf.len()).min(bytes.len());
                    self.buf.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if self.buf.len() == p.len as usize {
                        out.push((p, std::mem::take(&mut self.buf)));
                        self.header = None;
                    }
                }
            }
        }
        Ok(out)
    }

    /// Bytes held for an incomplete packet.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::impi::packet::{Kind, Proc};

    fn data(len: u32) -> Packet {
        let mut p = Packet::new(Kind::Data, Proc::default(), Proc::default());
        p.len = len;
        p.msglen = len as u64;
        p
    }

    #[test]
    fn packets_come_out_whole_whatever_the_cuts() {
        let mut stream = Vec::new();
        let a = data(5);
        stream.extend_from_slice(&a.encode());
        stream.extend_from_slice(b"hello");
        stream.extend_from_slice(&Packet::fini().encode());
        stream.extend_from_slice(&data(0).encode());
        for cut in [1, 7, 128, 133, 1000] {
            let mut f = Framer::new(16);
            let mut got = Vec::new();
            for chunk in stream.chunks(cut) {
                got.extend(f.push(chunk).unwrap());
            }
            assert_eq!(got.len(), 3, "cut {cut}");
            assert_eq!(got[0], (a, b"hello".to_vec()));
            assert_eq!(got[1].0.kind, Kind::Fini);
            assert_eq!(got[2].0.len, 0);
            assert_eq!(f.pending(), 0);
        }
    }

    #[test]
    fn an_oversized_packet_is_refused_before_its_data_is_held() {
        let mut f = Framer::new(16);
        let e = f.push(&data(17).encode()).unwrap_err();
        assert!(matches!(e, PacketError::TooLong { len: 17, max: 16 }));
        let mut f = Framer::new(16);
        let mut bad = data(0).encode();
        bad[3] = 99;
        assert!(f.push(&bad).is_err());
    }
}
