//! Large shared-memory messages copied by both ranks at once.
//!
//! A single-copy rendezvous read (`process_vm_readv`) runs on one core,
//! and one core copies well below what the memory system moves. So from
//! `RIVET_SHM_SPLIT_MIN` on, once single copy has worked with a peer, the
//! receiver splits the copy:
//!
//! ```text
//! sender                              receiver
//!   Rts (addr, len)  ------------------->  matched: Copying { parts: 2 }
//!                    <-------------------  Write (offset h, my addr + h, count, rreq)
//!   process_vm_writev [h, h+count)         process_vm_readv [0, h)
//!   Written (rreq)   ------------------->  both parts done: complete
//!                    <-------------------  Ack
//! ```
//!
//! A `Write` is honoured only for our own send to that peer, right after
//! its `Rts`, within the message (`SendOp::on_write`); a `Written` only for
//! a receive copying from that peer. If the sender cannot write
//! (`FLAG_FAILED`), the receiver reads that part too. While a receive is
//! `Copying` the sender may be writing into its buffer, so it is never
//! released early (`State::remote_writer`).
//!
//! Both copies run in `Core::copy_progress`, after the transports are
//! polled and replies flushed, so the `Write` is on its way before the
//! receiver starts its own part.

use crate::pg::{Outgoing, VcId};
use crate::route::Route;
use crate::shm::cma;
use crate::state::{bytes, Job, Split, State};
use crate::table::{Op, RecvPhase, Req};
use crate::wire::control;
use crate::wire::{MsgKind, WireHeader, FLAG_FAILED};

