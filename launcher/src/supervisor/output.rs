//! Forwarding the processes' stdout and stderr line by line, to the
//! output files or rivetrun's own streams, a bounded number of reads a turn.

use std::fs::File;
use std::io::{self, ErrorKind, Read, Write};
use std::rc::Rc;

use super::{Stream, Supervisor, READS_PER_TURN};
use crate::stdout_queue::StdoutQueue;

impl Supervisor {
    pub(super) fn read_output(&mut self, proc: usize, stream: Stream) {
        let mut buf = std::mem::take(&mut self.read_buf);
        let state = &mut self.procs[proc];
        let label = state.label.clone();
        let slot = match stream {
            Stream::Stdout => &mut state.stdout,
            Stream::Stderr => &mut state.stderr,
        };
        let Some((rx, lines)) = slot.as_mut() else {
            self.read_buf = buf;
            return;
        };
        let file = match stream {
            Stream::Stdout => state.files.0.clone(),
            Stream::Stderr => state.files.1.clone(),
        };
        let mut sink = Sink {
            stream,
            file,
            queue: &self.stdout_q,
        };
        let mut closed = false;
        let mut reads = 0;
        loop {
            if reads == READS_PER_TURN || (stream == Stream::Stdout && !self.stdout_q.has_room()) {
                if !self.deferred.contains(&(proc, stream)) {
                    self.deferred.push((proc, stream));
                }
                break;
            }
            reads += 1;
            match rx.read(&mut buf) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => {
                    let _ = lines.push(&buf[..n], label.as_deref(), &mut sink);
                }
                Err(err) if err.kind() == ErrorKind::WouldBlock => break,
                Err(err) if err.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    closed = true;
                    break;
                }
            }
        }
        if closed {
            let _ = lines.finish(label.as_deref(), &mut sink);
            if let Some((mut rx, _)) = slot.take() {
                let _ = self.poll.registry().deregister(&mut rx);
            }
        }
        self.read_buf = buf;
    }
}

/// The process's output file (`-outfile-pattern`), else rivetrun's own
/// stdout (through the queue, never blocking) or stderr (written at once,
/// without Rust's extra buffering).
struct Sink<'a> {
    stream: Stream,
    file: Option<Rc<File>>,
    queue: &'a StdoutQueue,
}

impl Write for Sink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if let Some(f) = &self.file {
            return (&**f).write_all(buf);
        }
        match self.stream {
            Stream::Stdout => {
                self.queue.push(buf);
                Ok(())
            }
            Stream::Stderr => io::stderr().lock().write_all(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self.stream {
            Stream::Stdout => Ok(()), // the queue and files have no buffer
            Stream::Stderr => io::stderr().flush(),
        }
    }
}
