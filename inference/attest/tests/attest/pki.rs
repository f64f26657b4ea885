//! Certification path validation and revocation against trust anchors made here: chains
//! and CRLs from `rcgen` (ECDSA P-384) with a root generated in the test, OCSP responses
//! assembled here in DER and signed with the test keys, and the fixtures of
//! `tests/vectors/tee/pki/` (made by Python's `cryptography` with `gen.py`: an independent
//! encoder). Every bad chain, CRL and response is refused with an error naming the reason;
//! the good ones are accepted.

use fleetmesh_attest::Error;
use fleetmesh_attest::crl::Crl;
use fleetmesh_attest::x509::{Certificate, parse_rfc3339, verify_path};
use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, CrlDistributionPoint,
    CrlIssuingDistributionPoint, CustomExtension, DnType, IsCa, Issuer, KeyIdMethod, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P384_SHA384, RevokedCertParams, SerialNumber, date_time_ymd,
};

pub(crate) fn now() -> i64 {
    parse_rfc3339("2026-06-01T00:00:00Z").unwrap()
}

/// A certificate made here: its parameters, key, and our parse of it.
pub(crate) struct Made {
    pub(crate) params: CertificateParams,
    pub(crate) key: KeyPair,
    pub(crate) cert: Certificate,
}

pub(crate) fn params(cn: &str, serial: u8, ca: IsCa) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.not_before = date_time_ymd(2025, 1, 1);
    p.not_after = date_time_ymd(2030, 1, 1);
    p.serial_number = Some(SerialNumber::from_slice(&[0x10, serial]));
    p.key_usages = if matches!(ca, IsCa::Ca(_)) {
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign]
    } else {
        vec![KeyUsagePurpose::DigitalSignature]
    };
    p.is_ca = ca;
    p
}

pub(crate) fn ca(cn: &str, serial: u8) -> CertificateParams {
    params(cn, serial, IsCa::Ca(BasicConstraints::Unconstrained))
}

pub(crate) fn der_of(params: &CertificateParams, key: &KeyPair, by: Option<&Made>) -> Vec<u8> {
    match by {
        None => params.self_signed(key),
        Some(i) => params.signed_by(key, &Issuer::from_params(&i.params, &i.key)),
    }
    .unwrap()
    .der()
    .to_vec()
}

pub(crate) fn make(params: CertificateParams, by: Option<&Made>) -> Made {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).unwrap();
    let der = der_of(&params, &key, by);
    let cert = Certificate::from_der(&der).unwrap();
    Made { params, key, cert }
}

pub(crate) fn chain(made: &[&Made]) -> Vec<Certificate> {
    made.iter().map(|m| m.cert.clone()).collect()
}

pub(crate) fn invalid<T: std::fmt::Debug>(r: fleetmesh_attest::Result<T>, says: &str) {
    match r {
        Err(Error::EvidenceInvalid(m)) => assert!(m.contains(says), "{m:?} lacks {says:?}"),
        other => panic!("expected invalid ({says}), got {other:?}"),
    }
}

pub(crate) fn malformed<T: std::fmt::Debug>(r: fleetmesh_attest::Result<T>, says: &str) {
    match r {
        Err(Error::EvidenceMalformed(m)) => assert!(m.contains(says), "{m:?} lacks {says:?}"),
        other => panic!("expected malformed ({says}), got {other:?}"),
    }
}

/// root → intermediate (pathLen 0) → leaf.
pub(crate) fn good() -> (Made, Made, Made) {
    let root = make(ca("test root", 1), None);
    let inter = make(
        params(
            "test intermediate",
            2,
            IsCa::Ca(BasicConstraints::Constrained(0)),
        ),
        Some(&root),
    );
    let leaf = make(params("test leaf", 3, IsCa::NoCa), Some(&inter));
    (root, inter, leaf)
}

