//! The PMI-2 wire: commands, their parser and writer, and a framer.
//!
//! A PMI-2 message is six ASCII characters giving the body's length, then
//! the body `cmd=NAME;key=value;...;`. MPICH pads the length on the left
//! (`%6u`), Slurm on the right (`%-6d`): both are read. Nothing is escaped
//! (a value cannot hold `;`), a token without `=` is refused, as Slurm
//! does. A connection starts PMI-1's way (`cmd=init pmi_version=2`) and
//! switches to this framing after `response_to_init`.
//!
//! Unlike PMI-1's fixed fields, PMI-2 messages are open lists of pairs, so
//! they are one generic [`V2Message`]; [`COMMANDS`] is the one table of
//! the commands both sides know: each query, its response and the fields
//! a query must carry.

use crate::error::{Error, Result};

/// Characters of the length prefix.
pub const LEN_DIGITS: usize = 6;

/// Longest body accepted or sent (bounds memory per connection; the
/// prefix could say 999999).
pub const MAX_BODY: usize = 64 * 1024;

/// One PMI-2 command both sides know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Command {
    /// The query's `cmd=`.
    pub query: &'static str,
    /// The response's `cmd=` (`None`: no answer, like `abort`).
    pub response: Option<&'static str>,
    /// Fields a query must carry.
    pub required: &'static [&'static str],
}

const fn c(
    query: &'static str,
    response: Option<&'static str>,
    required: &'static [&'static str],
) -> Command {
    Command {
        query,
        response,
        required,
    }
}

/// Every PMI-2 command (MPICH's `pmi-2.0.txt`, Slurm's `pmi2.c`). Slurm's
/// `fullinit` also wants `pmijobid` and `threaded`; this crate's client
/// sends them, its server needs only `pmirank` (or `pmiid`).
pub const COMMANDS: &[Command] = &[
    c("fullinit", Some("fullinit-response"), &[]),
    c("job-getid", Some("job-getid-response"), &[]),
    c("kvs-put", Some("kvs-put-response"), &["key", "value"]),
    c("kvs-get", Some("kvs-get-response"), &["key"]),
    c("kvs-fence", Some("kvs-fence-response"), &[]),
    c(
        "info-getjobattr",
        Some("info-getjobattr-response"),
        &["key"],
    ),
    c(
        "info-putnodeattr",
        Some("info-putnodeattr-response"),
        &["key", "value"],
    ),
    c(
        "info-getnodeattr",
        Some("info-getnodeattr-response"),
        &["key"],
    ),
    c(
        "name-publish",
        Some("name-publish-response"),
        &["name", "port"],
    ),
    c("name-unpublish", Some("name-unpublish-response"), &["name"]),
    c("name-lookup", Some("name-lookup-response"), &["name"]),
    c("spawn", Some("spawn-response"), &[]),
    c("finalize", Some("finalize-response"), &[]),
    c("abort", None, &[]),
];

/// The table entry of query `cmd`.
pub fn command(cmd: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.query == cmd)
}

/// One PMI-2 message (either direction): its command and pairs in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V2Message {
    pub cmd: String,
    pub pairs: Vec<(String, String)>,
}

impl V2Message {
    pub fn new(cmd: &str) -> V2Message {
        V2Message {
            cmd: cmd.to_string(),
            pairs: Vec::new(),
        }
    }

    /// Add a pair.
    pub fn with(mut self, key: &str, value: impl ToString) -> V2Message {
        self.pairs.push((key.to_string(), value.to_string()));
        self
    }

