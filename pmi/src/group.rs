//! Names and flags of Rivet's group-connect extension (PMIx RFC0003's
//! connect/disconnect, carried over PMI-1 lines).
//!
//! A process is named `nspace:rank`, or `nspace:*` for every rank of the
//! namespace. A process of another cluster carries the cluster id in front:
//! `cluster:nspace:rank` (the RFC's `PMIX_MULTICLUSTER_NSPACE_CONSTRUCT`,
//! here [`qualified_nspace`] and [`split_nspace`]). Parsing goes from the
//! right: the last `:` separates the rank, at most one more separates the
//! cluster. Parts never hold whitespace, `,` (the list separator on the
//! wire), `=`, `\` or control characters, so a list of names is one plain
//! wire value.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::wire::limits::MAX_KVSNAME;

/// The server-answered job attribute that holds the process manager's
/// cluster id (what a process puts in front of its namespace for peers on
/// other clusters).
pub const KEY_CLUSTER: &str = "PMI_rivet_cluster";

/// One process, or every process of a namespace (`rank: None`, written `*`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcName {
    /// The cluster the namespace lives on; `None`: the process manager's own.
    pub cluster: Option<String>,
    pub nspace: String,
    /// `None` is the wildcard: every rank of `nspace`.
    pub rank: Option<u32>,
}

impl ProcName {
    /// Rank `rank` of `nspace` on this cluster.
    pub fn new(nspace: impl Into<String>, rank: u32) -> ProcName {
        ProcName {
            cluster: None,
            nspace: nspace.into(),
            rank: Some(rank),
        }
    }

    /// Every rank of `nspace` on this cluster.
    pub fn wildcard(nspace: impl Into<String>) -> ProcName {
        ProcName {
            cluster: None,
            nspace: nspace.into(),
            rank: None,
        }
    }

    /// The same name with `cluster` in front.
    pub fn on_cluster(mut self, cluster: impl Into<String>) -> ProcName {
        self.cluster = Some(cluster.into());
        self
    }

    /// `cluster:nspace`, or `nspace` when no cluster is named.
    pub fn qualified_nspace(&self) -> String {
        match &self.cluster {
            Some(c) => qualified_nspace(c, &self.nspace),
            None => self.nspace.clone(),
        }
    }
}

impl fmt::Display for ProcName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(c) = &self.cluster {
            write!(f, "{c}:")?;
        }
        match self.rank {
            Some(r) => write!(f, "{}:{r}", self.nspace),
            None => write!(f, "{}:*", self.nspace),
        }
    }
}

impl FromStr for ProcName {
    type Err = Error;

    fn from_str(s: &str) -> Result<ProcName> {
        let bad = |why: String| Error::Malformed {
            reason: format!(
                "process name {:?}: {why}; expected [cluster:]nspace:rank or [cluster:]nspace:*",
                s.chars().take(64).collect::<String>()
            ),
        };
        let (head, rank_text) = s
            .rsplit_once(':')
            .ok_or_else(|| bad("no ':' before the rank".into()))?;
        let rank = match rank_text {
            "*" => None,
            t if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => Some(
                t.parse::<u32>()
                    .map_err(|_| bad("the rank does not fit 32 bits".into()))?,
            ),
            _ => return Err(bad("the rank is neither a number nor *".into())),
        };
        let (cluster, nspace) = split_nspace(head);
        if nspace.contains(':') {
            return Err(bad("more than three ':'-separated parts".into()));
        }
        if let Some(c) = cluster {
            check_part("cluster id", c).map_err(bad)?;
        }
        check_part("namespace", nspace).map_err(bad)?;
        Ok(ProcName {
            cluster: cluster.map(str::to_string),
            nspace: nspace.to_string(),
            rank,
        })
    }
}

/// Why `part` cannot be a cluster id or namespace in a process name.
fn check_part(what: &str, part: &str) -> Result<(), String> {
    if part.is_empty() {
        return Err(format!("empty {what}"));
    }
    if part.len() > MAX_KVSNAME {
        return Err(format!(
            "{what} of {} bytes (at most {MAX_KVSNAME})",
            part.len()
        ));
    }
    if let Some(c) = part
        .chars()
        .find(|&c| c.is_whitespace() || c.is_control() || matches!(c, ',' | '=' | '\\' | ':'))
    {
        return Err(format!("{what} holds {c:?}"));
    }
    Ok(())
}

