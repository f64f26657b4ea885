//! NVIDIA Confidential Computing (Hopper) evidence: the SPDM 1.1 GET_MEASUREMENTS request
//! and signed response the GPU returns, its device certificate chain up to the NVIDIA
//! Device Identity CA (shipped with this crate), the requester's nonce, and the comparison
//! of the measurement blocks with a reference integrity manifest (RIM, a TCG SWID tag).
//!
//! Layout (DMTF DSP0274 1.1): the 37-byte request (version, code 0xE0, param1 with the
//! signature bit, param2, 32-byte nonce, slot), then the response: version, code 0x60,
//! two params, the number of blocks, a 24-bit record length, the record (blocks of index,
//! specification, 16-bit size, then a DMTF measurement: type, 16-bit length, value), the
//! responder's 32-byte nonce, a 16-bit opaque length and the opaque data (NVIDIA's
//! type-length-value fields: driver and VBIOS versions …), and a 96-byte ECDSA P-384
//! signature (r ‖ s) over everything before it, request included.

use super::x509::Certificate;
use super::{invalid, malformed};
use crate::Result;

const DEVICE_ROOT: &str = include_str!("nvidia/device_root.pem");
const RIM_ROOT: &str = include_str!("nvidia/rim_root.pem");
const REQUEST_LEN: usize = 37;
const SIGNATURE_LEN: usize = 96;

/// Parsed GET_MEASUREMENTS evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    bytes: Vec<u8>,
    /// The requester's nonce (the job binding).
    pub nonce: [u8; 32],
    /// The measurement blocks: (index, value).
    pub blocks: Vec<(u8, Vec<u8>)>,
    /// The opaque data fields: (type, value).
    pub opaque: Vec<(u16, Vec<u8>)>,
}

impl Evidence {
    /// Parses evidence: raw bytes, or their hex.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceMalformed`] naming the field that does not fit.
    pub fn parse(input: &[u8]) -> Result<Evidence> {
        let text: Vec<u8> = input
            .iter()
            .copied()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        let bytes = match hex::decode(&text) {
            Ok(b) if input.first() != Some(&0x11) => b,
            _ => input.to_vec(),
        };
        let short = |what: &str| malformed(format!("SPDM evidence: ends inside {what}"));
        if bytes.len() < REQUEST_LEN + 8 + 32 + 2 + SIGNATURE_LEN {
            return Err(short("the header"));
        }
        let req = &bytes[..REQUEST_LEN];
        if req[1] != 0xE0 || req[2] & 1 == 0 {
            return Err(malformed(
                "SPDM evidence: the request is not a signed GET_MEASUREMENTS",
            ));
        }
        let resp = &bytes[REQUEST_LEN..];
        if resp[1] != 0x60 {
            return Err(malformed("SPDM evidence: the response is not MEASUREMENTS"));
        }
        let count = usize::from(resp[4]);
        let record_len =
            usize::from(resp[5]) | usize::from(resp[6]) << 8 | usize::from(resp[7]) << 16;
        let record = resp
            .get(8..8 + record_len)
            .ok_or_else(|| short("the record"))?;
        let mut blocks = Vec::with_capacity(count);
        let mut at = 0;
        while at < record.len() {
            let head = record
                .get(at..at + 4)
                .ok_or_else(|| short("a block header"))?;
            let size = usize::from(u16::from_le_bytes([head[2], head[3]]));
            let m = record
                .get(at + 4..at + 4 + size)
                .ok_or_else(|| short("a block"))?;
            let vlen = m
                .get(1..3)
                .map(|l| usize::from(u16::from_le_bytes([l[0], l[1]])))
                .ok_or_else(|| short("a measurement"))?;
            let value = m.get(3..3 + vlen).ok_or_else(|| short("a measurement"))?;
            blocks.push((head[0], value.to_vec()));
            at += 4 + size;
        }
        if blocks.len() != count {
            return Err(malformed(format!(
                "SPDM evidence: {} blocks in a record that announces {count}",
                blocks.len()
            )));
        }
        let mut at = REQUEST_LEN + 8 + record_len + 32;
        let olen = bytes
            .get(at..at + 2)
            .map(|l| usize::from(u16::from_le_bytes([l[0], l[1]])))
            .ok_or_else(|| short("the opaque length"))?;
        at += 2;
        let opaque_bytes = bytes
            .get(at..at + olen)
            .ok_or_else(|| short("the opaque data"))?;
        if bytes.len() != at + olen + SIGNATURE_LEN {
            return Err(malformed(format!(
                "SPDM evidence: {} bytes after the opaque data; the signature is {SIGNATURE_LEN}",
                bytes.len() - at - olen
            )));
        }
        let mut opaque = Vec::new();
        let mut o = 0;
        while o + 4 <= opaque_bytes.len() {
            let t = u16::from_le_bytes([opaque_bytes[o], opaque_bytes[o + 1]]);
            let l = usize::from(u16::from_le_bytes([
                opaque_bytes[o + 2],
                opaque_bytes[o + 3],
            ]));
            let v = opaque_bytes
                .get(o + 4..o + 4 + l)
                .ok_or_else(|| short("an opaque field"))?;
            opaque.push((t, v.to_vec()));
            o += 4 + l;
        }
        Ok(Evidence {
            nonce: req[4..36].try_into().expect("32 bytes"),
            blocks,
            opaque,
            bytes,
        })
    }