impl State {
    /// Receiver, just matched `want` bytes at `addr` in the process at shm
    /// slot `peer`: take the first part, ask the sender for the rest.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_split_copy(
        &mut self,
        rreq: u64,
        from: VcId,
        peer: usize,
        addr: u64,
        buf: *mut u8,
        want: usize,
        context: u32,
        sreq: u64,
    ) {
        // Split on a page boundary: each side pins its own pages.
        let h = match (want / 2) & !4095 {
            0 => want / 2,
            h => h,
        };
        let rest = want - h;
        self.copies.shared += 1;
        self.set_recv_phase(rreq, RecvPhase::Copying { from, parts: 2 });
        // The receive owns `buf..buf+want` until it completes; `h <= want`.
        let dst_rest = buf.wrapping_add(h);
        self.copies.splits.push(Split {
            rreq,
            from,
            peer,
            src_rest: addr + h as u64,
            dst_rest,
            rest,
            context,
            sreq,
        });
        self.copies.jobs.push(Job::Read {
            rreq,
            from,
            peer,
            src: addr,
            dst: buf,
            len: h,
        });
        let mut header = control(MsgKind::Write, context, sreq);
        header.len = h as u64;
        header.aux = dst_rest as u64;
        let mut data = Vec::with_capacity(16);
        data.extend_from_slice(&(rest as u64).to_le_bytes());
        data.extend_from_slice(&rreq.to_le_bytes());
        if let Err(e) = self.queue(from, Outgoing::Owned { header, data }) {
            self.fail(format!("asking {from} to write its part: {e}"));
        }
    }

    /// Sender: the receiver asks us to write part of our message.
    pub(crate) fn on_write(&mut self, from: VcId, h: &WireHeader, payload: &[u8]) {
        if !self.names_send_to(from, h.sreq, "a Write") {
            return;
        }
        let (Some(count), Some(rreq)) = (le_u64(payload, 0), le_u64(payload, 8)) else {
            return self.misbehaved(from, "a Write without its count and receive");
        };
        let Ok(Route::Shm(peer)) = self.pgs.vc(from).map(|vc| vc.route) else {
            return self.misbehaved(from, "a Write from a peer not on shared memory");
        };
        let Some(Req {
            op: Op::Send(s), ..
        }) = self.requests.get_mut(h.sreq)
        else {
            return;
        };
        let inside = h
            .len
            .checked_add(count)
            .is_some_and(|end| end <= s.len as u64);
        if !inside {
            return self.misbehaved(from, "a Write beyond the message");
        }
        if let Err(why) = s.on_write() {
            return self.misbehaved(from, why);
        }
        self.copies.jobs.push(Job::Write {
            sreq: h.sreq,
            to: from,
            peer,
            src: s.buf.wrapping_add(h.len as usize),
            dst: h.aux,
            len: count as usize,
            rreq,
            context: h.context,
        });
    }

    /// Receiver: the sender's part is written (or refused).
    pub(crate) fn on_written(&mut self, from: VcId, h: &WireHeader) {
        if !self.copying_from(h.aux, from) {
            return self.misbehaved(from, "a Written for no copy of its message");
        }
        if h.flags & FLAG_FAILED == 0 {
            return self.part_done(h.aux);
        }
        // It could not write: read that part too.
        if let Some(s) = self.copies.splits.iter().find(|s| s.rreq == h.aux) {
            self.copies.jobs.push(Job::Read {
                rreq: s.rreq,
                from: s.from,
                peer: s.peer,
                src: s.src_rest,
                dst: s.dst_rest,
                len: s.rest,
            });
        }
    }

    /// Whether receive `rreq` is copying from `from`.
    fn copying_from(&self, rreq: u64, from: VcId) -> bool {
        matches!(
            self.requests.get(rreq),
            Some(Req { op: Op::Recv(r), .. })
                if matches!(r.phase, RecvPhase::Copying { from: f, .. } if f == from)
        )
    }

    /// One part of receive `rreq` is in its buffer; after the last, it
    /// completes and the sender hears `Ack`.
    fn part_done(&mut self, rreq: u64) {
        let Some(Req {
            op: Op::Recv(r), ..
        }) = self.requests.get_mut(rreq)
        else {
            return;
        };
        let RecvPhase::Copying { from, parts } = r.phase else {
            return;
        };
        if parts > 1 {
            r.phase = RecvPhase::Copying {
                from,
                parts: parts - 1,
            };
            return;
        }
        r.phase = RecvPhase::Done;
        self.complete(rreq);
        if let Some(i) = self.copies.splits.iter().position(|s| s.rreq == rreq) {
            let s = self.copies.splits.swap_remove(i);
            self.reply(from, control(MsgKind::Ack, s.context, s.sreq));
        }
    }

    /// Receive `rreq` ended otherwise (its peer failed): forget its copy.
    pub(crate) fn forget_copy(&mut self, rreq: u64) {
        self.copies.splits.retain(|s| s.rreq != rreq);
    }
}

impl State {
    /// Run the copies asked for since the last call, with the pids the
    /// shm transport has for its slots (`ShmLink::pids`; none yet: 0, which
    /// no copy reaches); the parts done.
    #[cold]
    pub(crate) fn run_copies(&mut self, pids: &[u32]) -> usize {
        let pid_of = |peer: usize| pids.get(peer).copied().unwrap_or(0);
        let jobs = std::mem::take(&mut self.copies.jobs);
        let done = jobs.len();
        for job in jobs {
            match job {
                Job::Read {
                    rreq,
                    from,
                    peer,
                    src,
                    dst,
                    len,
                } => {
                    let pid = pid_of(peer);
                    if !self.copying_from(rreq, from) {
                        continue;
                    }
                    // SAFETY: a `Copying` receive owns its buffer until it
                    // completes, and `dst..dst+len` lies inside it
                    // (`start_split_copy`); the sender writes only the
                    // other part.
                    let dst = unsafe { std::slice::from_raw_parts_mut(dst, len) };
                    match cma::read(pid, src, dst) {
                        Ok(()) => self.part_done(rreq),
                        // The sender may still write its part: nothing can
                        // end this receive safely but the end of the job.
                        Err(e) => self.fail(format!(
                            "single-copy read from {from} failed in the middle of a message: {e}"
                        )),
                    }
                }
                Job::Write {
                    sreq,
                    to,
                    peer,
                    src,
                    dst,
                    len,
                    rreq,
                    context,
                } => {
                    let Some(Req {
                        op: Op::Send(s), ..
                    }) = self.requests.get_mut(sreq)
                    else {
                        continue;
                    };
                    if s.vc != to {
                        continue;
                    }
                    // SAFETY: the send is not complete (it waits for the
                    // receiver's `Ack`), so its buffer is lent to us, and
                    // `src..src+len` lies inside it (`on_write` checked).
                    let part = unsafe { bytes(src, len) };
                    let pid = pid_of(peer);
                    let ok = pid != 0 && cma::write(pid, dst, part).is_ok();
                    s.written();
                    let mut answer = control(MsgKind::Written, context, sreq);
                    answer.aux = rreq;
                    if !ok {
                        answer.flags = FLAG_FAILED;
                    }
                    self.reply(to, answer);
                }
            }
        }
        done
    }
}

fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::core::Core;
    use crate::post::SendArgs;
    use crate::route::CmaState;
    use crate::state::protocol::tests::{phase, shm_core, shm_pair, state, state_of, violation};
    use crate::table::{SendOp, SendPhase};
    use crate::wire::FLAG_FAILED;

    const CONTEXT: u32 = 7;
    const TAG: i32 = 5;

    /// Ranks 0 and 1 of one node, both in this process (single copy to
    /// ourselves works wherever single copy works at all).
    fn pair(tag: &str) -> Option<(Core, Core)> {
        cma::probe().ok()?;
        let (a, b) = shm_pair(tag);
        let (mut r, mut s) = (
            shm_core(a, state(2, true)),
            shm_core(b, state_of(2, true, 1)),
        );
        for c in [&mut r, &mut s] {
            c.st.split_min = 4096;
            c.progress();
        }
        // As after a first whole read.
        r.st.pgs.vc(VcId::world(1)).unwrap().cma = CmaState::Works;
        Some((r, s))
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }

    fn done(c: &Core, id: u64) -> bool {
        c.st.requests.get(id).is_some_and(|r| r.complete)
    }

    fn start(r: &mut Core, s: &mut Core, src: &[u8], dst: &mut [u8]) -> (u64, u64) {
        let rreq = r.start_recv(CONTEXT, dst.as_mut_ptr(), dst.len(), 1, None, TAG);
        let sreq = s
            .start_send(&SendArgs {
                context: CONTEXT,
                src: 1,
                buf: src.as_ptr(),
                len: src.len(),
                dest: VcId::world(0),
                tag: TAG,
                sync: false,
            })
            .unwrap();
        (rreq, sreq)
    }

    #[test]
    fn both_sides_copy_and_the_bytes_arrive() {
        let Some((mut r, mut s)) = pair("split") else {
            return eprintln!("skipping: no single copy here");
        };
        for len in [4096 * 3 + 1, 1 << 20, 5000] {
            let src = pattern(len);
            let mut dst = vec![0u8; len];
            let (rreq, sreq) = start(&mut r, &mut s, &src, &mut dst);
            for _ in 0..1000 {
                if done(&r, rreq) && done(&s, sreq) {
                    break;
                }
                s.progress();
                r.progress();
            }
            assert!(
                done(&r, rreq) && done(&s, sreq),
                "{len} bytes: not finished"
            );
            assert!(dst == src, "{len} bytes: wrong data");
        }
        assert_eq!((r.st.copies.shared, r.st.copies.whole), (3, 0));
    }

    #[test]
    fn a_refused_write_is_read_by_the_receiver() {
        let Some((mut r, mut s)) = pair("split-refused") else {
            return eprintln!("skipping: no single copy here");
        };
        let src = pattern(100_000);
        let mut dst = vec![0u8; src.len()];
        let (rreq, sreq) = start(&mut r, &mut s, &src, &mut dst);
        // The Rts reaches the receiver, which asks for a Write and reads
        // its part; the sender's side swallows the Write and says it failed.
        r.progress();
        let mut asked = None;
        let shm = s.tx.shm.as_mut().unwrap().node_mut();
        shm.poll(8, |_, h, _| {
            if h.kind() == Some(MsgKind::Write) {
                asked = Some(*h);
            }
        })
        .unwrap();
        let write = asked.expect("a Write");
        let (rest, rreq_on_wire) = (src.len() as u64 - write.len, rreq);
        assert!(rest > 0);
        let mut answer = control(MsgKind::Written, CONTEXT, sreq);
        answer.aux = rreq_on_wire;
        answer.flags = FLAG_FAILED;
        assert!(shm.try_send(0, &answer, &[]).unwrap());
        for _ in 0..100 {
            r.progress();
        }
        assert!(done(&r, rreq));
        assert!(dst == src, "the receiver read the refused part itself");
    }

    /// A State-only sender: rank 0, peer 1 on shared memory.
    fn sender() -> (State, u64) {
        let mut st = state(3, true);
        let id = st.requests.insert(Req {
            op: Op::Send(SendOp::new(
                VcId::world(1),
                [0u8; 0].as_ptr(),
                8192,
                CONTEXT,
                TAG,
                false,
                false,
            )),
            status: Default::default(),
            complete: false,
            detached: false,
        });
        (st, id)
    }

    fn write_msg(sreq: u64, offset: u64, count: u64) -> (WireHeader, Vec<u8>) {
        let mut h = control(MsgKind::Write, CONTEXT, sreq);
        h.len = offset;
        h.aux = 0x1000;
        let mut p = count.to_le_bytes().to_vec();
        p.extend_from_slice(&9u64.to_le_bytes());
        (h, p)
    }

    #[test]
    fn a_write_is_taken_once_within_the_message() {
        let (mut st, id) = sender();
        let (h, p) = write_msg(id, 4096, 4096);
        st.deliver(VcId::world(1), &h, &p);
        assert_eq!(phase(&st, id), Some(SendPhase::Writing));
        assert!(st.copies.busy());
        // A second one is refused, and so is an Ack before our part.
        st.deliver(VcId::world(1), &h, &p);
        assert!(violation(&st, 1));
    }

    #[test]
    fn forged_writes_are_refused() {
        // Beyond the message.
        let (mut st, id) = sender();
        let (h, p) = write_msg(id, 4096, 4097);
        st.deliver(VcId::world(1), &h, &p);
        assert!(violation(&st, 1) && !st.copies.busy());
        // From a peer the send is not for.
        let (mut st, id) = sender();
        let (h, p) = write_msg(id, 0, 10);
        st.deliver(VcId::world(2), &h, &p);
        assert!(violation(&st, 2) && !st.copies.busy());
        assert_eq!(phase(&st, id), Some(SendPhase::RtsSent));
        // Without its count and receive.
        let (mut st, id) = sender();
        let (h, _) = write_msg(id, 0, 10);
        st.deliver(VcId::world(1), &h, &[1, 2, 3]);
        assert!(violation(&st, 1) && !st.copies.busy());
        // An Ack while our part is being written.
        let (mut st, id) = sender();
        let (h, p) = write_msg(id, 0, 10);
        st.deliver(VcId::world(1), &h, &p);
        st.deliver(VcId::world(1), &control(MsgKind::Ack, CONTEXT, id), &[]);
        assert!(violation(&st, 1));
    }

    #[test]
    fn a_written_for_no_copy_is_refused() {
        let mut st = state(2, true);
        let mut buf = [0u8; 16];
        let rreq = st.requests.insert(Req {
            op: Op::Recv(crate::table::RecvOp {
                buf: buf.as_mut_ptr(),
                cap: buf.len(),
                source: 1,
                source_vc: Some(VcId::world(1)),
                phase: RecvPhase::Posted,
            }),
            status: Default::default(),
            complete: false,
            detached: false,
        });
        let mut h = control(MsgKind::Written, CONTEXT, 1);
        h.aux = rreq;
        st.deliver(VcId::world(1), &h, &[]);
        assert!(violation(&st, 1));
        assert!(
            st.requests.get(rreq).is_some_and(|r| r.complete),
            "failed with its peer"
        );
    }
}
