//! What proves a peer's words after its HELLO (`wire` has the formats):
//! which key each side proves itself with per job group (a port
//! connection's key comes from the port's random tag, which both ends
//! know), the VERDICT's MAC, and the token every later message opens with,
//! checked before the message is looked at. No libfabric calls (the fuzz
//! target drives it).

use crate::auth::{self, JobKey};
use crate::{split_peer, PeerId, TEMP_GROUP};

use super::state::State;
use super::wire::{self, VerdictMsg, TOKEN};

impl State {
    /// The key a peer of group `g` proves itself to us with: the job
    /// secret in our own job, its group key (from the group description)
    /// in an added one; none for ports and jobs without a secret.
    pub(crate) fn their_key(&self, g: u32) -> Option<JobKey> {
        match g {
            0 => self.key,
            TEMP_GROUP => None,
            g => self.jobs.added(g).and_then(|(_, k)| k.copied()),
        }
    }

    /// The key we prove ourselves to a peer of group `g` with.
    pub(crate) fn our_key(&self, g: u32) -> Option<JobKey> {
        match g {
            0 => self.key,
            TEMP_GROUP => None,
            g => self.jobs.added(g).and(self.key.map(|k| k.group_key())),
        }
    }

    /// The token the peer of connection `id` opens its messages with,
    /// where it has a key to make one with.
    pub(crate) fn rx_token(&self, peer: Option<PeerId>, id: u32) -> Option<[u8; TOKEN]> {
        let (g, _) = split_peer(peer?);
        let key = self.their_key(g)?;
        Some(wire::msg_token(&key, &self.jobs.own, self.me, id))
    }

    /// Connection `id` is to or from a port with tag `tag`: both ends
    /// prove themselves with the tag's key, naming no job or rank (the
    /// connector does not know whom the port belongs to).
    pub(crate) fn set_port_key(&mut self, id: u32, tag: u64) {
        let key = port_key(tag);
        if let Some(c) = self.conns.get_mut(&id) {
            c.key = Some(key);
            c.rx_token = Some(wire::msg_token(&key, b"", 0, id));
        }
    }

    /// (the key the peer of `id` proves itself with, ours to it).
    fn keys_of(&self, id: u32) -> (Option<JobKey>, Option<JobKey>) {
        let Some(c) = self.conns.get(&id) else {
            return (None, None);
        };
        if let Some(k) = c.key {
            return (Some(k), Some(k));
        }
        match c.peer.map(split_peer) {
            Some((g, _)) => (self.their_key(g), self.our_key(g)),
            None => (None, None),
        }
    }

    /// Sets the token we open our messages on `id` with, now that the
    /// peer's id for the connection (`tx_id`) is known.
    pub(crate) fn set_tx_token(&mut self, id: u32) {
        let Some((peer, to, port)) = self.conns.get(&id).map(|c| (c.peer, c.tx_id, c.key)) else {
            return;
        };
        let token = match port {
            Some(k) => wire::msg_token(&k, b"", 0, to),
            None => peer
                .map(split_peer)
                .and_then(|(g, rank)| {
                    let key = self.our_key(g)?;
                    let job = match g {
                        0 => self.jobs.own.clone(),
                        g => self.jobs.added(g)?.0.to_vec(),
                    };
                    Some(wire::msg_token(&key, &job, rank, to))
                })
                .unwrap_or_default(),
        };
        if let Some(c) = self.conns.get_mut(&id) {
            c.tx_token = token;
        }
    }

    /// Whether `body`, a message after the handshake on connection `id`,
    /// opens with the connection's token; a forged one is counted as
    /// dropped. Unknown connections pass (their messages are dropped as
    /// such where they are handled).
    pub(crate) fn genuine(&mut self, id: u32, kind: u8, body: &[u8]) -> bool {
        let Some(want) = self.conns.get(&id).and_then(|c| c.rx_token) else {
            return true;
        };
        if body.get(..TOKEN).is_some_and(|t| auth::same(t, &want)) {
            return true;
        }
        self.drop_msg(format!(
            "message of kind {kind} for connection {id} without its token: dropped"
        ));
        false
    }

    /// The MAC of the VERDICT we send on `conn` accepting the HELLO
    /// (`nonce`, initiator's id `hello_conn`) of its peer.
    pub(crate) fn verdict_proof(&self, conn: u32, nonce: &[u8; 8], hello_conn: u32) -> [u8; 8] {
        match self.keys_of(conn).0 {
            Some(k) => wire::verdict_mac(
                &k,
                wire::Verdict::Accept,
                conn,
                self.inline,
                nonce,
                hello_conn,
            ),
            None => [0; 8],
        }
    }

    /// Whether VERDICT `v` answering our HELLO on `id` is proven: made
    /// with our proving key for the peer over our HELLO's nonce (always
    /// true where we have no key for that peer).
    pub(crate) fn verdict_proven(&self, id: u32, v: &VerdictMsg) -> bool {
        let Some(c) = self.conns.get(&id) else {
            return true;
        };
        let Some(key) = self.keys_of(id).1 else {
            return true;
        };
        let mac = wire::verdict_mac(&key, v.verdict, v.conn, v.inline, &c.nonce, id);
        auth::same(&mac, &v.mac)
    }
}

/// The key of a port connection: its 64-bit random tag (the secret the
/// connect step hands the connector), spread over SipHash's 128-bit key.
fn port_key(tag: u64) -> JobKey {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&tag.to_le_bytes());
    k[8..].copy_from_slice(&(!tag).rotate_left(17).to_le_bytes());
    JobKey::new(k)
}
