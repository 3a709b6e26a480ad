//! The engine's own cost per message, transports aside.
//!
//! `cargo bench -p rivet-bench --bench engine_path -- --warm-up-time 1 --measurement-time 3`
//!
//! A singleton engine (no launcher: run it outside `rivetrun`) sends to
//! itself, so each message goes isend → the loopback route → matching →
//! completion without shared memory or a network in between: what is left
//! is the software path every transport shares (request table, matching,
//! protocol, progress and the engine lock or its absence).
//!
//! - `single/isend_progress`: at thread level SINGLE (`Engine<Local>`, no
//!   lock): a receive posted, then `isend` + `progress` + both waits.
//! - `multiple/isend_progress`: the same on `Engine<Shared>` (MULTIPLE: the
//!   engine's lock on every call).
//! - `single/isend_unexpected`: the send first (the message waits as
//!   unexpected), then the receive.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use rivet::{Comm, Engine, Local, Shared, ThreadLevel, Threading};

const TAG: i32 = 3;

fn round<T: Threading>(comm: &Comm<T>, sbuf: &[u8; 8], rbuf: &mut [u8; 8], recv_first: bool) {
    // SAFETY: both buffers outlive the requests, which are waited for
    // before this function returns; nothing else touches them meanwhile.
    unsafe {
        if recv_first {
            let r = comm.irecv_raw(rbuf.as_mut_ptr(), 8, 0, TAG).expect("irecv");
            let s = comm.isend_raw(sbuf.as_ptr(), 8, 0, TAG).expect("isend");
            s.wait().expect("send");
            r.wait().expect("recv");
        } else {
            let s = comm.isend_raw(sbuf.as_ptr(), 8, 0, TAG).expect("isend");
            let r = comm.irecv_raw(rbuf.as_mut_ptr(), 8, 0, TAG).expect("irecv");
            s.wait().expect("send");
            r.wait().expect("recv");
        }
    }
}

fn bench_level<T: Threading>(c: &mut Criterion, engine: &Engine<T>, name: &str) {
    let world = engine.world();
    let sbuf = [7u8; 8];
    let mut rbuf = [0u8; 8];
    c.bench_function(&format!("{name}/isend_progress"), |b| {
        b.iter(|| round(&world, black_box(&sbuf), &mut rbuf, true))
    });
    c.bench_function(&format!("{name}/isend_unexpected"), |b| {
        b.iter(|| round(&world, black_box(&sbuf), &mut rbuf, false))
    });
    assert_eq!(rbuf, sbuf, "the message arrived");
}

fn engine_path(c: &mut Criterion) {
    if std::env::var_os("PMI_FD").is_some() || std::env::var_os("PMI_PORT").is_some() {
        panic!("run this benchmark alone, not under a launcher: it needs a singleton engine");
    }
    let single = Engine::<Local>::init_thread(ThreadLevel::Single).expect("engine init");
    assert_eq!(single.thread_level(), ThreadLevel::Single);
    bench_level(c, &single, "single");
    single.finalize().expect("finalize");
    let multiple = Engine::<Shared>::init_thread(ThreadLevel::Multiple).expect("engine init");
    bench_level(c, &multiple, "multiple");
    multiple.finalize().expect("finalize");
}

criterion_group!(benches, engine_path);
criterion_main!(benches);
