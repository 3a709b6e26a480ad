//! Buffers kept for unexpected eager data.

/// A small stock of byte buffers for unexpected eager data.
#[derive(Default)]
pub struct SpareBuffers(Vec<Vec<u8>>);

impl SpareBuffers {
    /// Buffers kept at most; beyond, returned ones are freed.
    const KEEP: usize = 256;
    /// Larger buffers are not kept (a burst of big messages would pin
    /// their memory).
    const KEEP_BYTES: usize = 64 * 1024;

    /// A copy of `data` in a kept buffer, or a new one.
    #[inline]
    pub fn copy_of(&mut self, data: &[u8]) -> Vec<u8> {
        match self.0.pop() {
            Some(mut v) => {
                v.clear();
                v.extend_from_slice(data);
                v
            }
            None => data.to_vec(),
        }
    }

    /// `v`'s contents are no longer needed.
    #[inline]
    pub fn give_back(&mut self, v: Vec<u8>) {
        if self.0.len() < Self::KEEP && v.capacity() <= Self::KEEP_BYTES {
            self.0.push(v);
        }
    }
}
