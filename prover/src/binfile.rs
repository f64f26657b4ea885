//! The iden3 binary container that circom's `.r1cs`, `.wtns` and snarkjs's `.zkey` share:
//! a 4-byte magic, a `u32` version, a `u32` section count, then sections of
//! `(u32 type, u64 length, bytes)`, all little-endian. Section order is not fixed.
//!
//! Also the field-element encodings these files use: plain little-endian integers
//! (`.r1cs`, `.wtns`), Montgomery form (`.zkey` points) and "double Montgomery"
//! (`.zkey` coefficients, `v·R²`).

use ark_bn254::{Fq, Fq2, Fr, G1Affine, G2Affine};
use ark_ec::AffineRepr;
use ark_ff::{BigInt, PrimeField, Zero};

use crate::{Error, Result};

/// Bytes in a BN254 base or scalar field element.
pub(crate) const N8: usize = 32;

pub(crate) fn format_err(kind: &'static str, reason: impl Into<String>) -> Error {
    Error::Format {
        kind,
        reason: reason.into(),
    }
}

/// A parsed container: its version and sections, borrowed from the input.
pub(crate) struct BinFile<'a> {
    kind: &'static str,
    sections: Vec<(u32, &'a [u8])>,
}

impl<'a> BinFile<'a> {
    /// Splits `data` into sections, checking the magic, that the version is at most
    /// `max_version`, and that every section lies inside the file.
    pub(crate) fn parse(
        data: &'a [u8],
        magic: &[u8; 4],
        kind: &'static str,
        max_version: u32,
    ) -> Result<Self> {
        let mut c = Reader::new(data, kind, "file header");
        if c.bytes(4)? != magic {
            return Err(format_err(
                kind,
                format!(
                    "not a .{kind} file (magic is not {:?})",
                    String::from_utf8_lossy(magic)
                ),
            ));
        }
        let version = c.u32()?;
        if version == 0 || version > max_version {
            return Err(format_err(
                kind,
                format!("version {version} is not supported (1..={max_version})"),
            ));
        }
        let n = c.u32()?;
        let mut sections = Vec::new();
        for _ in 0..n {
            let id = c.u32()?;
            let len = c.u64()?;
            let len = usize::try_from(len)
                .ok()
                .filter(|l| *l <= c.remaining())
                .ok_or_else(|| {
                    format_err(
                        kind,
                        format!("section {id} claims {len} bytes, past the end of the file"),
                    )
                })?;
            sections.push((id, c.bytes(len)?));
        }
        if c.remaining() != 0 {
            return Err(format_err(
                kind,
                format!("{} trailing bytes after the last section", c.remaining()),
            ));
        }
        Ok(BinFile { kind, sections })
    }

    /// The one section with this id, as a reader.
    pub(crate) fn section(&self, id: u32, name: &'static str) -> Result<Reader<'a>> {
        let mut found = self.sections.iter().filter(|(i, _)| *i == id);
        match (found.next(), found.next()) {
            (Some((_, data)), None) => Ok(Reader::new(data, self.kind, name)),
            (None, _) => Err(format_err(
                self.kind,
                format!("section {id} ({name}) is missing"),
            )),
            (Some(_), Some(_)) => Err(format_err(
                self.kind,
                format!("section {id} ({name}) appears more than once"),
            )),
        }
    }
}

/// A bounds-checked little-endian reader over one section.
pub(crate) struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    kind: &'static str,
    section: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(data: &'a [u8], kind: &'static str, section: &'static str) -> Self {
        Reader {
            data,
            pos: 0,
            kind,
            section,
        }
    }

    pub(crate) fn err(&self, reason: impl std::fmt::Display) -> Error {
        format_err(
            self.kind,
            format!("{} at byte {}: {reason}", self.section, self.pos),
        )
    }