/// Check a cluster id (e.g. rivetrun's `--cluster-id`): 1..=256 bytes, no
/// whitespace, `:`, `,`, `=`, `\` or control characters.
pub fn check_cluster_name(name: &str) -> Result<()> {
    check_part("cluster id", name).map_err(|reason| Error::InvalidClusterId {
        name: name.chars().take(64).collect(),
        reason,
    })
}

/// The RFC's multi-cluster namespace: `cluster:nspace`.
pub fn qualified_nspace(cluster: &str, nspace: &str) -> String {
    format!("{cluster}:{nspace}")
}

/// Undo [`qualified_nspace`]: `(Some(cluster), nspace)`, or `(None, s)` when
/// `s` names no cluster. Splits at the first `:` (cluster ids hold none).
pub fn split_nspace(s: &str) -> (Option<&str>, &str) {
    match s.split_once(':') {
        Some((cluster, nspace)) => (Some(cluster), nspace),
        None => (None, s),
    }
}

/// The RFC's connect attributes, as one value. Every participant of one
/// operation must pass the same flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct GroupFlags {
    /// `PMIX_CONNECT_OPTIONAL`: a process that ends without joining does not
    /// fail the operation.
    pub optional: bool,
    /// `PMIX_CONNECT_XCHG_ONLY`: exchange cards only; no group id, no rank,
    /// nothing kept by the server.
    pub xchg_only: bool,
    /// `PMIX_CONNECT_EARLY_TERM_ALLOWED`: a member may end without
    /// disconnecting (otherwise the launcher treats that as a job failure).
    pub early_term: bool,
    /// `PMIX_CONNECT_NOTIFY_EACH`: every disconnect is reported to the
    /// other members.
    pub notify_each: bool,
}

const FLAG_NAMES: [&str; 4] = ["optional", "xchg_only", "early_term", "notify_each"];

impl GroupFlags {
    fn bits(&self) -> [bool; 4] {
        [
            self.optional,
            self.xchg_only,
            self.early_term,
            self.notify_each,
        ]
    }

    /// No flag set (then `flags=` is left off the wire).
    pub fn is_empty(&self) -> bool {
        !self.bits().contains(&true)
    }
}

/// Comma list in a fixed order; empty when no flag is set.
impl fmt::Display for GroupFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = FLAG_NAMES
            .iter()
            .zip(self.bits())
            .filter(|(_, on)| *on)
            .map(|(n, _)| *n)
            .collect();
        f.write_str(&names.join(","))
    }
}

impl FromStr for GroupFlags {
    type Err = Error;

    fn from_str(s: &str) -> Result<GroupFlags> {
        let mut flags = GroupFlags::default();
        if s.is_empty() {
            return Ok(flags);
        }
        for item in s.split(',') {
            match item {
                "optional" => flags.optional = true,
                "xchg_only" => flags.xchg_only = true,
                "early_term" => flags.early_term = true,
                "notify_each" => flags.notify_each = true,
                other => {
                    return Err(Error::Malformed {
                        reason: format!(
                            "unknown group connect flag {:?} (known: {})",
                            other.chars().take(32).collect::<String>(),
                            FLAG_NAMES.join(", ")
                        ),
                    })
                }
            }
        }
        Ok(flags)
    }
}

/// What happened to a member of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupEventKind {
    /// It ended while still connected.
    Terminated,
    /// It disconnected (sent only for groups made with `notify_each`).
    Disconnected,
}

impl GroupEventKind {
    /// The wire spelling (`event=`).
    pub fn as_str(self) -> &'static str {
        match self {
            GroupEventKind::Terminated => "terminated",
            GroupEventKind::Disconnected => "disconnected",
        }
    }
}

impl FromStr for GroupEventKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<GroupEventKind> {
        match s {
            "terminated" => Ok(GroupEventKind::Terminated),
            "disconnected" => Ok(GroupEventKind::Disconnected),
            other => Err(Error::Malformed {
                reason: format!(
                    "unknown group event {:?} (known: terminated, disconnected)",
                    other.chars().take(32).collect::<String>()
                ),
            }),
        }
    }
}

