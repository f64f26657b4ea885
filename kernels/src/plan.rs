//! The host half of a GPU MSM: signed window digits, bucket sorting and the work split
//! that the wgpu kernels execute ([`Plan`]), the windows both GPU backends use
//! ([`Shape`]), and how points and field elements travel to and from a GPU. The CUDA
//! backend makes the same plan on the device ([`crate::device_plan`]); [`Plan`] is also
//! the oracle its tests compare that plan with.
//!
//! An MSM on a GPU here, in G1 or G2 ([`GpuCurve`]), is Pippenger in three steps:
//!
//! 1. **Sort** (host, this module; on the device for CUDA): every scalar is cut into signed `c`-bit digits; for each
//!    window the (point, sign) entries are counting-sorted by bucket `|digit| − 1`. Each
//!    bucket's run of entries is cut into *segments* of at most [`SEGMENT`] entries, so one
//!    GPU thread's work is bounded whatever the scalars are (all-equal scalars put every
//!    point into one bucket; they still spread over `n / SEGMENT` threads).
//! 2. **Accumulate** (GPU): one thread per segment adds its points (negated where the digit
//!    was negative) into an XYZZ partial sum.
//! 3. **Combine** (GPU, only for buckets with several segments): passes that halve each
//!    bucket's run of partials, one pair per thread ([`Plan::passes`]), until every bucket's
//!    sum is in its first segment's slot.
//! 4. **Reduce** (GPU): one thread per chunk of [`CHUNK`] consecutive buckets of a window
//!    forms `Σ (b + 1)·bucket_b` over its chunk by running sums, then adds `lo·Σ bucket_b`
//!    for the chunk's offset `lo`; the host adds the chunks of a window and combines the
//!    windows by doubling (Horner).
//!
//! Every GPU thread runs a short, bounded loop (at most [`SEGMENT`] additions, or about
//! 3·[`CHUNK`] in the reduction), whatever the scalars: lavapipe was seen to return wrong
//! sums from a loop of more than 556 point additions in one invocation (deterministically,
//! while each addition alone was right), and long threads are slow on any GPU anyway.
//!
//! [`Plan::evaluate_on_cpu`] runs steps 2 to 4 with arkworks: the tests use it to check a
//! plan independently of any GPU.

use ark_bn254::{Fq, Fq2, Fr};
use ark_ec::AffineRepr;
use ark_ec::short_weierstrass::{Affine, Projective, SWCurveConfig};
use ark_ff::{Field, PrimeField, Zero};
use rayon::prelude::*;

use crate::{Error, Result};

/// Most entries one accumulating thread adds.
pub(crate) const SEGMENT: usize = 32;
/// Buckets one reducing thread walks.
pub(crate) const CHUNK: usize = 32;

/// A group the GPU MSM kernels handle: BN254 G1 (coordinates in Fq) or G2 (in Fq2),
/// with how its coordinates travel to and from the GPU.
pub(crate) trait GpuCurve: SWCurveConfig<ScalarField = Fr> {
    /// `msm_g1` or `msm_g2`, for errors.
    const OP: &'static str;
    /// Field elements ([`FE_BYTES`] each) per coordinate.
    const COORD_FE: usize;
    /// Writes a coordinate's `COORD_FE · FE_BYTES` bytes (Montgomery limbs).
    fn put(c: &Self::BaseField, out: &mut [u8]);
    /// A coordinate from its bytes.
    fn get(b: &[u8]) -> Self::BaseField;
}

impl GpuCurve for ark_bn254::g1::Config {
    const OP: &'static str = "msm_g1";
    const COORD_FE: usize = 1;
    fn put(c: &Fq, out: &mut [u8]) {
        for (d, b) in out.iter_mut().zip(fe_bytes(c.0)) {
            *d = b;
        }
    }
    fn get(b: &[u8]) -> Fq {
        Fq::new_unchecked(limbs(b))
    }
}

