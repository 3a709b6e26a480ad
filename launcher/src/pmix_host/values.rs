//! Published PMIx values as the name table's strings, and back.
//!
//! The table rivetrun serves names from (the job's PMI-1 one, or a name
//! server) holds strings, the ports of `MPI_Publish_name`. PMIx publishes
//! typed values with a persistence: Open MPI 4.1 agrees on a communicator
//! id after `MPI_Comm_spawn` or connect/accept by publishing a byte object
//! on each side with `PMIX_PERSIST_FIRST_READ` and looking the other's up.
//! A plain string published to stay is stored as itself, so PMI-1 ranks
//! and other jobs read it unchanged; anything else is stored tagged:
//! `rivet-pmix:<o|k>:<s|b>:<hex>` (`o`: removed on its first read, `k`:
//! kept; `s`: a string, `b`: a byte object; the data in hex, so no byte of
//! it needs escaping on the PMI-1 wire).

/// The tag that marks an encoded value.
const TAG: &str = "rivet-pmix:";

/// A published value's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data {
    /// `PMIX_STRING`.
    Str(String),
    /// `PMIX_BYTE_OBJECT`.
    Bytes(Vec<u8>),
}

/// A value as published: its data and whether the first lookup that finds
/// it removes it (`PMIX_PERSIST_FIRST_READ`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub data: Data,
    pub once: bool,
}

impl Stored {
    /// The table's string for this value.
    pub fn encode(&self) -> String {
        let (kind, bytes) = match &self.data {
            Data::Str(s) if !self.once && !s.starts_with(TAG) => return s.clone(),
            Data::Str(s) => ('s', s.as_bytes()),
            Data::Bytes(b) => ('b', b.as_slice()),
        };
        let mut out = String::with_capacity(TAG.len() + 4 + 2 * bytes.len());
        out.push_str(TAG);
        out.push(if self.once { 'o' } else { 'k' });
        out.push(':');
        out.push(kind);
        out.push(':');
        for b in bytes {
            out.push_str(&format!("{b:02x}"));
        }
        out
    }

    /// The value a table string stands for: a tagged one decoded, anything
    /// else (a port published over PMI-1, a malformed tag) as the string
    /// itself.
    pub fn decode(s: &str) -> Stored {
        Self::decode_tagged(s).unwrap_or_else(|| Stored {
            data: Data::Str(s.to_string()),
            once: false,
        })
    }

    fn decode_tagged(s: &str) -> Option<Stored> {
        let rest = s.strip_prefix(TAG)?;
        let (once, rest) = match rest.split_once(':')? {
            ("o", r) => (true, r),
            ("k", r) => (false, r),
            _ => return None,
        };
        let (kind, hex) = rest.split_once(':')?;
        if hex.len() % 2 != 0 {
            return None;
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        let data = match kind {
            "s" => Data::Str(String::from_utf8(bytes).ok()?),
            "b" => Data::Bytes(bytes),
            _ => return None,
        };
        Some(Stored { data, once })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_string_is_stored_as_itself_and_the_rest_round_trips() {
        let port = Stored {
            data: Data::Str("tag#42$description#x".into()),
            once: false,
        };
        assert_eq!(port.encode(), "tag#42$description#x");
        for v in [
            port,
            Stored {
                data: Data::Str("a port: with spaces=and signs".into()),
                once: true,
            },
            Stored {
                data: Data::Bytes(vec![0, 1, 0xfe, 0xff, b'=']),
                once: true,
            },
            Stored {
                data: Data::Bytes(Vec::new()),
                once: false,
            },
            // A string that looks like our tag is tagged itself.
            Stored {
                data: Data::Str("rivet-pmix:o:b:00".into()),
                once: false,
            },
        ] {
            let s = v.encode();
            assert!(s.bytes().all(|b| b.is_ascii_graphic()), "{s}");
            assert_eq!(Stored::decode(&s), v, "{s}");
        }
    }

    #[test]
    fn malformed_tags_read_as_plain_strings() {
        for s in [
            "rivet-pmix:",
            "rivet-pmix:x:b:00",
            "rivet-pmix:o:q:00",
            "rivet-pmix:o:b:0",
            "rivet-pmix:o:b:zz",
            "rivet-pmix:o:s:ff",
        ] {
            assert_eq!(
                Stored::decode(s),
                Stored {
                    data: Data::Str(s.into()),
                    once: false
                }
            );
        }
    }
}
