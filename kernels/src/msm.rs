//! A CPU multi-scalar multiplication with batch-affine bucket accumulation, for BN254 G1
//! and G2, with optional per-key precomputation.
//!
//! Pippenger with signed window digits; within a window, points are added into affine
//! buckets in batches that share one field inversion (Montgomery's trick, serial per
//! batch; in G2 through the norm, so the shared inversion is in Fq), so an addition costs
//! about 5 multiplications and a squaring instead of the ~10 of a mixed projective
//! addition. A bucket hit twice in one batch, or a point with the bucket's x coordinate
//! (a doubling or a cancellation), goes to a projective side bucket instead. Where the CPU
//! has AVX-512 IFMA a batch's additions run eight at a time in vector lanes
//! ([`crate::ifma`], about ×2 per MSM); elsewhere in arkworks' scalar arithmetic.
//!
//! **Fixed bases.** A proving key's bases never change, so [`Shifted`] keeps `copies − 1`
//! shifted copies of them (`2^(c·R·j)·Bᵢ`): the `W` windows of a scalar then fold into
//! `R = ⌈W / copies⌉` rounds of one bucket pass each, and the bucket reduction (and the
//! window's doublings) are paid `R` times instead of `W` times, with wider windows. With
//! `copies = 1` (no table) this is the plain windowed method, which [`msm`] runs.
//!
//! Work is split over (round, bucket range) pairs on rayon, so even a single round keeps
//! every core busy. [`crate::ops::Cpu`] uses this; the arkworks MSM (the trait's default)
//! is the reference it is tested against.

use ark_bn254::{Fq, Fq2};
use ark_ec::short_weierstrass::{Affine, Projective, SWCurveConfig};
use ark_ec::{AdditiveGroup, AffineRepr, CurveGroup};
use ark_ff::{Field, PrimeField, Zero};
use rayon::prelude::*;

/// Below this many points the arkworks MSM is used (the batching does not pay off).
const SMALL: usize = 64;
/// Additions gathered before one shared inversion.
const BATCH: usize = 512;
/// The cost of reducing one bucket (a mixed and a full projective addition), in
/// batch-affine additions, for choosing the window: measured, the cache misses of the
/// bucket updates make the batch-affine addition dearer than its multiplication count.
const REDUCE_COST: usize = 2;

/// A base field whose elements can be inverted many at once, serially (the MSM calls it
/// from inside its own parallel tasks, so it must not fan out again).
pub trait BatchInvert: Field {
    /// Buffers reused across calls.
    type Scratch: Default + Send;
    /// Replaces every element of `v` (all non-zero) by its inverse.
    fn invert_all(v: &mut [Self], scratch: &mut Self::Scratch);
    /// `acc[b] += p` for each `(b, p)` (distinct buckets, finite points, different x)
    /// in vector lanes, where this CPU has them; `false`: nothing done, the caller adds.
    fn add_chords<P: SWCurveConfig<BaseField = Self>>(
        _acc: &mut [Affine<P>],
        _pairs: &[(u32, Affine<P>)],
        _scratch: &mut Self::Scratch,
    ) -> bool {
        false
    }
}

/// The vector lanes' buffers, where there are vector lanes.
#[cfg(target_arch = "x86_64")]
type LaneScratch = crate::ifma::Scratch;
#[cfg(not(target_arch = "x86_64"))]
type LaneScratch = ();

/// Montgomery's trick over a prime field: three multiplications per element and one
/// inversion.
pub(crate) fn montgomery_invert<F: Field>(v: &mut [F], prefix: &mut Vec<F>) {
    prefix.clear();
    let mut acc = F::one();
    for x in v.iter() {
        prefix.push(acc);
        acc *= x;
    }
    let Some(mut inv) = acc.inverse() else {
        // A zero among them (the MSM never passes one): invert one by one, zero to zero.
        for x in v.iter_mut() {
            *x = x.inverse().unwrap_or_default();
        }
        return;
    };
    for (x, p) in v.iter_mut().zip(prefix.iter()).rev() {
        let orig = *x;
        *x = inv * p;
        inv *= orig;
    }
}

