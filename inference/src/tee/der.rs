//! A minimal DER reader: definite-length TLVs, enough to walk X.509 certificates.

use super::malformed;
use crate::Result;

/// One DER element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tlv<'a> {
    /// The tag byte (low-tag-number form only).
    pub tag: u8,
    /// The contents.
    pub body: &'a [u8],
    /// The whole element, tag and length included.
    pub raw: &'a [u8],
}

/// Universal tags used here.
pub mod tag {
    /// BOOLEAN.
    pub const BOOLEAN: u8 = 0x01;
    /// INTEGER.
    pub const INTEGER: u8 = 0x02;
    /// BIT STRING.
    pub const BIT_STRING: u8 = 0x03;
    /// OCTET STRING.
    pub const OCTET_STRING: u8 = 0x04;
    /// OBJECT IDENTIFIER.
    pub const OID: u8 = 0x06;
    /// UTCTime.
    pub const UTC_TIME: u8 = 0x17;
    /// GeneralizedTime.
    pub const GENERALIZED_TIME: u8 = 0x18;
    /// SEQUENCE.
    pub const SEQUENCE: u8 = 0x30;
}

/// Reads one element from the front of `input`; returns it and the rest.
pub fn read(input: &[u8]) -> Result<(Tlv<'_>, &[u8])> {
    let (&t, rest) = input
        .split_first()
        .ok_or_else(|| malformed("DER: unexpected end"))?;
    if t & 0x1f == 0x1f {
        return Err(malformed("DER: high tag numbers are not supported"));
    }
    let (&l0, mut rest) = rest
        .split_first()
        .ok_or_else(|| malformed("DER: no length"))?;
    let len = if l0 < 0x80 {
        usize::from(l0)
    } else {
        let n = usize::from(l0 & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return Err(malformed("DER: bad length"));
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |a, b| (a << 8) | usize::from(*b));
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return Err(malformed("DER: element longer than its container"));
    }
    let header = input.len() - rest.len();
    Ok((
        Tlv {
            tag: t,
            body: &rest[..len],
            raw: &input[..header + len],
        },
        &rest[len..],
    ))
}

/// Reads one element that must have tag `want`.
pub fn expect<'a>(input: &'a [u8], want: u8, what: &str) -> Result<(Tlv<'a>, &'a [u8])> {
    let (t, rest) = read(input)?;
    if t.tag != want {
        return Err(malformed(format!(
            "DER: {what}: tag {:#04x}, expected {want:#04x}",
            t.tag
        )));
    }
    Ok((t, rest))
}

/// Every element of a constructed element's contents.
pub fn children(mut body: &[u8]) -> Result<Vec<Tlv<'_>>> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let (t, rest) = read(body)?;
        out.push(t);
        body = rest;
    }
    Ok(out)
}

/// An OID's dotted form.
pub fn oid_string(body: &[u8]) -> String {
    let mut parts: Vec<u64> = Vec::new();
    let mut v: u64 = 0;
    for (i, b) in body.iter().enumerate() {
        v = (v << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if parts.is_empty() && i < body.len() {
                let first = (v / 40).min(2);
                parts.push(first);
                parts.push(v - first * 40);
            } else {
                parts.push(v);
            }
            v = 0;
        }
    }
    parts
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(".")
}

/// A small non-negative INTEGER's value.
pub fn small_uint(body: &[u8]) -> Result<u64> {
    let body = match body {
        [0, rest @ ..] if !rest.is_empty() => rest,
        b => b,
    };
    if body.len() > 8 || body.first().is_some_and(|b| b & 0x80 != 0) {
        return Err(malformed("DER: integer out of range"));
    }
    Ok(body.iter().fold(0u64, |a, b| (a << 8) | u64::from(*b)))
}