#[test]
pub(crate) fn a_good_chain_is_accepted_and_each_broken_rule_is_named() {
    let (root, inter, leaf) = good();
    let anchor = &root.cert;
    verify_path(&chain(&[&leaf, &inter, &root]), anchor, now()).unwrap();
    assert_eq!(leaf.cert.serial(), &[0x10, 3]);
    // the root alone, and a chain ending elsewhere
    verify_path(&chain(&[&root]), anchor, now()).unwrap();
    let other = make(ca("test root", 1), None);
    invalid(
        verify_path(&chain(&[&leaf, &inter, &root]), &other.cert, now()),
        "not the trust anchor",
    );

    // a non-CA intermediate: basicConstraints without cA, or no basicConstraints at all
    for not_ca in [IsCa::ExplicitNoCa, IsCa::NoCa] {
        let mut p = params("not a CA", 4, not_ca);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let inter = make(p, Some(&root));
        let leaf = make(params("test leaf", 3, IsCa::NoCa), Some(&inter));
        invalid(
            verify_path(&chain(&[&leaf, &inter, &root]), anchor, now()),
            "\"not a CA\" issues certificates but is not a CA (basicConstraints",
        );
    }
    // a CA whose keyUsage does not allow certificate signing
    let mut p = ca("no keyCertSign", 5);
    p.key_usages = vec![KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let inter = make(p, Some(&root));
    let leaf = make(params("test leaf", 3, IsCa::NoCa), Some(&inter));
    invalid(
        verify_path(&chain(&[&leaf, &inter, &root]), anchor, now()),
        "keyUsage lacks keyCertSign",
    );

    // a path longer than a pathLenConstraint allows: root → A (pathLen 0) → B → leaf
    let a = make(
        params("A", 6, IsCa::Ca(BasicConstraints::Constrained(0))),
        Some(&root),
    );
    let b = make(ca("B", 7), Some(&a));
    let leaf = make(params("test leaf", 3, IsCa::NoCa), Some(&b));
    invalid(
        verify_path(&chain(&[&leaf, &b, &a, &root]), anchor, now()),
        "\"A\" allows 0 intermediate CA certificate(s) below it (pathLenConstraint); the chain has 1",
    );
    // pathLen 1 allows exactly that
    let a1 = make(
        params("A", 6, IsCa::Ca(BasicConstraints::Constrained(1))),
        Some(&root),
    );
    let b1 = make(ca("B", 7), Some(&a1));
    let leaf1 = make(params("test leaf", 3, IsCa::NoCa), Some(&b1));
    verify_path(&chain(&[&leaf1, &b1, &a1, &root]), anchor, now()).unwrap();

    // an unknown critical extension (on the leaf, then on the intermediate); the same
    // extension not marked critical is fine
    let inter = inter_ok(&root);
    let unknown = [1, 3, 6, 1, 4, 1, 55_555, 1];
    for critical in [true, false] {
        let mut ext = CustomExtension::from_oid_content(&unknown, vec![0x05, 0x00]);
        ext.set_criticality(critical);
        let mut p = params("test leaf", 3, IsCa::NoCa);
        p.custom_extensions = vec![ext.clone()];
        let odd_leaf = make(p, Some(&inter));
        let on_leaf = verify_path(&chain(&[&odd_leaf, &inter, &root]), anchor, now());
        let mut p = ca("test intermediate", 2);
        p.custom_extensions = vec![ext];
        let odd_inter = make(p, Some(&root));
        let under = make(params("test leaf", 3, IsCa::NoCa), Some(&odd_inter));
        let on_inter = verify_path(&chain(&[&under, &odd_inter, &root]), anchor, now());
        if critical {
            invalid(
                on_leaf,
                "\"test leaf\" has an unknown critical extension 1.3.6.1.4.1.55555.1",
            );
            invalid(
                on_inter,
                "\"test intermediate\" has an unknown critical extension 1.3.6.1.4.1.55555.1",
            );
        } else {
            on_leaf.unwrap();
            on_inter.unwrap();
        }
    }

    // a duplicate extension: the same private one twice, or a second basicConstraints
    let mut p = params("test leaf", 3, IsCa::NoCa);
    let twice = CustomExtension::from_oid_content(&unknown, vec![0x05, 0x00]);
    p.custom_extensions = vec![twice.clone(), twice];
    let key = KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).unwrap();
    malformed(
        Certificate::from_der(&der_of(&p, &key, Some(&inter))),
        "extension 1.3.6.1.4.1.55555.1 appears twice (duplicate extension)",
    );
    let mut p = ca("test intermediate", 2);
    p.custom_extensions = vec![CustomExtension::from_oid_content(
        &[2, 5, 29, 19],
        vec![0x30, 0x03, 0x01, 0x01, 0xff],
    )];
    malformed(
        Certificate::from_der(&der_of(&p, &key, Some(&root))),
        "extension 2.5.29.19 appears twice",
    );

    // time is still checked, after the structure
    invalid(
        verify_path(
            &chain(&[&leaf1, &b1, &a1, &root]),
            anchor,
            parse_rfc3339("2031-01-01T00:00:00Z").unwrap(),
        ),
        "has expired",
    );
}

