//! The bytes on a TCP connection: the handshake that names the connecting
//! process, then length-prefixed frames. Pure encoding and decoding, no I/O,
//! so both backends and the tests share one definition.
//!
//! ```text
//! HELLO   (connector → acceptor): magic[8] kind:u8 id:u64 job_len:u16 job[job_len] nonce[8] mac[8]
//! VERDICT (acceptor → connector): magic[8] verdict:u8
//! FRAME   (both ways, once accepted): header_len:u32 payload_len:u32 header payload
//! ```
//! All integers little-endian. `job` is always the connector's own job id
//! (its process group's PMI KVS name). The HELLO's `kind` says what `id` is:
//!
//! - [`KIND_RANK`]: "I am rank `id` of job `job`". The acceptor maps `job`
//!   to a group slot (its own job: 0; a job given to `add_group`: that
//!   group; anything else: [`Verdict::OtherJob`]) and knows the connector
//!   as `peer_id(group, id)`. A pair keeps one such connection; which one a
//!   simultaneous connect keeps is decided by the acceptor (see `state`),
//!   which answers [`Verdict::Duplicate`] to the loser.
//! - [`KIND_PORT`]: "I connect to port `id`" (`connect_port`, the first step
//!   of MPI_Comm_connect), from a process of any job. Always accepted,
//!   never a duplicate: each is a connection of its own, a temporary peer
//!   in `TEMP_GROUP` on both sides, named by each side's own counter.
//!
//! `mac` proves a rank HELLO: to a rank of the connector's own job, the
//! job secret's MAC over (kind, id, the target's rank, job, nonce, the
//! target's job) ([`hello_mac`], `crate::auth`); to a rank of another job,
//! the same under the connector's job's group key, which the acceptor got
//! in the group description of the connect step. Zero where there is
//! nothing to prove (no secret, a port: the port's random tag is what a
//! port HELLO proves, checked by the engine against its open ports).
//!
//! Frames follow the accepting VERDICT on both kinds alike.

/// Opens both handshake messages: a stray client or another protocol is
/// recognised by its first eight bytes.
pub(crate) const MAGIC: [u8; 8] = *b"RVTCP\x02\0\0";

/// Identity kind: a rank of a process group; the HELLO's id is the rank.
pub(crate) const KIND_RANK: u8 = 1;
/// Identity kind: a temporary connection to a port (dynamic processes);
/// the HELLO's id is the port's tag.
pub(crate) const KIND_PORT: u8 = 2;

/// HELLO up to the job id: magic, kind, id, job length.
pub(crate) const HELLO_FIXED: usize = 8 + 1 + 8 + 2;
use crate::auth::JobKey;
pub(crate) use crate::jobs::MAX_JOB;
/// HELLO after the job id: nonce and MAC.
pub(crate) const HELLO_AUTH: usize = 16;
pub(crate) const HELLO_MAX: usize = HELLO_FIXED + MAX_JOB + HELLO_AUTH;
pub(crate) const VERDICT_LEN: usize = 9;

/// Frame prefix: header length and payload length.
pub(crate) const PREFIX: usize = 8;
/// The engine's headers are a few dozen bytes; anything longer is garbage.
pub(crate) const MAX_HEADER: usize = 256;
/// Far above any piece size: a longer length is garbage, not a big message.
pub(crate) const MAX_PAYLOAD: usize = 1 << 30;

/// The acceptor's answer to a HELLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Accept = 0,
    /// Already connected, or the tie-break of a simultaneous connect went
    /// to the acceptor's own connection: wait for that one.
    Duplicate = 1,
    /// The connector belongs to a process group the acceptor does not
    /// know (neither its own job nor one added with `add_group`).
    OtherJob = 2,
    /// Identity not served: an unknown kind, a rank above 32 bits, or a
    /// connection from the acceptor itself (its own rank of its own job).
    Unsupported = 3,
}

