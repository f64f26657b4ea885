//! AMD SEV-SNP attestation reports: parsing (report versions 2 and 3, 1184 bytes), the
//! ECDSA P-384/SHA-384 signature over bytes 0x000–0x29F with the VCEK (or VLEK), the VCEK →
//! ASK → ARK chain (RSA-PSS SHA-384) ending at one of AMD's roots shipped with this crate
//! (Milan, Turin) and validated as a certification path ([`super::x509::verify_path`]:
//! CA flags, key usage, path length, critical extensions), the VCEK's TCB and hardware-ID
//! extensions against the report, and the buyer's policy: REPORT_DATA, MEASUREMENT,
//! minimum TCB, debug, VMPL. Times are checked at the caller's "now". Offsets are from
//! AMD's SEV-SNP ABI specification (report table). Revocation is checked apart, with an
//! AMD CRL: [`check_revocation`].

use super::x509::Certificate;
use super::{invalid, malformed};
use crate::Result;

/// Length of a report.
pub const REPORT_LEN: usize = 0x4A0;
/// End of the signed bytes.
const SIGNED: usize = 0x2A0;

const ARK_MILAN: &str = include_str!("amd/ark_milan.pem");
const ARK_TURIN: &str = include_str!("amd/ark_turin.pem");

/// A TCB version's components.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tcb {
    /// Boot loader SPL.
    pub bootloader: u8,
    /// PSP OS (TEE) SPL.
    pub tee: u8,
    /// SNP firmware SPL.
    pub snp: u8,
    /// Microcode SPL.
    pub microcode: u8,
    /// FMC SPL (Turin and later; 0 before).
    pub fmc: u8,
}

impl Tcb {
    /// Decodes a TCB_VERSION for `product` (Turin moved the fields).
    pub fn decode(raw: u64, product: Product) -> Tcb {
        let b = raw.to_le_bytes();
        match product {
            Product::Turin => Tcb {
                fmc: b[0],
                bootloader: b[1],
                tee: b[2],
                snp: b[3],
                microcode: b[7],
            },
            Product::Milan | Product::Genoa => Tcb {
                bootloader: b[0],
                tee: b[1],
                snp: b[6],
                microcode: b[7],
                fmc: 0,
            },
        }
    }

    /// Whether every component is at least `min`'s.
    pub fn at_least(&self, min: &Tcb) -> bool {
        self.bootloader >= min.bootloader
            && self.tee >= min.tee
            && self.snp >= min.snp
            && self.microcode >= min.microcode
            && self.fmc >= min.fmc
    }
}

/// The processor generation, from the VCEK's product name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Product {
    /// EPYC 7003.
    Milan,
    /// EPYC 9004.
    Genoa,
    /// EPYC 9005.
    Turin,
}

/// A parsed report (the fields the verifier uses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The whole report.
    pub bytes: Vec<u8>,
    /// 2 or 3.
    pub version: u32,
    /// The guest policy.
    pub policy: u64,
    /// The VMPL the report was requested at.
    pub vmpl: u32,
    /// 0: VCEK, 1: VLEK.
    pub signing_key: u8,
    /// The 64 bytes the guest bound into the report.
    pub report_data: [u8; 64],
    /// The launch measurement.
    pub measurement: [u8; 48],
    /// The TCB the report is signed under (raw).
    pub reported_tcb: u64,
    /// The chip's ID (zeros when masked).
    pub chip_id: [u8; 64],
}

/// Policy bit: debugging allowed.
pub const POLICY_DEBUG: u64 = 1 << 19;

impl Report {
    /// Parses a report: 1184 raw bytes, or the same as hex text.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceMalformed`] for another length, version or signature
    /// algorithm.
    pub fn parse(input: &[u8]) -> Result<Report> {
        let bytes = if input.len() == REPORT_LEN {
            input.to_vec()
        } else {
            let text: Vec<u8> = input
                .iter()
                .copied()
                .filter(|b| !b.is_ascii_whitespace())
                .collect();
            hex::decode(&text).map_err(|_| {
                malformed(format!(
                    "SNP report: {} bytes; a report is {REPORT_LEN} bytes (or their hex)",
                    input.len()
                ))
            })?
        };
        if bytes.len() != REPORT_LEN {
            return Err(malformed(format!(
                "SNP report: {} bytes; a report is {REPORT_LEN}",
                bytes.len()
            )));
        }
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
        let version = u32_at(0);
        if !(2..=3).contains(&version) {
            return Err(malformed(format!(
                "SNP report version {version}; versions 2 and 3 are read"
            )));
        }
        let algo = u32_at(0x34);
        if algo != 1 {
            return Err(malformed(format!(
                "SNP report signature algorithm {algo}; only 1 (ECDSA P-384 SHA-384) exists"
            )));
        }
        let arr = |o: usize| -> Vec<u8> { bytes[o..o + 64].to_vec() };
        Ok(Report {
            version,
            policy: u64_at(0x08),
            vmpl: u32_at(0x30),
            signing_key: ((u32_at(0x48) >> 2) & 7) as u8,
            report_data: arr(0x50).try_into().expect("64 bytes"),
            measurement: bytes[0x90..0xC0].try_into().expect("48 bytes"),
            reported_tcb: u64_at(0x180),
            chip_id: arr(0x1A0).try_into().expect("64 bytes"),
            bytes,
        })
    }

