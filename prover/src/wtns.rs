//! circom's `.wtns` (version 2): a full witness, every wire's value in wire order, as
//! written by circom's witness calculators and `snarkjs wtns calculate`.

use ark_bn254::Fr;
use ark_ff::One;

use crate::Result;
use crate::binfile::{BinFile, N8, Writer, format_err};

const MAGIC: &[u8; 4] = b"wtns";
const KIND: &str = "wtns";

/// Parses a `.wtns` file. Every value must be canonical (< r) and wire 0 must be 1.
///
/// # Errors
/// [`crate::Error::Format`] naming what is wrong.
pub fn from_bytes(data: &[u8]) -> Result<Vec<Fr>> {
    let file = BinFile::parse(data, MAGIC, KIND, 2)?;
    let mut h = file.section(1, "header")?;
    h.prime::<Fr>("header")?;
    let n = h.u32()? as usize;
    h.finish()?;
    let mut s = file.section(2, "witness")?;
    if s.remaining() != n * N8 {
        return Err(format_err(
            KIND,
            format!(
                "witness section holds {} bytes, {n} values need {}",
                s.remaining(),
                n * N8
            ),
        ));
    }
    let w = (0..n)
        .map(|i| s.plain::<Fr>(&format!("witness[{i}]")))
        .collect::<Result<Vec<_>>>()?;
    if w.first() != Some(&Fr::one()) {
        return Err(format_err(KIND, "witness[0] (the constant wire) is not 1"));
    }
    Ok(w)
}

/// Serializes a witness as circom does (version 2, two sections).
pub fn to_bytes(witness: &[Fr]) -> Vec<u8> {
    let mut w = Writer::new(MAGIC, 2, 2);
    w.begin(1);
    w.prime::<Fr>();
    w.u32(witness.len() as u32);
    w.end();
    w.begin(2);
    for v in witness {
        w.plain(*v);
    }
    w.end();
    w.into_bytes()
}
