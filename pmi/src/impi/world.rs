//! A client's side of the COLL exchange (seed 003, 2.3.5), sans I/O: what
//! it contributes for every label of version 0.0 ([`Mine`]), and the job it
//! learns from the server's broadcasts ([`WorldBuilder`] → [`World`]):
//! every client's hosts and procs, the agreed version, packet size, tag
//! bound, collective crossovers and flow-control marks. Global ranks are
//! the index into the concatenated proc arrays.

use super::labels::{self, common_version, Broadcast, Value};
use super::WireError;

/// What this client sends, one host per client (rivetrun is its agent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mine {
    pub versions: Vec<(u32, u32)>,
    pub datalen: u32,
    pub tag_ub: i32,
    /// -1: the user chose nothing (the default of the version applies).
    pub coll_xsize: i32,
    pub coll_maxlinear: i32,
    pub host_ipv6: [u8; 16],
    pub host_port: u32,
    pub ackmark: u32,
    pub hiwater: u32,
    /// One id per proc, unique among procs of `host_ipv6`.
    pub pids: Vec<i64>,
    /// Rivet's `RIVET_P_PORT`: each proc's listening port for direct
    /// channels; empty: the label is not sent.
    pub proc_ports: Vec<u32>,
    /// Rivet's `RIVET_C_NONCE`: this client's random contribution to the
    /// channel key; `None`: the label is not sent.
    pub nonce: Option<[u8; 16]>,
    /// Rivet's `RIVET_H_ACKMARK`/`RIVET_H_HIWATER`: the flow control this
    /// host asks of other Rivet hosts; `None`: the labels are not sent.
    pub rivet_flow: Option<(u32, u32)>,
}

impl Mine {
    /// Every label of version 0.0 with this client's value, ascending.
    pub fn labels(&self) -> Vec<(u32, Vec<u8>)> {
        let n = self.pids.len() as u32;
        let values = [
            (labels::C_VERSION, Value::Versions(self.versions.clone())),
            (labels::C_NHOSTS, Value::Count(1)),
            (labels::C_NPROCS, Value::Count(n)),
            (labels::C_DATALEN, Value::Count(self.datalen)),
            (labels::C_TAGUB, Value::Int(self.tag_ub)),
            (labels::C_COLL_XSIZE, Value::Int(self.coll_xsize)),
            (labels::C_COLL_MAXLINEAR, Value::Int(self.coll_maxlinear)),
            (labels::H_IPV6, Value::Addrs(vec![self.host_ipv6])),
            (labels::H_PORT, Value::Counts(vec![self.host_port])),
            (labels::H_NPROCS, Value::Counts(vec![n])),
            (labels::H_ACKMARK, Value::Counts(vec![self.ackmark])),
            (labels::H_HIWATER, Value::Counts(vec![self.hiwater])),
            (
                labels::P_IPV6,
                Value::Addrs(vec![self.host_ipv6; n as usize]),
            ),
            (labels::P_PID, Value::Pids(self.pids.clone())),
        ];
        let mut out: Vec<(u32, Vec<u8>)> =
            values.into_iter().map(|(l, v)| (l, v.encode())).collect();
        if !self.proc_ports.is_empty() {
            out.push((
                labels::RIVET_P_PORT,
                Value::Counts(self.proc_ports.clone()).encode(),
            ));
        }
        if let Some(n) = self.nonce {
            out.push((labels::RIVET_C_NONCE, Value::Addrs(vec![n]).encode()));
        }
        if let Some((ackmark, hiwater)) = self.rivet_flow {
            out.push((
                labels::RIVET_H_ACKMARK,
                Value::Counts(vec![ackmark]).encode(),
            ));
            out.push((
                labels::RIVET_H_HIWATER,
                Value::Counts(vec![hiwater]).encode(),
            ));
        }
        out
    }
}

/// One host of the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub client: u32,
    pub ipv6: [u8; 16],
    pub port: u32,
    pub nprocs: u32,
    pub ackmark: u32,
    pub hiwater: u32,
    /// What the host asks of other Rivet hosts (`RIVET_H_ACKMARK`,
    /// `RIVET_H_HIWATER`); `None` for a host whose client sent neither.
    /// The `impi` netmod applies it to direct channels between two hosts
    /// that both sent it (`rivet_netmods::impi::config::ProcInfo::flow_from`).
    pub rivet_flow: Option<(u32, u32)>,
}

/// One proc (MPI process) of the job; its index is its global rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub client: u32,
    pub host: u32,
    pub ipv6: [u8; 16],
    pub pid: i64,
}