    /// The driver version the GPU reports (opaque field 3).
    pub fn driver_version(&self) -> Option<String> {
        self.opaque_text(3)
    }

    /// The VBIOS version the GPU reports (opaque field 6), as NVIDIA writes it
    /// (`96.00.9F.00.01`).
    pub fn vbios_version(&self) -> Option<String> {
        let (_, b) = self.opaque.iter().find(|(k, _)| *k == 6)?;
        (b.len() >= 5).then(|| {
            format!(
                "{:02X}.{:02X}.{:02X}.{:02X}.{:02X}",
                b[3], b[2], b[1], b[0], b[4]
            )
        })
    }

    fn opaque_text(&self, t: u16) -> Option<String> {
        self.opaque
            .iter()
            .find(|(k, _)| *k == t)
            .map(|(_, v)| String::from_utf8_lossy(v).trim_end_matches('\0').to_owned())
    }

    /// The measurement value of block `index`.
    pub fn block(&self, index: u8) -> Option<&[u8]> {
        self.blocks
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, v)| v.as_slice())
    }
}

/// Checks a GPU's certificate chain (leaf first): it ends at the NVIDIA Device Identity CA
/// and is a valid certification path at `now` ([`super::x509::verify_path`]: each
/// certificate issued by the next, issuers are CAs allowed to sign certificates, path
/// lengths and critical extensions respected, all valid at `now`).
///
/// # Errors
/// [`crate::Error::EvidenceInvalid`] with the first failed check.
pub fn check_chain(chain: &[Certificate], now: i64) -> Result<()> {
    if chain.len() < 2 {
        return Err(malformed(
            "the GPU's chain needs at least the device certificate and the root",
        ));
    }
    check_chain_to(chain, DEVICE_ROOT, "the NVIDIA Device Identity CA", now)
}

/// `chain` (leaf first) ends at the certificate in `root_pem` and is a valid path at `now`.
fn check_chain_to(chain: &[Certificate], root_pem: &str, root_name: &str, now: i64) -> Result<()> {
    let root = Certificate::from_pem_bundle(root_pem)?.remove(0);
    let last = chain
        .last()
        .ok_or_else(|| malformed("an empty certificate chain"))?;
    if last.der() != root.der() {
        return Err(invalid(format!(
            "the chain ends at {:?}, not {root_name}",
            last.common_name
        )));
    }
    super::x509::verify_path(chain, &root, now)
}

