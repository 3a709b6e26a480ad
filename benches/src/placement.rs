//! Where the host put the two CPUs a 2-rank run uses, told by their cache
//! line round trip. In a virtual machine the host may move the guest's
//! vCPUs: on this project's 2-vCPU EPYC guest the round trip between
//! CPUs 0 and 1 is ~110 ns in one placement and ~500 ns in the other, and
//! it holds for seconds while both are busy. Every stack's figures follow
//! it (loopback TCP bandwidth 2.4 against 4.5-6.5 GB/s), so a median over
//! runs is a lottery over placements. The harness probes before and after
//! each run (`probe`); `split` finds the two placements in those probes,
//! and the comparison reports each placement's runs apart.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// CPUs 0 and 1's round trip before and after one run, in ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probe {
    pub before: f64,
    pub after: f64,
}

/// Which of the two placements a run had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Near,
    Far,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Near => "near",
            Class::Far => "far",
        }
    }
}

impl Probe {
    /// Its placement when both probes agree about it; `None` when the host
    /// moved the CPUs during the run.
    pub fn class(&self, split_ns: f64) -> Option<Class> {
        match (self.before <= split_ns, self.after <= split_ns) {
            (true, true) => Some(Class::Near),
            (false, false) => Some(Class::Far),
            _ => None,
        }
    }
}

/// Round trips per timed chunk; the probe's value is the median chunk's.
const CHUNK: u64 = 1000;
const CHUNKS: usize = 7;
/// A probe whose partner never answers (its CPU busy with something that
/// does not yield) gives up after this long.
const PATIENCE: Duration = Duration::from_millis(200);

/// The round trip of one cache line between the first two CPUs this
/// process may run on, in ns (median of 7 chunks of 1000 after 1000 to
/// warm up; 1-10 ms). `None` with fewer than two CPUs or if the partner
/// does not answer within 200 ms. Two threads of its own, so the caller's
/// CPU affinity does not change.
pub fn probe() -> Option<f64> {
    let (a, b) = first_two_cpus()?;
    // Odd values: the prober's turn to see; even: the partner's answer.
    let line = Arc::new(CacheLine(AtomicU64::new(0)));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let total = CHUNK * (CHUNKS as u64 + 1);
    let partner = {
        let (line, stop) = (line.clone(), stop.clone());
        std::thread::spawn(move || {
            pin(b);
            for i in 0..total {
                while line.0.load(Ordering::Acquire) != 2 * i + 1 {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    std::hint::spin_loop();
                }
                line.0.store(2 * i + 2, Ordering::Release);
            }
        })
    };
    let prober = std::thread::spawn(move || {
        pin(a);
        let start = Instant::now();
        let mut chunks = Vec::with_capacity(CHUNKS);
        let mut chunk_start = Instant::now();
        for i in 0..total {
            line.0.store(2 * i + 1, Ordering::Release);
            while line.0.load(Ordering::Acquire) != 2 * i + 2 {
                if start.elapsed() > PATIENCE {
                    return None;
                }
                std::hint::spin_loop();
            }
            if (i + 1) % CHUNK == 0 {
                // The first chunk warms up.
                if i + 1 > CHUNK {
                    chunks.push(chunk_start.elapsed().as_nanos() as f64 / CHUNK as f64);
                }
                chunk_start = Instant::now();
            }
        }
        crate::stats::summarize(&chunks).map(|s| s.median)
    });
    let ns = prober.join().ok().flatten();
    stop.store(true, Ordering::Relaxed);
    let _ = partner.join();
    ns
}

#[repr(align(128))]
struct CacheLine(AtomicU64);

fn first_two_cpus() -> Option<(usize, usize)> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set, which
    // sched_getaffinity fills for the calling thread.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        set
    };
    // SAFETY: CPU_ISSET reads the set we own, within its size.
    let mut cpus = (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) });
    Some((cpus.next()?, cpus.next()?))
}

/// Bind the calling thread to `cpu` (best effort: unbound, the probe only
/// measures something less useful).
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes
    // within it (cpu < CPU_SETSIZE, from first_two_cpus); sched_setaffinity
    // reads it and binds only the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The round trip that parts two placements seen in `values` (every
/// probe of a comparison), if there are two: the widest gap between
/// sorted values, at least 1.5 x, with the medians on each side at least
/// 2 x apart and each side at least a tenth of the values (and two). The
/// split is the gap's geometric middle. `None`: one placement.
pub fn split(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values
        .iter()
        .copied()
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    v.sort_by(f64::total_cmp);
    let least = (v.len() / 10).max(2);
    if v.len() < 2 * least {
        return None;
    }
    let (gap, i) = (least - 1..v.len() - least)
        .map(|i| (v[i + 1] / v[i], i))
        .max_by(|x, y| x.0.total_cmp(&y.0))?;
    let median = |s: &[f64]| crate::stats::summarize(s).map_or(0.0, |s| s.median);
    let (low, high) = v.split_at(i + 1);
    (gap >= 1.5 && median(high) >= 2.0 * median(low)).then(|| (v[i] * v[i + 1]).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_placements_are_split_between_them() {
        let mut v = vec![95.0, 110.0, 120.0, 131.0, 102.0, 140.0];
        v.extend([480.0, 510.0, 620.0, 1010.0, 495.0]);
        let s = split(&v).expect("two placements");
        assert!(s > 140.0 && s < 480.0, "{s}");
        assert!((s - (140.0f64 * 480.0).sqrt()).abs() < 1e-9);
        let p = |before, after| Probe { before, after };
        assert_eq!(p(110.0, 120.0).class(s), Some(Class::Near));
        assert_eq!(p(500.0, 900.0).class(s), Some(Class::Far));
        assert_eq!(p(110.0, 500.0).class(s), None);
    }

    #[test]
    fn one_placement_or_a_stray_probe_is_not_split() {
        // One placement, spread out.
        assert_eq!(
            split(&[100.0, 110.0, 125.0, 140.0, 150.0, 170.0, 180.0]),
            None
        );
        // One run descheduled once among twenty: not a placement.
        let mut v = vec![110.0; 19];
        v.push(2000.0);
        assert_eq!(split(&v), None);
        // Too few values to tell.
        assert_eq!(split(&[100.0, 500.0]), None);
        assert_eq!(split(&[]), None);
        // A gap that is not wide enough.
        assert_eq!(split(&[100.0, 105.0, 110.0, 140.0, 150.0, 160.0]), None);
    }

    #[test]
    fn probe_measures_a_round_trip_where_there_are_two_cpus() {
        match (first_two_cpus(), probe()) {
            (Some(_), Some(ns)) => assert!(ns > 0.0 && ns < 1e6, "{ns} ns"),
            // A busy partner CPU may not answer in time; with one CPU
            // there is nothing to probe.
            (Some(_), None) | (None, None) => {}
            (None, Some(ns)) => panic!("a probe of {ns} ns with fewer than two CPUs"),
        }
    }
}
