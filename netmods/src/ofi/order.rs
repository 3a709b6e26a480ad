//! The receive order of a connection's messages in sequence (MSG, LARGE,
//! BYE): the provider may complete them out of order, so each carries a
//! sequence number and is handled in turn; early ones, and those behind a
//! LARGE whose payload is still coming, are held. A sender has at most
//! `wire::CREDITS` messages unhandled here, so one further ahead than
//! twice that is a protocol error, not something to hold: a peer can make
//! a connection hold at most `2 * CREDITS` messages. No libfabric calls
//! (`recv` acts on what this decides; the fuzz target drives it alone).

use super::conn::Held;
use super::state::State;
use super::wire::{next_seq, AUX_MASK, CREDITS};

/// What became of a message in sequence.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// Its turn: handle it now (`rx_next` has moved past it).
    Now,
    /// Held until its turn.
    Held,
    /// Held already: this copy was dropped (counted).
    Twice,
    /// Far beyond the credit window: fail the connection for `why`.
    Fail(String),
    /// For a connection that is unknown (`known` false, counted), detached
    /// or failed: dropped (a LARGE's payload is still to be drained).
    Gone { known: bool },
}

impl State {
    /// Message `seq` of `kind` with `body` arrived on connection `id`.
    pub(crate) fn arrive(&mut self, id: u32, kind: u8, seq: u32, body: &[u8]) -> Arrival {
        let live = self
            .conns
            .get_mut(&id)
            .filter(|c| c.peer.is_some() && c.failed.is_none());
        let Some(c) = live else {
            let known = self.conns.contains_key(&id);
            if !known {
                self.drop_msg(format!("message for unknown connection {id}"));
            }
            return Arrival::Gone { known };
        };
        if seq == c.rx_next && c.rx_payload.is_none() {
            c.rx_next = next_seq(seq);
            return Arrival::Now;
        }
        if seq.wrapping_sub(c.rx_next) & AUX_MASK >= 2 * CREDITS {
            return Arrival::Fail(format!(
                "protocol error: message {seq} far beyond the credit window (next {})",
                c.rx_next
            ));
        }
        let held = Held {
            kind,
            body: body.to_vec(),
        };
        if c.held.insert(seq, held).is_some() {
            self.drop_msg(format!("message {seq} twice from {id}"));
            return Arrival::Twice;
        }
        Arrival::Held
    }

    /// The held message whose turn has come on `id`, if any and if the
    /// connection is live with no payload coming in: taken out, with its
    /// sequence number (`rx_next` moves past it).
    pub(crate) fn take_next(&mut self, id: u32) -> Option<(u32, Held)> {
        let c = self.conns.get_mut(&id)?;
        if c.rx_payload.is_some() || c.failed.is_some() || c.peer.is_none() {
            return None;
        }
        let seq = c.rx_next;
        let h = c.held.remove(&seq)?;
        c.rx_next = next_seq(seq);
        Some((seq, h))
    }
}

#[cfg(test)]
mod tests {
    use super::super::conn::Handshake;
    use super::super::wire::{KIND_LARGE, KIND_MSG};
    use super::*;

    fn one_conn() -> (State, u32) {
        let mut st = State::new(0, b"j", 100);
        let id = st.add_conn(Some(1), 1);
        st.conns.get_mut(&id).unwrap().hs = Handshake::Done;
        (st, id)
    }

    #[test]
    fn in_turn_early_and_twice() {
        let (mut st, id) = one_conn();
        assert_eq!(st.arrive(id, KIND_MSG, 1, b"b"), Arrival::Held);
        assert_eq!(st.arrive(id, KIND_MSG, 1, b"b"), Arrival::Twice);
        assert_eq!(st.take_next(id).map(|(s, _)| s), None, "0 not in yet");
        assert_eq!(st.arrive(id, KIND_MSG, 0, b"a"), Arrival::Now);
        let (seq, h) = st.take_next(id).unwrap();
        assert_eq!((seq, h.kind, h.body.as_slice()), (1, KIND_MSG, &b"b"[..]));
        assert!(st.take_next(id).is_none());
        assert_eq!(st.conns[&id].rx_next, 2);
        assert_eq!(st.dropped, 1);
    }

    #[test]
    fn a_payload_coming_holds_what_follows() {
        let (mut st, id) = one_conn();
        assert_eq!(st.arrive(id, KIND_LARGE, 0, b"h"), Arrival::Now);
        st.conns.get_mut(&id).unwrap().rx_payload = Some(1);
        assert_eq!(st.arrive(id, KIND_MSG, 1, b"x"), Arrival::Held);
        assert!(st.take_next(id).is_none(), "behind the payload");
        st.conns.get_mut(&id).unwrap().rx_payload = None;
        assert_eq!(st.take_next(id).unwrap().0, 1);
    }

    #[test]
    fn the_window_bounds_what_is_held() {
        let (mut st, id) = one_conn();
        for seq in 1..2 * CREDITS {
            assert_eq!(st.arrive(id, KIND_MSG, seq, b"m"), Arrival::Held);
        }
        assert!(matches!(
            st.arrive(id, KIND_MSG, 2 * CREDITS, b"m"),
            Arrival::Fail(_)
        ));
        // Behind rx_next (wrapped) is far ahead too.
        assert!(matches!(
            st.arrive(id, KIND_MSG, AUX_MASK, b"m"),
            Arrival::Fail(_)
        ));
        assert_eq!(st.conns[&id].held.len(), 2 * CREDITS as usize - 1);
        // Unknown, failed and detached connections hold nothing.
        assert_eq!(
            st.arrive(99, KIND_MSG, 0, b""),
            Arrival::Gone { known: false }
        );
        st.fail(id, "x".into());
        assert_eq!(
            st.arrive(id, KIND_MSG, 0, b""),
            Arrival::Gone { known: true }
        );
    }
}
