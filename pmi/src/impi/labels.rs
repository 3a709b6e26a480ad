//! COLL payloads (seed 003, 2.3.5): the labels of IMPI version 0.0 and
//! their values.
//!
//! Up, a client sends `label` then its value; down, the server sends
//! `label`, `client_mask` (bit i: client i contributed) and the participating
//! clients' values concatenated in ascending client order. Per-client labels
//! carry one value per client (a version list for `C_VERSION`), per-host
//! labels one per host of the client (`C_NHOSTS` says how many), per-proc
//! labels one per proc (`C_NPROCS`). The server never looks inside.

use super::{be_u32, be_u64, WireError};

/// `IMPI_NO_LABEL`: reserved, never sent.
pub const NO_LABEL: u32 = 0;
/// Versions of the protocol the client speaks (major, minor pairs, ascending).
pub const C_VERSION: u32 = 0x1000;
/// Number of hosts of the client.
pub const C_NHOSTS: u32 = 0x1100;
/// Number of procs of the client.
pub const C_NPROCS: u32 = 0x1200;
/// Most user-data bytes per packet.
pub const C_DATALEN: u32 = 0x1300;
/// Highest tag used between hosts.
pub const C_TAGUB: u32 = 0x1400;
/// Collectives' long-protocol crossover in bytes (-1: default 1024).
pub const C_COLL_XSIZE: u32 = 0x1500;
/// Collectives' logarithmic crossover in hosts (-1: default 4).
pub const C_COLL_MAXLINEAR: u32 = 0x1600;
/// Per host: IPv6 address (16 bytes).
pub const H_IPV6: u32 = 0x2000;
/// Per host: listening TCP port.
pub const H_PORT: u32 = 0x2100;
/// Per host: number of procs.
pub const H_NPROCS: u32 = 0x2200;
/// Per host: packets received before a protocol ACK.
pub const H_ACKMARK: u32 = 0x2300;
/// Per host: packets sent unacknowledged at most.
pub const H_HIWATER: u32 = 0x2400;
/// Per proc: IPv6 address identifying its host (16 bytes).
pub const P_IPV6: u32 = 0x3000;
/// Per proc: id unique among procs of the same address (8 bytes).
pub const P_PID: u32 = 0x3100;

/// Rivet's own per-proc label (not in the seed; clients that do not know
/// it ignore its broadcast, 2.3.5): the TCP port each proc listens on for
/// the `impi` netmod's direct channels, 4 bytes per proc, 0 for none. Sent
/// after `P_PID`, so the ascending order holds.
pub const RIVET_P_PORT: u32 = 0x3F00;

/// Rivet's own per-client label: 16 random bytes from each Rivet client.
/// Every client derives the key its procs prove their direct-channel
/// hellos with from all of them (and the AUTH key when KEY was chosen),
/// so only processes of this run can open a channel. After `RIVET_P_PORT`.
pub const RIVET_C_NONCE: u32 = 0x3F01;

/// Rivet's own per-host labels: the `ackmark`/`hiwater` a Rivet host asks
/// for what other Rivet hosts send it. Pairs whose both hosts sent them
/// use these; any pair with a host that did not uses the standard
/// `H_ACKMARK`/`H_HIWATER` (3.6), so a client of another implementation
/// sees only the standard values. After `RIVET_C_NONCE`.
pub const RIVET_H_ACKMARK: u32 = 0x3F02;
pub const RIVET_H_HIWATER: u32 = 0x3F03;

/// Every label of version 0.0, in the ascending order clients send them.
pub const LABELS_0_0: [u32; 14] = [
    C_VERSION,
    C_NHOSTS,
    C_NPROCS,
    C_DATALEN,
    C_TAGUB,
    C_COLL_XSIZE,
    C_COLL_MAXLINEAR,
    H_IPV6,
    H_PORT,
    H_NPROCS,
    H_ACKMARK,
    H_HIWATER,
    P_IPV6,
    P_PID,
];

/// Default `C_COLL_XSIZE` of version 0.0, in force when clients send -1.
pub const DEFAULT_COLL_XSIZE: i32 = 1024;
/// Default `C_COLL_MAXLINEAR` of version 0.0, in force when clients send -1.
pub const DEFAULT_COLL_MAXLINEAR: i32 = 4;

