//! The rules that accept or refuse a HELLO, and what a VERDICT does to the
//! connection it answers: `State`'s handshake half.
//!
//! # Identities
//! A rank HELLO names the sender as (job, rank): its own job is group 0,
//! a job given to `add_group` is that group, any other job is refused.
//! The sender is then `peer_id(group, rank)`: an existing peer of that
//! name takes the HELLO (this is how two processes connecting to each
//! other at once end up with one pair of ids, with no tie-break needed:
//! each side's id for the other is fixed when its connection is made, and
//! both the HELLO and the VERDICT carry it), else a new one is made. A
//! port HELLO is always a new temporary peer, announced to the engine
//! before anything it sends.

use crate::auth;
use crate::{peer_id, PeerId};

use super::conn::{Handshake, Tx};
use super::state::State;
use super::sys::fi_addr_t;
use super::wire::{self, Hello, Verdict, VerdictMsg, IDENT_PORT, IDENT_RANK};

/// What to do about a HELLO.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HelloOutcome {
    /// Accepted on connection `conn`; `port`: a new temporary peer to
    /// announce with its tag.
    Accept {
        conn: u32,
        port: Option<(PeerId, u64)>,
    },
    Refuse(Verdict),
}

impl State {
    /// Decides on a HELLO whose sender's endpoint is `addr`; on acceptance
    /// the connection knows the sender's id and inline limit.
    pub(crate) fn hello(&mut self, h: &Hello<'_>, addr: fi_addr_t) -> HelloOutcome {
        let found = match h.ident {
            IDENT_PORT => {
                let peer = self.new_temp();
                let id = self.add_conn(Some(peer), addr);
                // The engine checks the tag; what follows proves it.
                self.set_port_key(id, h.who);
                self.accept(id, h, addr);
                return HelloOutcome::Accept {
                    conn: id,
                    port: Some((peer, h.who)),
                };
            }
            IDENT_RANK => match (self.jobs.group_of(h.job), u32::try_from(h.who)) {
                (None, _) => return HelloOutcome::Refuse(Verdict::OtherJob),
                (Some(0), Ok(r)) if r == self.me => {
                    return HelloOutcome::Refuse(Verdict::Unsupported)
                }
                (Some(0), Ok(r)) if !self.proven(h) => {
                    self.drop_msg(format!(
                        "HELLO as rank {r} without the job secret's proof: refused"
                    ));
                    return HelloOutcome::Refuse(Verdict::Unsupported);
                }
                (Some(g), Ok(r)) if g != 0 && !self.proven_between(g, h) => {
                    self.drop_msg(format!(
                        "HELLO as rank {r} of group {g} without its group key's proof: refused"
                    ));
                    return HelloOutcome::Refuse(Verdict::Unsupported);
                }
                (Some(g), Ok(r)) => peer_id(g, r),
                (Some(_), Err(_)) => return HelloOutcome::Refuse(Verdict::Unsupported),
            },
            _ => return HelloOutcome::Refuse(Verdict::Unsupported),
        };
        let id = match self.peers.get(&found) {
            Some(&id) => {
                if self.conns.get(&id).is_none_or(|c| c.failed.is_some()) {
                    return HelloOutcome::Refuse(Verdict::Unsupported);
                }
                id
            }
            None => self.add_conn(Some(found), addr),
        };
        self.accept(id, h, addr);
        HelloOutcome::Accept {
            conn: id,
            port: None,
        }
    }

    /// A rank HELLO from our own job carries the secret's MAC (always
    /// true without a secret).
    fn proven(&self, h: &Hello<'_>) -> bool {
        self.key
            .as_ref()
            .is_none_or(|k| auth::same(&wire::hello_mac(k, h, self.me, &self.jobs.own), &h.mac))
    }

    /// A rank HELLO from added group `g` carries the MAC of that job's
    /// group key, where the engine gave one (jobs without a secret have
    /// none).
    fn proven_between(&self, g: u32, h: &Hello<'_>) -> bool {
        match self.jobs.added(g) {
            Some((_, Some(k))) => {
                auth::same(&wire::hello_mac(k, h, self.me, &self.jobs.own), &h.mac)
            }
            _ => true,
        }
    }

