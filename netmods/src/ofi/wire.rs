//! What the ofi netmod puts on the fabric: tagged messages on one
//! reliable-datagram (`FI_EP_RDM`) endpoint per process. Pure encoding and
//! decoding, no libfabric calls.
//!
//! RDM is connectionless, and not every provider reports who sent a message
//! (`FI_SOURCE`), so the tag says it. Each side of a pair gives the other a
//! 32-bit *connection id* (not reused while a peer may still use it, and
//! unguessable: a keyed permutation of a counter, `State::add_conn`); whoever
//! sends puts the id the *receiver* gave it in the tag. Ids are handed out
//! by a handshake, the first thing a process sends to a peer:
//!
//! ```text
//! tag = kind:4 | aux:28 | id:32          (bit 63 set: kind PAYLOAD)
//!
//! HELLO   id 0          magic[8] ident:u8 who:u64 conn:u32 inline:u32
//!                       job_len:u16 job name_len:u16 name nonce[8] mac[8]
//! VERDICT id = conn     magic[8] verdict:u8 conn:u32 inline:u32 mac[8]
//! MSG     aux = seq     token[8] hlen:u16 header payload
//! LARGE   aux = seq     token[8] hlen:u16 header len:u64
//! PAYLOAD aux = seq     the payload of LARGE `seq` (len bytes)
//! BYE     aux = seq     token[8]: the sender disconnected
//! CTS     aux = seq     token[8]: the receive for PAYLOAD `seq` is posted
//! CREDIT  aux = n       token[8]: the receiver handled `n` more messages
//! PING    aux = 0       token[8] (kind 0) keepalive: "are you there?"
//! PONG    aux = 1       token[8] (kind 0) the answer to a PING
//! ```
//!
//! All integers little-endian. A HELLO names the sender (`ident` rank: "I
//! am rank `who` of job `job`"; `ident` port: "I connect to port `who`"),
//! carries its endpoint name (`fi_getname`) so the receiver can answer, the
//! id `conn` the receiver is to tag its messages with, and the largest
//! inline payload the sender's receive buffers take. A rank HELLO to a
//! rank of the sender's own job proves membership: `mac` is the job
//! secret's MAC ([`hello_mac`], `crate::auth`) over all of the HELLO's
//! fields and the target's rank and job, with a fresh `nonce`, so a
//! stranger can neither pose as a rank nor turn a HELLO it saw into one
//! naming its own endpoint or another target. A rank HELLO to another job
//! carries the same MAC made with the sender's group key, which that job
//! got in the group description (`Netmod::set_group_key`). Zero where
//! there is nothing to prove (port HELLOs, no secret). The VERDICT answers
//! with the acceptor's id and inline limit, or a refusal (another job,
//! unsupported identity). An accepting VERDICT carries the MAC
//! ([`verdict_mac`]) made with the key that proved the HELLO, over the
//! verdict, both ids and the HELLO's nonce, so nobody else can complete
//! (or redirect) a handshake; a refusal from a job that does not know
//! ours cannot be proven, so an unproven one is taken while the handshake
//! is under way, and nothing unproven once it is done.
//!
//! After the handshake every message but PAYLOAD opens with the
//! connection's *token* ([`msg_token`]): the sender's proving key's MAC of
//! the receiver's job, rank and connection id, checked by the receiver
//! before anything else (an 8-byte compare: no per-message MAC on the hot
//! path). RDM takes messages from anyone who knows the tag, and not every
//! provider reports the source (`tcp;ofi_rxm` has no `FI_SOURCE`), so
//! without the token a stranger who guessed a 32-bit id could inject data,
//! credits, CTSs or a BYE. A PAYLOAD is taken only by the receive posted
//! for it after its token-checked LARGE, on an exact tag. A port
//! connection's key comes from the port's random tag (its tokens name no
//! job or rank); jobs without a secret have no key: their tokens are zero
//! and not checked.
//! Messages wait at the sender until the verdict
//! has come; one whose payload exceeds the peer's inline limit goes as a
//! LARGE header, on which the receiver asks the engine where the payload
//! goes (`Sink::place`), posts a receive for exactly that PAYLOAD tag and
//! answers CTS; only then does the payload go. So no payload ever waits
//! unexpected in the provider: `shm` (1.17) stops taking any messages from
//! a peer once its unexpected-message resources are full, which deadlocks
//! a receiver that takes payloads in order.
//!
//! Providers match a pair's messages in send order (`FI_ORDER_SAS`) but
//! may complete them out of order (`tcp;ofi_rxm` finishes a rendezvous
//! after the small messages behind it), so MSG, LARGE and BYE carry a
//! per-connection sequence number (28 bits, wrapping) and the receiver
//! handles them in that order, holding early ones, and those behind a
//! LARGE until its payload is in.
//!
//! Flow control: a sender has at most [`CREDITS`] MSG, LARGE or BYE
//! messages to a receiver not yet handled there; the receiver returns
//! credits (CREDIT) as it handles them. Its receive pool (`pool.rs`)
//! keeps [`CONN_RECVS`] buffers posted per busy peer (per connection on
//! `shm`, whose 1.17 unexpected-message store is small and loses messages
//! beyond it), so a sender outruns the posted buffers into the provider's
//! store by at most its window, and only where that store buffers.
//!
//! Keepalive: a ready connection nothing was sent to for a while gets a
//! PING, so that a dead peer shows up as a send that fails or makes no
//! progress (the module docs of `ofi` have the rule). PING and PONG are
//! outside the sequence and the credits: the receiver answers a PING of a
//! live connection with a PONG and hands neither to the engine. A sender
//! has at most [`PINGS`] PINGs unanswered, so however long a live peer
//! does not poll, what it has to take from us is bounded: the receive
//! buffers per connection include the peer's PINGs and PONGs.
//!
//! Receives for everything but PAYLOAD are posted with bit 63 clear and the
//! other 63 bits ignored.

