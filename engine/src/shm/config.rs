//! The node segment's sizes (`ShmConfig`, from `RIVET_SHM_*`) and the
//! errors of the shared-memory transport (`ShmError`).

use super::fastbox;

/// Default bytes per fastbox ring: 512 slots, i.e. 512 messages of up to 16
/// bytes or 30 of 1 KiB in flight per pair before falling back to cells,
/// enough for a message-rate window of 64-256 small messages. Memory is
/// O(ranks^2): 64 ranks on a node take 64*63*32 KiB = 126 MiB of /dev/shm.
pub const DEFAULT_FASTBOX_BYTES: usize = 32 * 1024;
/// Default largest payload sent through a ring: the engine's small-message
/// path (<= 1 KiB); bigger payloads take cells (one copy each way either way,
/// a ring slot saves the free-queue round trip).
pub const DEFAULT_FASTBOX_MAX: usize = 1024;
/// Default cells per rank (as MPICH Nemesis and CH4 iqueue).
pub const DEFAULT_CELLS: usize = 64;
/// Default bytes per cell including its 64-byte header: between CH4 iqueue's
/// 8 KiB and Nemesis' 64 KiB; 64 cells cost 1 MiB per rank.
pub const DEFAULT_CELL_BYTES: usize = 16 * 1024;

/// Sizes of the node segment; read from `RIVET_SHM_*` by the leader and
/// recorded in the segment so every rank agrees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShmConfig {
    /// Bytes of each per-pair fastbox ring (`RIVET_SHM_FASTBOX_SIZE`): a power
    /// of two, or 0 to send everything through cells.
    pub fastbox_bytes: usize,
    /// Largest payload sent through a fastbox ring (`RIVET_SHM_FASTBOX_MAX`).
    pub fastbox_max: usize,
    /// Cells per rank (`RIVET_SHM_CELLS`).
    pub cells_per_rank: usize,
    /// Bytes per cell, header included (`RIVET_SHM_CELL_SIZE`): a power of
    /// two, at least 128.
    pub cell_bytes: usize,
}

impl Default for ShmConfig {
    fn default() -> ShmConfig {
        ShmConfig {
            fastbox_bytes: DEFAULT_FASTBOX_BYTES,
            fastbox_max: DEFAULT_FASTBOX_MAX,
            cells_per_rank: DEFAULT_CELLS,
            cell_bytes: DEFAULT_CELL_BYTES,
        }
    }
}

impl ShmConfig {
    /// Defaults overridden by `RIVET_SHM_FASTBOX_SIZE`, `RIVET_SHM_FASTBOX_MAX`,
    /// `RIVET_SHM_CELLS` and `RIVET_SHM_CELL_SIZE`, validated.
    pub fn from_env() -> Result<ShmConfig, ShmError> {
        ShmConfig::from_lookup(rivet_settings::var)
    }

    /// As [`ShmConfig::from_env`] with variables looked up by `get`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<ShmConfig, ShmError> {
        let mut c = ShmConfig::default();
        let fields: [(&'static str, &mut usize); 4] = [
            ("RIVET_SHM_FASTBOX_SIZE", &mut c.fastbox_bytes),
            ("RIVET_SHM_FASTBOX_MAX", &mut c.fastbox_max),
            ("RIVET_SHM_CELLS", &mut c.cells_per_rank),
            ("RIVET_SHM_CELL_SIZE", &mut c.cell_bytes),
        ];
        for (name, field) in fields {
            if let Some(v) = get(name) {
                *field = rivet_netmods::parse_size(&v).map_err(|why| ShmError::Config {
                    name,
                    value: v.clone(),
                    why,
                })?;
            }
        }
        c.validate()?;
        Ok(c)
    }

