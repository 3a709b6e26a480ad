//! Writing to nonblocking sockets, shared by the PMI connections
//! (`supervisor`, the proxy's `proxy::pmi`) and the name server
//! (`nameserver`), and the one type of a PMI connection they read and write.

use std::io::{self, ErrorKind, Read, Write};

use mio::net::{TcpStream, UnixStream};
use mio::Interest;

/// Write as much of `unsent` as the nonblocking `stream` takes now; `Err`
/// if the connection is broken.
pub(crate) fn write_unsent(stream: &mut impl Write, unsent: &mut Vec<u8>) -> io::Result<()> {
    while !unsent.is_empty() {
        match stream.write(unsent) {
            Ok(n) => {
                unsent.drain(..n);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What a connection is polled for: writability only while it has unsent bytes.
pub(crate) fn interest(wants_write: bool) -> Interest {
    if wants_write {
        Interest::READABLE | Interest::WRITABLE
    } else {
        Interest::READABLE
    }
}

/// A PMI connection: a rank's inherited `PMI_FD` or a `PMI_PORT` TCP
/// connection, read and written alike.
pub(crate) enum PmiStream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl PmiStream {
    pub(crate) fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            PmiStream::Unix(s) => s,
            PmiStream::Tcp(s) => s,
        }
    }
}

impl Read for PmiStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            PmiStream::Unix(s) => s.read(buf),
            PmiStream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for PmiStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            PmiStream::Unix(s) => s.write(buf),
            PmiStream::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
