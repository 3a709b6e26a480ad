//! Posting to the provider: send buffers and their pool, memory
//! registration keys, the generic receives, payload receives into the
//! engine's memory, and sends (injected, or from a copy the operation
//! owns). Everything here runs inside `try_send`, `poll`, `disconnect` or
//! the RMA calls; nothing runs on its own.

use std::ptr;

use libc::c_void;

use super::fid::{FiError, Mr};
use super::ops::{Dest, OpKind};
use super::pool::PageBuf;
use super::sys::*;
use super::wire::*;
use super::OfiNetmod;

/// Spare send buffers kept.
pub(super) const POOL_MAX: usize = 64;

pub(super) enum PostErr {
    /// The provider is full for now; the bytes come back.
    Again(Vec<u8>),
    Failed(FiError),
}

pub(super) fn again(r: isize) -> bool {
    r == -(FI_EAGAIN as isize)
}

impl OfiNetmod {
    pub(super) fn buf(&mut self, len: usize) -> Vec<u8> {
        if len <= self.slot {
            if let Some(b) = self.pool.pop() {
                return b;
            }
            return Vec::with_capacity(self.slot);
        }
        Vec::with_capacity(len)
    }

    pub(super) fn recycle(&mut self, mut b: Vec<u8>) {
        if b.capacity() >= self.slot && b.capacity() <= 2 * self.slot && self.pool.len() < POOL_MAX
        {
            b.clear();
            self.pool.push(b);
        }
    }

    pub(super) fn take_key(&mut self) -> u64 {
        let k = self.next_key;
        self.next_key += 1;
        k
    }

    /// A registration of `p..p+len` for a local operation where the
    /// provider requires one (`FI_MR_LOCAL`), else `None`.
    pub(super) fn local_mr(
        &mut self,
        p: *const u8,
        len: usize,
        access: u64,
    ) -> Result<Option<Mr>, FiError> {
        if !self.chosen.mr_local || len == 0 {
            return Ok(None);
        }
        let key = self.take_key();
        // SAFETY: the memory belongs to the operation the region is made
        // for (or is the engine's, valid until that operation completes);
        // the region is stored in the operation and closes with it.
        let mr = unsafe { self.base.domain.register(p, len, access, key)? };
        if self.chosen.mr_mode & FI_MR_ENDPOINT != 0 {
            mr.bind_enable(&self.ep)?;
        }
        Ok(Some(mr))
    }

    /// Adds and posts one generic receive buffer.
    pub(super) fn add_generic_recv(&mut self) -> Result<(), FiError> {
        let buf = PageBuf::new(self.slot).map_err(|e| FiError {
            code: e.raw_os_error().unwrap_or(libc::ENOMEM),
            what: "mmap of a receive buffer",
        })?;
        let mr = self.local_mr(buf.as_ptr(), buf.len(), FI_RECV)?;
        let ctx = self.ops.add(OpKind::Recv { buf }, mr);
        self.generic += 1;
        self.post_rx(ctx)
    }

    /// Posts the receive operation `ctx`; if the provider says "again" it
    /// is kept for the next poll. On an error the operation is dropped.
    pub(super) fn post_rx(&mut self, ctx: *mut c_void) -> Result<(), FiError> {
        let Some(op) = self.ops.get_mut(ctx) else {
            return Ok(());
        };
        let desc = op.mr.as_ref().map_or(ptr::null_mut(), |m| m.desc());
        let (p, len, tag, ignore) = match &mut op.kind {
            OpKind::Recv { buf } => (buf.as_mut_ptr(), buf.len(), ANY_TAG, ANY_IGNORE),
            OpKind::Payload { dst, len, tag, .. } => {
                let p = match dst {
                    Dest::Engine(p) => p.as_ptr(),
                    Dest::Own(v) => v.as_mut_ptr(),
                };
                (p, *len, *tag, 0)
            }
            OpKind::Drain { buf, tag } => (buf.as_mut_ptr(), buf.len(), *tag, 0),
            _ => return Ok(()),
        };
        // SAFETY: the buffer is the operation's own, or the engine's
        // placement memory, which stays valid until this receive completes
        // (delivery, or `quiesce` stops it first); the context lives until
        // its completion is read.
        let r = unsafe {
            fi_trecv(
                self.ep.raw(),
                p.cast(),
                len,
                desc,
                FI_ADDR_UNSPEC,
                tag,
                ignore,
                ctx,
            )
        };
        self.posted(r, ctx, "fi_trecv")
    }

