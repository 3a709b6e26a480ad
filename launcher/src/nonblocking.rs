//! Writing to nonblocking sockets, shared by the PMI connections
//! (`supervisor`) and the name server (`nameserver`).

use std::io::{self, ErrorKind, Write};

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
