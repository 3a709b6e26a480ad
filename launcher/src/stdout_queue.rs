//! rivetrun's stdout, written by a thread of its own from a bounded queue.
//!
//! The event loop hands whole lines to [`StdoutQueue::push`], which never
//! blocks; the thread writes them in order. A reader of rivetrun's stdout
//! that stops reading so stalls only the writer thread: once
//! [`QUEUE_CAP`] bytes wait, the event loop stops reading the ranks'
//! stdout pipes (the ranks then block in their own writes, as they would
//! on a terminal), and it goes on serving PMI, signals and exits. stderr
//! stays a direct write: rivetrun's own messages go there, in order with
//! the ranks' lines.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Bytes waiting for the writer before the event loop stops reading the
/// ranks' stdout (one read more may land on top).
pub const QUEUE_CAP: usize = 4 << 20;

#[derive(Default)]
struct Queue {
    chunks: VecDeque<Vec<u8>>,
    /// Bytes pushed and not yet written (the chunk being written included).
    bytes: usize,
    /// No more pushes: the writer ends once the queue is empty.
    closed: bool,
    /// A write failed (the reader went away): later pushes are dropped.
    broken: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A panic in the writer leaves plain data behind: go on with it.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub struct StdoutQueue {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
}

impl StdoutQueue {
    /// Starts the writer thread on `out` (rivetrun's stdout, or a test's sink).
    pub fn start(out: impl Write + Send + 'static) -> io::Result<StdoutQueue> {
        let shared = Arc::new(Shared::default());
        let s = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("rivetrun-stdout".into())
            .spawn(move || write_all_chunks(&s, out))?;
        Ok(StdoutQueue {
            shared,
            writer: Some(writer),
        })
    }

    /// Whether the event loop may read more of the ranks' stdout.
    pub fn has_room(&self) -> bool {
        self.shared.lock().bytes < QUEUE_CAP
    }

    /// Queues `bytes` (whole lines) to be written after what is queued.
    pub fn push(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut q = self.shared.lock();
        if q.broken {
            return;
        }
        q.bytes += bytes.len();
        q.chunks.push_back(bytes.to_vec());
        drop(q);
        self.shared.ready.notify_one();
    }

    /// Writes out what is queued and ends the writer (blocks while the
    /// reader is stalled, as a direct write would).
    pub fn finish(&mut self) {
        self.shared.lock().closed = true;
        self.shared.ready.notify_one();
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

impl Drop for StdoutQueue {
    fn drop(&mut self) {
        self.finish();
    }
}

fn write_all_chunks(shared: &Shared, mut out: impl Write) {
    loop {
        let mut q = shared.lock();
        while q.chunks.is_empty() && !q.closed {
            q = shared.ready.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        let Some(chunk) = q.chunks.pop_front() else {
            return; // closed and empty
        };
        drop(q);
        let ok = out.write_all(&chunk).and_then(|()| out.flush()).is_ok();
        let mut q = shared.lock();
        q.bytes -= chunk.len();
        if !ok {
            q.broken = true;
            q.bytes -= q.chunks.iter().map(Vec::len).sum::<usize>();
            q.chunks.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A writer that blocks until told to go on, recording what it got.
    struct Gate {
        go: mpsc::Receiver<()>,
        got: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Gate {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let _ = self.go.recv();
            self.got.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stalled_writer_never_blocks_a_push_and_order_is_kept() {
        let (tx, rx) = mpsc::channel();
        let got = Arc::new(Mutex::new(Vec::new()));
        let mut q = StdoutQueue::start(Gate {
            go: rx,
            got: Arc::clone(&got),
        })
        .unwrap();
        // The writer is stuck on its first write: pushes still return,
        // and the queue says when it is full.
        let line = vec![b'x'; 1 << 20];
        let mut pushed = 0;
        while q.has_room() {
            q.push(&line);
            pushed += 1;
            assert!(pushed <= QUEUE_CAP / line.len() + 1, "never full");
        }
        q.push(b"last\n");
        for _ in 0..=pushed {
            tx.send(()).unwrap();
        }
        q.finish();
        let got = got.lock().unwrap();
        assert_eq!(got.len(), pushed * line.len() + 5);
        assert!(got.ends_with(b"xlast\n"));
    }

    /// A reader that went away: pushes are dropped, nothing piles up.
    #[test]
    fn a_broken_writer_drops_what_follows() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut q = StdoutQueue::start(Broken).unwrap();
        q.push(b"a\n");
        let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !q.shared.lock().broken {
            assert!(std::time::Instant::now() < end);
            std::thread::yield_now();
        }
        for _ in 0..100 {
            q.push(&[b'y'; 1 << 20]);
        }
        assert!(q.has_room());
        q.finish();
    }
}