impl GpuCurve for ark_bn254::g2::Config {
    const OP: &'static str = "msm_g2";
    const COORD_FE: usize = 2;
    fn put(c: &Fq2, out: &mut [u8]) {
        for (d, b) in out.iter_mut().zip(fe_bytes(c.c0.0).chain(fe_bytes(c.c1.0))) {
            *d = b;
        }
    }
    fn get(b: &[u8]) -> Fq2 {
        Fq2::new(
            Fq::new_unchecked(limbs(&b[..FE_BYTES])),
            Fq::new_unchecked(limbs(&b[FE_BYTES..2 * FE_BYTES])),
        )
    }
}

/// The windows and reduction of a GPU MSM of `n` points, shared by the host's [`Plan`] and
/// the device's ([`crate::device_plan`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// Window width in bits.
    pub c: u32,
    /// Number of windows.
    pub windows: u32,
    /// Buckets per window, `2^(c−1)` (signed digits).
    pub buckets: u32,
    /// Reducing threads per window, `⌈buckets / chunk⌉`.
    pub chunks: u32,
    /// Buckets per reducing thread.
    pub chunk: u32,
}

impl Shape {
    /// The shape for `n` points ([`window_bits`]).
    pub fn new(n: usize) -> Shape {
        let c = window_bits(n);
        let windows = (Fr::MODULUS_BIT_SIZE + 1).div_ceil(c);
        let buckets = 1u32 << (c - 1);
        let chunk = (CHUNK as u32).min(buckets);
        Shape {
            c,
            windows,
            buckets,
            chunks: buckets.div_ceil(chunk),
            chunk,
        }
    }

    /// Number of reducing threads: `windows · chunks`.
    pub fn reduce_count(&self) -> usize {
        (self.windows * self.chunks) as usize
    }

    /// The MSM from the reducing threads' outputs (`windows · chunks` points, window-major):
    /// each window's chunks are added, then [`Shape::horner`].
    #[cfg(any(feature = "wgpu", test))]
    pub fn combine<P: GpuCurve>(&self, chunk_sums: &[Projective<P>]) -> Projective<P> {
        debug_assert_eq!(chunk_sums.len(), self.reduce_count());
        let sums: Vec<Projective<P>> = chunk_sums
            .par_chunks(self.chunks as usize)
            .map(|w| w.iter().sum())
            .collect();
        self.horner(&sums)
    }

    /// The MSM from each window's sum, lowest window first: doubling `c` times between
    /// windows, from the top.
    pub fn horner<P: GpuCurve>(&self, window_sums: &[Projective<P>]) -> Projective<P> {
        debug_assert_eq!(window_sums.len(), self.windows as usize);
        crate::msm::horner(self.c as usize, window_sums)
    }
}

/// The sorted work of one MSM, ready to upload (the wgpu backend's; CUDA makes the same
/// plan on the device, [`crate::device_plan`]). All indices are `u32`.
#[cfg(any(feature = "wgpu", test))]
#[derive(Debug)]
pub(crate) struct Plan {
    /// Its windows and reduction.
    pub shape: Shape,
    /// Every index array in one buffer, as the kernels read it: entries, segments,
    /// bucket segment starts, pairs (see the accessors and [`Plan::indices`]).
    all: Vec<u32>,
    /// Where each part of `all` after the entries begins.
    off: IndexOffsets,
    /// Each combining pass as (first pair, pair count), in order.
    pub passes: Vec<(u32, u32)>,
}

/// Where each part of [`Plan::indices`] begins.
#[cfg(any(feature = "wgpu", test))]
#[derive(Debug, Clone, Copy)]
pub(crate) struct IndexOffsets {
    /// The segments' (start, len) pairs.
    pub segments: u32,
    /// Each bucket's first segment.
    pub bucket_segments: u32,
    /// The combining passes' pairs.
    pub pairs: u32,
}

/// The window width for `n` points on a GPU. Accumulation costs `n` additions per window
/// and the reduction `2·2^(c−1)`; `log₂ n − 3` keeps the reduction small beside the
/// accumulation and the entries (`n · windows`) within memory.
pub(crate) fn window_bits(n: usize) -> u32 {
    let log = usize::BITS - n.leading_zeros();
    log.saturating_sub(3).clamp(4, 16)
}

