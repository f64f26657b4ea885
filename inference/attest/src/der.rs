//! A strict DER reader (ITU-T X.690, distinguished encoding rules): enough to walk X.509
//! certificates, CRLs and OCSP responses.
//!
//! Only DER is read: low tag numbers, definite lengths in their minimal form (no
//! indefinite lengths, no long form for lengths under 128, no leading zero length bytes),
//! SEQUENCE and SET constructed and every other universal type primitive, minimal
//! INTEGERs, BOOLEANs of 0x00 or 0xFF, complete OIDs with minimal sub-identifiers, BIT
//! STRINGs whose unused bits are zero, times of the RFC 5280 forms (`YYMMDDHHMMSSZ`,
//! `YYYYMMDDHHMMSSZ`) with real calendar dates. Anything else is
//! [`crate::Error::EvidenceMalformed`] naming the rule. Every function here returns an
//! error for bad input; none panics.

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

/// Tags used here.
pub mod tag {
    /// BOOLEAN.
    pub const BOOLEAN: u8 = 0x01;
    /// INTEGER.
    pub const INTEGER: u8 = 0x02;
    /// BIT STRING.
    pub const BIT_STRING: u8 = 0x03;
    /// OCTET STRING.
    pub const OCTET_STRING: u8 = 0x04;
    /// NULL.
    pub const NULL: u8 = 0x05;
    /// OBJECT IDENTIFIER.
    pub const OID: u8 = 0x06;
    /// ENUMERATED.
    pub const ENUMERATED: u8 = 0x0a;
    /// UTCTime.
    pub const UTC_TIME: u8 = 0x17;
    /// GeneralizedTime.
    pub const GENERALIZED_TIME: u8 = 0x18;
    /// SEQUENCE.
    pub const SEQUENCE: u8 = 0x30;
    /// SET.
    pub const SET: u8 = 0x31;
    /// Context-specific, constructed `[n]` (EXPLICIT tagging).
    pub const fn explicit(n: u8) -> u8 {
        0xa0 | n
    }
    /// Context-specific, primitive `[n]` (IMPLICIT tagging of a primitive type).
    pub const fn implicit(n: u8) -> u8 {
        0x80 | n
    }
}

/// Reads one element from the front of `input`; returns it and the rest.
///
/// # Errors
/// [`crate::Error::EvidenceMalformed`] for a truncated element or one not in DER.
pub fn read(input: &[u8]) -> Result<(Tlv<'_>, &[u8])> {
    let (&t, rest) = input
        .split_first()
        .ok_or_else(|| malformed("DER: unexpected end"))?;
    if t & 0x1f == 0x1f {
        return Err(malformed("DER: high tag numbers are not supported"));
    }
    if t & 0xc0 == 0 {
        // universal class: SEQUENCE and SET are constructed, everything else primitive
        let number = t & 0x1f;
        let constructed = t & 0x20 != 0;
        if number == 0 {
            return Err(malformed(
                "DER: end-of-contents marker (indefinite lengths are BER, not DER)",
            ));
        }
        if constructed != matches!(number, 0x10 | 0x11) {
            return Err(malformed(format!(
                "DER: tag {t:#04x} has the wrong constructed bit (constructed strings are BER, \
                 not DER)"
            )));
        }
    }
    let (&l0, mut rest) = rest
        .split_first()
        .ok_or_else(|| malformed("DER: no length"))?;
    let len = if l0 < 0x80 {
        usize::from(l0)
    } else if l0 == 0x80 {
        return Err(malformed("DER: indefinite length (BER, not DER)"));
    } else {
        let n = usize::from(l0 & 0x7f);
        if n > 4 {
            return Err(malformed(format!("DER: a {n}-byte length")));
        }
        let bytes = rest
            .get(..n)
            .ok_or_else(|| malformed("DER: length runs past the end"))?;
        if bytes[0] == 0 {
            return Err(malformed(
                "DER: non-minimal length encoding (leading zero byte)",
            ));
        }
        let len = bytes.iter().fold(0usize, |a, b| (a << 8) | usize::from(*b));
        if len < 0x80 {
            return Err(malformed(format!(
                "DER: non-minimal length encoding (long form for {len})"
            )));
        }
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
///
/// # Errors
/// As [`read`], and for another tag.
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

/// Reads exactly one element with tag `want` filling all of `input` (no trailing bytes).
///
/// # Errors
/// As [`expect`], and for bytes after the element.
pub fn single<'a>(input: &'a [u8], want: u8, what: &str) -> Result<Tlv<'a>> {
    let (t, rest) = expect(input, want, what)?;
    if !rest.is_empty() {
        return Err(malformed(format!(
            "DER: {} bytes after the {what}",
            rest.len()
        )));
    }
    Ok(t)
}

