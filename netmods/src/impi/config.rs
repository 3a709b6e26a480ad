//! What a rank of an IMPI job knows of the job: the `IMPI_*` variables
//! `rivetrun --impi-client` hands its ranks (launcher/src/impi/client.rs),
//! parsed and checked.
//!
//! `IMPI_PROCS` holds one entry per global rank, comma-separated:
//! `IP:PORT/PID/ACKMARK/HIWATER[/RACKMARK/RHIWATER]` (the proc's
//! direct-channel address, port 0 for none; its `IMPI_P_PID`; its host's
//! `IMPI_H_ACKMARK`/`IMPI_H_HIWATER`; and, for a Rivet host, its
//! `RIVET_H_ACKMARK`/`RIVET_H_HIWATER`, which govern direct channels
//! between two Rivet hosts: [`ProcInfo::flow_from`]).
//! `IMPI_LISTEN_FDS` lists the inherited listening sockets by local rank
//! (-1: none, for a client that sent no `RIVET_P_PORT`). `IMPI_FUNNEL_FDS`
//! (optional) lists, per local rank (comma-separated), `G=FD` entries joined
//! by `;`: the inherited socket to the launcher, the agent, that carries the
//! channel to world rank G when one side has no direct channel.

use std::net::{IpAddr, SocketAddr};

use super::packet::Proc;
use crate::auth::JobKey;

/// The variable holding the key direct-channel hellos are proven with
/// (32 hex digits), derived alike by every client's launcher.
pub const ENV_CHANNEL_KEY: &str = "IMPI_CHANNEL_KEY";

/// One proc of the job, by global rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcInfo {
    /// Its direct channel's address (`port() == 0`: it has none).
    pub addr: SocketAddr,
    /// `IMPI_Proc`: host id (IPv6 or IPv4-mapped) and pid.
    pub proc: Proc,
    /// The flow control of its host (3.6; the receiver's pair governs).
    pub ackmark: u32,
    pub hiwater: u32,
    /// Its host's flow control for other Rivet hosts, if it sent one.
    pub rivet_flow: Option<(u32, u32)>,
}

impl ProcInfo {
    /// `(ackmark, hiwater)` governing what `sender` sends this proc: its
    /// host's (the receiver buffers and acknowledges). Rivet's own pair
    /// when both hosts sent one and the channel is `direct` (no agent
    /// between, so no agent's memory bound depends on it); else the
    /// standard labels', which a client of another implementation knows.
    pub fn flow_from(&self, sender: &ProcInfo, direct: bool) -> (u32, u32) {
        match (self.rivet_flow, sender.rivet_flow) {
            (Some(mine), Some(_)) if direct => mine,
            _ => (self.ackmark, self.hiwater),
        }
    }
}

/// The job as one rank sees it.
#[derive(Debug, Clone)]
pub struct ImpiConfig {
    /// This client's first global rank and its number of procs.
    pub offset: u32,
    pub client_size: u32,
    /// This process's global rank.
    pub rank: u32,
    /// `IMPI_Pk_maxdatalen`.
    pub maxdatalen: u32,
    pub procs: Vec<ProcInfo>,
    /// The inherited listening socket of this rank (`IMPI_LISTEN_FDS`;
    /// negative: none).
    pub listen_fd: i32,
    /// The other ranks' inherited sockets, which this one closes.
    pub other_fds: Vec<i32>,
    /// `(world rank, socket)`: peers reached through the agent
    /// (`IMPI_FUNNEL_FDS`), each on a socket of its own.
    pub funnel: Vec<(u32, i32)>,
    /// Each client's first global rank (`IMPI_CLIENT_NPROCS` summed up).
    pub client_firsts: Vec<u32>,
    /// The key channel hellos prove (`IMPI_CHANNEL_KEY`); the netmod
    /// refuses to open without one.
    pub channel_key: Option<JobKey>,
}

fn bad(what: &str, why: impl std::fmt::Display) -> String {
    format!("IMPI: {what}: {why} (set by `rivetrun --impi-client`)")
}

fn parse_proc(entry: &str) -> Result<ProcInfo, String> {
    let parts: Vec<&str> = entry.split('/').collect();
    let (addr, pid, ackmark, hiwater, rivet) = match parts[..] {
        [a, p, k, h] => (a, p, k, h, None),
        [a, p, k, h, rk, rh] => (a, p, k, h, Some((rk, rh))),
        _ => {
            return Err(format!(
                "{entry:?} is not IP:PORT/PID/ACKMARK/HIWATER[/RACKMARK/RHIWATER]"
            ))
        }
    };
    let addr: SocketAddr = addr
        .parse()
        .map_err(|e| format!("{addr:?} is not IP:PORT: {e}"))?;
    let num = |s: &str| s.parse::<u32>().map_err(|_| format!("{s:?} in {entry:?}"));
    let marks = |k: &str, h: &str| -> Result<(u32, u32), String> {
        let (k, h) = (num(k)?, num(h)?);
        if !(1 <= k && k <= h) {
            return Err(format!("{entry:?} breaks 1 <= ackmark <= hiwater"));
        }
        Ok((k, h))
    };
    let (ackmark, hiwater) = marks(ackmark, hiwater)?;
    let rivet_flow = rivet.map(|(k, h)| marks(k, h)).transpose()?;
    let pid = pid
        .parse::<i64>()
        .map_err(|_| format!("pid {pid:?} in {entry:?}"))?;
    let hostid = match addr.ip() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    };
    Ok(ProcInfo {
        addr,
        proc: Proc { hostid, pid },
        ackmark,
        hiwater,
        rivet_flow,
    })
}

