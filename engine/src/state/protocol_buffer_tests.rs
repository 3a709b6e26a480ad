//! Protocol tests on the buffers others read: a single-copy read takes the
//! sender's pid from the node segment; with a fake netmod whose reads never
//! end by themselves, an abandoned rendezvous send gives back its
//! registration at once, a failed peer's reads end before its receive does,
//! and reads not stopped fail the engine and keep the buffer.

use std::sync::{Arc, Mutex};

use super::tests::*;
use super::*;
use crate::core::Core;
use crate::post::SendArgs;
use crate::wire::FLAG_RMA_KEY;
use rivet_netmods::NetmodError;

/// The single-copy read takes the pid from the node segment: an `Rts`
/// naming another process (here one that does not exist) is read from the
/// process at the sender's slot all the same.
#[test]
fn single_copy_reads_use_the_segment_pid() {
    let (me, mut peer) = shm_pair("cma-pid");
    let mut core = shm_core(me, state(2, true));
    core.progress();
    assert_eq!(core.tx.shm_pids(), [std::process::id(); 2]);

    let source: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    let mut dst = vec![0u8; source.len()];
    let rreq = core.start_recv(CONTEXT, dst.as_mut_ptr(), dst.len(), 1, None, 5);
    let rts = WireHeader {
        kind: MsgKind::Rts as u8,
        context: CONTEXT,
        tag: 5,
        src: 1,
        len: source.len() as u64,
        sreq: 42,
        aux: source.as_ptr() as u64,
        ..WireHeader::default()
    };
    let forged_pid = (i32::MAX as u32 - 7).to_le_bytes();
    assert!(peer.try_send(0, &rts, &forged_pid).unwrap());
    while !core.st.requests.get(rreq).is_some_and(|r| r.complete) {
        assert!(
            core.progress() > 0,
            "the receive is waiting for a Cts answer"
        );
    }
    assert_eq!(dst, source);
    // And the sender is told it was read (Ack), not asked to stream.
    let mut kinds = Vec::new();
    peer.poll(8, |_, h, _| kinds.push(h.kind())).unwrap();
    assert_eq!(kinds, [Some(MsgKind::Ack)]);
}

/// What `FakeNet` holds, shared with the test.
#[derive(Default)]
struct FakeState {
    /// Keys registered now.
    registered: Vec<u64>,
    /// Reads accepted (else refused), and those not ended: (peer, buffer).
    accept_reads: bool,
    reads: Vec<(rivet_netmods::PeerId, usize)>,
    /// `stop_reads` gives up (a provider that never ends them).
    stuck: bool,
    /// Reported failed at the next poll.
    fail_at_poll: Option<rivet_netmods::PeerId>,
}

/// A netmod that takes every message and offers one-sided reads, which
/// never end by themselves: the test sees which buffers it still holds.
struct FakeNet {
    st: Arc<Mutex<FakeState>>,
}

impl FakeNet {
    fn new() -> (FakeNet, Arc<Mutex<FakeState>>) {
        let st = Arc::new(Mutex::new(FakeState::default()));
        (FakeNet { st: st.clone() }, st)
    }
}