impl BatchInvert for Fq {
    /// The prefix products, and the vector lanes' buffers.
    type Scratch = (Vec<Fq>, LaneScratch);
    fn invert_all(v: &mut [Fq], (prefix, _): &mut Self::Scratch) {
        montgomery_invert(v, prefix);
    }
    #[cfg(target_arch = "x86_64")]
    fn add_chords<P: SWCurveConfig<BaseField = Fq>>(
        acc: &mut [Affine<P>],
        pairs: &[(u32, Affine<P>)],
        (_, lanes): &mut Self::Scratch,
    ) -> bool {
        crate::ifma::add_chords::<crate::ifma::Fq8, P>(acc, pairs, &mut lanes.g1)
    }
}

impl BatchInvert for Fq2 {
    /// The norms and the prefix products, in Fq, and the vector lanes' buffers.
    type Scratch = (Vec<Fq>, Vec<Fq>, LaneScratch);
    /// `z⁻¹ = z̄ / N(z)` with `N(z) = z₀² + z₁²` in Fq: the shared inversion and its
    /// prefix products run in Fq, then two Fq multiplications per element.
    fn invert_all(v: &mut [Fq2], (norms, prefix, _): &mut Self::Scratch) {
        norms.clear();
        norms.extend(v.iter().map(|z| z.norm()));
        montgomery_invert(norms, prefix);
        for (z, n) in v.iter_mut().zip(norms.iter()) {
            z.conjugate_in_place();
            z.mul_assign_by_basefield(n);
        }
    }
    #[cfg(target_arch = "x86_64")]
    fn add_chords<P: SWCurveConfig<BaseField = Fq2>>(
        acc: &mut [Affine<P>],
        pairs: &[(u32, Affine<P>)],
        (_, _, lanes): &mut Self::Scratch,
    ) -> bool {
        crate::ifma::add_chords::<crate::ifma::Fq2x8, P>(acc, pairs, &mut lanes.g2)
    }
}

/// How an MSM over `n` bases is cut: window width `c`, the scalar's `windows` signed
/// digits, the `copies` of the bases (1: the bases alone) and the `rounds` of bucket
/// passes (`⌈windows / copies⌉`), each followed by `c` doublings per round but the last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Window width in bits.
    pub c: usize,
    /// Signed digits per scalar.
    pub windows: usize,
    /// Copies of the bases used (the bases themselves and `copies − 1` shifted ones).
    pub copies: usize,
    /// Bucket passes.
    pub rounds: usize,
}

impl Plan {
    /// The cheapest plan for `n` points with at most `max_copies` copies of the bases:
    /// `W·n` additions plus `R·2^(c−1)` bucket reductions, minimised over `c`; of equal
    /// rounds, the fewest copies.
    #[must_use]
    pub fn new(n: usize, bits: usize, max_copies: usize) -> Plan {
        let max_copies = max_copies.max(1);
        let plan_for = |c: usize| {
            let windows = (bits + 1).div_ceil(c);
            let rounds = windows.div_ceil(max_copies.min(windows));
            let plan = Plan {
                c,
                windows,
                copies: windows.div_ceil(rounds),
                rounds,
            };
            (windows * n + rounds * (REDUCE_COST << (c - 1)), plan)
        };
        // the first of the cheapest
        (5..=20)
            .map(plan_for)
            .fold(plan_for(4), |best, p| if p.0 < best.0 { p } else { best })
            .1
    }

    /// The window of round `r` that copy `j` covers, if any.
    fn window(&self, r: usize, j: usize) -> Option<usize> {
        let w = r + self.rounds * j;
        (w < self.windows).then_some(w)
    }
}

/// A proving key's bases with `copies − 1` shifted copies kept beside them:
/// `table[(j − 1)·n + i] = 2^(c·R·j)·bases[i]` for `j = 1..copies` (see the module docs).
/// Build one per fixed base vector with [`Shifted::new`], pass it with the same bases to
/// [`msm_shifted`].
pub struct Shifted<P: SWCurveConfig> {
    n: usize,
    /// The first and last base they were made from: copies offered with other bases
    /// (another key's of the same size) are not used.
    ends: Option<(Affine<P>, Affine<P>)>,
    plan: Plan,
    table: Vec<Affine<P>>,
}

