//! What an intruder can put on the fabric, for tests: messages of any
//! kind for any connection id, from this netmod's endpoint, with no token
//! and no MAC (`proof.rs` must drop them all). Hidden from the API.

use crate::{NetmodError, PeerId};

use super::wire::*;
use super::xfer::PostErr;
use super::OfiNetmod;

/// A message a stranger forges (tokens and MACs zero).
#[doc(hidden)]
#[derive(Debug, Clone)]
pub enum Forgery {
    Msg {
        seq: u32,
        header: Vec<u8>,
        payload: Vec<u8>,
    },
    Bye {
        seq: u32,
    },
    Cts {
        seq: u32,
    },
    Credit(u32),
    Ping,
    /// An accepting VERDICT naming `conn` as the acceptor's id.
    Accept {
        conn: u32,
    },
}

impl OfiNetmod {
    /// The id this netmod gave `peer`'s connection (what the peer's
    /// messages to us carry in their tags): what an intruder must guess.
    #[doc(hidden)]
    pub fn connection_id(&self, peer: PeerId) -> Option<u32> {
        self.st.peers.get(&peer).copied()
    }

    /// Sends `f` for connection `id` to the endpoint of `card`, as a
    /// stranger would. `Ok(false)`: the provider said "again".
    #[doc(hidden)]
    pub fn forge(&mut self, card: &str, id: u32, f: &Forgery) -> Result<bool, NetmodError> {
        let addr = self.card_addr(card)?;
        let token = [0u8; TOKEN];
        let (t, body) = match f {
            Forgery::Msg {
                seq,
                header,
                payload,
            } => {
                let mut b = prefix(header.len()).to_vec();
                b.extend_from_slice(header);
                b.extend_from_slice(payload);
                (tag(KIND_MSG, *seq, id), b)
            }
            Forgery::Bye { seq } => (tag(KIND_BYE, *seq, id), token.to_vec()),
            Forgery::Cts { seq } => (tag(KIND_CTS, *seq, id), token.to_vec()),
            Forgery::Credit(n) => (tag(KIND_CREDIT, *n, id), token.to_vec()),
            Forgery::Ping => (tag(KIND_KEEPALIVE, PING, id), token.to_vec()),
            Forgery::Accept { conn } => (
                tag(KIND_VERDICT, 0, id),
                encode_verdict(Verdict::Accept, *conn, 1 << 20, [0; 8]).to_vec(),
            ),
        };
        match self.post_send(None, addr, t, body, 0) {
            Ok(()) => Ok(true),
            Err(PostErr::Again(_)) => Ok(false),
            Err(PostErr::Failed(e)) => Err(NetmodError::Io {
                what: "forging a message".into(),
                source: std::io::Error::other(e.to_string()),
            }),
        }
    }
}