/// What a label's values are counted per.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Client,
    Host,
    Proc,
    /// A label this side does not know: relayed, not interpreted.
    Unknown,
}

/// Scope and element size of a label of version 0.0.
pub fn shape(label: u32) -> (Scope, usize) {
    match label {
        C_VERSION => (Scope::Client, 8),
        C_NHOSTS | C_NPROCS | C_DATALEN | C_TAGUB | C_COLL_XSIZE | C_COLL_MAXLINEAR => {
            (Scope::Client, 4)
        }
        H_IPV6 => (Scope::Host, 16),
        H_PORT | H_NPROCS | H_ACKMARK | H_HIWATER | RIVET_H_ACKMARK | RIVET_H_HIWATER => {
            (Scope::Host, 4)
        }
        P_IPV6 => (Scope::Proc, 16),
        P_PID => (Scope::Proc, 8),
        RIVET_P_PORT => (Scope::Proc, 4),
        RIVET_C_NONCE => (Scope::Client, 16),
        _ => (Scope::Unknown, 1),
    }
}

/// A label's name for messages.
pub fn label_name(label: u32) -> String {
    let name = match label {
        NO_LABEL => "IMPI_NO_LABEL",
        C_VERSION => "IMPI_C_VERSION",
        C_NHOSTS => "IMPI_C_NHOSTS",
        C_NPROCS => "IMPI_C_NPROCS",
        C_DATALEN => "IMPI_C_DATALEN",
        C_TAGUB => "IMPI_C_TAGUB",
        C_COLL_XSIZE => "IMPI_C_COLL_XSIZE",
        C_COLL_MAXLINEAR => "IMPI_C_COLL_MAXLINEAR",
        H_IPV6 => "IMPI_H_IPV6",
        H_PORT => "IMPI_H_PORT",
        H_NPROCS => "IMPI_H_NPROCS",
        H_ACKMARK => "IMPI_H_ACKMARK",
        H_HIWATER => "IMPI_H_HIWATER",
        P_IPV6 => "IMPI_P_IPV6",
        P_PID => "IMPI_P_PID",
        RIVET_P_PORT => "RIVET_P_PORT",
        RIVET_C_NONCE => "RIVET_C_NONCE",
        RIVET_H_ACKMARK => "RIVET_H_ACKMARK",
        RIVET_H_HIWATER => "RIVET_H_HIWATER",
        other => return format!("label 0x{other:x}"),
    };
    name.into()
}

/// `IMPI_Coll` and its value: a COLL command's payload, client to server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coll {
    pub label: u32,
    pub data: Vec<u8>,
}

impl Coll {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.label.to_be_bytes().to_vec();
        out.extend_from_slice(&self.data);
        out
    }

    pub fn decode(payload: &[u8]) -> Result<Coll, WireError> {
        let label = be_u32(payload, 0, "COLL label")?;
        Ok(Coll {
            label,
            data: payload[4..].to_vec(),
        })
    }
}

/// `IMPI_Chdr`: label and client mask, server to client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chdr {
    pub label: u32,
    pub client_mask: u32,
}

impl Chdr {
    pub fn decode(payload: &[u8]) -> Result<Chdr, WireError> {
        Ok(Chdr {
            label: be_u32(payload, 0, "COLL reply header")?,
            client_mask: be_u32(payload, 4, "COLL reply header")?,
        })
    }
}

/// A server's COLL broadcast: header and the concatenated values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broadcast {
    pub label: u32,
    pub client_mask: u32,
    pub data: Vec<u8>,
}

