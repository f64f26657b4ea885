//! X.509 certificates, as far as attestation chains need them, and certification path
//! validation (RFC 5280 section 6, the parts that apply to a fixed chain ending at a
//! pinned root).
//!
//! Reading ([`Certificate::from_der`]) is strict DER (see [`super::der`]): the fields in
//! their order, version v3 whenever there are extensions, the two signature algorithm
//! fields byte-identical, each extension at most once, `critical` never written out as
//! FALSE, and basicConstraints, keyUsage and extKeyUsage parsed whenever present. Serial
//! numbers are kept as their minimal INTEGER bytes and not otherwise interpreted (AMD's
//! VCEKs carry serial number 0, which RFC 5280 forbids; they are accepted). Two leniencies,
//! both for AMD's real certificates: the RSASSA-PSS trailer field (`[3] 1`) is accepted
//! although DER omits that default, and a keyUsage BIT STRING may end in zero bits (the
//! ASKs write keyCertSign as `01 04`).
//!
//! [`verify_path`] checks a chain (leaf first): it ends at the caller's trust anchor,
//! names chain byte for byte, each signature verifies with the next certificate's key
//! (RSA-PSS SHA-384 for AMD's keys, ECDSA P-384 SHA-384 for VCEKs and NVIDIA's, checked
//! with `ring`), every certificate used as an issuer is a CA (basicConstraints cA) with
//! keyCertSign when it has a keyUsage, no pathLenConstraint is exceeded, no certificate
//! has a critical extension other than basicConstraints and keyUsage, and all are valid at
//! the caller's time. Revocation is separate: [`super::crl`] and [`super::ocsp`].

use std::ops::Range;

use super::der::{self, Fields, Tlv, tag};
use super::{invalid, malformed};
use crate::Result;

const RSA_PSS: &str = "1.2.840.113549.1.1.10";
const MGF1: &str = "1.2.840.113549.1.1.8";
const ECDSA_SHA384: &str = "1.2.840.10045.4.3.3";
const SHA384: &str = "2.16.840.1.101.3.4.2.2";
/// basicConstraints.
pub const BASIC_CONSTRAINTS: &str = "2.5.29.19";
/// keyUsage.
pub const KEY_USAGE: &str = "2.5.29.15";
/// extKeyUsage.
pub const EXT_KEY_USAGE: &str = "2.5.29.37";
/// The extensions path validation processes, and so the only ones a certificate may mark
/// critical.
const UNDERSTOOD_CRITICAL: [&str; 2] = [BASIC_CONSTRAINTS, KEY_USAGE];

/// keyUsage bits (RFC 5280 section 4.2.1.3), as [`Certificate::has_key_usage`] takes them.
pub mod key_usage {
    /// digitalSignature (bit 0).
    pub const DIGITAL_SIGNATURE: u16 = 1 << 0;
    /// keyCertSign (bit 5).
    pub const KEY_CERT_SIGN: u16 = 1 << 5;
    /// cRLSign (bit 6).
    pub const CRL_SIGN: u16 = 1 << 6;
}

/// The signature algorithms accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigAlg {
    /// RSASSA-PSS with SHA-384, MGF1-SHA-384, 48-byte salt.
    RsaPssSha384,
    /// ECDSA with SHA-384 (P-384 keys), DER signature.
    EcdsaSha384,
}

impl SigAlg {
    /// Reads an AlgorithmIdentifier naming one of the accepted algorithms.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceMalformed`] for another algorithm or bad parameters.
    pub fn from_der(t: &Tlv<'_>) -> Result<SigAlg> {
        let mut f = Fields::new(t.body, "signature algorithm");
        let oid = der::oid(f.next(tag::OID, "algorithm")?.body)?;
        let alg = match oid.as_str() {
            ECDSA_SHA384 => SigAlg::EcdsaSha384,
            RSA_PSS => {
                pss_params(f.next(tag::SEQUENCE, "RSASSA-PSS parameters")?.body)?;
                SigAlg::RsaPssSha384
            }
            other => {
                return Err(malformed(format!(
                    "signature algorithm {other} is not RSA-PSS SHA-384 or ECDSA SHA-384"
                )));
            }
        };
        // ECDSA: parameters absent (RFC 5758 section 3.2)
        f.finish()?;
        Ok(alg)
    }

