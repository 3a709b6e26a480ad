//! `--map-by` and `--bind-to` policies.

use std::fmt;
use std::str::FromStr;

use super::error::TopologyError;
use super::summary::DomainKind;

/// Where successive ranks go (`--map-by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MapBy {
    /// Successive cores (the default).
    #[default]
    Core,
    /// Successive hardware threads: both threads of core 0 before core 1.
    Hwthread,
    /// Round-robin over L3 caches; within one, successive cores.
    L3cache,
    /// Round-robin over NUMA nodes; within one, successive cores.
    Numa,
    /// Round-robin over packages; within one, successive cores.
    Socket,
    /// Round-robin over nodes (with `ppn`); within a node, successive cores.
    Node,
}

/// What each rank is bound to (`--bind-to`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindTo {
    Core,
    Hwthread,
    L3cache,
    Numa,
    Socket,
    None,
}

const MAP_VALID: &str = "core, hwthread, l3cache, numa, socket, node";
const BIND_VALID: &str = "core, hwthread, l3cache, numa, socket, none";

impl MapBy {
    pub fn name(self) -> &'static str {
        match self {
            MapBy::Core => "core",
            MapBy::Hwthread => "hwthread",
            MapBy::L3cache => "l3cache",
            MapBy::Numa => "numa",
            MapBy::Socket => "socket",
            MapBy::Node => "node",
        }
    }

    pub(crate) fn domain(self) -> Option<DomainKind> {
        match self {
            MapBy::L3cache => Some(DomainKind::L3),
            MapBy::Numa => Some(DomainKind::Numa),
            MapBy::Socket => Some(DomainKind::Package),
            _ => None,
        }
    }
}

impl BindTo {
    pub fn name(self) -> &'static str {
        match self {
            BindTo::Core => "core",
            BindTo::Hwthread => "hwthread",
            BindTo::L3cache => "l3cache",
            BindTo::Numa => "numa",
            BindTo::Socket => "socket",
            BindTo::None => "none",
        }
    }

    pub(crate) fn domain(self) -> Option<DomainKind> {
        match self {
            BindTo::L3cache => Some(DomainKind::L3),
            BindTo::Numa => Some(DomainKind::Numa),
            BindTo::Socket => Some(DomainKind::Package),
            _ => None,
        }
    }
}

/// Accepted spellings besides the canonical names: `cores`, `hwthreads`/`pu`/`thread`,
/// `l3`, `numanode`, `package`/`sockets`, `nodes`; case-insensitive.
fn canonical(s: &str) -> String {
    let s = s.trim().to_ascii_lowercase();
    match s.as_str() {
        "cores" => "core",
        "hwthreads" | "pu" | "pus" | "thread" | "threads" => "hwthread",
        "l3" | "l3caches" => "l3cache",
        "numanode" | "numa-node" => "numa",
        "package" | "packages" | "sockets" => "socket",
        "nodes" => "node",
        other => return other.to_string(),
    }
    .to_string()
}

impl FromStr for MapBy {
    type Err = TopologyError;

    fn from_str(s: &str) -> Result<MapBy, TopologyError> {
        Ok(match canonical(s).as_str() {
            "core" => MapBy::Core,
            "hwthread" => MapBy::Hwthread,
            "l3cache" => MapBy::L3cache,
            "numa" => MapBy::Numa,
            "socket" => MapBy::Socket,
            "node" => MapBy::Node,
            _ => {
                return Err(TopologyError::UnknownPolicy {
                    option: "--map-by",
                    value: s.to_string(),
                    valid: MAP_VALID,
                })
            }
        })
    }
}

impl FromStr for BindTo {
    type Err = TopologyError;

    fn from_str(s: &str) -> Result<BindTo, TopologyError> {
        Ok(match canonical(s).as_str() {
            "core" => BindTo::Core,
            "hwthread" => BindTo::Hwthread,
            "l3cache" => BindTo::L3cache,
            "numa" => BindTo::Numa,
            "socket" => BindTo::Socket,
            "none" => BindTo::None,
            _ => {
                return Err(TopologyError::UnknownPolicy {
                    option: "--bind-to",
                    value: s.to_string(),
                    valid: BIND_VALID,
                })
            }
        })
    }
}

impl fmt::Display for MapBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for BindTo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
