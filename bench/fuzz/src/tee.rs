//! The attestation evidence readers: SEV-SNP reports and certificate tables, NVIDIA SPDM
//! measurements, DER, X.509 certificates, CRLs, OCSP responses and RIMs (XML signatures).

use std::sync::OnceLock;

use fleetmesh_attest::der::{self, Tlv, tag};
use fleetmesh_attest::x509::{self, Certificate, key_usage};
use fleetmesh_attest::{crl::Crl, nvidia, ocsp::OcspResponse, snp, xmldsig};

/// The checks' clock ([`crate::NOW`], 2026-06-01T00:00:00Z): when the test PKI's CRLs and
/// OCSP responses are current (`inference/attest/tests/vectors/tee/pki/README.md`).
pub const NOW: i64 = crate::NOW as i64;

/// The test PKI (leaf, intermediate, root), for the revocation checks to run against.
fn pki_chain() -> &'static [Certificate] {
    static CHAIN: OnceLock<Vec<Certificate>> = OnceLock::new();
    CHAIN.get_or_init(|| {
        Certificate::from_pem_bundle(include_str!(
            "../../../inference/attest/tests/vectors/tee/pki/chain.pem"
        ))
        .expect("the test PKI parses")
    })
}

/// NVIDIA's sample Hopper device chain (leaf first).
fn hopper_chain() -> &'static [Certificate] {
    static CHAIN: OnceLock<Vec<Certificate>> = OnceLock::new();
    CHAIN.get_or_init(|| {
        Certificate::from_pem_bundle(include_str!(
            "../../../inference/attest/tests/vectors/tee/nvidia/nvtrust/hopperCertChain.txt"
        ))
        .expect("the sample Hopper chain parses")
    })
}

/// An SEV-SNP report (raw or hex) and, the same bytes, a host certificate table
/// (`auxblob`) whose certificates are then read.
pub fn snp(data: &[u8]) {
    if let Ok(r) = snp::Report::parse(data) {
        assert_eq!(r.bytes.len(), snp::REPORT_LEN);
        let _ = snp::Tcb::decode(r.reported_tcb, snp::Product::Milan);
        let _ = snp::Tcb::decode(r.reported_tcb, snp::Product::Turin);
    }
    if let Ok(t) = snp::CertTable::parse(data) {
        let _ = t.chain();
        // what a host would write reads back the same
        assert_eq!(
            snp::CertTable::parse(&t.encode()).expect("an encoded table parses"),
            t
        );
    }
}

/// NVIDIA SPDM GET_MEASUREMENTS evidence (raw or hex): the fields, the comparison with a
/// RIM, and the signature check with the sample Hopper device certificate.
pub fn spdm(data: &[u8]) {
    let Ok(e) = nvidia::Evidence::parse(data) else {
        return;
    };
    let _ = (e.driver_version(), e.vbios_version());
    for (i, _) in &e.blocks {
        assert!(e.block(*i).is_some());
    }
    let rim = nvidia::Rim {
        name: String::new(),
        version: String::new(),
        entries: vec![(0, vec![vec![0; 48]]), (9, vec![]), (254, vec![vec![1]])],
    };
    let _ = nvidia::mismatches(&e, &rim);
    let _ = nvidia::check_signature(&e, &hopper_chain()[0]);
}

/// Walks DER: every element, its children, and the value readers by tag.
pub fn der(data: &[u8]) {
    walk(data, 0);
}

fn walk(mut input: &[u8], depth: usize) {
    while !input.is_empty() {
        let Ok((t, rest)) = der::read(input) else {
            return;
        };
        assert_eq!(t.raw.len(), input.len() - rest.len());
        value(&t, depth);
        input = rest;
    }
}

fn value(t: &Tlv<'_>, depth: usize) {
    match t.tag {
        tag::INTEGER => {
            let _ = der::small_uint(t.body);
        }
        tag::BOOLEAN => {
            let _ = der::boolean(t.body);
        }
        tag::OID => {
            let _ = der::oid(t.body);
        }
        tag::BIT_STRING => {
            let _ = der::bit_string_bytes(t.body);
        }
        tag::UTC_TIME | tag::GENERALIZED_TIME => {
            let _ = der::time(t);
        }
        _ if t.tag & 0x20 != 0 && depth < 32 => {
            if let Ok(children) = der::children(t.body) {
                for c in &children {
                    value(c, depth + 1);
                }
            }
            let mut f = der::Fields::new(t.body, "fuzz");
            let _ = f.optional(tag::explicit(0));
            let _ = f.next(tag::INTEGER, "first");
            let _ = f.any("second");
            let _ = f.finish();
        }
        _ => {}
    }
}

fn check_certificate(c: &Certificate) {
    let _ = (c.serial(), c.subject_der(), c.issuer_der(), c.extensions());
    let _ = (c.basic_constraints(), c.ext_key_usage(), c.is_self_issued());
    let _ = c.has_key_usage(key_usage::DIGITAL_SIGNATURE | key_usage::KEY_CERT_SIGN);
    let _ = (
        c.check_can_issue(),
        c.check_critical(&[]),
        c.check_time(NOW),
    );
    let _ = c.check_issued_by(c);
    let _ = x509::verify_path(std::slice::from_ref(c), c, NOW);
    let chain = pki_chain();
    let _ = x509::verify_path(
        &[c.clone(), chain[1].clone(), chain[2].clone()],
        &chain[2],
        NOW,
    );
    assert_eq!(
        Certificate::from_der(c.der())
            .expect("its own DER parses")
            .der(),
        c.der()
    );
}

/// An X.509 certificate (DER, or PEM text): the fields, the extensions the path
/// validation reads, and a path to itself and through the test PKI.
pub fn x509(data: &[u8]) {
    if let Ok(c) = Certificate::from_der(data) {
        check_certificate(&c);
    }
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(certs) = Certificate::from_pem_bundle(text)
    {
        certs.iter().for_each(check_certificate);
    }
}

/// A CRL (DER or PEM), checked against the test PKI.
pub fn crl(data: &[u8]) {
    let Ok(c) = Crl::from_der_or_pem(data) else {
        return;
    };
    for r in &c.revoked {
        assert!(c.revoked(&r.serial).is_some());
    }
    let chain = pki_chain();
    let _ = c.check(chain, NOW);
    let _ = c.check(&chain[1..], NOW);
}

/// An OCSP response, checked against the test PKI and the Hopper chain.
pub fn ocsp(data: &[u8]) {
    let Ok(r) = OcspResponse::from_der(data) else {
        return;
    };
    for c in &r.certs {
        check_certificate(c);
    }
    let _ = r.check(pki_chain(), NOW);
    let _ = r.check(hopper_chain(), NOW);
}

/// A RIM: the XML reader, canonicalization, the enveloped signature's structure, the
/// measurement entries, and the whole verification.
pub fn rim(data: &[u8]) {
    let Ok(doc) = xmldsig::parse_bytes(data) else {
        return;
    };
    let _ = xmldsig::canonicalize_document(&doc, &|_| false);
    let _ = xmldsig::canonicalize_subtree(&doc, &doc.root);
    let _ = xmldsig::enveloped(&doc);
    let text = std::str::from_utf8(data).expect("parsed as UTF-8");
    if let Ok(rim) = nvidia::Rim::parse(text) {
        let evidence =
            nvidia::Evidence::parse(include_bytes!("../corpus/tee_spdm/hopper_evidence.bin"))
                .expect("the sample evidence parses");
        let _ = nvidia::mismatches(&evidence, &rim);
    }
    let _ = nvidia::verify_rim_bytes(data, NOW);
}
