//! The batch verifier's multi-Miller loop where the CPU has no IFMA lanes for it: every
//! pair's line in affine coordinates, the batch's denominators inverted together, one
//! accumulator for all the pairs a thread is given.
//!
//! arkworks prepares each `G2` point on its own in homogeneous projective coordinates (a
//! doubling step is ~35 base-field products) and squares one accumulator per four pairs.
//! Here all the pairs take each step of the ate loop together: the slopes' denominators
//! (`2y_T` for a doubling, `x_Q − x_T` for an addition) are inverted at once (through
//! their norms: one inversion in Fq for the step, ~7 products a pair), so a doubling
//! costs about 20 products; the accumulator is squared once a step for all of them. The
//! line through `T` with slope `s` is `(1, −s, s·x_T − y_T)` in arkworks' D-twist
//! coefficients — arkworks' own line divided by a factor in Fq2, which the final
//! exponentiation removes: the loop's value differs from arkworks' by such factors only, so
//! it is for a check that exponentiates, like the batch verifier's.
//!
//! Where a denominator is zero (a `T` equal to `±Q`, which points of the prime-order
//! subgroup never reach) the loop is left to arkworks.

use ark_bn254::{Bn254, Config, Fq, Fq2, Fq12, G1Affine, G2Affine};
use ark_ec::AffineRepr;
use ark_ec::bn::BnConfig;
use ark_ec::pairing::Pairing;
use ark_ff::{AdditiveGroup, Field};
use fleetmesh_kernels::msm::BatchInvert;

// The loop below is BN254's: a positive curve parameter (no conjugation at the end).
const _: () = assert!(!<Config as BnConfig>::X_IS_NEGATIVE);

/// The product of the Miller loops of `pairs` (pairs with a point at infinity add nothing),
/// equal to arkworks' `multi_miller_loop` up to factors in Fq2.
pub(crate) fn multi_miller_loop(pairs: &[(G1Affine, G2Affine)]) -> Fq12 {
    let live: Vec<(G1Affine, G2Affine)> = pairs
        .iter()
        .filter(|(p, q)| !p.is_zero() && !q.is_zero())
        .copied()
        .collect();
    affine_loop(&live).unwrap_or_else(|| {
        let (ps, qs): (Vec<_>, Vec<_>) = live.into_iter().unzip();
        Bn254::multi_miller_loop(ps, qs).0
    })
}

/// Buffers for [`step`].
#[derive(Default)]
struct Scratch {
    den: Vec<Fq2>,
    inv: <Fq2 as BatchInvert>::Scratch,
}

/// The ate loop over all `pairs` at once (`None`: a denominator was zero).
fn affine_loop(pairs: &[(G1Affine, G2Affine)]) -> Option<Fq12> {
    let count = <Config as BnConfig>::ATE_LOOP_COUNT;
    let mut t: Vec<(Fq2, Fq2)> = pairs.iter().map(|(_, q)| (q.x, q.y)).collect();
    let q: Vec<(Fq2, Fq2)> = t.clone();
    let neg_q: Vec<(Fq2, Fq2)> = q.iter().map(|(x, y)| (*x, -*y)).collect();
    let mut f = Fq12::ONE;
    let mut s = Scratch::default();
    for i in (1..count.len()).rev() {
        if i != count.len() - 1 {
            f.square_in_place();
        }
        step(&mut f, pairs, &mut t, None, &mut s)?;
        match count[i - 1] {
            1 => step(&mut f, pairs, &mut t, Some(&q), &mut s)?,
            -1 => step(&mut f, pairs, &mut t, Some(&neg_q), &mut s)?,
            _ => {}
        }
    }
    // the last two lines, through π(Q) and −π²(Q)
    let q1: Vec<(Fq2, Fq2)> = q.iter().map(frobenius).collect();
    let q2: Vec<(Fq2, Fq2)> = q1.iter().map(frobenius).map(|(x, y)| (x, -y)).collect();
    step(&mut f, pairs, &mut t, Some(&q1), &mut s)?;
    step(&mut f, pairs, &mut t, Some(&q2), &mut s)?;
    Some(f)
}