impl<P: SWCurveConfig> std::fmt::Debug for Shifted<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shifted")
            .field("n", &self.n)
            .field("plan", &self.plan)
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl<P: SWCurveConfig> Shifted<P> {
    /// The bytes one shifted copy of `n` bases takes.
    #[must_use]
    pub fn bytes_per_copy(n: usize) -> usize {
        n * std::mem::size_of::<Affine<P>>()
    }

    /// Precomputes at most `max_copies − 1` shifted copies of `bases` (fewer when the
    /// plan needs fewer): about `c·R` doublings per base and copy, on all cores.
    #[must_use]
    pub fn new(bases: &[Affine<P>], max_copies: usize) -> Shifted<P> {
        let n = bases.len();
        let bits = P::ScalarField::MODULUS_BIT_SIZE as usize;
        let plan = if n < SMALL {
            Plan::new(n, bits, 1)
        } else {
            Plan::new(n, bits, max_copies)
        };
        let shift = plan.c * plan.rounds;
        let mut table = Vec::with_capacity((plan.copies - 1) * n);
        let mut prev: &[Affine<P>] = bases;
        for _ in 1..plan.copies {
            let next: Vec<Projective<P>> = prev
                .par_iter()
                .map(|b| {
                    let mut p = Projective::<P>::from(*b);
                    for _ in 0..shift {
                        p.double_in_place();
                    }
                    p
                })
                .collect();
            table.extend(Projective::<P>::normalize_batch(&next));
            prev = &table[table.len() - n..];
        }
        let ends = bases.first().zip(bases.last()).map(|(f, l)| (*f, *l));
        Shifted {
            n,
            ends,
            plan,
            table,
        }
    }

    /// The bytes the shifted copies take.
    #[must_use]
    pub fn bytes(&self) -> usize {
        Self::bytes_per_copy(self.table.len())
    }

    /// The plan the copies were made for.
    #[must_use]
    pub fn plan(&self) -> Plan {
        self.plan
    }

    /// The number of bases the copies were made from.
    #[must_use]
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether there were no bases.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
}

/// Bits `[start, start + len)` of a little-endian limb array (len ≤ 32).
fn bits(limbs: &[u64], start: usize, len: usize) -> u32 {
    let (limb, shift) = (start / 64, start % 64);
    if limb >= limbs.len() {
        return 0;
    }
    let mut v = limbs[limb] >> shift;
    if shift + len > 64 && limb + 1 < limbs.len() {
        v |= limbs[limb + 1] << (64 - shift);
    }
    (v & ((1u64 << len) - 1)) as u32
}

/// Scalars per block of [`Digits`].
const DIGIT_BLOCK: usize = 1024;

/// Signed window digits of many scalars, in `[-2^(c-1), 2^(c-1)]`, laid out in blocks of
/// [`DIGIT_BLOCK`] scalars, window-major within a block: a window's column reads
/// contiguously, and blocks fill in parallel.
pub(crate) struct Digits {
    d: Vec<i32>,
    n: usize,
    windows: usize,
}

impl Digits {
    /// Every scalar's `windows` digits of `c` bits.
    pub(crate) fn new<F: PrimeField>(scalars: &[F], c: usize, windows: usize) -> Digits {
        let mut d = vec![0i32; windows * scalars.len()];
        d.par_chunks_mut((windows * DIGIT_BLOCK).max(1))
            .zip(scalars.par_chunks(DIGIT_BLOCK))
            .for_each(|(out, block)| {
                let len = block.len();
                for (i, s) in block.iter().enumerate() {
                    let b = s.into_bigint();
                    let limbs = b.as_ref();
                    let mut carry = 0i64;
                    for w in 0..windows {
                        let v = i64::from(bits(limbs, w * c, c)) + carry;
                        out[w * len + i] = if v >= 1 << (c - 1) {
                            carry = 1;
                            (v - (1 << c)) as i32
                        } else {
                            carry = 0;
                            v as i32
                        };
                    }
                    debug_assert_eq!(carry, 0);
                }
            });
        Digits {
            d,
            n: scalars.len(),
            windows,
        }
    }