    /// Whether `signature` over `message` verifies with `public_key` (an RSAPublicKey or
    /// an uncompressed P-384 point).
    pub fn verify(self, public_key: &[u8], message: &[u8], signature: &[u8]) -> bool {
        use ring::signature::{
            ECDSA_P384_SHA384_ASN1, RSA_PSS_2048_8192_SHA384, UnparsedPublicKey,
            VerificationAlgorithm,
        };
        let alg: &dyn VerificationAlgorithm = match self {
            SigAlg::RsaPssSha384 => &RSA_PSS_2048_8192_SHA384,
            SigAlg::EcdsaSha384 => &ECDSA_P384_SHA384_ASN1,
        };
        UnparsedPublicKey::new(alg, public_key)
            .verify(message, signature)
            .is_ok()
    }
}

/// A hash AlgorithmIdentifier's OID (parameters absent or NULL).
pub(crate) fn hash_algorithm(t: &Tlv<'_>) -> Result<String> {
    let mut f = Fields::new(t.body, "hash algorithm");
    let oid = der::oid(f.next(tag::OID, "algorithm")?.body)?;
    if let Some(null) = f.optional(tag::NULL)?
        && !null.body.is_empty()
    {
        return Err(malformed("hash algorithm: NULL with contents"));
    }
    f.finish()?;
    Ok(oid)
}

/// RSASSA-PSS-params must say SHA-384, MGF1 with SHA-384, a 48-byte salt.
fn pss_params(body: &[u8]) -> Result<()> {
    let bad = |what: &str| malformed(format!("RSASSA-PSS parameters: {what} is not SHA-384's"));
    let mut f = Fields::new(body, "RSASSA-PSS parameters");
    let hash = f.next(tag::explicit(0), "hash algorithm")?;
    if hash_algorithm(&der::single(hash.body, tag::SEQUENCE, "hash algorithm")?)? != SHA384 {
        return Err(bad("the hash"));
    }
    let mgf = f.next(tag::explicit(1), "mask generation function")?;
    let mgf = der::single(mgf.body, tag::SEQUENCE, "mask generation function")?;
    let mut m = Fields::new(mgf.body, "mask generation function");
    if der::oid(m.next(tag::OID, "algorithm")?.body)? != MGF1
        || hash_algorithm(&m.next(tag::SEQUENCE, "MGF1 hash")?)? != SHA384
    {
        return Err(bad("the mask generation function"));
    }
    m.finish()?;
    let salt = f.next(tag::explicit(2), "salt length")?;
    if der::small_uint(der::single(salt.body, tag::INTEGER, "salt length")?.body)? != 48 {
        return Err(bad("the salt length"));
    }
    if let Some(trailer) = f.optional(tag::explicit(3))?
        && der::small_uint(der::single(trailer.body, tag::INTEGER, "trailer field")?.body)? != 1
    {
        return Err(malformed(
            "RSASSA-PSS parameters: trailer field other than 1",
        ));
    }
    f.finish()
}

/// An RFC 3339 / ISO 8601 UTC time (`2024-01-01T00:00:00Z`) as Unix seconds.
///
/// # Errors
/// [`crate::Error::EvidenceMalformed`] when it is not of that form.
pub fn parse_rfc3339(s: &str) -> Result<i64> {
    let bad = || malformed(format!("time {s:?} is not YYYY-MM-DDTHH:MM:SSZ"));
    let b = s.as_bytes();
    let digits_at = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18];
    if b.len() != 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'Z'
        || !digits_at.iter().all(|&i| b[i].is_ascii_digit())
    {
        return Err(bad());
    }
    let num = |r: Range<usize>| b[r].iter().fold(0i64, |a, d| a * 10 + i64::from(d - b'0'));
    der::civil(
        num(0..4),
        num(5..7),
        num(8..10),
        num(11..13),
        num(14..16),
        num(17..19),
    )
    .ok_or_else(bad)
}

