//! One-sided reads (`Rma`) where the provider has `FI_RMA`: regions are
//! registered for remote reads, and reads complete in the netmod's one
//! completion queue (found by their context like every operation).
//!
//! How a region is named to peers follows the provider's `mr_mode`:
//! - `FI_MR_VIRT_ADDR`: by virtual address; keys are ours (`next_key`) or,
//!   with `FI_MR_PROV_KEY`, the provider's.
//! - offsets from the region's start (`tcp;ofi_rxm`): the engine passes
//!   addresses, so our key carries the region's base, `1 << 63 | serial
//!   << 48 | base`, and the reader turns the address into an offset. This
//!   needs keys of our choosing and 8-byte keys (`provider::rma_mode`
//!   refuses RMA otherwise) and bases below 2^48 (user-space addresses
//!   are).
//!
//! `FI_MR_LOCAL`: the local buffer of a read is registered for it.
//! `FI_MR_ENDPOINT`: regions are bound to the endpoint and enabled.
//! `FI_MR_ALLOCATED`: the engine registers only memory it has allocated.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::time::{Duration, Instant};

use crate::{FxBuildHasher, NetmodError, PeerId, Rma};

use super::fid::Mr;
use super::ops::OpKind;
use super::send::process_exists;
use super::sys::{fi_cancel, FI_READ, FI_REMOTE_READ};
use super::OfiNetmod;

/// Bases of offset-named regions fit below this.
const BASE_LIMIT: u64 = 1 << 48;

/// Registered regions and read results not yet reported.
#[derive(Default)]
pub(crate) struct Regions {
    regs: HashMap<u64, Mr, FxBuildHasher>,
    serial: u64,
    next_token: u64,
    /// Reads that completed.
    pub done: Vec<u64>,
    /// Reads that failed: (token, peer, why).
    pub failed: VecDeque<(u64, PeerId, String)>,
}

fn rma_err(what: String) -> NetmodError {
    NetmodError::Io {
        what: "ofi rma".into(),
        source: io::Error::other(what),
    }
}

/// The offset-mode key for a region at `base`.
pub(crate) fn offset_key(serial: u64, base: u64) -> u64 {
    1 << 63 | (serial & 0x7fff) << 48 | base
}

/// Where `addr` lies in the offset-named region with `key`.
pub(crate) fn offset_of(key: u64, addr: u64) -> Option<u64> {
    addr.checked_sub(key & (BASE_LIMIT - 1))
}

impl Rma for OfiNetmod {
    fn register(&mut self, addr: usize, len: usize) -> Result<u64, NetmodError> {
        let mode = self.chosen.rma.clone().map_err(rma_err)?;
        let key = if mode.prov_key {
            0
        } else if mode.virt {
            self.take_key()
        } else {
            if addr as u64 >= BASE_LIMIT {
                return Err(rma_err(format!("address {addr:#x} above 2^48")));
            }
            self.regions.serial += 1;
            offset_key(self.regions.serial, addr as u64)
        };
        // SAFETY: registering touches no memory by itself; the engine keeps
        // registered memory allocated until `deregister` (the Rma contract),
        // and the region is closed then, or with the netmod.
        let mr = unsafe {
            self.base
                .domain
                .register(addr as *const u8, len, FI_REMOTE_READ, key)
        }
        .map_err(|e| rma_err(e.to_string()))?;
        if mode.endpoint {
            mr.bind_enable(&self.ep)
                .map_err(|e| rma_err(e.to_string()))?;
        }
        let key = if mode.prov_key { mr.key() } else { key };
        if self.regions.regs.contains_key(&key) {
            return Err(rma_err(format!("key {key:#x} is in use")));
        }
        self.regions.regs.insert(key, mr);
        Ok(key)
    }

    fn deregister(&mut self, key: u64) -> Result<(), NetmodError> {
        match self.regions.regs.remove(&key) {
            Some(_) => Ok(()),
            None => Err(rma_err(format!("no region with key {key:#x}"))),
        }
    }

    unsafe fn read(
        &mut self,
        peer: PeerId,
        local: *mut u8,
        len: usize,
        remote_addr: u64,
        key: u64,
    ) -> Result<u64, NetmodError> {
        let err = |what: String| NetmodError::Peer { peer, what };
        let mode = self.chosen.rma.clone().map_err(rma_err)?;
        let c = self
            .st
            .conn_of(peer)
            .ok_or_else(|| err("not connected (no connect call)".into()))?;
        if let Some(why) = &c.failed {
            return Err(err(why.clone()));
        }
        let src = c.addr;
        // A same-node provider would queue the read to a dead process,
        // where nobody ever serves or ends it (`shm`): its process id tells
        // first, as in the keepalive round.
        if let Some(&pid) = self.st.pids.get(&src) {
            if !process_exists(pid) {
                let why = format!("its process ({pid}) has exited");
                if let Some(&id) = self.st.peers.get(&peer) {
                    self.fail_conn(id, why.clone());
                }
                return Err(err(why));
            }
        }
        let remote = if mode.virt {
            remote_addr
        } else {
            offset_of(key, remote_addr)
                .ok_or_else(|| err(format!("address {remote_addr:#x} below its region")))?
        };
        let mr = self
            .local_mr(local, len, FI_READ)
            .map_err(|e| err(e.to_string()))?;
        let token = self.regions.next_token;
        self.regions.next_token += 1;
        let op = OpKind::Read {
            token,
            peer,
            local,
            len,
            src,
            remote,
            key,
        };
        let ctx = self.ops.add(op, mr);
        self.post_read(ctx).map_err(|e| err(e.to_string()))?;
        Ok(token)
    }

    /// Cancels the peer's reads (`fi_cancel`; providers may not cancel
    /// reads, then they finish or fail) and reaps until none is left,
    /// keeping receive completions for the next `poll`, for at most the
    /// timeout (`stuck_reads` counts the peers given up on).
    fn stop_reads(&mut self, peer: PeerId) -> bool {
        let reads = self.ops.reads_from(Some(peer));
        if reads.is_empty() {
            return true;
        }
        for ctx in reads {
            // SAFETY: a live endpoint; `ctx` is a posted read of ours.
            unsafe { fi_cancel(self.ep.raw(), ctx) };
        }
        let deadline = Instant::now() + self.cfg.timeout;
        loop {
            // Reads end in `complete_local` (a failed one fails its peer,
            // already failed here), sends too; receives wait in `deferred`.
            self.reap(None);
            if self.ops.reads_from(Some(peer)).is_empty() {
                return true;
            }
            if Instant::now() > deadline {
                self.stuck_reads += 1;
                return false;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    fn poll_reads(&mut self, done: &mut dyn FnMut(u64, Result<(), String>)) {
        self.reap(None);
        self.work();
        for t in self.regions.done.drain(..) {
            done(t, Ok(()));
        }
        for (token, peer, why) in self.regions.failed.drain(..) {
            done(
                token,
                Err(format!("rma read from peer {peer:#x} failed: {why}")),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_keys() {
        let k = offset_key(0x8001, 0x7fff_0000_1000);
        assert_eq!(k >> 63, 1);
        assert_eq!((k >> 48) & 0x7fff, 1, "serial wraps at 15 bits");
        assert_eq!(offset_of(k, 0x7fff_0000_1010), Some(0x10));
        assert_eq!(offset_of(k, 0x7fff_0000_0fff), None);
    }
}
