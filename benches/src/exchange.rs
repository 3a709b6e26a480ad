//! `rivet-bench exchange`: every rank ping-pongs with every other world
//! rank at 8 B, 1 KiB and 100 KiB, and checks every byte.
//!
//! Per size, the ping: a rank sends to every peer first (nonblocking),
//! then receives from every peer; the pong: it echoes what it got back to
//! each peer, then receives its own messages back. A payload depends only on its
//! size and tag, never on who sent it, so an echoing peer passes the check
//! too. Made for jobs whose ranks reach each other by different paths
//! (IMPI clients, several hosts): it prints `exchange ok: R ranks` on
//! rank 0 and exits non-zero on any mismatch.

use rivet::{Comm, Local, Request, ThreadLevel};

/// The sizes exchanged.
pub const SIZES: [usize; 3] = [8, 1024, 100 * 1024];
const TAG_PING: i32 = 0x51;
const TAG_PONG: i32 = 0x52;

/// The bytes of a message of `size` with `tag`: a pseudo-random stream
/// seeded by both (a misplaced piece cannot hide in a short period).
pub fn payload(size: usize, tag: i32) -> Vec<u8> {
    let mut x =
        (size as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (tag as u64).rotate_left(32) | 1;
    (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// One round at `size` with `tag`: send `out` to every peer, receive one
/// message from each; what came, by peer.
fn round(
    world: &Comm<Local>,
    out: &[Vec<u8>],
    size: usize,
    tag: i32,
) -> Result<Vec<Vec<u8>>, String> {
    let (me, n) = (world.rank(), world.size());
    let mut got: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; size]).collect();
    world.scope(|s| -> Result<(), String> {
        let mut sends: Vec<Request<'_, Local>> = Vec::new();
        for peer in (0..n).filter(|&p| p != me) {
            sends.push(
                s.isend(&out[peer as usize], peer, tag)
                    .map_err(|e| format!("isend to {peer}: {e}"))?,
            );
        }
        for (peer, buf) in got.iter_mut().enumerate() {
            if peer as u32 == me {
                continue;
            }
            let st = world
                .recv(buf, peer as i32, tag)
                .map_err(|e| format!("receiving {size} B from rank {peer}: {e}"))?;
            if st.count != size {
                return Err(format!(
                    "rank {me}: {} bytes from rank {peer}, not {size}",
                    st.count
                ));
            }
        }
        Request::wait_all(&mut sends).map_err(|e| format!("sends: {e}"))
    })?;
    Ok(got)
}

fn check(me: u32, got: &[Vec<u8>], want: &[u8], size: usize, what: &str) -> Result<(), String> {
    for (peer, buf) in got.iter().enumerate() {
        if peer as u32 == me {
            continue;
        }
        if let Some(at) = buf.iter().zip(want).position(|(a, b)| a != b) {
            return Err(format!(
                "rank {me}: the {what} of {size} B from rank {peer} differs at byte {at}"
            ));
        }
    }
    Ok(())
}

pub fn run() -> Result<(), String> {
    let engine = crate::p2p::init::<Local>(ThreadLevel::Single)?;
    let world = engine.world();
    let (me, n) = (world.rank(), world.size());
    for size in SIZES {
        let ping = payload(size, TAG_PING);
        let out: Vec<Vec<u8>> = (0..n).map(|_| ping.clone()).collect();
        let got = round(&world, &out, size, TAG_PING)?;
        check(me, &got, &ping, size, "ping")?;
        // Pong: every peer's message echoed back to it.
        let back = round(&world, &got, size, TAG_PONG)?;
        check(me, &back, &ping, size, "pong")?;
    }
    world.barrier().map_err(|e| format!("barrier: {e}"))?;
    drop(world);
    engine.finalize().map_err(|e| format!("finalize: {e}"))?;
    if me == 0 {
        println!("exchange ok: {n} ranks");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_depend_on_size_and_tag_only() {
        assert_eq!(payload(1024, 1), payload(1024, 1));
        assert_ne!(payload(1024, 1), payload(1024, 2));
        assert_ne!(payload(8, 1)[..], payload(1024, 1)[..8]);
        let p = payload(100 * 1024, 7);
        assert!(
            p.iter().filter(|&&b| b == p[0]).count() < 1000,
            "not constant"
        );
    }
}
