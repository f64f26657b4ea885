//! What a backend prepares once per proving key: the CPU backend's precomputed tables —
//! shifted copies of the key's five base vectors ([`fleetmesh_kernels::msm::Shifted`]),
//! which make every later proof's MSMs cheaper, at a memory cost bounded by the caller —
//! or, on a GPU backend, the bases kept in device memory ([`fleetmesh_kernels::fixed::Kept`]),
//! so a proof uploads only its scalars.
//!
//! A proving key's bases never change, so a service that proves with one key many times
//! prepares [`KeyTables`] once and passes them to [`crate::prove::prove_checked`]: the
//! proving queue builds the CPU tables in the background after a key loads, within
//! `[compute] precompute_mib` (about 254 point doublings per base in total, spread over
//! all cores; the proofs made before they are ready run without them), and keeps a GPU's
//! copies when the key loads ([`KeyTables::keep`]), freed when it unloads. The proof is
//! the same with or without either.

use ark_bn254::{G1Affine, G2Affine, g1, g2};
use fleetmesh_kernels::MsmNtt;
use fleetmesh_kernels::fixed::Fixed;
use fleetmesh_kernels::msm::Shifted;

use crate::{ProvingKey, Result};

/// One proving key's bases prepared for a backend, made by [`KeyTables::build`] (CPU) or
/// [`KeyTables::keep`] (GPU) from that key: one entry per base vector, `None` where that
/// vector has nothing prepared (what was made for other bases is ignored by the MSMs,
/// never misused).
#[derive(Debug)]
pub struct KeyTables {
    /// For the A bases.
    pub a: Option<Fixed<g1::Config>>,
    /// For the B bases in G1.
    pub b_g1: Option<Fixed<g1::Config>>,
    /// For the B bases in G2.
    pub b_g2: Option<Fixed<g2::Config>>,
    /// For the C bases (private wires).
    pub c: Option<Fixed<g1::Config>>,
    /// For the H bases.
    pub h: Option<Fixed<g1::Config>>,
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
    /// Builds the CPU tables for `pk` within `budget` bytes (the same number of copies for
    /// every base vector: the most that fit, and no more than the MSMs can use), or
    /// `None` when not one copy fits or the key is too small for any to pay.
    #[must_use]
    pub fn build(pk: &ProvingKey, budget: usize) -> Option<KeyTables> {
        let copies = copies_within(pk, budget);
        if copies < 2 {
            return None;
        }
        let g1 = |b: &[G1Affine]| Some(Fixed::Shifted(Shifted::new(b, copies)));
        let g2 = |b: &[G2Affine]| Some(Fixed::Shifted(Shifted::new(b, copies)));
        let t = KeyTables {
            a: g1(&pk.a),
            b_g1: g1(&pk.b_g1),
            b_g2: g2(&pk.b_g2),
            c: g1(&pk.c),
            h: g1(&pk.h),
        };
        (t.bytes() > 0).then_some(t)
    }

    /// Keeps `pk`'s bases in `backend`'s device memory, where it keeps any (a GPU backend,
    /// for the MSMs it runs there), or `None`.
    ///
    /// # Errors
    /// A device failure (e.g. out of device memory).
    pub fn keep(pk: &ProvingKey, backend: &dyn MsmNtt) -> Result<Option<KeyTables>> {
        let g1 = |b: &[G1Affine]| backend.keep_g1(b).map(|k| k.map(Fixed::Kept));
        let t = KeyTables {
            a: g1(&pk.a)?,
            b_g1: g1(&pk.b_g1)?,
            b_g2: backend.keep_g2(&pk.b_g2)?.map(Fixed::Kept),
            c: g1(&pk.c)?,
            h: g1(&pk.h)?,
        };
        Ok((t.bytes() > 0).then_some(t))
    }

    /// The bytes they take (host memory for the CPU's tables, device memory for kept
    /// bases).
    #[must_use]
    pub fn bytes(&self) -> usize {
        let g1 = |f: &Option<Fixed<g1::Config>>| f.as_ref().map_or(0, Fixed::bytes);
        g1(&self.a)
            + g1(&self.b_g1)
            + self.b_g2.as_ref().map_or(0, Fixed::bytes)
            + g1(&self.c)
            + g1(&self.h)
    }

    /// Whether they are bases kept on a GPU (else the CPU's tables).
    #[must_use]
    pub fn on_device(&self) -> bool {
        [&self.a, &self.b_g1, &self.c, &self.h]
            .iter()
            .any(|f| f.as_ref().is_some_and(|f| f.kept().is_some()))
            || self.b_g2.as_ref().is_some_and(|f| f.kept().is_some())
    }

    /// The most copies any of the five vectors has in the CPU's tables (1 + shifted
    /// copies; 1 for kept bases).
    #[must_use]
    pub fn copies(&self) -> usize {
        let g1 = |f: &Option<Fixed<g1::Config>>| {
            f.as_ref()
                .and_then(Fixed::shifted)
                .map_or(1, |s| s.plan().copies)
        };
        [
            g1(&self.a),
            g1(&self.b_g1),
            self.b_g2
                .as_ref()
                .and_then(Fixed::shifted)
                .map_or(1, |s| s.plan().copies),
            g1(&self.c),
            g1(&self.h),
        ]
        .into_iter()
        .max()
        .unwrap_or(1)
    }
}
