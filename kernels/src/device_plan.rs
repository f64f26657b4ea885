//! An MSM's bucket plan made on the device: what the CUDA backend uploads instead of
//! [`crate::plan::Plan`]'s index buffer, and where each part of the device's buffer lies.
//!
//! The host plan costs a 2^20-point G1 MSM 64–73 ms of sorting and 31–38 ms of copying a
//! ~70 MB index buffer on an H200 (bench/RESULTS.md), against 12 ms of kernels. Here the
//! host uploads only the scalars (32 bytes each, in Montgomery form, as the NTT's), and the
//! kernels of `kernels/cuda/msm_plan.cuh` do the rest, in one `u32` buffer laid out by
//! [`DevicePlan`]:
//!
//! 1. **count**: each scalar out of Montgomery form, its signed digits, one atomic count per
//!    nonzero digit in its bucket (points at infinity and zero digits have no entry, as in
//!    the host plan);
//! 2. **scan**: two levels of 32-wide sums and one thread over the top ([`SCAN_FAN`]), then
//!    back down: each bucket's first entry and first segment (segments of at most
//!    [`crate::plan::SEGMENT`] entries, as the host plan cuts them);
//! 3. **segments**: one thread per segment finds its bucket by binary search and writes its
//!    (first entry, length) and bucket;
//! 4. **scatter**: each point's entries into its buckets' next free slots (the order inside a
//!    bucket is the atomics' order; the sum is not);
//! 5. the accumulation and reduction kernels of the host plan, reading the same layout, with
//!    combining passes that find their pairs from each segment's bucket
//!    ([`DevicePlan::combine_passes`]: enough for a bucket holding every point);
//! 6. **window passes**: the reduction's chunk sums of each window added on the device by
//!    halving ([`DevicePlan::window_passes`]), so the host downloads one point per window
//!    and only doubles its way through the windows ([`Shape::horner`]).
//!
//! The capacity of each part is its bound (every point has a digit in every window), so
//! nothing is read back between the steps; segment slots past the real count are zeros
//! (length 0) and their threads return. The host check runs these kernels' per-thread
//! functions one after the other and compares their plan with the host's and their sum with
//! arkworks (`cuda_host_check.rs`).

use crate::plan::{SEGMENT, Shape};
use crate::{Error, Result};

/// Buckets (or first-level sums) per scan thread: `msm_plan.cuh`'s `FM_SCAN_FAN`.
pub(crate) const SCAN_FAN: u32 = 32;

/// Where each part of the device plan's `u32` buffer begins, and how many threads each
/// step launches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DevicePlan {
    /// Windows, buckets and reduction.
    pub shape: Shape,
    /// Points.
    pub n: u32,
    /// Buckets in all windows, `windows · buckets`.
    pub total: u32,
    /// Segment slots: a bound on the segments of all buckets.
    pub segment_slots: u32,
    /// First-level scan sums: `⌈total / 32⌉`.
    pub up1_count: u32,
    /// Second-level scan sums: `⌈up1_count / 32⌉`.
    pub up2_count: u32,
    /// The segments' (first entry, length) pairs; entries begin at 0.
    pub seg_off: u32,
    /// Each bucket's first segment, and the segment count after the last.
    pub bseg_off: u32,
    /// Each segment's bucket.
    pub segb_off: u32,
    /// Each bucket's entry count (counted down to zero by the scatter).
    pub count_off: u32,
    /// Each bucket's first entry.
    pub start_off: u32,
    /// The scan's first level, an (entries, segments) pair per sum.
    pub up1_off: u32,
    /// Its second level, likewise.
    pub up2_off: u32,
    /// Words in all.
    pub words: usize,
}

impl DevicePlan {
    /// The layout for `n` points.
    ///
    /// # Errors
    /// [`Error::Arith`] when the buffer would need indices past `u32` (about 2^28 points).
    pub fn new(op: &'static str, n: usize) -> Result<DevicePlan> {
        let shape = Shape::new(n);
        let total = u64::from(shape.windows) * u64::from(shape.buckets);
        let entries = n as u64 * u64::from(shape.windows);
        let segment_slots = entries.div_ceil(SEGMENT as u64) + total;
        let up1 = total.div_ceil(u64::from(SCAN_FAN));
        let up2 = up1.div_ceil(u64::from(SCAN_FAN));
        let parts = [
            entries,           // entries
            2 * segment_slots, // segments
            total + 1,         // bucket starts in segments
            segment_slots,     // segment buckets
            total,             // counts
            total,             // starts
            2 * up1,           // scan level 1
            2 * up2,           // scan level 2
        ];
        let words: u64 = parts.iter().sum();
        if words > u64::from(u32::MAX) {
            return Err(Error::Arith {
                op,
                reason: format!("{n} points need more indices than one GPU MSM addresses (u32)"),
            });
        }
        let mut at = 0u64;
        let mut offs = [0u32; 8];
        for (o, len) in offs.iter_mut().zip(parts) {
            *o = at as u32;
            at += len;
        }
        Ok(DevicePlan {
            shape,
            n: n as u32,
            total: total as u32,
            segment_slots: segment_slots as u32,
            up1_count: up1 as u32,
            up2_count: up2 as u32,
            seg_off: offs[1],
            bseg_off: offs[2],
            segb_off: offs[3],
            count_off: offs[4],
            start_off: offs[5],
            up1_off: offs[6],
            up2_off: offs[7],
            words: words as usize,
        })
    }

    /// The combining passes to launch, `k = 0, 1, …`: a bucket has at most `⌈n / SEGMENT⌉`
    /// segments (one entry per point per window), halved by each pass.
    pub fn combine_passes(&self) -> u32 {
        let most = (self.n as usize).div_ceil(SEGMENT).max(1);
        most.next_power_of_two().trailing_zeros()
    }

    /// The window passes as the count `m` of each window's chunk sums still to add: `chunks,
    /// ⌈chunks/2⌉, …` down to 2, each launching `windows · ⌊m/2⌋` threads.
    pub fn window_passes(&self) -> impl Iterator<Item = u32> {
        std::iter::successors(Some(self.shape.chunks), |m| Some(m.div_ceil(2)))
            .take_while(|m| *m > 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_bounds_every_part_and_refuses_what_u32_cannot_index() {
        for n in [1usize, 2, 31, 33, 1000, 1 << 16, 1 << 20] {
            let p = DevicePlan::new("msm_g1", n).expect("layout");
            let s = p.shape;
            assert_eq!(p.total, s.windows * s.buckets);
            assert!(p.seg_off as usize >= n * s.windows as usize);
            assert!(p.bseg_off - p.seg_off >= 2 * p.segment_slots);
            assert!(p.up1_count * SCAN_FAN >= p.total);
            assert!(p.up2_count * SCAN_FAN >= p.up1_count);
            assert!(p.up1_off + 2 * p.up1_count <= p.up2_off);
            assert_eq!(p.words, (p.up2_off + 2 * p.up2_count) as usize);
            // passes: ⌈n/32⌉ segments in one bucket come down to one
            let mut m = n.div_ceil(SEGMENT);
            for _ in 0..p.combine_passes() {
                m = m.div_ceil(2);
            }
            assert!(m <= 1, "n = {n}");
            let mut m = s.chunks;
            for w in p.window_passes() {
                assert_eq!(w, m);
                m = m.div_ceil(2);
            }
            assert_eq!(m, 1);
        }
        assert!(DevicePlan::new("msm_g1", 1 << 30).is_err());
    }
}
