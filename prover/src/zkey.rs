//! snarkjs's Groth16 `.zkey`: the proving key, with the verifying key inside it.
//!
//! Sections: 1 protocol (1 = Groth16), 2 header (field sizes and primes, `nVars`,
//! `nPublic`, `domainSize`, α₁ β₁ β₂ γ₂ δ₁ δ₂), 3 IC (the vk's `nPublic+1` G1 points),
//! 4 the A and B matrix coefficients, 5 A (G1), 6 B (G1), 7 B (G2), 8 C (G1, private wires
//! only), 9 H (G1, `domainSize` points of the circom reduction, see [`crate::qap`]),
//! 10 the ceremony's contributions. Points are affine, coordinates little-endian in
//! Montgomery form, the point at infinity all zeros; coefficients are `v·R²`.
//!
//! [`ProvingKey::from_bytes`] checks every index and every point on its curve, and the
//! verifying key's G2 points (β₂, γ₂, δ₂) in the prime-order subgroup. The per-wire B₂
//! points are not subgroup-checked (that would dominate loading a large key): a bad one
//! can only yield a proof that fails [`crate::prove::prove`]'s check against the verifying
//! key, so it is never handed out.

use ark_bn254::{Bn254, Fq, Fr, G1Affine, G2Affine};
use ark_groth16::VerifyingKey;

use rayon::prelude::*;

use crate::Result;
use crate::binfile::{BinFile, N8, Reader, Writer, format_err};

const MAGIC: &[u8; 4] = b"zkey";
const KIND: &str = "zkey";

/// Which QAP matrix a coefficient belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matrix {
    /// The left factor (includes the extra rows that bind the public inputs).
    A,
    /// The right factor.
    B,
}

/// One non-zero entry of A or B: `matrix[constraint][signal] = value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coeff {
    /// A or B.
    pub matrix: Matrix,
    /// The row (constraint), `< domain_size`.
    pub constraint: u32,
    /// The column (wire), `< n_vars`.
    pub signal: u32,
    /// The coefficient.
    pub value: Fr,
}

/// A Groth16 proving key in snarkjs's layout.
#[derive(Clone, PartialEq)]
pub struct ProvingKey {
    /// The verifying key: α₁, β₂, γ₂, δ₂ and IC (`gamma_abc_g1`).
    pub vk: VerifyingKey<Bn254>,
    /// β₁.
    pub beta_g1: G1Affine,
    /// δ₁.
    pub delta_g1: G1Affine,
    /// Wires, including the constant wire 0.
    pub n_vars: usize,
    /// Public signals (outputs and public inputs), not counting wire 0.
    pub n_public: usize,
    /// The evaluation domain size (a power of two).
    pub domain_size: usize,
    /// The A and B matrix entries.
    pub coeffs: Vec<Coeff>,
    /// `u_j(τ)·G1` for every wire.
    pub a: Vec<G1Affine>,
    /// `v_j(τ)·G1` for every wire.
    pub b_g1: Vec<G1Affine>,
    /// `v_j(τ)·G2` for every wire.
    pub b_g2: Vec<G2Affine>,
    /// `(β·u_j + α·v_j + w_j)(τ)/δ·G1` for the private wires `j > n_public`.
    pub c: Vec<G1Affine>,
    /// The circom-reduction H bases, `domain_size` of them.
    pub h: Vec<G1Affine>,
}

impl std::fmt::Debug for ProvingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProvingKey")
            .field("n_vars", &self.n_vars)
            .field("n_public", &self.n_public)
            .field("domain_size", &self.domain_size)
            .field("coeffs", &self.coeffs.len())
            .finish_non_exhaustive()
    }
}

