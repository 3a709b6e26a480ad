//! Writing one frame (prefix, header, payload) into memory, the step every
//! message's send takes: into a stack buffer for a direct send
//! (`sys::send_frame`) or onto a peer's queue (`Outq::push`).
//!
//! The parts are short (an 8-byte prefix, the engine's 48-byte header, a
//! payload of often a few bytes), so they are copied by a few unaligned
//! loads and stores rather than calls into libc's `memcpy`, whose call and
//! length dispatch cost more than such a copy (callgrind, 8 B ping-pong:
//! `sys::send` 184 instructions a message with its three `memcpy` calls):
//! `rivet_lockfree::small_copy`, the copy shared memory's ring uses.

use rivet_lockfree::small_copy::copy_bytes;

use super::wire::{self, PREFIX};

/// The frame's length: prefix, header and payload.
#[inline(always)]
pub(crate) fn len(header: &[u8], payload: &[u8]) -> usize {
    PREFIX + header.len() + payload.len()
}

/// Write the frame of `header` and `payload` at `dst`.
///
/// # Safety
/// `dst` must be valid for writes of `len(header, payload)` bytes that
/// overlap neither `header` nor `payload`.
#[inline(always)]
pub(crate) unsafe fn write(dst: *mut u8, header: &[u8], payload: &[u8]) {
    let prefix = wire::encode_prefix(header.len(), payload.len());
    // SAFETY: the caller's contract covers the `PREFIX + header.len() +
    // payload.len()` bytes written here, in three adjacent pieces.
    unsafe {
        dst.cast::<[u8; PREFIX]>().write_unaligned(prefix);
        copy_bytes(header.as_ptr(), dst.add(PREFIX), header.len());
        copy_bytes(
            payload.as_ptr(),
            dst.add(PREFIX + header.len()),
            payload.len(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rivet_lockfree::small_copy::INLINE_MAX;

    /// The frame as the receiver parses it, built the plain way.
    fn expected(header: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut v = wire::encode_prefix(header.len(), payload.len()).to_vec();
        v.extend_from_slice(header);
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn every_part_length_writes_exactly_the_frame() {
        let src: Vec<u8> = (0..200u32).map(|i| (i * 7 + 1) as u8).collect();
        for h in [
            0, 1, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 130,
        ] {
            for p in 0..=INLINE_MAX + 3 {
                let (header, payload) = (&src[..h], &src[h..h + p]);
                let n = len(header, payload);
                // Guard bytes on both sides must survive.
                let mut buf = vec![0xEEu8; n + 32];
                // SAFETY: `buf[16..]` has `n + 16` bytes, apart from `src`.
                unsafe { write(buf.as_mut_ptr().add(16), header, payload) };
                assert_eq!(&buf[16..16 + n], &expected(header, payload)[..], "{h}/{p}");
                assert!(buf[..16].iter().all(|&b| b == 0xEE), "{h}/{p}: before");
                assert!(buf[16 + n..].iter().all(|&b| b == 0xEE), "{h}/{p}: after");
            }
        }
    }
}
