//! Test payloads: pseudo-random bytes seeded by what identifies a message
//! (sender, sequence, size), so no two messages and no two places in one
//! message look alike and a misplaced piece cannot hide in a short period.
//! The rank programs (`engine_check`, `cancel_race`) share them.

/// SplitMix64's finaliser: spreads a seed over all bits.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One seed from several identifying numbers.
pub fn seed_of(parts: &[u64]) -> u64 {
    parts.iter().fold(0x243F_6A88_85A3_08D3, |h, &p| mix(h ^ p))
}

/// One step of xorshift64.
pub fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// Fill `buf` with the pattern of `seed` (8 bytes per step).
pub fn fill(buf: &mut [u8], seed: u64) {
    let mut x = mix(seed) | 1;
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        x = xorshift(x);
        c.copy_from_slice(&x.to_le_bytes());
    }
    let tail = chunks.into_remainder();
    if !tail.is_empty() {
        x = xorshift(x);
        let n = tail.len();
        tail.copy_from_slice(&x.to_le_bytes()[..n]);
    }
}

/// `len` bytes of the pattern of `seed`.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0; len];
    fill(&mut v, seed);
    v
}