/// Unix seconds as RFC 3339 UTC (`2024-01-01T00:00:00Z`), for messages.
pub fn format_rfc3339(t: i64) -> String {
    let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    // civil_from_days (proleptic Gregorian)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// A Name's first common name, or "" (for messages).
pub(crate) fn common_name(name: &[u8]) -> Result<String> {
    for rdn in der::children(name)? {
        for atv in der::children(rdn.body)? {
            let parts = der::children(atv.body)?;
            if let [oid, value, ..] = parts.as_slice()
                && oid.tag == tag::OID
                && der::oid(oid.body)? == "2.5.4.3"
            {
                return Ok(String::from_utf8_lossy(value.body).into_owned());
            }
        }
    }
    Ok(String::new())
}

/// One extension as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extension {
    /// Its OID, dotted.
    pub oid: String,
    /// Whether it is marked critical.
    pub critical: bool,
    /// The OCTET STRING's contents (the extension's DER value).
    pub value: Vec<u8>,
}

/// Reads an `Extensions` SEQUENCE (certificates, CRLs, CRL entries, OCSP responses):
/// at least one, each OID at most once, `critical` only when TRUE.
///
/// # Errors
/// [`crate::Error::EvidenceMalformed`] naming the rule broken.
pub fn parse_extensions(list: &Tlv<'_>, what: &str) -> Result<Vec<Extension>> {
    if list.tag != tag::SEQUENCE {
        return Err(malformed(format!("{what}: extensions are not a SEQUENCE")));
    }
    let items = der::children(list.body)?;
    if items.is_empty() {
        return Err(malformed(format!("{what}: an empty extensions list")));
    }
    let mut out: Vec<Extension> = Vec::with_capacity(items.len());
    for item in items {
        if item.tag != tag::SEQUENCE {
            return Err(malformed(format!("{what}: an extension is not a SEQUENCE")));
        }
        let mut f = Fields::new(item.body, "extension");
        let oid = der::oid(f.next(tag::OID, "extnID")?.body)?;
        let critical = match f.optional(tag::BOOLEAN)? {
            None => false,
            Some(b) if der::boolean(b.body)? => true,
            Some(_) => {
                return Err(malformed(format!(
                    "{what}: extension {oid} writes out critical FALSE (DER omits the default)"
                )));
            }
        };
        let value = f.next(tag::OCTET_STRING, "extnValue")?.body.to_vec();
        f.finish()?;
        if out.iter().any(|e| e.oid == oid) {
            return Err(malformed(format!(
                "{what}: extension {oid} appears twice (duplicate extension)"
            )));
        }
        out.push(Extension {
            oid,
            critical,
            value,
        });
    }
    Ok(out)
}

/// The first critical extension of `exts` not in `understood`.
pub(crate) fn unknown_critical<'a>(exts: &'a [Extension], understood: &[&str]) -> Option<&'a str> {
    exts.iter()
        .find(|e| e.critical && !understood.contains(&e.oid.as_str()))
        .map(|e| e.oid.as_str())
}

/// basicConstraints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BasicConstraints {
    /// cA.
    pub ca: bool,
    /// pathLenConstraint: how many intermediate CA certificates may follow below.
    pub path_len: Option<u64>,
}

fn basic_constraints(value: &[u8]) -> Result<BasicConstraints> {
    let seq = der::single(value, tag::SEQUENCE, "basicConstraints")?;
    let mut f = Fields::new(seq.body, "basicConstraints");
    let ca = match f.optional(tag::BOOLEAN)? {
        None => false,
        Some(b) if der::boolean(b.body)? => true,
        Some(_) => {
            return Err(malformed(
                "basicConstraints writes out cA FALSE (DER omits the default)",
            ));
        }
    };
    let path_len = f
        .optional(tag::INTEGER)?
        .map(|i| der::small_uint(i.body))
        .transpose()?;
    f.finish()?;
    if path_len.is_some() && !ca {
        return Err(malformed(
            "basicConstraints has a pathLenConstraint without cA",
        ));
    }
    Ok(BasicConstraints { ca, path_len })
}

