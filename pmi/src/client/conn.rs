//! A blocking request/response channel to the PMI server.
//!
//! PMI-1 is strictly one question, one answer, so a reply that is not the
//! expected command is an error right away: the client never skips lines
//! hoping the right one comes later. The one exception is `group_event`,
//! which the server sends unasked (Rivet's group connect): it is put aside
//! for [`Conn::poll_events`] wherever it arrives.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;

use crate::error::{Error, Result};
use crate::group::GroupEvent;
use crate::wire::{Frame, Framer, Message};

/// Any byte stream the client can talk over; the descriptor lets
/// [`Conn::poll_events`] look for unasked-for lines without blocking.
pub(crate) trait Duplex: Read + Write + Send + AsRawFd {}
impl<T: Read + Write + Send + AsRawFd> Duplex for T {}

pub(crate) struct Conn {
    stream: Box<dyn Duplex>,
    framer: Framer,
    frames: VecDeque<Frame>,
    /// Group events read while waiting for replies.
    events: VecDeque<GroupEvent>,
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
            events: VecDeque::new(),
        }
    }

    /// The stream, for PMI-2 after PMI-1's `initack` (nothing is left
    /// unread then: the server sends nothing unasked before a group connect).
    pub fn into_stream(self) -> Box<dyn Duplex> {
        self.stream
    }

    /// The connection's descriptor (for a watch on it hanging up).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.stream.as_raw_fd()
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
                match frame {
                    Frame::Message(Message::GroupEvent(e)) => self.events.push_back(e),
                    Frame::Message(m) => return Ok(m),
                    Frame::Invalid { error, .. } => {
                        return Err(Error::UnexpectedReply {
                            expected,
                            got: format!("an unreadable line ({error})"),
                        })
                    }
                }
                continue;
            }
            self.read_some(&mut buf, &during)?;
        }
    }

    /// One read into the framer; `Err` at end of stream or on garbage.
    fn read_some(&mut self, buf: &mut [u8], during: &dyn Fn() -> String) -> Result<()> {
        let n = loop {
            match self.stream.read(buf) {
                Ok(0) => return Err(Error::ConnectionClosed { during: during() }),
                Ok(n) => break n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                    return Err(Error::ConnectionClosed { during: during() })
                }
                Err(e) => return Err(Error::io(during(), e)),
            }
        };
        let mut out = Vec::new();
        let fed = self.framer.feed(&buf[..n], &mut out);
        self.frames.extend(out);
        match fed {
            Err(e) if self.frames.is_empty() => Err(e),
            _ => Ok(()),
        }
    }

    /// Group events stashed so far plus those readable right now, without
    /// blocking. Other lines read meanwhile stay queued for the next reply
    /// (where, unasked for, they are an error).
    pub fn poll_events(&mut self) -> Result<Vec<GroupEvent>> {
        let during = || "polling for group events".to_string();
        let mut buf = [0u8; 4096];
        loop {
            let frames = std::mem::take(&mut self.frames);
            for frame in frames {
                match frame {
                    Frame::Message(Message::GroupEvent(e)) => self.events.push_back(e),
                    other => self.frames.push_back(other),
                }
            }
            if !self.frames.is_empty() || !self.readable_now(&during)? {
                break;
            }
            match self.read_some(&mut buf, &during) {
                Ok(()) => {}
                // Events that arrived before the end are still worth having.
                Err(Error::ConnectionClosed { .. }) if !self.events.is_empty() => break,
                Err(e) => return Err(e),
            }
        }
        Ok(self.events.drain(..).collect())
    }

    /// True if a read would not block (data, end of stream or an error).
    fn readable_now(&self, during: &dyn Fn() -> String) -> Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: poll(2) reads and writes exactly the one pollfd we own;
            // a timeout of 0 never blocks.
            let n = unsafe { libc::poll(&mut pfd, 1, 0) };
            if n >= 0 {
                return Ok(n > 0 && pfd.revents != 0);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != ErrorKind::Interrupted {
                return Err(Error::io(during(), e));
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
pub(crate) fn describe(m: &Message) -> String {
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