    pub(crate) fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    /// Fails unless the section has been read to its end.
    pub(crate) fn finish(&self) -> Result<()> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(self.err(format!("{} unexpected bytes at the end", self.remaining())))
        }
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.err(format!(
                "needs {n} bytes, {} left (truncated)",
                self.remaining()
            )));
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().unwrap()))
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into().unwrap()))
    }

    /// A `u32` count, refusing one whose `item_size`-byte items cannot fit in what is left
    /// (so a corrupt count never drives a huge allocation).
    pub(crate) fn count(&mut self, what: &str, item_size: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        self.check_fits(what, n, item_size)?;
        Ok(n)
    }

    pub(crate) fn check_fits(&self, what: &str, n: usize, item_size: usize) -> Result<()> {
        if n.saturating_mul(item_size) > self.remaining() {
            return Err(self.err(format!(
                "{n} {what} of at least {item_size} bytes cannot fit in the {} bytes left",
                self.remaining()
            )));
        }
        Ok(())
    }

    fn limbs(&mut self) -> Result<BigInt<4>> {
        let b = self.bytes(N8)?;
        let mut l = [0u64; 4];
        for (i, limb) in l.iter_mut().enumerate() {
            *limb = u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap());
        }
        Ok(BigInt(l))
    }

    /// Checks a field-size header entry (`n8` then the prime, little-endian) against `F`.
    pub(crate) fn prime<F: PrimeField<BigInt = BigInt<4>>>(&mut self, what: &str) -> Result<()> {
        let n8 = self.u32()?;
        if n8 as usize != N8 {
            return Err(self.err(format!("{what}: field size {n8} bytes, BN254 needs 32")));
        }
        if self.limbs()? != F::MODULUS {
            return Err(self.err(format!(
                "{what}: the prime is not BN254's (only bn128/BN254 is supported)"
            )));
        }
        Ok(())
    }

    /// A plain little-endian element of `F`, refused unless canonical (< modulus).
    pub(crate) fn plain<F: PrimeField<BigInt = BigInt<4>>>(&mut self, what: &str) -> Result<F> {
        let v = self.limbs()?;
        F::from_bigint(v).ok_or_else(|| self.err(format!("{what}: {v} is not below the modulus")))
    }

    /// An element stored in Montgomery form (`x·R`), refused unless canonical.
    pub(crate) fn mont<F: Field32>(&mut self, what: &str) -> Result<F> {
        let v = self.limbs()?;
        if v >= F::MODULUS {
            return Err(self.err(format!("{what}: Montgomery value is not below the modulus")));
        }
        Ok(F::from_mont(v))
    }

    /// An Fr element stored as `v·R²` (snarkjs's coefficient encoding).
    pub(crate) fn double_mont_fr(&mut self, what: &str) -> Result<Fr> {
        let once: Fr = self.mont(what)?;
        Ok(Fr::from_mont(once.into_bigint()))
    }

    /// A G1 point as affine Montgomery `x, y`; all-zero is the point at infinity. Checked
    /// on the curve (BN254 G1 has cofactor 1, so that is also the subgroup check).
    pub(crate) fn g1(&mut self, what: &str) -> Result<G1Affine> {
        let x: Fq = self.mont(what)?;
        let y: Fq = self.mont(what)?;
        if x.is_zero() && y.is_zero() {
            return Ok(G1Affine::zero());
        }
        let p = G1Affine::new_unchecked(x, y);
        if !p.is_on_curve() {
            return Err(self.err(format!("{what}: G1 point is not on the curve")));
        }
        Ok(p)
    }

    /// A G2 point as affine Montgomery `x.c0, x.c1, y.c0, y.c1`; all-zero is infinity.
    /// Checked on the twist and in the prime-order subgroup.
    pub(crate) fn g2(&mut self, what: &str) -> Result<G2Affine> {
        let p = self.g2_on_curve(what)?;
        if !p.is_in_correct_subgroup_assuming_on_curve() {
            return Err(self.err(format!(
                "{what}: G2 point is not in the prime-order subgroup"
            )));
        }
        Ok(p)
    }

    /// A G2 point checked on the twist only (see [`crate::zkey`] for when that suffices).
    pub(crate) fn g2_on_curve(&mut self, what: &str) -> Result<G2Affine> {
        let x = Fq2::new(self.mont(what)?, self.mont(what)?);
        let y = Fq2::new(self.mont(what)?, self.mont(what)?);
        if x.is_zero() && y.is_zero() {
            return Ok(G2Affine::zero());
        }
        let p = G2Affine::new_unchecked(x, y);
        if !p.is_on_curve() {
            return Err(self.err(format!("{what}: G2 point is not on the twist curve")));
        }
        Ok(p)
    }
}

