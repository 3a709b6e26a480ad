//! Proof that a connecting process belongs to our job.
//!
//! A HELLO that only names a job and a rank can be sent by anyone who can
//! reach the listener and guess the job name. rivetrun gives every process
//! of a job a random 128-bit secret (`RIVET_JOB_SECRET`, hex); a
//! connector then tags its HELLO to a rank of its own job with a MAC over
//! (kind, its rank, the target's rank, the job, a fresh random nonce),
//! keyed by the secret, and the acceptor checks it. The MAC is
//! SipHash-2-4, a keyed pseudo-random function made for short inputs (64
//! bits out); the target's rank in it keeps a HELLO seen by one rank from
//! being replayed to another. Without the variable (Hydra, singletons,
//! external start-up) nothing is checked, as before.
//!
//! Between jobs (accept/connect, spawn, group connect) a rank proves its
//! job with the job's *group key* ([`JobKey::group_key`]), derived from
//! the secret and carried in the group description the connect step
//! exchanges: the other job learns a key good only for HELLOs between
//! jobs, never the secret that admits a rank into our own job.

use std::fmt;

/// The variable rivetrun passes the job secret in.
pub const JOB_SECRET_ENV: &str = "RIVET_JOB_SECRET";

/// The job secret. Its `Debug` does not show it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct JobKey([u8; 16]);

impl fmt::Debug for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JobKey(..)")
    }
}

impl JobKey {
    pub fn new(bytes: [u8; 16]) -> JobKey {
        JobKey(bytes)
    }

    /// 32 hex digits.
    pub fn from_hex(s: &str) -> Result<JobKey, String> {
        let s = s.trim();
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "{JOB_SECRET_ENV} must be 32 hex digits, not {} characters",
                s.len()
            ));
        }
        let mut key = [0u8; 16];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16)
                .map_err(|_| format!("{JOB_SECRET_ENV} must be 32 hex digits"))?;
        }
        Ok(JobKey(key))
    }

    /// The key a process of this job proves itself with to other jobs,
    /// shipped to them in group descriptions. A one-way function of the
    /// secret, so knowing it does not let anyone pose as a rank to its
    /// own job.
    pub fn group_key(&self) -> JobKey {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&self.mac(&[b"rivet group key", &[0]]));
        k[8..].copy_from_slice(&self.mac(&[b"rivet group key", &[1]]));
        JobKey(k)
    }

    /// 32 hex digits (what [`JobKey::from_hex`] reads).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The MAC of the concatenation of `parts`.
    pub fn mac(&self, parts: &[&[u8]]) -> [u8; 8] {
        let k0 = u64::from_le_bytes(self.0[..8].try_into().expect("8 bytes"));
        let k1 = u64::from_le_bytes(self.0[8..].try_into().expect("8 bytes"));
        let mut h = SipHash24::new(k0, k1);
        for p in parts {
            h.write(p);
        }
        h.finish().to_le_bytes()
    }
}

/// The job secret from the environment (`RIVET_JOB_SECRET`), if set.
pub fn job_key_from_env() -> Result<Option<JobKey>, String> {
    match rivet_settings::var(JOB_SECRET_ENV) {
        Some(v) if !v.trim().is_empty() => JobKey::from_hex(&v).map(Some),
        _ => Ok(None),
    }
}

/// Byte strings compared in time that depends on their length only.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Eight bytes from the kernel's random source (a nonce: never repeats in
/// practice; if the source fails, time and pid make one unlikely to).
pub fn nonce() -> [u8; 8] {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most 8 bytes into `b`, which we own.
    let got = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), libc::GRND_NONBLOCK) };
    if got != b.len() as isize {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        b = (t ^ (u64::from(std::process::id()) << 40)).to_le_bytes();
    }
    b
}

/// SipHash-2-4 (Aumasson and Bernstein), fed incrementally.
struct SipHash24 {
    v: [u64; 4],
    /// Bytes not yet making a whole word, and how many.
    tail: u64,
    ntail: usize,
    len: u64,
}

impl SipHash24 {
    fn new(k0: u64, k1: u64) -> SipHash24 {
        SipHash24 {
            v: [
                k0 ^ 0x736f_6d65_7073_6575,
                k1 ^ 0x646f_7261_6e64_6f6d,
                k0 ^ 0x6c79_6765_6e65_7261,
                k1 ^ 0x7465_6462_7974_6573,
            ],
            tail: 0,
            ntail: 0,
            len: 0,
        }
    }

    fn round(&mut self) {
        let v = &mut self.v;
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }

    fn word(&mut self, m: u64) {
        self.v[3] ^= m;
        self.round();
        self.round();
        self.v[0] ^= m;
    }

    fn write(&mut self, bytes: &[u8]) {
        self.len = self.len.wrapping_add(bytes.len() as u64);
        for &b in bytes {
            self.tail |= u64::from(b) << (8 * self.ntail);
            self.ntail += 1;
            if self.ntail == 8 {
                let m = std::mem::take(&mut self.tail);
                self.ntail = 0;
                self.word(m);
            }
        }
    }

    fn finish(mut self) -> u64 {
        let last = self.tail | ((self.len & 0xff) << 56);
        self.word(last);
        self.v[2] ^= 0xff;
        for _ in 0..4 {
            self.round();
        }
        self.v[0] ^ self.v[1] ^ self.v[2] ^ self.v[3]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siphash_matches_the_reference_vector_and_std() {
        // The SipHash paper's test vector: key 00..0f, message 00..0e.
        let key: [u8; 16] = std::array::from_fn(|i| i as u8);
        let msg: Vec<u8> = (0..15).collect();
        let k = JobKey::new(key);
        assert_eq!(u64::from_le_bytes(k.mac(&[&msg])), 0xa129_ca61_49be_45e5);
        // std's (deprecated) SipHasher is SipHash-2-4 too: every length,
        // split anywhere.
        let (k0, k1) = (
            u64::from_le_bytes(key[..8].try_into().unwrap()),
            u64::from_le_bytes(key[8..].try_into().unwrap()),
        );
        let long: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37)).collect();
        for n in 0..long.len() {
            #[allow(deprecated)]
            let mut std_h = std::hash::SipHasher::new_with_keys(k0, k1);
            std::hash::Hasher::write(&mut std_h, &long[..n]);
            let want = std::hash::Hasher::finish(&std_h);
            let (a, b) = long[..n].split_at(n / 3);
            assert_eq!(u64::from_le_bytes(k.mac(&[a, b])), want, "length {n}");
        }
    }

    #[test]
    fn keys_parse_from_hex_only() {
        let k = JobKey::from_hex("000102030405060708090a0b0c0d0e0f").unwrap();
        assert_eq!(k, JobKey::new(std::array::from_fn(|i| i as u8)));
        for bad in [
            "",
            "00",
            "zz0102030405060708090a0b0c0d0e0f",
            &"0".repeat(33),
        ] {
            assert!(JobKey::from_hex(bad).is_err(), "{bad}");
        }
        assert_eq!(format!("{k:?}"), "JobKey(..)");
        assert_eq!(JobKey::from_hex(&k.to_hex()).unwrap(), k);
        let g = k.group_key();
        assert_ne!(g, k);
        assert_eq!(g, k.group_key());
        assert_ne!(g, JobKey::new([1; 16]).group_key());
        assert_ne!(nonce(), nonce());
    }
}