#[cfg(any(feature = "wgpu", test))]
impl Plan {
    /// Sorts `scalars` into buckets. Points that are the point at infinity and zero digits
    /// produce no entry. `bases` is only read for which points are at infinity.
    ///
    /// # Errors
    /// [`Error::Arith`] for unequal lengths or more than 2^31 − 1 points.
    pub fn new<P: GpuCurve>(bases: &[Affine<P>], scalars: &[Fr]) -> Result<Plan> {
        if bases.len() != scalars.len() {
            return Err(Error::Arith {
                op: P::OP,
                reason: format!("{} bases but {} scalars", bases.len(), scalars.len()),
            });
        }
        let n = bases.len();
        if n >= 1 << 31 {
            return Err(Error::Arith {
                op: P::OP,
                reason: format!("{n} points exceed the GPU MSM's 2^31 − 1"),
            });
        }
        let shape = Shape::new(n);
        let Shape {
            c,
            windows,
            buckets,
            ..
        } = shape;
        let digits = crate::msm::Digits::new(scalars, c as usize, windows as usize);
        let (w_count, b_count) = (windows as usize, buckets as usize);
        let live = |i: usize, v: i32| v != 0 && !bases[i].is_zero();
        // 1. Each window's bucket sizes (windows are independent).
        let sizes: Vec<Vec<u32>> = (0..w_count)
            .into_par_iter()
            .map(|w| {
                let mut size = vec![0u32; b_count];
                for (i, v) in digits.column(w).enumerate() {
                    if live(i, v) {
                        size[v.unsigned_abs() as usize - 1] += 1;
                    }
                }
                size
            })
            .collect();
        // 2. Where each window's entries and segments go in the one index buffer.
        let seg_len = |n: u32| n.div_ceil(SEGMENT as u32);
        let mut starts = Vec::with_capacity(w_count);
        let (mut e_total, mut s_total) = (0u64, 0u64);
        for size in &sizes {
            starts.push((e_total as u32, s_total as u32));
            e_total += size.iter().map(|&n| u64::from(n)).sum::<u64>();
            s_total += size.iter().map(|&n| u64::from(seg_len(n))).sum::<u64>();
        }
        // every index is a u32: the entries, two per segment, the bucket starts and the
        // pairs (fewer than the segments)
        if e_total + 3 * s_total + u64::from(windows * buckets) + 1 > u64::from(u32::MAX) {
            return Err(Error::Arith {
                op: P::OP,
                reason: format!("{n} points need more indices than one GPU MSM addresses (u32)"),
            });
        }
        let (e_total, s_total) = (e_total as u32, s_total as u32);
        let off = IndexOffsets {
            segments: e_total,
            bucket_segments: e_total + 2 * s_total,
            pairs: e_total + 2 * s_total + windows * buckets + 1,
        };
        let mut all = vec![0u32; off.pairs as usize];
        // 3. Each window sorts its entries into its own slices: counting sort by bucket,
        // then the buckets cut into segments.
        {
            let (entries, rest) = all.split_at_mut(e_total as usize);
            let (segments, bucket_segments) = rest.split_at_mut(2 * s_total as usize);
            let mut parts = Vec::with_capacity(w_count);
            let (mut entries, mut segments) = (entries, segments);
            let mut firsts = bucket_segments.chunks_mut(b_count);
            for (w, size) in sizes.iter().enumerate() {
                let e = size.iter().sum::<u32>() as usize;
                let sg = 2 * size.iter().map(|&n| seg_len(n)).sum::<u32>() as usize;
                let (e_w, e_rest) = std::mem::take(&mut entries).split_at_mut(e);
                let (s_w, s_rest) = std::mem::take(&mut segments).split_at_mut(sg);
                (entries, segments) = (e_rest, s_rest);
                let first = firsts.next().expect("a bucket range per window");
                parts.push((w, size, e_w, s_w, first));
            }
            if let Some(last) = firsts.next() {
                last[0] = s_total;
            }
            parts
                .into_par_iter()
                .for_each(|(w, size, e_w, s_w, first)| {
                    let (e0, s0) = starts[w];
                    let mut next = Vec::with_capacity(b_count);
                    let mut at = 0u32;
                    for &n in size {
                        next.push(at);
                        at += n;
                    }
                    let bucket_start = next.clone();
                    for (i, v) in digits.column(w).enumerate() {
                        if live(i, v) {
                            let b = v.unsigned_abs() as usize - 1;
                            e_w[next[b] as usize] = (i as u32) << 1 | u32::from(v < 0);
                            next[b] += 1;
                        }
                    }
                    let mut k = 0;
                    for b in 0..b_count {
                        first[b] = s0 + (k / 2) as u32;
                        let (mut start, end) = (bucket_start[b], bucket_start[b] + size[b]);
                        while start < end {
                            let len = (end - start).min(SEGMENT as u32);
                            s_w[k] = e0 + start;
                            s_w[k + 1] = len;
                            k += 2;
                            start += len;
                        }
                    }
                });
        }
        // Combining passes: a bucket with m > 1 segments adds slot i + ⌈m/2⌉ into slot i
        // for i < ⌊m/2⌋ (no slot is written by one thread and read by another), m ← ⌈m/2⌉.
        let mut rounds: Vec<Vec<u32>> = Vec::new();
        for g in all[off.bucket_segments as usize..].windows(2) {
            let (s0, mut m) = (g[0], g[1] - g[0]);
            let mut k = 0;
            while m > 1 {
                let h = m.div_ceil(2);
                if rounds.len() == k {
                    rounds.push(Vec::new());
                }
                rounds[k].extend((0..m / 2).flat_map(|i| [s0 + i, s0 + i + h]));
                m = h;
                k += 1;
            }
        }
        let mut passes = Vec::new();
        let mut pairs = 0u32;
        for r in rounds {
            passes.push((pairs, (r.len() / 2) as u32));
            pairs += (r.len() / 2) as u32;
            all.extend(r);
        }
        Ok(Plan {
            shape,
            all,
            off,
            passes,
        })
    }

