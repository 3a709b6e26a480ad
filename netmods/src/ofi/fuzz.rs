//! The fuzz target over sequences of what peers send the ofi netmod:
//! HELLOs (raw bytes, or well-formed with a right or wrong job-secret MAC),
//! VERDICTs (raw, or well-formed with a right or spoiled MAC) to
//! connections we opened, messages in sequence and control messages on any
//! connection with any sequence number, opening with the connection's
//! token or a forged one, payloads finishing, disconnects, failures and
//! keepalive rounds,
//! driven through the connection table and the receive order (`state`,
//! `order`) exactly as `recv` and `send` drive them, with no libfabric. Reached
//! through `crate::fuzzing::ofi_sequences`.
//!
//! Asserted after every step, whatever the bytes: no HELLO of our job
//! without the secret's MAC is accepted, nor one of the other job without
//! its group key's; no VERDICT without its MAC changes a connection; no
//! message without its connection's token gets past the check, and every
//! one with it does; a connection holds fewer than
//! `2 * CREDITS` messages, so its held bytes are bounded; messages are
//! handled in sequence order; the peer and connection tables agree; only
//! accepted HELLOs make connections.

use std::time::Instant;

use crate::auth::JobKey;
use crate::{peer_id, split_peer};

use super::conn::Handshake;
use super::handshake::HelloOutcome;
use super::order::Arrival;
use super::state::State;
use super::wire::{self, *};

const KEY: [u8; 16] = [0x11; 16];
/// The other job's secret (we know its group key only).
const OTHER_KEY: [u8; 16] = [0x22; 16];
/// Our rank, and the job group added besides our own.
const ME: u32 = 1;
const OTHER_GROUP: u32 = 2;

/// Bytes in, one step at a time.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
}

/// Handles message `seq` of `kind`, in its turn on `id`, as
/// `OfiNetmod::handle` does (a LARGE with a payload waits for it).
fn handle(st: &mut State, id: u32, kind: u8, body: &[u8]) {
    match kind {
        KIND_MSG => {
            if let Err(why) = split_body(body) {
                st.fail(id, why.into());
            }
        }
        KIND_LARGE => match split_body(body).and_then(|(_, rest)| parse_large_suffix(rest)) {
            Ok(len) if len > 0 => {
                if let Some(c) = st.conns.get_mut(&id) {
                    c.rx_payload = Some(1);
                }
            }
            Ok(_) => {}
            Err(why) => st.fail(id, why.into()),
        },
        _ => st.fail(id, "disconnected by the peer".into()),
    }
}

/// Handles the held messages whose turn has come, checking their order.
fn release(st: &mut State, id: u32) {
    loop {
        let want = st.conns.get(&id).map(|c| c.rx_next);
        let Some((seq, h)) = st.take_next(id) else {
            return;
        };
        assert_eq!(Some(seq), want, "held message out of turn");
        handle(st, id, h.kind, &h.body);
    }
}

/// What must hold after every step.
fn check(st: &State, accepted: usize) {
    for (&p, id) in &st.peers {
        let c = st.conns.get(id).expect("a peer's connection exists");
        assert_eq!(c.peer, Some(p), "peer and connection tables disagree");
    }
    let mut bytes = 0;
    for (&id, c) in &st.conns {
        if let Some(p) = c.peer {
            assert_eq!(st.peers.get(&p), Some(&id), "a connection's peer");
        }
        assert!(c.held.len() < 2 * CREDITS as usize, "held past the window");
        bytes += c.held.values().map(|h| h.body.len()).sum::<usize>();
    }
    // Bodies here are at most 127 bytes and a token.
    assert!(bytes <= st.conns.len() * 2 * CREDITS as usize * (127 + TOKEN));
    assert!(st.conns.len() <= accepted, "a connection nobody accepted");
}

pub fn sequences(data: &[u8]) {
    run(data);
}

