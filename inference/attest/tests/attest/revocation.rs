//! OCSP responses assembled here and CRLs and OCSP responses from another encoder
//! (Python's `cryptography`), over the trust anchors of [`super::pki`]; and every parser
//! of untrusted bytes fed mutated input.

use fleetmesh_attest::crl::Crl;
use fleetmesh_attest::ocsp::{HashAlg, OcspResponse};
use fleetmesh_attest::x509::{Certificate, parse_rfc3339, verify_path};
use fleetmesh_attest::{nvidia, snp};
use rcgen::{ExtendedKeyUsagePurpose, IsCa, KeyPair, SigningKey as _};

use super::pki::*;

// ---- OCSP responses assembled here ----

fn tlv(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    match body.len() {
        n if n < 0x80 => out.push(n as u8),
        n if n < 0x100 => out.extend([0x81, n as u8]),
        n => out.extend([0x82, (n >> 8) as u8, n as u8]),
    }
    out.extend_from_slice(body);
    out
}

fn seq(parts: &[&[u8]]) -> Vec<u8> {
    tlv(0x30, &parts.concat())
}

fn gtime(s: &str) -> Vec<u8> {
    tlv(0x18, s.as_bytes())
}

const SHA384_ALG: &[u8] = &[
    0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02, 0x05, 0x00,
];
const ECDSA_SHA384: &[u8] = &[
    0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03,
];

fn sha(alg: &'static ring::digest::Algorithm, data: &[u8]) -> Vec<u8> {
    ring::digest::digest(alg, data).as_ref().to_vec()
}