/// Checks the GPU's chain (as [`check_chain`] accepted it) against OCSP responses at
/// `now`: each must be signed by the issuer of a certificate it covers (or that issuer's
/// delegated responder), be current, and say every certificate of the chain it covers is
/// good.
///
/// # Errors
/// [`crate::Error::EvidenceInvalid`] for a revoked or unknown certificate (named, with its
/// serial number) or a response that does not verify, is not current or covers nothing
/// of the chain.
pub fn check_revocation(
    chain: &[Certificate],
    responses: &[super::ocsp::OcspResponse],
    now: i64,
) -> Result<Vec<super::x509::RevocationChecked>> {
    responses.iter().map(|r| r.check(chain, now)).collect()
}

/// A certificate whose key signs evidence or a RIM: digitalSignature, when it has a
/// keyUsage.
fn signing_usage(c: &Certificate) -> Result<()> {
    if c.has_key_usage(super::x509::key_usage::DIGITAL_SIGNATURE) {
        Ok(())
    } else {
        Err(invalid(format!(
            "{:?} signs, but its keyUsage lacks digitalSignature",
            c.common_name
        )))
    }
}

/// Checks the response's signature with the device (leaf) certificate's key.
///
/// # Errors
/// [`crate::Error::EvidenceInvalid`] when it does not verify.
pub fn check_signature(e: &Evidence, leaf: &Certificate) -> Result<()> {
    signing_usage(leaf)?;
    let signed = e.bytes.len() - SIGNATURE_LEN;
    use ring::signature::{ECDSA_P384_SHA384_FIXED, UnparsedPublicKey};
    UnparsedPublicKey::new(&ECDSA_P384_SHA384_FIXED, &leaf.public_key)
        .verify(&e.bytes[..signed], &e.bytes[signed..])
        .map_err(|_| {
            invalid(format!(
                "the measurements' signature does not verify with {:?}",
                leaf.common_name
            ))
        })
}

/// Verifies `e`: [`check_chain`], [`check_signature`] with the chain's leaf, and, if given,
/// that the request's nonce is `nonce`.
///
/// # Errors
/// [`crate::Error::EvidenceInvalid`] with the first failed check.
pub fn verify(
    e: &Evidence,
    chain: &[Certificate],
    now: i64,
    nonce: Option<&[u8; 32]>,
) -> Result<()> {
    check_chain(chain, now)?;
    check_signature(e, &chain[0])?;
    if let Some(want) = nonce
        && want != &e.nonce
    {
        return Err(invalid("the SPDM nonce is not the expected binding"));
    }
    Ok(())
}

/// A reference integrity manifest: the golden measurements of a driver or VBIOS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rim {
    /// The SWID tag's `name` and `version` attributes.
    pub name: String,
    /// The driver or VBIOS version the RIM describes (`Meta`'s `colloquialVersion`).
    pub version: String,
    /// Active entries: (index, accepted values).
    pub entries: Vec<(u32, Vec<Vec<u8>>)>,
}

impl Rim {
    /// Reads the active `Resource type="Measurement"` entries of a RIM (TCG SWID tag XML)
    /// without authenticating it; [`verify_rim`] checks its signature first.
    ///
    /// # Errors
    /// [`crate::Error::EvidenceMalformed`] when it has no measurement entries or one is
    /// unreadable.
    pub fn parse(xml: &str) -> Result<Rim> {
        Rim::from_document(&super::xmldsig::parse(xml)?)
    }

