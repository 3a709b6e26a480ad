//! The business card: `ofi:PROVIDER:HEX`, the provider name as `fi_info`
//! prints it (`tcp;ofi_rxm`, `shm`) and the endpoint name (`fi_getname`)
//! in lowercase hex. Both sides must use the same provider: the name is
//! only meaningful to it.

use crate::NetmodError;

use super::wire::MAX_NAME;

pub(crate) fn format(provider: &str, name: &[u8]) -> String {
    let mut s = format!("ofi:{provider}:");
    for b in name {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The endpoint name in `card`, checked to be for `provider`.
pub(crate) fn parse(card: &str, provider: &str) -> Result<Vec<u8>, NetmodError> {
    let bad = |why: String| NetmodError::BadCard {
        card: card.to_string(),
        why,
    };
    let rest = card
        .strip_prefix("ofi:")
        .ok_or_else(|| bad("not an ofi card (no \"ofi:\" prefix)".into()))?;
    let (prov, hex) = rest
        .rsplit_once(':')
        .ok_or_else(|| bad("no endpoint name after the provider".into()))?;
    if prov != provider {
        return Err(bad(format!(
            "card is for provider {prov:?}, this process uses {provider:?}"
        )));
    }
    if hex.is_empty() || hex.len() % 2 != 0 || hex.len() / 2 > MAX_NAME {
        return Err(bad(format!(
            "endpoint name must be 1 to {MAX_NAME} bytes in hex"
        )));
    }
    hex.as_bytes()
        .chunks(2)
        .map(|p| {
            std::str::from_utf8(p)
                .ok()
                .and_then(|s| u8::from_str_radix(s, 16).ok())
                .ok_or_else(|| bad(format!("{:?} is not hex", String::from_utf8_lossy(p))))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let name = b"fi_shm://12:0:1\0";
        let c = format("tcp;ofi_rxm", name);
        assert!(c.starts_with("ofi:tcp;ofi_rxm:66695f"));
        assert!(!c.contains(char::is_whitespace));
        assert_eq!(parse(&c, "tcp;ofi_rxm").unwrap(), name);
        let e = parse(&c, "shm").unwrap_err().to_string();
        assert!(e.contains("provider \"tcp;ofi_rxm\""), "{e}");
        let long = format!("ofi:shm:{}", "00".repeat(MAX_NAME + 1));
        for bad in [
            "",
            "ofi:",
            "ofi:shm",
            "ofi:shm:",
            "ofi:shm:abc",
            "ofi:shm:zz",
            "ofi:shm:é0",
            "tcp:127.0.0.1:5",
            long.as_str(),
        ] {
            assert!(
                matches!(parse(bad, "shm"), Err(NetmodError::BadCard { .. })),
                "{bad:?}"
            );
        }
    }
}
