//! The Miller loop of BN254 pairings, eight lanes at a time with AVX-512 IFMA: what a
//! batch of Groth16 verifications spends most of its time in (fleetmesh-prover's
//! `verify` calls [`multi_miller_loop`] for the proofs' pairs of a batch).
//!
//! Each lane runs arkworks' optimal-ate loop for its own pairs: the G2 point in
//! homogeneous projective coordinates with ark-ec's doubling and addition formulas (so the
//! line coefficients are arkworks' exactly), each line evaluated at the G1 point and
//! multiplied into the lane's own `f ∈ Fq12`; a lane with several pairs squares its `f`
//! once per step for all of them, as arkworks does for its chunks of four pairs. The loop
//! count's digits are the same for every pair, so all lanes run one sequence of
//! operations; a lane without a pair in the last round multiplies by 1 instead of a line.
//! The eight `f`s are multiplied together at the end, so the result is the field element
//! `Bn254::multi_miller_loop` returns for the same pairs, not merely one with the same
//! pairing.
//!
//! Use it where many pairs share one final exponentiation; [`multi_miller_loop`] answers
//! `None` where the lanes are off (no AVX-512 IFMA on this CPU, or
//! [`crate::ifma::set_enabled`]`(false)`), and the caller runs arkworks' loop.
//!
//! Fq6 = Fq2\[v\]/(v³ − ξ) with ξ = 9 + u, Fq12 = Fq6\[w\]/(w² − v), as in ark-bn254.
#![allow(unsafe_code)]

use crate::ifma::{Fq2x8, Fq8, Lanes, active};
use ark_bn254::{Fq, Fq2, Fq6, Fq12, G1Affine, G2Affine};
use ark_ec::AffineRepr;
use ark_ec::bn::BnConfig;
use ark_ec::short_weierstrass::SWCurveConfig;
use ark_ff::{AdditiveGroup, Field};
use std::arch::x86_64::__mmask8;

type Config = ark_bn254::Config;

/// Eight Fq6 elements `c₀ + c₁·v + c₂·v²`.
#[derive(Clone, Copy)]
struct Fq6x8([Fq2x8; 3]);

/// Eight Fq12 elements `c₀ + c₁·w`.
#[derive(Clone, Copy)]
struct Fq12x8(Fq6x8, Fq6x8);

/// Eight G2 points in homogeneous projective coordinates (`x/z`, `y/z`).
#[derive(Clone, Copy)]
struct G2x8 {
    x: Fq2x8,
    y: Fq2x8,
    z: Fq2x8,
}

/// A line's coefficients, as ark-ec's `EllCoeff` for a D-type twist: `(c₀, c₁, c₂)`,
/// evaluated at `P` as `c₀·y_P + c₁·x_P·w + c₂·v·w`.
type Line = (Fq2x8, Fq2x8, Fq2x8);

/// The constants of one loop, in lanes.
struct Consts {
    zero: Fq2x8,
    one: Fq2x8,
    two_inv: Fq8,
    b: Fq2x8,
}

#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn splat2(x: Fq2) -> Fq2x8 {
    unsafe { Fq2x8::load(&[x; 8]) }
}

#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn add(a: Fq2x8, b: Fq2x8) -> Fq2x8 {
    unsafe { a.add(b) }
}

#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn sub(a: Fq2x8, b: Fq2x8) -> Fq2x8 {
    unsafe { a.sub(b) }
}

#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn mul(a: Fq2x8, b: Fq2x8) -> Fq2x8 {
    unsafe { a.mul(b) }
}

#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn square(a: Fq2x8) -> Fq2x8 {
    unsafe { a.square() }
}

#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn triple(a: Fq2x8) -> Fq2x8 {
    add(add(a, a), a)
}

#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn mul_by_fq(a: Fq2x8, s: Fq8) -> Fq2x8 {
    unsafe { Fq2x8(a.0.mul(s), a.1.mul(s)) }
}

