//! Which threads the host-side work of a layer runs on (attention of decoded rows, the
//! MLP's activation): the pool that layer's products use — candle's barrier pool for
//! quantized weights, rayon's for dense ones ([`crate::weight::Weight::pool`]). On a
//! machine with few cores, a second pool's workers spinning beside the first take its
//! cores: F32 batch-8 decode lost a third that way on this project's 2-core machine.

use std::sync::Mutex;

/// A thread pool to run host-side work on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pool {
    /// candle's barrier pool (its quantized products, ours, its element-wise operations).
    Candle,
    /// rayon's global pool (candle's gemm for dense weights).
    Rayon,
}

impl Pool {
    /// The least work (in multiply-adds or their equivalent) worth handing to other
    /// threads: candle's workers spin between jobs and start in about a microsecond,
    /// rayon's sleep and take tens (24 small rayon jobs a step cost an F32 decode 9 %).
    fn least(self) -> usize {
        match self {
            Pool::Candle => 1 << 15,
            Pool::Rayon => 1 << 18,
        }
    }

    /// Calls `f` on every item, on this pool's threads — or in order on the calling thread
    /// when there is one item or the whole `work` is below what a hand-off costs.
    pub(crate) fn each<T: Send>(self, items: &mut [T], work: usize, f: impl Fn(&mut T) + Sync) {
        if items.len() <= 1 || work < self.least() {
            items.iter_mut().for_each(f);
            return;
        }
        // the pools hand out index ranges to a shared closure: a lock per item gives the
        // one thread that item's range went to its `&mut` (never contended)
        let slots: Vec<Mutex<&mut T>> = items.iter_mut().map(Mutex::new).collect();
        let run = |range: std::ops::Range<usize>| {
            for slot in &slots[range] {
                f(&mut slot.lock().unwrap_or_else(|e| e.into_inner()));
            }
        };
        match self {
            Pool::Candle => candle_core::utils::barrier_pool().execute_chunked(slots.len(), run),
            Pool::Rayon => {
                use rayon::prelude::*;
                (0..slots.len()).into_par_iter().for_each(|i| run(i..i + 1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_is_visited_once_on_either_pool_and_inline() {
        for pool in [Pool::Candle, Pool::Rayon] {
            // below and above the hand-off threshold
            for work in [0, 1 << 20] {
                let mut items: Vec<(usize, u32)> = (0..1000).map(|i| (i, 0)).collect();
                pool.each(&mut items, work, |(i, visits)| {
                    *visits += 1;
                    *i *= 3;
                });
                for (k, (i, visits)) in items.iter().enumerate() {
                    assert_eq!((*i, *visits), (3 * k, 1), "{pool:?}, work {work}, item {k}");
                }
            }
        }
    }
}
