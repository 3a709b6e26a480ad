//! IMPI startup wire (seed 003, chapter 2): what a rendezvous server and its
//! clients say to each other before separately started jobs run as one
//! MPI_COMM_WORLD.
//!
//! Every message is a command header (`cmd`, `len`, both 4-byte integers in
//! network byte order) followed by `len` bytes of payload; the one exception
//! is the AUTH exchange, whose server reply and key travel bare (`auth`).
//! The server understands only AUTH, IMPI, COLL, DONE and FINI and relays
//! COLL payloads as opaque bytes; `labels` gives the payloads of the labels
//! of IMPI version 0.0 their meaning for clients.
//!
//! Decoding never panics and never allocates more than the payload limit a
//! caller passed: a header announcing more is refused before any byte of
//! its payload is read.

pub mod auth;
pub mod labels;
pub mod relay;
pub mod world;

use std::io::{self, Read, Write};

/// `IMPI_CMD_AUTH`: ASCII "AUTH"; authentication, always the first command.
pub const CMD_AUTH: u32 = 0x4155_5448;
/// `IMPI_CMD_IMPI`: ASCII "IMPI"; join the job (rank up, size down).
pub const CMD_IMPI: u32 = 0x494D_5049;
/// `IMPI_CMD_COLL`: ASCII "COLL"; one labelled payload, concatenated by the server.
pub const CMD_COLL: u32 = 0x434F_4C4C;
/// `IMPI_CMD_DONE`: ASCII "DONE"; no more labels (server: startup complete).
pub const CMD_DONE: u32 = 0x444F_4E45;
/// `IMPI_CMD_FINI`: ASCII "FINI"; every proc of the client exited successfully.
pub const CMD_FINI: u32 = 0x4649_4E49;

/// Size of a command header on the wire.
pub const HEADER_LEN: usize = 8;

/// The most clients a job can have: COLL's client mask is a 32-bit field.
pub const MAX_CLIENTS: u32 = 32;

/// Default bound on one command's payload (what a server broadcasts for a
/// per-proc label of a large job: 16 bytes per proc): 64 MiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 64 << 20;

/// What can be wrong with IMPI startup bytes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than the structure needs.
    #[error("IMPI {what} truncated: {got} of {need} bytes")]
    Truncated {
        what: &'static str,
        got: usize,
        need: usize,
    },
    /// A length field is negative or beyond what this side accepts.
    #[error("IMPI {what} announces {len} bytes, over the {max}-byte limit (a peer not speaking IMPI, or a corrupt stream)")]
    TooLong {
        what: &'static str,
        len: i64,
        max: usize,
    },
    /// A payload whose length is not a whole number of its elements.
    #[error("IMPI {what}: {len} bytes is not a whole number of {elem}-byte values")]
    Ragged {
        what: &'static str,
        len: usize,
        elem: usize,
    },
    /// A value the specification does not allow.
    #[error("IMPI {what}: {why}")]
    Invalid { what: &'static str, why: String },
}

/// A command header: which command and how many payload bytes follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub cmd: u32,
    pub len: u32,
}

impl Header {
    pub fn encode(self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[..4].copy_from_slice(&self.cmd.to_be_bytes());
        out[4..].copy_from_slice(&self.len.to_be_bytes());
        out
    }

    /// Parse a header; a `len` that is negative as the spec's `IMPI_Int4`
    /// or above `max_payload` is refused.
    pub fn decode(bytes: &[u8], max_payload: usize) -> Result<Header, WireError> {
        let cmd = be_u32(bytes, 0, "command header")?;
        let len = be_i32(bytes, 4, "command header")?;
        if len < 0 || len as usize > max_payload {
            return Err(WireError::TooLong {
                what: "command",
                len: len.into(),
                max: max_payload,
            });
        }
        Ok(Header {
            cmd,
            len: len as u32,
        })
    }
}

/// A whole command: header fields and payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub cmd: u32,
    pub payload: Vec<u8>,
}

impl Command {
    pub fn new(cmd: u32, payload: Vec<u8>) -> Command {
        Command { cmd, payload }
    }

