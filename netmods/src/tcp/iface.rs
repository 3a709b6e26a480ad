//! Which local addresses go in the business card (`RIVET_TCP_IFACE`),
//! from `getifaddrs`.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::NetmodError;

use super::sys;

#[derive(Debug, Default)]
struct Iface {
    up: bool,
    loopback: bool,
    v4: Vec<Ipv4Addr>,
    /// Named when an interface has no IPv4 address, to say why it is refused.
    v6: Vec<Ipv6Addr>,
}

/// Every interface by name, with its addresses.
fn list() -> io::Result<BTreeMap<String, Iface>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out: BTreeMap<String, Iface> = BTreeMap::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned.
        let ifa = unsafe { &*p };
        // SAFETY: ifa_name is a NUL-terminated string of the node.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let e = out.entry(name).or_default();
        e.up |= ifa.ifa_flags & libc::IFF_UP as u32 != 0;
        e.loopback |= ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0;
        if !ifa.ifa_addr.is_null() {
            // SAFETY: a non-null ifa_addr is a valid address of its family.
            match unsafe { sys::to_ip(ifa.ifa_addr) } {
                Some(IpAddr::V4(a)) => e.v4.push(a),
                Some(IpAddr::V6(a)) => e.v6.push(a),
                None => {}
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// The IPv4 addresses to publish, and whether exactly one interface was
/// chosen (then the listener binds to its address alone).
pub(crate) fn select(wanted: &[String]) -> Result<(Vec<Ipv4Addr>, bool), NetmodError> {
    let all = list().map_err(|source| NetmodError::Io {
        what: "getifaddrs".into(),
        source,
    })?;
    let invalid = |why: String| NetmodError::Io {
        what: "RIVET_TCP_IFACE".into(),
        source: io::Error::new(io::ErrorKind::InvalidInput, why),
    };
    if !wanted.is_empty() {
        let mut addrs = Vec::new();
        for name in wanted {
            let Some(i) = all.get(name) else {
                let names: Vec<&str> = all.keys().map(|s| s.as_str()).collect();
                return Err(invalid(format!(
                    "no interface {name:?}; available: {}",
                    names.join(", ")
                )));
            };
            if i.v4.is_empty() && !i.v6.is_empty() {
                let v6: Vec<String> = i.v6.iter().map(Ipv6Addr::to_string).collect();
                return Err(invalid(format!(
                    "interface {name:?} has no IPv4 address, only IPv6 ({}): not supported \
                     (Rivet's tcp cards, rivetrun's proxies and PMI_PORT are IPv4)",
                    v6.join(", ")
                )));
            }
            if i.v4.is_empty() {
                return Err(invalid(format!("interface {name:?} has no IPv4 address")));
            }
            addrs.extend(&i.v4);
        }
        return Ok((addrs, wanted.len() == 1));
    }
    let pick = |lo: bool| -> Vec<&Iface> {
        all.values()
            .filter(|i| i.up && i.loopback == lo && !i.v4.is_empty())
            .collect()
    };
    let mut chosen = pick(false);
    if chosen.is_empty() {
        chosen = pick(true);
    }
    if chosen.is_empty() {
        return Err(invalid("no interface is up with an IPv4 address".into()));
    }
    let one = chosen.len() == 1;
    Ok((
        chosen
            .into_iter()
            .flat_map(|i| i.v4.iter().copied())
            .collect(),
        one,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_unknown() {
        let (a, one) = select(&["lo".into()]).unwrap();
        assert!(one);
        assert!(a.contains(&Ipv4Addr::LOCALHOST));
        assert!(!select(&[]).unwrap().0.is_empty());
        let e = select(&["no-such-if0".into()]).unwrap_err().to_string();
        assert!(e.contains("no-such-if0") && e.contains("lo"), "{e}");
    }
}
