//! OCSP responses (RFC 6960), as NVIDIA's OCSP service answers for its GPU device chains.
//!
//! [`OcspResponse::from_der`] reads an `OCSPResponse` with a `BasicOCSPResponse` in strict
//! DER (see [`super::der`]). [`OcspResponse::check`] matches each `SingleResponse` to a
//! (certificate, issuer) pair of a validated chain by its `CertID` (serial number, and the
//! issuer's name and key hashed with SHA-1, SHA-256, SHA-384 or SHA-512), verifies the
//! response's signature with that issuer's key or with a delegated responder certificate
//! from the response (issued by that issuer, extKeyUsage id-kp-OCSPSigning, valid at the
//! caller's time), checks each status's `thisUpdate` and `nextUpdate` against the caller's
//! time (`producedAt`, when the responder signed, is not: RFC 6960 leaves it to the
//! client), refuses unknown critical extensions, and refuses a certificate whose status is
//! revoked or unknown.

use super::der::{self, Fields, Tlv, tag};
use super::x509::{
    self, Certificate, EXT_KEY_USAGE, Extension, RevocationChecked, SigAlg, format_rfc3339,
    key_usage,
};
use super::{invalid, malformed};
use crate::Result;

const BASIC: &str = "1.3.6.1.5.5.7.48.1.1";
/// id-kp-OCSPSigning.
pub const OCSP_SIGNING: &str = "1.3.6.1.5.5.7.3.9";

/// The hash of a `CertID`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlg {
    /// SHA-1 (what most responders use in `CertID`s).
    Sha1,
    /// SHA-256.
    Sha256,
    /// SHA-384.
    Sha384,
    /// SHA-512.
    Sha512,
}

impl HashAlg {
    fn from_oid(oid: &str) -> Result<HashAlg> {
        Ok(match oid {
            "1.3.14.3.2.26" => HashAlg::Sha1,
            "2.16.840.1.101.3.4.2.1" => HashAlg::Sha256,
            "2.16.840.1.101.3.4.2.2" => HashAlg::Sha384,
            "2.16.840.1.101.3.4.2.3" => HashAlg::Sha512,
            other => return Err(malformed(format!("OCSP: CertID hash algorithm {other}"))),
        })
    }

    /// The digest of `data`.
    pub fn digest(self, data: &[u8]) -> Vec<u8> {
        use ring::digest;
        let alg = match self {
            HashAlg::Sha1 => &digest::SHA1_FOR_LEGACY_USE_ONLY,
            HashAlg::Sha256 => &digest::SHA256,
            HashAlg::Sha384 => &digest::SHA384,
            HashAlg::Sha512 => &digest::SHA512,
        };
        digest::digest(alg, data).as_ref().to_vec()
    }
}

/// A certificate's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertStatus {
    /// Not revoked.
    Good,
    /// Revoked at this time (Unix seconds), with the CRLReason code if given.
    Revoked {
        /// When.
        time: i64,
        /// CRLReason.
        reason: Option<u64>,
    },
    /// The responder does not know the certificate.
    Unknown,
}

/// One `SingleResponse`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingleResponse {
    /// The `CertID` hash.
    pub hash: HashAlg,
    /// Hash of the issuer's subject Name (DER).
    pub issuer_name_hash: Vec<u8>,
    /// Hash of the issuer's public key bits.
    pub issuer_key_hash: Vec<u8>,
    /// The certificate's serial number (INTEGER contents).
    pub serial: Vec<u8>,
    /// Its status.
    pub status: CertStatus,
    /// thisUpdate (Unix seconds).
    pub this_update: i64,
    /// nextUpdate (Unix seconds), when given.
    pub next_update: Option<i64>,
    /// singleExtensions.
    pub extensions: Vec<Extension>,
}

impl SingleResponse {
    fn is_for(&self, cert: &Certificate, issuer: &Certificate) -> bool {
        self.serial == cert.serial()
            && cert.issuer_der() == issuer.subject_der()
            && self.hash.digest(issuer.subject_der()) == self.issuer_name_hash
            && self.hash.digest(&issuer.public_key) == self.issuer_key_hash
    }
}

/// Who signed the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponderId {
    /// The responder's subject Name (DER).
    ByName(Vec<u8>),
    /// SHA-1 of the responder's public key bits.
    ByKey(Vec<u8>),
}

