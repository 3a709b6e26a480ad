//! What tests learn about a running job's processes from `/proc`: which
//! child of rivetrun is which rank, what it listens on, its environment,
//! its peak memory.

use std::net::{Ipv4Addr, SocketAddr};

/// Fields of `/proc/<pid>/stat` after the command name.
pub fn stat_fields(pid: u32) -> Vec<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(") ")
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The child of `parent` whose environment has `PMI_RANK=rank`.
pub fn rank_pid(parent: u32, rank: u32) -> Option<u32> {
    let want = format!("PMI_RANK={rank}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        if stat_fields(pid).get(1)? != &parent.to_string() {
            return None;
        }
        let env = std::fs::read(e.path().join("environ")).ok()?;
        env.split(|&b| b == 0)
            .any(|v| v == want.as_bytes())
            .then_some(pid)
    })
}

/// The TCP addresses process `pid` listens on (from its socket inodes and
/// /proc/net/tcp).
pub fn listening(pid: u32) -> Vec<SocketAddr> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter_map(|f| std::fs::read_link(f.path()).ok())
                .filter_map(|l| {
                    let l = l.to_string_lossy().into_owned();
                    l.strip_prefix("socket:[")?
                        .strip_suffix(']')
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address st ... inode
            if f.get(3) != Some(&"0A") || !inodes.iter().any(|i| Some(&i.as_str()) == f.get(9)) {
                return None;
            }
            let (ip, port) = f.get(1)?.split_once(':')?;
            let ip = u32::from_str_radix(ip, 16).ok()?;
            let port = u16::from_str_radix(port, 16).ok()?;
            // /proc prints the network-order word as a host (little-endian) integer.
            let ip = Ipv4Addr::from(ip.to_le_bytes());
            let ip = if ip.is_unspecified() {
                Ipv4Addr::LOCALHOST
            } else {
                ip
            };
            Some(SocketAddr::new(ip.into(), port))
        })
        .collect()
}

/// The `PMI_PORT` in the environment of a child of `parent`.
pub fn pmi_port_of_child(parent: u32) -> Option<String> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let path = entry.path();
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        // The parent pid is the second field after the parenthesised name.
        let ppid = stat
            .rsplit(") ")
            .next()
            .and_then(|s| s.split_whitespace().nth(1))
            .and_then(|s| s.parse::<u32>().ok());
        if ppid != Some(parent) {
            continue;
        }
        let environ = std::fs::read(path.join("environ")).unwrap_or_default();
        for var in environ.split(|&b| b == 0) {
            if let Some(v) = var.strip_prefix(b"PMI_PORT=") {
                return Some(String::from_utf8_lossy(v).into_owned());
            }
        }
    }
    None
}

/// Process `pid`'s peak resident memory (`VmHWM`) in bytes, if it lives.
pub fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