fn key_usage_bits(value: &[u8]) -> Result<u16> {
    let bits = der::single(value, tag::BIT_STRING, "keyUsage")?;
    let (bytes, _) = der::bit_string(bits.body)?;
    // DER wants a named bit list without trailing zero bits (X.690 11.2.2), but AMD's ASKs
    // write keyCertSign as `01 04` (one unused bit, then a zero bit): accepted, as long as
    // some bit is set (RFC 5280 section 4.2.1.3) and the unused bits are zero
    if bytes.iter().all(|b| *b == 0) || bytes.len() > 2 {
        return Err(malformed("keyUsage has no bit set, or over 16 bits"));
    }
    // bit 0 is the first byte's most significant bit
    Ok(bytes.iter().enumerate().fold(0u16, |acc, (i, b)| {
        acc | (u16::from(b.reverse_bits()) << (8 * i))
    }))
}

fn ext_key_usage(value: &[u8]) -> Result<Vec<String>> {
    let seq = der::single(value, tag::SEQUENCE, "extKeyUsage")?;
    let items = der::children(seq.body)?;
    if items.is_empty() {
        return Err(malformed("extKeyUsage is empty"));
    }
    items
        .iter()
        .map(|t| {
            if t.tag == tag::OID {
                der::oid(t.body)
            } else {
                Err(malformed("extKeyUsage holds something other than OIDs"))
            }
        })
        .collect()
}

/// A parsed certificate.
#[derive(Debug, Clone)]
pub struct Certificate {
    der: Vec<u8>,
    tbs: Range<usize>,
    sig_alg: SigAlg,
    signature: Vec<u8>,
    serial: Vec<u8>,
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
    extensions: Vec<Extension>,
    basic_constraints: Option<BasicConstraints>,
    key_usage: Option<u16>,
    ext_key_usage: Option<Vec<String>>,
}

impl Certificate {
    /// Parses a DER certificate (the entry point for untrusted bytes: it returns an error
    /// for anything that is not a DER certificate of the form described in the module
    /// docs, and never panics).
    ///
    /// # Errors
    /// [`crate::Error::EvidenceMalformed`] naming what does not parse.
    pub fn from_der(input: &[u8]) -> Result<Certificate> {
        let cert = der::single(input, tag::SEQUENCE, "certificate")?;
        let mut f = Fields::new(cert.body, "certificate");
        let tbs = f.next(tag::SEQUENCE, "tbsCertificate")?;
        let alg = f.next(tag::SEQUENCE, "signatureAlgorithm")?;
        let sig = f.next(tag::BIT_STRING, "signatureValue")?;
        f.finish()?;
        let sig_alg = SigAlg::from_der(&alg)?;
        let signature = der::bit_string_bytes(sig.body)?.to_vec();

        let mut t = Fields::new(tbs.body, "tbsCertificate");
        let version = match t.optional(tag::explicit(0))? {
            None => 0,
            Some(v) => match der::small_uint(der::single(v.body, tag::INTEGER, "version")?.body)? {
                0 => {
                    return Err(malformed(
                        "certificate: version v1 written out (DER omits the default)",
                    ));
                }
                n @ (1 | 2) => n,
                n => return Err(malformed(format!("certificate: version {n}"))),
            },
        };
        let serial = der::integer(t.next(tag::INTEGER, "serial number")?.body)?.to_vec();
        let inner_alg = t.next(tag::SEQUENCE, "signature algorithm")?;
        if inner_alg.raw != alg.raw {
            return Err(malformed(
                "certificate: the two signature algorithms differ",
            ));
        }
        let issuer = t.next(tag::SEQUENCE, "issuer")?;
        let validity = t.next(tag::SEQUENCE, "validity")?;
        let mut v = Fields::new(validity.body, "validity");
        let not_before = der::time(&v.any("notBefore")?)?;
        let not_after = der::time(&v.any("notAfter")?)?;
        v.finish()?;
        let subject = t.next(tag::SEQUENCE, "subject")?;
        let spki = t.next(tag::SEQUENCE, "subject public key info")?;
        let mut s = Fields::new(spki.body, "subject public key info");
        s.next(tag::SEQUENCE, "algorithm")?;
        let public_key =
            der::bit_string_bytes(s.next(tag::BIT_STRING, "subject public key")?.body)?.to_vec();
        s.finish()?;
        for unique_id in [tag::implicit(1), tag::implicit(2)] {
            if let Some(id) = t.optional(unique_id)? {
                der::bit_string(id.body)?;
                if version < 1 {
                    return Err(malformed("certificate: a unique ID in a v1 certificate"));
                }
            }
        }
        let extensions = match t.optional(tag::explicit(3))? {
            None => Vec::new(),
            Some(_) if version != 2 => {
                return Err(malformed(
                    "certificate: extensions in a certificate before v3",
                ));
            }
            Some(e) => parse_extensions(
                &der::single(e.body, tag::SEQUENCE, "extensions")?,
                "certificate",
            )?,
        };
        t.finish()?;
        let find = |oid: &str| {
            extensions
                .iter()
                .find(|e| e.oid == oid)
                .map(|e| e.value.as_slice())
        };
        let basic_constraints = find(BASIC_CONSTRAINTS).map(basic_constraints).transpose()?;
        let key_usage = find(KEY_USAGE).map(key_usage_bits).transpose()?;
        let ext_key_usage = find(EXT_KEY_USAGE).map(ext_key_usage).transpose()?;
        let start = tbs.raw.as_ptr() as usize - cert.raw.as_ptr() as usize;
        Ok(Certificate {
            der: cert.raw.to_vec(),
            tbs: start..start + tbs.raw.len(),
            sig_alg,
            signature,
            serial,
            issuer: issuer.raw.to_vec(),
            subject: subject.raw.to_vec(),
            common_name: common_name(subject.body)?,
            not_before,
            not_after,
            public_key,
            extensions,
            basic_constraints,
            key_usage,
            ext_key_usage,
        })
    }