    /// The signature as big-endian r ‖ s (the report stores each little-endian in 72
    /// bytes).
    fn signature(&self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(96);
        for at in [SIGNED, SIGNED + 72] {
            let field = &self.bytes[at..at + 72];
            if field[48..].iter().any(|b| *b != 0) {
                return Err(invalid(
                    "SNP report: signature component wider than 384 bits",
                ));
            }
            out.extend(field[..48].iter().rev());
        }
        Ok(out)
    }
}

/// What the buyer requires of a report.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnpPolicy {
    /// REPORT_DATA must equal this (the job binding).
    pub report_data: Option<[u8; 64]>,
    /// MEASUREMENT must equal this.
    pub measurement: Option<[u8; 48]>,
    /// The reported TCB must be at least this in every component.
    pub min_tcb: Option<Tcb>,
    /// Accept a guest whose policy allows debugging (default: refused).
    pub allow_debug: bool,
    /// The report must come from this VMPL.
    pub vmpl: Option<u32>,
}

/// A verified report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The report.
    pub report: Report,
    /// Its processor generation.
    pub product: Product,
    /// Its reported TCB, decoded.
    pub tcb: Tcb,
    /// `VCEK` or `VLEK`.
    pub key: &'static str,
}

const EXT_PRODUCT: &str = "1.3.6.1.4.1.3704.1.2";
const EXT_BL: &str = "1.3.6.1.4.1.3704.1.3.1";
const EXT_TEE: &str = "1.3.6.1.4.1.3704.1.3.2";
const EXT_SNP: &str = "1.3.6.1.4.1.3704.1.3.3";
const EXT_UCODE: &str = "1.3.6.1.4.1.3704.1.3.8";
const EXT_FMC: &str = "1.3.6.1.4.1.3704.1.3.9";
const EXT_HWID: &str = "1.3.6.1.4.1.3704.1.4";

fn ext_int(cert: &Certificate, oid: &str) -> Result<Option<u8>> {
    let Some(v) = cert.extension(oid) else {
        return Ok(None);
    };
    let (t, _) = super::der::expect(v, super::der::tag::INTEGER, oid)?;
    let n = super::der::small_uint(t.body)?;
    u8::try_from(n)
        .map(Some)
        .map_err(|_| malformed(format!("VCEK extension {oid}: {n} is not a TCB level")))
}