use crate::auth::JobKey;

/// Opens HELLO and VERDICT: a stray sender is recognised.
pub(crate) const MAGIC: [u8; 8] = *b"RVOFI\x02\0\0";

/// PING (`aux` [`PING`]) or PONG (`aux` [`PONG`]).
pub(crate) const KIND_KEEPALIVE: u8 = 0;
pub(crate) const KIND_HELLO: u8 = 1;
pub(crate) const KIND_VERDICT: u8 = 2;
pub(crate) const KIND_MSG: u8 = 3;
pub(crate) const KIND_LARGE: u8 = 4;
pub(crate) const KIND_BYE: u8 = 5;
pub(crate) const KIND_CTS: u8 = 6;
pub(crate) const KIND_CREDIT: u8 = 7;

/// Messages in sequence a sender may have outstanding at a receiver. 32:
/// with 8, a ping-pong sent a CREDIT every fourth message and a stream
/// stalled every eighth (8 B over shm: 1.1 us and 1.6 M msg/s at 8, 0.96
/// us and 2.4 M msg/s at 32). The price is `CONN_RECVS` receive buffers of
/// `eager_max` plus a header posted per busy peer (`pool.rs`).
pub(crate) const CREDITS: u32 = 32;
/// PINGs a sender may have unanswered. Two, not one: a PING the provider
/// took just before it noticed the peer's death is lost without a word,
/// and the next one must still go.
pub(crate) const PINGS: u32 = 2;
/// `aux` of a keepalive message.
pub(crate) const PING: u32 = 0;
pub(crate) const PONG: u32 = 1;
/// Receive buffers a receiver posts per connection: the credits, one CTS,
/// two CREDITs, the VERDICT, the peer's PINGs and its PONGs to ours.
pub(crate) const CONN_RECVS: usize = CREDITS as usize + 4 + 2 * PINGS as usize;
/// The only kind with bit 63 set: never matches the generic receives.
pub(crate) const KIND_PAYLOAD: u8 = 8;

/// Tag and ignore mask of the generic receives: any kind but PAYLOAD.
pub(crate) const ANY_TAG: u64 = 0;
pub(crate) const ANY_IGNORE: u64 = !(1 << 63);

pub(crate) const AUX_MASK: u32 = (1 << 28) - 1;

/// Identity kinds of a HELLO (as in the tcp netmod).
pub(crate) const IDENT_RANK: u8 = 1;
pub(crate) const IDENT_PORT: u8 = 2;

