//! A blocking request/response channel to the PMI server.
//!
//! PMI-1 is strictly one question, one answer, so a reply that is not the
//! expected command is an error right away: the client never skips lines
//! hoping the right one comes later.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};

use crate::error::{Error, Result};
use crate::wire::{Frame, Framer, Message};

/// Any byte stream the client can talk over.
pub(crate) trait Duplex: Read + Write + Send {}
impl<T: Read + Write + Send> Duplex for T {}

pub(crate) struct Conn {
    stream: Box<dyn Duplex>,
    framer: Framer,
    frames: VecDeque<Frame>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").finish_non_exhaustive()
    }
}

impl Conn {
    pub fn new(stream: Box<dyn Duplex>) -> Conn {
        Conn {
            stream,
            framer: Framer::new(),
            frames: VecDeque::new(),
        }
    }

    pub fn send(&mut self, msg: &Message) -> Result<()> {
        let bytes = msg.encode()?;
        self.send_bytes(&bytes, msg.cmd())
    }

    fn send_bytes(&mut self, bytes: &[u8], cmd: &str) -> Result<()> {
        let during = || format!("sending cmd={cmd}");
        match self
            .stream
            .write_all(bytes)
            .and_then(|()| self.stream.flush())
        {
            Ok(()) => Ok(()),
            Err(e) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => {
                Err(Error::ConnectionClosed { during: during() })
            }
            Err(e) => Err(Error::io(during(), e)),
        }
    }

    /// The next message from the server.
    pub fn recv(&mut self, expected: &'static str) -> Result<Message> {
        let during = || format!("waiting for cmd={expected}");
        let mut buf = [0u8; 4096];
        loop {
            if let Some(frame) = self.frames.pop_front() {
                return match frame {
                    Frame::Message(m) => Ok(m),
                    Frame::Invalid { error, .. } => Err(Error::UnexpectedReply {
                        expected,
                        got: format!("an unreadable line ({error})"),
                    }),
                };
            }
            let n = match self.stream.read(&mut buf) {
                Ok(0) => return Err(Error::ConnectionClosed { during: during() }),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                    return Err(Error::ConnectionClosed { during: during() })
                }
                Err(e) => return Err(Error::io(during(), e)),
            };
            let mut out = Vec::new();
            let fed = self.framer.feed(&buf[..n], &mut out);
            self.frames.extend(out);
            if let Err(e) = fed {
                if self.frames.is_empty() {
                    return Err(e);
                }
            }
        }
    }

    /// Receive and insist on response `expected`.
    pub fn expect(&mut self, expected: &'static str) -> Result<Message> {
        let m = self.recv(expected)?;
        if m.cmd() != expected || m.is_query() {
            return Err(Error::UnexpectedReply {
                expected,
                got: describe(&m),
            });
        }
        Ok(m)
    }

    /// Send a query and read its response, which must be `expected`.
    pub fn request(&mut self, msg: &Message, expected: &'static str) -> Result<Message> {
        self.send(msg)?;
        self.expect(expected)
    }
}

/// The message as the server sent it, for error messages.
fn describe(m: &Message) -> String {
    match m.encode() {
        Ok(bytes) => String::from_utf8_lossy(&bytes)
            .trim_end()
            .chars()
            .take(120)
            .collect(),
        Err(_) => format!("cmd={}", m.cmd()),
    }
}

/// Turn a failing response into [`Error::Server`].
pub(crate) fn check(reply: Message, query: &str) -> Result<Message> {
    match reply.status() {
        Some((rc, msg)) if rc != 0 => Err(Error::Server {
            cmd: query.to_string(),
            rc,
            msg: msg.map(str::to_string),
        }),
        _ => Ok(reply),
    }
}