pub(crate) fn encode_verdict(v: Verdict) -> [u8; VERDICT_LEN] {
    let mut b = [0u8; VERDICT_LEN];
    b[..8].copy_from_slice(&MAGIC);
    b[8] = v as u8;
    b
}

pub(crate) fn parse_verdict(b: &[u8]) -> Result<Verdict, &'static str> {
    if b.len() != VERDICT_LEN || b[..8] != MAGIC {
        return Err("handshake reply has a wrong magic");
    }
    Ok(match b[8] {
        0 => Verdict::Accept,
        1 => Verdict::Duplicate,
        2 => Verdict::OtherJob,
        3 => Verdict::Unsupported,
        _ => return Err("handshake reply has an unknown verdict"),
    })
}

/// Writes a HELLO of `kind` with `id` (rank or port tag) from job `job`
/// into `buf`, then `auth` (nonce and MAC); returns its length. `job` must
/// be at most [`MAX_JOB`] bytes (checked at construction).
pub(crate) fn encode_hello(
    buf: &mut [u8; HELLO_MAX],
    kind: u8,
    id: u64,
    job: &[u8],
    auth: &[u8; HELLO_AUTH],
) -> usize {
    let n = job.len().min(MAX_JOB);
    buf[..8].copy_from_slice(&MAGIC);
    buf[8] = kind;
    buf[9..17].copy_from_slice(&id.to_le_bytes());
    buf[17..19].copy_from_slice(&(n as u16).to_le_bytes());
    buf[HELLO_FIXED..HELLO_FIXED + n].copy_from_slice(&job[..n]);
    buf[HELLO_FIXED + n..HELLO_FIXED + n + HELLO_AUTH].copy_from_slice(auth);
    HELLO_FIXED + n + HELLO_AUTH
}

/// The MAC of a rank HELLO from rank `id` of `job` to rank `target` of
/// `target_job` (the same job, or another one that knows our group key).
pub(crate) fn hello_mac(
    key: &JobKey,
    kind: u8,
    id: u64,
    (target, target_job): (u64, &[u8]),
    job: &[u8],
    nonce: &[u8; 8],
) -> [u8; 8] {
    key.mac(&[
        &[kind],
        &id.to_le_bytes(),
        &target.to_le_bytes(),
        &(job.len() as u64).to_le_bytes(),
        job,
        nonce,
        target_job,
    ])
}

/// A fresh nonce and, with a key and a target (rank, job), the MAC.
pub(crate) fn hello_auth(
    key: Option<&JobKey>,
    kind: u8,
    id: u64,
    target: Option<(u64, &[u8])>,
    job: &[u8],
) -> [u8; HELLO_AUTH] {
    let nonce = crate::auth::nonce();
    let mac = match (key, target) {
        (Some(k), Some(t)) => hello_mac(k, kind, id, t, job, &nonce),
        _ => [0; 8],
    };
    let mut out = [0u8; HELLO_AUTH];
    out[..8].copy_from_slice(&nonce);
    out[8..].copy_from_slice(&mac);
    out
}

/// A HELLO as far as it has arrived.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Hello<'a> {
    /// More bytes needed.
    Partial,
    /// Not a Rivet connector: close without answering.
    Bad(&'static str),
    /// A job id longer than any we accept: cannot be ours.
    LongJob,
    Done {
        kind: u8,
        /// The rank ([`KIND_RANK`]) or port tag ([`KIND_PORT`]).
        id: u64,
        job: &'a [u8],
        nonce: [u8; 8],
        mac: [u8; 8],
    },
}