/// Each client's first global rank; the counts must add up to `size`.
fn firsts(nprocs: &[u32], size: u32) -> Result<Vec<u32>, String> {
    let mut at = 0u64;
    let mut out = Vec::with_capacity(nprocs.len());
    for &n in nprocs {
        out.push(at as u32);
        at += n as u64;
    }
    if at != size as u64 {
        return Err(bad(
            "IMPI_CLIENT_NPROCS",
            format!("adds up to {at}, IMPI_PROCS lists {size}"),
        ));
    }
    Ok(out)
}

impl ImpiConfig {
    /// From the environment, for this client's rank `local` of `local_size`
    /// (the process manager's); `Ok(None)` when this is no IMPI job.
    pub fn from_env(local: u32, local_size: u32) -> Result<Option<ImpiConfig>, String> {
        let Ok(procs) = std::env::var("IMPI_PROCS") else {
            return Ok(None);
        };
        let var = |name: &str| std::env::var(name).map_err(|_| bad(name, "not set"));
        let offset: u32 = var("IMPI_WORLD_OFFSET")?
            .parse()
            .map_err(|e| bad("IMPI_WORLD_OFFSET", e))?;
        let maxdatalen: u32 = var("IMPI_MAXDATALEN")?
            .parse()
            .map_err(|e| bad("IMPI_MAXDATALEN", e))?;
        let fds: Vec<i32> = var("IMPI_LISTEN_FDS")?
            .split(',')
            .map(|f| f.parse().map_err(|e| bad("IMPI_LISTEN_FDS", e)))
            .collect::<Result<_, _>>()?;
        let nprocs: Vec<u32> = var("IMPI_CLIENT_NPROCS")?
            .split(',')
            .map(|n| n.parse().map_err(|e| bad("IMPI_CLIENT_NPROCS", e)))
            .collect::<Result<_, _>>()?;
        let mut c = Self::parse(&procs, offset, maxdatalen, &fds, local, local_size)?;
        if let Ok(funnel) = std::env::var("IMPI_FUNNEL_FDS") {
            c.set_funnel(&funnel, local)?;
        }
        c.client_firsts = firsts(&nprocs, c.size())?;
        c.channel_key = Some(
            JobKey::from_hex(&var(ENV_CHANNEL_KEY)?)
                .map_err(|_| bad(ENV_CHANNEL_KEY, "not 32 hex digits"))?,
        );
        Ok(Some(c))
    }