/// The whole job as every client learns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct World {
    pub client: u32,
    pub nclients: u32,
    pub version: (u32, u32),
    pub nhosts: Vec<u32>,
    pub nprocs: Vec<u32>,
    /// `IMPI_Pk_maxdatalen`: the smallest `C_DATALEN`.
    pub maxdatalen: u32,
    /// `IMPI_Tag_ub`: the smallest `C_TAGUB`.
    pub tag_ub: i32,
    pub coll_xsize: i32,
    pub coll_maxlinear: i32,
    pub hosts: Vec<Host>,
    pub procs: Vec<Proc>,
    /// `RIVET_P_PORT` per proc (global rank); 0 for procs of clients that
    /// did not send it (they are reached through their host only).
    pub proc_ports: Vec<u32>,
    /// `RIVET_C_NONCE` per client (`None` for clients that did not send it).
    pub nonces: Vec<Option<[u8; 16]>>,
}

impl World {
    /// The global rank of client `c`'s first proc.
    pub fn first_rank(&self, c: u32) -> u32 {
        self.nprocs[..c as usize].iter().sum()
    }

    /// The global index of client `c`'s first host.
    pub fn first_host(&self, c: u32) -> u32 {
        self.nhosts[..c as usize].iter().sum()
    }
}

/// Collects broadcasts as they come, in any order the labels allow.
#[derive(Debug)]
pub struct WorldBuilder {
    client: u32,
    nclients: usize,
    seen: Vec<(u32, Vec<Option<Value>>)>,
    nhosts: Option<Vec<u32>>,
    nprocs: Option<Vec<u32>>,
}

fn invalid(why: String) -> WireError {
    WireError::Invalid {
        what: "startup data",
        why,
    }
}

impl WorldBuilder {
    pub fn new(client: u32, nclients: u32) -> WorldBuilder {
        WorldBuilder {
            client,
            nclients: nclients as usize,
            seen: Vec::new(),
            nhosts: None,
            nprocs: None,
        }
    }

    /// Take one broadcast; labels this version does not use are ignored
    /// (2.3.5: clients are free to).
    pub fn take(&mut self, b: &Broadcast) -> Result<(), WireError> {
        let (scope, _) = labels::shape(b.label);
        let counts = match scope {
            labels::Scope::Unknown => return Ok(()),
            labels::Scope::Client => Vec::new(),
            labels::Scope::Host => self.nhosts.clone().ok_or_else(|| {
                invalid(format!(
                    "{} came before IMPI_C_NHOSTS",
                    labels::label_name(b.label)
                ))
            })?,
            labels::Scope::Proc => self.nprocs.clone().ok_or_else(|| {
                invalid(format!(
                    "{} came before IMPI_C_NPROCS",
                    labels::label_name(b.label)
                ))
            })?,
        };
        let parts = b.split(self.nclients, &counts)?;
        let values = parts
            .into_iter()
            .map(|p| p.map(|bytes| Value::decode(b.label, bytes)).transpose())
            .collect::<Result<Vec<_>, _>>()?;
        if b.label == labels::C_NHOSTS || b.label == labels::C_NPROCS {
            let mut n = Vec::with_capacity(self.nclients);
            for (i, v) in values.iter().enumerate() {
                match v {
                    Some(Value::Count(c)) if *c >= 1 => n.push(*c),
                    _ => {
                        return Err(invalid(format!(
                            "client {i} has no valid {} (must be at least 1)",
                            labels::label_name(b.label)
                        )))
                    }
                }
            }
            // Bound what later labels may make anyone allocate.
            if n.iter().map(|&x| x as u64).sum::<u64>() > 1 << 24 {
                return Err(invalid(format!(
                    "{} adds up to more than 2^24",
                    labels::label_name(b.label)
                )));
            }
            if b.label == labels::C_NHOSTS {
                self.nhosts = Some(n);
            } else {
                self.nprocs = Some(n);
            }
        }
        self.seen.retain(|(l, _)| *l != b.label);
        self.seen.push((b.label, values));
        Ok(())
    }

