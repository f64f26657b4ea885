//! The batch-affine chord additions of the CPU MSM, eight at a time, with AVX-512 IFMA
//! (52-bit multiply-accumulate in eight 64-bit lanes), for BN254 G1 (Fq) and G2 (Fq2).
//!
//! [`crate::msm`] calls `add_chords` for each batch of pending bucket additions; it
//! returns `false` where this CPU lacks `avx512f` and `avx512ifma` (detected at run time:
//! never an illegal instruction) or where [`set_enabled`] turned the lanes off, and the
//! MSM then runs its scalar arkworks code.
//!
//! **Representation.** An element is five 52-bit limbs, one element per lane
//! (`Fq8`; `Fq2x8` is two of them). The integer held is the one arkworks holds —
//! its Montgomery form `x·2²⁵⁶ mod p` — so loading and storing change only the radix.
//! A product is the Montgomery product with `R = 2²⁶⁰` (five 52-bit reduction steps) of
//! `a` and `16·b`, which is `a·b·2⁻²⁵⁶`: arkworks' product. Between operations values
//! stay below `2p` (for `a, b < 2p`: `a·16b/2²⁶⁰ + p < 2p` because `64p < 2²⁶⁰`); sums
//! and differences are brought back below `2p` by one conditional subtraction; stores
//! reduce below `p`.
//!
//! On this project's machines (AMD Zen 4) one lane-product costs ~4.2 ns against ~20 ns
//! for arkworks' scalar multiplication.
#![allow(unsafe_code)]

use ark_bn254::{Fq, Fq2, FqConfig, FrConfig};
use ark_ec::short_weierstrass::{Affine, SWCurveConfig};
use ark_ff::{AdditiveGroup, BigInt, Field, Fp256, MontBackend, MontConfig};
use std::arch::x86_64::*;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};

const M52: u64 = (1 << 52) - 1;

/// The constants of a prime field's lanes, from its arkworks configuration (BN254's Fq
/// and Fr: both primes are below 2²⁵⁴, so the bounds below hold for either).
pub(crate) trait Modulus: MontConfig<4> {
    const P: [u64; 4] = <Self as MontConfig<4>>::MODULUS.0;
    const P52: [u64; 5] = to52(Self::P);
    const P2_52: [u64; 5] = to52(double(Self::P));
    /// `−p⁻¹ mod 2⁵²`.
    const PINV52: u64 = pinv52(Self::P[0]);
}

impl Modulus for FqConfig {}
impl Modulus for FrConfig {}

const fn double(p: [u64; 4]) -> [u64; 4] {
    [
        p[0] << 1,
        (p[1] << 1) | (p[0] >> 63),
        (p[2] << 1) | (p[1] >> 63),
        (p[3] << 1) | (p[2] >> 63),
    ]
}

const fn pinv52(p0: u64) -> u64 {
    // Newton's iteration doubles the correct low bits each step: 2^6 ≥ 64.
    let mut inv = 1u64;
    let mut i = 0;
    while i < 6 {
        inv = inv.wrapping_mul(2u64.wrapping_sub(p0.wrapping_mul(inv)));
        i += 1;
    }
    inv.wrapping_neg() & M52
}

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns the vector path off (or back on) for the whole process: for measuring what it
/// buys. It is on by default wherever the CPU has it.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether the MSM's chord additions run in AVX-512 IFMA lanes on this CPU now.
pub fn active() -> bool {
    ENABLED.load(Ordering::Relaxed)
        && std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512ifma")
}

/// For tests: whether the lanes can be tested on this CPU (saying so when not).
#[cfg(test)]
pub(crate) fn testable() -> bool {
    let on = active();
    if !on {
        eprintln!("SKIPPED: this CPU has no AVX-512 IFMA");
    }
    on
}

const fn to52(x: [u64; 4]) -> [u64; 5] {
    [
        x[0] & M52,
        ((x[0] >> 52) | (x[1] << 12)) & M52,
        ((x[1] >> 40) | (x[2] << 24)) & M52,
        ((x[2] >> 28) | (x[3] << 36)) & M52,
        x[3] >> 16,
    ]
}

const fn from52(l: [u64; 5]) -> [u64; 4] {
    [
        l[0] | (l[1] << 52),
        (l[1] >> 12) | (l[2] << 40),
        (l[2] >> 24) | (l[3] << 28),
        (l[3] >> 36) | (l[4] << 16),
    ]
}