    /// Add a pair if there is a value.
    pub fn with_opt(self, key: &str, value: Option<impl ToString>) -> V2Message {
        match value {
            Some(v) => self.with(key, v),
            None => self,
        }
    }

    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key`, which must be there.
    pub fn require(&self, key: &'static str) -> Result<&str> {
        self.get(key).ok_or_else(|| Error::MissingField {
            cmd: self.cmd.clone(),
            field: key,
        })
    }

    /// The number in `key`, if the key is there.
    pub fn number<T: std::str::FromStr>(&self, key: &'static str) -> Result<Option<T>> {
        self.get(key)
            .map(|v| {
                v.trim().parse::<T>().map_err(|_| Error::BadNumber {
                    cmd: self.cmd.clone(),
                    field: key,
                    value: v.to_string(),
                })
            })
            .transpose()
    }

    /// `TRUE`/`FALSE` (any case; also yes/no, 1/0) in `key`.
    pub fn flag(&self, key: &'static str) -> Option<bool> {
        match self.get(key)?.to_ascii_lowercase().as_str() {
            "true" | "yes" | "1" => Some(true),
            "false" | "no" | "0" => Some(false),
            _ => None,
        }
    }

    /// `rc`, 0 when missing.
    pub fn rc(&self) -> Result<i32> {
        Ok(self.number("rc")?.unwrap_or(0))
    }

    /// `errmsg` (or `msg`).
    pub fn errmsg(&self) -> Option<&str> {
        self.get("errmsg").or_else(|| self.get("msg"))
    }

    /// A failure response to query `query`: `rc` and `errmsg`, and the
    /// query's `thrid` echoed.
    pub fn error_reply(query: &V2Message, rc: i32, errmsg: &str) -> V2Message {
        let name = command(&query.cmd)
            .and_then(|c| c.response)
            .map_or_else(|| format!("{}-response", query.cmd), str::to_string);
        V2Message::new(&name)
            .with("rc", rc)
            .with("errmsg", errmsg.replace(';', ","))
            .with_opt("thrid", query.get("thrid"))
    }

    /// Parse a body (`cmd=NAME;k=v;...`, the final `;` optional).
    pub fn parse(body: &str) -> Result<V2Message> {
        let mut tokens = body.split(';');
        let first = tokens.next().unwrap_or_default();
        let cmd = match first.split_once('=') {
            Some(("cmd", name)) if !name.is_empty() => name.to_string(),
            _ => {
                return Err(Error::MissingCmd {
                    line: body.chars().take(80).collect(),
                })
            }
        };
        let mut pairs = Vec::new();
        for token in tokens {
            if token.is_empty() {
                continue; // the final `;`, or `;;`
            }
            match token.split_once('=') {
                Some((k, v)) if !k.is_empty() => pairs.push((k.to_string(), v.to_string())),
                _ => {
                    return Err(Error::Malformed {
                        reason: format!("PMI-2 {cmd}: token {token:?} is not key=value"),
                    })
                }
            }
        }
        Ok(V2Message { cmd, pairs })
    }

    /// Check a query against [`COMMANDS`]: known, with its required fields.
    pub fn check_query(&self) -> Result<&'static Command> {
        let Some(c) = command(&self.cmd) else {
            return Err(Error::UnknownCommand {
                cmd: self.cmd.clone(),
            });
        };
        for field in c.required {
            self.require(field)?;
        }
        Ok(c)
    }

    /// Append the wire form (prefix and body) to `out`. A key or value
    /// holding `;` (or a key holding `=`) cannot be carried: PMI-2 escapes
    /// nothing.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<()> {
        let mut body = format!("cmd={};", self.cmd);
        if self.cmd.contains([';', '=']) {
            return Err(Error::Unencodable {
                field: "cmd",
                what: "';' or '='",
            });
        }
        for (k, v) in &self.pairs {
            if k.is_empty() || k.contains([';', '=']) {
                return Err(Error::Unencodable {
                    field: "key",
                    what: "';' or '=' (PMI-2 escapes nothing)",
                });
            }
            if v.contains(';') {
                return Err(Error::Unencodable {
                    field: "value",
                    what: "';' (PMI-2 escapes nothing)",
                });
            }
            body.push_str(k);
            body.push('=');
            body.push_str(v);
            body.push(';');
        }
        if body.len() > MAX_BODY {
            return Err(Error::LineTooLong {
                len: body.len(),
                max: MAX_BODY,
            });
        }
        out.extend_from_slice(format!("{:>6}", body.len()).as_bytes());
        out.extend_from_slice(body.as_bytes());
        Ok(())
    }

    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.encode_into(&mut out)?;
        Ok(out)
    }
}

/// One unit read off a PMI-2 stream.
#[derive(Debug)]
pub enum V2Frame {
    Message(V2Message),
    /// A framed body that did not parse; `cmd` when one could be read.
    Invalid {
        cmd: Option<String>,
        error: Error,
    },
}

/// Cuts a PMI-2 byte stream into messages, holding at most one body.
#[derive(Debug, Default)]
pub struct V2Framer {
    buf: Vec<u8>,
    /// Set once the stream was refused; later feeds fail too.
    broken: Option<String>,
}

/// The body length a prefix gives: digits, padded with spaces on either side.
fn prefix_len(prefix: &[u8]) -> Result<usize> {
    let bad = || Error::Malformed {
        reason: format!(
            "PMI-2 length prefix {:?} is not a number padded with spaces",
            String::from_utf8_lossy(prefix)
        ),
    };
    let text = std::str::from_utf8(prefix).map_err(|_| bad())?;
    let digits = text.trim_matches(' ');
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    digits.parse().map_err(|_| bad())
}

impl V2Framer {
    pub fn new() -> V2Framer {
        V2Framer::default()
    }

    /// Feed bytes; every whole message goes to `out`. `Err` means the
    /// stream is not PMI-2 (bad prefix, body over [`MAX_BODY`]): close it.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<V2Frame>) -> Result<()> {
        if let Some(why) = &self.broken {
            return Err(Error::Malformed {
                reason: why.clone(),
            });
        }
        self.buf.extend_from_slice(bytes);
        let mut start = 0;
        let result = loop {
            let rest = &self.buf[start..];
            if rest.len() < LEN_DIGITS {
                break Ok(());
            }
            let len = match prefix_len(&rest[..LEN_DIGITS]) {
                Ok(len) if len <= MAX_BODY => len,
                Ok(len) => break Err(Error::LineTooLong { len, max: MAX_BODY }),
                Err(e) => break Err(e),
            };
            if rest.len() < LEN_DIGITS + len {
                break Ok(());
            }
            let body = &rest[LEN_DIGITS..LEN_DIGITS + len];
            out.push(match std::str::from_utf8(body) {
                Ok(text) => match V2Message::parse(text) {
                    Ok(m) => V2Frame::Message(m),
                    Err(error) => V2Frame::Invalid {
                        cmd: peek_cmd(text),
                        error,
                    },
                },
                Err(_) => V2Frame::Invalid {
                    cmd: None,
                    error: Error::NotUtf8,
                },
            });
            start += LEN_DIGITS + len;
        };
        self.buf.drain(..start);
        if let Err(e) = &result {
            self.broken = Some(e.to_string());
            self.buf = Vec::new();
        }
        result
    }

    /// Bytes held that do not yet make a message.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

/// The `cmd=` of a body that did not parse.
fn peek_cmd(body: &str) -> Option<String> {
    let first = body.split(';').next()?;
    first
        .strip_prefix("cmd=")
        .filter(|n| !n.is_empty())
        .map(str::to_string)
}