/// The engine's headers are a few dozen bytes; anything longer is garbage.
pub(crate) const MAX_HEADER: usize = 256;
/// Far above any piece size: a longer payload is garbage, not a big message.
pub(crate) const MAX_PAYLOAD: usize = 1 << 30;
pub(crate) use crate::jobs::MAX_JOB;
/// Longest endpoint name: the largest provider addresses are far shorter.
pub(crate) const MAX_NAME: usize = 256;

const HELLO_FIXED: usize = 8 + 1 + 8 + 4 + 4;
/// The largest HELLO: fixed part, both lengths, the longest job and name.
pub(crate) const HELLO_MAX: usize = HELLO_FIXED + 2 + MAX_JOB + 2 + MAX_NAME + HELLO_AUTH;
/// HELLO after the name: nonce and MAC.
pub(crate) const HELLO_AUTH: usize = 16;
pub(crate) const VERDICT_LEN: usize = 8 + 1 + 4 + 4 + 8;
/// The token that opens every message after the handshake but PAYLOAD.
pub(crate) const TOKEN: usize = 8;
/// What precedes the header in MSG and LARGE: the token, the length.
pub(crate) const PREFIX: usize = TOKEN + 2;
/// What follows the header in a LARGE message: the payload length.
pub(crate) const LARGE_SUFFIX: usize = 8;

pub(crate) fn tag(kind: u8, aux: u32, id: u32) -> u64 {
    (kind as u64) << 60 | ((aux & AUX_MASK) as u64) << 32 | id as u64
}

/// `(kind, aux, id)` of a tag.
pub(crate) fn split_tag(t: u64) -> (u8, u32, u32) {
    ((t >> 60) as u8, (t >> 32) as u32 & AUX_MASK, t as u32)
}

/// The PAYLOAD tag of LARGE `seq` on connection `id`.
pub(crate) fn payload_tag(seq: u32, id: u32) -> u64 {
    tag(KIND_PAYLOAD, seq, id)
}

/// Sequence numbers wrap at the 28 bits of `aux`.
pub(crate) fn next_seq(seq: u32) -> u32 {
    seq.wrapping_add(1) & AUX_MASK
}

/// The acceptor's answer to a HELLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Accept = 0,
    /// The sender's job is neither the acceptor's nor one it added.
    OtherJob = 1,
    /// An identity not served: unknown kind, a rank above 32 bits, the
    /// acceptor itself, or a peer the acceptor already holds as failed.
    Unsupported = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hello<'a> {
    pub ident: u8,
    /// The rank (`IDENT_RANK`) or the port tag (`IDENT_PORT`).
    pub who: u64,
    /// The id the receiver is to tag its messages to the sender with.
    pub conn: u32,
    pub inline: u32,
    pub job: &'a [u8],
    pub name: &'a [u8],
    pub nonce: [u8; 8],
    /// [`hello_mac`] of the rest, or zero.
    pub mac: [u8; 8],
}

/// The MAC proving a rank HELLO `h` to rank `target` of job `target_job`:
/// made with the job secret within a job, with the sender's group key
/// (`JobKey::group_key`) to another job. Lengths go in with the variable
/// fields, so no two HELLOs share input.
pub(crate) fn hello_mac(key: &JobKey, h: &Hello<'_>, target: u32, target_job: &[u8]) -> [u8; 8] {
    key.mac(&[
        &[h.ident],
        &h.who.to_le_bytes(),
        &target.to_le_bytes(),
        &(target_job.len() as u16).to_le_bytes(),
        target_job,
        &h.conn.to_le_bytes(),
        &h.inline.to_le_bytes(),
        &(h.job.len() as u16).to_le_bytes(),
        h.job,
        &(h.name.len() as u16).to_le_bytes(),
        h.name,
        &h.nonce,
    ])
}

/// Writes a HELLO into `out` (cleared first). `job` and `name` are at
/// most [`MAX_JOB`] and [`MAX_NAME`] bytes (checked at construction).
pub(crate) fn encode_hello(out: &mut Vec<u8>, h: &Hello<'_>) {
    out.clear();
    out.extend_from_slice(&MAGIC);
    out.push(h.ident);
    out.extend_from_slice(&h.who.to_le_bytes());
    out.extend_from_slice(&h.conn.to_le_bytes());
    out.extend_from_slice(&h.inline.to_le_bytes());
    for part in [h.job, h.name] {
        out.extend_from_slice(&(part.len() as u16).to_le_bytes());
        out.extend_from_slice(part);
    }
    out.extend_from_slice(&h.nonce);
    out.extend_from_slice(&h.mac);
}

fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

/// A length-prefixed field at `b[at..]`, at most `max` bytes: the field and
/// where the next one starts.
fn field(b: &[u8], at: usize, max: usize) -> Result<(&[u8], usize), &'static str> {
    let len = b.get(at..at + 2).ok_or("truncated HELLO")?;
    let n = u16::from_le_bytes([len[0], len[1]]) as usize;
    if n > max {
        return Err("HELLO field too long");
    }
    let start = at + 2;
    let v = b.get(start..start + n).ok_or("truncated HELLO")?;
    Ok((v, start + n))
}

pub(crate) fn parse_hello(b: &[u8]) -> Result<Hello<'_>, &'static str> {
    if b.len() < HELLO_FIXED || b[..8] != MAGIC {
        return Err("not a HELLO (wrong magic or too short)");
    }
    let (job, at) = field(b, HELLO_FIXED, MAX_JOB)?;
    let (name, end) = field(b, at, MAX_NAME)?;
    let auth = b.get(end..).ok_or("truncated HELLO")?;
    if auth.len() < HELLO_AUTH {
        return Err("truncated HELLO");
    }
    if auth.len() > HELLO_AUTH {
        return Err("bytes after the HELLO");
    }
    Ok(Hello {
        ident: b[8],
        who: le_u64(&b[9..17]),
        conn: le_u32(&b[17..21]),
        inline: le_u32(&b[21..25]),
        job,
        name,
        nonce: auth[..8].try_into().unwrap_or_default(),
        mac: auth[8..].try_into().unwrap_or_default(),
    })
}

/// The MAC of a VERDICT `v` (acceptor's id `conn`, its inline limit)
/// answering the HELLO with `nonce` that named the initiator's id
/// `hello_conn`: made with the key that proved that HELLO.
pub(crate) fn verdict_mac(
    key: &JobKey,
    v: Verdict,
    conn: u32,
    inline: u32,
    nonce: &[u8; 8],
    hello_conn: u32,
) -> [u8; 8] {
    key.mac(&[
        b"rivet ofi verdict",
        &[v as u8],
        &conn.to_le_bytes(),
        &inline.to_le_bytes(),
        nonce,
        &hello_conn.to_le_bytes(),
    ])
}

/// The token of messages to connection `conn` of rank `rank` of job `job`
/// (the receiver's names), made with the sender's proving key: the job
/// secret within a job, the sender's group key to another.
pub(crate) fn msg_token(key: &JobKey, job: &[u8], rank: u32, conn: u32) -> [u8; TOKEN] {
    key.mac(&[
        b"rivet ofi token",
        &(job.len() as u16).to_le_bytes(),
        job,
        &rank.to_le_bytes(),
        &conn.to_le_bytes(),
    ])
}

pub(crate) fn encode_verdict(
    v: Verdict,
    conn: u32,
    inline: u32,
    mac: [u8; 8],
) -> [u8; VERDICT_LEN] {
    let mut b = [0u8; VERDICT_LEN];
    b[..8].copy_from_slice(&MAGIC);
    b[8] = v as u8;
    b[9..13].copy_from_slice(&conn.to_le_bytes());
    b[13..17].copy_from_slice(&inline.to_le_bytes());
    b[17..].copy_from_slice(&mac);
    b
}

/// A parsed VERDICT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VerdictMsg {
    pub verdict: Verdict,
    /// The acceptor's id and inline limit.
    pub conn: u32,
    pub inline: u32,
    /// [`verdict_mac`], or zero.
    pub mac: [u8; 8],
}

pub(crate) fn parse_verdict(b: &[u8]) -> Result<VerdictMsg, &'static str> {
    if b.len() != VERDICT_LEN || b[..8] != MAGIC {
        return Err("malformed VERDICT");
    }
    let v = match b[8] {
        0 => Verdict::Accept,
        1 => Verdict::OtherJob,
        2 => Verdict::Unsupported,
        _ => return Err("VERDICT with an unknown verdict"),
    };
    Ok(VerdictMsg {
        verdict: v,
        conn: le_u32(&b[9..13]),
        inline: le_u32(&b[13..17]),
        mac: b[17..].try_into().unwrap_or_default(),
    })
}

