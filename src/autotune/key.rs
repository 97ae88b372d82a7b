//! Tuning keys: the device, the op family and the problem's bucket.
//!
//! Invariant: a key's text holds no tab, newline or `=` (the cache file's separators); the
//! constructors replace them.

/// What a tuning result is kept under.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The device that runs the candidates: the GPU adapter and its driver, or the CPU model,
    /// its instruction set and thread count.
    pub device: String,
    /// The op family (the name `config::AutotuneConfig::force` takes).
    pub op: &'static str,
    /// The problem: dtypes, the shape bucket and the layout, as text.
    pub problem: String,
}

impl Key {
    /// A key; separators in `device` and `problem` become spaces.
    pub fn new(device: &str, op: &'static str, problem: &str) -> Key {
        Key {
            device: clean(device),
            op,
            problem: clean(problem),
        }
    }
}

/// `s` with the cache file's separators (tab, newline, carriage return, `=`) replaced by
/// spaces.
pub(crate) fn clean(s: &str) -> String {
    s.chars()
        .map(|c| {
            if matches!(c, '\t' | '\n' | '\r' | '=') {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// The shape bucket of a size: sizes up to 16 as they are, larger ones rounded up to a power
/// of two or 1.5 times one (17..=24 → 24, 25..=32 → 32, 33..=48 → 48, ...; sizes past the
/// largest power of two stay as they are), so problems of nearby sizes share a result while
/// the buckets stay within 1.5× of the size.
pub fn bucket(n: usize) -> usize {
    if n <= 16 {
        return n;
    }
    let Some(p) = n.checked_next_power_of_two() else {
        return n;
    };
    let three_quarters = p / 4 * 3;
    if n <= three_quarters {
        three_quarters
    } else {
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_within_one_and_a_half_times_and_monotone() {
        let mut last = 0;
        for n in 0..100_000usize {
            let b = bucket(n);
            assert!(b >= n && (n <= 16 || b * 2 <= n * 3), "{n} -> {b}");
            assert!(b >= last, "{n} -> {b} after {last}");
            last = b;
        }
        assert_eq!(bucket(4096), 4096);
        assert_eq!(bucket(77), 96);
        assert_eq!(bucket(usize::MAX), usize::MAX);
    }

    #[test]
    fn keys_hold_no_separators() {
        let k = Key::new("gpu\tA=B\nC", "matmul", "f32\t1=2");
        assert_eq!(k.device, "gpu A B C");
        assert_eq!(k.problem, "f32 1 2");
    }
}