    fn accept(&mut self, id: u32, h: &Hello<'_>, addr: fi_addr_t) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if c.hs != Handshake::Done {
            self.made += 1;
        } else if c.tx_id != h.conn {
            // The peer connected anew (it had disconnected us): both
            // directions start over.
            c.out.clear();
            c.out_bytes = 0;
            c.awaiting.clear();
            c.cts_since = None;
            c.seq = 0;
            c.credits = wire::CREDITS;
            c.consumed = 0;
            c.rx_next = 0;
            c.held.clear();
            c.pings = 0;
        }
        c.tx_id = h.conn;
        c.remote_inline = h.inline as usize;
        c.addr = addr;
        c.hs = Handshake::Done;
        c.stalled = None;
        let mac = self.verdict_proof(id, &h.nonce, h.conn);
        let v = wire::encode_verdict(Verdict::Accept, id, self.inline, mac);
        self.set_tx_token(id);
        if let Some(c) = self.conns.get_mut(&id) {
            c.push_front(Tx::Verdict(v));
        }
        self.mark(id);
    }

    /// The VERDICT `v` for our HELLO on `id` arrived: `Err(why)` if refused.
    /// Where the HELLO was proven, an acceptance must be too, so a stranger
    /// can neither complete nor redirect our handshake; once it is done,
    /// nothing unproven touches it. A refusal is taken unproven while the
    /// handshake is under way (a peer that does not know our job, or took
    /// us for a stranger, cannot prove it; forging one means guessing our
    /// 32-bit id within a round trip), and says so.
    pub(crate) fn verdict(&mut self, id: u32, v: &VerdictMsg) -> Result<(), String> {
        let proven = self.verdict_proven(id, v);
        let Some(c) = self.conns.get_mut(&id) else {
            return Ok(());
        };
        if !proven && (v.verdict == Verdict::Accept || c.hs == Handshake::Done) {
            self.drop_msg(format!(
                "VERDICT ({:?}) for connection {id} without its proof: dropped",
                v.verdict
            ));
            return Ok(());
        }
        let unproven = if proven { "" } else { " (unproven)" };
        match v.verdict {
            Verdict::Accept => {
                if c.hs != Handshake::Done {
                    self.made += 1;
                }
                c.tx_id = v.conn;
                c.remote_inline = v.inline as usize;
                c.hs = Handshake::Done;
                c.stalled = None;
                self.set_tx_token(id);
                self.mark(id);
                Ok(())
            }
            Verdict::OtherJob => Err(format!(
                "connection rejected: the peer is in another job{unproven}"
            )),
            Verdict::Unsupported => Err(format!("connection rejected by the peer{unproven}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::JobKey;
    use crate::TEMP_GROUP;
    use std::time::Instant;

    /// An unproven accepting VERDICT naming `conn` (enough without a key).
    fn accept(conn: u32) -> VerdictMsg {
        VerdictMsg {
            verdict: Verdict::Accept,
            conn,
            inline: 100,
            mac: [0; 8],
        }
    }

    fn hello<'a>(ident: u8, who: u64, job: &'a [u8], conn: u32) -> Hello<'a> {
        Hello {
            ident,
            who,
            conn,
            inline: 100,
            job,
            name: b"x",
            nonce: [1; 8],
            mac: [0; 8],
        }
    }

    #[test]
    fn identities_and_refusals() {
        let mut st = State::new(1, b"job", 100);
        st.jobs.add(4, b"other").unwrap();
        // Our own rank, unknown jobs, wide ranks and unknown kinds are refused.
        for (h, v) in [
            (hello(IDENT_RANK, 1, b"job", 5), Verdict::Unsupported),
            (hello(IDENT_RANK, 0, b"stranger", 5), Verdict::OtherJob),
            (hello(IDENT_RANK, 1 << 32, b"job", 5), Verdict::Unsupported),
            (hello(9, 0, b"job", 5), Verdict::Unsupported),
        ] {
            assert_eq!(st.hello(&h, 7), HelloOutcome::Refuse(v));
        }
        assert!(st.conns.is_empty());
        // Rank 0 of our job and rank 1 of group 4 (same rank as ours).
        let HelloOutcome::Accept {
            conn: a,
            port: None,
        } = st.hello(&hello(IDENT_RANK, 0, b"job", 11), 7)
        else {
            panic!()
        };
        let HelloOutcome::Accept {
            conn: b,
            port: None,
        } = st.hello(&hello(IDENT_RANK, 1, b"other", 12), 8)
        else {
            panic!()
        };
        assert_eq!(st.peers[&0], a);
        assert_eq!(st.peers[&peer_id(4, 1)], b);
        let c = &st.conns[&a];
        assert_eq!((c.tx_id, c.remote_inline, c.ready()), (11, 100, true));
        assert!(matches!(c.out.front(), Some(Tx::Verdict(_))));
        assert_eq!(st.made, 2);
        // A second HELLO from the same identity updates the same connection.
        assert_eq!(
            st.hello(&hello(IDENT_RANK, 0, b"job", 13), 9),
            HelloOutcome::Accept {
                conn: a,
                port: None
            }
        );
        assert_eq!((st.conns[&a].tx_id, st.conns[&a].addr), (13, 9));
        assert_eq!(st.made, 2);
        // A failed peer refuses; a removed group is another job again.
        st.fail(a, "gone".into());
        assert_eq!(st.failures, [(0, "gone".to_string())]);
        assert_eq!(
            st.hello(&hello(IDENT_RANK, 0, b"job", 14), 7),
            HelloOutcome::Refuse(Verdict::Unsupported)
        );
        st.jobs.remove(4);
        assert_eq!(
            st.hello(&hello(IDENT_RANK, 2, b"other", 15), 7),
            HelloOutcome::Refuse(Verdict::OtherJob)
        );
        assert_eq!(st.peer_count(), 1);
    }

    #[test]
    fn with_a_secret_rank_hellos_of_our_job_prove_it() {
        let key = JobKey::new([5; 16]);
        let mut st = State::new(1, b"job", 100);
        st.key = Some(key);
        st.jobs.add(4, b"other").unwrap();
        let proven = |mut h: Hello<'static>, target: u32, k: &JobKey| {
            h.mac = wire::hello_mac(k, &h, target, b"job");
            h
        };
        // No MAC, a MAC for another target, or made with another key.
        for h in [
            hello(IDENT_RANK, 0, b"job", 5),
            proven(hello(IDENT_RANK, 0, b"job", 5), 2, &key),
            proven(hello(IDENT_RANK, 0, b"job", 5), 1, &JobKey::new([6; 16])),
        ] {
            assert_eq!(st.hello(&h, 7), HelloOutcome::Refuse(Verdict::Unsupported));
        }
        assert!(st.conns.is_empty() && st.peers.is_empty(), "nothing held");
        assert_eq!(st.dropped, 3);
        assert!(st.last_drop.as_deref().unwrap().contains("job secret"));
        // A MAC over other fields than those sent: another endpoint name.
        let mut h = proven(hello(IDENT_RANK, 0, b"job", 5), 1, &key);
        h.name = b"y";
        assert_eq!(st.hello(&h, 7), HelloOutcome::Refuse(Verdict::Unsupported));
        // The genuine rank 0 is then accepted.
        let h = proven(hello(IDENT_RANK, 0, b"job", 5), 1, &key);
        assert!(matches!(
            st.hello(&h, 7),
            HelloOutcome::Accept { port: None, .. }
        ));
        // An added job without a group key is not checked; ports never.
        assert!(matches!(
            st.hello(&hello(IDENT_RANK, 0, b"other", 6), 8),
            HelloOutcome::Accept { port: None, .. }
        ));
        assert!(matches!(
            st.hello(&hello(IDENT_PORT, 9, b"x", 7), 9),
            HelloOutcome::Accept { port: Some(_), .. }
        ));
    }

    #[test]
    fn rank_hellos_of_a_keyed_job_prove_its_group_key() {
        let theirs = JobKey::new([9; 16]).group_key();
        let mut st = State::new(1, b"job", 100);
        st.jobs.add(4, b"other").unwrap();
        st.jobs.set_key(4, theirs).unwrap();
        let proven = |mut h: Hello<'static>, target: u32, job: &[u8], k: &JobKey| {
            h.mac = wire::hello_mac(k, &h, target, job);
            h
        };
        // No MAC, the job secret instead of the group key, another target
        // rank or job: refused, nothing held.
        for h in [
            hello(IDENT_RANK, 0, b"other", 5),
            proven(
                hello(IDENT_RANK, 0, b"other", 5),
                1,
                b"job",
                &JobKey::new([9; 16]),
            ),
            proven(hello(IDENT_RANK, 0, b"other", 5), 2, b"job", &theirs),
            proven(hello(IDENT_RANK, 0, b"other", 5), 1, b"elsewhere", &theirs),
        ] {
            assert_eq!(st.hello(&h, 7), HelloOutcome::Refuse(Verdict::Unsupported));
        }
        assert!(st.conns.is_empty() && st.peers.is_empty(), "nothing held");
        assert!(st.last_drop.as_deref().unwrap().contains("group key"));
        // The genuine rank 0 of that job is accepted.
        let h = proven(hello(IDENT_RANK, 0, b"other", 5), 1, b"job", &theirs);
        assert!(matches!(
            st.hello(&h, 7),
            HelloOutcome::Accept { port: None, .. }
        ));
        assert!(st.peers.contains_key(&peer_id(4, 0)));
    }

    #[test]
    fn simultaneous_connect_needs_no_tie_break() {
        // Both sides connected and sent HELLOs carrying their ids.
        let mut a = State::new(0, b"j", 100);
        let mut b = State::new(1, b"j", 100);
        let ab = a.add_conn(Some(1), 100);
        let ba = b.add_conn(Some(0), 200);
        a.conns.get_mut(&ab).unwrap().hs = Handshake::Sent {
            since: Instant::now(),
        };
        b.conns.get_mut(&ba).unwrap().hs = Handshake::Sent {
            since: Instant::now(),
        };
        // Each gets the other's HELLO: the same connection takes it.
        let ha = hello(IDENT_RANK, 0, b"j", ab);
        let hb = hello(IDENT_RANK, 1, b"j", ba);
        assert!(matches!(b.hello(&ha, 200), HelloOutcome::Accept { conn, .. } if conn == ba));
        assert!(matches!(a.hello(&hb, 100), HelloOutcome::Accept { conn, .. } if conn == ab));
        // ... and the VERDICTs that follow agree with what the HELLOs said.
        assert_eq!(a.verdict(ab, &accept(ba)), Ok(()));
        assert_eq!(b.verdict(ba, &accept(ab)), Ok(()));
        assert_eq!((a.conns[&ab].tx_id, b.conns[&ba].tx_id), (ba, ab));
        assert_eq!((a.made, b.made), (1, 1));
        let other = VerdictMsg {
            verdict: Verdict::OtherJob,
            ..accept(0)
        };
        assert!(a.verdict(ab, &other).is_err());
        assert_eq!(a.verdict(999, &accept(1)), Ok(()), "stale: ignored");
    }

    #[test]
    fn ports_are_new_temporary_peers() {
        let mut st = State::new(0, b"j", 100);
        let h = hello(IDENT_PORT, 77, b"anyone", 3);
        let HelloOutcome::Accept {
            conn: c1,
            port: Some((p1, 77)),
        } = st.hello(&h, 5)
        else {
            panic!()
        };
        let HelloOutcome::Accept {
            conn: c2,
            port: Some((p2, 77)),
        } = st.hello(&h, 5)
        else {
            panic!()
        };
        assert_ne!(c1, c2);
        assert_eq!((p1, p2), (peer_id(TEMP_GROUP, 0), peer_id(TEMP_GROUP, 1)));
    }
}