/// Verifies `report` with the key certificate `vcek` (a VCEK or VLEK) and `chain` (its
/// issuer, then AMD's root: ASK + ARK, or ASVK + ARK), at `now` (Unix seconds), under
/// `policy`.
///
/// # Errors
/// [`crate::Error::EvidenceInvalid`] with the first reason the report is not to be trusted;
/// [`crate::Error::EvidenceMalformed`] when a certificate extension does not parse.
pub fn verify(
    report: &Report,
    vcek: &Certificate,
    chain: &[Certificate],
    now: i64,
    policy: &SnpPolicy,
) -> Result<Verified> {
    let [ask, ark] = chain else {
        return Err(malformed(format!(
            "the chain has {} certificates; expected the ASK (or ASVK), then the ARK",
            chain.len()
        )));
    };
    let roots = [ARK_MILAN, ARK_TURIN]
        .iter()
        .map(|pem| Certificate::from_pem_bundle(pem).map(|mut v| v.remove(0)))
        .collect::<Result<Vec<_>>>()?;
    if !roots.iter().any(|r| r.der() == ark.der()) {
        return Err(invalid(format!(
            "the root {:?} is not one of AMD's ARKs known here (Milan, Turin)",
            ark.common_name
        )));
    }
    super::x509::verify_path(&[vcek.clone(), ask.clone(), ark.clone()], ark, now)?;
    let key = match report.signing_key {
        0 => "VCEK",
        1 => "VLEK",
        k => {
            return Err(invalid(format!(
                "the report names signing key {k}, not a VCEK or VLEK"
            )));
        }
    };
    use ring::signature::{ECDSA_P384_SHA384_FIXED, UnparsedPublicKey};
    UnparsedPublicKey::new(&ECDSA_P384_SHA384_FIXED, &vcek.public_key)
        .verify(&report.bytes[..SIGNED], &report.signature()?)
        .map_err(|_| {
            invalid(format!(
                "the report's signature does not verify with {:?}",
                vcek.common_name
            ))
        })?;
    let name = vcek
        .extension(EXT_PRODUCT)
        .map(|v| match super::der::read(v) {
            Ok((t, _)) => String::from_utf8_lossy(t.body).into_owned(),
            Err(_) => String::from_utf8_lossy(v).into_owned(),
        })
        .unwrap_or_default();
    let product = if name.starts_with("Milan") {
        Product::Milan
    } else if name.starts_with("Genoa") {
        Product::Genoa
    } else if name.starts_with("Turin") {
        Product::Turin
    } else {
        return Err(invalid(format!(
            "the key certificate names product {name:?}"
        )));
    };
    let tcb = Tcb::decode(report.reported_tcb, product);
    let cert_tcb = Tcb {
        bootloader: ext_int(vcek, EXT_BL)?.unwrap_or(0),
        tee: ext_int(vcek, EXT_TEE)?.unwrap_or(0),
        snp: ext_int(vcek, EXT_SNP)?.unwrap_or(0),
        microcode: ext_int(vcek, EXT_UCODE)?.unwrap_or(0),
        fmc: ext_int(vcek, EXT_FMC)?.unwrap_or(0),
    };
    // VCEKs and VLEKs are both issued for one TCB: a report claiming another is refused
    if cert_tcb != tcb {
        return Err(invalid(format!(
            "the {key} is for TCB {cert_tcb:?}, the report says {tcb:?}"
        )));
    }
    if key == "VCEK" {
        let hwid = vcek
            .extension(EXT_HWID)
            .ok_or_else(|| invalid("the VCEK has no hardware ID extension"))?;
        if hwid.is_empty() || !report.chip_id.starts_with(hwid) {
            return Err(invalid(
                "the VCEK's hardware ID is not the report's chip ID",
            ));
        }
    }
    if let Some(want) = &policy.report_data
        && want != &report.report_data
    {
        return Err(invalid("REPORT_DATA is not the expected binding"));
    }
    if let Some(want) = &policy.measurement
        && want != &report.measurement
    {
        return Err(invalid("MEASUREMENT is not the expected one"));
    }
    if !policy.allow_debug && report.policy & POLICY_DEBUG != 0 {
        return Err(invalid("the guest policy allows debugging"));
    }
    if let Some(v) = policy.vmpl
        && v != report.vmpl
    {
        return Err(invalid(format!("VMPL {} (expected {v})", report.vmpl)));
    }
    if let Some(min) = &policy.min_tcb
        && !tcb.at_least(min)
    {
        return Err(invalid(format!("TCB {tcb:?} is below the minimum {min:?}")));
    }
    Ok(Verified {
        report: report.clone(),
        product,
        tcb,
        key,
    })
}

/// Checks the VCEK's chain (`vcek`, then `chain`: ASK, ARK — as [`verify`] took them,
/// after it accepted them) against AMD CRLs at `now`: each CRL must be signed by the ARK
/// or the ASK and list none of the certificates its signer issued (the ARK's CRL covers
/// the ASK; a CRL by the ASK would cover the VCEK).
///
/// # Errors
/// [`crate::Error::EvidenceInvalid`] for a revoked certificate (named, with its serial
/// number) or a CRL that does not verify, is not current, or has an unknown critical
/// extension.
pub fn check_revocation(
    vcek: &Certificate,
    chain: &[Certificate],
    crls: &[super::crl::Crl],
    now: i64,
) -> Result<Vec<super::x509::RevocationChecked>> {
    let full: Vec<Certificate> = std::iter::once(vcek.clone())
        .chain(chain.iter().cloned())
        .collect();
    crls.iter().map(|crl| crl.check(&full, now)).collect()
}

/// GUIDs of the certificate table (SEV-SNP GHCB specification), as stored: RFC 4122 byte
/// order.
const GUID_VCEK: [u8; 16] = guid("63da758de6644564adc5f4b93be8accd");
const GUID_VLEK: [u8; 16] = guid("a8074bc2a25a483eaae639c045a0b8a1");
const GUID_ASK: [u8; 16] = guid("4ab7b379bbac4fe4a02f05aef327c782");
const GUID_ARK: [u8; 16] = guid("c0b406a4a803495297433fb6014cd0ae");