/// BN254's two fields, whose Montgomery representation these files store directly.
pub(crate) trait Field32: PrimeField<BigInt = BigInt<4>> {
    /// The element whose Montgomery representation is `v` (`v` already < modulus).
    fn from_mont(v: BigInt<4>) -> Self;
    /// This element's Montgomery representation.
    fn mont(&self) -> BigInt<4>;
}

impl Field32 for Fq {
    fn from_mont(v: BigInt<4>) -> Self {
        Fq::new_unchecked(v)
    }
    fn mont(&self) -> BigInt<4> {
        self.0
    }
}

impl Field32 for Fr {
    fn from_mont(v: BigInt<4>) -> Self {
        Fr::new_unchecked(v)
    }
    fn mont(&self) -> BigInt<4> {
        self.0
    }
}

/// Little-endian writer for the same container.
pub(crate) struct Writer {
    buf: Vec<u8>,
    section_start: Option<usize>,
}

impl Writer {
    pub(crate) fn new(magic: &[u8; 4], version: u32, n_sections: u32) -> Self {
        let mut buf = Vec::new();
        buf.extend_from_slice(magic);
        buf.extend_from_slice(&version.to_le_bytes());
        buf.extend_from_slice(&n_sections.to_le_bytes());
        Writer {
            buf,
            section_start: None,
        }
    }

    pub(crate) fn begin(&mut self, id: u32) {
        debug_assert!(self.section_start.is_none());
        self.buf.extend_from_slice(&id.to_le_bytes());
        self.buf.extend_from_slice(&0u64.to_le_bytes());
        self.section_start = Some(self.buf.len());
    }

    pub(crate) fn end(&mut self) {
        let start = self.section_start.take().expect("end without begin");
        let len = (self.buf.len() - start) as u64;
        self.buf[start - 8..start].copy_from_slice(&len.to_le_bytes());
    }

    pub(crate) fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    fn limbs(&mut self, v: BigInt<4>) {
        for l in v.0 {
            self.buf.extend_from_slice(&l.to_le_bytes());
        }
    }

    pub(crate) fn prime<F: PrimeField<BigInt = BigInt<4>>>(&mut self) {
        self.u32(N8 as u32);
        self.limbs(F::MODULUS);
    }

    pub(crate) fn plain<F: PrimeField<BigInt = BigInt<4>>>(&mut self, v: F) {
        self.limbs(v.into_bigint());
    }

    pub(crate) fn mont<F: Field32>(&mut self, v: F) {
        self.limbs(v.mont());
    }

    /// `v·R²`: the element whose plain value is `v`'s representation, in representation.
    pub(crate) fn double_mont_fr(&mut self, v: Fr) {
        let once = Fr::from_bigint(v.mont()).expect("a representation is below the modulus");
        self.limbs(once.mont());
    }

    pub(crate) fn g1(&mut self, p: &G1Affine) {
        match p.xy() {
            Some((x, y)) => {
                self.mont(x);
                self.mont(y);
            }
            None => self.bytes(&[0u8; 2 * N8]),
        }
    }

    pub(crate) fn g2(&mut self, p: &G2Affine) {
        match p.xy() {
            Some((x, y)) => {
                self.mont(x.c0);
                self.mont(x.c1);
                self.mont(y.c0);
                self.mont(y.c1);
            }
            None => self.bytes(&[0u8; 4 * N8]),
        }
    }

    pub(crate) fn into_bytes(self) -> Vec<u8> {
        debug_assert!(self.section_start.is_none());
        self.buf
    }
}
