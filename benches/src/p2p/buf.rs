//! Page-aligned message buffers, the pattern they are filled with and its
//! check on the receiving side.

use std::alloc::{alloc, dealloc, Layout};
use std::sync::atomic::Ordering;

use rivet::{Comm, Threading};

use crate::p2p::{check, RANK, TAG_VERIFY};

/// A zero-copy-friendly buffer: page-aligned (`posix_memalign(4096)`, as
/// the peers' `mpi_p2p.c`), filled so every page is touched before timing.
pub(crate) struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

impl AlignedBuf {
    pub(crate) fn new(len: usize, fill: u8) -> AlignedBuf {
        let layout = Layout::from_size_align(len.max(1), 4096).expect("buffer layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: `ptr` is a fresh allocation of at least `len` bytes.
        unsafe { ptr.write_bytes(fill, len.max(1)) };
        AlignedBuf { ptr, len }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` holds `len` initialised bytes owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len.max(1), 4096).expect("buffer layout");
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, layout) };
    }
}

// SAFETY: AlignedBuf owns its memory exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: as for Vec<u8>: `&AlignedBuf` only gives out `&[u8]`.
unsafe impl Sync for AlignedBuf {}

/// The bytes rank `rank` sends: a pseudo-random stream seeded by the
/// sender (no period a misplaced piece could hide in).
pub(crate) fn pattern(rank: u32, buf: &mut [u8]) {
    let mut x = (u64::from(rank) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// Once per size, after its timing: one `size`-byte exchange each way
/// into a cleared buffer, checked byte for byte against the sender's
/// pattern, so no benchmark times a path that delivers wrong bytes.
pub(crate) fn verify<T: Threading>(
    comm: &Comm<T>,
    sbuf: &AlignedBuf,
    rbuf: &mut AlignedBuf,
    size: usize,
) {
    let rank = comm.rank();
    let peer = 1 - rank;
    let r = &mut rbuf.as_mut_slice()[..size];
    r.fill(0);
    let s = &sbuf.as_slice()[..size];
    let st = if rank == 0 {
        check("verify send", comm.send(s, peer, TAG_VERIFY));
        check("verify recv", comm.recv(r, peer as i32, TAG_VERIFY))
    } else {
        let st = check("verify recv", comm.recv(r, peer as i32, TAG_VERIFY));
        check("verify send", comm.send(s, peer, TAG_VERIFY));
        st
    };
    if st.count != size {
        die_count(size, st.count);
    }
    let mut want = vec![0u8; size];
    pattern(peer, &mut want);
    if let Some(at) = r.iter().zip(&want).position(|(a, b)| a != b) {
        eprintln!(
            "rivet-bench: rank {rank}: a {size}-byte message from rank {peer} is wrong at byte {at}"
        );
        std::process::exit(1);
    }
}

pub(crate) fn die_count(expected: usize, got: usize) -> ! {
    let rank = RANK.load(Ordering::Relaxed);
    eprintln!("rivet-bench: rank {rank}: received {got} bytes, expected {expected}");
    std::process::exit(1)
}