/// `x − p` if that does not borrow, else `x` (for `x < 2p`).
fn reduce_once<M: Modulus>(x: [u64; 4]) -> [u64; 4] {
    let mut s = [0u64; 4];
    let mut borrow = false;
    for i in 0..4 {
        let (d, b1) = x[i].overflowing_sub(M::P[i]);
        let (d, b2) = d.overflowing_sub(borrow as u64);
        s[i] = d;
        borrow = b1 | b2;
    }
    if borrow { x } else { s }
}

/// Eight elements of a field in AVX-512 lanes (methods need `avx512f` and `avx512ifma`).
pub(crate) trait Lanes: Copy {
    type Scalar: Field;
    unsafe fn load(xs: &[Self::Scalar; 8]) -> Self;
    unsafe fn store(self) -> [Self::Scalar; 8];
    unsafe fn add(self, o: Self) -> Self;
    unsafe fn sub(self, o: Self) -> Self;
    unsafe fn mul(self, o: Self) -> Self;
    unsafe fn square(self) -> Self;
}

/// Lanes of Fq or Fq2, which the MSM's shared inversion handles through the norm.
pub(crate) trait Inverse: Lanes {
    /// The norm down to Fq (the element itself in Fq), for the shared inversion.
    unsafe fn norm(self) -> Fq8;
    /// `self⁻¹` given `norm(self)⁻¹`.
    unsafe fn inverse_from_norm(self, n_inv: Fq8) -> Self;
}

/// Eight elements of the prime field of `M`, five 52-bit limbs each, below `2p`.
pub(crate) struct L8<M>([__m512i; 5], PhantomData<M>);

impl<M> Clone for L8<M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M> Copy for L8<M> {}

/// Eight Fq elements.
pub(crate) type Fq8 = L8<FqConfig>;
/// Eight Fr elements.
pub(crate) type Fr8 = L8<FrConfig>;

impl<M> L8<M> {
    fn new(limbs: [__m512i; 5]) -> L8<M> {
        L8(limbs, PhantomData)
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn splat(x: u64) -> __m512i {
    _mm512_set1_epi64(x as i64)
}

/// Carries (and borrows: the shift is arithmetic) into the next limb.
#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn normalize(t: &mut [__m512i; 5]) {
    let mask = splat(M52);
    for j in 0..4 {
        let c = _mm512_srai_epi64(t[j], 52);
        t[j] = _mm512_and_si512(t[j], mask);
        t[j + 1] = _mm512_add_epi64(t[j + 1], c);
    }
}

/// `t − 2p` where that is not negative, else `t` (normalized `t < 4p`).
#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn reduce_2p<M: Modulus>(t: [__m512i; 5]) -> [__m512i; 5] {
    let mut s: [__m512i; 5] = core::array::from_fn(|j| _mm512_sub_epi64(t[j], splat(M::P2_52[j])));
    normalize(&mut s);
    let negative = _mm512_cmplt_epi64_mask(s[4], _mm512_setzero_si512());
    core::array::from_fn(|j| _mm512_mask_blend_epi64(negative, s[j], t[j]))
}

/// The Montgomery product `a·b·2⁻²⁶⁰` (`a < 2p`, `b < 32p`), below `2p`, normalized.
#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn mont<M: Modulus>(a: &[__m512i; 5], b: &[__m512i; 5]) -> [__m512i; 5] {
    let z = _mm512_setzero_si512();
    let pinv = splat(M::PINV52);
    let p: [__m512i; 5] = core::array::from_fn(|j| splat(M::P52[j]));
    let mut t = [z; 6];
    for bi in b {
        for j in 0..5 {
            t[j] = _mm512_madd52lo_epu64(t[j], a[j], *bi);
            t[j + 1] = _mm512_madd52hi_epu64(t[j + 1], a[j], *bi);
        }
        // the multiplier that clears the low 52 bits (madd52 reads 52 bits of t₀)
        let m = _mm512_madd52lo_epu64(z, t[0], pinv);
        for j in 0..5 {
            t[j] = _mm512_madd52lo_epu64(t[j], m, p[j]);
            t[j + 1] = _mm512_madd52hi_epu64(t[j + 1], m, p[j]);
        }
        let carry = _mm512_srli_epi64(t[0], 52);
        t = [_mm512_add_epi64(t[1], carry), t[2], t[3], t[4], t[5], z];
    }
    let mut r = [t[0], t[1], t[2], t[3], t[4]];
    normalize(&mut r);
    r
}

