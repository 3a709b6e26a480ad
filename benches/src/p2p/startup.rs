//! `info` (what the engine reports) and `startup` (a hello world timed from
//! process start).

use std::time::Instant;

use rivet::{Engine, Local, ThreadLevel, Threading};

use crate::p2p::init;

/// `rivet-bench info` and `--info`: rank 0 prints the engine's configuration.
/// `all`: also every `RIVET_*` setting in force on rank 0 and its source.
pub fn info(all: bool) -> Result<(), String> {
    let engine = init::<Local>(ThreadLevel::Single)?;
    print_info(&engine);
    if all && engine.rank() == 0 {
        let names: Vec<String> = std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .collect();
        print!(
            "{}",
            rivet_settings::listing(|k| std::env::var(k).ok(), &names)
        );
    }
    engine.finalize().map_err(|e| format!("finalize: {e}"))
}

pub(crate) fn print_info<T: Threading>(engine: &Engine<T>) {
    if engine.rank() == 0 {
        let info = engine.info();
        println!(
            "# Rivet engine info (rank 0 of {}, {} on this node)",
            info.size, info.local_size
        );
        print!("{info}");
    }
}

/// `rivet-bench startup`: init, barrier, finalize. Rank 0 prints the time
/// from the start of `main` (taken as the first thing main does, so it
/// excludes exec and the dynamic loader, about 1 ms) to the end of
/// finalize, and the three phases.
pub fn startup(main_start: Instant, json: bool) -> Result<(), String> {
    let t_main = main_start;
    let engine = init::<Local>(ThreadLevel::Single)?;
    let t_init = Instant::now();
    let world = engine.world();
    let (rank, size) = (world.rank(), world.size());
    world.barrier().map_err(|e| format!("barrier: {e}"))?;
    let t_barrier = Instant::now();
    drop(world);
    engine.finalize().map_err(|e| format!("finalize: {e}"))?;
    let t_end = Instant::now();
    if rank == 0 {
        let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
        let (total, init, barrier, fin) = (
            ms(t_main, t_end),
            ms(t_main, t_init),
            ms(t_init, t_barrier),
            ms(t_barrier, t_end),
        );
        if json {
            println!(
                "{{\"bench\":\"startup\",\"ranks\":{size},\"unit\":\"ms\",\"from\":\"main\",\"total\":{},\"init\":{},\"barrier\":{},\"finalize\":{}}}",
                crate::json::num(total),
                crate::json::num(init),
                crate::json::num(barrier),
                crate::json::num(fin)
            );
        } else {
            println!(
                "# Rivet startup ({size} ranks): {total:.3} ms from main() to the end of finalize on rank 0 \
                 (init {init:.3}, barrier {barrier:.3}, finalize {fin:.3} ms)"
            );
        }
    }
    Ok(())
}
