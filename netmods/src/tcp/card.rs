//! The business card: `tcp:ADDR:PORT[,ADDR:PORT...]`, addresses in the
//! order a connector should try them (IPv6 in brackets, as `SocketAddr`
//! writes them).

use std::net::SocketAddr;

use crate::NetmodError;

pub(crate) fn format(addrs: &[SocketAddr]) -> String {
    let list: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    format!("tcp:{}", list.join(","))
}

pub(crate) fn parse(card: &str) -> Result<Vec<SocketAddr>, NetmodError> {
    let bad = |why: String| NetmodError::BadCard {
        card: card.to_string(),
        why,
    };
    let rest = card
        .strip_prefix("tcp:")
        .ok_or_else(|| bad("not a tcp card (no \"tcp:\" prefix)".into()))?;
    let mut addrs = Vec::new();
    for part in rest.split(',') {
        let a: SocketAddr = part
            .parse()
            .map_err(|_| bad(format!("{part:?} is not ADDR:PORT")))?;
        if a.port() == 0 || a.ip().is_unspecified() {
            return Err(bad(format!("{part:?} cannot be connected to")));
        }
        addrs.push(a);
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let a: Vec<SocketAddr> = vec![
            "10.0.0.1:4000".parse().unwrap(),
            "[fe80::1]:5".parse().unwrap(),
        ];
        let c = format(&a);
        assert_eq!(c, "tcp:10.0.0.1:4000,[fe80::1]:5");
        assert_eq!(parse(&c).unwrap(), a);
        for bad in [
            "",
            "tcp:",
            "ofi:x",
            "tcp:1.2.3.4",
            "tcp:1.2.3.4:0",
            "tcp:0.0.0.0:5",
            "tcp:1.2.3.4:5,",
            "tcp:h:1",
        ] {
            assert!(
                matches!(parse(bad), Err(NetmodError::BadCard { .. })),
                "{bad}"
            );
        }
    }
}
