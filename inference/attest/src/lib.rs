//! # fleetmesh-attest
//!
//! Hardware attestation for the `tee-attestation` verification mode, apart from the
//! inference runtime (no candle here): whoever produces or checks evidence — the inference
//! API, the job engines, `meshnode attest` — depends on this crate alone.
//!
//! [`snp`] verifies AMD SEV-SNP attestation reports against the VCEK/VLEK certificate
//! chain up to AMD's root; [`nvidia`] verifies a Hopper GPU's SPDM measurements, its device
//! chain and compares the measurements with a RIM; [`x509`] (certificates and path
//! validation) and [`der`] (a strict DER reader) are the certificate reading they need
//! (signatures by `ring`), [`crl`] and [`ocsp`] the revocation checks (an AMD CRL for the
//! SEV-SNP chain, NVIDIA OCSP responses for the GPU chain), [`xmldsig`] the RIMs' XML
//! signatures (`roxmltree` underneath, Canonical XML 1.1 on top). Evidence that does not
//! parse is [`crate::Error::EvidenceMalformed`]; evidence that parses and fails a check is
//! [`crate::Error::EvidenceInvalid`], with the first failed check. The parsers of untrusted
//! bytes return errors and never panic: [`x509::Certificate::from_der`],
//! [`crl::Crl::from_der`], [`ocsp::OcspResponse::from_der`], [`xmldsig::parse_bytes`] and
//! [`nvidia::verify_rim_bytes`] are their entry points (for fuzzing). [`binding_nonce`] is
//! the one binding of evidence to a job (with [`snp_report_data`] for SEV-SNP); [`collect_report`] asks the host for an SEV-SNP
//! report (and its certificate table), [`gpu::collect_gpu_evidence`] the NVIDIA driver for
//! a GPU's.

pub mod crl;
pub mod der;
pub mod error;
pub mod gpu;
pub mod nvidia;
pub mod ocsp;
pub mod snp;
pub mod x509;
pub mod xmldsig;

pub use error::{Error, Result};

pub(crate) fn malformed(reason: impl Into<String>) -> crate::Error {
    crate::Error::EvidenceMalformed(reason.into())
}

pub(crate) fn invalid(reason: impl Into<String>) -> crate::Error {
    crate::Error::EvidenceInvalid(reason.into())
}

/// The domain separator of [`binding_message`].
pub const BINDING_DOMAIN: &[u8] = b"fleetmesh/tee-binding/v1";

/// What a job's attestation commits to: the domain separator, the model digest, then the
/// prompt ids, the output ids and the job id, each as a little-endian u32 count followed by
/// its items (ids as little-endian u32, the job id as bytes).
pub fn binding_message(
    model_digest: &[u8; 32],
    prompt: &[u32],
    output: &[u32],
    job_id: &[u8],
) -> Vec<u8> {
    let mut m = Vec::with_capacity(BINDING_DOMAIN.len() + 44 + 4 * (prompt.len() + output.len()));
    m.extend_from_slice(BINDING_DOMAIN);
    m.extend_from_slice(model_digest);
    for ids in [prompt, output] {
        m.extend_from_slice(&(ids.len() as u32).to_le_bytes());
        for id in ids {
            m.extend_from_slice(&id.to_le_bytes());
        }
    }
    m.extend_from_slice(&(job_id.len() as u32).to_le_bytes());
    m.extend_from_slice(job_id);
    m
}

/// The one binding of evidence to a job, for every platform and every path — the
/// inference API's `tee-attestation` answers, job receipts (kind 30811, `verdict.nonce`)
/// and `meshnode attest binding` — SHA-256 of [`binding_message`]. An NVIDIA GPU takes it
/// as its SPDM nonce; an SEV-SNP report carries it in REPORT_DATA ([`snp_report_data`]).
/// docs/attestation.md describes the layout for verifiers.
pub fn binding_nonce(
    model_digest: &[u8; 32],
    prompt: &[u32],
    output: &[u32],
    job_id: &[u8],
) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(binding_message(model_digest, prompt, output, job_id)).into()
}

