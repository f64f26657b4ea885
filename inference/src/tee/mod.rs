//! Hardware attestation for the `tee-attestation` verification mode.
//!
//! [`snp`] verifies AMD SEV-SNP attestation reports against the VCEK/VLEK certificate
//! chain up to AMD's root; [`nvidia`] verifies a Hopper GPU's SPDM measurements, its device
//! chain and compares the measurements with a RIM; [`x509`] and [`der`] are the certificate reading it needs
//! (signatures by `ring`). Evidence that does not parse is
//! [`crate::Error::EvidenceMalformed`]; evidence that parses and fails a check is
//! [`crate::Error::EvidenceInvalid`], with the first failed check.

pub mod der;
pub mod nvidia;
pub mod snp;
pub mod x509;

pub(crate) fn malformed(reason: impl Into<String>) -> crate::Error {
    crate::Error::EvidenceMalformed(reason.into())
}

pub(crate) fn invalid(reason: impl Into<String>) -> crate::Error {
    crate::Error::EvidenceInvalid(reason.into())
}