    /// `point << 1 | negate`, grouped by window then bucket.
    #[cfg(test)]
    pub fn entries(&self) -> &[u32] {
        &self.all[..self.off.segments as usize]
    }

    /// Segment `s` covers `entries[segments[2s] .. segments[2s] + segments[2s+1]]`.
    pub fn segments(&self) -> &[u32] {
        &self.all[self.off.segments as usize..self.off.bucket_segments as usize]
    }

    /// The segments of global bucket `g = window·buckets + b` are
    /// `bucket_segments[g] .. bucket_segments[g + 1]`.
    #[cfg(test)]
    pub fn bucket_segments(&self) -> &[u32] {
        &self.all[self.off.bucket_segments as usize..self.off.pairs as usize]
    }

    /// Segment pairs `(a, b)` for the combining passes: `partial[a] += partial[b]`.
    #[cfg(test)]
    pub fn pairs(&self) -> &[u32] {
        &self.all[self.off.pairs as usize..]
    }

    /// Every index array in one buffer, as the kernels read it — entries, segments,
    /// bucket segment starts, pairs — with where each part after the entries begins.
    #[cfg_attr(not(feature = "wgpu"), allow(dead_code))]
    pub fn indices(&self) -> (&[u32], IndexOffsets) {
        (&self.all, self.off)
    }

    /// Number of accumulating threads.
    #[cfg_attr(not(feature = "wgpu"), allow(dead_code))]
    pub fn segment_count(&self) -> usize {
        self.segments().len() / 2
    }

