//! The address proxies (and, through `RIVET_TCP_IFACE`, ranks) use to reach
//! rivetrun: `--iface NAME`'s IPv4 address, else the source address the
//! routing table picks toward the first remote host (a UDP socket
//! "connected" there sends nothing but is given that address), else the
//! first up non-loopback interface's. IPv4 only: a host that resolves only
//! to IPv6 addresses, or an `--iface` with only IPv6 ones, is refused at
//! once, saying so (MPICH's PMI client could not read an IPv6 `PMI_PORT`
//! either: it splits it at the first colon).

use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs, UdpSocket};

/// The address to listen on and advertise.
pub fn control_address(iface: Option<&str>, hosts: &[&str]) -> Result<Ipv4Addr, String> {
    if let Some(name) = iface {
        let addrs = rivet_netmods::tcp::interface_addresses(&[name.to_string()])
            .map_err(|e| format!("--iface {name}: {e}"))?;
        return addrs
            .first()
            .copied()
            .ok_or_else(|| format!("--iface {name}: no IPv4 address"));
    }
    for host in hosts.iter().filter(|h| !super::start::is_local(h)) {
        if let Some(ip) = route_source(host) {
            return Ok(ip);
        }
        if let Some(v6) = only_ipv6(host) {
            // Its proxy could not reach an IPv4 address of ours.
            return Err(format!(
                "host {host} has only IPv6 addresses ({v6}): not supported (rivetrun's \
                 proxies connect back over IPv4, and MPICH's PMI client splits PMI_PORT \
                 at its first colon, so it could not take an IPv6 address either)"
            ));
        }
    }
    if hosts.iter().all(|h| super::start::is_local(h)) {
        return Ok(Ipv4Addr::LOCALHOST);
    }
    rivet_netmods::tcp::interface_addresses(&[])
        .map_err(|e| e.to_string())?
        .first()
        .copied()
        .ok_or_else(|| "no IPv4 address to offer the proxies; pass --iface NAME".into())
}

/// `host`'s addresses, if it resolves and only to IPv6 ones.
fn only_ipv6(host: &str) -> Option<String> {
    let addrs: Vec<_> = (host, 9).to_socket_addrs().ok()?.map(|a| a.ip()).collect();
    if addrs.is_empty() || addrs.iter().any(IpAddr::is_ipv4) {
        return None;
    }
    let mut words: Vec<String> = addrs.iter().map(IpAddr::to_string).collect();
    words.dedup();
    Some(words.join(", "))
}

/// The local address the kernel would send from toward `host`.
fn route_source(host: &str) -> Option<Ipv4Addr> {
    let target = (host, 9).to_socket_addrs().ok()?.find(|a| a.is_ipv4())?;
    let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    sock.connect(target).ok()?;
    match sock.local_addr().ok()?.ip() {
        IpAddr::V4(ip) if !ip.is_unspecified() => Some(ip),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_routes_from_loopback_and_bad_iface_is_an_error() {
        assert_eq!(route_source("127.0.0.1"), Some(Ipv4Addr::LOCALHOST));
        assert_eq!(
            control_address(None, &["localhost"]).unwrap(),
            Ipv4Addr::LOCALHOST
        );
        let err = control_address(Some("no-such-if0"), &["x"]).unwrap_err();
        assert!(err.contains("no-such-if0"), "{err}");
    }

    #[test]
    fn a_host_with_only_ipv6_addresses_is_refused_naming_them() {
        // An address of IPv6's documentation range: resolves (to itself)
        // without any name service.
        let err = control_address(None, &["2001:db8::7"]).unwrap_err();
        assert!(
            err.contains("host 2001:db8::7 has only IPv6 addresses (2001:db8::7)"),
            "{err}"
        );
        assert!(err.contains("not supported"), "{err}");
        assert_eq!(only_ipv6("127.0.0.1"), None);
        assert_eq!(only_ipv6("no-such-host.invalid"), None);
    }
}