enum Status {
    Good,
    Revoked(&'static str),
    Unknown,
}

/// A SingleResponse for `cert` issued by `issuer` (CertID with SHA-384).
fn single(cert: &Certificate, issuer: &Certificate, status: Status, next: Option<&str>) -> Vec<u8> {
    let h = &ring::digest::SHA384;
    let id = seq(&[
        SHA384_ALG,
        &tlv(0x04, &sha(h, issuer.subject_der())),
        &tlv(0x04, &sha(h, &issuer.public_key)),
        &tlv(0x02, cert.serial()),
    ]);
    let status = match status {
        Status::Good => vec![0x80, 0x00],
        Status::Revoked(at) => tlv(0xa1, &[gtime(at), tlv(0xa0, &[0x0a, 0x01, 0x01])].concat()),
        Status::Unknown => vec![0x82, 0x00],
    };
    let next = next.map(|n| tlv(0xa0, &gtime(n))).unwrap_or_default();
    seq(&[&id, &status, &gtime("20260501000000Z"), &next])
}

enum Responder<'a> {
    ByName(&'a Certificate),
    ByKey(&'a Certificate),
}

/// An OCSPResponse (successful, basic) over `singles`, signed with `key`.
fn response(
    responder: Responder<'_>,
    key: &KeyPair,
    singles: &[Vec<u8>],
    certs: &[&Certificate],
) -> Vec<u8> {
    let rid = match responder {
        Responder::ByName(c) => tlv(0xa1, c.subject_der()),
        Responder::ByKey(c) => tlv(
            0xa2,
            &tlv(
                0x04,
                &sha(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &c.public_key),
            ),
        ),
    };
    let tbs = seq(&[&rid, &gtime("20260501000000Z"), &seq(&[&singles.concat()])]);
    let sig = key.sign(&tbs).unwrap();
    let mut basic = vec![
        tbs,
        ECDSA_SHA384.to_vec(),
        tlv(0x03, &[&[0u8][..], &sig].concat()),
    ];
    if !certs.is_empty() {
        let list: Vec<u8> = certs.iter().flat_map(|c| c.der().to_vec()).collect();
        basic.push(tlv(0xa0, &seq(&[&list])));
    }
    let basic = seq(&basic.iter().map(Vec::as_slice).collect::<Vec<_>>());
    let oid_basic = [
        0x06, 0x09, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x30, 0x01, 0x01,
    ];
    seq(&[
        &[0x0a, 0x01, 0x00],
        &tlv(0xa0, &seq(&[&oid_basic, &tlv(0x04, &basic)])),
    ])
}

#[test]
fn ocsp_responses_made_here_are_verified_and_a_revoked_certificate_is_refused() {
    let (root, inter, leaf) = good();
    let full = chain(&[&leaf, &inter, &root]);
    let next = Some("20260701000000Z");
    let check = |der: &[u8]| OcspResponse::from_der(der).and_then(|r| r.check(&full, now()));

    // good, signed by the issuer, named by key hash or by name
    let good_single = single(&leaf.cert, &inter.cert, Status::Good, next);
    for who in [
        Responder::ByKey(&inter.cert),
        Responder::ByName(&inter.cert),
    ] {
        let c = check(&response(
            who,
            &inter.key,
            std::slice::from_ref(&good_single),
            &[],
        ))
        .unwrap();
        assert_eq!((c.via, c.signer.as_str()), ("ocsp", "test intermediate"));
        assert_eq!(c.certificates, ["test leaf"]);
    }
    // one response for two certificates of the chain, each signed by its issuer: here the
    // root answers for the intermediate and the intermediate's key signs, so it is refused
    let both = [
        good_single.clone(),
        single(&inter.cert, &root.cert, Status::Good, next),
    ];
    invalid(
        check(&response(
            Responder::ByKey(&inter.cert),
            &inter.key,
            &both,
            &[],
        )),
        "signed by neither \"test root\" nor a responder it delegated to",
    );
    // revoked, unknown
    let revoked = single(
        &leaf.cert,
        &inter.cert,
        Status::Revoked("20260420000000Z"),
        next,
    );
    invalid(
        check(&response(
            Responder::ByKey(&inter.cert),
            &inter.key,
            &[revoked],
            &[],
        )),
        "\"test leaf\" (serial 1003) is revoked: the OCSP responder says so since \
         2026-04-20T00:00:00Z (reason 1)",
    );
    let unknown = single(&leaf.cert, &inter.cert, Status::Unknown, next);
    invalid(
        check(&response(
            Responder::ByKey(&inter.cert),
            &inter.key,
            &[unknown],
            &[],
        )),
        "does not know \"test leaf\" (status unknown)",
    );
    // time: thisUpdate 2026-05-01, nextUpdate 2026-07-01
    let ok = OcspResponse::from_der(&response(
        Responder::ByKey(&inter.cert),
        &inter.key,
        std::slice::from_ref(&good_single),
        &[],
    ))
    .unwrap();
    invalid(
        ok.check(&full, parse_rfc3339("2026-07-02T00:00:00Z").unwrap()),
        "out of date (nextUpdate 2026-07-01T00:00:00Z)",
    );
    invalid(
        ok.check(&full, parse_rfc3339("2026-04-30T00:00:00Z").unwrap()),
        "not valid yet (thisUpdate 2026-05-01T00:00:00Z)",
    );
    // a response about another certificate
    let other = make(params("someone else", 9, IsCa::NoCa), Some(&inter));
    invalid(
        check(&response(
            Responder::ByKey(&inter.cert),
            &inter.key,
            &[single(&other.cert, &inter.cert, Status::Good, next)],
            &[],
        )),
        "covers no certificate of this chain",
    );
    // a delegated responder: issued by the intermediate with id-kp-OCSPSigning
    let mut p = params("test responder", 11, IsCa::NoCa);
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::OcspSigning];
    let responder = make(p, Some(&inter));
    let c = check(&response(
        Responder::ByKey(&responder.cert),
        &responder.key,
        std::slice::from_ref(&good_single),
        &[&responder.cert],
    ))
    .unwrap();
    assert_eq!(c.signer, "test responder (delegated by test intermediate)");
    // without the extended key usage, issued by another CA, or not included
    let plain = make(params("test responder", 11, IsCa::NoCa), Some(&inter));
    invalid(
        check(&response(
            Responder::ByKey(&plain.cert),
            &plain.key,
            std::slice::from_ref(&good_single),
            &[&plain.cert],
        )),
        "is not authorized by \"test intermediate\" (no id-kp-OCSPSigning)",
    );
    let mut p = params("test responder", 11, IsCa::NoCa);
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::OcspSigning];
    let by_root = make(p, Some(&root));
    invalid(
        check(&response(
            Responder::ByKey(&by_root.cert),
            &by_root.key,
            std::slice::from_ref(&good_single),
            &[&by_root.cert],
        )),
        "is not issued by \"test intermediate\"",
    );
    invalid(
        check(&response(
            Responder::ByKey(&responder.cert),
            &responder.key,
            std::slice::from_ref(&good_single),
            &[],
        )),
        "signed by neither",
    );
    // a changed byte inside the signed data: the signature no longer verifies
    let mut der = response(
        Responder::ByKey(&inter.cert),
        &inter.key,
        std::slice::from_ref(&good_single),
        &[],
    );
    let at = der
        .windows(15)
        .position(|w| w == b"20260501000000Z")
        .unwrap();
    der[at + 3] = b'7'; // producedAt 2027-… instead of 2026-…
    invalid(
        check(&der),
        "signature does not verify with \"test intermediate\"'s key",
    );
    // the responder's other answers, and malformed responses
    invalid(
        check(&[0x30, 0x03, 0x0a, 0x01, 0x03]),
        "answered tryLater (3)",
    );
    malformed(
        OcspResponse::from_der(&[0x30, 0x03, 0x0a, 0x01, 0x00]),
        "without responseBytes",
    );
    let der = response(
        Responder::ByKey(&inter.cert),
        &inter.key,
        &[good_single],
        &[],
    );
    for cut in 0..der.len() {
        assert!(OcspResponse::from_der(&der[..cut]).is_err());
    }
}