/// `a·ξ = (9a₀ − a₁) + (a₀ + 9a₁)·u`.
#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn mul_by_xi(a: Fq2x8) -> Fq2x8 {
    unsafe {
        let nine = |x: Fq8| {
            let x8 = x.add(x).add(x.add(x));
            let x8 = x8.add(x8);
            x8.add(x)
        };
        Fq2x8(nine(a.0).sub(a.1), a.0.add(nine(a.1)))
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn blend(a: Fq2x8, mask: __mmask8, b: Fq2x8) -> Fq2x8 {
    Fq2x8(a.0.blend(mask, b.0), a.1.blend(mask, b.1))
}

impl Fq6x8 {
    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn add(self, o: Fq6x8) -> Fq6x8 {
        let (a, b) = (self.0, o.0);
        Fq6x8([add(a[0], b[0]), add(a[1], b[1]), add(a[2], b[2])])
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn sub(self, o: Fq6x8) -> Fq6x8 {
        let (a, b) = (self.0, o.0);
        Fq6x8([sub(a[0], b[0]), sub(a[1], b[1]), sub(a[2], b[2])])
    }

    /// `self·v`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn mul_by_v(self) -> Fq6x8 {
        let a = self.0;
        Fq6x8([mul_by_xi(a[2]), a[0], a[1]])
    }

    /// Karatsuba: six Fq2 products.
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn mul(self, o: Fq6x8) -> Fq6x8 {
        let (a, b) = (self.0, o.0);
        let v0 = mul(a[0], b[0]);
        let v1 = mul(a[1], b[1]);
        let v2 = mul(a[2], b[2]);
        let t0 = sub(mul(add(a[1], a[2]), add(b[1], b[2])), add(v1, v2));
        let t1 = sub(mul(add(a[0], a[1]), add(b[0], b[1])), add(v0, v1));
        let t2 = sub(mul(add(a[0], a[2]), add(b[0], b[2])), add(v0, v2));
        Fq6x8([add(mul_by_xi(t0), v0), add(t1, mul_by_xi(v2)), add(t2, v1)])
    }

    /// `self·(c₀ + c₁·v)`: five Fq2 products.
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn mul_by_01(self, c0: Fq2x8, c1: Fq2x8) -> Fq6x8 {
        let a = self.0;
        let v0 = mul(a[0], c0);
        let v1 = mul(a[1], c1);
        let a2c1 = sub(mul(add(a[1], a[2]), c1), v1);
        let cross = sub(mul(add(c0, c1), add(a[0], a[1])), add(v0, v1));
        let a2c0 = sub(mul(add(a[0], a[2]), c0), v0);
        Fq6x8([add(mul_by_xi(a2c1), v0), cross, add(a2c0, v1)])
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn mul_by_fq2(self, c: Fq2x8) -> Fq6x8 {
        let a = self.0;
        Fq6x8([mul(a[0], c), mul(a[1], c), mul(a[2], c)])
    }
}

impl Fq12x8 {
    /// `c₀² + v·c₁² + 2c₀c₁·w` with two Fq6 products.
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn square(self) -> Fq12x8 {
        let (c0, c1) = (self.0, self.1);
        let v2 = c0.mul(c1);
        let v0 = c0.sub(c1).mul(c0.sub(c1.mul_by_v())).add(v2);
        Fq12x8(v0.add(v2.mul_by_v()), v2.add(v2))
    }

    /// `self·(c₀ + (d₀ + d₁·v)·w)`: a line's sparse product.
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn mul_by_034(self, c0: Fq2x8, d0: Fq2x8, d1: Fq2x8) -> Fq12x8 {
        let a = self.0.mul_by_fq2(c0);
        let b = self.1.mul_by_01(d0, d1);
        let e = self.0.add(self.1).mul_by_01(add(c0, d0), d1);
        Fq12x8(a.add(b.mul_by_v()), e.sub(a.add(b)))
    }

    #[target_feature(enable = "avx512f,avx512ifma")]
    fn store(self) -> [Fq12; 8] {
        let six = |x: Fq6x8| -> [Fq6; 8] {
            let [c0, c1, c2] = x.0.map(|c| unsafe { c.store() });
            core::array::from_fn(|k| Fq6::new(c0[k], c1[k], c2[k]))
        };
        let (c0, c1) = (six(self.0), six(self.1));
        core::array::from_fn(|k| Fq12::new(c0[k], c1[k]))
    }
}

impl G2x8 {
    /// ark-ec's `G2HomProjective::double_in_place`: `self ← 2·self` and the tangent's line.
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn double(&mut self, k: &Consts) -> Line {
        let (x, y, z) = (self.x, self.y, self.z);
        let a = mul_by_fq(mul(x, y), k.two_inv);
        let b = square(y);
        let c = square(z);
        let e = mul(k.b, triple(c));
        let f = triple(e);
        let g = mul_by_fq(add(b, f), k.two_inv);
        let h = sub(square(add(y, z)), add(b, c));
        let i = sub(e, b);
        let j = square(x);
        let e_square = square(e);
        self.x = mul(a, sub(b, f));
        self.y = sub(square(g), triple(e_square));
        self.z = mul(b, h);
        (sub(k.zero, h), triple(j), i)
    }

    /// ark-ec's `G2HomProjective::add_in_place`: `self ← self + q` and the chord's line.
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn add(&mut self, qx: Fq2x8, qy: Fq2x8, k: &Consts) -> Line {
        let (x, y, z) = (self.x, self.y, self.z);
        let theta = sub(y, mul(qy, z));
        let lambda = sub(x, mul(qx, z));
        let c = square(theta);
        let d = square(lambda);
        let e = mul(lambda, d);
        let f = mul(z, c);
        let g = mul(x, d);
        let h = sub(add(e, f), add(g, g));
        self.x = mul(lambda, h);
        self.y = sub(mul(theta, sub(g, h)), mul(e, y));
        self.z = mul(z, e);
        let j = sub(mul(theta, qx), mul(lambda, qy));
        (lambda, sub(k.zero, theta), j)
    }
}

/// One round's pairs: a pair per lane (the lanes outside `live` hold a stand-in whose
/// lines are replaced by 1).
struct Round {
    px: Fq8,
    py: Fq8,
    qx: Fq2x8,
    qy: Fq2x8,
    neg_qy: Fq2x8,
    /// `π(Q)` and `−π²(Q)` for the loop's last two lines.
    q1: (Fq2x8, Fq2x8),
    q2: (Fq2x8, Fq2x8),
    r: G2x8,
    live: __mmask8,
}

/// `f ← f·ℓ(P)` in the lanes of `round.live`.
#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn ell(f: Fq12x8, (c0, c1, c2): Line, round: &Round, k: &Consts) -> Fq12x8 {
    let mut c0 = mul_by_fq(c0, round.py);
    let mut c1 = mul_by_fq(c1, round.px);
    let mut c2 = c2;
    if round.live != 0xff {
        let dead = !round.live;
        c0 = blend(c0, dead, k.one);
        c1 = blend(c1, dead, k.zero);
        c2 = blend(c2, dead, k.zero);
    }
    f.mul_by_034(c0, c1, c2)
}

/// ark-ec's `mul_by_char`: the twisted Frobenius image of `q`.
fn mul_by_char(q: G2Affine) -> G2Affine {
    let mut s = q;
    s.x.frobenius_map_in_place(1);
    s.x *= &Config::TWIST_MUL_BY_Q_X;
    s.y.frobenius_map_in_place(1);
    s.y *= &Config::TWIST_MUL_BY_Q_Y;
    s
}

/// The product of the Miller loops of `pairs` (none at infinity) in lanes.
#[target_feature(enable = "avx512f,avx512ifma")]
fn lanes(pairs: &[(G1Affine, G2Affine)]) -> Fq12 {
    let k = Consts {
        zero: splat2(Fq2::ZERO),
        one: splat2(Fq2::ONE),
        two_inv: unsafe { Fq8::load(&[Fq::from(2u8).inverse().expect("2 ≠ 0"); 8]) },
        b: splat2(ark_bn254::g2::Config::COEFF_B),
    };
    let stand_in = (G1Affine::generator(), G2Affine::generator());
    let mut rounds: Vec<Round> = pairs
        .chunks(8)
        .map(|chunk| {
            let lane = |i: usize| chunk.get(i).copied().unwrap_or(stand_in);
            let ps: [G1Affine; 8] = core::array::from_fn(|i| lane(i).0);
            let qs: [G2Affine; 8] = core::array::from_fn(|i| lane(i).1);
            let q1s = qs.map(mul_by_char);
            let q2s = q1s.map(|q| {
                let mut q2 = mul_by_char(q);
                q2.y = -q2.y;
                q2
            });
            let fq = |f: fn(&G1Affine) -> Fq| unsafe { Fq8::load(&ps.each_ref().map(f)) };
            let fq2 = |qs: &[G2Affine; 8], f: fn(&G2Affine) -> Fq2| unsafe {
                Fq2x8::load(&qs.each_ref().map(f))
            };
            let (qx, qy) = (fq2(&qs, |q| q.x), fq2(&qs, |q| q.y));
            Round {
                px: fq(|p| p.x),
                py: fq(|p| p.y),
                qx,
                qy,
                neg_qy: fq2(&qs, |q| -q.y),
                q1: (fq2(&q1s, |q| q.x), fq2(&q1s, |q| q.y)),
                q2: (fq2(&q2s, |q| q.x), fq2(&q2s, |q| q.y)),
                r: G2x8 {
                    x: qx,
                    y: qy,
                    z: k.one,
                },
                live: ((1u16 << chunk.len()) - 1) as __mmask8,
            }
        })
        .collect();
    let one6 = Fq6x8([k.one, k.zero, k.zero]);
    let zero6 = Fq6x8([k.zero; 3]);
    let mut f = Fq12x8(one6, zero6);
    let digits = Config::ATE_LOOP_COUNT;
    for i in (1..digits.len()).rev() {
        if i != digits.len() - 1 {
            f = f.square();
        }
        for round in &mut rounds {
            let line = round.r.double(&k);
            f = ell(f, line, round, &k);
        }
        let digit = digits[i - 1];
        if digit != 0 {
            for round in &mut rounds {
                let qy = if digit > 0 { round.qy } else { round.neg_qy };
                let line = round.r.add(round.qx, qy, &k);
                f = ell(f, line, round, &k);
            }
        }
    }
    // X_IS_NEGATIVE is false for BN254: no conjugation before the last two lines
    for round in &mut rounds {
        let line = round.r.add(round.q1.0, round.q1.1, &k);
        f = ell(f, line, round, &k);
        let line = round.r.add(round.q2.0, round.q2.1, &k);
        f = ell(f, line, round, &k);
    }
    f.store().into_iter().product()
}

/// `Π_i f_{P_i,Q_i}`, the Miller loop of each pair multiplied together: the value
/// `ark_bn254::Bn254::multi_miller_loop` returns (pairs with a point at infinity count as
/// 1, as there). `None` where the IFMA lanes are off here: run arkworks' loop then.
pub fn multi_miller_loop(pairs: &[(G1Affine, G2Affine)]) -> Option<Fq12> {
    if !active() {
        return None;
    }
    let live: Vec<(G1Affine, G2Affine)> = pairs
        .iter()
        .filter(|(p, q)| !p.is_zero() && !q.is_zero())
        .copied()
        .collect();
    if live.is_empty() {
        return Some(Fq12::ONE);
    }
    // SAFETY: `active` checked avx512f and avx512ifma on this CPU.
    Some(unsafe { lanes(&live) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ark_bn254::{Bn254, Fr};
    use ark_ec::pairing::Pairing;
    use ark_ec::{CurveGroup, PrimeGroup};
    use ark_std::UniformRand;
    use ark_std::rand::SeedableRng;

    #[test]
    fn lane_miller_loop_equals_arkworks() {
        if !crate::ifma::testable() {
            return;
        }
        let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(25);
        for n in [1usize, 3, 8, 9, 20] {
            let mut pairs: Vec<(G1Affine, G2Affine)> = (0..n)
                .map(|_| {
                    let p =
                        (ark_bn254::G1Projective::generator() * Fr::rand(&mut rng)).into_affine();
                    let q =
                        (ark_bn254::G2Projective::generator() * Fr::rand(&mut rng)).into_affine();
                    (p, q)
                })
                .collect();
            if n == 9 {
                // points at infinity are left out, as arkworks leaves them out
                pairs[2].0 = G1Affine::zero();
                pairs[5].1 = G2Affine::zero();
            }
            let ours = multi_miller_loop(&pairs).expect("the lanes are on");
            let (ps, qs): (Vec<_>, Vec<_>) = pairs.into_iter().unzip();
            assert_eq!(ours, Bn254::multi_miller_loop(ps, qs).0, "{n} pairs");
        }
        assert_eq!(
            multi_miller_loop(&[(G1Affine::zero(), G2Affine::generator())]),
            Some(Fq12::ONE)
        );
    }
}