/// Every element of a constructed element's contents.
///
/// # Errors
/// As [`read`].
pub fn children(mut body: &[u8]) -> Result<Vec<Tlv<'_>>> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let (t, rest) = read(body)?;
        out.push(t);
        body = rest;
    }
    Ok(out)
}

/// Reads the fields of a constructed element in order.
#[derive(Debug, Clone)]
pub struct Fields<'a> {
    rest: &'a [u8],
    what: &'static str,
}

impl<'a> Fields<'a> {
    /// The fields of `body`, the contents of a `what` (named in errors).
    pub fn new(body: &'a [u8], what: &'static str) -> Fields<'a> {
        Fields { rest: body, what }
    }

    /// The next field, which must have tag `want`.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceMalformed`] when it is missing or has another tag.
    pub fn next(&mut self, want: u8, field: &str) -> Result<Tlv<'a>> {
        if self.rest.is_empty() {
            return Err(malformed(format!("{}: no {field}", self.what)));
        }
        let (t, rest) = read(self.rest)?;
        if t.tag != want {
            return Err(malformed(format!(
                "{}: {field}: tag {:#04x}, expected {want:#04x}",
                self.what, t.tag
            )));
        }
        self.rest = rest;
        Ok(t)
    }

    /// The next field of any tag.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceMalformed`] when it is missing.
    pub fn any(&mut self, field: &str) -> Result<Tlv<'a>> {
        if self.rest.is_empty() {
            return Err(malformed(format!("{}: no {field}", self.what)));
        }
        let (t, rest) = read(self.rest)?;
        self.rest = rest;
        Ok(t)
    }

    /// The next field if it has tag `want` (an OPTIONAL or DEFAULT field).
    ///
    /// # Errors
    /// As [`read`].
    pub fn optional(&mut self, want: u8) -> Result<Option<Tlv<'a>>> {
        if self.rest.first() != Some(&want) {
            return Ok(None);
        }
        let (t, rest) = read(self.rest)?;
        self.rest = rest;
        Ok(Some(t))
    }

    /// Whether every field has been read.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// Checks that every field has been read.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceMalformed`] for a field after the last one known.
    pub fn finish(self) -> Result<()> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(malformed(format!(
                "{}: unexpected field after the last one",
                self.what
            )))
        }
    }
}

/// An OID's dotted form.
///
/// # Errors
/// [`crate::Error::EvidenceMalformed`] for an empty or incomplete OID (the last byte
/// continues), a sub-identifier with a leading 0x80 byte (not minimal), or one over 64
/// bits.
pub fn oid(body: &[u8]) -> Result<String> {
    if body.last().is_none_or(|b| b & 0x80 != 0) {
        return Err(malformed("DER: incomplete OBJECT IDENTIFIER"));
    }
    let mut parts: Vec<u64> = Vec::new();
    let mut v: u64 = 0;
    let mut start = true;
    for b in body {
        if start && *b == 0x80 {
            return Err(malformed(
                "DER: OBJECT IDENTIFIER sub-identifier not minimal",
            ));
        }
        if v >> 57 != 0 {
            return Err(malformed("DER: OBJECT IDENTIFIER sub-identifier too large"));
        }
        v = (v << 7) | u64::from(b & 0x7f);
        start = b & 0x80 == 0;
        if start {
            if parts.is_empty() {
                let first = (v / 40).min(2);
                parts.push(first);
                parts.push(v - first * 40);
            } else {
                parts.push(v);
            }
            v = 0;
        }
    }
    Ok(parts
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join("."))
}

/// An INTEGER's contents, checked to be minimal (two's complement, no redundant leading
/// 0x00 or 0xFF byte).
///
/// # Errors
/// [`crate::Error::EvidenceMalformed`] for an empty or non-minimal INTEGER.
pub fn integer(body: &[u8]) -> Result<&[u8]> {
    match body {
        [] => Err(malformed("DER: empty INTEGER")),
        [0, b, ..] if b & 0x80 == 0 => Err(malformed("DER: non-minimal INTEGER")),
        [0xff, b, ..] if b & 0x80 != 0 => Err(malformed("DER: non-minimal INTEGER")),
        b => Ok(b),
    }
}

