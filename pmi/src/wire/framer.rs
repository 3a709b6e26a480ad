//! Bytes from a stream → whole messages, with bounded memory.
//!
//! A stream delivers bytes at arbitrary split points; the [`Framer`] buffers
//! only the unfinished tail (at most one line, or one `mcmd` block) and turns
//! every complete line or block into a [`Frame`]. Two kinds of trouble are
//! kept apart:
//!
//! * a well-framed line that does not parse (unknown `cmd`, bad number,
//!   over-limit value) becomes [`Frame::Invalid`]: answer it and go on;
//! * a stream that is not PMI text at all (overlong line, non-UTF-8, control
//!   bytes, oversized block) makes [`Framer::feed`] return an error for which
//!   [`Error::is_fatal_stream_error`] is true: close the connection.

use crate::error::{Error, Result};
use crate::wire::limits::{MAX_LINE, MAX_MCMD_BLOCK};
use crate::wire::message::Message;
use crate::wire::parse::peek_cmd;

/// One unit read off the stream.
#[derive(Debug)]
pub enum Frame {
    /// A message that parsed.
    Message(Message),
    /// A framed line or block that did not parse. `cmd` is its command name
    /// when one could be read, so the answer can use the matching response.
    Invalid { cmd: Option<String>, error: Error },
}

/// An `mcmd` block being collected.
#[derive(Debug)]
struct Block {
    text: String,
    totspawns: i64,
    spawnssofar: i64,
}

/// Incremental framer for PMI-1 streams (both directions).
#[derive(Debug, Default)]
pub struct Framer {
    /// Bytes of the current, unfinished line.
    partial: Vec<u8>,
    block: Option<Block>,
    /// Set once the stream was rejected; every later feed fails the same way.
    broken: Option<Broken>,
}

/// A copy of the fatal error, so it can be reported again.
#[derive(Debug, Clone, Copy)]
enum Broken {
    Line(usize),
    Block(usize),
    Utf8,
    Control(u8),
}

impl Broken {
    fn error(self) -> Error {
        match self {
            Broken::Line(len) => Error::LineTooLong { len, max: MAX_LINE },
            Broken::Block(len) => Error::BlockTooLong {
                len,
                max: MAX_MCMD_BLOCK,
            },
            Broken::Utf8 => Error::NotUtf8,
            Broken::Control(byte) => Error::ControlByte { byte },
        }
    }
}

impl Framer {
    /// An empty framer.
    pub fn new() -> Framer {
        Framer::default()
    }

    /// True if bytes of an unfinished line or block are buffered (at EOF this
    /// means the peer stopped mid-message).
    pub fn has_partial(&self) -> bool {
        !self.partial.is_empty() || self.block.is_some()
    }

    /// How long the line being collected may get, newline included.
    fn line_budget(&self) -> usize {
        match &self.block {
            Some(b) => MAX_MCMD_BLOCK.saturating_sub(b.text.len()),
            None => MAX_LINE,
        }
    }

    fn fail(&mut self, broken: Broken) -> Error {
        self.partial.clear();
        self.block = None;
        self.broken = Some(broken);
        broken.error()
    }

    fn too_long(&mut self, len: usize) -> Error {
        let broken = if self.block.is_some() {
            Broken::Block(self.block.as_ref().map_or(0, |b| b.text.len()) + len)
        } else {
            Broken::Line(len)
        };
        self.fail(broken)
    }

    /// Take `bytes` as they arrived; push every completed frame to `out`.
    ///
    /// Frames completed before a fatal error are still pushed, so the caller
    /// can answer them before closing.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<Frame>) -> Result<()> {
        if let Some(b) = self.broken {
            return Err(b.error());
        }
        let mut rest = bytes;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let piece = &rest[..nl];
            rest = &rest[nl + 1..];
            let len = self.partial.len() + piece.len() + 1;
            if len > self.line_budget() {
                return Err(self.too_long(len));
            }
            let line = if self.partial.is_empty() {
                piece.to_vec()
            } else {
                let mut l = std::mem::take(&mut self.partial);
                l.extend_from_slice(piece);
                l
            };
            self.line(line, out)?;
        }
        if !rest.is_empty() {
            // Reject binary junk at once instead of waiting for a newline
            // that may never come (a `\r` may still precede one).
            if let Some(&bad) = rest.iter().find(|&&b| is_junk(b) && b != b'\r') {
                return Err(self.fail(Broken::Control(bad)));
            }
            let len = self.partial.len() + rest.len() + 1;
            if len > self.line_budget() {
                return Err(self.too_long(len));
            }
            self.partial.extend_from_slice(rest);
        }
        Ok(())
    }

    /// Handle one complete line (without its newline).
    fn line(&mut self, mut bytes: Vec<u8>, out: &mut Vec<Frame>) -> Result<()> {
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
        if let Some(&bad) = bytes.iter().find(|&&b| is_junk(b)) {
            return Err(self.fail(Broken::Control(bad)));
        }
        let line = match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(_) => return Err(self.fail(Broken::Utf8)),
        };
        if let Some(block) = self.block.as_mut() {
            block.text.push_str(&line);
            block.text.push('\n');
            let t = line.trim();
            if let Some(v) = t.strip_prefix("totspawns=") {
                block.totspawns = v.trim().parse().unwrap_or(block.totspawns);
            } else if let Some(v) = t.strip_prefix("spawnssofar=") {
                block.spawnssofar = v.trim().parse().unwrap_or(block.spawnssofar);
            } else if t == "endcmd" && block.spawnssofar >= block.totspawns {
                let text = std::mem::take(&mut block.text);
                self.block = None;
                out.push(frame(&text));
            }
            return Ok(());
        }
        if line.trim().is_empty() {
            return Ok(());
        }
        if line.trim_start().starts_with("mcmd=") {
            self.block = Some(Block {
                text: format!("{line}\n"),
                totspawns: 0,
                spawnssofar: 0,
            });
            return Ok(());
        }
        out.push(frame(&line));
        Ok(())
    }
}

/// Bytes no PMI text line holds: control characters other than tab, and DEL.
fn is_junk(b: u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

fn frame(text: &str) -> Frame {
    match Message::parse(text) {
        Ok(m) => Frame::Message(m),
        Err(error) => Frame::Invalid {
            cmd: peek_cmd(text),
            error,
        },
    }
}