impl Broadcast {
    /// The broadcast of `label` from the contributions of the clients in
    /// ascending rank order (`None`: that client did not send the label).
    pub fn collect<'a>(label: u32, parts: impl IntoIterator<Item = Option<&'a [u8]>>) -> Broadcast {
        let mut client_mask = 0u32;
        let mut data = Vec::new();
        for (i, part) in parts.into_iter().enumerate() {
            if let Some(bytes) = part {
                client_mask |= 1u32.checked_shl(i as u32).unwrap_or(0);
                data.extend_from_slice(bytes);
            }
        }
        Broadcast {
            label,
            client_mask,
            data,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + self.data.len());
        out.extend_from_slice(&self.label.to_be_bytes());
        out.extend_from_slice(&self.client_mask.to_be_bytes());
        out.extend_from_slice(&self.data);
        out
    }

    pub fn decode(payload: &[u8]) -> Result<Broadcast, WireError> {
        let h = Chdr::decode(payload)?;
        Ok(Broadcast {
            label: h.label,
            client_mask: h.client_mask,
            data: payload[8..].to_vec(),
        })
    }

    /// Cut the data into each client's part. `counts[i]` is how many
    /// elements client i contributes to a per-host or per-proc label (its
    /// `C_NHOSTS` or `C_NPROCS`), ignored for per-client labels. Clients
    /// outside the mask get `None`. Version lists, whose lengths the data
    /// does not carry, are cut where the next ascending list begins.
    pub fn split(&self, nclients: usize, counts: &[u32]) -> Result<Vec<Option<&[u8]>>, WireError> {
        let what = "COLL reply";
        let (scope, elem) = shape(self.label);
        if nclients > super::MAX_CLIENTS as usize {
            return Err(WireError::Invalid {
                what,
                why: format!("{nclients} clients, more than the mask holds"),
            });
        }
        let member = |i: usize| self.client_mask & (1 << i) != 0;
        if nclients < 32 && self.client_mask >> nclients != 0 {
            return Err(WireError::Invalid {
                what,
                why: format!(
                    "client mask 0x{:x} names clients beyond the job's {nclients}",
                    self.client_mask
                ),
            });
        }
        if self.data.len() % elem != 0 {
            return Err(WireError::Ragged {
                what,
                len: self.data.len(),
                elem,
            });
        }
        let mut out = vec![None; nclients];
        if scope == Scope::Unknown {
            return Err(WireError::Invalid {
                what,
                why: format!("{} has no known layout", label_name(self.label)),
            });
        }
        if self.label == C_VERSION {
            let runs = version_runs(&self.data)?;
            let members: Vec<usize> = (0..nclients).filter(|&i| member(i)).collect();
            if runs.len() != members.len() {
                return Err(WireError::Invalid {
                    what,
                    why: format!(
                        "{} version lists for {} clients in the mask",
                        runs.len(),
                        members.len()
                    ),
                });
            }
            for (i, run) in members.into_iter().zip(runs) {
                out[i] = Some(run);
            }
            return Ok(out);
        }
        let mut at = 0usize;
        for (i, slot) in out.iter_mut().enumerate() {
            if !member(i) {
                continue;
            }
            let n = match scope {
                Scope::Client => 1,
                _ => *counts.get(i).ok_or(WireError::Invalid {
                    what,
                    why: format!("no element count for client {i}"),
                })? as usize,
            };
            let end = n
                .checked_mul(elem)
                .and_then(|b| b.checked_add(at))
                .filter(|&e| e <= self.data.len())
                .ok_or(WireError::Truncated {
                    what,
                    got: self.data.len(),
                    need: at.saturating_add(n.saturating_mul(elem)),
                })?;
            *slot = Some(&self.data[at..end]);
            at = end;
        }
        if at != self.data.len() {
            return Err(WireError::Invalid {
                what,
                why: format!(
                    "{} of {} bytes of {} left over",
                    self.data.len() - at,
                    self.data.len(),
                    label_name(self.label)
                ),
            });
        }
        Ok(out)
    }
}

/// Cut concatenated version lists where a version is not above the one before.
fn version_runs(data: &[u8]) -> Result<Vec<&[u8]>, WireError> {
    let mut runs = Vec::new();
    let mut start = 0;
    let mut prev: Option<(u32, u32)> = None;
    for at in (0..data.len()).step_by(8) {
        let v = (
            be_u32(data, at, "version")?,
            be_u32(data, at + 4, "version")?,
        );
        if prev.is_some_and(|p| v <= p) {
            runs.push(&data[start..at]);
            start = at;
        }
        prev = Some(v);
    }
    if start < data.len() {
        runs.push(&data[start..]);
    }
    Ok(runs)
}

