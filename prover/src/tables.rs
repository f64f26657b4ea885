//! Precomputed tables of a proving key: shifted copies of its five base vectors
//! ([`fleetmesh_kernels::msm::Shifted`]), which make every later proof's MSMs cheaper on
//! the CPU backend, at a memory cost bounded by the caller.
//!
//! A proving key's bases never change, so a service that proves with one key many times
//! builds [`KeyTables`] once (the proving queue does so in the background after a key
//! loads, within `[compute] precompute_mib`) and passes them to
//! [`crate::prove::prove_checked`]. Building costs about 254 point doublings per base in
//! total, spread over all cores; the proofs made before the tables are ready run without
//! them. GPU backends ignore the tables.

use ark_bn254::{G1Affine, G2Affine, g1, g2};
use fleetmesh_kernels::msm::Shifted;

use crate::ProvingKey;

/// The shifted copies of one proving key's bases, made by [`KeyTables::build`] from that
/// key (a table made for other bases is ignored by the MSM, never misused).
#[derive(Debug)]
pub struct KeyTables {
    /// For the A bases.
    pub a: Shifted<g1::Config>,
    /// For the B bases in G1.
    pub b_g1: Shifted<g1::Config>,
    /// For the B bases in G2.
    pub b_g2: Shifted<g2::Config>,
    /// For the C bases (private wires).
    pub c: Shifted<g1::Config>,
    /// For the H bases.
    pub h: Shifted<g1::Config>,
}

/// The bytes one more copy of every base vector of `pk` takes.
#[must_use]
pub fn bytes_per_copy(pk: &ProvingKey) -> usize {
    let g1 = pk.a.len() + pk.b_g1.len() + pk.c.len() + pk.h.len();
    Shifted::<g1::Config>::bytes_per_copy(g1) + Shifted::<g2::Config>::bytes_per_copy(pk.b_g2.len())
}

/// The copies of the bases (counting the bases themselves) that `budget` bytes allow for
/// `pk`: 1 when not even one more copy fits.
#[must_use]
pub fn copies_within(pk: &ProvingKey, budget: usize) -> usize {
    1 + budget.checked_div(bytes_per_copy(pk)).unwrap_or(0)
}

impl KeyTables {
    /// Builds the tables for `pk` within `budget` bytes (the same number of copies for
    /// every base vector: the most that fit, and no more than the MSMs can use), or
    /// `None` when not one copy fits or the key is too small for any to pay.
    #[must_use]
    pub fn build(pk: &ProvingKey, budget: usize) -> Option<KeyTables> {
        let copies = copies_within(pk, budget);
        if copies < 2 {
            return None;
        }
        let g1 = |b: &[G1Affine]| Shifted::new(b, copies);
        let g2 = |b: &[G2Affine]| Shifted::new(b, copies);
        let t = KeyTables {
            a: g1(&pk.a),
            b_g1: g1(&pk.b_g1),
            b_g2: g2(&pk.b_g2),
            c: g1(&pk.c),
            h: g1(&pk.h),
        };
        (t.bytes() > 0).then_some(t)
    }

    /// The bytes the tables take.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.a.bytes() + self.b_g1.bytes() + self.b_g2.bytes() + self.c.bytes() + self.h.bytes()
    }

    /// The most copies any of the five vectors has (1 + shifted copies).
    #[must_use]
    pub fn copies(&self) -> usize {
        [
            self.a.plan().copies,
            self.b_g1.plan().copies,
            self.b_g2.plan().copies,
            self.c.plan().copies,
            self.h.plan().copies,
        ]
        .into_iter()
        .max()
        .unwrap_or(1)
    }
}