/// A small non-negative INTEGER's value.
///
/// # Errors
/// [`crate::Error::EvidenceMalformed`] for a non-minimal, negative or over-64-bit one.
pub fn small_uint(body: &[u8]) -> Result<u64> {
    let body = integer(body)?;
    if body[0] & 0x80 != 0 {
        return Err(malformed("DER: negative integer"));
    }
    let body = match body {
        [0, rest @ ..] => rest,
        b => b,
    };
    if body.len() > 8 {
        return Err(malformed("DER: integer out of range"));
    }
    Ok(body.iter().fold(0u64, |a, b| (a << 8) | u64::from(*b)))
}

/// A BOOLEAN's value.
///
/// # Errors
/// [`crate::Error::EvidenceMalformed`] unless it is one byte, 0x00 or 0xFF.
pub fn boolean(body: &[u8]) -> Result<bool> {
    match body {
        [0] => Ok(false),
        [0xff] => Ok(true),
        _ => Err(malformed("DER: BOOLEAN other than 0x00 or 0xFF")),
    }
}

/// A BIT STRING's bits and its count of unused bits in the last byte.
///
/// # Errors
/// [`crate::Error::EvidenceMalformed`] for an empty one, more than 7 unused bits, unused
/// bits without a byte to hold them, or unused bits that are not zero.
pub fn bit_string(body: &[u8]) -> Result<(&[u8], u8)> {
    let (&unused, bits) = body
        .split_first()
        .ok_or_else(|| malformed("DER: empty BIT STRING"))?;
    if unused > 7 || (bits.is_empty() && unused != 0) {
        return Err(malformed("DER: BIT STRING with a bad unused-bit count"));
    }
    if bits.last().is_some_and(|b| b & ((1u8 << unused) - 1) != 0) {
        return Err(malformed("DER: BIT STRING unused bits are not zero"));
    }
    Ok((bits, unused))
}

/// A BIT STRING holding whole bytes (keys, signatures).
///
/// # Errors
/// As [`bit_string`], and for unused bits.
pub fn bit_string_bytes(body: &[u8]) -> Result<&[u8]> {
    match bit_string(body)? {
        (bits, 0) => Ok(bits),
        _ => Err(malformed("DER: BIT STRING is not whole bytes")),
    }
}

/// Days from 1970-01-01 to the civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Unix seconds of a UTC date and time, or `None` when it is not a real one (seconds
/// 0–59: DER has no leap seconds).
pub(crate) fn civil(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64) -> Option<i64> {
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_days = match mo {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if !(0..=9999).contains(&y)
        || !(1..=month_days).contains(&d)
        || !(0..=23).contains(&h)
        || !(0..=59).contains(&mi)
        || !(0..=59).contains(&s)
    {
        return None;
    }
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s)
}