/// A GUID from its 32 hex digits.
const fn guid(hex: &str) -> [u8; 16] {
    const fn nibble(c: u8) -> u8 {
        match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => panic!("not a lowercase hex digit"),
        }
    }
    let h = hex.as_bytes();
    assert!(h.len() == 32, "32 hex digits");
    let mut out = [0u8; 16];
    let mut n = 0;
    while n < 16 {
        out[n] = nibble(h[2 * n]) << 4 | nibble(h[2 * n + 1]);
        n += 1;
    }
    out
}

/// The certificates a host hands its guest beside a report: the certificate table of
/// SNP_GET_EXT_REPORT, which configfs-tsm exposes as `auxblob` — entries of (GUID,
/// little-endian u32 offset, u32 length) ended by an all-zero GUID, offsets counted from
/// the table's start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertTable {
    /// The VCEK (DER), when the host provides it.
    pub vcek: Option<Vec<u8>>,
    /// The VLEK (DER), for hosts that sign with a loaded key.
    pub vlek: Option<Vec<u8>>,
    /// The ASK (DER).
    pub ask: Option<Vec<u8>>,
    /// The ARK (DER).
    pub ark: Option<Vec<u8>>,
    /// Entries with other GUIDs (e.g. a CRL), kept as they are.
    pub other: Vec<([u8; 16], Vec<u8>)>,
}

impl CertTable {
    /// Reads a certificate table.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceMalformed`] for an entry outside the blob, a GUID twice, or
    /// a table without its terminating entry.
    pub fn parse(aux: &[u8]) -> Result<CertTable> {
        let mut t = CertTable::default();
        let mut at = 0;
        loop {
            let entry = aux
                .get(at..at + 24)
                .ok_or_else(|| malformed("the certificate table has no terminating entry"))?;
            let g: [u8; 16] = entry[..16].try_into().expect("16 bytes");
            if g == [0; 16] {
                return Ok(t);
            }
            let word = |i: usize| {
                u32::from_le_bytes(entry[i..i + 4].try_into().expect("4 bytes")) as usize
            };
            let (off, len) = (word(16), word(20));
            let body = aux
                .get(off..off.saturating_add(len))
                .ok_or_else(|| {
                    malformed(format!(
                        "certificate table entry {} points outside the blob ({off}+{len} of {})",
                        at / 24,
                        aux.len()
                    ))
                })?
                .to_vec();
            let slot = match g {
                GUID_VCEK => &mut t.vcek,
                GUID_VLEK => &mut t.vlek,
                GUID_ASK => &mut t.ask,
                GUID_ARK => &mut t.ark,
                _ => {
                    t.other.push((g, body));
                    at += 24;
                    continue;
                }
            };
            if slot.replace(body).is_some() {
                return Err(malformed("the certificate table lists a certificate twice"));
            }
            at += 24;
        }
    }

    /// Writes the table (what a host would provide; certificates after the entries).
    pub fn encode(&self) -> Vec<u8> {
        let mut entries: Vec<([u8; 16], &[u8])> = [
            (GUID_VCEK, &self.vcek),
            (GUID_VLEK, &self.vlek),
            (GUID_ASK, &self.ask),
            (GUID_ARK, &self.ark),
        ]
        .into_iter()
        .filter_map(|(g, c)| c.as_deref().map(|c| (g, c)))
        .collect();
        entries.extend(self.other.iter().map(|(g, c)| (*g, c.as_slice())));
        let mut off = 24 * (entries.len() + 1);
        let mut head: Vec<u8> = Vec::new();
        let mut body: Vec<u8> = Vec::new();
        for (g, c) in entries {
            head.extend(g);
            head.extend((off as u32).to_le_bytes());
            head.extend((c.len() as u32).to_le_bytes());
            body.extend(c);
            off += c.len();
        }
        head.extend([0u8; 24]);
        head.extend(body);
        head
    }

    /// The report's signing key (VCEK, else VLEK) and its chain (ASK, ARK), parsed, when
    /// the table has all three — what [`verify`] takes.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceMalformed`] for a certificate that does not parse.
    pub fn chain(&self) -> Result<Option<(Certificate, Vec<Certificate>)>> {
        let (Some(key), Some(ask), Some(ark)) = (
            self.vcek.as_ref().or(self.vlek.as_ref()),
            &self.ask,
            &self.ark,
        ) else {
            return Ok(None);
        };
        Ok(Some((
            Certificate::from_der_or_pem(key)?,
            vec![
                Certificate::from_der_or_pem(ask)?,
                Certificate::from_der_or_pem(ark)?,
            ],
        )))
    }
}