impl rivet_netmods::Netmod for FakeNet {
    fn name(&self) -> &'static str {
        "fake"
    }
    fn business_card(&self) -> &str {
        "fake"
    }
    fn knows(&self, _: rivet_netmods::PeerId) -> bool {
        true
    }
    fn connect(&mut self, _: rivet_netmods::PeerId, _: &str) -> Result<(), NetmodError> {
        Ok(())
    }
    fn add_group(&mut self, _: u32, _: &str) -> Result<(), NetmodError> {
        Ok(())
    }
    fn remove_group(&mut self, _: u32) {}
    fn connect_port(&mut self, _: &str, _: u64) -> Result<rivet_netmods::PeerId, NetmodError> {
        Err(NetmodError::Unavailable("fake".into()))
    }
    fn disconnect(&mut self, _: rivet_netmods::PeerId) {}
    fn peer_count(&self) -> usize {
        0
    }
    fn try_send(
        &mut self,
        _: rivet_netmods::PeerId,
        _: &[u8],
        _: &[u8],
    ) -> Result<bool, NetmodError> {
        Ok(true)
    }
    fn poll(&mut self, sink: &mut dyn rivet_netmods::Sink) -> Result<usize, NetmodError> {
        let failed = self.st.lock().unwrap().fail_at_poll.take();
        if let Some(peer) = failed {
            sink.peer_failed(peer, "connection reset");
        }
        Ok(failed.is_some() as usize)
    }
    fn idle(&self) -> bool {
        true
    }
    fn limits(&self) -> rivet_netmods::Limits {
        rivet_netmods::Limits {
            max_payload: 1 << 20,
            eager_max: 1024,
        }
    }
    fn rma(&mut self) -> Option<&mut dyn rivet_netmods::Rma> {
        Some(self)
    }
    fn describe(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

impl rivet_netmods::Rma for FakeNet {
    fn register(&mut self, addr: usize, _: usize) -> Result<u64, NetmodError> {
        self.st.lock().unwrap().registered.push(addr as u64);
        Ok(addr as u64)
    }
    fn deregister(&mut self, key: u64) -> Result<(), NetmodError> {
        self.st.lock().unwrap().registered.retain(|&k| k != key);
        Ok(())
    }
    unsafe fn read(
        &mut self,
        peer: rivet_netmods::PeerId,
        local: *mut u8,
        _: usize,
        _: u64,
        _: u64,
    ) -> Result<u64, NetmodError> {
        let mut st = self.st.lock().unwrap();
        if !st.accept_reads {
            return Err(NetmodError::Unavailable("fake".into()));
        }
        st.reads.push((peer, local as usize));
        Ok(st.reads.len() as u64)
    }
    fn poll_reads(&mut self, _: &mut dyn FnMut(u64, Result<(), String>)) {}
    fn stop_reads(&mut self, peer: rivet_netmods::PeerId) -> bool {
        let mut st = self.st.lock().unwrap();
        if st.stuck {
            return false;
        }
        st.reads.retain(|&(p, _)| p != peer);
        true
    }
}

/// An abandoned rendezvous send (a scope unwinding, a blocking send that
/// failed) gives back its buffer's registration at once: the buffer is
/// released next, and a remote read the netmod serves during the next
/// poll must not find it still registered.
#[test]
fn abandoned_sends_deregister_their_buffer_at_once() {
    let (net, fake) = FakeNet::new();
    let mut core = Core::new(
        None,
        Some(Box::new(net)),
        Arc::new(Mutex::new(None)),
        state(2, false),
    );
    let id = core
        .start_send(&SendArgs {
            context: CONTEXT,
            src: 0,
            buf: BUF.as_ptr(),
            len: BUF.len(),
            dest: VcId::world(1),
            tag: 3,
            sync: false,
        })
        .unwrap();
    assert_eq!(fake.lock().unwrap().registered, [BUF.as_ptr() as u64]);
    core.abandon(&[id]);
    assert!(
        fake.lock().unwrap().registered.is_empty(),
        "the abandoned buffer is still readable by the peer"
    );
}

/// How a netmod peer fails in `failed_peers_reads_end_before_their_receive`.
#[derive(Clone, Copy, Debug)]
enum Death {
    /// The netmod reports it (`Sink::peer_failed`).
    Netmod,
    /// The engine finds out itself (a group event, a protocol violation,
    /// the process watch): the netmod still holds the read.
    Engine,
}

/// A receive matched to a netmod `Rts` from rank 1, its read posted into
/// `dst` by the netmod of `core`.
fn reading_receive(core: &mut Core, fake: &Mutex<FakeState>, dst: &mut [u8]) -> u64 {
    fake.lock().unwrap().accept_reads = true;
    let rreq = core.start_recv(CONTEXT, dst.as_mut_ptr(), dst.len(), 1, None, 5);
    let rts = WireHeader {
        kind: MsgKind::Rts as u8,
        flags: FLAG_RMA_KEY,
        context: CONTEXT,
        tag: 5,
        src: 1,
        len: dst.len() as u64,
        sreq: 42,
        aux: 0x1000,
        ..WireHeader::default()
    };
    let mut payload = 0u32.to_le_bytes().to_vec();
    payload.extend_from_slice(&77u64.to_le_bytes());
    core.st.deliver(VcId::world(1), &rts, &payload);
    core.progress();
    assert_eq!(
        fake.lock().unwrap().reads,
        [(1, dst.as_ptr() as usize)],
        "the netmod reads into the receive buffer"
    );
    assert!(!complete(&core.st, rreq));
    rreq
}

/// A peer dies while the netmod reads its data into a receive buffer: the
/// receive fails only once the netmod has let go of the buffer (the user
/// may free it as soon as the receive completes), and until then it is
/// still written by someone (`abandon` waits for it).
#[test]
fn failed_peers_reads_end_before_their_receive() {
    for death in [Death::Netmod, Death::Engine] {
        let (net, fake) = FakeNet::new();
        let mut core = Core::new(
            None,
            Some(Box::new(net)),
            Arc::new(Mutex::new(None)),
            state(2, false),
        );
        let mut dst = vec![0u8; 4096];
        let rreq = reading_receive(&mut core, &fake, &mut dst);
        let holds = |fake: &Mutex<FakeState>| !fake.lock().unwrap().reads.is_empty();
        match death {
            Death::Netmod => fake.lock().unwrap().fail_at_poll = Some(1),
            Death::Engine => {
                core.st
                    .peer_failed(VcId::world(1), "it terminated (group event)");
                assert!(
                    !complete(&core.st, rreq),
                    "{death:?}: the receive completed while the netmod still reads into it"
                );
                assert_eq!(core.st.remote_writer(rreq), Some(VcId::world(1)));
            }
        }
        core.progress();
        assert!(
            complete(&core.st, rreq),
            "{death:?}: the receive never failed"
        );
        assert!(
            !holds(&fake),
            "{death:?}: the netmod still holds the buffer"
        );
        let status = &core.st.requests.get(rreq).unwrap().status;
        assert_eq!(
            status.error,
            Some(MsgError::PeerFailed { rank: 1 }),
            "{death:?}"
        );
        assert_eq!(core.st.remote_writer(rreq), None);
        assert!(core.st.fatal.is_none(), "{death:?}: {:?}", core.st.fatal);
        assert!(!core.st.rma.busy(), "{death:?}: reads left behind");
    }
}

/// A netmod that cannot stop a failed peer's read in time: the receive
/// never completes (its buffer is still written), the engine fails, so
/// waits end with the error and releasing the buffer aborts (`abandon`).
#[test]
fn reads_not_stopped_fail_the_engine_and_keep_the_buffer() {
    let (net, fake) = FakeNet::new();
    let mut core = Core::new(
        None,
        Some(Box::new(net)),
        Arc::new(Mutex::new(None)),
        state(2, false),
    );
    let mut dst = vec![0u8; 4096];
    let rreq = reading_receive(&mut core, &fake, &mut dst);
    fake.lock().unwrap().stuck = true;
    fake.lock().unwrap().fail_at_poll = Some(1);
    core.progress();
    core.progress();
    assert!(!complete(&core.st, rreq));
    assert_eq!(core.st.remote_writer(rreq), Some(VcId::world(1)));
    let fatal = core.st.fatal.clone().expect("the engine failed");
    assert!(fatal.contains("could not stop its reads"), "{fatal}");
}
