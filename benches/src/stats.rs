//! Summaries of repeated measurements: median and range, never the mean,
//! because one descheduled run on a 2-core VM would dominate it.

#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

pub fn summarize(samples: &[f64]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    Some(Summary {
        median,
        min: sorted[0],
        max: sorted[n - 1],
    })
}

/// A ratio beside its verdict: two decimals, or as many more as it takes
/// for the figure shown to fall on the same side of its target (0.705
/// against at most 0.7 shows as "0.705", not "0.70").
pub fn fmt_ratio(v: f64, met: impl Fn(f64) -> bool) -> String {
    for digits in 2..8 {
        let shown = format!("{v:.digits$}");
        if shown.parse::<f64>().is_ok_and(|s| met(s) == met(v)) {
            return shown;
        }
    }
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_shows_the_side_of_its_target() {
        let at_most = |t: f64| move |v: f64| v <= t;
        assert_eq!(fmt_ratio(0.7049, at_most(0.7)), "0.705");
        assert_eq!(fmt_ratio(0.6951, at_most(0.7)), "0.70");
        assert_eq!(fmt_ratio(0.70004, at_most(0.7)), "0.70004");
        assert_eq!(fmt_ratio(0.73, at_most(0.7)), "0.73");
        assert_eq!(fmt_ratio(1.296, |v| v >= 1.3), "1.296");
        assert_eq!(fmt_ratio(1.35, |v| v >= 1.3), "1.35");
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        let s = summarize(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = summarize(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert!(summarize(&[]).is_none());
    }
}
