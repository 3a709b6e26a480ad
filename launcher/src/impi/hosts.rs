//! The hosts of an IMPI run meet each other: the connection dance of
//! seed 003's 2.3.8 (connect to every lower host, accept from every higher
//! one), and the key their direct channels prove themselves with.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use rivet_netmods::auth::JobKey;
use rivet_pmi::impi::world::World;

use super::client::{fail, CONNECT_TIMEOUT, STARTUP_TIMEOUT};
use crate::error::LaunchError;

/// 16 bytes from the kernel's random source.
pub(super) fn random16() -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&rivet_netmods::auth::nonce());
    b[8..].copy_from_slice(&rivet_netmods::auth::nonce());
    b
}

/// The key every proc of the run proves its direct-channel hellos with:
/// a MAC, keyed by the AUTH key when KEY was chosen (else a constant),
/// over every client's `RIVET_C_NONCE` in client order. Every Rivet client
/// derives the same key from the same broadcast; nobody outside the run
/// saw the nonces, so a stranger reaching a proc's port cannot open a
/// channel (with KEY, not even one who learnt them without the key).
pub fn channel_key(nonces: &[Option<[u8; 16]>], auth_key: Option<u64>) -> JobKey {
    let mut base = *b"\0\0\0\0\0\0\0\0rivimpi\0";
    if let Some(k) = auth_key {
        base[..8].copy_from_slice(&k.to_be_bytes());
    }
    let base = JobKey::new(base);
    let mut all = Vec::with_capacity(nonces.len() * 17);
    for n in nonces {
        match n {
            Some(n) => {
                all.push(1);
                all.extend_from_slice(n);
            }
            None => all.push(0),
        }
    }
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&base.mac(&[b"rivet impi channel key", &[0], &all]));
    key[8..].copy_from_slice(&base.mac(&[b"rivet impi channel key", &[1], &all]));
    JobKey::new(key)
}

/// 2.3.8: connect to every lower host, accept from every higher one;
/// after a connect the connector sends its host rank (4 bytes).
pub(super) fn dance(
    world: &World,
    listener: TcpListener,
) -> Result<Vec<(u32, TcpStream)>, LaunchError> {
    let me = world.first_host(world.client);
    let mut links = Vec::new();
    for (i, host) in world.hosts.iter().enumerate() {
        let i = i as u32;
        if i < me {
            let ip = Ipv6Addr::from(host.ipv6);
            let ip = ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4);
            let port = u16::try_from(host.port)
                .map_err(|_| fail(format!("host {i} has port {}, not a TCP port", host.port)))?;
            let target = SocketAddr::new(ip, port);
            let mut s = TcpStream::connect_timeout(&target, CONNECT_TIMEOUT)
                .map_err(|e| fail(format!("cannot connect to host {i} at {target}: {e}")))?;
            s.write_all(&me.to_be_bytes())
                .map_err(|e| fail(format!("host {i} at {target}: {e}")))?;
            let _ = rivet_netmods::tcp::set_keepalive(&s, super::server::KEEPALIVE);
            links.push((i, s));
        }
    }
    let higher = world.hosts.len() as u32 - me - 1;
    listener.set_nonblocking(false).map_err(LaunchError::Io)?;
    for _ in 0..higher {
        let (mut s, from) = accept_timeout(&listener)?;
        s.set_read_timeout(Some(STARTUP_TIMEOUT))
            .map_err(LaunchError::Io)?;
        let mut rank = [0u8; 4];
        s.read_exact(&mut rank)
            .map_err(|e| fail(format!("a host connecting from {from} sent no rank: {e}")))?;
        let r = u32::from_be_bytes(rank);
        if r <= me || r as usize >= world.hosts.len() || links.iter().any(|(h, _)| *h == r) {
            return Err(fail(format!(
                "a host connecting from {from} claims host rank {r}"
            )));
        }
        let _ = rivet_netmods::tcp::set_keepalive(&s, super::server::KEEPALIVE);
        links.push((r, s));
    }
    links.sort_by_key(|(h, _)| *h);
    Ok(links)
}

fn accept_timeout(listener: &TcpListener) -> Result<(TcpStream, SocketAddr), LaunchError> {
    listener.set_nonblocking(true).map_err(LaunchError::Io)?;
    let start = std::time::Instant::now();
    loop {
        match listener.accept() {
            Ok((s, a)) => {
                s.set_nonblocking(false).map_err(LaunchError::Io)?;
                return Ok((s, a));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if start.elapsed() > STARTUP_TIMEOUT {
                    return Err(fail("a higher host never connected"));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(LaunchError::Io(e)),
        }
    }
}