/// The prefix of a MSG or LARGE body with a `hlen`-byte header: the token
/// (zero here: filled in when the message is posted, [`set_token`]) and
/// the header's length.
pub(crate) fn prefix(hlen: usize) -> [u8; PREFIX] {
    let mut p = [0u8; PREFIX];
    p[TOKEN..].copy_from_slice(&(hlen as u16).to_le_bytes());
    p
}

/// Writes the connection's token into the start of a message body.
pub(crate) fn set_token(body: &mut [u8], token: &[u8; TOKEN]) {
    if let Some(t) = body.get_mut(..TOKEN) {
        t.copy_from_slice(token);
    }
}

/// The bytes after the header of a LARGE message.
pub(crate) fn encode_large_suffix(len: usize) -> [u8; LARGE_SUFFIX] {
    (len as u64).to_le_bytes()
}

/// Splits a MSG or LARGE body into `(header, rest)`, checking the limits.
pub(crate) fn split_body(body: &[u8]) -> Result<(&[u8], &[u8]), &'static str> {
    let p = body
        .get(TOKEN..PREFIX)
        .ok_or("message shorter than its prefix")?;
    let h = u16::from_le_bytes([p[0], p[1]]) as usize;
    if h > MAX_HEADER {
        return Err("header longer than 256 bytes");
    }
    let rest = &body[PREFIX..];
    if h > rest.len() {
        return Err("message shorter than its header");
    }
    Ok(rest.split_at(h))
}