    /// The entries of a parsed RIM document; the `Signature` subtree (not covered by the
    /// signature's digest) is never read.
    fn from_document(doc: &super::xmldsig::Document) -> Result<Rim> {
        use super::xmldsig::{DSIG_NS, Element};
        fn walk<'a>(e: &'a Element, out: &mut Vec<&'a Element>) {
            if e.is(DSIG_NS, "Signature") {
                return;
            }
            out.push(e);
            for x in e.elements() {
                walk(x, out);
            }
        }
        let root = &doc.root;
        let mut all = Vec::new();
        walk(root, &mut all);
        let get = |e: &Element, k: &str| e.attr_local(k).map(str::to_owned);
        let name = if root.local_name() == "SoftwareIdentity" {
            format!(
                "{} {}",
                get(root, "name").unwrap_or_default(),
                get(root, "version").unwrap_or_default()
            )
        } else {
            String::new()
        };
        let mut entries = Vec::new();
        for e in &all {
            if e.local_name() == "Resource"
                && get(e, "type").as_deref() == Some("Measurement")
                && get(e, "active").is_some_and(|a| a.trim().eq_ignore_ascii_case("true"))
            {
                let index: u32 = get(e, "index")
                    .and_then(|i| i.trim().parse().ok())
                    .ok_or_else(|| malformed("RIM: a measurement without an index"))?;
                let hashes = e
                    .attrs
                    .iter()
                    .filter(|a| a.local.starts_with("Hash"))
                    .map(|a| hex::decode(a.value.trim()))
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|_| {
                        malformed(format!("RIM: measurement {index}: a hash is not hex"))
                    })?;
                entries.push((index, hashes));
            }
        }
        if entries.is_empty() {
            return Err(malformed("RIM: no active measurement entries"));
        }
        let version = all
            .iter()
            .find(|e| e.local_name() == "Meta")
            .and_then(|m| get(m, "colloquialVersion"))
            .unwrap_or_default();
        Ok(Rim {
            version,
            name,
            entries,
        })
    }
}

/// Authenticates a RIM and reads it: its enveloped XML signature (c14n 1.1, SHA-384
/// digest, ECDSA P-384) by the first `KeyInfo` certificate, whose chain in `KeyInfo` ends at
/// the NVIDIA RIM root shipped with this crate, every certificate valid at `now`.
///
/// # Errors
/// [`crate::Error::EvidenceInvalid`] with the first failed check;
/// [`crate::Error::EvidenceMalformed`] for XML or a signature this reader does not take.
pub fn verify_rim(xml: &str, now: i64) -> Result<Rim> {
    verify_rim_document(&super::xmldsig::parse(xml)?, now)
}

/// [`verify_rim`] of bytes that must be UTF-8 (the entry point for untrusted bytes; never
/// panics).
///
/// # Errors
/// As [`verify_rim`].
pub fn verify_rim_bytes(xml: &[u8], now: i64) -> Result<Rim> {
    verify_rim_document(&super::xmldsig::parse_bytes(xml)?, now)
}

fn verify_rim_document(root: &super::xmldsig::Document, now: i64) -> Result<Rim> {
    let signed = super::xmldsig::enveloped(root)?;
    let certs = signed
        .certificates
        .iter()
        .map(|d| Certificate::from_der(d))
        .collect::<Result<Vec<_>>>()?;
    let signer = certs
        .first()
        .ok_or_else(|| malformed("RIM: no signing certificate in KeyInfo"))?;
    // the golden values are read from the tree the digest covered, never from the text again
    check_chain_to(&certs, RIM_ROOT, "the NVIDIA RIM root", now)?;
    signing_usage(signer)?;
    use ring::signature::{ECDSA_P384_SHA384_FIXED, UnparsedPublicKey};
    UnparsedPublicKey::new(&ECDSA_P384_SHA384_FIXED, &signer.public_key)
        .verify(&signed.signed_info, &signed.signature)
        .map_err(|_| {
            invalid(format!(
                "the RIM's signature does not verify with {:?}",
                signer.common_name
            ))
        })?;
    Rim::from_document(root)
}

/// The RIM indices whose measurement in `e` (block index + 1) is missing or matches none
/// of the RIM's values, in RIM order.
pub fn mismatches(e: &Evidence, rim: &Rim) -> Vec<u32> {
    rim.entries
        .iter()
        .filter(|(index, values)| {
            let block = u8::try_from(index + 1).ok().and_then(|i| e.block(i));
            !block.is_some_and(|b| values.iter().any(|v| v == b))
        })
        .map(|(i, _)| *i)
        .collect()
}
