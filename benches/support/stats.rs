//! What the benches share (benches/field.rs and benches/real_node.rs include this file with
//! `#[path]`): the min / median / max of a measurement's samples, and a failed sample's panic
//! as text.

use std::any::Any;

/// The min / median / max of `n` samples.
#[derive(Clone, Copy)]
pub struct Stats {
    pub n: usize,
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

/// The statistics of `v` (None when it is empty); the median of an even count is the mean of
/// the middle two.
pub fn stats(v: &[f64]) -> Option<Stats> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let median = if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    };
    Some(Stats {
        n: s.len(),
        min: s[0],
        median,
        max: s[s.len() - 1],
    })
}

/// A caught panic's message (`panic!` with a format or a literal), at most `max` characters.
pub fn panic_message(e: &(dyn Any + Send), max: usize) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
        .chars()
        .take(max)
        .collect()
}