    #[cfg(test)]
    /// Steps 2 to 4 on the CPU with arkworks, exactly as the kernels do them: the oracle
    /// for a plan, without a GPU.
    pub fn evaluate_on_cpu<P: GpuCurve>(&self, bases: &[Affine<P>]) -> Projective<P> {
        let mut partials: Vec<Projective<P>> = self
            .segments()
            .chunks_exact(2)
            .map(|s| {
                let mut acc = Projective::<P>::zero();
                for &e in &self.entries()[s[0] as usize..(s[0] + s[1]) as usize] {
                    let p = bases[(e >> 1) as usize];
                    acc += if e & 1 == 1 { -p } else { p };
                }
                acc
            })
            .collect();
        for &(first, count) in &self.passes {
            for p in self.pairs()[2 * first as usize..2 * (first + count) as usize].chunks_exact(2)
            {
                let b = partials[p[1] as usize];
                partials[p[0] as usize] += b;
            }
        }
        let outs: Vec<Projective<P>> = (0..self.shape.reduce_count())
            .map(|t| {
                let (w, j) = (t as u32 / self.shape.chunks, t as u32 % self.shape.chunks);
                let lo = j * self.shape.chunk;
                let hi = (lo + self.shape.chunk).min(self.shape.buckets);
                let (mut running, mut acc) = (Projective::<P>::zero(), Projective::<P>::zero());
                for b in (lo..hi).rev() {
                    let g = (w * self.shape.buckets + b) as usize;
                    let starts = self.bucket_segments();
                    if starts[g] < starts[g + 1] {
                        running += partials[starts[g] as usize];
                    }
                    acc += running;
                }
                acc + running * Fr::from(lo)
            })
            .collect();
        self.shape.combine(&outs)
    }
}

/// Which transform [`NttJob::new`] prepares.
#[derive(Debug, Clone, Copy)]
pub(crate) enum NttKind {
    /// Coefficients → evaluations on the roots of unity.
    Forward,
    /// Evaluations → coefficients (scaled by 1/n).
    Inverse,
    /// Coefficients → evaluations on the coset `shift·H`.
    Coset(Fr),
}

impl From<crate::ops::NttDirection> for NttKind {
    fn from(d: crate::ops::NttDirection) -> NttKind {
        match d {
            crate::ops::NttDirection::Forward => NttKind::Forward,
            crate::ops::NttDirection::Inverse => NttKind::Inverse,
        }
    }
}

/// A GPU NTT, shared by the wgpu and CUDA kernels: for a coset the input is multiplied by
/// the shift's powers, then bit-reversed (on the host for wgpu, [`NttJob::new`]; on the
/// device for CUDA, [`NttJob::for_len`] and `ntt_permute`); the GPU runs the log₂ n
/// radix-2 butterfly stages ([`NttJob::stages`]) with `twiddles` (ω^t for t < n/2) and an
/// optional scaling by `post` (1/n for the inverse).
#[derive(Debug)]
pub(crate) struct NttJob {
    /// The transform's length.
    pub n: u32,
    /// The root of unity the stages use (ω, or ω⁻¹ for the inverse): their twiddles are
    /// ω^t for t < n/2 ([`NttJob::twiddles`]), the same for every transform of this length
    /// and direction, so a GPU backend may keep them.
    pub omega: Fr,
    /// The coset's shift: the input's coefficient `i` is multiplied by `shiftⁱ`
    /// ([`NttJob::coset_powers`]) before the stages.
    pub shift: Option<Fr>,
    /// Multiplied into every element after the stages.
    pub post: Option<Fr>,
}

/// Elements per block of the parallel power computations.
const POWERS_BLOCK: usize = 1 << 12;

/// `g⁰, g¹, …, g^(len−1)`, in parallel blocks (each starts from its own power of `g`).
fn powers(g: Fr, len: usize) -> Vec<Fr> {
    let mut out = vec![Fr::zero(); len];
    out.par_chunks_mut(POWERS_BLOCK)
        .enumerate()
        .for_each(|(b, chunk)| {
            let mut w = g.pow([(b * POWERS_BLOCK) as u64]);
            for x in chunk {
                *x = w;
                w *= g;
            }
        });
    out
}

impl NttJob {
    /// The job for a transform of `len` values, or `None` when there is nothing to do
    /// (length 0 or 1: `p(shift·ω⁰) = p₀` for a constant, the inverse of length 1 is the
    /// identity).
    ///
    /// # Errors
    /// [`Error::Arith`] for a length that is not a supported power of two.
    pub fn for_len(len: usize, kind: NttKind) -> Result<Option<NttJob>> {
        use ark_poly::EvaluationDomain;
        let d = crate::ops::domain(len)?;
        let (omega, shift, post) = match kind {
            NttKind::Forward => (d.group_gen(), None, None),
            NttKind::Inverse => (d.group_gen_inv(), None, Some(d.size_inv())),
            NttKind::Coset(s) => (d.group_gen(), Some(s), None),
        };
        if len <= 1 {
            return Ok(None);
        }
        let n = u32::try_from(len).map_err(|_| Error::Arith {
            op: "ntt",
            reason: format!("{len} elements are too many for one dispatch"),
        })?;
        Ok(Some(NttJob {
            n,
            omega,
            shift,
            post,
        }))
    }

