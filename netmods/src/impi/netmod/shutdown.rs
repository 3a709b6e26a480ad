//! The end of the netmod (3.8): FINI on every channel, then what comes
//! is consumed and acknowledged until each peer's FINI, bounded in time.

use std::time::{Duration, Instant};

use super::{ImpiNetmod, FINI_TIMEOUT};

impl Drop for ImpiNetmod {
    /// 3.8: FINI on every channel, then consume (and acknowledge) what
    /// comes until the peer's FINI. Peers answer as soon as they poll
    /// (see `read`), so this is short unless one stopped polling; it is
    /// bounded by `FINI_TIMEOUT` whatever they do.
    fn drop(&mut self) {
        for (g, c) in self.chans.iter_mut() {
            // Whatever the engine gave to receive into may be gone now.
            c.abandon_placing();
            if c.sock.is_some() && !self.dead.contains_key(g) {
                c.send_fini();
            }
        }
        let deadline = Instant::now() + FINI_TIMEOUT;
        let mut spins = 0u32;
        loop {
            let mut open = 0;
            for c in self.chans.values_mut() {
                if c.sock.is_none() {
                    continue;
                }
                if c.flush().is_err() {
                    c.sock = None;
                    continue;
                }
                if c.fini_got && !c.wants_write() {
                    c.sock = None;
                    continue;
                }
                match c.read(&mut |_: &[u8], _: &[u8]| {}) {
                    Ok(true) => open += 1,
                    _ => c.sock = None,
                }
            }
            if open == 0 || Instant::now() > deadline {
                break;
            }
            // Spin a little (the answer is usually a round trip away),
            // then sleep between looks.
            spins += 1;
            if spins < 100 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}