    /// Window `w`'s digit of every scalar, in scalar order.
    pub(crate) fn column(&self, w: usize) -> impl Iterator<Item = i32> + '_ {
        (0..self.n).step_by(DIGIT_BLOCK).flat_map(move |start| {
            let len = DIGIT_BLOCK.min(self.n - start);
            let at = start * self.windows + w * len;
            self.d[at..at + len].iter().copied()
        })
    }
}

/// `acc[b] += p` for each `(b, p)` (distinct buckets, finite points, different x) in
/// arkworks' arithmetic, sharing one inversion: where there are no vector lanes.
fn add_chords_scalar<P: SWCurveConfig>(
    acc: &mut [Affine<P>],
    pairs: &[(u32, Affine<P>)],
    dx: &mut Vec<P::BaseField>,
    scratch: &mut <P::BaseField as BatchInvert>::Scratch,
) where
    P::BaseField: BatchInvert,
{
    dx.clear();
    dx.extend(pairs.iter().map(|(b, p)| p.x - acc[*b as usize].x));
    P::BaseField::invert_all(dx, scratch);
    for ((b, p), inv) in pairs.iter().zip(dx.iter()) {
        let q = &mut acc[*b as usize];
        let lambda = (p.y - q.y) * inv;
        let x3 = lambda.square() - q.x - p.x;
        let y3 = lambda * (q.x - x3) - q.y;
        *q = Affine::new_unchecked(x3, y3);
    }
}

/// Affine buckets `[lo, lo + len)` of one bucket pass, with their projective side
/// buckets and the batch of pending additions.
struct Buckets<P: SWCurveConfig>
where
    P::BaseField: BatchInvert,
{
    lo: usize,
    acc: Vec<Affine<P>>,
    /// Points that could not join a batch (their bucket was pending, or a doubling or
    /// cancellation), with their bucket: rare, so kept as a list.
    side: Vec<(u32, Affine<P>)>,
    pending: Vec<bool>,
    pairs: Vec<(u32, Affine<P>)>,
    dx: Vec<P::BaseField>,
    scratch: <P::BaseField as BatchInvert>::Scratch,
}

impl<P: SWCurveConfig> Buckets<P>
where
    P::BaseField: BatchInvert,
{
    fn new(lo: usize, len: usize) -> Self {
        Buckets {
            lo,
            acc: vec![Affine::<P>::identity(); len],
            side: Vec::new(),
            pending: vec![false; len],
            pairs: Vec::with_capacity(BATCH),
            dx: Vec::with_capacity(BATCH),
            scratch: Default::default(),
        }
    }

    /// Adds `digit · base` if the digit's bucket is in this range.
    #[inline]
    fn add(&mut self, base: &Affine<P>, digit: i32) {
        if digit == 0 {
            return;
        }
        let b = (digit.unsigned_abs() - 1) as usize;
        let Some(b) = b.checked_sub(self.lo).filter(|b| *b < self.acc.len()) else {
            return;
        };
        if base.is_zero() {
            return;
        }
        let p = if digit < 0 { -*base } else { *base };
        if self.pending[b] || (self.acc[b].x == p.x && !self.acc[b].is_zero()) {
            // the bucket waits in this batch, or a doubling or cancellation (not a chord)
            self.side.push((b as u32, p));
        } else if self.acc[b].is_zero() {
            self.acc[b] = p;
        } else {
            self.pending[b] = true;
            self.pairs.push((b as u32, p));
            if self.pairs.len() == BATCH {
                self.flush();
            }
        }
    }

    /// Applies the pending additions with one shared inversion.
    fn flush(&mut self) {
        if !P::BaseField::add_chords(&mut self.acc, &self.pairs, &mut self.scratch) {
            add_chords_scalar(&mut self.acc, &self.pairs, &mut self.dx, &mut self.scratch);
        }
        for (b, _) in &self.pairs {
            self.pending[*b as usize] = false;
        }
        self.pairs.clear();
    }

    /// `Σ (b + 1)·bucket_b` over the range: running sums from the top bucket down give
    /// `Σ (b − lo + 1)·bucket_b`; `lo·Σ bucket_b` is added once.
    fn sum(mut self) -> Projective<P> {
        self.flush();
        self.side.sort_unstable_by_key(|(b, _)| *b);
        let mut side = self.side.iter().rev().peekable();
        let mut running = Projective::<P>::zero();
        let mut sum = Projective::<P>::zero();
        for (b, a) in self.acc.iter().enumerate().rev() {
            while let Some((_, p)) = side.next_if(|(sb, _)| *sb as usize == b) {
                running += p;
            }
            running += a;
            sum += running;
        }
        if self.lo > 0 {
            sum += running * P::ScalarField::from(self.lo as u64);
        }
        sum
    }
}