    /// Check the sizes against what the segment format supports.
    pub fn validate(&self) -> Result<(), ShmError> {
        let bad = |name: &'static str, value: usize, why: String| ShmError::Config {
            name,
            value: value.to_string(),
            why,
        };
        if self.cell_bytes < 128 || !self.cell_bytes.is_power_of_two() || self.cell_bytes > 1 << 30
        {
            return Err(bad(
                "RIVET_SHM_CELL_SIZE",
                self.cell_bytes,
                "must be a power of two between 128 and 1GiB".into(),
            ));
        }
        if self.cells_per_rank == 0 || self.cells_per_rank > 1 << 20 {
            return Err(bad(
                "RIVET_SHM_CELLS",
                self.cells_per_rank,
                "must be between 1 and 1048576".into(),
            ));
        }
        if self.fastbox_max > fastbox::MAX_RECORD_PAYLOAD {
            return Err(bad(
                "RIVET_SHM_FASTBOX_MAX",
                self.fastbox_max,
                format!("must be at most {}", fastbox::MAX_RECORD_PAYLOAD),
            ));
        }
        if self.fastbox_bytes != 0 {
            // A record, a wrap filler and the next marker must fit in a
            // quarter ring (the receiver publishes consumption every quarter).
            let min = (4 * (fastbox::record_slots(self.fastbox_max) as usize + 1) * fastbox::SLOT)
                .next_power_of_two();
            if !self.fastbox_bytes.is_power_of_two()
                || self.fastbox_bytes < min
                || self.fastbox_bytes > 1 << 30
            {
                return Err(bad(
                    "RIVET_SHM_FASTBOX_SIZE",
                    self.fastbox_bytes,
                    format!(
                        "must be 0 (no rings) or a power of two between {min} (for \
                         RIVET_SHM_FASTBOX_MAX={}) and 1GiB",
                        self.fastbox_max
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    #[error("bad setting {name}={value:?}: {why}")]
    Config {
        name: &'static str,
        value: String,
        why: String,
    },
    #[error(
        "shared memory segment name {name:?} is invalid: {why}; use a plain name such as \
         \"rivet-<job>-<pid>\""
    )]
    Name { name: String, why: String },
    #[error("local_size {0} is invalid: a node has between 1 and 65536 local ranks")]
    BadLocalSize(usize),
    #[error("{0} shared-memory lanes is invalid: a node segment has 1 to 32 (RIVET_WORKERS)")]
    BadLanes(usize),
    #[error("local rank {my_local} is out of range for a node of {local_size} local ranks")]
    BadRank { my_local: usize, local_size: usize },
    #[error(
        "shared memory segment /dev/shm/{name} already exists: another job uses this name or a \
         crashed run left it behind; pick another name or remove the file"
    )]
    Exists { name: String },
    #[error(
        "cannot reserve {size} bytes for shared memory segment /dev/shm/{name}: {source}; \
         /dev/shm is too small (in a container raise --shm-size) or lower RIVET_SHM_CELLS, \
         RIVET_SHM_CELL_SIZE or RIVET_SHM_FASTBOX_SIZE"
    )]
    NoSpace {
        name: String,
        size: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The segment is not one our job made: another user owns it, or
    /// others may read or write it (ours are created 0600).
    #[error(
        "shared memory segment /dev/shm/{name} is not safe to attach: {why}; it was not made \
         by this job (rivet creates its segments mode 0600, owned by the job's user)"
    )]
    Untrusted { name: String, why: String },
    #[error(
        "a segment for {local_size} local ranks with {config:?} would not fit in memory; lower \
         the RIVET_SHM_* sizes"
    )]
    TooBig {
        local_size: usize,
        config: ShmConfig,
    },
    #[error(
        "/dev/shm/{name} is {size} bytes but needs at least {need}: it is not a Rivet node \
         segment or was truncated; check the segment name"
    )]
    TooSmall {
        name: String,
        size: u64,
        need: usize,
    },
    #[error(
        "/dev/shm/{name} is not a Rivet node segment (bad magic number), or its creator has not \
         finished initialising it; check the segment name"
    )]
    NotASegment { name: String },
    #[error(
        "/dev/shm/{name} has layout version {found}, this build expects {expected}: all ranks \
         of a job must run the same Rivet build"
    )]
    Version {
        name: String,
        found: u64,
        expected: u64,
    },
    #[error(
        "/dev/shm/{name} was created for {found} local ranks but this rank expects {expected}: \
         the ranks disagree on the node's size; check the process mapping"
    )]
    LocalSizeMismatch {
        name: String,
        found: u64,
        expected: usize,
    },
    #[error("/dev/shm/{name} has an invalid header ({why}): the segment is corrupt")]
    BadHeader { name: String, why: String },
    #[error(
        "local rank {rank} is already attached to /dev/shm/{name} (pid {pid}): two ranks claim \
         the same local index"
    )]
    AlreadyAttached { name: String, rank: usize, pid: u64 },
    #[error(
        "local rank {peer} is not a shared-memory peer of local rank {me} (node of \
         {local_size} ranks; a rank's messages to itself do not go through shared memory)"
    )]
    BadPeer {
        peer: usize,
        me: usize,
        local_size: usize,
    },
    #[error(
        "payload of {len} bytes exceeds the shared-memory maximum of {max} bytes: send it in \
         pieces (rendezvous) or raise RIVET_SHM_CELL_SIZE"
    )]
    TooLarge { len: usize, max: usize },
    #[error(
        "shared memory segment corrupted ({what}; local rank {peer} involved): a process wrote \
         outside the protocol; abort the job"
    )]
    Corrupt { peer: usize, what: String },
}