    /// Every certificate of a PEM bundle, in order.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceMalformed`] when there is none or one does not parse.
    pub fn from_pem_bundle(text: &str) -> Result<Vec<Certificate>> {
        let out = pem_blocks(text, "CERTIFICATE")?
            .iter()
            .map(|der| Certificate::from_der(der))
            .collect::<Result<Vec<_>>>()?;
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
        if bytes.first() != Some(&tag::SEQUENCE) {
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

    /// The serial number's INTEGER contents (minimal two's complement, as written).
    pub fn serial(&self) -> &[u8] {
        &self.serial
    }

    /// The subject Name's DER.
    pub fn subject_der(&self) -> &[u8] {
        &self.subject
    }

    /// The issuer Name's DER.
    pub fn issuer_der(&self) -> &[u8] {
        &self.issuer
    }

    /// Every extension, as written.
    pub fn extensions(&self) -> &[Extension] {
        &self.extensions
    }

    /// An extension's value (the OCTET STRING's contents) by dotted OID.
    pub fn extension(&self, oid: &str) -> Option<&[u8]> {
        self.extensions
            .iter()
            .find(|e| e.oid == oid)
            .map(|e| e.value.as_slice())
    }

    /// basicConstraints, when present.
    pub fn basic_constraints(&self) -> Option<BasicConstraints> {
        self.basic_constraints
    }

    /// Whether the certificate has no keyUsage extension or its keyUsage has every bit
    /// of `bits` (see [`key_usage`]).
    pub fn has_key_usage(&self, bits: u16) -> bool {
        self.key_usage.is_none_or(|k| k & bits == bits)
    }

    /// The extKeyUsage purposes (dotted OIDs), when present.
    pub fn ext_key_usage(&self) -> Option<&[String]> {
        self.ext_key_usage.as_deref()
    }

    /// Whether subject and issuer are the same name.
    pub fn is_self_issued(&self) -> bool {
        self.subject == self.issuer
    }

    /// Whether `signature` by this certificate's key over `message` verifies with `alg`.
    pub fn verifies(&self, alg: SigAlg, message: &[u8], signature: &[u8]) -> bool {
        alg.verify(&self.public_key, message, signature)
    }

    /// Checks that `issuer` issued this certificate: the names match and the signature
    /// verifies with the issuer's key. (Whether the issuer may issue is
    /// [`Certificate::check_can_issue`].)
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
        if !issuer.verifies(self.sig_alg, &self.der[self.tbs.clone()], &self.signature) {
            return Err(invalid(format!(
                "the signature on {:?} does not verify with {:?}'s key",
                self.common_name, issuer.common_name
            )));
        }
        Ok(())
    }

    /// Checks that this certificate may issue certificates: basicConstraints with cA set,
    /// and keyCertSign when it has a keyUsage.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceInvalid`] saying which is missing.
    pub fn check_can_issue(&self) -> Result<()> {
        if !self.basic_constraints.is_some_and(|b| b.ca) {
            return Err(invalid(format!(
                "{:?} issues certificates but is not a CA (basicConstraints cA is not set)",
                self.common_name
            )));
        }
        if !self.has_key_usage(key_usage::KEY_CERT_SIGN) {
            return Err(invalid(format!(
                "{:?} issues certificates but its keyUsage lacks keyCertSign",
                self.common_name
            )));
        }
        Ok(())
    }

    /// Checks that the certificate marks no extension critical other than those path
    /// validation processes (basicConstraints, keyUsage) and `also`.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceInvalid`] naming the extension.
    pub fn check_critical(&self, also: &[&str]) -> Result<()> {
        let understood: Vec<&str> = UNDERSTOOD_CRITICAL.iter().chain(also).copied().collect();
        match unknown_critical(&self.extensions, &understood) {
            Some(oid) => Err(invalid(format!(
                "{:?} has an unknown critical extension {oid}",
                self.common_name
            ))),
            None => Ok(()),
        }
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

/// The DER contents of every `-----BEGIN {label}-----` block of `text`.
pub(crate) fn pem_blocks(text: &str, label: &str) -> Result<Vec<Vec<u8>>> {
    use base64::Engine as _;
    let (begin, end) = (
        format!("-----BEGIN {label}-----"),
        format!("-----END {label}-----"),
    );
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(&begin) {
        let body = &rest[start + begin.len()..];
        let stop = body
            .find(&end)
            .ok_or_else(|| malformed("PEM: no END line"))?;
        let b64: String = body[..stop]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        out.push(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| malformed(format!("PEM: {e}")))?,
        );
        rest = &body[stop..];
    }
    Ok(out)
}

/// Validates a certification path: `chain` (leaf first) ends at `anchor` (compared byte
/// for byte), which is self-signed; each certificate is issued by the next (names and
/// signature), every issuer may issue ([`Certificate::check_can_issue`]), no
/// pathLenConstraint is exceeded (self-issued intermediates not counted), no certificate
/// has an unknown critical extension, and all are valid at `now` (Unix seconds).
///
/// # Errors
/// [`crate::Error::EvidenceInvalid`] with the first failed check;
/// [`crate::Error::EvidenceMalformed`] for an empty chain.
pub fn verify_path(chain: &[Certificate], anchor: &Certificate, now: i64) -> Result<()> {
    let last = chain
        .last()
        .ok_or_else(|| malformed("an empty certificate chain"))?;
    if last.der() != anchor.der() {
        return Err(invalid(format!(
            "the chain ends at {:?}, not the trust anchor {:?}",
            last.common_name, anchor.common_name
        )));
    }
    last.check_issued_by(last)?;
    last.check_can_issue()?;
    for pair in chain.windows(2) {
        pair[0].check_issued_by(&pair[1])?;
        pair[1].check_can_issue()?;
    }
    for (i, ca) in chain.iter().enumerate().skip(1) {
        if let Some(max) = ca.basic_constraints.and_then(|b| b.path_len) {
            let below = chain[1..i].iter().filter(|c| !c.is_self_issued()).count() as u64;
            if below > max {
                return Err(invalid(format!(
                    "{:?} allows {max} intermediate CA certificate(s) below it \
                     (pathLenConstraint); the chain has {below}",
                    ca.common_name
                )));
            }
        }
    }
    for c in chain {
        c.check_critical(&[])?;
        c.check_time(now)?;
    }
    tracing::debug!(
        leaf = %chain[0].common_name,
        anchor = %anchor.common_name,
        length = chain.len(),
        "certification path verified"
    );
    Ok(())
}

/// What a revocation check established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevocationChecked {
    /// `crl` or `ocsp`.
    pub via: &'static str,
    /// Who signed the CRL or OCSP response (a delegated OCSP responder is named with the
    /// CA that delegated to it).
    pub signer: String,
    /// The chain's certificates whose status it gave (common names), none revoked.
    pub certificates: Vec<String>,
}
