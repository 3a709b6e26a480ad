//! Writing one frame (prefix, header, payload) into memory, the step every
//! message's send takes: into a stack buffer for a direct send
//! (`sys::send_frame`) or onto a peer's queue (`Outq::push`).
//!
//! The parts are short (an 8-byte prefix, the engine's 48-byte header, a
//! payload of often a few bytes), so they are copied by a few unaligned
//! loads and stores rather than calls into libc's `memcpy`, whose call and
//! length dispatch cost more than such a copy (callgrind, 8 B ping-pong:
//! `sys::send` 184 instructions a message with its three `memcpy` calls).

use super::wire::{self, PREFIX};

/// Parts up to this long are copied inline; longer ones by `memcpy`.
const INLINE_MAX: usize = 64;

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
        copy(header.as_ptr(), dst.add(PREFIX), header.len());
        copy(
            payload.as_ptr(),
            dst.add(PREFIX + header.len()),
            payload.len(),
        );
    }
}

/// Copy `n` bytes from `src` to `dst`, touching nothing outside either
/// range: up to `INLINE_MAX` bytes by at most four unaligned loads and
/// stores, from both ends (overlapping in the middle where `n` is not a
/// multiple of the width), longer ones by `copy_nonoverlapping`.
///
/// # Safety
/// As [`std::ptr::copy_nonoverlapping`]: both ranges valid, not overlapping.
#[inline(always)]
unsafe fn copy(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY: every access below lies inside `src..src+n` / `dst..dst+n`
    // (each branch's bounds keep `n - width >= 0`), and the unaligned forms
    // need no alignment.
    unsafe {
        if n > INLINE_MAX {
            std::ptr::copy_nonoverlapping(src, dst, n);
        } else if n > 32 {
            let a = src.cast::<u128>().read_unaligned();
            let b = src.add(16).cast::<u128>().read_unaligned();
            let c = src.add(n - 32).cast::<u128>().read_unaligned();
            let d = src.add(n - 16).cast::<u128>().read_unaligned();
            dst.cast::<u128>().write_unaligned(a);
            dst.add(16).cast::<u128>().write_unaligned(b);
            dst.add(n - 32).cast::<u128>().write_unaligned(c);
            dst.add(n - 16).cast::<u128>().write_unaligned(d);
        } else if n >= 16 {
            let a = src.cast::<u128>().read_unaligned();
            let b = src.add(n - 16).cast::<u128>().read_unaligned();
            dst.cast::<u128>().write_unaligned(a);
            dst.add(n - 16).cast::<u128>().write_unaligned(b);
        } else if n >= 8 {
            let a = src.cast::<u64>().read_unaligned();
            let b = src.add(n - 8).cast::<u64>().read_unaligned();
            dst.cast::<u64>().write_unaligned(a);
            dst.add(n - 8).cast::<u64>().write_unaligned(b);
        } else if n >= 4 {
            let a = src.cast::<u32>().read_unaligned();
            let b = src.add(n - 4).cast::<u32>().read_unaligned();
            dst.cast::<u32>().write_unaligned(a);
            dst.add(n - 4).cast::<u32>().write_unaligned(b);
        } else {
            for i in 0..n {
                *dst.add(i) = *src.add(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