/// A UTCTime or GeneralizedTime element as Unix seconds: `YYMMDDHHMMSSZ` (years 1950–2049)
/// or `YYYYMMDDHHMMSSZ`, no fractions, no offsets.
///
/// # Errors
/// [`crate::Error::EvidenceMalformed`] for another tag, form or an impossible date.
pub fn time(t: &Tlv<'_>) -> Result<i64> {
    let s = t.body;
    let bad = || {
        malformed(format!(
            "DER: time {:?} is not of the DER form",
            String::from_utf8_lossy(s)
        ))
    };
    let (year_len, len) = match t.tag {
        tag::UTC_TIME => (2, 13),
        tag::GENERALIZED_TIME => (4, 15),
        other => {
            return Err(malformed(format!(
                "DER: tag {other:#04x} where a time was expected"
            )));
        }
    };
    if s.len() != len || s[len - 1] != b'Z' || !s[..len - 1].iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let num =
        |r: std::ops::Range<usize>| s[r].iter().fold(0i64, |a, b| a * 10 + i64::from(b - b'0'));
    let mut y = num(0..year_len);
    if year_len == 2 {
        y += if y >= 50 { 1900 } else { 2000 };
    }
    let at = year_len;
    civil(
        y,
        num(at..at + 2),
        num(at + 2..at + 4),
        num(at + 4..at + 6),
        num(at + 6..at + 8),
        num(at + 8..at + 10),
    )
    .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(input: &[u8]) -> String {
        match read(input) {
            Err(e) => e.to_string(),
            Ok(t) => panic!("{input:02x?} read as {t:?}"),
        }
    }

    #[test]
    fn lengths_are_definite_and_minimal() {
        let (t, rest) = read(&[0x04, 0x02, 1, 2, 9]).unwrap();
        assert_eq!((t.tag, t.body, rest), (0x04, &[1u8, 2][..], &[9u8][..]));
        let long: Vec<u8> = [0x04, 0x81, 0x80].into_iter().chain([7; 0x80]).collect();
        assert_eq!(read(&long).unwrap().0.body.len(), 0x80);
        assert!(err(&[0x30, 0x80, 0, 0]).contains("indefinite"));
        assert!(err(&[0x04, 0x81, 0x02, 1, 2]).contains("non-minimal length"));
        let padded: Vec<u8> = [0x04, 0x82, 0x00, 0x80]
            .into_iter()
            .chain([7; 0x80])
            .collect();
        assert!(err(&padded).contains("non-minimal length"));
        assert!(err(&[0x04, 0x85, 1, 1, 1, 1, 1]).contains("5-byte length"));
        assert!(err(&[0x04, 0x03, 1, 2]).contains("longer than its container"));
        assert!(err(&[0x04]).contains("no length"));
        assert!(err(&[0x1f, 0x01, 0]).contains("high tag"));
        assert!(err(&[0x24, 0x00]).contains("constructed bit"));
        assert!(err(&[0x10, 0x00]).contains("constructed bit"));
        assert!(err(&[0x00, 0x00]).contains("end-of-contents"));
        assert!(single(&[0x05, 0x00, 0x00], tag::NULL, "x").is_err());
        single(&[0x05, 0x00], tag::NULL, "x").unwrap();
    }

    #[test]
    fn values_are_in_their_der_forms() {
        assert_eq!(
            oid(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d]).unwrap(),
            "1.2.840.113549"
        );
        assert_eq!(oid(&[0x55, 0x1d, 0x13]).unwrap(), "2.5.29.19");
        assert!(oid(&[]).is_err());
        assert!(oid(&[0x2a, 0x86]).is_err(), "incomplete");
        assert!(oid(&[0x2a, 0x80, 0x01]).is_err(), "non-minimal");
        assert!(
            oid(&[
                0x2a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f
            ])
            .is_err()
        );
        assert_eq!(integer(&[0]).unwrap(), &[0]);
        assert_eq!(integer(&[0, 0x80]).unwrap(), &[0, 0x80]);
        assert!(integer(&[]).is_err());
        assert!(integer(&[0, 0x7f]).is_err());
        assert!(integer(&[0xff, 0x80]).is_err());
        assert_eq!(small_uint(&[0, 0xff]).unwrap(), 255);
        assert!(small_uint(&[0x80]).is_err());
        assert!(small_uint(&[1; 9]).is_err());
        assert_eq!(
            (boolean(&[0xff]).unwrap(), boolean(&[0]).unwrap()),
            (true, false)
        );
        assert!(boolean(&[1]).is_err());
        assert!(boolean(&[]).is_err());
        assert_eq!(bit_string(&[1, 0x86]).unwrap(), (&[0x86u8][..], 1));
        assert!(bit_string(&[1, 0x87]).is_err(), "unused bit set");
        assert!(bit_string(&[8, 0]).is_err());
        assert!(bit_string(&[1]).is_err());
        assert!(bit_string_bytes(&[1, 0x86]).is_err());
    }

    #[test]
    fn times_are_real_dates_in_the_rfc_5280_forms() {
        let t = |tag: u8, s: &str| {
            time(&Tlv {
                tag,
                body: s.as_bytes(),
                raw: &[],
            })
        };
        assert_eq!(t(tag::UTC_TIME, "700101000000Z").unwrap(), 0);
        assert_eq!(t(tag::UTC_TIME, "491231235959Z").unwrap(), 2_524_607_999);
        assert_eq!(
            t(tag::GENERALIZED_TIME, "20240229120000Z").unwrap(),
            1_709_208_000
        );
        for bad in [
            "20230229120000Z",
            "20241301000000Z",
            "2024010100000Z",
            "20240101000060Z",
        ] {
            assert!(t(tag::GENERALIZED_TIME, bad).is_err(), "{bad}");
        }
        for bad in [
            "+00101000000Z",
            "70010100000-Z",
            "700101000000+",
            "7001010000000",
        ] {
            assert!(t(tag::UTC_TIME, bad).is_err(), "{bad}");
        }
        assert!(t(tag::GENERALIZED_TIME, "20240101000000.5Z").is_err());
        assert!(t(tag::OCTET_STRING, "700101000000Z").is_err());
    }
}
