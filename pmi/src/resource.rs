//! Resource registration (seed 002, "Resource Registration"): a rank tells
//! its process manager about things it made that outlive it when it dies
//! abnormally — shared-memory segments, temporary files, child processes —
//! and the process manager frees whatever is still registered when the
//! rank ends. A rank that frees a resource itself releases it afterwards
//! (the seed's `release_begin`/`release_end` pair in one call: freeing
//! first, then releasing, so a death in between leaves the manager to
//! free something already gone, never a leak).
//!
//! On the wire (Rivet's PMI-1 extension, like `group_*`):
//!
//! ```text
//! cmd=resource_register kind=shm|file|pid name=N   → cmd=resource_register_result rc=0
//! cmd=resource_release kind=shm|file|pid name=N    → cmd=resource_release_result rc=0
//! ```
//!
//! A process manager that does not serve it answers `rc≠0`, and the client
//! refuses to ask one that does not advertise it ([`KEY_RESOURCES`]), so
//! the caller always learns it must clean up itself (the seed's rule).
//!
//! A child process is named `pid:starttime` (the start time from
//! `/proc/<pid>/stat`, in clock ticks since boot), so a pid the kernel
//! reused for an unrelated process is never killed.

use std::fmt;
use std::str::FromStr;

/// The job attribute rivetrun sets when it frees registered resources.
pub const KEY_RESOURCES: &str = "PMI_rivet_resources";

/// At most this many resources per rank (bounded server memory).
pub const MAX_PER_RANK: usize = 1024;

/// What kind of thing a resource is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResourceKind {
    /// A POSIX shared-memory object: its name in `/dev/shm`.
    Shm,
    /// A file: its absolute path.
    File,
    /// A child process: `pid:starttime`.
    Pid,
}

impl ResourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Shm => "shm",
            ResourceKind::File => "file",
            ResourceKind::Pid => "pid",
        }
    }
}

impl FromStr for ResourceKind {
    type Err = String;
    fn from_str(s: &str) -> Result<ResourceKind, String> {
        match s {
            "shm" => Ok(ResourceKind::Shm),
            "file" => Ok(ResourceKind::File),
            "pid" => Ok(ResourceKind::Pid),
            other => Err(format!(
                "unknown resource kind {other:?} (shm, file or pid)"
            )),
        }
    }
}

/// One registered resource: kind and name, checked ([`Resource::new`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Resource {
    kind: ResourceKind,
    name: String,
}

impl Resource {
    /// A resource, if `name` is well-formed for `kind`: a shm name without
    /// `/` (at most 200 bytes), an absolute file path (at most 4096 bytes,
    /// no `..` component), or `pid:starttime` with a pid above 1.
    pub fn new(kind: ResourceKind, name: &str) -> Result<Resource, String> {
        let bad = |why: &str| {
            Err(format!(
                "bad {} resource name {name:?}: {why}",
                kind.as_str()
            ))
        };
        if name.is_empty() || name.bytes().any(|b| b == 0 || b.is_ascii_control()) {
            return bad("empty or with a control byte");
        }
        match kind {
            ResourceKind::Shm => {
                if name.len() > 200 || name.contains('/') || name == "." || name == ".." {
                    return bad("a shared-memory name is a plain name of at most 200 bytes");
                }
            }
            ResourceKind::File => {
                if name.len() > 4096
                    || !name.starts_with('/')
                    || name == "/"
                    || name.split('/').any(|c| c == "..")
                {
                    return bad("a file is an absolute path without '..'");
                }
            }
            ResourceKind::Pid => {
                if Resource::pid_parts(name).is_none() {
                    return bad("a process is pid:starttime, pid above 1");
                }
            }
        }
        Ok(Resource {
            kind,
            name: name.to_string(),
        })
    }

    /// Child process `pid`, named with its start time read from
    /// `/proc/<pid>/stat` now.
    pub fn child(pid: u32) -> Result<Resource, String> {
        let start = start_time(pid).ok_or_else(|| format!("process {pid} is not running"))?;
        Resource::new(ResourceKind::Pid, &format!("{pid}:{start}"))
    }

    pub fn shm(name: &str) -> Result<Resource, String> {
        Resource::new(ResourceKind::Shm, name)
    }

    pub fn file(path: &str) -> Result<Resource, String> {
        Resource::new(ResourceKind::File, path)
    }

    pub fn kind(&self) -> ResourceKind {
        self.kind
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// (pid, start time) of a `Pid` resource.
    pub fn pid(&self) -> Option<(u32, u64)> {
        match self.kind {
            ResourceKind::Pid => Resource::pid_parts(&self.name),
            _ => None,
        }
    }

    fn pid_parts(name: &str) -> Option<(u32, u64)> {
        let (pid, start) = name.split_once(':')?;
        let pid: u32 = pid
            .parse()
            .ok()
            .filter(|&p| p > 1 && p <= i32::MAX as u32)?;
        Some((pid, start.parse().ok()?))
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind.as_str(), self.name)
    }
}

/// Field 22 of `/proc/<pid>/stat`: when the process started, in clock
/// ticks since boot. `None` if there is no such process.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_per_kind() {
        assert!(Resource::shm("rivet-1-x").is_ok());
        assert!(Resource::file("/tmp/rivet-x/f").is_ok());
        assert!(Resource::new(ResourceKind::Pid, "1234:99").is_ok());
        for (kind, bad) in [
            (ResourceKind::Shm, ""),
            (ResourceKind::Shm, "a/b"),
            (ResourceKind::Shm, ".."),
            (ResourceKind::Shm, "a\nb"),
            (ResourceKind::File, "relative"),
            (ResourceKind::File, "/"),
            (ResourceKind::File, "/tmp/../etc/passwd"),
            (ResourceKind::Pid, "1:5"),
            (ResourceKind::Pid, "0:5"),
            (ResourceKind::Pid, "12"),
            (ResourceKind::Pid, "x:1"),
            (ResourceKind::Pid, "4294967295:1"),
        ] {
            assert!(Resource::new(kind, bad).is_err(), "{kind:?} {bad:?}");
        }
        for k in ["shm", "file", "pid"] {
            assert_eq!(k.parse::<ResourceKind>().unwrap().as_str(), k);
        }
        assert!("sem".parse::<ResourceKind>().is_err());
    }

    #[test]
    fn a_child_is_named_by_pid_and_start_time() {
        let me = std::process::id();
        let r = Resource::child(me).unwrap();
        assert_eq!(r.pid(), Some((me, start_time(me).unwrap())));
        assert!(Resource::child(u32::MAX / 2).is_err());
        assert_eq!(Resource::shm("s").unwrap().pid(), None);
    }
}
