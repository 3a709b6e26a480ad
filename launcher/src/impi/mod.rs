//! IMPI (seed 003): one MPI_COMM_WORLD across separately started jobs.
//! `server` is `rivetrun --impi-server N`, the rendezvous point of chapter
//! 2; `client` is the startup a job run with `--impi-client RANK HOST:PORT`
//! goes through before its ranks start, and its shutdown after they end
//! (`hosts`: the hosts' connection dance and their channels' key);
//! `funnel` is rivetrun as its procs' agent on the host links while the
//! ranks run (packets of pairs without a direct channel, the links' watch).
//! The bytes both speak are `rivet_pmi::impi`'s.

pub mod client;
pub mod funnel;
mod hosts;
pub mod server;

use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs, UdpSocket};

/// This host's IPv4 address in dot notation, as the server prints it
/// (2.2.1: an address, not a name, so no lookup can fail on the clients):
/// the source address of the default route, else what the host name
/// resolves to, else loopback.
pub fn local_ipv4() -> Ipv4Addr {
    let routed = UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("192.0.2.1:9").map(|()| s))
        .and_then(|s| s.local_addr());
    if let Ok(addr) = routed {
        if let IpAddr::V4(ip) = addr.ip() {
            if !ip.is_unspecified() && !ip.is_loopback() {
                return ip;
            }
        }
    }
    let host = crate::info::hostname();
    if let Ok(addrs) = (host.as_str(), 0).to_socket_addrs() {
        for a in addrs {
            if let IpAddr::V4(ip) = a.ip() {
                if !ip.is_loopback() {
                    return ip;
                }
            }
        }
    }
    Ipv4Addr::LOCALHOST
}