pub(crate) fn inter_ok(root: &Made) -> Made {
    make(
        params(
            "test intermediate",
            2,
            IsCa::Ca(BasicConstraints::Constrained(0)),
        ),
        Some(root),
    )
}

/// The DER of `der` with the long-form length at `at` (`0x81 n` or `0x82 hi lo`) written
/// with one more, leading zero, byte: the same value, not minimal.
pub(crate) fn widen_length(der: &[u8], at: usize) -> Vec<u8> {
    let width = match der[at] {
        0x81 => 1,
        0x82 => 2,
        other => panic!("a long-form length at {at}, not {other:#04x}"),
    };
    [&der[..at], &[0x80 | (width + 1), 0x00], &der[at + 1..]].concat()
}

/// Adds `by` to the two-byte length of the certificate (`30 82 hi lo` at the start).
pub(crate) fn grow_outer(der: &mut [u8], by: u16) {
    assert_eq!(der[1], 0x82);
    let len = u16::from_be_bytes([der[2], der[3]]) + by;
    der[2..4].copy_from_slice(&len.to_be_bytes());
}

#[test]
pub(crate) fn non_der_encodings_of_a_good_certificate_are_refused() {
    let (root, inter, leaf) = good();
    let der = leaf.cert.der().to_vec();
    Certificate::from_der(&der).unwrap();
    // the certificate's own length, then the TBSCertificate's, in a non-minimal form
    malformed(
        Certificate::from_der(&widen_length(&der, 1)),
        "non-minimal length",
    );
    let mut inner = widen_length(&der, 5);
    // (the certificate's length grows by the byte added inside it)
    grow_outer(&mut inner, 1);
    malformed(Certificate::from_der(&inner), "non-minimal length");
    // an indefinite length with end-of-contents
    let indefinite = [&[0x30, 0x80][..], &der[4..], &[0, 0]].concat();
    malformed(Certificate::from_der(&indefinite), "indefinite length");
    // trailing bytes, a truncation
    malformed(
        Certificate::from_der(&[&der[..], &[0]].concat()),
        "bytes after",
    );
    malformed(
        Certificate::from_der(&der[..der.len() - 1]),
        "longer than its container",
    );
    // the version INTEGER 2 written as 00 02 (not minimal): a0 03 02 01 02 → a0 04 02 02 00 02
    let v = der
        .windows(5)
        .position(|w| w == [0xa0, 0x03, 0x02, 0x01, 0x02])
        .unwrap();
    let mut padded = [
        &der[..v],
        &[0xa0, 0x04, 0x02, 0x02, 0x00, 0x02],
        &der[v + 5..],
    ]
    .concat();
    grow_outer(&mut padded, 1);
    // the TBSCertificate's length, one or two bytes after `30 8n` at offset 4
    match padded[5] {
        0x81 => padded[6] += 1,
        _ => {
            let len = u16::from_be_bytes([padded[6], padded[7]]) + 1;
            padded[6..8].copy_from_slice(&len.to_be_bytes());
        }
    }
    malformed(Certificate::from_der(&padded), "non-minimal INTEGER");
    // every truncation and every single-byte change is refused without a panic, and none
    // parses to a certificate that still chains
    for cut in 0..der.len() {
        assert!(Certificate::from_der(&der[..cut]).is_err());
    }
    for i in 0..der.len() {
        let mut b = der.clone();
        b[i] ^= 0x01;
        if let Ok(c) = Certificate::from_der(&b) {
            assert!(
                verify_path(
                    &[c, inter.cert.clone(), root.cert.clone()],
                    &root.cert,
                    now()
                )
                .is_err(),
                "byte {i} changed and still valid"
            );
        }
    }
}

pub(crate) fn crl_params(revoked: &[&Made]) -> CertificateRevocationListParams {
    CertificateRevocationListParams {
        this_update: date_time_ymd(2026, 5, 1),
        next_update: date_time_ymd(2026, 8, 1),
        crl_number: SerialNumber::from_slice(&[1]),
        issuing_distribution_point: None,
        revoked_certs: revoked
            .iter()
            .map(|m| RevokedCertParams {
                serial_number: SerialNumber::from_slice(m.cert.serial()),
                revocation_time: date_time_ymd(2026, 4, 1),
                reason_code: Some(rcgen::RevocationReason::KeyCompromise),
                invalidity_date: None,
            })
            .collect(),
        key_identifier_method: KeyIdMethod::Sha256,
    }
}