    /// A command with an empty payload (DONE, FINI).
    pub fn empty(cmd: u32) -> Command {
        Command::new(cmd, Vec::new())
    }

    /// The IMPI command: the client's rank up, or the job's size down.
    pub fn impi(value: i32) -> Command {
        Command::new(CMD_IMPI, value.to_be_bytes().to_vec())
    }

    /// The header and payload as sent.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.payload.len());
        out.extend_from_slice(
            &Header {
                cmd: self.cmd,
                len: self.payload.len() as u32,
            }
            .encode(),
        );
        out.extend_from_slice(&self.payload);
        out
    }

    /// Parse one whole command from the front of `bytes`; returns it and
    /// how many bytes it took, or `None` while incomplete.
    pub fn decode(bytes: &[u8], max_payload: usize) -> Result<Option<(Command, usize)>, WireError> {
        if bytes.len() < HEADER_LEN {
            return Ok(None);
        }
        let header = Header::decode(bytes, max_payload)?;
        let end = HEADER_LEN + header.len as usize;
        if bytes.len() < end {
            return Ok(None);
        }
        Ok(Some((
            Command::new(header.cmd, bytes[HEADER_LEN..end].to_vec()),
            end,
        )))
    }

    /// The IMPI command's one integer (rank or size).
    pub fn impi_value(&self) -> Result<i32, WireError> {
        exact(&self.payload, 4, "IMPI payload")?;
        be_i32(&self.payload, 0, "IMPI payload")
    }
}

/// The name of a command code, for messages ("AUTH", or hex for others).
pub fn command_name(cmd: u32) -> String {
    match cmd {
        CMD_AUTH => "AUTH".into(),
        CMD_IMPI => "IMPI".into(),
        CMD_COLL => "COLL".into(),
        CMD_DONE => "DONE".into(),
        CMD_FINI => "FINI".into(),
        other => format!("0x{other:08x}"),
    }
}

/// Read one command from a blocking stream: the header, then exactly its
/// payload (never more than `max_payload` is allocated). `Ok(None)` is a
/// clean end of stream before a header began.
pub fn read_command(r: &mut impl Read, max_payload: usize) -> io::Result<Option<Command>> {
    let mut head = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "IMPI peer closed the connection inside a command header",
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let header = Header::decode(&head, max_payload).map_err(invalid_data)?;
    let mut payload = vec![0u8; header.len as usize];
    r.read_exact(&mut payload)?;
    Ok(Some(Command::new(header.cmd, payload)))
}

/// Write one command in a single write call.
pub fn write_command(w: &mut impl Write, cmd: &Command) -> io::Result<()> {
    w.write_all(&cmd.encode())
}