    /// [`NttJob::for_len`], with the coset's powers multiplied in and `values` bit-reversed
    /// on the host (in parallel), so that the GPU runs only the stages.
    ///
    /// # Errors
    /// As [`NttJob::for_len`].
    #[cfg(any(feature = "wgpu", test))]
    pub fn new(values: &mut [Fr], kind: NttKind) -> Result<Option<NttJob>> {
        let Some(job) = NttJob::for_len(values.len(), kind)? else {
            return Ok(None);
        };
        let n = values.len();
        let bits = n.trailing_zeros();
        if let Some(s) = job.shift {
            // p(shift·x) has coefficients pᵢ·shiftⁱ
            values
                .par_chunks_mut(POWERS_BLOCK)
                .enumerate()
                .for_each(|(b, chunk)| {
                    let mut w = s.pow([(b * POWERS_BLOCK) as u64]);
                    for x in chunk {
                        *x *= w;
                        w *= s;
                    }
                });
        }
        let reversed: Vec<Fr> = (0..n)
            .into_par_iter()
            .map(|i| values[i.reverse_bits() >> (usize::BITS - bits)])
            .collect();
        values.copy_from_slice(&reversed);
        Ok(Some(job))
    }

    /// `shiftⁱ` for i < n (ones without a shift): what `ntt_permute` multiplies in.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub fn coset_powers(&self) -> Vec<Fr> {
        powers(self.shift.unwrap_or(Fr::ONE), self.n as usize)
    }

    /// ω^t for t < n/2: the stages' twiddles.
    pub fn twiddles(&self) -> Vec<Fr> {
        powers(self.omega, self.n as usize / 2)
    }

    /// The butterfly stages as (half span, twiddle stride), first to last.
    pub fn stages(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        std::iter::successors(Some(1u32), |h| Some(h * 2))
            .take_while(|h| *h < self.n)
            .map(|h| (h, self.n / (2 * h)))
    }
}

/// Bytes of a field element on the GPU: its Montgomery limbs, little-endian.
pub(crate) const FE_BYTES: usize = 32;

