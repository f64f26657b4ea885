//! Certificate revocation lists (RFC 5280 section 5), as AMD publishes them for its
//! SEV-SNP chains (`https://kdsintf.amd.com/vcek/v1/{product}/crl`, signed by the ARK,
//! listing revoked ASKs).
//!
//! [`Crl::from_der`] reads a CRL in strict DER (see [`super::der`]); [`Crl::check`] finds
//! its signer in a validated chain by name, verifies the signature with that certificate's
//! key (which must allow cRLSign when it has a keyUsage), checks `thisUpdate` and
//! `nextUpdate` against the caller's time, refuses unknown critical extensions (delta
//! CRLs and issuing-distribution-point scoping are not implemented, so such CRLs are
//! refused, not misread), and looks up the serial number of every chain certificate the
//! signer issued.

use std::ops::Range;

use super::der::{self, Fields, tag};
use super::x509::{
    self, Certificate, Extension, RevocationChecked, SigAlg, format_rfc3339, key_usage,
};
use super::{invalid, malformed};
use crate::Result;

/// One revoked certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revoked {
    /// The serial number's INTEGER contents.
    pub serial: Vec<u8>,
    /// When it was revoked (Unix seconds).
    pub date: i64,
    /// The entry's extensions (reason code, invalidity date …).
    pub extensions: Vec<Extension>,
}

/// A parsed CRL.
#[derive(Debug, Clone)]
pub struct Crl {
    der: Vec<u8>,
    tbs: Range<usize>,
    sig_alg: SigAlg,
    signature: Vec<u8>,
    issuer: Vec<u8>,
    /// The issuer's common name (for messages).
    pub issuer_name: String,
    /// thisUpdate (Unix seconds).
    pub this_update: i64,
    /// nextUpdate (Unix seconds), when given.
    pub next_update: Option<i64>,
    /// The revoked certificates.
    pub revoked: Vec<Revoked>,
    /// The CRL's extensions.
    pub extensions: Vec<Extension>,
}

impl Crl {
    /// Parses a DER CRL (the entry point for untrusted bytes; never panics).
    ///
    /// # Errors
    /// [`crate::Error::EvidenceMalformed`] naming what does not parse.
    pub fn from_der(input: &[u8]) -> Result<Crl> {
        let crl = der::single(input, tag::SEQUENCE, "CRL")?;
        let mut f = Fields::new(crl.body, "CRL");
        let tbs = f.next(tag::SEQUENCE, "tbsCertList")?;
        let alg = f.next(tag::SEQUENCE, "signatureAlgorithm")?;
        let sig = f.next(tag::BIT_STRING, "signatureValue")?;
        f.finish()?;
        let sig_alg = SigAlg::from_der(&alg)?;
        let signature = der::bit_string_bytes(sig.body)?.to_vec();

        let mut t = Fields::new(tbs.body, "tbsCertList");
        let v2 = match t.optional(tag::INTEGER)? {
            None => false,
            Some(v) if der::small_uint(v.body)? == 1 => true,
            Some(_) => return Err(malformed("CRL: version other than v2 written out")),
        };
        if t.next(tag::SEQUENCE, "signature algorithm")?.raw != alg.raw {
            return Err(malformed("CRL: the two signature algorithms differ"));
        }
        let issuer = t.next(tag::SEQUENCE, "issuer")?;
        let this_update = der::time(&t.any("thisUpdate")?)?;
        let next_update = match t.optional(tag::UTC_TIME)? {
            Some(n) => Some(der::time(&n)?),
            None => t
                .optional(tag::GENERALIZED_TIME)?
                .map(|n| der::time(&n))
                .transpose()?,
        };
        let mut revoked = Vec::new();
        if let Some(list) = t.optional(tag::SEQUENCE)? {
            for entry in der::children(list.body)? {
                if entry.tag != tag::SEQUENCE {
                    return Err(malformed("CRL: an entry is not a SEQUENCE"));
                }
                let mut e = Fields::new(entry.body, "CRL entry");
                let serial = der::integer(e.next(tag::INTEGER, "serial number")?.body)?.to_vec();
                let date = der::time(&e.any("revocationDate")?)?;
                let extensions = match e.optional(tag::SEQUENCE)? {
                    Some(x) => x509::parse_extensions(&x, "CRL entry")?,
                    None => Vec::new(),
                };
                e.finish()?;
                revoked.push(Revoked {
                    serial,
                    date,
                    extensions,
                });
            }
        }
        let extensions = match t.optional(tag::explicit(0))? {
            Some(x) => x509::parse_extensions(
                &der::single(x.body, tag::SEQUENCE, "CRL extensions")?,
                "CRL",
            )?,
            None => Vec::new(),
        };
        t.finish()?;
        if !v2 && (!extensions.is_empty() || revoked.iter().any(|r| !r.extensions.is_empty())) {
            return Err(malformed("CRL: extensions in a v1 CRL"));
        }
        let start = tbs.raw.as_ptr() as usize - crl.raw.as_ptr() as usize;
        Ok(Crl {
            der: crl.raw.to_vec(),
            tbs: start..start + tbs.raw.len(),
            sig_alg,
            signature,
            issuer: issuer.raw.to_vec(),
            issuer_name: x509::common_name(issuer.body)?,
            this_update,
            next_update,
            revoked,
            extensions,
        })
    }

