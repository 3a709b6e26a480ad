//! Copying a short payload without a call into libc's `memcpy`.
//!
//! Eager messages are mostly a few bytes, and a `memcpy` call for 8 bytes
//! costs more than the copy (the call, its length dispatch, the return):
//! the two copies of every shared-memory message (into the ring, out of it
//! into the receive buffer) are on the message-rate path.

/// Lengths up to this are copied inline: an eager payload, and each part
/// of a tcp frame (the engine's header is 48 bytes).
pub const INLINE_MAX: usize = 64;

/// Copy `len` bytes from `src` to `dst`; up to [`INLINE_MAX`] bytes by at
/// most four loads and stores from both ends (overlapping in the middle
/// where `len` is not a multiple of their width), longer ones by
/// `copy_nonoverlapping`. Nothing outside `src..src+len` is read or
/// `dst..dst+len` written.
///
/// # Safety
/// As [`std::ptr::copy_nonoverlapping`]: both ranges valid, not overlapping.
#[inline(always)]
pub unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: in every branch, the caller's contract; each access lies inside
    // the ranges (`len - 8 >= 0` in the 8..16 branch, and so on), and the
    // unaligned forms need no alignment.
    unsafe {
        if len > INLINE_MAX {
            std::ptr::copy_nonoverlapping(src, dst, len);
        } else if len > 32 {
            let a = src.cast::<u128>().read_unaligned();
            let b = src.add(16).cast::<u128>().read_unaligned();
            let c = src.add(len - 32).cast::<u128>().read_unaligned();
            let d = src.add(len - 16).cast::<u128>().read_unaligned();
            dst.cast::<u128>().write_unaligned(a);
            dst.add(16).cast::<u128>().write_unaligned(b);
            dst.add(len - 32).cast::<u128>().write_unaligned(c);
            dst.add(len - 16).cast::<u128>().write_unaligned(d);
        } else if len >= 16 {
            let a = src.cast::<u128>().read_unaligned();
            let b = src.add(len - 16).cast::<u128>().read_unaligned();
            dst.cast::<u128>().write_unaligned(a);
            dst.add(len - 16).cast::<u128>().write_unaligned(b);
        } else if len >= 8 {
            let a = src.cast::<u64>().read_unaligned();
            let b = src.add(len - 8).cast::<u64>().read_unaligned();
            dst.cast::<u64>().write_unaligned(a);
            dst.add(len - 8).cast::<u64>().write_unaligned(b);
        } else if len >= 4 {
            let a = src.cast::<u32>().read_unaligned();
            let b = src.add(len - 4).cast::<u32>().read_unaligned();
            dst.cast::<u32>().write_unaligned(a);
            dst.add(len - 4).cast::<u32>().write_unaligned(b);
        } else {
            for i in 0..len {
                *dst.add(i) = *src.add(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{copy_bytes, INLINE_MAX};

    #[test]
    fn every_length_up_to_past_the_inline_limit_copies_exactly_its_bytes() {
        for len in 0..=INLINE_MAX + 8 {
            let src: Vec<u8> = (0..len as u8)
                .map(|b| b.wrapping_mul(7).wrapping_add(1))
                .collect();
            // Guard bytes on both sides of the destination must survive.
            let mut dst = vec![0xEEu8; len + 16];
            // SAFETY: `src` has `len` bytes, `dst[8..]` at least `len`.
            unsafe { copy_bytes(src.as_ptr(), dst.as_mut_ptr().add(8), len) };
            assert_eq!(&dst[8..8 + len], &src[..], "len {len}");
            assert!(
                dst[..8].iter().all(|&b| b == 0xEE),
                "len {len}: wrote before"
            );
            assert!(
                dst[8 + len..].iter().all(|&b| b == 0xEE),
                "len {len}: wrote after"
            );
        }
    }
}