// ---- fixtures from Python's `cryptography` (tests/vectors/tee/pki/gen.py) ----

fn fixture(name: &str) -> Vec<u8> {
    let p = std::path::PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    )
    .join("tests/vectors/tee/pki")
    .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn vector(rel: &str) -> Vec<u8> {
    let p = std::path::PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    )
    .join("tests/vectors/tee")
    .join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn crls_and_ocsp_responses_from_another_encoder_verify_and_forgeries_do_not() {
    let full =
        Certificate::from_pem_bundle(std::str::from_utf8(&fixture("chain.pem")).unwrap()).unwrap();
    assert_eq!(full.len(), 3);
    verify_path(&full, &full[2], now()).unwrap();
    // the root's CRL revokes the intermediate (serial 0x2002)
    let crl = Crl::from_der_or_pem(&fixture("crl_root_revokes_intermediate.der")).unwrap();
    invalid(
        crl.check(&full, now()),
        "\"fleetmesh test intermediate\" (serial 2002) is revoked",
    );
    let clean = Crl::from_der_or_pem(&fixture("crl_intermediate_clean.pem")).unwrap();
    assert_eq!(
        clean.check(&full, now()).unwrap().certificates,
        ["fleetmesh test leaf"]
    );
    // OCSP: good from the issuer, revoked from the issuer, good from a delegated responder
    let ocsp = |f: &str| OcspResponse::from_der(&fixture(f)).unwrap();
    let r = ocsp("ocsp_good.der");
    assert_eq!(r.responses.len(), 1);
    // (a SHA-1 CertID, as most responders send; those made above use SHA-384)
    assert_eq!(r.responses[0].hash, HashAlg::Sha1);
    assert_eq!(r.responses[0].serial, [0x30, 0x03]);
    assert_eq!(
        ocsp("ocsp_good.der").check(&full, now()).unwrap().signer,
        "fleetmesh test intermediate"
    );
    invalid(
        ocsp("ocsp_revoked.der").check(&full, now()),
        "\"fleetmesh test leaf\" (serial 3003) is revoked",
    );
    assert_eq!(
        ocsp("ocsp_delegated_good.der")
            .check(&full, now())
            .unwrap()
            .signer,
        "fleetmesh test OCSP responder (delegated by fleetmesh test intermediate)"
    );

    // forgeries about the real chains, through the wrappers the CLI uses
    let milan = Certificate::from_pem_bundle(
        std::str::from_utf8(&vector("sev-snp/virtee-sev/cert_chain_milan")).unwrap(),
    )
    .unwrap();
    let vcek = Certificate::from_der(&vector("sev-snp/virtee-sev/vcek_milan.der")).unwrap();
    let forged = Crl::from_der(&fixture("forged_ark_milan_crl.der")).unwrap();
    invalid(
        snp::check_revocation(&vcek, &milan, &[forged], now()),
        "the CRL's signature does not verify with \"ARK-Milan\"'s key",
    );
    // a CRL of the test PKI names no certificate of AMD's chain
    invalid(
        snp::check_revocation(&vcek, &milan, &[clean], now()),
        "is not a certificate of this chain",
    );
    assert!(
        snp::check_revocation(&vcek, &milan, &[], now())
            .unwrap()
            .is_empty()
    );
    let hopper = Certificate::from_pem_bundle(
        std::str::from_utf8(&vector("nvidia/nvtrust/hopperCertChain.txt")).unwrap(),
    )
    .unwrap();
    let forged = OcspResponse::from_der(&fixture("forged_hopper_ocsp.der")).unwrap();
    invalid(
        nvidia::check_revocation(&hopper, &[forged], now()),
        "the OCSP response's signature does not verify with \"GH100 A01 GSP BROM\"'s key",
    );
    invalid(
        nvidia::check_revocation(&hopper, &[ocsp("ocsp_good.der")], now()),
        "covers no certificate of this chain",
    );
}