    /// A DER CRL, or a PEM one (`-----BEGIN X509 CRL-----`).
    ///
    /// # Errors
    /// [`crate::Error::EvidenceMalformed`].
    pub fn from_der_or_pem(bytes: &[u8]) -> Result<Crl> {
        if bytes.first() == Some(&tag::SEQUENCE) {
            return Crl::from_der(bytes);
        }
        let text = std::str::from_utf8(bytes).map_err(|_| malformed("CRL: neither DER nor PEM"))?;
        match x509::pem_blocks(text, "X509 CRL")?.as_slice() {
            [one] => Crl::from_der(one),
            blocks => Err(malformed(format!(
                "CRL: expected one PEM X509 CRL block, found {}",
                blocks.len()
            ))),
        }
    }

    /// The CRL's DER bytes.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// The entry revoking `serial` (INTEGER contents), if any.
    pub fn revoked(&self, serial: &[u8]) -> Option<&Revoked> {
        self.revoked.iter().find(|r| r.serial == serial)
    }

    /// Checks the CRL against `chain` (leaf first, already validated with
    /// [`x509::verify_path`]) at `now`: its signer is the chain certificate named as its
    /// issuer, the signature verifies with that key, the signer may sign CRLs, no unknown
    /// critical extension, `thisUpdate <= now <= nextUpdate`, and none of the chain's
    /// certificates the signer issued (other than itself) is listed.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceInvalid`] with the first failed check, a revoked
    /// certificate named with its serial number and revocation date.
    pub fn check(&self, chain: &[Certificate], now: i64) -> Result<RevocationChecked> {
        let named: Vec<&Certificate> = chain
            .iter()
            .filter(|c| c.subject_der() == self.issuer)
            .collect();
        if named.is_empty() {
            return Err(invalid(format!(
                "the CRL's issuer {:?} is not a certificate of this chain",
                self.issuer_name
            )));
        }
        let signer = named
            .iter()
            .find(|c| c.verifies(self.sig_alg, &self.der[self.tbs.clone()], &self.signature))
            .ok_or_else(|| {
                invalid(format!(
                    "the CRL's signature does not verify with {:?}'s key",
                    self.issuer_name
                ))
            })?;
        if !signer.has_key_usage(key_usage::CRL_SIGN) {
            return Err(invalid(format!(
                "the CRL is signed by {:?}, whose keyUsage lacks cRLSign",
                signer.common_name
            )));
        }
        if let Some(oid) = x509::unknown_critical(&self.extensions, &[]) {
            return Err(invalid(format!(
                "the CRL has an unknown critical extension {oid}"
            )));
        }
        if let Some(oid) = self
            .revoked
            .iter()
            .find_map(|r| x509::unknown_critical(&r.extensions, &[]))
        {
            return Err(invalid(format!(
                "a CRL entry has an unknown critical extension {oid}"
            )));
        }
        if now < self.this_update {
            return Err(invalid(format!(
                "the CRL of {:?} is not valid yet (thisUpdate {})",
                signer.common_name,
                format_rfc3339(self.this_update)
            )));
        }
        if let Some(next) = self.next_update
            && now > next
        {
            return Err(invalid(format!(
                "the CRL of {:?} is out of date (nextUpdate {})",
                signer.common_name,
                format_rfc3339(next)
            )));
        }
        let covered: Vec<&Certificate> = chain
            .iter()
            .filter(|c| c.issuer_der() == signer.subject_der() && !c.is_self_issued())
            .collect();
        if covered.is_empty() {
            return Err(invalid(format!(
                "the CRL of {:?} covers no certificate of this chain",
                signer.common_name
            )));
        }
        for c in &covered {
            if let Some(r) = self.revoked(c.serial()) {
                tracing::warn!(certificate = %c.common_name, serial = %hex::encode(c.serial()),
                    "certificate revoked by CRL");
                return Err(invalid(format!(
                    "{:?} (serial {}) is revoked: the CRL of {:?} lists it since {}",
                    c.common_name,
                    hex::encode(c.serial()),
                    signer.common_name,
                    format_rfc3339(r.date)
                )));
            }
        }
        tracing::debug!(signer = %signer.common_name, certificates = covered.len(),
            "CRL checked: none revoked");
        Ok(RevocationChecked {
            via: "crl",
            signer: signer.common_name.clone(),
            certificates: covered.iter().map(|c| c.common_name.clone()).collect(),
        })
    }
}