/// A note the server sends, unasked, to the members of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEvent {
    pub group: String,
    pub kind: GroupEventKind,
    /// The member it is about (rank always `Some`).
    pub proc: ProcName,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_names_parse_and_print() {
        let cases = [
            ("ns:3", ProcName::new("ns", 3)),
            ("ns:*", ProcName::wildcard("ns")),
            ("cl:ns:3", ProcName::new("ns", 3).on_cluster("cl")),
            ("cl:ns:*", ProcName::wildcard("ns").on_cluster("cl")),
            (
                "rivet_12_0_s1:4294967295",
                ProcName::new("rivet_12_0_s1", u32::MAX),
            ),
            ("a.b-c:x#y:0", ProcName::new("x#y", 0).on_cluster("a.b-c")),
        ];
        for (text, want) in cases {
            let got: ProcName = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(got, want, "{text}");
            assert_eq!(got.to_string(), text);
        }
        assert_eq!(
            ProcName::wildcard("ns").on_cluster("c").qualified_nspace(),
            "c:ns"
        );
        assert_eq!(ProcName::new("ns", 1).qualified_nspace(), "ns");
        // Leading zeros are read as the number.
        assert_eq!(
            "ns:007".parse::<ProcName>().unwrap(),
            ProcName::new("ns", 7)
        );
    }

    #[test]
    fn garbage_proc_names_are_refused() {
        let long = format!("{}:1", "n".repeat(MAX_KVSNAME + 1));
        for text in [
            "",
            "ns",
            "ns:",
            ":3",
            "ns:x",
            "ns:-1",
            "ns:+1",
            "ns:4294967296",
            "ns:**",
            "a:b:c:3",
            "::3",
            ":ns:3",
            "cl::3",
            "n s:3",
            "ns :3",
            "ns:3 ",
            "n,s:3",
            "n=s:3",
            "n\\s:3",
            "n\ts:3",
            "n\u{1}s:3",
            "ns:3,ns:4",
            long.as_str(),
        ] {
            match text.parse::<ProcName>() {
                Err(Error::Malformed { reason }) => {
                    assert!(reason.contains("process name"), "{text:?}: {reason}")
                }
                other => panic!("{text:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn multicluster_nspaces() {
        assert_eq!(qualified_nspace("clA", "job_0"), "clA:job_0");
        assert_eq!(split_nspace("clA:job_0"), (Some("clA"), "job_0"));
        assert_eq!(split_nspace("job_0"), (None, "job_0"));
        let q = qualified_nspace("c", "n");
        let (c, n) = split_nspace(&q);
        assert_eq!((c, n), (Some("c"), "n"));
        assert!(check_cluster_name("node-1.example").is_ok());
        for bad in ["", "a:b", "a b", "a,b", "a=b", "a\\b", "a\nb"] {
            assert!(check_cluster_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn flags_parse_and_print() {
        assert_eq!("".parse::<GroupFlags>().unwrap(), GroupFlags::default());
        assert!(GroupFlags::default().is_empty());
        assert_eq!(GroupFlags::default().to_string(), "");
        let all = GroupFlags {
            optional: true,
            xchg_only: true,
            early_term: true,
            notify_each: true,
        };
        assert_eq!(all.to_string(), "optional,xchg_only,early_term,notify_each");
        assert_eq!(
            "notify_each,early_term,xchg_only,optional,optional"
                .parse::<GroupFlags>()
                .unwrap(),
            all
        );
        let one: GroupFlags = "early_term".parse().unwrap();
        assert!(one.early_term && !one.optional && !one.is_empty());
        for bad in [
            "opt",
            "optional,",
            ",optional",
            "optional,,early_term",
            "OPTIONAL",
        ] {
            assert!(bad.parse::<GroupFlags>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn event_kinds() {
        for kind in [GroupEventKind::Terminated, GroupEventKind::Disconnected] {
            assert_eq!(kind.as_str().parse::<GroupEventKind>().unwrap(), kind);
        }
        assert!("ended".parse::<GroupEventKind>().is_err());
    }
}
