//! Progress of a harness on stderr: a bar with the run under way (bench,
//! stack, rep), the count and an ETA when stderr is a terminal (indicatif),
//! else one plain line per run ending in the same count and ETA, so logs
//! stay readable. Result lines go above the bar (`line`).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    bar: Option<ProgressBar>,
    total: usize,
    done: usize,
    start: Instant,
}

impl Progress {
    /// `total` runs to come. A bar only if stderr is a terminal.
    pub fn new(total: usize) -> Progress {
        Progress::with_bar(total, std::io::stderr().is_terminal())
    }

    fn with_bar(total: usize, bar: bool) -> Progress {
        let bar = bar.then(|| {
            let b = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
            b.set_style(
                ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30}] {pos}/{len} eta {eta} {wide_msg}",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            b.enable_steady_tick(Duration::from_millis(500));
            b
        });
        Progress {
            bar,
            total,
            done: 0,
            start: Instant::now(),
        }
    }

    /// A run starts: `what` says which (e.g. "rep 2/5 latency/mpich").
    pub fn start(&self, what: &str) {
        if let Some(b) = &self.bar {
            b.set_message(what.to_string());
        }
    }

    /// A line of output above the bar (or plain).
    pub fn line(&self, text: &str) {
        match &self.bar {
            Some(b) => b.println(text),
            None => eprintln!("{text}"),
        }
    }

    /// A run ended with `text`; counts it. Plain lines get "[k/N, eta ..]".
    pub fn finished(&mut self, text: &str) {
        self.done += 1;
        match &self.bar {
            Some(b) => {
                b.println(text);
                b.inc(1);
            }
            None => eprintln!("{text} {}", self.count()),
        }
    }

    /// "[k/N, eta 1m05s]": done so far and the time left at the mean pace.
    fn count(&self) -> String {
        let left = self.total.saturating_sub(self.done);
        let eta = if self.done == 0 || left == 0 {
            String::new()
        } else {
            let per = self.start.elapsed().as_secs_f64() / self.done as f64;
            format!(", eta {}", fmt_duration(per * left as f64))
        };
        format!("[{}/{}{eta}]", self.done, self.total)
    }

    /// Remove the bar (lines printed stay).
    pub fn finish(self) {
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}

fn fmt_duration(secs: f64) -> String {
    let s = secs.round() as u64;
    match s {
        s if s >= 3600 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        s if s >= 60 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_count_and_estimate() {
        let mut p = Progress::with_bar(4, false);
        assert_eq!(p.count(), "[0/4]");
        p.start = Instant::now() - Duration::from_secs(10);
        p.done = 2;
        assert_eq!(p.count(), "[2/4, eta 10s]");
        p.done = 4;
        assert_eq!(p.count(), "[4/4]");
        assert_eq!(fmt_duration(65.0), "1m05s");
        assert_eq!(fmt_duration(7300.0), "2h01m");
        p.finish();
    }
}