/// The limbs of a field element from its [`FE_BYTES`] GPU bytes (its Montgomery form).
pub(crate) fn limbs(c: &[u8]) -> ark_ff::BigInt<4> {
    let mut l = [0u64; 4];
    for (i, limb) in l.iter_mut().enumerate() {
        *limb = u64::from_le_bytes(c[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    }
    ark_ff::BigInt(l)
}

/// The [`FE_BYTES`] GPU bytes of a field element's Montgomery limbs.
pub(crate) fn fe_bytes(l: ark_ff::BigInt<4>) -> impl Iterator<Item = u8> {
    l.0.into_iter().flat_map(u64::to_le_bytes)
}

/// The bases as the MSM kernels read them: affine (x, y), `COORD_FE` elements of
/// [`FE_BYTES`] each in Montgomery form; the point at infinity as zeros (it never has an
/// entry). Packed in parallel.
// used by the GPU backends; a test-only build of this module has none
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
pub(crate) fn affine_bytes<P: GpuCurve>(bases: &[Affine<P>]) -> Vec<u8> {
    let mut out = vec![0u8; bases.len() * 2 * P::COORD_FE * FE_BYTES];
    put_affine(bases, &mut out);
    out
}

/// [`affine_bytes`] written into `out` (exactly that long; every byte written).
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
pub(crate) fn put_affine<P: GpuCurve>(bases: &[Affine<P>], out: &mut [u8]) {
    let coord = P::COORD_FE * FE_BYTES;
    assert_eq!(out.len(), bases.len() * 2 * coord, "affine bytes");
    out.par_chunks_mut(2 * coord)
        .zip(bases.par_iter())
        .for_each(|(o, p)| match p.xy() {
            Some((x, y)) => {
                let (ox, oy) = o.split_at_mut(coord);
                P::put(&x, ox);
                P::put(&y, oy);
            }
            None => o.fill(0),
        });
}

/// Fr elements as the NTT kernels read them, packed in parallel.
// used by the GPU backends; a test-only build of this module has none
#[cfg_attr(not(feature = "wgpu"), allow(dead_code))]
pub(crate) fn fr_bytes(v: &[Fr]) -> Vec<u8> {
    let mut out = vec![0u8; v.len() * FE_BYTES];
    put_fr(v, &mut out);
    out
}

/// [`fr_bytes`] written into `out` (exactly that long).
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
pub(crate) fn put_fr(v: &[Fr], out: &mut [u8]) {
    assert_eq!(out.len(), v.len() * FE_BYTES, "field element bytes");
    out.par_chunks_mut(FE_BYTES)
        .zip(v.par_iter())
        .for_each(|(o, x)| {
            for (d, b) in o.iter_mut().zip(fe_bytes(x.0)) {
                *d = b;
            }
        });
}

/// Fr elements from the NTT kernels' bytes, into `values` (as many as it holds).
// used by the GPU backends; a test-only build of this module has none
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
pub(crate) fn read_fr(b: &[u8], values: &mut [Fr]) {
    assert!(b.len() >= values.len() * FE_BYTES, "field element bytes");
    values
        .par_iter_mut()
        .zip(b.par_chunks_exact(FE_BYTES))
        .for_each(|(v, c)| *v = Fr::new_unchecked(limbs(c)));
}

/// An XYZZ point (x = X/ZZ, y = Y/ZZZ, ZZ = 0 at infinity) as the kernels write it (four
/// coordinates of `COORD_FE` elements), as an arkworks Jacobian point without an
/// inversion: Z = ZZ·ZZZ, X·ZZ·ZZZ², Y·ZZZ⁴.
pub(crate) fn xyzz_to_projective<P: GpuCurve>(c: &[u8]) -> Projective<P> {
    let coord = P::COORD_FE * FE_BYTES;
    let e = |i: usize| P::get(&c[i * coord..(i + 1) * coord]);
    let (x, y, zz, zzz) = (e(0), e(1), e(2), e(3));
    if zz.is_zero() {
        return Projective::<P>::zero();
    }
    let zzz2 = zzz.square();
    Projective::<P>::new_unchecked(x * zz * zzz2, y * zzz2.square(), zz * zzz)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ark_bn254::{G1Affine, G1Projective, G2Affine, G2Projective};
    use ark_ec::{CurveGroup, PrimeGroup, VariableBaseMSM};
    use ark_ff::UniformRand;
    use ark_std::rand::SeedableRng;

    #[test]
    fn a_plan_evaluated_on_the_cpu_equals_arkworks_and_bounds_every_thread() {
        let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(3);
        for n in [0usize, 1, 2, 17, 300, 3000] {
            let mut bases: Vec<G1Affine> = (0..n)
                .map(|_| (G1Projective::generator() * Fr::rand(&mut rng)).into_affine())
                .collect();
            let mut scalars: Vec<Fr> = (0..n).map(|_| Fr::rand(&mut rng)).collect();
            if n >= 300 {
                bases[5] = G1Affine::identity();
                bases[6] = bases[7];
                scalars[8] = Fr::zero();
                scalars[9] = -Fr::from(1u64);
                // 100 equal scalars: one bucket per window holds 100 entries
                for s in scalars.iter_mut().skip(100).take(100) {
                    *s = Fr::from(12_345u64);
                }
            }
            let plan = Plan::new(&bases, &scalars).unwrap();
            assert!(
                plan.segments()
                    .chunks_exact(2)
                    .all(|s| s[1] as usize <= SEGMENT)
            );
            assert_eq!(
                plan.evaluate_on_cpu(&bases),
                G1Projective::msm_unchecked(&bases, &scalars),
                "n = {n}"
            );
        }
        let zero = vec![Fr::zero(); 50];
        let g = vec![G1Affine::generator(); 50];
        let plan = Plan::new(&g, &zero).unwrap();
        assert!(plan.entries().is_empty());
        assert!(plan.evaluate_on_cpu(&g).is_zero());
        assert!(Plan::new(&g, &zero[..49]).is_err());
    }

    #[test]
    fn g2_plans_and_coordinate_bytes() {
        let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(4);
        let mut g2: Vec<G2Affine> = (0..300)
            .map(|_| (G2Projective::generator() * Fr::rand(&mut rng)).into_affine())
            .collect();
        g2[3] = G2Affine::identity();
        let scalars: Vec<Fr> = (0..300).map(|_| Fr::rand(&mut rng)).collect();
        let plan = Plan::new(&g2, &scalars).unwrap();
        assert_eq!(
            plan.evaluate_on_cpu(&g2),
            G2Projective::msm_unchecked(&g2, &scalars)
        );
        assert!(Plan::new(&g2, &scalars[..2]).is_err());
        // affine bytes: x then y, c0 then c1 each; infinity as zeros
        let bytes = affine_bytes(&g2);
        let coord = 2 * FE_BYTES;
        for (p, b) in g2.iter().zip(bytes.chunks_exact(2 * coord)) {
            match p.xy() {
                Some((x, y)) => {
                    assert_eq!(ark_bn254::g2::Config::get(&b[..coord]), x);
                    assert_eq!(ark_bn254::g2::Config::get(&b[coord..]), y);
                }
                None => assert!(b.iter().all(|x| *x == 0)),
            }
        }
        // XYZZ bytes back to a point: (x·λ², y·λ³, λ², λ³) is (x, y)
        for p in &g2[..10] {
            let lambda = Fq2::rand(&mut rng);
            let (zz, zzz) = (lambda.square(), lambda.square() * lambda);
            let mut b = vec![0u8; 4 * coord];
            for (i, c) in [p.x * zz, p.y * zzz, zz, zzz].iter().enumerate() {
                ark_bn254::g2::Config::put(c, &mut b[i * coord..(i + 1) * coord]);
            }
            let q: G2Projective = xyzz_to_projective(&b);
            assert_eq!(q.into_affine(), *p);
        }
        let q: G2Projective = xyzz_to_projective(&[0u8; 4 * 2 * FE_BYTES]);
        assert!(q.is_zero());
    }

    #[test]
    fn an_ntt_job_run_on_the_cpu_equals_arkworks() {
        use crate::ops::{MsmNtt, NttDirection, Reference};
        let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(8);
        let shift = Fr::from(7u64);
        // 2^14: the shift's powers and the twiddles span several parallel blocks
        for n in [1usize, 2, 8, 64, 1 << 14] {
            let x: Vec<Fr> = (0..n).map(|_| Fr::rand(&mut rng)).collect();
            for kind in [NttKind::Forward, NttKind::Inverse, NttKind::Coset(shift)] {
                let mut v = x.clone();
                if let Some(job) = NttJob::new(&mut v, kind).unwrap() {
                    let twiddles = job.twiddles();
                    // what the kernels do, thread by thread
                    for (half, stride) in job.stages() {
                        for k in 0..job.n / 2 {
                            let j = k % half;
                            let i0 = ((k / half) * 2 * half + j) as usize;
                            let i1 = i0 + half as usize;
                            let (u, w) = (v[i0], v[i1] * twiddles[(j * stride) as usize]);
                            v[i0] = u + w;
                            v[i1] = u - w;
                        }
                    }
                    if let Some(post) = job.post {
                        v.iter_mut().for_each(|a| *a *= post);
                    }
                }
                let mut want = x.clone();
                match kind {
                    NttKind::Forward => Reference.ntt(&mut want, NttDirection::Forward),
                    NttKind::Inverse => Reference.ntt(&mut want, NttDirection::Inverse),
                    NttKind::Coset(s) => Reference.coset_ntt(&mut want, s),
                }
                .unwrap();
                assert_eq!(v, want, "n = {n}, {kind:?}");
            }
        }
        assert!(NttJob::new(&mut [Fr::zero(); 3], NttKind::Forward).is_err());
    }
}