pub(crate) fn parse_hello(b: &[u8]) -> Hello<'_> {
    let m = b.len().min(8);
    if b[..m] != MAGIC[..m] {
        return Hello::Bad("wrong magic");
    }
    if b.len() < HELLO_FIXED {
        return Hello::Partial;
    }
    let kind = b[8];
    let id = u64::from_le_bytes(b[9..17].try_into().unwrap_or_default());
    let len = u16::from_le_bytes([b[17], b[18]]) as usize;
    if len > MAX_JOB {
        return Hello::LongJob;
    }
    let end = HELLO_FIXED + len;
    match b.len().cmp(&(end + HELLO_AUTH)) {
        std::cmp::Ordering::Less => Hello::Partial,
        std::cmp::Ordering::Greater => Hello::Bad("bytes after the handshake"),
        std::cmp::Ordering::Equal => Hello::Done {
            kind,
            id,
            job: &b[HELLO_FIXED..end],
            nonce: b[end..end + 8].try_into().unwrap_or_default(),
            mac: b[end + 8..].try_into().unwrap_or_default(),
        },
    }
}

pub(crate) fn encode_prefix(header_len: usize, payload_len: usize) -> [u8; PREFIX] {
    let mut p = [0u8; PREFIX];
    p[..4].copy_from_slice(&(header_len as u32).to_le_bytes());
    p[4..].copy_from_slice(&(payload_len as u32).to_le_bytes());
    p
}

/// `(header_len, payload_len)` of a frame prefix, checked against the limits.
pub(crate) fn parse_prefix(p: &[u8; PREFIX]) -> Result<(usize, usize), &'static str> {
    let h = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize;
    let n = u32::from_le_bytes([p[4], p[5], p[6], p[7]]) as usize;
    if h > MAX_HEADER {
        return Err("protocol error: frame header longer than 256 bytes");
    }
    if n > MAX_PAYLOAD {
        return Err("protocol error: frame payload longer than 1 GiB");
    }
    Ok((h, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trip_and_partials() {
        let mut buf = [0u8; HELLO_MAX];
        let auth: [u8; HELLO_AUTH] = std::array::from_fn(|i| i as u8 + 1);
        let n = encode_hello(&mut buf, KIND_PORT, u64::MAX - 1, b"kvs_9", &auth);
        assert_eq!(
            parse_hello(&buf[..n]),
            Hello::Done {
                kind: KIND_PORT,
                id: u64::MAX - 1,
                job: b"kvs_9",
                nonce: auth[..8].try_into().unwrap(),
                mac: auth[8..].try_into().unwrap(),
            }
        );
        let n = encode_hello(&mut buf, KIND_RANK, 7, b"kvs_42", &[0; HELLO_AUTH]);
        for cut in 0..n {
            assert_eq!(parse_hello(&buf[..cut]), Hello::Partial, "cut {cut}");
        }
        assert_eq!(
            parse_hello(&buf[..n]),
            Hello::Done {
                kind: KIND_RANK,
                id: 7,
                job: b"kvs_42",
                nonce: [0; 8],
                mac: [0; 8],
            }
        );
        assert!(matches!(parse_hello(&buf[..n + 1]), Hello::Bad(_)));
        assert!(matches!(parse_hello(b"GET / HT"), Hello::Bad(_)));
        assert!(matches!(parse_hello(b"GE"), Hello::Bad(_)));
        buf[17..19].copy_from_slice(&1000u16.to_le_bytes());
        assert_eq!(parse_hello(&buf[..HELLO_FIXED]), Hello::LongJob);
    }

    #[test]
    fn verdict_and_prefix() {
        for v in [
            Verdict::Accept,
            Verdict::Duplicate,
            Verdict::OtherJob,
            Verdict::Unsupported,
        ] {
            assert_eq!(parse_verdict(&encode_verdict(v)), Ok(v));
        }
        assert!(parse_verdict(b"RVTCP\x01\0\0\x09").is_err());
        assert_eq!(
            parse_prefix(&encode_prefix(256, 1 << 30)),
            Ok((256, 1 << 30))
        );
        assert!(parse_prefix(&encode_prefix(257, 0)).is_err());
        assert!(parse_prefix(&encode_prefix(0, (1 << 30) + 1)).is_err());
    }
}