/// One client's value of a label, typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `C_VERSION`: (major, minor), strictly ascending.
    Versions(Vec<(u32, u32)>),
    /// `C_NHOSTS`, `C_NPROCS`, `C_DATALEN`.
    Count(u32),
    /// `C_TAGUB`, `C_COLL_XSIZE`, `C_COLL_MAXLINEAR`.
    Int(i32),
    /// `H_IPV6`, `P_IPV6`; `RIVET_C_NONCE`.
    Addrs(Vec<[u8; 16]>),
    /// `H_PORT`, `H_NPROCS`, `H_ACKMARK`, `H_HIWATER`; Rivet's host labels.
    Counts(Vec<u32>),
    /// `P_PID`.
    Pids(Vec<i64>),
    /// A label of another version: its bytes as they came.
    Opaque(Vec<u8>),
}

impl Value {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Value::Versions(v) => v
                .iter()
                .flat_map(|(a, b)| a.to_be_bytes().into_iter().chain(b.to_be_bytes()))
                .collect(),
            Value::Count(n) => n.to_be_bytes().to_vec(),
            Value::Int(n) => n.to_be_bytes().to_vec(),
            Value::Addrs(a) => a.iter().flatten().copied().collect(),
            Value::Counts(c) => c.iter().flat_map(|n| n.to_be_bytes()).collect(),
            Value::Pids(p) => p.iter().flat_map(|n| n.to_be_bytes()).collect(),
            Value::Opaque(b) => b.clone(),
        }
    }

    /// One client's value of `label` (its part of a broadcast, or what it
    /// sends). Per-client scalars must be exactly 4 bytes; version lists
    /// strictly ascending.
    pub fn decode(label: u32, data: &[u8]) -> Result<Value, WireError> {
        let what = "COLL value";
        let (scope, elem) = shape(label);
        if scope == Scope::Unknown {
            return Ok(Value::Opaque(data.to_vec()));
        }
        if data.len() % elem != 0 {
            return Err(WireError::Ragged {
                what,
                len: data.len(),
                elem,
            });
        }
        let n = data.len() / elem;
        let u32s = || {
            (0..n)
                .map(|i| be_u32(data, i * 4, what))
                .collect::<Result<Vec<_>, _>>()
        };
        let scalar = |v: Vec<u32>| -> Result<u32, WireError> {
            match v.as_slice() {
                [x] => Ok(*x),
                _ => Err(WireError::Invalid {
                    what,
                    why: format!("{} holds {} values, not one", label_name(label), v.len()),
                }),
            }
        };
        Ok(match label {
            C_VERSION => {
                let v: Vec<(u32, u32)> = (0..n)
                    .map(|i| Ok((be_u32(data, i * 8, what)?, be_u32(data, i * 8 + 4, what)?)))
                    .collect::<Result<_, WireError>>()?;
                if v.is_empty() || v.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(WireError::Invalid {
                        what,
                        why: "a version list must be non-empty and strictly ascending".into(),
                    });
                }
                Value::Versions(v)
            }
            C_NHOSTS | C_NPROCS | C_DATALEN => Value::Count(scalar(u32s()?)?),
            C_TAGUB | C_COLL_XSIZE | C_COLL_MAXLINEAR => Value::Int(scalar(u32s()?)? as i32),
            H_IPV6 | P_IPV6 | RIVET_C_NONCE => Value::Addrs(
                data.chunks_exact(16)
                    .map(|c| {
                        let mut a = [0u8; 16];
                        a.copy_from_slice(c);
                        a
                    })
                    .collect(),
            ),
            P_PID => Value::Pids(
                (0..n)
                    .map(|i| be_u64(data, i * 8, what).map(|v| v as i64))
                    .collect::<Result<_, _>>()?,
            ),
            _ => Value::Counts(u32s()?),
        })
    }
}

/// The highest version every list holds (2.3.5: both numbers must match).
pub fn common_version(lists: &[Vec<(u32, u32)>]) -> Option<(u32, u32)> {
    let first = lists.first()?;
    first
        .iter()
        .rev()
        .find(|v| lists.iter().all(|l| l.contains(v)))
        .copied()
}

#[cfg(test)]
#[path = "labels_tests.rs"]
mod tests;