/// `sequences`, handing back the table it built.
fn run(data: &[u8]) -> State {
    let key = JobKey::new(KEY);
    let theirs = JobKey::new(OTHER_KEY).group_key();
    let mut st = State::new(ME, b"j", 100);
    st.key = Some(key);
    if st.jobs.add(OTHER_GROUP, b"other").is_err() || st.jobs.set_key(OTHER_GROUP, theirs).is_err()
    {
        return st;
    }
    // The keys of a peer's group, written out here rather than asked of
    // `State`: (what it proves itself with, what we do).
    let keys = |g: u32| match g {
        0 => Some((key, key)),
        crate::TEMP_GROUP => None,
        _ => Some((theirs, key.group_key())),
    };
    // The token a peer's messages on `id` must open with, if it has a
    // peer and a key (not a port's).
    let token = |st: &State, id: u32| {
        let (g, _) = split_peer(st.conns.get(&id)?.peer?);
        keys(g).map(|k| wire::msg_token(&k.0, b"j", ME, id))
    };
    let mut input = Input(data);
    let mut accepted = 0;
    let mut steps = 0;
    while let Some(op) = input.byte() {
        steps += 1;
        if steps > 4096 {
            break;
        }
        let arg = input.byte().unwrap_or(0);
        let id = u32::from(arg % 8);
        match op % 10 {
            // A HELLO from raw bytes.
            0 => {
                let n = usize::from(arg);
                let body = input.bytes(n).to_vec();
                if let Ok(h) = parse_hello(&body) {
                    let own = h.ident == IDENT_RANK && h.job == b"j";
                    let forged = own && h.mac != wire::hello_mac(&key, &h, ME, b"j");
                    let out = st.hello(&h, u64::from(arg));
                    if let HelloOutcome::Accept { .. } = out {
                        assert!(!forged, "a HELLO of our job without the MAC was accepted");
                        accepted += 1;
                    }
                }
            }
            // A well-formed rank HELLO of our job or the other, its MAC
            // right or spoiled.
            1 => {
                let conn = u32::from(input.byte().unwrap_or(0));
                let name = [b'n', arg % 4, 0];
                let mut h = Hello {
                    ident: IDENT_RANK,
                    who: u64::from(arg % 4),
                    conn,
                    inline: 100,
                    job: if arg & 0x40 == 0 {
                        &b"j"[..]
                    } else {
                        &b"other"[..]
                    },
                    name: &name,
                    nonce: [arg; 8],
                    mac: [0; 8],
                };
                let g = if h.job == b"j" { 0 } else { OTHER_GROUP };
                h.mac = wire::hello_mac(&keys(g).map_or(key, |k| k.0), &h, ME, b"j");
                let spoiled = arg & 0x80 != 0;
                if spoiled {
                    h.mac[0] ^= 1;
                }
                match st.hello(&h, u64::from(arg % 4)) {
                    HelloOutcome::Accept { .. } => {
                        assert!(!spoiled, "spoiled MAC accepted");
                        accepted += 1;
                    }
                    HelloOutcome::Refuse(_) => {}
                }
            }
            // A VERDICT for connection `id`: raw bytes, or well-formed
            // with its MAC right or spoiled.
            2 => {
                let v = if arg & 0x40 != 0 {
                    parse_verdict(input.bytes(VERDICT_LEN)).ok()
                } else {
                    let verdict = [Verdict::Accept, Verdict::OtherJob, Verdict::Unsupported]
                        [usize::from(arg / 8 % 3)];
                    let conn = u32::from(input.byte().unwrap_or(0));
                    let mut m = VerdictMsg {
                        verdict,
                        conn,
                        inline: 100,
                        mac: [0; 8],
                    };
                    if let Some(c) = st.conns.get(&id) {
                        if let Some((_, k)) = c.peer.and_then(|p| keys(split_peer(p).0)) {
                            m.mac = wire::verdict_mac(&k, verdict, conn, 100, &c.nonce, id);
                        }
                    }
                    if arg & 0x80 != 0 {
                        m.mac[0] ^= 1;
                    }
                    Some(m)
                };
                if let Some(v) = v {
                    let c = st.conns.get(&id);
                    let before = c.map(|c| (c.hs, c.tx_id, c.failed.clone()));
                    let forged = c
                        .and_then(|c| c.peer)
                        .and_then(|p| keys(split_peer(p).0))
                        .is_some_and(|(_, k)| {
                            let c = &st.conns[&id];
                            v.mac
                                != wire::verdict_mac(&k, v.verdict, v.conn, v.inline, &c.nonce, id)
                        });
                    let r = st.verdict(id, &v);
                    // Unproven, only a refusal during the handshake counts.
                    let taken = v.verdict != Verdict::Accept
                        && before.as_ref().is_some_and(|b| b.0 != Handshake::Done);
                    if forged && !taken {
                        let c = st.conns.get(&id);
                        let after = c.map(|c| (c.hs, c.tx_id, c.failed.clone()));
                        assert_eq!(before, after, "a forged VERDICT changed the connection");
                        assert!(r.is_ok(), "a forged VERDICT refused the connection");
                    }
                    if let Err(why) = r {
                        st.fail(id, why);
                    }
                }
            }
            // A message in sequence: `delta` from the expected number.
            // Its body opens with the connection's token (top bit of the
            // length byte) or not.
            3 => {
                let kind = [KIND_MSG, KIND_LARGE, KIND_BYE][usize::from(arg / 8 % 3)];
                let delta = u32::from(input.byte().unwrap_or(0));
                let n = input.byte().unwrap_or(0);
                let mut body = Vec::new();
                if n & 0x80 != 0 {
                    body.extend_from_slice(&token(&st, id).unwrap_or_default());
                }
                body.extend_from_slice(input.bytes(usize::from(n & 0x7f)));
                let want = token(&st, id);
                let genuine = st.genuine(id, kind, &body);
                if let Some(t) = want {
                    assert_eq!(genuine, body.starts_with(&t), "the token check is wrong");
                }
                if !genuine {
                    check(&st, accepted);
                    continue;
                }
                let next = st.conns.get(&id).map_or(0, |c| c.rx_next);
                let seq = next.wrapping_add(delta).wrapping_sub(8) & AUX_MASK;
                match st.arrive(id, kind, seq, &body) {
                    Arrival::Now => {
                        assert_eq!(seq, next, "handled out of turn");
                        handle(&mut st, id, kind, &body);
                        release(&mut st, id);
                    }
                    Arrival::Fail(why) => st.fail(id, why),
                    Arrival::Held | Arrival::Twice | Arrival::Gone { .. } => {}
                }
            }
            // The payload of the LARGE on `id` is in.
            4 => {
                if let Some(c) = st.conns.get_mut(&id) {
                    c.rx_payload = None;
                }
                release(&mut st, id);
            }
            5 => {
                let group = if arg & 0x80 == 0 { 0 } else { OTHER_GROUP };
                st.detach(peer_id(group, u32::from(arg % 4)));
            }
            6 => {
                st.keepalive();
                st.work.clear();
            }
            7 => st.fail(id, "failed".into()),
            // We open a connection to a rank: our HELLO is out.
            8 => {
                let group = if arg & 0x80 == 0 { 0 } else { OTHER_GROUP };
                let peer = peer_id(group, u32::from(arg % 4));
                if !st.peers.contains_key(&peer) {
                    let id = st.add_conn(Some(peer), u64::from(arg % 4));
                    if let Some(c) = st.conns.get_mut(&id) {
                        c.hs = Handshake::Sent {
                            since: Instant::now(),
                        };
                        c.nonce = [arg; 8];
                    }
                    accepted += 1;
                }
            }
            // A control message (CTS, CREDIT, keepalive): only one with
            // the token gets past the check.
            _ => {
                let body = if arg & 0x40 != 0 {
                    token(&st, id).unwrap_or_default().to_vec()
                } else {
                    input.bytes(TOKEN).to_vec()
                };
                let want = token(&st, id);
                let genuine = st.genuine(id, KIND_CREDIT, &body);
                if let Some(t) = want {
                    assert_eq!(genuine, body.starts_with(&t), "the token check is wrong");
                }
            }
        }
        check(&st, accepted);
    }
    st
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_runs_its_course() {
        // Rank 0 says HELLO with the MAC (connection 1), then sends
        // message 1 (held), 0 (both handled), a LARGE 2 with a payload,
        // message 3 (held behind it); the payload comes in. Each opens
        // with the connection's token (0x80 in the length byte).
        let mut d = vec![1, 0, 9];
        d.extend_from_slice(&[3, 1, 9, 0x82, 0, 0]);
        d.extend_from_slice(&[3, 1, 8, 0x82, 0, 0]);
        let mut large = vec![3, 1 + 8, 8, 0x8a, 0, 0];
        large.extend_from_slice(&5u64.to_le_bytes());
        d.extend_from_slice(&large);
        d.extend_from_slice(&[3, 1, 8, 0x82, 0, 0]);
        let st = run(&d);
        let c = &st.conns[&1];
        assert_eq!((c.peer, c.rx_next, c.held.len()), (Some(0), 3, 1));
        assert!(c.rx_payload.is_some());
        d.extend_from_slice(&[4, 1]);
        let st = run(&d);
        let c = &st.conns[&1];
        assert_eq!((c.rx_next, c.held.len(), c.rx_payload), (4, 0, None));
        // The same HELLO with its MAC spoiled makes nothing.
        let st = run(&[1, 0x80, 9, 3, 1, 8, 0x82, 0, 0]);
        assert!(st.conns.is_empty() && st.peers.is_empty());
        assert_eq!(st.dropped, 2, "the HELLO, then the message");
        // A message far ahead fails its connection.
        let st = run(&[1, 0, 9, 3, 1, 200, 0x82, 0, 0]);
        assert!(st.conns[&1].failed.is_some());
        // Garbage keeps the invariants.
        run(&[0, 200, 1, 2, 3, 4, 5, 6, 7, 255, 3, 1, 255, 255]);
    }

    #[test]
    fn forged_messages_and_verdicts_change_nothing() {
        // Connection 1 from rank 0's HELLO; a message without the token
        // (a guessed id, the right sequence number, 8 bytes of zeros
        // where the token goes): dropped, nothing handled or held.
        let st = run(&[1, 0, 9, 3, 1, 8, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let c = &st.conns[&1];
        assert_eq!((c.rx_next, c.held.len(), c.failed.is_none()), (0, 0, true));
        assert_eq!(st.dropped, 1);
        assert!(st
            .last_drop
            .as_deref()
            .unwrap()
            .contains("without its token"));
        // A forged BYE or a far-ahead message would have failed it; a
        // forged CREDIT or PING is dropped too.
        let st = run(&[
            1,
            0,
            9,
            3,
            1 + 16,
            8,
            0x00,
            3,
            1,
            200,
            0x02,
            0,
            0,
            9,
            1,
            1,
            2,
            3,
            4,
            5,
            6,
            7,
            8,
        ]);
        assert!(st.conns[&1].failed.is_none());
        assert_eq!(st.dropped, 3);
        // The genuine control message passes.
        let st = run(&[1, 0, 9, 9, 0x41]);
        assert_eq!(st.dropped, 0);

        // We open connection 1 to rank 2 (our HELLO with nonce [2; 8] is
        // out). An accepting VERDICT with a spoiled MAC changes nothing;
        // the genuine one completes the handshake; after it, an unproven
        // refusal changes nothing either.
        let open = [8u8, 2];
        let mut d = open.to_vec();
        d.extend_from_slice(&[2, 0x91, 77]); // Accept, spoiled
        let st = run(&d);
        let c = &st.conns[&1];
        assert!(matches!(c.hs, Handshake::Sent { .. }) && c.failed.is_none());
        assert_eq!(st.dropped, 1);
        d.extend_from_slice(&[2, 1, 77]); // Accept, genuine
        d.extend_from_slice(&[2, 0x81, 0]); // OtherJob, spoiled
        let st = run(&d);
        let c = &st.conns[&1];
        assert_eq!(
            (c.hs, c.tx_id, c.failed.is_none()),
            (Handshake::Done, 77, true)
        );
        assert_ne!(c.tx_token, [0; TOKEN], "our messages now carry a token");
        assert_eq!(st.dropped, 2);
        // During the handshake a refusal fails it, proven or not (a peer
        // that does not know our job cannot prove it), saying which.
        for (arg, unproven) in [(1 + 16, false), (0x81, true)] {
            let mut d = open.to_vec();
            d.extend_from_slice(&[2, arg, 0]);
            let st = run(&d);
            let why = st.conns[&1].failed.clone().expect("refused");
            assert_eq!(why.contains("(unproven)"), unproven, "{why}");
        }
    }
}
