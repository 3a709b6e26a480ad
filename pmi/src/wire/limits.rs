//! Wire limits, in one place: what the codec enforces and what `get_maxes`
//! advertises.
//!
//! The numbers are Hydra's (`pmiserv_common.h`) and MPICH's (`PMIU_MAXLINE`),
//! because MPICH clients size their buffers from them.

/// Longest line accepted from a peer, newline included (MPICH's `PMIU_MAXLINE`).
pub const MAX_LINE: usize = 1024;

/// Longest line this crate sends, newline included.
///
/// MPICH 4.0.2's client reads into a 1024-byte buffer that also holds a NUL,
/// so a 1024-byte line is split in two and desynchronises the client
/// (verified against libmpich 4.0.2). One byte less is always safe.
pub const MAX_SEND_LINE: usize = MAX_LINE - 1;

/// Longest key (`keylen_max`).
pub const MAX_KEY: usize = 64;

/// Longest value (`vallen_max`). A value also has to fit in one line.
pub const MAX_VALUE: usize = 1024;

/// Longest KVS name (`kvsname_max`).
pub const MAX_KVSNAME: usize = 256;

/// Longest `mcmd=spawn ... endcmd` block; bounds memory per connection.
pub const MAX_MCMD_BLOCK: usize = 64 * 1024;

/// Most segments, arguments, info or preput entries one spawn may carry.
///
/// Bounds the work a hostile block can cause; real spawns are far smaller.
pub const MAX_SPAWN_ITEMS: usize = 4096;

/// The three limits a server advertises with `cmd=maxes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest KVS name.
    pub kvsname_max: usize,
    /// Longest key.
    pub keylen_max: usize,
    /// Longest value.
    pub vallen_max: usize,
}

impl Limits {
    /// What this crate's server advertises (same as Hydra).
    pub const DEFAULT: Limits = Limits {
        kvsname_max: MAX_KVSNAME,
        keylen_max: MAX_KEY,
        vallen_max: MAX_VALUE,
    };

    /// Clamp a server's advertised limits to what this codec accepts, so a
    /// client never sends more than its own parser would take.
    pub fn clamp_to_codec(self) -> Limits {
        Limits {
            kvsname_max: self.kvsname_max.min(MAX_KVSNAME),
            keylen_max: self.keylen_max.min(MAX_KEY),
            vallen_max: self.vallen_max.min(MAX_VALUE),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}