/// `π(Q)` on the twist: the Frobenius map, times the twist's constants.
fn frobenius((x, y): &(Fq2, Fq2)) -> (Fq2, Fq2) {
    let (mut x, mut y) = (*x, *y);
    x.frobenius_map_in_place(1);
    y.frobenius_map_in_place(1);
    (
        x * <Config as BnConfig>::TWIST_MUL_BY_Q_X,
        y * <Config as BnConfig>::TWIST_MUL_BY_Q_Y,
    )
}

/// One step for every pair: `T ← 2T` (`add` None) or `T ← T + add_j`, the line through
/// them evaluated at `P_j` into `f`. `None`: a denominator is zero (nothing changed).
fn step(
    f: &mut Fq12,
    pairs: &[(G1Affine, G2Affine)],
    t: &mut [(Fq2, Fq2)],
    add: Option<&[(Fq2, Fq2)]>,
    s: &mut Scratch,
) -> Option<()> {
    s.den.clear();
    s.den
        .extend(t.iter().enumerate().map(|(j, (x, y))| match add {
            None => y.double(),
            Some(q) => q[j].0 - x,
        }));
    if s.den.contains(&Fq2::ZERO) {
        return None;
    }
    Fq2::invert_all(&mut s.den, &mut s.inv);
    for (j, (tj, (p, _))) in t.iter_mut().zip(pairs).enumerate() {
        let (x, y) = *tj;
        let (slope, x3) = match add {
            None => {
                let x2 = x.square();
                let slope = (x2.double() + x2) * s.den[j];
                (slope, slope.square() - x.double())
            }
            Some(q) => {
                let slope = (q[j].1 - y) * s.den[j];
                (slope, slope.square() - x - q[j].0)
            }
        };
        let y3 = slope * (x - x3) - y;
        // the line (1, −s, s·x_T − y_T) at P, as arkworks' `ell` scales a D-twist line
        let c0 = Fq2::new(p.y, Fq::ZERO);
        let mut c1 = -slope;
        c1.mul_assign_by_fp(&p.x);
        let c2 = slope * x - y;
        f.mul_by_034(&c0, &c1, &c2);
        *tj = (x3, y3);
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ark_ec::pairing::MillerLoopOutput;
    use ark_ff::UniformRand;
    use rand::SeedableRng;

    fn exp(f: Fq12) -> Fq12 {
        Bn254::final_exponentiation(MillerLoopOutput(f))
            .expect("non-zero")
            .0
    }

    #[test]
    fn the_loop_is_arkworks_after_the_final_exponentiation() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for n in [1usize, 2, 5, 16] {
            let mut pairs: Vec<(G1Affine, G2Affine)> = (0..n)
                .map(|_| (G1Affine::rand(&mut rng), G2Affine::rand(&mut rng)))
                .collect();
            if n == 5 {
                pairs[1].0 = G1Affine::identity();
                pairs[3].1 = G2Affine::identity();
            }
            let ours = multi_miller_loop(&pairs);
            let (ps, qs): (Vec<_>, Vec<_>) = pairs.iter().copied().unzip();
            let theirs = Bn254::multi_miller_loop(ps, qs).0;
            assert_ne!(
                ours, theirs,
                "{n} pairs: a different line scaling, not the same value"
            );
            assert_eq!(exp(ours), exp(theirs), "{n} pairs");
        }
        assert_eq!(multi_miller_loop(&[]), Fq12::ONE);
    }

    #[test]
    fn a_zero_denominator_leaves_the_step_undone() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(6);
        let pairs = [(G1Affine::rand(&mut rng), G2Affine::rand(&mut rng))];
        let q = [(pairs[0].1.x, pairs[0].1.y)];
        let mut t = q;
        let mut f = Fq12::ONE;
        // T + Q with T = Q: the chord is a tangent, which this step does not take
        assert!(step(&mut f, &pairs, &mut t, Some(&q), &mut Scratch::default()).is_none());
        assert_eq!((f, t), (Fq12::ONE, q));
    }
}