/// `Σ scalars[i] · bases[i]`. Lengths must be equal (the caller checks).
pub fn msm<P: SWCurveConfig>(bases: &[Affine<P>], scalars: &[P::ScalarField]) -> Projective<P>
where
    P::BaseField: BatchInvert,
{
    let bits = P::ScalarField::MODULUS_BIT_SIZE as usize;
    run(bases, &[], Plan::new(bases.len(), bits, 1), scalars)
}

/// `Σ scalars[i] · bases[i]` with the shifted copies of `bases` made by [`Shifted::new`]
/// from these same bases. Lengths must be equal (the caller checks); a `shifted` made
/// from other bases (another count, or other first or last base) is ignored and the
/// plain method runs.
pub fn msm_shifted<P: SWCurveConfig>(
    bases: &[Affine<P>],
    shifted: &Shifted<P>,
    scalars: &[P::ScalarField],
) -> Projective<P>
where
    P::BaseField: BatchInvert,
{
    let ends = bases.first().zip(bases.last()).map(|(f, l)| (*f, *l));
    if shifted.n != bases.len() || shifted.ends != ends {
        return msm(bases, scalars);
    }
    run(bases, &shifted.table, shifted.plan, scalars)
}

fn run<P: SWCurveConfig>(
    bases: &[Affine<P>],
    table: &[Affine<P>],
    plan: Plan,
    scalars: &[P::ScalarField],
) -> Projective<P>
where
    P::BaseField: BatchInvert,
{
    use ark_ec::VariableBaseMSM;
    debug_assert_eq!(bases.len(), scalars.len());
    let n = bases.len().min(scalars.len());
    if n < SMALL {
        return Projective::<P>::msm_unchecked(&bases[..n], &scalars[..n]);
    }
    let digits = Digits::new(&scalars[..n], plan.c, plan.windows);
    let copy = |j: usize| -> &[Affine<P>] {
        if j == 0 {
            &bases[..n]
        } else {
            &table[(j - 1) * n..j * n]
        }
    };
    // Enough bucket ranges per round that every core has work, a few to balance.
    let buckets = 1usize << (plan.c - 1);
    let ranges = rayon::current_num_threads()
        .div_ceil(plan.rounds)
        .clamp(1, buckets);
    let width = buckets.div_ceil(ranges);
    let tasks: Vec<(usize, usize)> = (0..plan.rounds)
        .flat_map(|r| (0..buckets).step_by(width).map(move |lo| (r, lo)))
        .collect();
    let partial: Vec<(usize, Projective<P>)> = tasks
        .into_par_iter()
        .map(|(r, lo)| {
            let mut b = Buckets::<P>::new(lo, width.min(buckets - lo));
            for j in 0..plan.copies {
                let Some(w) = plan.window(r, j) else { break };
                for (base, d) in copy(j).iter().zip(digits.column(w)) {
                    b.add(base, d);
                }
            }
            (r, b.sum())
        })
        .collect();
    let mut sums = vec![Projective::<P>::zero(); plan.rounds];
    for (r, s) in partial {
        sums[r] += s;
    }
    horner(plan.c, &sums)
}

