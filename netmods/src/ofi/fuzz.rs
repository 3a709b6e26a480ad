//! The fuzz target over sequences of what peers send the ofi netmod:
//! HELLOs (raw bytes, or well-formed with a right or wrong job-secret MAC),
//! VERDICTs, messages in sequence on any connection with any sequence
//! number, payloads finishing, disconnects, failures and keepalive rounds,
//! driven through the connection table and the receive order (`state`,
//! `order`) exactly as `recv` and `send` drive them, with no libfabric. Reached
//! through `crate::fuzzing::ofi_sequences`.
//!
//! Asserted after every step, whatever the bytes: no HELLO of our job
//! without the secret's MAC is accepted; a connection holds fewer than
//! `2 * CREDITS` messages, so its held bytes are bounded; messages are
//! handled in sequence order; the peer and connection tables agree; only
//! accepted HELLOs make connections.

use crate::auth::JobKey;
use crate::peer_id;

use super::handshake::HelloOutcome;
use super::order::Arrival;
use super::state::State;
use super::wire::{self, *};

const KEY: [u8; 16] = [0x11; 16];
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
    // Bodies here are at most 255 bytes.
    assert!(bytes <= st.conns.len() * 2 * CREDITS as usize * 255);
    assert!(st.conns.len() <= accepted, "a connection nobody accepted");
}

pub fn sequences(data: &[u8]) {
    run(data);
}

/// `sequences`, handing back the table it built.
fn run(data: &[u8]) -> State {
    let key = JobKey::new(KEY);
    let mut st = State::new(ME, b"j", 100);
    st.key = Some(key);
    if st.jobs.add(OTHER_GROUP, b"other").is_err() {
        return st;
    }
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
        match op % 8 {
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
                h.mac = wire::hello_mac(&key, &h, ME, b"j");
                let spoiled = arg & 0x80 != 0;
                if spoiled {
                    h.mac[0] ^= 1;
                }
                match st.hello(&h, u64::from(arg % 4)) {
                    HelloOutcome::Accept { .. } => {
                        assert!(!(spoiled && h.job == b"j"), "spoiled MAC accepted");
                        accepted += 1;
                    }
                    HelloOutcome::Refuse(_) => {}
                }
            }
            2 => {
                let body = input.bytes(VERDICT_LEN).to_vec();
                if let Ok((v, theirs, inline)) = parse_verdict(&body) {
                    let _ = st.verdict(id, v, theirs, inline);
                }
            }
            // A message in sequence: `delta` from the expected number.
            3 => {
                let kind = [KIND_MSG, KIND_LARGE, KIND_BYE][usize::from(arg / 8 % 3)];
                let delta = u32::from(input.byte().unwrap_or(0));
                let n = usize::from(input.byte().unwrap_or(0));
                let body = input.bytes(n).to_vec();
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
            _ => st.fail(id, "failed".into()),
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
        // message 3 (held behind it); the payload comes in.
        let mut d = vec![1, 0, 9];
        d.extend_from_slice(&[3, 1, 9, 2, 0, 0]);
        d.extend_from_slice(&[3, 1, 8, 2, 0, 0]);
        let mut large = vec![3, 1 + 8, 8, 10, 0, 0];
        large.extend_from_slice(&5u64.to_le_bytes());
        d.extend_from_slice(&large);
        d.extend_from_slice(&[3, 1, 8, 2, 0, 0]);
        let st = run(&d);
        let c = &st.conns[&1];
        assert_eq!((c.peer, c.rx_next, c.held.len()), (Some(0), 3, 1));
        assert!(c.rx_payload.is_some());
        d.extend_from_slice(&[4, 1]);
        let st = run(&d);
        let c = &st.conns[&1];
        assert_eq!((c.rx_next, c.held.len(), c.rx_payload), (4, 0, None));
        // The same HELLO with its MAC spoiled makes nothing.
        let st = run(&[1, 0x80, 9, 3, 1, 8, 2, 0, 0]);
        assert!(st.conns.is_empty() && st.peers.is_empty());
        assert_eq!(st.dropped, 2, "the HELLO, then the message");
        // A message far ahead fails its connection.
        let st = run(&[1, 0, 9, 3, 1, 200, 2, 0, 0]);
        assert!(st.conns[&1].failed.is_some());
        // Garbage keeps the invariants.
        run(&[0, 200, 1, 2, 3, 4, 5, 6, 7, 255, 3, 1, 255, 255]);
    }
}
