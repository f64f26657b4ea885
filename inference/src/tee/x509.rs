//! X.509 certificates, as far as attestation chains need them: names compared byte for
//! byte, validity at a given time, the subject key, extensions by OID, and the issuer's
//! signature (RSA-PSS SHA-384 for AMD's keys, ECDSA P-384 SHA-384 for VCEKs and NVIDIA's)
//! checked with `ring`. Serial numbers are not interpreted (real VCEKs carry 0).

use super::der::{self, Tlv, tag};
use super::{invalid, malformed};
use crate::Result;

const RSA_PSS: &str = "1.2.840.113549.1.1.10";
const ECDSA_SHA384: &str = "1.2.840.10045.4.3.3";
/// DER of the SHA-384 OID, which an RSA-PSS certificate's parameters must name.
const SHA384_OID: &[u8] = &[
    0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02,
];

/// The signature algorithms accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigAlg {
    /// RSASSA-PSS with SHA-384, MGF1-SHA-384, 48-byte salt.
    RsaPssSha384,
    /// ECDSA with SHA-384 (P-384 keys), DER signature.
    EcdsaSha384,
}

/// A parsed certificate.
#[derive(Debug, Clone)]
pub struct Certificate {
    der: Vec<u8>,
    tbs: std::ops::Range<usize>,
    sig_alg: SigAlg,
    signature: Vec<u8>,
    issuer: Vec<u8>,
    subject: Vec<u8>,
    /// The subject's common name (for messages).
    pub common_name: String,
    /// Validity start, seconds since the Unix epoch.
    pub not_before: i64,
    /// Validity end, seconds since the Unix epoch.
    pub not_after: i64,
    /// The subject public key's bits (an RSAPublicKey, or an uncompressed EC point).
    pub public_key: Vec<u8>,
    extensions: Vec<(String, Vec<u8>)>,
}

fn algorithm(t: &Tlv<'_>) -> Result<(String, Vec<u8>)> {
    let parts = der::children(t.body)?;
    let oid = parts
        .first()
        .filter(|o| o.tag == tag::OID)
        .ok_or_else(|| malformed("certificate: algorithm without an OID"))?;
    Ok((
        der::oid_string(oid.body),
        parts.get(1).map(|p| p.raw.to_vec()).unwrap_or_default(),
    ))
}

