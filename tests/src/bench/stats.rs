//! Medians and percentiles of samples.

use std::time::Duration;

/// The median of `values` (the upper one of an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    percentile(values, 50.0)
}

/// The `p`-th percentile of `values` by the nearest-rank method; `None` when empty.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// p50 and p99 of durations, in microseconds.
pub fn p50_p99_micros(samples: &[Duration]) -> (f64, f64) {
    let micros: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
    (
        percentile(&micros, 50.0).unwrap_or(f64::NAN),
        percentile(&micros, 99.0).unwrap_or(f64::NAN),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 99.0), Some(4.0));
        assert_eq!(median(&[]), None);
    }
}