    /// The checks of `from_env` on given values.
    pub fn parse(
        procs: &str,
        offset: u32,
        maxdatalen: u32,
        fds: &[i32],
        local: u32,
        local_size: u32,
    ) -> Result<ImpiConfig, String> {
        let procs: Vec<ProcInfo> = procs
            .split(',')
            .map(parse_proc)
            .collect::<Result<_, _>>()
            .map_err(|e| bad("IMPI_PROCS", e))?;
        let end = offset as u64 + local_size as u64;
        if end > procs.len() as u64 || local >= local_size {
            return Err(bad(
                "IMPI_WORLD_OFFSET",
                format!(
                    "this client's ranks {offset}..{end} are not within the job's {} procs",
                    procs.len()
                ),
            ));
        }
        if fds.len() != local_size as usize {
            return Err(bad(
                "IMPI_LISTEN_FDS",
                format!("{} sockets for {local_size} ranks", fds.len()),
            ));
        }
        if maxdatalen == 0 {
            return Err(bad("IMPI_MAXDATALEN", "must be at least 1"));
        }
        Ok(ImpiConfig {
            offset,
            client_size: local_size,
            rank: offset + local,
            maxdatalen,
            procs,
            listen_fd: fds[local as usize],
            client_firsts: vec![0],
            channel_key: None,
            funnel: Vec::new(),
            other_fds: fds
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != local as usize)
                .map(|(_, &f)| f)
                .collect(),
        })
    }

    /// Take this rank's entry of `IMPI_FUNNEL_FDS`; the other ranks' sockets
    /// join `other_fds`.
    pub fn set_funnel(&mut self, text: &str, local: u32) -> Result<(), String> {
        let per_rank: Vec<&str> = text.split(',').collect();
        if per_rank.len() != self.client_size as usize {
            return Err(bad(
                "IMPI_FUNNEL_FDS",
                format!("{} entries for {} ranks", per_rank.len(), self.client_size),
            ));
        }
        for (l, entry) in per_rank.iter().enumerate() {
            for pair in entry.split(';').filter(|p| !p.is_empty()) {
                let parsed = pair
                    .split_once('=')
                    .and_then(|(g, fd)| Some((g.parse::<u32>().ok()?, fd.parse::<i32>().ok()?)));
                let Some((g, fd)) =
                    parsed.filter(|&(g, fd)| g < self.size() && !self.is_own(g) && fd >= 0)
                else {
                    return Err(bad(
                        "IMPI_FUNNEL_FDS",
                        format!("{pair:?} is not WORLD_RANK=FD for a rank of another client"),
                    ));
                };
                if l == local as usize {
                    if self.funnel.iter().any(|&(h, _)| h == g) {
                        return Err(bad("IMPI_FUNNEL_FDS", format!("world rank {g} twice")));
                    }
                    self.funnel.push((g, fd));
                } else {
                    self.other_fds.push(fd);
                }
            }
        }
        Ok(())
    }

    /// The agent's socket to world rank `g`, when `g` is reached through it.
    pub fn funnel_fd(&self, g: u32) -> Option<i32> {
        self.funnel
            .iter()
            .find(|&&(h, _)| h == g)
            .map(|&(_, fd)| fd)
    }

    /// Whether global rank `g` runs under this client.
    pub fn is_own(&self, g: u32) -> bool {
        g >= self.offset && g - self.offset < self.client_size
    }

    pub fn size(&self) -> u32 {
        self.procs.len() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launchers_variables_parse_and_bad_ones_are_refused() {
        let procs = "10.0.0.1:5000/7/16/32/64/256,10.0.0.1:5001/8/16/32/64/256,[::1]:6000/9/2/4";
        let c = ImpiConfig::parse(procs, 0, 65536, &[3, 4], 1, 2).unwrap();
        assert_eq!((c.rank, c.listen_fd, c.other_fds.clone()), (1, 4, vec![3]));
        assert!(c.is_own(0) && c.is_own(1) && !c.is_own(2));
        assert_eq!(c.procs[2].addr.port(), 6000);
        assert_eq!(c.procs[2].proc.pid, 9);
        assert_eq!(c.procs[0].proc.hostid[10..12], [0xff, 0xff]);
        assert_eq!((c.procs[2].ackmark, c.procs[2].hiwater), (2, 4));
        // Rivet's pair between two Rivet hosts, the standard one otherwise.
        assert_eq!(c.procs[0].rivet_flow, Some((64, 256)));
        assert_eq!(c.procs[0].flow_from(&c.procs[1], true), (64, 256));
        assert_eq!(c.procs[0].flow_from(&c.procs[1], false), (16, 32));
        assert_eq!(c.procs[0].flow_from(&c.procs[2], true), (16, 32));
        assert_eq!(c.procs[2].flow_from(&c.procs[0], true), (2, 4));
        for bad in [
            "10.0.0.1:5000/7/16",
            "10.0.0.1/7/16/32",
            "10.0.0.1:5000/x/16/32",
            "10.0.0.1:5000/7/0/32",
            "10.0.0.1:5000/7/33/32",
            "10.0.0.1:5000/7/16/32/64",
            "10.0.0.1:5000/7/16/32/65/64",
            "10.0.0.1:5000/7/16/32/0/64",
            "10.0.0.1:5000/7/16/32/1/2/3",
        ] {
            assert!(ImpiConfig::parse(bad, 0, 100, &[3], 0, 1).is_err(), "{bad}");
        }
        assert!(ImpiConfig::parse(procs, 2, 100, &[3, 4], 0, 2).is_err());
        assert!(ImpiConfig::parse(procs, 0, 100, &[3], 0, 2).is_err());
        assert!(ImpiConfig::parse(procs, 0, 0, &[3, 4], 0, 2).is_err());
        let mut c = ImpiConfig::parse(procs, 0, 65536, &[3, -1], 1, 2).unwrap();
        c.set_funnel("2=10,2=11", 1).unwrap();
        assert_eq!(
            (c.funnel.clone(), c.other_fds.clone()),
            (vec![(2, 11)], vec![3, 10])
        );
        assert_eq!(
            (c.funnel_fd(2), c.funnel_fd(0), c.listen_fd),
            (Some(11), None, -1)
        );
        for bad in ["2=10", "0=10,", "2=x,", "3=10,", "2=-1,", "2=5;2=6,2=7"] {
            let mut c = ImpiConfig::parse(procs, 0, 65536, &[3, 4], 0, 2).unwrap();
            assert!(c.set_funnel(bad, 0).is_err(), "{bad}");
        }
        assert_eq!(firsts(&[2, 1], 3).unwrap(), vec![0, 2]);
        assert!(firsts(&[2, 2], 3).is_err());
    }
}