#[test]
fn the_parsers_of_untrusted_bytes_return_errors_on_mutated_input_and_never_panic() {
    use fleetmesh_attest::{nvidia, xmldsig};
    use rand::{Rng as _, SeedableRng as _};
    let mut rng = rand::rngs::StdRng::seed_from_u64(16_17);
    let der_inputs = [
        fixture("crl_root_revokes_intermediate.der"),
        fixture("ocsp_delegated_good.der"),
        fixture("forged_hopper_ocsp.der"),
        vector("sev-snp/virtee-sev/vcek_milan.der"),
        vector("sev-snp/go-sev-guest/vcek.testcer"),
    ];
    let xml = vector("nvidia/nvtrust/1010_0200_882_96005E0001_test_no_gpu.swidtag");
    let mutate = |rng: &mut rand::rngs::StdRng, input: &[u8]| {
        let mut b = input.to_vec();
        for _ in 0..rng.gen_range(1..4) {
            let at = rng.gen_range(0..b.len());
            match rng.gen_range(0..4) {
                0 => b[at] ^= 1 << rng.gen_range(0..8),
                1 => b[at] = rng.r#gen(),
                2 => {
                    b.remove(at);
                }
                _ => b.insert(at, rng.r#gen()),
            }
        }
        b
    };
    let mut refused = 0;
    for _ in 0..400 {
        for input in &der_inputs {
            let b = mutate(&mut rng, input);
            let results = [
                Certificate::from_der(&b).is_err(),
                Crl::from_der(&b).is_err(),
                OcspResponse::from_der(&b).is_err(),
            ];
            refused += results.iter().filter(|r| **r).count();
        }
        let b = mutate(&mut rng, &xml);
        if xmldsig::parse_bytes(&b).is_err() {
            refused += 1;
        }
        // a mutated RIM authenticates only if its tree is unchanged (white space inside a
        // tag, say): then its canonical form is the original's
        let then = parse_rfc3339("2024-01-01T00:00:00Z").unwrap();
        if nvidia::verify_rim_bytes(&b, then).is_ok() {
            let c14n = |x: &[u8]| {
                xmldsig::canonicalize_document(&xmldsig::parse_bytes(x).unwrap(), &|_| false)
            };
            assert_eq!(c14n(&b), c14n(&xml));
        }
    }
    // each DER input is of one kind, so most parses of it as the others fail
    assert!(refused > 400 * 5 * 2, "{refused}");
}