/// Reads section `id` as exactly `n` items of `size` bytes, decoding (and checking) them
/// in parallel: for a large key the on-curve and subgroup checks dominate the load time.
fn points<T: Send>(
    file: &BinFile<'_>,
    id: u32,
    name: &'static str,
    n: usize,
    size: usize,
    read: impl Fn(&mut Reader<'_>, &str) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let mut s = file.section(id, name)?;
    if s.remaining() != n * size {
        return Err(format_err(
            KIND,
            format!(
                "section {id} ({name}) holds {} bytes, {n} points need {}",
                s.remaining(),
                n * size
            ),
        ));
    }
    let data = s.bytes(n * size)?;
    data.par_chunks(size.max(1))
        .enumerate()
        .map(|(i, chunk)| read(&mut Reader::new(chunk, KIND, name), &format!("{name}[{i}]")))
        .collect()
}

impl ProvingKey {
    /// Parses a snarkjs Groth16 `.zkey`.
    ///
    /// # Errors
    /// [`crate::Error::Format`] for a file that is not a BN254 Groth16 zkey, a section of the
    /// wrong size, an index out of range, a point off its curve, or a verifying-key G2 point
    /// outside the subgroup.
    pub fn from_bytes(data: &[u8]) -> Result<ProvingKey> {
        let file = BinFile::parse(data, MAGIC, KIND, 1)?;
        let mut s = file.section(1, "protocol")?;
        let protocol = s.u32()?;
        if protocol != 1 {
            return Err(format_err(
                KIND,
                format!(
                    "protocol {protocol} is not Groth16 (1); PLONK/FFLONK keys are not supported"
                ),
            ));
        }
        let mut h = file.section(2, "groth16 header")?;
        h.prime::<Fq>("base field")?;
        h.prime::<Fr>("scalar field")?;
        let n_vars = h.u32()? as usize;
        let n_public = h.u32()? as usize;
        let domain_size = h.u32()? as usize;
        if !domain_size.is_power_of_two() || domain_size.trailing_zeros() > crate::qap::MAX_LOG2 {
            return Err(h.err(format!(
                "domainSize {domain_size} is not a supported power of two"
            )));
        }
        if n_public + 1 > n_vars {
            return Err(h.err(format!("nPublic {n_public} does not fit in nVars {n_vars}")));
        }
        let alpha_g1 = h.g1("alpha_1")?;
        let beta_g1 = h.g1("beta_1")?;
        let beta_g2 = h.g2("beta_2")?;
        let gamma_g2 = h.g2("gamma_2")?;
        let delta_g1 = h.g1("delta_1")?;
        let delta_g2 = h.g2("delta_2")?;
        h.finish()?;

        let ic = points(&file, 3, "IC", n_public + 1, 2 * N8, |r, w| r.g1(w))?;

        let mut s = file.section(4, "coefficients")?;
        let n = s.count("coefficients", 12 + N8)?;
        let mut coeffs = Vec::with_capacity(n);
        for _ in 0..n {
            let matrix = match s.u32()? {
                0 => Matrix::A,
                1 => Matrix::B,
                m => return Err(s.err(format!("matrix {m} is neither A (0) nor B (1)"))),
            };
            let constraint = s.u32()?;
            let signal = s.u32()?;
            if constraint as usize >= domain_size || signal as usize >= n_vars {
                return Err(s.err(format!(
                    "coefficient at ({constraint}, {signal}) is outside {domain_size}×{n_vars}"
                )));
            }
            let value = s.double_mont_fr("coefficient")?;
            coeffs.push(Coeff {
                matrix,
                constraint,
                signal,
                value,
            });
        }
        s.finish()?;

        let a = points(&file, 5, "A", n_vars, 2 * N8, |r, w| r.g1(w))?;
        let b_g1 = points(&file, 6, "B1", n_vars, 2 * N8, |r, w| r.g1(w))?;
        let b_g2 = points(&file, 7, "B2", n_vars, 4 * N8, |r, w| r.g2_on_curve(w))?;
        let c = points(&file, 8, "C", n_vars - n_public - 1, 2 * N8, |r, w| r.g1(w))?;
        let h = points(&file, 9, "H", domain_size, 2 * N8, |r, w| r.g1(w))?;

        Ok(ProvingKey {
            vk: VerifyingKey {
                alpha_g1,
                beta_g2,
                gamma_g2,
                delta_g2,
                gamma_abc_g1: ic,
            },
            beta_g1,
            delta_g1,
            n_vars,
            n_public,
            domain_size,
            coeffs,
            a,
            b_g1,
            b_g2,
            c,
            h,
        })
    }

    /// Serializes in snarkjs's layout. Section 10 records no contributions and a zero
    /// circuit hash: a key written here comes from [`crate::setup`] (development only),
    /// not from a ceremony, and `snarkjs zkey verify` will say so.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::new(MAGIC, 1, 10);
        w.begin(1);
        w.u32(1);
        w.end();
        w.begin(2);
        w.prime::<Fq>();
        w.prime::<Fr>();
        w.u32(self.n_vars as u32);
        w.u32(self.n_public as u32);
        w.u32(self.domain_size as u32);
        w.g1(&self.vk.alpha_g1);
        w.g1(&self.beta_g1);
        w.g2(&self.vk.beta_g2);
        w.g2(&self.vk.gamma_g2);
        w.g1(&self.delta_g1);
        w.g2(&self.vk.delta_g2);
        w.end();
        w.begin(3);
        self.vk.gamma_abc_g1.iter().for_each(|p| w.g1(p));
        w.end();
        w.begin(4);
        w.u32(self.coeffs.len() as u32);
        for c in &self.coeffs {
            w.u32(match c.matrix {
                Matrix::A => 0,
                Matrix::B => 1,
            });
            w.u32(c.constraint);
            w.u32(c.signal);
            w.double_mont_fr(c.value);
        }
        w.end();
        for (id, pts) in [(5, &self.a), (6, &self.b_g1)] {
            w.begin(id);
            pts.iter().for_each(|p| w.g1(p));
            w.end();
        }
        w.begin(7);
        self.b_g2.iter().for_each(|p| w.g2(p));
        w.end();
        for (id, pts) in [(8, &self.c), (9, &self.h)] {
            w.begin(id);
            pts.iter().for_each(|p| w.g1(p));
            w.end();
        }
        w.begin(10);
        w.bytes(&[0u8; 64]);
        w.u32(0);
        w.end();
        w.into_bytes()
    }
}