pub(crate) fn crl_by(p: &CertificateRevocationListParams, by: &Made) -> Crl {
    let der = p
        .signed_by(&Issuer::from_params(&by.params, &by.key))
        .unwrap()
        .der()
        .to_vec();
    Crl::from_der(&der).unwrap()
}

#[test]
pub(crate) fn a_crl_from_the_chain_revokes_or_clears_the_certificates_its_signer_issued() {
    let (root, inter, leaf) = good();
    let full = chain(&[&leaf, &inter, &root]);
    // the root's CRL covers the intermediate: listed → refused, naming it
    let revoking = crl_by(&crl_params(&[&inter]), &root);
    invalid(
        revoking.check(&full, now()),
        "\"test intermediate\" (serial 1002) is revoked: the CRL of \"test root\" lists it since \
         2026-04-01T00:00:00Z",
    );
    // a CRL listing another serial clears it
    let other = make(params("someone else", 9, IsCa::NoCa), Some(&root));
    let clean = crl_by(&crl_params(&[&other]), &root);
    let checked = clean.check(&full, now()).unwrap();
    assert_eq!(checked.via, "crl");
    assert_eq!(checked.signer, "test root");
    assert_eq!(checked.certificates, ["test intermediate"]);
    // the intermediate's CRL covers the leaf
    invalid(
        crl_by(&crl_params(&[&leaf]), &inter).check(&full, now()),
        "\"test leaf\" (serial 1003) is revoked",
    );
    assert_eq!(
        crl_by(&crl_params(&[]), &inter)
            .check(&full, now())
            .unwrap()
            .certificates,
        ["test leaf"]
    );
    // PEM reads as the DER does
    let pem = format!(
        "-----BEGIN X509 CRL-----\n{}\n-----END X509 CRL-----\n",
        base64_of(revoking.der())
    );
    assert_eq!(
        Crl::from_der_or_pem(pem.as_bytes()).unwrap().der(),
        revoking.der()
    );
    // a CRL from a CA with the root's name but another key
    let impostor = make(ca("test root", 1), None);
    invalid(
        crl_by(&crl_params(&[]), &impostor).check(&full, now()),
        "the CRL's signature does not verify with \"test root\"'s key",
    );
    // from a CA outside the chain
    let stranger = make(ca("stranger", 8), None);
    invalid(
        crl_by(&crl_params(&[]), &stranger).check(&full, now()),
        "the CRL's issuer \"stranger\" is not a certificate of this chain",
    );
    // out of date, not yet valid
    invalid(
        clean.check(&full, parse_rfc3339("2026-09-01T00:00:00Z").unwrap()),
        "out of date (nextUpdate 2026-08-01T00:00:00Z)",
    );
    invalid(
        clean.check(&full, parse_rfc3339("2026-04-01T00:00:00Z").unwrap()),
        "not valid yet (thisUpdate 2026-05-01T00:00:00Z)",
    );
    // an issuing distribution point (critical, scoping the CRL) is not understood: refused
    let mut scoped = crl_params(&[]);
    scoped.issuing_distribution_point = Some(CrlIssuingDistributionPoint {
        distribution_point: CrlDistributionPoint {
            uris: vec!["http://example.invalid/crl".into()],
        },
        scope: None,
    });
    invalid(
        crl_by(&scoped, &root).check(&full, now()),
        "unknown critical extension 2.5.29.28",
    );
    // signed by a CA certificate whose keyUsage does not allow CRL signing (rcgen is told
    // otherwise, so that it signs)
    let mut p = ca("no cRLSign", 10);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let no_crl_sign = make(p, Some(&root));
    let signer = Made {
        params: ca("no cRLSign", 10),
        key: no_crl_sign.key,
        cert: no_crl_sign.cert.clone(),
    };
    let under = make(params("test leaf", 3, IsCa::NoCa), Some(&signer));
    invalid(
        crl_by(&crl_params(&[]), &signer).check(&chain(&[&under, &signer, &root]), now()),
        "whose keyUsage lacks cRLSign",
    );
    // not DER: the CRL's own length in a longer form than needed
    let der = revoking.der();
    let longer = match der[1] {
        n if n < 0x80 => [&[0x30, 0x81, n][..], &der[2..]].concat(),
        _ => widen_length(der, 1),
    };
    malformed(Crl::from_der(&longer), "non-minimal length");
    for cut in 0..der.len() {
        assert!(Crl::from_der(&der[..cut]).is_err());
    }
}

/// Base64 (standard alphabet) of `b`.
pub(crate) fn base64_of(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}
