//! Who a process of the job is and why the job failed: the failure that
//! decides rivetrun's exit code and the message it prints.

use std::fmt;
use std::time::Duration;

/// A process of the job: a rank, or a process a spawn started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    Rank(u32),
    /// Rank `index` of the spawned namespace `kvsname`.
    Spawned {
        kvsname: String,
        index: u32,
    },
    /// A `PMI_PORT` connection that never said which rank it is.
    Unidentified,
}

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Who::Rank(rank) => write!(f, "rank {rank}"),
            Who::Spawned { kvsname, index } => write!(f, "spawned process {index} of {kvsname}"),
            Who::Unidentified => write!(f, "an unidentified PMI connection"),
        }
    }
}

/// rivetrun's exit code when the job times out: mpiexec.hydra's (4.0.2
/// exits 255 after "APPLICATION TIMED OUT").
pub const TIMEOUT_EXIT_CODE: i32 = 255;

/// Why the job failed: the first of these decides rivetrun's exit code.
#[derive(Debug, Clone)]
pub enum Failure {
    Exited {
        who: Who,
        code: i32,
    },
    Signaled {
        who: Who,
        signal: i32,
    },
    Aborted {
        who: Who,
        code: i32,
        message: Option<String>,
    },
    NoFinalize {
        who: Who,
    },
    Interrupted {
        signal: i32,
    },
    /// The job ran past `--timeout` / `MPIEXEC_TIMEOUT`.
    TimedOut {
        limit: Duration,
    },
    /// It ended still connected to a group made without `early_term`.
    GroupLeft {
        who: Who,
        group: String,
    },
    Internal(String),
}

impl Failure {
    pub fn exit_code(&self) -> i32 {
        match self {
            Failure::Exited { code, .. } => *code,
            Failure::Signaled { signal, .. } | Failure::Interrupted { signal } => 128 + signal,
            Failure::Aborted { code, .. } => {
                if *code == 0 {
                    1
                } else {
                    *code
                }
            }
            Failure::NoFinalize { .. } | Failure::GroupLeft { .. } | Failure::Internal(_) => 1,
            Failure::TimedOut { .. } => TIMEOUT_EXIT_CODE,
        }
    }

    /// The process that failed the job, if one did.
    pub(super) fn who(&self) -> Option<&Who> {
        match self {
            Failure::Exited { who, .. }
            | Failure::Signaled { who, .. }
            | Failure::Aborted { who, .. }
            | Failure::NoFinalize { who }
            | Failure::GroupLeft { who, .. } => Some(who),
            Failure::Interrupted { .. } | Failure::TimedOut { .. } | Failure::Internal(_) => None,
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Failure::Exited { who, code } => format!("{who} exited with code {code}"),
            Failure::Signaled { who, signal } => {
                format!("{who} was killed by signal {signal} ({})", signal_name(*signal))
            }
            Failure::Aborted { who, code, message } => match message {
                Some(m) => format!("{who} called abort (exit code {code}): {m}"),
                None => format!("{who} called abort (exit code {code})"),
            },
            Failure::NoFinalize { who } => format!(
                "{who} exited with code 0 without finalizing PMI; the other processes could wait for it forever"
            ),
            Failure::Interrupted { signal } => format!("rivetrun received {}", signal_name(*signal)),
            Failure::TimedOut { limit } => format!(
                "the job timed out: still running after {} s (--timeout / MPIEXEC_TIMEOUT)",
                limit.as_secs_f64()
            ),
            Failure::GroupLeft { who, group } => format!(
                "{who} ended while connected to group {group} (made without \
                 early_term_allowed: every member must disconnect first)"
            ),
            Failure::Internal(m) => m.clone(),
        }
    }
}

pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        _ => "unknown signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaving_a_group_by_ending_is_a_failure_that_says_why() {
        let f = Failure::GroupLeft {
            who: Who::Spawned {
                kvsname: "rivet_7_0_s1".into(),
                index: 2,
            },
            group: "rivet_7_0_g3".into(),
        };
        assert_eq!(f.exit_code(), 1);
        assert_eq!(
            f.describe(),
            "spawned process 2 of rivet_7_0_s1 ended while connected to group rivet_7_0_g3 \
             (made without early_term_allowed: every member must disconnect first)"
        );
    }
}