impl ResponderId {
    fn is(&self, c: &Certificate) -> bool {
        match self {
            ResponderId::ByName(n) => n == c.subject_der(),
            ResponderId::ByKey(h) => *h == HashAlg::Sha1.digest(&c.public_key),
        }
    }
}

/// A parsed OCSP response.
#[derive(Debug, Clone)]
pub struct OcspResponse {
    /// responseStatus: 0 successful, 1 malformedRequest, 2 internalError, 3 tryLater,
    /// 5 sigRequired, 6 unauthorized.
    pub status: u64,
    tbs: Vec<u8>,
    sig_alg: Option<SigAlg>,
    signature: Vec<u8>,
    /// The responder.
    pub responder: Option<ResponderId>,
    /// producedAt (Unix seconds).
    pub produced_at: i64,
    /// The single responses.
    pub responses: Vec<SingleResponse>,
    /// Certificates the responder included (a delegated responder's, with its chain).
    pub certs: Vec<Certificate>,
    /// responseExtensions.
    pub extensions: Vec<Extension>,
}

fn generalized(t: &Tlv<'_>, what: &str) -> Result<i64> {
    if t.tag != tag::GENERALIZED_TIME {
        return Err(malformed(format!("OCSP: {what} is not a GeneralizedTime")));
    }
    der::time(t)
}

fn single_response(t: &Tlv<'_>) -> Result<SingleResponse> {
    if t.tag != tag::SEQUENCE {
        return Err(malformed("OCSP: a SingleResponse is not a SEQUENCE"));
    }
    let mut f = Fields::new(t.body, "OCSP SingleResponse");
    let id = f.next(tag::SEQUENCE, "certID")?;
    let mut c = Fields::new(id.body, "OCSP CertID");
    let hash = HashAlg::from_oid(&x509::hash_algorithm(
        &c.next(tag::SEQUENCE, "hashAlgorithm")?,
    )?)?;
    let issuer_name_hash = c.next(tag::OCTET_STRING, "issuerNameHash")?.body.to_vec();
    let issuer_key_hash = c.next(tag::OCTET_STRING, "issuerKeyHash")?.body.to_vec();
    let serial = der::integer(c.next(tag::INTEGER, "serialNumber")?.body)?.to_vec();
    c.finish()?;
    let s = f.any("certStatus")?;
    let status = match s.tag {
        0x80 if s.body.is_empty() => CertStatus::Good,
        0x82 if s.body.is_empty() => CertStatus::Unknown,
        0xa1 => {
            let mut r = Fields::new(s.body, "OCSP RevokedInfo");
            let time = generalized(&r.any("revocationTime")?, "revocationTime")?;
            let reason = match r.optional(tag::explicit(0))? {
                Some(x) => Some(der::small_uint(
                    der::single(x.body, tag::ENUMERATED, "revocationReason")?.body,
                )?),
                None => None,
            };
            r.finish()?;
            CertStatus::Revoked { time, reason }
        }
        other => return Err(malformed(format!("OCSP: certStatus tag {other:#04x}"))),
    };
    let this_update = generalized(&f.any("thisUpdate")?, "thisUpdate")?;
    let next_update = f
        .optional(tag::explicit(0))?
        .map(|n| {
            generalized(
                &der::single(n.body, tag::GENERALIZED_TIME, "nextUpdate")?,
                "nextUpdate",
            )
        })
        .transpose()?;
    let extensions = match f.optional(tag::explicit(1))? {
        Some(x) => x509::parse_extensions(
            &der::single(x.body, tag::SEQUENCE, "singleExtensions")?,
            "OCSP SingleResponse",
        )?,
        None => Vec::new(),
    };
    f.finish()?;
    Ok(SingleResponse {
        hash,
        issuer_name_hash,
        issuer_key_hash,
        serial,
        status,
        this_update,
        next_update,
        extensions,
    })
}

