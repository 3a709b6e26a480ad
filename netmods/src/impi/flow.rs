//! Per process-pair flow control (seed 003, 3.6).
//!
//! A sender counts packets sent to a destination and stops at `hiwater`
//! until a protocol ACK takes `ackmark` off; the destination sends one ACK
//! per `ackmark` packets received from that source. Protocol ACKs and
//! `IMPI_PK_FINI` are not counted.
//!
//! Where the text is silent: each host states its `ackmark`/`hiwater`
//! (`IMPI_H_ACKMARK`/`IMPI_H_HIWATER`), and Rivet applies the receiving
//! host's pair to the traffic it receives, since it is the one that
//! buffers (hiwater) and acknowledges (ackmark); 3.9 keeps `1 <= ackmark
//! <= hiwater`, so a sender always gets its ACK before it stalls. Between
//! two Rivet hosts a direct channel uses the pair each sent in Rivet's own
//! labels (`RIVET_H_ACKMARK`/`RIVET_H_HIWATER`, see
//! [`ProcInfo::flow_from`](super::config::ProcInfo::flow_from)); a peer
//! that did not send them sees only the standard values.

use super::packet::Kind;

/// Whether a packet of this kind moves the counters.
pub fn counted(kind: Kind) -> bool {
    !matches!(kind, Kind::ProtoAck | Kind::Fini)
}

/// Sender side of one pair.
#[derive(Debug, Clone)]
pub struct Credit {
    ackmark: u32,
    hiwater: u32,
    sent: u32,
}

/// A protocol ACK the sender was not owed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("IMPI protocol ACK for {ackmark} packets with only {sent} unacknowledged")]
pub struct UnexpectedAck {
    pub ackmark: u32,
    pub sent: u32,
}

impl Credit {
    /// The destination's `ackmark` and `hiwater` (checked at startup).
    pub fn new(ackmark: u32, hiwater: u32) -> Credit {
        Credit {
            ackmark: ackmark.max(1),
            hiwater: hiwater.max(ackmark.max(1)),
            sent: 0,
        }
    }

    /// May another counted packet go now?
    pub fn can_send(&self) -> bool {
        self.sent < self.hiwater
    }

    /// A counted packet went.
    pub fn sent(&mut self) {
        self.sent += 1;
    }

    /// A protocol ACK came.
    pub fn acked(&mut self) -> Result<(), UnexpectedAck> {
        if self.sent < self.ackmark {
            return Err(UnexpectedAck {
                ackmark: self.ackmark,
                sent: self.sent,
            });
        }
        self.sent -= self.ackmark;
        Ok(())
    }

    pub fn unacknowledged(&self) -> u32 {
        self.sent
    }
}

/// Receiver side of one pair.
#[derive(Debug, Clone)]
pub struct Acker {
    ackmark: u32,
    received: u32,
}

impl Acker {
    pub fn new(ackmark: u32) -> Acker {
        Acker {
            ackmark: ackmark.max(1),
            received: 0,
        }
    }

    /// A counted packet was received; true when a protocol ACK is due.
    pub fn received(&mut self) -> bool {
        self.received += 1;
        if self.received == self.ackmark {
            self.received = 0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sender_stalls_at_hiwater_and_resumes_per_ack() {
        let (ackmark, hiwater) = (2, 5);
        let mut credit = Credit::new(ackmark, hiwater);
        let mut acker = Acker::new(ackmark);
        let mut acks = 0;
        let mut sent = 0;
        while credit.can_send() {
            credit.sent();
            sent += 1;
            if acker.received() {
                acks += 1;
            }
        }
        assert_eq!(sent, 5, "hiwater packets go unacknowledged at most");
        assert_eq!(acks, 2, "one ACK per ackmark packets");
        for _ in 0..acks {
            credit.acked().unwrap();
        }
        assert_eq!(credit.unacknowledged(), 1);
        assert!(credit.can_send());
        assert!(
            credit.acked().is_err(),
            "an ACK not owed is a protocol error"
        );
        assert!(counted(Kind::Data) && counted(Kind::SyncAck) && counted(Kind::Cancel));
        assert!(!counted(Kind::ProtoAck) && !counted(Kind::Fini));
    }

    #[test]
    fn ackmark_equal_to_hiwater_never_deadlocks() {
        let mut credit = Credit::new(3, 3);
        let mut acker = Acker::new(3);
        for _ in 0..100 {
            assert!(credit.can_send());
            credit.sent();
            if acker.received() {
                credit.acked().unwrap();
            }
        }
        // Zeros (refused at startup) are lifted to 1 rather than dividing the stream.
        let mut c = Credit::new(0, 0);
        assert!(c.can_send());
        c.sent();
        assert!(!c.can_send());
    }
}
