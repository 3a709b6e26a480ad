//! Bytes from a stream → whole messages, with bounded memory.
//!
//! A stream delivers bytes at arbitrary split points; the [`Framer`] buffers
//! only the unfinished tail (at most one line, or one `mcmd` block) and turns
//! every complete line or block into a [`Frame`]. Two kinds of trouble are
//! kept apart:
//!
//! * a well-framed line that does not parse (unknown `cmd`, bad number,
//!   over-limit value) becomes [`Frame::Invalid`]: answer it and go on. So
//!   does a line longer than [`MAX_LINE`]: its bytes past the limit are
//!   dropped as they arrive (only its first [`HEAD`] bytes are kept, to
//!   name its command), and its newline ends it;
//! * a stream that is not PMI text at all (non-UTF-8, control bytes,
//!   oversized `mcmd` block) makes [`Framer::feed`] return an error for
//!   which [`Error::is_fatal_stream_error`] is true: close the connection.

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

/// How much of an over-long line is kept to name its command.
pub const HEAD: usize = 64;

/// An over-long line being dropped up to its newline.
#[derive(Debug)]
struct Skipping {
    /// Its first bytes (at most [`HEAD`]).
    head: Vec<u8>,
    /// Its length so far.
    len: usize,
}

/// Incremental framer for PMI-1 streams (both directions).
#[derive(Debug, Default)]
pub struct Framer {
    /// Bytes of the current, unfinished line.
    partial: Vec<u8>,
    block: Option<Block>,
    skipping: Option<Skipping>,
    /// Set once the stream was rejected; every later feed fails the same way.
    broken: Option<Broken>,
}

/// A copy of the fatal error, so it can be reported again.
#[derive(Debug, Clone, Copy)]
enum Broken {
    Block(usize),
    Utf8,
    Control(u8),
}

impl Broken {
    fn error(self) -> Error {
        match self {
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
        !self.partial.is_empty() || self.block.is_some() || self.skipping.is_some()
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
        self.skipping = None;
        self.broken = Some(broken);
        broken.error()
    }

    /// An `mcmd` block grew past its limit with a line of `len` bytes.
    fn block_too_long(&mut self, len: usize) -> Error {
        let total = self.block.as_ref().map_or(0, |b| b.text.len()) + len;
        self.fail(Broken::Block(total))
    }

    /// The answerable frame for an over-long line that began with `head`.
    fn overlong(head: &[u8], len: usize) -> Frame {
        let head = String::from_utf8_lossy(&head[..head.len().min(HEAD)]);
        Frame::Invalid {
            cmd: peek_cmd(&head),
            error: Error::LineTooLong { len, max: MAX_LINE },
        }
    }

    /// Drop bytes of an over-long line up to its newline; the rest of
    /// `bytes` after it, if it came.
    fn skip<'a>(&mut self, bytes: &'a [u8], out: &mut Vec<Frame>) -> Result<Option<&'a [u8]>> {
        let Some(skip) = self.skipping.as_mut() else {
            return Ok(Some(bytes));
        };
        let nl = bytes.iter().position(|&b| b == b'\n');
        let piece = &bytes[..nl.unwrap_or(bytes.len())];
        if let Some(&bad) = piece.iter().find(|&&b| is_junk(b) && b != b'\r') {
            return Err(self.fail(Broken::Control(bad)));
        }
        skip.len = skip.len.saturating_add(piece.len());
        let room = HEAD.saturating_sub(skip.head.len());
        skip.head.extend_from_slice(&piece[..piece.len().min(room)]);
        let Some(nl) = nl else {
            return Ok(None);
        };
        let frame = Framer::overlong(&skip.head, skip.len + 1);
        self.skipping = None;
        out.push(frame);
        Ok(Some(&bytes[nl + 1..]))
    }

    /// Take `bytes` as they arrived; push every completed frame to `out`.
    ///
    /// Frames completed before a fatal error are still pushed, so the caller
    /// can answer them before closing.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<Frame>) -> Result<()> {
        if let Some(b) = self.broken {
            return Err(b.error());
        }
        let Some(mut rest) = self.skip(bytes, out)? else {
            return Ok(());
        };
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let piece = &rest[..nl];
            rest = &rest[nl + 1..];
            let len = self.partial.len() + piece.len() + 1;
            if len > self.line_budget() {
                if self.block.is_some() {
                    return Err(self.block_too_long(len));
                }
                if let Some(&bad) = piece.iter().find(|&&b| is_junk(b) && b != b'\r') {
                    return Err(self.fail(Broken::Control(bad)));
                }
                let mut head = std::mem::take(&mut self.partial);
                head.extend_from_slice(&piece[..piece.len().min(HEAD)]);
                out.push(Framer::overlong(&head, len));
                continue;
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
                if self.block.is_some() {
                    return Err(self.block_too_long(len));
                }
                // Drop the line's bytes from here to its newline.
                let mut head = std::mem::take(&mut self.partial);
                head.truncate(HEAD);
                let room = HEAD - head.len();
                head.extend_from_slice(&rest[..rest.len().min(room)]);
                self.skipping = Some(Skipping { head, len: len - 1 });
                return Ok(());
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