/// The SEV-SNP REPORT_DATA (64 bytes) that carries a binding nonce: the nonce, then 32
/// zero bytes.
pub fn snp_report_data(nonce: &[u8; 32]) -> [u8; 64] {
    let mut data = [0u8; 64];
    data[..32].copy_from_slice(nonce);
    data
}

/// Where Linux exposes confidential-computing reports (configfs-tsm).
pub const TSM_REPORT_DIR: &str = "/sys/kernel/config/tsm/report";

/// What this host's TEE returned: the report, and the certificates the host provides
/// beside it (configfs-tsm `auxblob`), if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collected {
    /// The attestation report (an SEV-SNP report on AMD hosts).
    pub report: Vec<u8>,
    /// The host's certificate table (VCEK or VLEK, ASK, ARK), when it provides one.
    pub certs: Option<snp::CertTable>,
}

/// Asks this host's TEE for an attestation report over `report_data` through Linux
/// configfs-tsm (`TSM_REPORT_DIR`): a fresh entry, `inblob` written, `outblob` read (an
/// SEV-SNP report on AMD hosts) and `auxblob` (the host's certificate table, when it
/// provides one), the entry removed.
///
/// # Errors
/// [`crate::Error::Unavailable`] saying this host has no configfs-tsm (no TEE, or a kernel
/// without it) — evidence is never made up — or what the kernel refused;
/// [`crate::Error::EvidenceMalformed`] for a certificate table that does not parse.
pub fn collect_report(report_data: &[u8; 64]) -> crate::Result<Collected> {
    collect_report_in(std::path::Path::new(TSM_REPORT_DIR), report_data)
}

/// Whether this host can produce SEV-SNP evidence (configfs-tsm is there): check before
/// spending work that must be attested.
///
/// # Errors
/// [`crate::Error::Unavailable`] saying why not.
pub fn tsm_available() -> crate::Result<()> {
    tsm_available_in(std::path::Path::new(TSM_REPORT_DIR))
}

fn tsm_available_in(dir: &std::path::Path) -> crate::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    Err(crate::Error::Unavailable(format!(
        "this host cannot produce TEE evidence: {} does not exist (no SEV-SNP guest with \
         configfs-tsm)",
        dir.display()
    )))
}

/// PEM text of a DER certificate.
pub fn to_pem(der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// [`collect_report`] under another configfs-tsm directory.
///
/// # Errors
/// As [`collect_report`].
pub fn collect_report_in(
    dir: &std::path::Path,
    report_data: &[u8; 64],
) -> crate::Result<Collected> {
    tsm_available_in(dir)?;
    // one report at a time, each in its own entry
    static TURN: std::sync::Mutex<u64> = std::sync::Mutex::new(0);
    let mut n = TURN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *n += 1;
    let entry = dir.join(format!("fleetmesh-{}-{}", std::process::id(), *n));
    let fail = |what: &str, e: std::io::Error| {
        crate::Error::Unavailable(format!("configfs-tsm {what} ({}): {e}", entry.display()))
    };
    std::fs::create_dir(&entry).map_err(|e| fail("create", e))?;
    let result = std::fs::write(entry.join("inblob"), report_data)
        .map_err(|e| fail("inblob", e))
        .and_then(|()| std::fs::read(entry.join("outblob")).map_err(|e| fail("outblob", e)))
        .map(|report| {
            // absent on kernels before 6.10 and empty when the host provides no certificates
            let aux = std::fs::read(entry.join("auxblob")).unwrap_or_default();
            (report, aux)
        });
    let _ = std::fs::remove_dir(&entry);
    let (report, aux) = result?;
    let certs = if aux.is_empty() {
        None
    } else {
        Some(snp::CertTable::parse(&aux)?)
    };
    Ok(Collected { report, certs })
}