impl OcspResponse {
    /// Parses a DER `OCSPResponse` (the entry point for untrusted bytes; never panics).
    ///
    /// # Errors
    /// [`crate::Error::EvidenceMalformed`] naming what does not parse, or a response type
    /// other than id-pkix-ocsp-basic.
    pub fn from_der(input: &[u8]) -> Result<OcspResponse> {
        let outer = der::single(input, tag::SEQUENCE, "OCSP response")?;
        let mut f = Fields::new(outer.body, "OCSP response");
        let status = f.next(tag::ENUMERATED, "responseStatus")?;
        let status = der::small_uint(status.body)?;
        let bytes = f.optional(tag::explicit(0))?;
        f.finish()?;
        let mut out = OcspResponse {
            status,
            tbs: Vec::new(),
            sig_alg: None,
            signature: Vec::new(),
            responder: None,
            produced_at: 0,
            responses: Vec::new(),
            certs: Vec::new(),
            extensions: Vec::new(),
        };
        let Some(bytes) = bytes else {
            if status == 0 {
                return Err(malformed(
                    "OCSP: a successful response without responseBytes",
                ));
            }
            return Ok(out);
        };
        let rb = der::single(bytes.body, tag::SEQUENCE, "responseBytes")?;
        let mut r = Fields::new(rb.body, "OCSP responseBytes");
        let kind = der::oid(r.next(tag::OID, "responseType")?.body)?;
        let octets = r.next(tag::OCTET_STRING, "response")?;
        r.finish()?;
        if kind != BASIC {
            return Err(malformed(format!(
                "OCSP: response type {kind}; only id-pkix-ocsp-basic is read"
            )));
        }
        let basic = der::single(octets.body, tag::SEQUENCE, "BasicOCSPResponse")?;
        let mut b = Fields::new(basic.body, "BasicOCSPResponse");
        let tbs = b.next(tag::SEQUENCE, "tbsResponseData")?;
        out.sig_alg = Some(SigAlg::from_der(
            &b.next(tag::SEQUENCE, "signatureAlgorithm")?,
        )?);
        out.signature = der::bit_string_bytes(b.next(tag::BIT_STRING, "signature")?.body)?.to_vec();
        if let Some(certs) = b.optional(tag::explicit(0))? {
            let list = der::single(certs.body, tag::SEQUENCE, "certs")?;
            for c in der::children(list.body)? {
                out.certs.push(Certificate::from_der(c.raw)?);
            }
        }
        b.finish()?;
        out.tbs = tbs.raw.to_vec();

        let mut d = Fields::new(tbs.body, "OCSP ResponseData");
        if d.optional(tag::explicit(0))?.is_some() {
            // v1 is the only version, and DER omits the default
            return Err(malformed("OCSP: ResponseData version written out"));
        }
        let rid = d.any("responderID")?;
        out.responder = Some(match rid.tag {
            0xa1 => ResponderId::ByName(
                der::single(rid.body, tag::SEQUENCE, "responder name")?
                    .raw
                    .to_vec(),
            ),
            0xa2 => ResponderId::ByKey(
                der::single(rid.body, tag::OCTET_STRING, "responder key hash")?
                    .body
                    .to_vec(),
            ),
            other => return Err(malformed(format!("OCSP: responderID tag {other:#04x}"))),
        });
        out.produced_at = generalized(&d.any("producedAt")?, "producedAt")?;
        let responses = d.next(tag::SEQUENCE, "responses")?;
        out.responses = der::children(responses.body)?
            .iter()
            .map(single_response)
            .collect::<Result<_>>()?;
        if let Some(x) = d.optional(tag::explicit(1))? {
            out.extensions = x509::parse_extensions(
                &der::single(x.body, tag::SEQUENCE, "responseExtensions")?,
                "OCSP response",
            )?;
        }
        d.finish()?;
        Ok(out)
    }

    /// Who may have signed this response for certificates issued by `ca`: `ca` itself, or
    /// a delegated responder certificate the response carries. Returns the signer's name.
    fn authorize(&self, ca: &Certificate, now: i64) -> Result<String> {
        let (Some(alg), Some(responder)) = (self.sig_alg, &self.responder) else {
            return Err(malformed("OCSP: no signed response"));
        };
        if responder.is(ca) {
            if !ca.verifies(alg, &self.tbs, &self.signature) {
                return Err(invalid(format!(
                    "the OCSP response's signature does not verify with {:?}'s key",
                    ca.common_name
                )));
            }
            return Ok(ca.common_name.clone());
        }
        let delegate = self.certs.iter().find(|c| responder.is(c)).ok_or_else(|| {
            invalid(format!(
                "the OCSP response is signed by neither {:?} nor a responder it delegated to",
                ca.common_name
            ))
        })?;
        delegate.check_issued_by(ca)?;
        if !delegate
            .ext_key_usage()
            .is_some_and(|k| k.iter().any(|p| p == OCSP_SIGNING))
        {
            return Err(invalid(format!(
                "the OCSP responder {:?} is not authorized by {:?} (no id-kp-OCSPSigning)",
                delegate.common_name, ca.common_name
            )));
        }
        if !delegate.has_key_usage(key_usage::DIGITAL_SIGNATURE) {
            return Err(invalid(format!(
                "the OCSP responder {:?}'s keyUsage lacks digitalSignature",
                delegate.common_name
            )));
        }
        delegate.check_critical(&[EXT_KEY_USAGE])?;
        delegate.check_time(now)?;
        if !delegate.verifies(alg, &self.tbs, &self.signature) {
            return Err(invalid(format!(
                "the OCSP response's signature does not verify with {:?}'s key",
                delegate.common_name
            )));
        }
        Ok(format!(
            "{} (delegated by {})",
            delegate.common_name, ca.common_name
        ))
    }