/// The payload length from a LARGE suffix.
pub(crate) fn parse_large_suffix(rest: &[u8]) -> Result<usize, &'static str> {
    if rest.len() != LARGE_SUFFIX {
        return Err("malformed LARGE header");
    }
    let len = le_u64(rest);
    if len > MAX_PAYLOAD as u64 {
        return Err("LARGE payload longer than 1 GiB");
    }
    Ok(len as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags() {
        let t = tag(KIND_MSG, 200, 0xdead_beef);
        assert_eq!(split_tag(t), (KIND_MSG, 200, 0xdead_beef));
        assert_eq!(t & !ANY_IGNORE, ANY_TAG, "generic receives take MSG");
        let p = payload_tag(AUX_MASK, 7);
        assert_eq!(split_tag(p), (KIND_PAYLOAD, AUX_MASK, 7));
        assert_ne!(p & !ANY_IGNORE, ANY_TAG, "but never PAYLOAD");
        assert_eq!(next_seq(AUX_MASK), 0);
        assert_eq!(split_tag(tag(KIND_BYE, u32::MAX, 1)).1, AUX_MASK);
        let k = tag(KIND_KEEPALIVE, PONG, 9);
        assert_eq!(split_tag(k), (KIND_KEEPALIVE, PONG, 9));
        assert_eq!(k & !ANY_IGNORE, ANY_TAG, "generic receives take keepalives");
    }

    #[test]
    fn hello_round_trip_and_garbage() {
        let h = Hello {
            ident: IDENT_PORT,
            who: u64::MAX - 3,
            conn: 42,
            inline: 65536,
            job: b"kvs_1",
            name: b"fi_shm://1:0:0\0",
            nonce: *b"12345678",
            mac: *b"abcdefgh",
        };
        let mut b = Vec::new();
        encode_hello(&mut b, &h);
        assert_eq!(parse_hello(&b), Ok(h));
        for cut in 0..b.len() {
            assert!(parse_hello(&b[..cut]).is_err(), "cut {cut}");
        }
        let mut long = b.clone();
        long.push(0);
        assert!(parse_hello(&long).is_err());
        let mut bad = b.clone();
        bad[HELLO_FIXED] = 0xff; // job length 0x..ff > 256
        bad[HELLO_FIXED + 1] = 0xff;
        assert!(parse_hello(&bad).is_err());
        assert!(parse_hello(b"GET / HTTP/1.0\r\n\r\n..........").is_err());
    }

    #[test]
    fn hello_macs_cover_every_field_and_the_target() {
        let key = JobKey::new([7; 16]);
        let h = Hello {
            ident: IDENT_RANK,
            who: 3,
            conn: 42,
            inline: 65536,
            job: b"kvs_1",
            name: b"fi_sockets://1.2.3.4:5\0",
            nonce: *b"12345678",
            mac: [0; 8],
        };
        let m = hello_mac(&key, &h, 0, b"kvs_1");
        assert_eq!(m, hello_mac(&key, &h, 0, b"kvs_1"));
        assert_ne!(m, hello_mac(&key, &h, 1, b"kvs_1"), "another target");
        assert_ne!(m, hello_mac(&key, &h, 0, b"kvs_2"), "another target job");
        assert_ne!(
            m,
            hello_mac(&JobKey::new([8; 16]), &h, 0, b"kvs_1"),
            "another key"
        );
        let variants = [
            Hello { who: 4, ..h },
            Hello { conn: 43, ..h },
            Hello { inline: 1, ..h },
            Hello { job: b"kvs_2", ..h },
            Hello {
                name: b"fi_sockets://6.6.6.6:5\0",
                ..h
            },
            Hello {
                nonce: *b"12345679",
                ..h
            },
            Hello {
                ident: IDENT_PORT,
                ..h
            },
            // The same bytes split differently between job and name.
            Hello {
                job: b"kvs_1f",
                name: b"i_sockets://1.2.3.4:5\0",
                ..h
            },
        ];
        for v in &variants {
            assert_ne!(m, hello_mac(&key, v, 0, b"kvs_1"), "{v:?}");
        }
    }

    #[test]
    fn verdict_and_large() {
        for v in [Verdict::Accept, Verdict::OtherJob, Verdict::Unsupported] {
            let want = VerdictMsg {
                verdict: v,
                conn: 9,
                inline: 10,
                mac: *b"abcdefgh",
            };
            assert_eq!(parse_verdict(&encode_verdict(v, 9, 10, want.mac)), Ok(want));
        }
        let mut b = encode_verdict(Verdict::Accept, 1, 2, [0; 8]);
        b[8] = 7;
        assert!(parse_verdict(&b).is_err());
        assert!(parse_verdict(&b[..5]).is_err());
        let s = encode_large_suffix(1 << 20);
        assert_eq!(parse_large_suffix(&s), Ok(1 << 20));
        assert!(parse_large_suffix(&s[..7]).is_err());
        let huge = encode_large_suffix(MAX_PAYLOAD + 1);
        assert!(parse_large_suffix(&huge).is_err());
        let mut b = prefix(2).to_vec();
        b.extend_from_slice(b"hhpp");
        set_token(&mut b, b"TOKENTOK");
        assert_eq!(&b[..TOKEN], b"TOKENTOK");
        assert_eq!(split_body(&b), Ok((&b"hh"[..], &b"pp"[..])));
        assert!(split_body(&b[..PREFIX + 1]).is_err());
        assert!(split_body(b"\x02").is_err());
        let mut long = prefix(257).to_vec();
        long.extend_from_slice(&[0; 300]);
        assert!(split_body(&long).is_err());
    }

    #[test]
    fn verdict_macs_and_tokens_bind_what_they_name() {
        let key = JobKey::new([3; 16]);
        let m = verdict_mac(&key, Verdict::Accept, 5, 100, b"noncenon", 7);
        for other in [
            verdict_mac(&key, Verdict::Unsupported, 5, 100, b"noncenon", 7),
            verdict_mac(&key, Verdict::Accept, 6, 100, b"noncenon", 7),
            verdict_mac(&key, Verdict::Accept, 5, 101, b"noncenon", 7),
            verdict_mac(&key, Verdict::Accept, 5, 100, b"noncenoo", 7),
            verdict_mac(&key, Verdict::Accept, 5, 100, b"noncenon", 8),
            verdict_mac(
                &JobKey::new([4; 16]),
                Verdict::Accept,
                5,
                100,
                b"noncenon",
                7,
            ),
        ] {
            assert_ne!(m, other);
        }
        let t = msg_token(&key, b"kvs_1", 0, 9);
        for other in [
            msg_token(&key, b"kvs_2", 0, 9),
            msg_token(&key, b"kvs_1", 1, 9),
            msg_token(&key, b"kvs_1", 0, 10),
            msg_token(&key.group_key(), b"kvs_1", 0, 9),
        ] {
            assert_ne!(t, other);
        }
    }
}