/// A wire error as an `io::Error` of kind `InvalidData`.
pub fn invalid_data(e: WireError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

pub(crate) fn be_u32(b: &[u8], at: usize, what: &'static str) -> Result<u32, WireError> {
    let s = b.get(at..at + 4).ok_or(WireError::Truncated {
        what,
        got: b.len(),
        need: at + 4,
    })?;
    Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

pub(crate) fn be_i32(b: &[u8], at: usize, what: &'static str) -> Result<i32, WireError> {
    be_u32(b, at, what).map(|v| v as i32)
}

pub(crate) fn be_u64(b: &[u8], at: usize, what: &'static str) -> Result<u64, WireError> {
    let s = b.get(at..at + 8).ok_or(WireError::Truncated {
        what,
        got: b.len(),
        need: at + 8,
    })?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Ok(u64::from_be_bytes(a))
}

/// `b` must be exactly `len` bytes.
pub(crate) fn exact(b: &[u8], len: usize, what: &'static str) -> Result<(), WireError> {
    if b.len() < len {
        return Err(WireError::Truncated {
            what,
            got: b.len(),
            need: len,
        });
    }
    if b.len() > len {
        return Err(WireError::Invalid {
            what,
            why: format!("{} bytes where {len} were expected", b.len()),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_codes_spell_their_names_in_ascii() {
        for (code, name) in [
            (CMD_AUTH, b"AUTH"),
            (CMD_IMPI, b"IMPI"),
            (CMD_COLL, b"COLL"),
            (CMD_DONE, b"DONE"),
            (CMD_FINI, b"FINI"),
        ] {
            assert_eq!(&code.to_be_bytes(), name);
            assert_eq!(command_name(code).as_bytes(), name);
        }
    }

    #[test]
    fn impi_command_of_the_seed_example() {
        // Client 2 of 3 sends {IMPI, 4} {rank = 2}; the server answers size 3.
        let up = Command::impi(2).encode();
        assert_eq!(up, b"IMPI\0\0\0\x04\0\0\0\x02");
        let down = Command::impi(3).encode();
        assert_eq!(down, b"IMPI\0\0\0\x04\0\0\0\x03");
        let (cmd, used) = Command::decode(&down, 64).unwrap().unwrap();
        assert_eq!(used, 12);
        assert_eq!(cmd.cmd, CMD_IMPI);
        assert_eq!(cmd.impi_value(), Ok(3));
        for rank in 0..3 {
            let (c, _) = Command::decode(&Command::impi(rank).encode(), 64)
                .unwrap()
                .unwrap();
            assert_eq!(c.impi_value(), Ok(rank));
        }
    }

    #[test]
    fn done_and_fini_have_no_payload() {
        assert_eq!(Command::empty(CMD_DONE).encode(), b"DONE\0\0\0\0");
        assert_eq!(Command::empty(CMD_FINI).encode(), b"FINI\0\0\0\0");
    }

    #[test]
    fn truncated_and_oversized_headers_are_clear_errors() {
        assert_eq!(Command::decode(b"IMPI\0\0", 64), Ok(None));
        assert_eq!(Command::decode(b"IMPI\0\0\0\x04\0\0", 64), Ok(None));
        assert!(matches!(
            Header::decode(b"IMP", 64),
            Err(WireError::Truncated { need: 4, .. })
        ));
        // A negative length, and one past the limit, are refused before reading.
        let neg = Header::decode(b"COLL\xff\xff\xff\xff", 64).unwrap_err();
        assert!(neg.to_string().contains("-1 bytes"), "{neg}");
        let big = Header::decode(b"COLL\x7f\xff\xff\xff", 64).unwrap_err();
        assert!(matches!(big, WireError::TooLong { max: 64, .. }));
        let mut r: &[u8] = b"COLL\x10\0\0\0";
        let e = read_command(&mut r, DEFAULT_MAX_PAYLOAD).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        // A stream cut inside a header or a payload is an error, not a hang.
        let mut r: &[u8] = b"IMPI\0";
        assert!(read_command(&mut r, 64).is_err());
        let mut r: &[u8] = b"IMPI\0\0\0\x04\0";
        assert!(read_command(&mut r, 64).is_err());
        let mut r: &[u8] = b"";
        assert!(read_command(&mut r, 64).unwrap().is_none());
        // IMPI's payload is exactly one integer.
        assert!(Command::new(CMD_IMPI, vec![0; 3]).impi_value().is_err());
        assert!(Command::new(CMD_IMPI, vec![0; 8]).impi_value().is_err());
    }

    #[test]
    fn decoders_never_panic_on_arbitrary_bytes() {
        // A small deterministic generator (xorshift) walks many byte strings.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for round in 0..4000 {
            let len = round % 40;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = Command::decode(&bytes, 32);
            let _ = auth::ClientAuth::decode(&bytes);
            let _ = auth::ServerAuth::decode(&bytes);
            let _ = labels::Coll::decode(&bytes);
            let _ = labels::Chdr::decode(&bytes);
            if let Ok(b) = labels::Broadcast::decode(&bytes) {
                let _ = b.split(3, &[1, 2, 3]);
                let _ = b.split(40, &[]);
                let _ = b.split(1, &[u32::MAX]);
            }
            for label in labels::LABELS_0_0 {
                let _ = labels::Value::decode(label, &bytes);
            }
            let _ = auth::parse_preference(&String::from_utf8_lossy(&bytes));
        }
    }
}