    fn all(&self, label: u32) -> Result<Vec<&Value>, WireError> {
        let (_, values) =
            self.seen.iter().find(|(l, _)| *l == label).ok_or_else(|| {
                invalid(format!("no {} was exchanged", labels::label_name(label)))
            })?;
        values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_ref().ok_or_else(|| {
                    invalid(format!(
                        "client {i} sent no {}, which IMPI 0.0 requires",
                        labels::label_name(label)
                    ))
                })
            })
            .collect()
    }

    fn ints(&self, label: u32) -> Result<Vec<i64>, WireError> {
        self.all(label)?
            .into_iter()
            .map(|v| match v {
                Value::Count(n) => Ok(*n as i64),
                Value::Int(n) => Ok(*n as i64),
                other => Err(invalid(format!(
                    "{other:?} for {}",
                    labels::label_name(label)
                ))),
            })
            .collect()
    }

    fn per_host_u32(&self, label: u32) -> Result<Vec<u32>, WireError> {
        let mut out = Vec::new();
        for v in self.all(label)? {
            match v {
                Value::Counts(c) => out.extend_from_slice(c),
                other => {
                    return Err(invalid(format!(
                        "{other:?} for {}",
                        labels::label_name(label)
                    )))
                }
            }
        }
        Ok(out)
    }

    fn addrs(&self, label: u32) -> Result<Vec<[u8; 16]>, WireError> {
        let mut out = Vec::new();
        for v in self.all(label)? {
            match v {
                Value::Addrs(a) => out.extend_from_slice(a),
                other => {
                    return Err(invalid(format!(
                        "{other:?} for {}",
                        labels::label_name(label)
                    )))
                }
            }
        }
        Ok(out)
    }

    /// Agree on a collective crossover: all -1 (default), or all the same.
    fn agreed(&self, label: u32, default: i32) -> Result<i32, WireError> {
        let v = self.ints(label)?;
        let chosen: Vec<i64> = v.iter().copied().filter(|&x| x != -1).collect();
        match chosen.first() {
            None => Ok(default),
            Some(&x) if chosen.len() == v.len() && chosen.iter().all(|&y| y == x) && x >= 0 => {
                Ok(x as i32)
            }
            _ => Err(invalid(format!(
                "clients disagree on {}: {v:?} (all must send the same value, or all -1)",
                labels::label_name(label)
            ))),
        }
    }

    /// Per host, Rivet's flow control where its client sent both labels
    /// with one value per host; a value breaking 3.9's `1 <= ackmark <=
    /// hiwater` is refused, as the standard ones are.
    fn rivet_flows(&self, nhosts: &[u32], hosts: &mut [Host]) -> Result<(), WireError> {
        let per_client = |label: u32| -> Vec<Option<Vec<u32>>> {
            let mut out = vec![None; self.nclients];
            if let Some((_, values)) = self.seen.iter().find(|(l, _)| *l == label) {
                for (c, v) in values.iter().enumerate().take(self.nclients) {
                    if let Some(Value::Counts(n)) = v {
                        out[c] = Some(n.clone());
                    }
                }
            }
            out
        };
        let acks = per_client(labels::RIVET_H_ACKMARK);
        let his = per_client(labels::RIVET_H_HIWATER);
        let mut first = 0usize;
        for (c, &n) in nhosts.iter().enumerate() {
            let n = n as usize;
            if let (Some(a), Some(h)) = (&acks[c], &his[c]) {
                if a.len() == n && h.len() == n {
                    for k in 0..n {
                        if !(1 <= a[k] && a[k] <= h[k]) {
                            return Err(invalid(format!(
                                "host {}: RIVET_H_ACKMARK {} and RIVET_H_HIWATER {} break 1 <= \
                                 ackmark <= hiwater",
                                first + k,
                                a[k],
                                h[k]
                            )));
                        }
                        hosts[first + k].rivet_flow = Some((a[k], h[k]));
                    }
                }
            }
            first += n;
        }
        Ok(())
    }

    /// The job, once every label of version 0.0 was exchanged.
    pub fn finish(&self) -> Result<World, WireError> {
        let lists: Vec<Vec<(u32, u32)>> = self
            .all(labels::C_VERSION)?
            .into_iter()
            .map(|v| match v {
                Value::Versions(l) => l.clone(),
                _ => Vec::new(),
            })
            .collect();
        let version = common_version(&lists)
            .ok_or_else(|| invalid(format!("no IMPI version common to every client: {lists:?}")))?;
        let nhosts = self
            .nhosts
            .clone()
            .ok_or_else(|| invalid("no IMPI_C_NHOSTS".into()))?;
        let nprocs = self
            .nprocs
            .clone()
            .ok_or_else(|| invalid("no IMPI_C_NPROCS".into()))?;
        let maxdatalen = self.ints(labels::C_DATALEN)?.into_iter().min().unwrap_or(0);
        if maxdatalen < 1 {
            return Err(invalid("IMPI_C_DATALEN must be at least 1".into()));
        }
        let tag_ub = self.ints(labels::C_TAGUB)?.into_iter().min().unwrap_or(0);
        if !(32767..=i32::MAX as i64).contains(&tag_ub) {
            return Err(invalid(format!(
                "IMPI_C_TAGUB {tag_ub} is outside 32767..=2147483647 (3.9)"
            )));
        }
        let ipv6 = self.addrs(labels::H_IPV6)?;
        let ports = self.per_host_u32(labels::H_PORT)?;
        let host_procs = self.per_host_u32(labels::H_NPROCS)?;
        let ackmarks = self.per_host_u32(labels::H_ACKMARK)?;
        let hiwaters = self.per_host_u32(labels::H_HIWATER)?;
        let total_hosts: u32 = nhosts.iter().sum();
        let total_procs: u32 = nprocs.iter().sum();
        for (name, len) in [
            ("IMPI_H_IPV6", ipv6.len()),
            ("IMPI_H_PORT", ports.len()),
            ("IMPI_H_NPROCS", host_procs.len()),
            ("IMPI_H_ACKMARK", ackmarks.len()),
            ("IMPI_H_HIWATER", hiwaters.len()),
        ] {
            if len != total_hosts as usize {
                return Err(invalid(format!(
                    "{name} has {len} values for {total_hosts} hosts"
                )));
            }
        }
        let mut hosts = Vec::new();
        for (c, &n) in nhosts.iter().enumerate() {
            for _ in 0..n {
                let h = hosts.len();
                let host = Host {
                    client: c as u32,
                    ipv6: ipv6[h],
                    port: ports[h],
                    nprocs: host_procs[h],
                    ackmark: ackmarks[h],
                    hiwater: hiwaters[h],
                    rivet_flow: None,
                };
                if !(1 <= host.ackmark && host.ackmark <= host.hiwater) {
                    return Err(invalid(format!(
                        "host {h}: ackmark {} and hiwater {} break 1 <= ackmark <= hiwater (3.9)",
                        host.ackmark, host.hiwater
                    )));
                }
                hosts.push(host);
            }
        }
        self.rivet_flows(&nhosts, &mut hosts)?;
        let pipv6 = self.addrs(labels::P_IPV6)?;
        if pipv6.len() != total_procs as usize {
            return Err(invalid(format!(
                "IMPI_P_IPV6 has {} values for {total_procs} procs",
                pipv6.len()
            )));
        }
        let mut pids = Vec::new();
        for v in self.all(labels::P_PID)? {
            if let Value::Pids(p) = v {
                pids.extend_from_slice(p);
            }
        }
        let mut procs = Vec::new();
        let mut h = 0usize;
        for (c, &n) in nprocs.iter().enumerate() {
            let first_host = h;
            let on_hosts: u32 = hosts[first_host..first_host + nhosts[c] as usize]
                .iter()
                .map(|x| x.nprocs)
                .sum();
            if on_hosts != n {
                return Err(invalid(format!(
                    "client {c}: IMPI_H_NPROCS adds up to {on_hosts}, IMPI_C_NPROCS says {n}"
                )));
            }
            for (k, host) in hosts[first_host..first_host + nhosts[c] as usize]
                .iter()
                .enumerate()
            {
                for _ in 0..host.nprocs {
                    let p = procs.len();
                    procs.push(Proc {
                        client: c as u32,
                        host: (first_host + k) as u32,
                        ipv6: pipv6[p],
                        pid: pids.get(p).copied().unwrap_or(-1),
                    });
                }
            }
            h += nhosts[c] as usize;
        }
        if pids.len() != procs.len() {
            return Err(invalid(format!(
                "{} pids for {} procs",
                pids.len(),
                procs.len()
            )));
        }
        let mut proc_ports = vec![0u32; procs.len()];
        if let Some((_, values)) = self.seen.iter().find(|(l, _)| *l == labels::RIVET_P_PORT) {
            for (c, v) in values.iter().enumerate() {
                if let Some(Value::Counts(ports)) = v {
                    let first: u32 = nprocs[..c].iter().sum();
                    if ports.len() == nprocs[c] as usize {
                        proc_ports[first as usize..first as usize + ports.len()]
                            .copy_from_slice(ports);
                    }
                }
            }
        }
        let mut nonces = vec![None; self.nclients];
        if let Some((_, values)) = self.seen.iter().find(|(l, _)| *l == labels::RIVET_C_NONCE) {
            for (c, v) in values.iter().enumerate() {
                if let Some(Value::Addrs(a)) = v {
                    nonces[c] = a.first().copied();
                }
            }
        }
        Ok(World {
            client: self.client,
            nclients: self.nclients as u32,
            version,
            maxdatalen: maxdatalen as u32,
            tag_ub: tag_ub as i32,
            coll_xsize: self.agreed(labels::C_COLL_XSIZE, labels::DEFAULT_COLL_XSIZE)?,
            coll_maxlinear: self
                .agreed(labels::C_COLL_MAXLINEAR, labels::DEFAULT_COLL_MAXLINEAR)?,
            nhosts,
            nprocs,
            hosts,
            procs,
            proc_ports,
            nonces,
        })
    }
}

#[cfg(test)]
#[path = "world_tests.rs"]
mod tests;