fn read_sig_alg(t: &Tlv<'_>) -> Result<SigAlg> {
    let (oid, params) = algorithm(t)?;
    match oid.as_str() {
        RSA_PSS if params.windows(SHA384_OID.len()).any(|w| w == SHA384_OID) => {
            Ok(SigAlg::RsaPssSha384)
        }
        ECDSA_SHA384 => Ok(SigAlg::EcdsaSha384),
        other => Err(malformed(format!(
            "certificate: signature algorithm {other} is not RSA-PSS SHA-384 or ECDSA SHA-384"
        ))),
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

/// An RFC 3339 / ISO 8601 UTC time (`2024-01-01T00:00:00Z`) as Unix seconds.
///
/// # Errors
/// [`crate::Error::EvidenceMalformed`] when it is not of that form.
pub fn parse_rfc3339(s: &str) -> Result<i64> {
    let bad = || malformed(format!("time {s:?} is not YYYY-MM-DDTHH:MM:SSZ"));
    let b = s.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[19] != b'Z' {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64> {
        s.get(r).and_then(|x| x.parse().ok()).ok_or_else(bad)
    };
    civil(
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    )
    .ok_or_else(bad)
}

fn civil(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64) -> Option<i64> {
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s)
}

fn time(t: &Tlv<'_>) -> Result<i64> {
    let s = std::str::from_utf8(t.body).map_err(|_| malformed("certificate: bad time"))?;
    let digits = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let v = (|| match (t.tag, s.len()) {
        (tag::UTC_TIME, 13) if s.ends_with('Z') => {
            let yy = digits(0..2)?;
            let y = if yy >= 50 { 1900 + yy } else { 2000 + yy };
            civil(
                y,
                digits(2..4)?,
                digits(4..6)?,
                digits(6..8)?,
                digits(8..10)?,
                digits(10..12)?,
            )
        }
        (tag::GENERALIZED_TIME, 15) if s.ends_with('Z') => civil(
            digits(0..4)?,
            digits(4..6)?,
            digits(6..8)?,
            digits(8..10)?,
            digits(10..12)?,
            digits(12..14)?,
        ),
        _ => None,
    })();
    v.ok_or_else(|| malformed(format!("certificate: time {s:?}")))
}

fn common_name(name: &[u8]) -> Result<String> {
    for rdn in der::children(name)? {
        for atv in der::children(rdn.body)? {
            let parts = der::children(atv.body)?;
            if let [oid, value, ..] = parts.as_slice()
                && der::oid_string(oid.body) == "2.5.4.3"
            {
                return Ok(String::from_utf8_lossy(value.body).into_owned());
            }
        }
    }
    Ok(String::new())
}

impl Certificate {
    /// Parses a DER certificate.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceMalformed`] naming what does not parse.
    pub fn from_der(input: &[u8]) -> Result<Certificate> {
        let (cert, rest) = der::expect(input, tag::SEQUENCE, "certificate")?;
        if !rest.is_empty() {
            return Err(malformed("certificate: bytes after the certificate"));
        }
        let parts = der::children(cert.body)?;
        let [tbs, alg, sig] = parts.as_slice() else {
            return Err(malformed("certificate: not three parts"));
        };
        if tbs.tag != tag::SEQUENCE || sig.tag != tag::BIT_STRING {
            return Err(malformed("certificate: bad structure"));
        }
        let sig_alg = read_sig_alg(alg)?;
        let mut fields = der::children(tbs.body)?.into_iter().peekable();
        if fields.peek().is_some_and(|f| f.tag == 0xa0) {
            fields.next();
        }
        let mut next = |what: &str| {
            fields
                .next()
                .ok_or_else(|| malformed(format!("certificate: no {what}")))
        };
        let _serial = next("serial number")?;
        let inner_alg = next("signature algorithm")?;
        if read_sig_alg(&inner_alg)? != sig_alg {
            return Err(malformed(
                "certificate: the two signature algorithms differ",
            ));
        }
        let issuer = next("issuer")?;
        let validity = der::children(next("validity")?.body)?;
        let [nb, na] = validity.as_slice() else {
            return Err(malformed("certificate: bad validity"));
        };
        let subject = next("subject")?;
        let spki = der::children(next("subject public key")?.body)?;
        let [_, key] = spki.as_slice() else {
            return Err(malformed("certificate: bad subject public key"));
        };
        if key.tag != tag::BIT_STRING || key.body.first() != Some(&0) {
            return Err(malformed("certificate: bad subject public key bits"));
        }
        let mut extensions = Vec::new();
        for f in fields {
            if f.tag == 0xa3 {
                let (list, _) = der::expect(f.body, tag::SEQUENCE, "extensions")?;
                for ext in der::children(list.body)? {
                    let parts = der::children(ext.body)?;
                    let oid = parts
                        .first()
                        .filter(|o| o.tag == tag::OID)
                        .ok_or_else(|| malformed("certificate: extension without an OID"))?;
                    let value = parts
                        .last()
                        .filter(|v| v.tag == tag::OCTET_STRING)
                        .ok_or_else(|| malformed("certificate: extension without a value"))?;
                    extensions.push((der::oid_string(oid.body), value.body.to_vec()));
                }
            }
        }
        if sig.body.first() != Some(&0) {
            return Err(malformed("certificate: bad signature bits"));
        }
        let start = tbs.raw.as_ptr() as usize - cert.raw.as_ptr() as usize;
        Ok(Certificate {
            der: cert.raw.to_vec(),
            tbs: start..start + tbs.raw.len(),
            sig_alg,
            signature: sig.body[1..].to_vec(),
            issuer: issuer.raw.to_vec(),
            subject: subject.raw.to_vec(),
            common_name: common_name(subject.body)?,
            not_before: time(nb)?,
            not_after: time(na)?,
            public_key: key.body[1..].to_vec(),
            extensions,
        })
    }

    /// Every certificate of a PEM bundle, in order.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceMalformed`] when there is none or one does not parse.
    pub fn from_pem_bundle(text: &str) -> Result<Vec<Certificate>> {
        use base64::Engine as _;
        let mut out = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find("-----BEGIN CERTIFICATE-----") {
            let body = &rest[start + 27..];
            let end = body
                .find("-----END CERTIFICATE-----")
                .ok_or_else(|| malformed("PEM: no END line"))?;
            let b64: String = body[..end].chars().filter(|c| !c.is_whitespace()).collect();
            let der = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| malformed(format!("PEM: {e}")))?;
            out.push(Certificate::from_der(&der)?);
            rest = &body[end..];
        }
        if out.is_empty() {
            return Err(malformed("PEM: no certificate"));
        }
        Ok(out)
    }

    /// A DER file, or a PEM file holding exactly one certificate.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceMalformed`].
    pub fn from_der_or_pem(bytes: &[u8]) -> Result<Certificate> {
        if bytes.starts_with(b"-----BEGIN") || bytes.iter().take(64).all(u8::is_ascii) {
            let text = std::str::from_utf8(bytes).map_err(|_| malformed("PEM: not text"))?;
            let mut all = Certificate::from_pem_bundle(text)?;
            if all.len() != 1 {
                return Err(malformed(format!(
                    "expected one certificate, found {}",
                    all.len()
                )));
            }
            return Ok(all.remove(0));
        }
        Certificate::from_der(bytes)
    }

    /// The certificate's DER bytes.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// An extension's value (the OCTET STRING's contents) by dotted OID.
    pub fn extension(&self, oid: &str) -> Option<&[u8]> {
        self.extensions
            .iter()
            .find(|(o, _)| o == oid)
            .map(|(_, v)| v.as_slice())
    }

    /// Checks that `issuer` issued this certificate: the names match and the signature
    /// verifies with the issuer's key.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceInvalid`] saying which.
    pub fn check_issued_by(&self, issuer: &Certificate) -> Result<()> {
        if self.issuer != issuer.subject {
            return Err(invalid(format!(
                "{:?} is not issued by {:?} (names differ)",
                self.common_name, issuer.common_name
            )));
        }
        use ring::signature::{
            ECDSA_P384_SHA384_ASN1, RSA_PSS_2048_8192_SHA384, UnparsedPublicKey,
        };
        let alg: &dyn ring::signature::VerificationAlgorithm = match self.sig_alg {
            SigAlg::RsaPssSha384 => &RSA_PSS_2048_8192_SHA384,
            SigAlg::EcdsaSha384 => &ECDSA_P384_SHA384_ASN1,
        };
        UnparsedPublicKey::new(alg, &issuer.public_key)
            .verify(&self.der[self.tbs.clone()], &self.signature)
            .map_err(|_| {
                invalid(format!(
                    "the signature on {:?} does not verify with {:?}'s key",
                    self.common_name, issuer.common_name
                ))
            })
    }

    /// Checks that `now` (Unix seconds) is within the validity period.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceInvalid`] naming the certificate and the bound.
    pub fn check_time(&self, now: i64) -> Result<()> {
        if now < self.not_before {
            return Err(invalid(format!("{:?} is not valid yet", self.common_name)));
        }
        if now > self.not_after {
            return Err(invalid(format!("{:?} has expired", self.common_name)));
        }
        Ok(())
    }
}
