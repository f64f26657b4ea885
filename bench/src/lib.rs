//! # fleetmesh-bench
//!
//! Side-by-side benchmarks: each measures fleetmesh and a baseline on the same input in
//! the same run and reports the ratio, because absolute times on shared machines lie.
//! Rounds alternate between the two so that drift in machine load hits both alike; the
//! median round is reported.
//!
//! Run `cargo run --release -p fleetmesh-bench -- --help`. Figures go in `bench/RESULTS.md`.

use std::time::{Duration, Instant};

/// One side's timing.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Median time of one round.
    pub per_round: Duration,
    /// Operations in one round.
    pub ops: u64,
}

impl Timing {
    /// Nanoseconds per operation.
    pub fn ns_per_op(&self) -> f64 {
        self.per_round.as_nanos() as f64 / self.ops as f64
    }
}

/// The outcome of [`compare`].
#[derive(Debug, Clone, Copy)]
pub struct Comparison {
    /// fleetmesh's side.
    pub ours: Timing,
    /// The baseline's side.
    pub baseline: Timing,
}

impl Comparison {
    /// The comparison of measured rounds (each of `ops` operations), by their medians.
    pub fn of_rounds(ours: Vec<Duration>, baseline: Vec<Duration>, ops: u64) -> Comparison {
        Comparison {
            ours: Timing {
                per_round: median(ours),
                ops,
            },
            baseline: Timing {
                per_round: median(baseline),
                ops,
            },
        }
    }

    /// Baseline time over ours: above 1 means fleetmesh is faster.
    pub fn speedup(&self) -> f64 {
        self.baseline.ns_per_op() / self.ours.ns_per_op()
    }
}

/// The median of round times (the upper one of an even count).
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Runs `ours` and `baseline` alternately for `rounds` rounds (after one warm-up round
/// each); each closure performs `ops` operations per call and returns a checksum that is
/// fed to [`std::hint::black_box`] so the work cannot be optimised away.
///
/// # Panics
/// If `rounds` is zero.
pub fn compare<A, B>(rounds: usize, ops: u64, mut ours: A, mut baseline: B) -> Comparison
where
    A: FnMut() -> u64,
    B: FnMut() -> u64,
{
    assert!(rounds > 0, "at least one round");
    std::hint::black_box(ours());
    std::hint::black_box(baseline());
    let (mut a, mut b) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        let t = Instant::now();
        std::hint::black_box(ours());
        a.push(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(baseline());
        b.push(t.elapsed());
    }
    Comparison::of_rounds(a, b, ops)
}

/// Prints one result row: name, ns/op each side, and the speed-up.
pub fn report(name: &str, baseline_name: &str, c: &Comparison) {
    println!(
        "{name:<34} ours {:>10.0} ns/op   {baseline_name} {:>10.0} ns/op   speed-up x{:.2}",
        c.ours.ns_per_op(),
        c.baseline.ns_per_op(),
        c.speedup()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slower_side_shows_as_a_ratio_below_one() {
        let spin = |n: u64| (0..n).fold(0u64, |a, i| a.wrapping_add(std::hint::black_box(i)));
        let c = compare(5, 1, || spin(200_000), || spin(1_000));
        assert!(c.speedup() < 1.0, "{c:?}");
        assert!(c.ours.ns_per_op() > c.baseline.ns_per_op());
    }
}