/// Σ 2^(c·w) · sums[w]: the windows' sums combined from the top, doubling `c` times
/// between windows.
pub(crate) fn horner<P: SWCurveConfig>(c: usize, sums: &[Projective<P>]) -> Projective<P> {
    let mut total = Projective::<P>::zero();
    for s in sums.iter().rev() {
        for _ in 0..c {
            total.double_in_place();
        }
        total += s;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use ark_bn254::{Fr, G1Affine, G1Projective, G2Affine, G2Projective};
    use ark_ec::{PrimeGroup, VariableBaseMSM};
    use ark_ff::UniformRand;
    use ark_std::rand::SeedableRng;
    use ark_std::rand::rngs::StdRng;

    fn check<P: SWCurveConfig>(bases: &[Affine<P>], scalars: &[P::ScalarField])
    where
        P::BaseField: BatchInvert,
    {
        let reference = Projective::<P>::msm_unchecked(bases, scalars);
        assert_eq!(msm(bases, scalars), reference, "n = {}", bases.len());
        for copies in [2, 3, 7, usize::MAX] {
            let shifted = Shifted::new(bases, copies);
            assert!(shifted.plan().copies <= copies);
            assert_eq!(
                shifted.bytes(),
                Shifted::<P>::bytes_per_copy(bases.len()) * (shifted.plan().copies - 1)
            );
            assert_eq!(
                msm_shifted(bases, &shifted, scalars),
                reference,
                "n = {}, {:?}",
                bases.len(),
                shifted.plan()
            );
        }
    }

    #[test]
    fn digits_recompose_to_the_scalar() {
        let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(1);
        // more than one block, and a short last one
        let s: Vec<Fr> = (0..DIGIT_BLOCK + 50)
            .map(|_| Fr::rand(&mut rng))
            .chain([-Fr::from(1u64), Fr::from(0u64)])
            .collect();
        for c in [4, 7, 13, 16] {
            let windows = 255usize.div_ceil(c);
            let d = Digits::new(&s, c, windows);
            let columns: Vec<Vec<i32>> = (0..windows).map(|w| d.column(w).collect()).collect();
            for (i, x) in s.iter().enumerate() {
                let mut acc = Fr::from(0u64);
                for column in columns.iter().rev() {
                    acc *= Fr::from(1u64 << c);
                    let v = column[i];
                    acc += if v < 0 {
                        -Fr::from(v.unsigned_abs())
                    } else {
                        Fr::from(v as u32)
                    };
                    assert!(v.unsigned_abs() <= 1 << (c - 1));
                }
                assert_eq!(acc, *x, "c = {c}");
            }
        }
    }

    #[test]
    fn batch_inversion_in_fq_and_fq2() {
        let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(3);
        let v: Vec<Fq> = (0..100).map(|_| Fq::rand(&mut rng)).collect();
        let mut w = v.clone();
        Fq::invert_all(&mut w, &mut Default::default());
        assert!(v.iter().zip(&w).all(|(a, b)| *a * b == Fq::from(1u64)));
        let v: Vec<Fq2> = (0..100).map(|_| Fq2::rand(&mut rng)).collect();
        let mut w = v.clone();
        Fq2::invert_all(&mut w, &mut Default::default());
        assert!(v.iter().zip(&w).all(|(a, b)| *a * b == Fq2::from(1u64)));
        // a zero (which the MSM never passes) does not spoil the others
        let mut w = vec![Fq::from(2u64), Fq::from(0u64), Fq::from(4u64)];
        Fq::invert_all(&mut w, &mut Default::default());
        assert_eq!(w[0] * Fq::from(2u64), Fq::from(1u64));
        assert_eq!(w[1], Fq::from(0u64));
    }

    #[test]
    fn plans_fold_windows_into_rounds() {
        for (n, copies) in [(1 << 10, 1), (1 << 16, 1), (1 << 16, 4), (1 << 16, 100)] {
            let p = Plan::new(n, 254, copies);
            assert!(p.c * p.windows > 254, "{p:?}");
            assert!(
                p.copies <= copies && p.copies * p.rounds >= p.windows,
                "{p:?}"
            );
            assert_eq!(p.rounds, p.windows.div_ceil(p.copies), "{p:?}");
        }
        // more copies never mean more rounds
        let rounds: Vec<usize> = (1..20).map(|m| Plan::new(1 << 16, 254, m).rounds).collect();
        assert!(rounds.windows(2).all(|r| r[1] <= r[0]), "{rounds:?}");
    }

    #[test]
    fn matches_arkworks_on_g1_and_g2_including_edge_cases() {
        let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(7);
        for n in [0usize, 1, 63, 64, 100, 1000, 3000] {
            let mut bases: Vec<G1Affine> = (0..n)
                .map(|_| (G1Projective::generator() * Fr::rand(&mut rng)).into_affine())
                .collect();
            let mut scalars: Vec<Fr> = (0..n).map(|_| Fr::rand(&mut rng)).collect();
            if n >= 100 {
                // repeated and opposite points (doubling and cancellation in a bucket),
                // the point at infinity, zero and -1 scalars, small scalars
                for i in 0..20 {
                    bases[i + 20] = bases[i];
                    scalars[i + 20] = scalars[i];
                    bases[i + 40] = -bases[i];
                    scalars[i + 40] = scalars[i];
                }
                bases[60] = G1Affine::identity();
                scalars[61] = Fr::from(0u64);
                scalars[62] = -Fr::from(1u64);
                for s in scalars.iter_mut().skip(70).take(20) {
                    *s = Fr::from(3u64);
                }
            }
            check(&bases, &scalars);
        }
        // every base the same point: every bucket addition is a doubling
        let g = G1Projective::generator().into_affine();
        let scalars: Vec<Fr> = (0..300).map(|_| Fr::rand(&mut rng)).collect();
        check(&vec![g; 300], &scalars);
        for n in [70usize, 700] {
            let bases: Vec<G2Affine> = (0..n)
                .map(|_| (G2Projective::generator() * Fr::rand(&mut rng)).into_affine())
                .collect();
            let scalars: Vec<Fr> = (0..n).map(|_| Fr::rand(&mut rng)).collect();
            check(&bases, &scalars);
        }
    }

    /// The chord additions of one batch, scalar and (where the CPU has them) in vector
    /// lanes, against arkworks' projective addition; batch lengths around the lane width.
    fn chords_equal_arkworks<P: SWCurveConfig>(rng: &mut StdRng)
    where
        P::BaseField: BatchInvert,
    {
        for n in [1usize, 7, 8, 9, 64, 517] {
            let point = |rng: &mut StdRng| {
                (Projective::<P>::generator() * P::ScalarField::rand(rng)).into_affine()
            };
            let acc: Vec<Affine<P>> = (0..n + 3).map(|_| point(rng)).collect();
            // every other bucket, backwards: the batch need not be in bucket order
            let pairs: Vec<(u32, Affine<P>)> =
                (0..n).rev().map(|i| ((i + 3) as u32, point(rng))).collect();
            let mut want = acc.clone();
            for (b, p) in &pairs {
                want[*b as usize] = (want[*b as usize] + p).into_affine();
            }
            let mut scratch = Default::default();
            let mut scalar = acc.clone();
            add_chords_scalar(&mut scalar, &pairs, &mut Vec::new(), &mut scratch);
            assert_eq!(scalar, want, "scalar, n = {n}");
            let mut lanes = acc.clone();
            if P::BaseField::add_chords(&mut lanes, &pairs, &mut scratch) {
                assert_eq!(lanes, want, "vector lanes, n = {n}");
            } else {
                eprintln!("SKIPPED: no vector lanes on this CPU (the scalar path was checked)");
            }
        }
    }

    #[test]
    fn chord_additions_scalar_and_in_lanes() {
        let mut rng = StdRng::seed_from_u64(12);
        chords_equal_arkworks::<ark_bn254::g1::Config>(&mut rng);
        chords_equal_arkworks::<ark_bn254::g2::Config>(&mut rng);
    }

    #[test]
    fn shifted_copies_for_other_bases_are_not_used() {
        let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(9);
        let bases: Vec<G1Affine> = (0..101)
            .map(|_| (G1Projective::generator() * Fr::rand(&mut rng)).into_affine())
            .collect();
        let scalars: Vec<Fr> = (0..100).map(|_| Fr::rand(&mut rng)).collect();
        let shifted = Shifted::new(&bases[..100], 4);
        assert!(shifted.bytes() > 0);
        // the bases themselves; fewer; as many but moved by one (another first and last)
        for other in [&bases[..100], &bases[..99], &bases[1..101]] {
            let s = &scalars[..other.len()];
            assert_eq!(
                msm_shifted(other, &shifted, s),
                G1Projective::msm_unchecked(other, s)
            );
        }
    }
}