    /// Checks the response against `chain` (leaf first, already validated with
    /// [`x509::verify_path`]) at `now`: a successful response, at least one of its single
    /// responses for a certificate of the chain, each such response signed by that
    /// certificate's issuer or its delegated responder, `thisUpdate` not after `now`,
    /// `nextUpdate` (when given) not before it, no unknown critical extension, and every
    /// matched status good.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceInvalid`] with the first failed check, a revoked
    /// certificate named with its serial number and revocation time;
    /// [`crate::Error::EvidenceMalformed`] for a response without a signed body.
    pub fn check(&self, chain: &[Certificate], now: i64) -> Result<RevocationChecked> {
        if self.status != 0 {
            let name = match self.status {
                1 => "malformedRequest",
                2 => "internalError",
                3 => "tryLater",
                5 => "sigRequired",
                6 => "unauthorized",
                _ => "an unknown status",
            };
            return Err(invalid(format!(
                "the OCSP responder answered {name} ({}), not a status",
                self.status
            )));
        }
        let mut matched = Vec::new();
        for s in &self.responses {
            for pair in chain.windows(2) {
                if s.is_for(&pair[0], &pair[1]) {
                    matched.push((s, &pair[0], &pair[1]));
                }
            }
        }
        if matched.is_empty() {
            return Err(invalid(
                "the OCSP response covers no certificate of this chain",
            ));
        }
        let mut signers: Vec<String> = Vec::new();
        for (_, _, ca) in &matched {
            let s = self.authorize(ca, now)?;
            if !signers.contains(&s) {
                signers.push(s);
            }
        }
        if let Some(oid) = x509::unknown_critical(&self.extensions, &[]).or_else(|| {
            matched
                .iter()
                .find_map(|(s, _, _)| x509::unknown_critical(&s.extensions, &[]))
        }) {
            return Err(invalid(format!(
                "the OCSP response has an unknown critical extension {oid}"
            )));
        }
        for (s, cert, _) in &matched {
            if now < s.this_update {
                return Err(invalid(format!(
                    "the OCSP status of {:?} is not valid yet (thisUpdate {})",
                    cert.common_name,
                    format_rfc3339(s.this_update)
                )));
            }
            if let Some(next) = s.next_update
                && now > next
            {
                return Err(invalid(format!(
                    "the OCSP status of {:?} is out of date (nextUpdate {})",
                    cert.common_name,
                    format_rfc3339(next)
                )));
            }
            match s.status {
                CertStatus::Good => {}
                CertStatus::Revoked { time, reason } => {
                    tracing::warn!(certificate = %cert.common_name,
                        serial = %hex::encode(cert.serial()), "certificate revoked (OCSP)");
                    return Err(invalid(format!(
                        "{:?} (serial {}) is revoked: the OCSP responder says so since {}{}",
                        cert.common_name,
                        hex::encode(cert.serial()),
                        format_rfc3339(time),
                        reason.map(|r| format!(" (reason {r})")).unwrap_or_default()
                    )));
                }
                CertStatus::Unknown => {
                    return Err(invalid(format!(
                        "the OCSP responder does not know {:?} (status unknown)",
                        cert.common_name
                    )));
                }
            }
        }
        let mut certificates: Vec<String> = Vec::new();
        for (_, c, _) in &matched {
            if !certificates.contains(&c.common_name) {
                certificates.push(c.common_name.clone());
            }
        }
        tracing::debug!(signer = %signers.join(", "), certificates = certificates.len(),
            "OCSP response checked: none revoked");
        Ok(RevocationChecked {
            via: "ocsp",
            signer: signers.join(", "),
            certificates,
        })
    }
}
