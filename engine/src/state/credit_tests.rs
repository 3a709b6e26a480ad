//! The credit window's bound (ARCHITECTURE.md, `protocol.rs`): however many
//! eager-sized sends go to a netmod peer that returns no credit, the eager
//! data (payload plus the per-message charge) sent to it never exceeds the
//! window; the rest goes by rendezvous. Returned credit lets exactly that
//! much more go eagerly.

use std::sync::{Arc, Mutex};

use super::credit::CREDIT_PER_MESSAGE;
use super::tests::state;
use crate::core::Core;
use crate::pg::VcId;
use crate::post::SendArgs;
use crate::test_netmod::fake_netmod_rest;
use crate::wire::{control, MsgKind, WireHeader};
use rivet_netmods::{Netmod, NetmodError, PeerId, Sink};

/// Every message handed to the netmod: (kind, payload length).
type Log = Arc<Mutex<Vec<(Option<MsgKind>, usize)>>>;

/// A netmod that takes every message and writes down what it was.
struct Recorder(Log);

impl Netmod for Recorder {
    fake_netmod_rest!("recorder");
    fn try_send(&mut self, _: PeerId, header: &[u8], payload: &[u8]) -> Result<bool, NetmodError> {
        let kind = WireHeader::from_bytes(header).and_then(|h| h.kind());
        self.0.lock().unwrap().push((kind, payload.len()));
        Ok(true)
    }
    fn poll(&mut self, _: &mut dyn Sink) -> Result<usize, NetmodError> {
        Ok(0)
    }
    fn idle(&self) -> bool {
        true
    }
}

static BUF: [u8; 1000] = [0x5a; 1000];

/// `n` standard sends of 1000 bytes (under the eager limit) to rank 1,
/// tags from `first`.
fn sends(core: &mut Core, first: i32, n: i32) {
    for tag in first..first + n {
        let a = SendArgs {
            context: 7,
            src: 0,
            buf: BUF.as_ptr(),
            len: BUF.len(),
            dest: VcId::world(1),
            tag,
            sync: false,
        };
        if !core.try_send_now(&a).unwrap() {
            core.start_send(&a).unwrap();
        }
    }
    core.progress();
}

/// (eager charge, eager messages, rendezvous requests) so far.
fn tally(log: &Log) -> (usize, usize, usize) {
    let log = log.lock().unwrap();
    let eager: Vec<usize> = log
        .iter()
        .filter(|(k, _)| *k == Some(MsgKind::Eager))
        .map(|(_, n)| *n)
        .collect();
    let rts = log.iter().filter(|(k, _)| *k == Some(MsgKind::Rts)).count();
    let charge = eager.iter().map(|n| n + CREDIT_PER_MESSAGE).sum();
    (charge, eager.len(), rts)
}

#[test]
fn eager_data_to_a_silent_peer_stays_within_the_credit_window() {
    let log = Log::default();
    let mut core = Core::new(
        None,
        Some(Box::new(Recorder(log.clone()))),
        Arc::new(Mutex::new(None)),
        state(2, false),
    );
    let window = core.st.pgs.world.window;
    let n = 3 * window / (BUF.len() + CREDIT_PER_MESSAGE);
    sends(&mut core, 0, n as i32);
    let (charge, eager, rts) = tally(&log);
    assert!(
        charge <= window,
        "{charge} bytes of eager charge in a {window}-byte window"
    );
    assert!(
        charge + BUF.len() + CREDIT_PER_MESSAGE > window,
        "the window was used up ({charge} of {window})"
    );
    assert_eq!(eager + rts, n, "every send went one way or the other");
    assert!(rts > 0);

    // The peer consumed a quarter window and says so: that much more goes
    // eagerly, and no more.
    let mut credit = control(MsgKind::Credit, 0, 0);
    credit.aux = (window / 4) as u64;
    core.st.deliver(VcId::world(1), &credit, &[]);
    sends(&mut core, n as i32, n as i32);
    let (charge2, eager2, rts2) = tally(&log);
    assert!(
        charge2 <= window + window / 4,
        "{charge2} bytes of eager charge after {} returned",
        window / 4
    );
    assert!(eager2 > eager, "returned credit was used");
    assert_eq!(eager2 + rts2, 2 * n);
}