/// `16·b`, re-cut into 52-bit limbs (`b < 2p`, so `16b < 2²⁵⁹`).
#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn times16(b: &[__m512i; 5]) -> [__m512i; 5] {
    let mask = splat(M52);
    core::array::from_fn(|j| {
        let low = _mm512_and_si512(_mm512_slli_epi64(b[j], 4), mask);
        if j == 0 {
            low
        } else {
            _mm512_or_si512(low, _mm512_srli_epi64(b[j - 1], 48))
        }
    })
}

impl<M: Modulus> Lanes for L8<M> {
    type Scalar = Fp256<MontBackend<M, 4>>;

    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    unsafe fn load(xs: &[Self::Scalar; 8]) -> L8<M> {
        let mut l = [[0u64; 8]; 5];
        for (k, x) in xs.iter().enumerate() {
            let v = to52(x.0.0);
            for j in 0..5 {
                l[j][k] = v[j];
            }
        }
        // SAFETY: each row is eight u64, 64 bytes; unaligned loads.
        L8::new(core::array::from_fn(|j| unsafe {
            _mm512_loadu_si512(l[j].as_ptr() as *const __m512i)
        }))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    unsafe fn store(self) -> [Self::Scalar; 8] {
        let mut l = [[0u64; 8]; 5];
        for (row, limb) in l.iter_mut().zip(self.0) {
            // SAFETY: each row is eight u64, 64 bytes; unaligned stores.
            unsafe { _mm512_storeu_si512(row.as_mut_ptr() as *mut __m512i, limb) };
        }
        core::array::from_fn(|k| {
            let x = reduce_once::<M>(from52(core::array::from_fn(|j| l[j][k])));
            Fp256::new_unchecked(BigInt(x))
        })
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    unsafe fn add(self, o: L8<M>) -> L8<M> {
        let mut t: [__m512i; 5] = core::array::from_fn(|j| _mm512_add_epi64(self.0[j], o.0[j]));
        normalize(&mut t);
        L8::new(reduce_2p::<M>(t))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    unsafe fn sub(self, o: L8<M>) -> L8<M> {
        // a + 2p − b: positive, below 4p
        let mut t: [__m512i; 5] = core::array::from_fn(|j| {
            _mm512_sub_epi64(_mm512_add_epi64(self.0[j], splat(M::P2_52[j])), o.0[j])
        });
        normalize(&mut t);
        L8::new(reduce_2p::<M>(t))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    unsafe fn mul(self, o: L8<M>) -> L8<M> {
        L8::new(mont::<M>(&self.0, &times16(&o.0)))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    unsafe fn square(self) -> L8<M> {
        L8::new(mont::<M>(&self.0, &times16(&self.0)))
    }
}

impl Inverse for Fq8 {
    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    unsafe fn norm(self) -> Fq8 {
        self
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    unsafe fn inverse_from_norm(self, n_inv: Fq8) -> Fq8 {
        n_inv
    }
}

impl<M> L8<M> {
    /// The lanes reordered: lane `k` takes lane `idx[k]`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    pub(crate) fn permute(self, idx: __m512i) -> L8<M> {
        L8::new(self.0.map(|l| _mm512_permutexvar_epi64(idx, l)))
    }

    /// `a` in the lanes set in `mask`, `self` in the others.
    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    pub(crate) fn blend(self, mask: __mmask8, a: L8<M>) -> L8<M> {
        L8::new(core::array::from_fn(|j| {
            _mm512_mask_blend_epi64(mask, self.0[j], a.0[j])
        }))
    }
}

/// Eight Fq2 elements `c₀ + c₁·u` (`u² = −1`).
#[derive(Clone, Copy)]
pub(crate) struct Fq2x8(pub(crate) Fq8, pub(crate) Fq8);

impl Lanes for Fq2x8 {
    type Scalar = Fq2;

    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    unsafe fn load(xs: &[Fq2; 8]) -> Fq2x8 {
        unsafe { Fq2x8(Fq8::load(&xs.map(|x| x.c0)), Fq8::load(&xs.map(|x| x.c1))) }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    unsafe fn store(self) -> [Fq2; 8] {
        let (c0, c1) = unsafe { (self.0.store(), self.1.store()) };
        core::array::from_fn(|k| Fq2::new(c0[k], c1[k]))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    unsafe fn add(self, o: Fq2x8) -> Fq2x8 {
        unsafe { Fq2x8(self.0.add(o.0), self.1.add(o.1)) }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    unsafe fn sub(self, o: Fq2x8) -> Fq2x8 {
        unsafe { Fq2x8(self.0.sub(o.0), self.1.sub(o.1)) }
    }

    /// Karatsuba: three Fq products.
    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    unsafe fn mul(self, o: Fq2x8) -> Fq2x8 {
        unsafe {
            let v0 = self.0.mul(o.0);
            let v1 = self.1.mul(o.1);
            let cross = self.0.add(self.1).mul(o.0.add(o.1));
            Fq2x8(v0.sub(v1), cross.sub(v0).sub(v1))
        }
    }

    /// `(c₀ + c₁)(c₀ − c₁) + 2c₀c₁·u`: two Fq products.
    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    unsafe fn square(self) -> Fq2x8 {
        unsafe {
            let c0 = self.0.add(self.1).mul(self.0.sub(self.1));
            let c01 = self.0.mul(self.1);
            Fq2x8(c0, c01.add(c01))
        }
    }
}

impl Inverse for Fq2x8 {
    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    unsafe fn norm(self) -> Fq8 {
        unsafe { self.0.square().add(self.1.square()) }
    }

    /// `z⁻¹ = z̄ / N(z)`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    unsafe fn inverse_from_norm(self, n_inv: Fq8) -> Fq2x8 {
        unsafe {
            let zero = Fq8::new([_mm512_setzero_si512(); 5]);
            Fq2x8(self.0.mul(n_inv), zero.sub(self.1.mul(n_inv)))
        }
    }
}

/// One group of eight pending additions, kept between the two passes.
#[derive(Clone, Copy)]
pub(crate) struct Group<L> {
    qx: L,
    qy: L,
    px: L,
    py: L,
    dx: L,
    norm: Fq8,
    prefix: Fq8,
}

/// Buffers reused across batches.
#[derive(Default)]
pub struct Scratch {
    pub(crate) g1: Vec<Group<Fq8>>,
    pub(crate) g2: Vec<Group<Fq2x8>>,
}

/// `acc[b] += p` for each `(b, p)` (distinct buckets, both points finite, different x),
/// with `Fq8` lanes for G1 and `Fq2x8` for G2. `false`: the vector path is off here
/// and nothing was done.
pub(crate) fn add_chords<L: Inverse, P: SWCurveConfig<BaseField = L::Scalar>>(
    acc: &mut [Affine<P>],
    pairs: &[(u32, Affine<P>)],
    groups: &mut Vec<Group<L>>,
) -> bool {
    if !active() {
        return false;
    }
    // SAFETY: `active` checked avx512f and avx512ifma on this CPU.
    unsafe { chords::<L, P>(acc, pairs, groups) };
    true
}

/// The batch-affine additions with one shared inversion: prefix products of the norms of
/// `x_p − x_q` per lane, eight scalar inversions folded into one, then the chords.
#[target_feature(enable = "avx512f,avx512ifma")]
unsafe fn chords<L: Inverse, P: SWCurveConfig<BaseField = L::Scalar>>(
    acc: &mut [Affine<P>],
    pairs: &[(u32, Affine<P>)],
    groups: &mut Vec<Group<L>>,
) {
    groups.clear();
    // padding lanes add (1, 0) to (0, 0): x differs, results dropped
    let one = L::Scalar::ONE;
    let zero = L::Scalar::ZERO;
    let mut running = unsafe { Fq8::load(&[Fq::ONE; 8]) };
    for chunk in pairs.chunks(8) {
        let mut qx = [zero; 8];
        let mut qy = [zero; 8];
        let mut px = [one; 8];
        let mut py = [zero; 8];
        for (k, (b, p)) in chunk.iter().enumerate() {
            let q = &acc[*b as usize];
            (qx[k], qy[k], px[k], py[k]) = (q.x, q.y, p.x, p.y);
        }
        unsafe {
            let (qx, qy, px, py) = (L::load(&qx), L::load(&qy), L::load(&px), L::load(&py));
            let dx = px.sub(qx);
            let norm = dx.norm();
            groups.push(Group {
                qx,
                qy,
                px,
                py,
                dx,
                norm,
                prefix: running,
            });
            running = running.mul(norm);
        }
    }
    // the eight lane products: one inversion for all (none is zero: x always differs)
    let mut lanes = unsafe { running.store() };
    crate::msm::montgomery_invert(&mut lanes, &mut Vec::with_capacity(8));
    let mut inv = unsafe { Fq8::load(&lanes) };
    for (chunk, g) in pairs.chunks(8).zip(groups.iter()).rev() {
        let (x3, y3) = unsafe {
            let n_inv = inv.mul(g.prefix);
            inv = inv.mul(g.norm);
            let dx_inv = g.dx.inverse_from_norm(n_inv);
            let lambda = g.py.sub(g.qy).mul(dx_inv);
            let x3 = lambda.square().sub(g.qx).sub(g.px);
            let y3 = lambda.mul(g.qx.sub(x3)).sub(g.qy);
            (x3.store(), y3.store())
        };
        for (k, (b, _)) in chunk.iter().enumerate() {
            acc[*b as usize] = Affine::new_unchecked(x3[k], y3[k]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ark_ff::{BigInteger, UniformRand};
    use ark_std::rand::SeedableRng;

    fn random<F: UniformRand>(rng: &mut impl ark_std::rand::Rng) -> [F; 8] {
        core::array::from_fn(|_| F::rand(rng))
    }

    /// Every lane operation against arkworks, on random elements and on the extremes
    /// (0, 1, p − 1); with `inverse`, the inversion through the norm too.
    fn check_ops<L: Lanes>(rng: &mut impl ark_std::rand::Rng, inverse: Option<unsafe fn(L) -> L>)
    where
        L::Scalar: UniformRand,
    {
        let minus_one = -L::Scalar::ONE;
        let edges = [
            L::Scalar::ZERO,
            L::Scalar::ONE,
            minus_one,
            minus_one.double(),
            L::Scalar::ZERO,
            minus_one,
            L::Scalar::ONE,
            minus_one,
        ];
        for round in 0..2000 {
            let a: [L::Scalar; 8] = if round == 0 { edges } else { random(rng) };
            let mut b: [L::Scalar; 8] = random(rng);
            if round == 1 {
                b = edges;
            }
            unsafe {
                let (va, vb) = (L::load(&a), L::load(&b));
                assert_eq!(va.store(), a, "load/store");
                // chained, so that unreduced (below 2p) inputs are exercised
                let sum = va.add(vb);
                let diff = va.sub(vb);
                let prod = sum.mul(diff);
                let sq = prod.square();
                for k in 0..8 {
                    let (s, d) = (a[k] + b[k], a[k] - b[k]);
                    assert_eq!(sum.store()[k], s);
                    assert_eq!(diff.store()[k], d);
                    assert_eq!(prod.store()[k], s * d);
                    assert_eq!(sq.store()[k], (s * d).square());
                }
                if let Some(inverse) = inverse
                    && a.iter().all(|x| *x != L::Scalar::ZERO)
                {
                    let inv = inverse(va).store();
                    for k in 0..8 {
                        assert_eq!(inv[k] * a[k], L::Scalar::ONE);
                    }
                }
            }
        }
    }

    /// `x⁻¹` through the norm, as the MSM inverts.
    unsafe fn invert<L: Inverse>(x: L) -> L {
        unsafe {
            let norms = x.norm().store().map(|n| {
                n.inverse()
                    .expect("the norm of a non-zero element is non-zero")
            });
            x.inverse_from_norm(Fq8::load(&norms))
        }
    }

    #[test]
    fn lane_arithmetic_equals_arkworks() {
        if !testable() {
            return;
        }
        let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(11);
        check_ops::<Fq8>(&mut rng, Some(invert::<Fq8>));
        check_ops::<Fq2x8>(&mut rng, Some(invert::<Fq2x8>));
        check_ops::<Fr8>(&mut rng, None);
    }

    fn check_constants<M: Modulus>() {
        assert_eq!(from52(M::P52), M::P);
        assert_eq!(
            M::P[0].wrapping_mul(M::PINV52) & M52,
            M52,
            "p·(−p⁻¹) ≡ −1 mod 2⁵²"
        );
        let mut two_p = BigInt(M::P);
        assert!(!two_p.add_with_carry(&BigInt(M::P)), "2p fits in 256 bits");
        assert_eq!(from52(M::P2_52), two_p.0);
        assert!(M::P[3] < 1 << 62, "p < 2²⁵⁴: the bounds of the lanes hold");
    }

    #[test]
    fn constants() {
        check_constants::<FqConfig>();
        check_constants::<FrConfig>();
    }
}
