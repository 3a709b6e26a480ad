//! The AUTH exchange (seed 003, 2.3.3): the client's masks of methods it
//! offers, the server's choice (`which`, `len`, sent bare, without a
//! command header), then the method's own messages: none for
//! `IMPI_AUTH_NONE`, the client's 64-bit key for `IMPI_AUTH_KEY`.
//!
//! Which methods a side offers comes from its environment
//! (`IMPI_AUTH_NONE` present, `IMPI_AUTH_KEY` holding a value); the server's
//! order of preference from its `-auth` list.

use super::{be_i32, be_u32, be_u64, exact, WireError};

/// `IMPI_AUTH_NONE`: no authentication (the environment variable must be set).
pub const AUTH_NONE: u32 = 0;
/// `IMPI_AUTH_KEY`: the client sends a 64-bit key the server compares.
pub const AUTH_KEY: u32 = 1;

/// Environment variable whose presence offers `IMPI_AUTH_NONE`.
pub const ENV_NONE: &str = "IMPI_AUTH_NONE";
/// Environment variable holding the key that offers `IMPI_AUTH_KEY`.
pub const ENV_KEY: &str = "IMPI_AUTH_KEY";

/// The highest method number a preference list or mask may name (32 masks).
pub const MAX_METHOD: u32 = 1023;

/// What a client offers: bit `i % 32` of mask `i / 32` is method `i`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientAuth {
    pub masks: Vec<u32>,
}

impl ClientAuth {
    /// The masks offering exactly `methods`.
    pub fn offering(methods: &[u32]) -> ClientAuth {
        let words = methods.iter().map(|m| m / 32 + 1).max().unwrap_or(1) as usize;
        let mut masks = vec![0u32; words];
        for &m in methods {
            masks[(m / 32) as usize] |= 1 << (m % 32);
        }
        ClientAuth { masks }
    }

    pub fn offers(&self, method: u32) -> bool {
        self.masks
            .get((method / 32) as usize)
            .is_some_and(|w| w & (1 << (method % 32)) != 0)
    }

    /// The AUTH command's payload.
    pub fn encode(&self) -> Vec<u8> {
        self.masks.iter().flat_map(|m| m.to_be_bytes()).collect()
    }

    /// One or more 4-byte masks, at most enough for `MAX_METHOD`.
    pub fn decode(payload: &[u8]) -> Result<ClientAuth, WireError> {
        let most = (MAX_METHOD as usize / 32 + 1) * 4;
        if payload.is_empty() {
            return Err(WireError::Truncated {
                what: "AUTH mask",
                got: 0,
                need: 4,
            });
        }
        if payload.len() > most {
            return Err(WireError::TooLong {
                what: "AUTH masks",
                len: payload.len() as i64,
                max: most,
            });
        }
        if payload.len() % 4 != 0 {
            return Err(WireError::Ragged {
                what: "AUTH masks",
                len: payload.len(),
                elem: 4,
            });
        }
        let masks = (0..payload.len() / 4)
            .map(|i| be_u32(payload, i * 4, "AUTH mask"))
            .collect::<Result<_, _>>()?;
        Ok(ClientAuth { masks })
    }
}

/// The server's choice: the method, and how many method bytes follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerAuth {
    pub which: i32,
    pub len: i32,
}

impl ServerAuth {
    pub const LEN: usize = 8;

    pub fn encode(self) -> [u8; 8] {
        let mut out = [0u8; 8];
        out[..4].copy_from_slice(&self.which.to_be_bytes());
        out[4..].copy_from_slice(&self.len.to_be_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<ServerAuth, WireError> {
        exact(bytes, 8, "server AUTH reply")?;
        Ok(ServerAuth {
            which: be_i32(bytes, 0, "server AUTH reply")?,
            len: be_i32(bytes, 4, "server AUTH reply")?,
        })
    }
}

/// `IMPI_Auth_key`: 8 bytes, network order.
pub fn encode_key(key: u64) -> [u8; 8] {
    key.to_be_bytes()
}

pub fn decode_key(bytes: &[u8]) -> Result<u64, WireError> {
    exact(bytes, 8, "AUTH key")?;
    be_u64(bytes, 0, "AUTH key")
}

/// The methods one side can negotiate, read from its environment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Available {
    pub none: bool,
    pub key: Option<u64>,
}

impl Available {
    /// From `IMPI_AUTH_NONE` (present) and `IMPI_AUTH_KEY` (a value: an
    /// unsigned 64-bit number, decimal or 0x hex).
    pub fn from_env() -> Result<Available, String> {
        let none = std::env::var_os(ENV_NONE).is_some();
        let key = match std::env::var(ENV_KEY) {
            Ok(v) if !v.trim().is_empty() => Some(parse_key(&v)?),
            Ok(_) => None,
            Err(std::env::VarError::NotPresent) => None,
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(format!("{ENV_KEY} is not text"));
            }
        };
        Ok(Available { none, key })
    }

    /// Method numbers on offer, strongest first.
    pub fn methods(&self) -> Vec<u32> {
        let mut m = Vec::new();
        if self.key.is_some() {
            m.push(AUTH_KEY);
        }
        if self.none {
            m.push(AUTH_NONE);
        }
        m
    }

    /// The error both sides print when nothing is on offer (2.3.3).
    pub fn require_some(&self) -> Result<(), String> {
        if self.methods().is_empty() {
            return Err(format!(
                "no authentication methods available for negotiation: set {ENV_KEY}=<number> \
                 (the same on the server and every client) or {ENV_NONE}"
            ));
        }
        Ok(())
    }
}

/// A key as `IMPI_AUTH_KEY` holds it.
pub fn parse_key(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse::<u64>(),
    };
    parsed.map_err(|_| {
        format!("{ENV_KEY}={text:?} is not a 64-bit unsigned number (decimal or 0x hex)")
    })
}