    /// The outcome of posting `ctx`: done, kept in `unposted` for the next
    /// poll on "again", or dropped with the error.
    pub(super) fn posted(
        &mut self,
        r: isize,
        ctx: *mut c_void,
        what: &'static str,
    ) -> Result<(), FiError> {
        if r == 0 {
            return Ok(());
        }
        if again(r) {
            self.unposted.push(ctx as usize);
            return Ok(());
        }
        self.ops.take(ctx);
        Err(FiError {
            code: (-r) as i32,
            what,
        })
    }

    /// Posts the RMA read `ctx` (kept for later on "again").
    pub(super) fn post_read(&mut self, ctx: *mut c_void) -> Result<(), FiError> {
        let Some(op) = self.ops.get_mut(ctx) else {
            return Ok(());
        };
        let desc = op.mr.as_ref().map_or(ptr::null_mut(), |m| m.desc());
        let OpKind::Read {
            local,
            len,
            src,
            remote,
            key,
            ..
        } = op.kind
        else {
            return Ok(());
        };
        // SAFETY: `local..local+len` stays writable until the read
        // completes (`Rma::read` contract); the context lives until then.
        let r = unsafe {
            fi_read(
                self.ep.raw(),
                local.cast(),
                len,
                desc,
                src,
                remote,
                key,
                ctx,
            )
        };
        self.posted(r, ctx, "fi_read")
    }

    /// Sends `body[off..]` to `addr` with `tag`: injected if small, else
    /// from `body`, which the operation keeps until its completion.
    pub(super) fn post_send(
        &mut self,
        conn: Option<u32>,
        addr: fi_addr_t,
        tag: u64,
        body: Vec<u8>,
        off: usize,
    ) -> Result<(), PostErr> {
        self.post_send_op(conn, addr, tag, body, off, false)
    }

    /// `post_send`; an `optional` operation is not counted by `idle`.
    pub(super) fn post_send_op(
        &mut self,
        conn: Option<u32>,
        addr: fi_addr_t,
        tag: u64,
        body: Vec<u8>,
        off: usize,
        optional: bool,
    ) -> Result<(), PostErr> {
        let len = body.len() - off;
        if self.chosen.inject > 0 && len <= self.chosen.inject {
            // SAFETY: the bytes are readable; inject copies them before
            // returning.
            let r =
                unsafe { fi_tinject(self.ep.raw(), body[off..].as_ptr().cast(), len, addr, tag) };
            return match r {
                0 => {
                    self.recycle(body);
                    Ok(())
                }
                r if again(r) => Err(PostErr::Again(body)),
                r => Err(PostErr::Failed(FiError {
                    code: (-r) as i32,
                    what: "fi_tinject",
                })),
            };
        }
        let mr = self
            .local_mr(body.as_ptr(), body.len(), FI_SEND)
            .map_err(PostErr::Failed)?;
        let desc = mr.as_ref().map_or(ptr::null_mut(), |m| m.desc());
        // The heap bytes do not move when the vector moves into the op.
        // SAFETY: `off <= body.len()`.
        let p = unsafe { body.as_ptr().add(off) };
        let ctx = self.ops.add(
            OpKind::Send {
                conn,
                buf: body,
                optional,
            },
            mr,
        );
        // SAFETY: the bytes belong to the operation just added, which
        // lives until its completion is read.
        let r = unsafe { fi_tsend(self.ep.raw(), p.cast(), len, desc, addr, tag, ctx) };
        if r == 0 {
            if let Some(c) = conn.and_then(|id| self.st.conns.get_mut(&id)) {
                c.inflight += len + off;
            }
            return Ok(());
        }
        let body = match self.ops.take(ctx).map(|op| op.kind) {
            Some(OpKind::Send { buf, .. }) => buf,
            _ => Vec::new(),
        };
        if again(r) {
            Err(PostErr::Again(body))
        } else {
            Err(PostErr::Failed(FiError {
                code: (-r) as i32,
                what: "fi_tsend",
            }))
        }
    }
}
