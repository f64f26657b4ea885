//! Test helpers (feature `test-utils`): a small circuit, and setup and proving through
//! `ark-groth16`, an independent prover, so tests check our verifier against proofs it did
//! not make.

use ark_bn254::{Bn254, Fr};
use ark_ff::UniformRand;
use ark_groth16::{Groth16, Proof, ProvingKey, VerifyingKey};
use ark_relations::gr1cs::{ConstraintSynthesizer, ConstraintSystemRef, SynthesisError, Variable};
use ark_relations::lc;
use ark_snark::SNARK;
use rand::SeedableRng;
use rand::rngs::StdRng;

/// x·y = z and x + y = w, with z and w public.
#[derive(Debug, Clone)]
pub struct MulAdd {
    /// Witness x.
    pub x: Option<Fr>,
    /// Witness y.
    pub y: Option<Fr>,
}

impl ConstraintSynthesizer<Fr> for MulAdd {
    fn generate_constraints(self, cs: ConstraintSystemRef<Fr>) -> Result<(), SynthesisError> {
        let missing = || SynthesisError::AssignmentMissing;
        let x = cs.new_witness_variable(|| self.x.ok_or_else(missing))?;
        let y = cs.new_witness_variable(|| self.y.ok_or_else(missing))?;
        let z = cs
            .new_input_variable(|| Ok(self.x.ok_or_else(missing)? * self.y.ok_or_else(missing)?))?;
        let w = cs
            .new_input_variable(|| Ok(self.x.ok_or_else(missing)? + self.y.ok_or_else(missing)?))?;
        cs.enforce_r1cs_constraint(|| lc!() + x, || lc!() + y, || lc!() + z)?;
        cs.enforce_r1cs_constraint(|| lc!() + x + y, || lc!() + Variable::One, || lc!() + w)?;
        Ok(())
    }
}

/// A circuit-specific setup of [`MulAdd`] from `seed`; returns the keys and the seeded RNG.
pub fn setup(seed: u64) -> (ProvingKey<Bn254>, VerifyingKey<Bn254>, StdRng) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (pk, vk) = Groth16::<Bn254>::circuit_specific_setup(MulAdd { x: None, y: None }, &mut rng)
        .expect("setup of a fixed circuit");
    (pk, vk, rng)
}

/// A proof for random x, y, and its public inputs [x·y, x + y].
pub fn prove(pk: &ProvingKey<Bn254>, rng: &mut StdRng) -> (Proof<Bn254>, Vec<Fr>) {
    let (x, y) = (Fr::rand(rng), Fr::rand(rng));
    let proof = Groth16::<Bn254>::prove(
        pk,
        MulAdd {
            x: Some(x),
            y: Some(y),
        },
        rng,
    )
    .expect("proving");
    (proof, vec![x * y, x + y])
}