/// Parse a `-auth` list: comma-separated method numbers or hyphenated
/// ranges (either direction), most preferred first; `3,1-0` is 3, 1, 0.
/// Repeats keep their first place.
pub fn parse_preference(text: &str) -> Result<Vec<u32>, String> {
    let num = |s: &str| -> Result<u32, String> {
        let n: u32 = s
            .trim()
            .parse()
            .map_err(|_| format!("-auth: {s:?} is not a method number"))?;
        if n > MAX_METHOD {
            return Err(format!("-auth: method {n} is above {MAX_METHOD}"));
        }
        Ok(n)
    };
    let mut out: Vec<u32> = Vec::new();
    for item in text.split(',') {
        let range: Vec<u32> = match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a <= b {
                    (a..=b).collect()
                } else {
                    (b..=a).rev().collect()
                }
            }
            None => vec![num(item)?],
        };
        for m in range {
            if !out.contains(&m) {
                out.push(m);
            }
        }
    }
    Ok(out)
}

/// The server's pick: the first method of `preference` (or, without one,
/// of what the server offers, strongest first) that both sides offer.
pub fn choose(server: &Available, preference: Option<&[u32]>, client: &ClientAuth) -> Option<u32> {
    let ours = server.methods();
    let order = preference.unwrap_or(&ours);
    order
        .iter()
        .copied()
        .find(|m| ours.contains(m) && client.offers(*m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::impi::{Command, CMD_AUTH};

    #[test]
    fn seed_example_auth_none() {
        // Client sends {AUTH, 4} {0x0001}; the server answers {0, 0}.
        let client = ClientAuth::offering(&[AUTH_NONE]);
        let sent = Command::new(CMD_AUTH, client.encode()).encode();
        assert_eq!(sent, b"AUTH\0\0\0\x04\0\0\0\x01");
        let server = Available {
            none: true,
            key: None,
        };
        let got = ClientAuth::decode(&sent[8..]).unwrap();
        let which = choose(&server, None, &got).unwrap();
        assert_eq!(which, AUTH_NONE);
        let reply = ServerAuth {
            which: which as i32,
            len: 0,
        };
        assert_eq!(reply.encode(), [0u8; 8]);
        assert_eq!(ServerAuth::decode(&[0u8; 8]), Ok(reply));
    }

    #[test]
    fn seed_example_auth_key() {
        // {AUTH, 4} {0x0002}; server {1, 0}; client key 5678.
        let client = ClientAuth::offering(&[AUTH_KEY]);
        assert_eq!(
            Command::new(CMD_AUTH, client.encode()).encode(),
            b"AUTH\0\0\0\x04\0\0\0\x02"
        );
        let server = Available {
            none: false,
            key: Some(parse_key("5678").unwrap()),
        };
        assert_eq!(choose(&server, None, &client), Some(AUTH_KEY));
        assert_eq!(
            ServerAuth { which: 1, len: 0 }.encode(),
            [0, 0, 0, 1, 0, 0, 0, 0]
        );
        let key = encode_key(5678);
        assert_eq!(key, [0, 0, 0, 0, 0, 0, 0x16, 0x2e]);
        assert_eq!(decode_key(&key), Ok(5678));
        assert_ne!(decode_key(&encode_key(1234)).ok(), server.key);
    }

    #[test]
    fn preference_lists_and_the_choice() {
        assert_eq!(parse_preference("3,1-0").unwrap(), vec![3, 1, 0]);
        assert_eq!(parse_preference("0-2").unwrap(), vec![0, 1, 2]);
        assert_eq!(parse_preference("1,1,0").unwrap(), vec![1, 0]);
        assert!(parse_preference("").is_err());
        assert!(parse_preference("a").is_err());
        assert!(parse_preference("1-").is_err());
        assert!(parse_preference("0-4000000000").is_err());
        let both = Available {
            none: true,
            key: Some(7),
        };
        let offers_both = ClientAuth::offering(&[AUTH_NONE, AUTH_KEY]);
        // Strongest first without a list; the list's order with one.
        assert_eq!(choose(&both, None, &offers_both), Some(AUTH_KEY));
        assert_eq!(choose(&both, Some(&[0, 1]), &offers_both), Some(AUTH_NONE));
        assert_eq!(choose(&both, Some(&[3, 1]), &offers_both), Some(AUTH_KEY));
        // A method the list leaves out is not used; none in common: no choice.
        assert_eq!(choose(&both, Some(&[1]), &ClientAuth::offering(&[0])), None);
        let none_only = Available {
            none: true,
            key: None,
        };
        assert_eq!(choose(&none_only, None, &ClientAuth::offering(&[1])), None);
        // Methods past the first mask word.
        let wide = ClientAuth::offering(&[40, 1]);
        assert_eq!(wide.masks, vec![2, 1 << 8]);
        assert!(wide.offers(40) && wide.offers(1) && !wide.offers(0) && !wide.offers(999));
        assert_eq!(ClientAuth::decode(&wide.encode()), Ok(wide));
    }

    #[test]
    fn bad_auth_bytes_are_refused() {
        assert!(ClientAuth::decode(b"").is_err());
        assert!(ClientAuth::decode(b"\0\0\x01").is_err());
        assert!(ClientAuth::decode(&[0u8; 4 * 33]).is_err());
        assert!(ServerAuth::decode(b"\0\0\0\x01").is_err());
        assert!(decode_key(b"\0\0\0\0\0\0\0").is_err());
        assert!(parse_key("12x").is_err());
        assert_eq!(parse_key("0x10"), Ok(16));
        assert!(Available::default().require_some().is_err());
    }
}
