//! circom's `.r1cs` (binary, version 1): the constraint system a circuit compiles to.
//!
//! Wire 0 is the constant 1, then the public outputs, the public inputs, the private
//! inputs, then internal wires. Read one with [`R1cs::from_bytes`]; [`crate::setup`] turns
//! it into a proving key. Only BN254 (circom's `bn128`) files are accepted.

use ark_bn254::Fr;

use crate::binfile::{BinFile, N8, Reader, Writer, format_err};
use crate::{Error, Result};

/// One linear combination: `(wire, coefficient)` pairs.
pub type Lc = Vec<(u32, Fr)>;

/// A rank-1 constraint `⟨a,w⟩·⟨b,w⟩ = ⟨c,w⟩`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Constraint {
    /// The left factor.
    pub a: Lc,
    /// The right factor.
    pub b: Lc,
    /// The product.
    pub c: Lc,
}

/// A parsed `.r1cs` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct R1cs {
    /// Wires, including wire 0 (the constant 1).
    pub n_wires: u32,
    /// Public outputs (wires `1..=n_pub_out`).
    pub n_pub_out: u32,
    /// Public inputs (after the outputs).
    pub n_pub_in: u32,
    /// Private inputs.
    pub n_prv_in: u32,
    /// Labels in the symbol table the compiler produced (≥ wires).
    pub n_labels: u64,
    /// The constraints.
    pub constraints: Vec<Constraint>,
    /// For each wire, its label id (section 3).
    pub wire_to_label: Vec<u64>,
}

const MAGIC: &[u8; 4] = b"r1cs";
const KIND: &str = "r1cs";

impl R1cs {
    /// Public signals, outputs first then inputs: the verifier's `nPublic`.
    pub fn n_public(&self) -> usize {
        (self.n_pub_out + self.n_pub_in) as usize
    }

    /// Parses a `.r1cs` file, checking the prime, every wire index and every coefficient.
    ///
    /// # Errors
    /// [`Error::Format`] naming the section, the byte offset and what is wrong.
    pub fn from_bytes(data: &[u8]) -> Result<R1cs> {
        let file = BinFile::parse(data, MAGIC, KIND, 1)?;
        let mut h = file.section(1, "header")?;
        h.prime::<Fr>("header")?;
        let n_wires = h.u32()?;
        let n_pub_out = h.u32()?;
        let n_pub_in = h.u32()?;
        let n_prv_in = h.u32()?;
        let n_labels = h.u64()?;
        let n_constraints = h.u32()?;
        h.finish()?;
        if n_wires == 0 {
            return Err(format_err(
                KIND,
                "header: no wires (wire 0 is the constant 1)",
            ));
        }
        let declared = 1u64 + u64::from(n_pub_out) + u64::from(n_pub_in) + u64::from(n_prv_in);
        if declared > u64::from(n_wires) {
            return Err(format_err(
                KIND,
                format!(
                    "header: 1 + {n_pub_out} outputs + {n_pub_in} public + {n_prv_in} private \
                     inputs exceed the {n_wires} wires"
                ),
            ));
        }

        let mut s = file.section(2, "constraints")?;
        // Each constraint holds at least three u32 term counts.
        s.check_fits("constraints", n_constraints as usize, 12)?;
        let mut constraints = Vec::with_capacity(n_constraints as usize);
        for _ in 0..n_constraints {
            let a = lc(&mut s, n_wires)?;
            let b = lc(&mut s, n_wires)?;
            let c = lc(&mut s, n_wires)?;
            constraints.push(Constraint { a, b, c });
        }
        s.finish()?;

        let mut m = file.section(3, "wire-to-label map")?;
        m.check_fits("wire labels", n_wires as usize, 8)?;
        let wire_to_label = (0..n_wires).map(|_| m.u64()).collect::<Result<Vec<_>>>()?;
        m.finish()?;

        Ok(R1cs {
            n_wires,
            n_pub_out,
            n_pub_in,
            n_prv_in,
            n_labels,
            constraints,
            wire_to_label,
        })
    }

    /// Serializes as circom does (sections 2, 1, 3 in that order), byte for byte.
    pub fn to_bytes(&self) -> Vec<u8> {
        // circom writes the constraints before the header.
        let mut w = Writer::new(MAGIC, 1, 3);
        w.begin(2);
        for c in &self.constraints {
            for lc in [&c.a, &c.b, &c.c] {
                w.u32(lc.len() as u32);
                for (wire, coeff) in lc {
                    w.u32(*wire);
                    w.plain(*coeff);
                }
            }
        }
        w.end();
        w.begin(1);
        w.prime::<Fr>();
        for v in [self.n_wires, self.n_pub_out, self.n_pub_in, self.n_prv_in] {
            w.u32(v);
        }
        w.u64(self.n_labels);
        w.u32(self.constraints.len() as u32);
        w.end();
        w.begin(3);
        for l in &self.wire_to_label {
            w.u64(*l);
        }
        w.end();
        w.into_bytes()
    }

    /// Checks that `witness` satisfies every constraint; returns the first that fails.
    ///
    /// # Errors
    /// [`Error::Witness`] with the index of the first unsatisfied constraint.
    pub fn check_witness(&self, witness: &[Fr]) -> Result<()> {
        if witness.len() != self.n_wires as usize {
            return Err(Error::Witness(format!(
                "the witness has {} values, the circuit {} wires",
                witness.len(),
                self.n_wires
            )));
        }
        let eval = |lc: &Lc| -> Fr { lc.iter().map(|(i, c)| *c * witness[*i as usize]).sum() };
        for (i, c) in self.constraints.iter().enumerate() {
            if eval(&c.a) * eval(&c.b) != eval(&c.c) {
                return Err(Error::Witness(format!("constraint {i} is not satisfied")));
            }
        }
        Ok(())
    }
}

fn lc(s: &mut Reader<'_>, n_wires: u32) -> Result<Lc> {
    let n = s.count("terms", 4 + N8)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let wire = s.u32()?;
        if wire >= n_wires {
            return Err(s.err(format!(
                "wire {wire} is out of range (the circuit has {n_wires})"
            )));
        }
        out.push((wire, s.plain::<Fr>("coefficient")?));
    }
    Ok(out)
}
