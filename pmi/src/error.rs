//! The crate's single error type.
//!
//! Every message says what went wrong and, where there is one, what to do
//! about it, because these errors end up in front of people launching jobs.

use std::io;

/// Everything that can go wrong in the PMI codec, client or server core.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    // ---- wire: stream-level (the connection must be closed) ----
    /// A line (newline included) is longer than the wire allows.
    #[error(
        "PMI line of {len} bytes exceeds the {max}-byte limit; the peer is not speaking \
         PMI-1 or sent an oversized value (split large values into several keys)"
    )]
    LineTooLong { len: usize, max: usize },

    /// An `mcmd=spawn ... endcmd` block grew past the block limit.
    #[error(
        "PMI spawn block of {len} bytes exceeds the {max}-byte limit; spawn fewer \
         commands or pass shorter arguments"
    )]
    BlockTooLong { len: usize, max: usize },

    /// The stream carried bytes that are not UTF-8 text.
    #[error("PMI stream is not UTF-8 text; the peer is not speaking the PMI-1 wire")]
    NotUtf8,

    /// The stream carried control bytes (NUL and friends) that text lines never hold.
    #[error("PMI stream holds control byte 0x{byte:02x}; the peer is not speaking the PMI-1 wire")]
    ControlByte { byte: u8 },

    // ---- wire: line-level (answer with an error, keep the connection) ----
    /// A line without a `cmd=` token.
    #[error("PMI line has no cmd= token: {line:?}; every PMI-1 line starts with cmd=<name>")]
    MissingCmd { line: String },

    /// A `cmd=` the codec does not know.
    #[error("unknown PMI command {cmd:?}; this side speaks PMI-1.1/1.2 only")]
    UnknownCommand { cmd: String },

    /// A required `key=value` is missing.
    #[error("PMI command {cmd} is missing the required field {field}=")]
    MissingField { cmd: String, field: &'static str },

    /// A field that must be a number is not one.
    #[error("PMI command {cmd}: field {field}={value:?} is not a valid number")]
    BadNumber {
        cmd: String,
        field: &'static str,
        value: String,
    },

    /// A field is longer than the advertised limit.
    #[error(
        "PMI {what} is {len} bytes, over the {max}-byte limit (see get_maxes); \
         use a shorter {what} or split the data over several keys"
    )]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },

    /// A line that is framed but cannot be understood.
    #[error("malformed PMI message: {reason}")]
    Malformed { reason: String },

    /// A value that cannot be carried on the wire (e.g. contains a newline).
    #[error(
        "{field} cannot be sent over PMI-1: it contains {what}; \
         encode the data (e.g. hex) before putting it"
    )]
    Unencodable {
        field: &'static str,
        what: &'static str,
    },

    // ---- client ----
    /// A `get` that found nothing.
    #[error("PMI key {key:?} not found; was it put, and did both sides pass a barrier since?")]
    KeyNotFound { key: String },

    /// The server answered with a nonzero `rc`.
    #[error("PMI server answered {cmd} with rc={rc}{}", msg.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Server {
        cmd: String,
        rc: i32,
        msg: Option<String>,
    },

    /// The process manager could not start a spawn's processes: the answer
    /// was `cmd=spawn_result rc≠0`. `errcodes` has one code per requested
    /// process, in command order: 0 for a process that was not at fault
    /// (rivetrun starts all or none, so none runs), non-zero for one that
    /// could not start (rivetrun: 127 not found, 126 not executable, 2 bad
    /// `wdir`/`host`). When the server sent no codes (Hydra), every entry is
    /// the server's `rc`.
    #[error("spawn failed: {message} (error codes per process: {errcodes:?})")]
    SpawnFailed { errcodes: Vec<i32>, message: String },

    /// The server answered with something other than the expected reply.
    #[error(
        "PMI server sent {got:?} while this client waited for cmd={expected}; \
         the process manager does not speak the PMI-1 dialect this client expects"
    )]
    UnexpectedReply { expected: &'static str, got: String },

    /// The server closed the connection.
    #[error(
        "PMI connection closed by the process manager while {during}; \
         the launcher probably exited or killed the job"
    )]
    ConnectionClosed { during: String },

    /// An I/O error on the PMI connection.
    #[error("PMI I/O error while {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },

    /// An environment variable has a value the client cannot use.
    #[error("environment variable {var}={value:?} is invalid: {reason}")]
    Env {
        var: &'static str,
        value: String,
        reason: String,
    },

    /// The process was started by a PMIx launcher.
    #[error(
        "launched by a PMIx launcher ({var} is set) but no PMI-1 variables (PMI_FD, PMI_PORT) \
         are present; this client speaks PMI-1: launch with rivetrun or mpiexec.hydra, or \
         ask the launcher for PMI-1 (e.g. srun --mpi=pmi1)"
    )]
    PmixLauncher { var: &'static str },

    /// The PMIx library could not be loaded or lacks a function.
    #[error("PMIx bootstrap unavailable: {why}")]
    PmixUnavailable { why: String },

    /// A PMIx call failed.
    #[error("{op} failed: {why}")]
    PmixFailed { op: &'static str, why: String },

    /// What Rivet's PMIx client does not map yet.
    #[error(
        "{op} is not available when bootstrapped through PMIx (Rivet's PMIx client maps \
         put/get/fence, local peers, names, groups, spawn, abort and finalize); start the job with rivetrun \
         (PMI-1) for it"
    )]
    PmixUnsupported { op: &'static str },

    /// What Rivet's PMI-2 client does not offer.
    #[error(
        "{op} is not available over PMI-2 (Rivet's PMI-2 client maps the KVS, fence, job \
         attributes, names, spawn, abort and finalize); unset RIVET_PMI=pmi2 to use PMI-1 for it"
    )]
    Pmi2Unsupported { op: &'static str },

    /// The server speaks a PMI version this client does not.
    #[error("process manager speaks PMI-{version}.{subversion}; this client speaks PMI-1.1/1.2")]
    VersionMismatch { version: i32, subversion: i32 },

    /// A key with the reserved `PMI_` prefix was put.
    #[error(
        "PMI key {key:?} uses the reserved PMI_ prefix (job attributes set by the process \
         manager); choose another key name"
    )]
    ReservedKey { key: String },

    /// The operation needs a process manager but the process is a singleton.
    #[error(
        "{op} needs a process manager but this process runs as a singleton (no PMI_FD or \
         PMI_PORT); start it with rivetrun"
    )]
    NoProcessManager { op: &'static str },

    /// A group connect, `group_ready` or `group_disconnect` that the process
    /// manager refused or could not complete (`rc≠0`), with its reason.
    #[error("{op} failed: {message}")]
    GroupFailed { op: &'static str, message: String },

    /// The process manager does not know Rivet's `group_*` commands.
    #[error(
        "the process manager does not support group connect: it answered cmd={cmd} with \
         {got:?}; group connect is a Rivet extension of PMI-1, served by rivetrun (not by \
         Hydra or Slurm)"
    )]
    GroupUnsupported { cmd: &'static str, got: String },

    /// Resource registration (seed 002) was refused: the process manager
    /// does not free resources (not rivetrun, or a part of it that does
    /// not), or refused this one. The caller must free it itself.
    #[error(
        "{op} failed: {message}; the process manager will not free it, so the program must \
         (resource registration is a Rivet extension of PMI-1, served by rivetrun)"
    )]
    ResourceRefused { op: &'static str, message: String },

    // ---- server ----
    /// A cluster id that process names cannot carry.
    #[error(
        "invalid cluster id {name:?}: {reason}; a cluster id is 1 to 256 bytes without \
         whitespace, ':', ',', '=', '\\' or control characters"
    )]
    InvalidClusterId { name: String, reason: String },

    /// A namespace description the server cannot serve.
    #[error("invalid PMI namespace {name:?}: {reason}")]
    InvalidNamespace { name: String, reason: String },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// True if the error means the byte stream itself is broken and the
    /// connection must be closed rather than answered.
    pub fn is_fatal_stream_error(&self) -> bool {
        matches!(
            self,
            Error::LineTooLong { .. }
                | Error::BlockTooLong { .. }
                | Error::NotUtf8
                | Error::ControlByte { .. }
        )
    }

    /// Shorthand for I/O errors with context.
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}
