//! SEV-SNP attestation on the vendored vectors (tests/vectors/tee/): both reports verify
//! with their VCEK and AMD's chain; every bit flip in the signed bytes, a swapped
//! certificate, an expired chain and each policy check reject them.

use std::path::PathBuf;

use fleetmesh_attest::Error;
use fleetmesh_attest::snp::{Product, Report, SnpPolicy, Tcb, verify};
use fleetmesh_attest::x509::{Certificate, parse_rfc3339};

fn vectors() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .join("tests/vectors/tee/sev-snp")
}

fn read(rel: &str) -> Vec<u8> {
    std::fs::read(vectors().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn chain(rel: &str) -> Vec<Certificate> {
    Certificate::from_pem_bundle(std::str::from_utf8(&read(rel)).unwrap()).unwrap()
}

fn cert(rel: &str) -> Certificate {
    Certificate::from_der_or_pem(&read(rel)).unwrap()
}

/// A time inside every vector certificate's validity.
fn now() -> i64 {
    parse_rfc3339("2026-06-01T00:00:00Z").unwrap()
}

struct Case {
    report: Report,
    vcek: Certificate,
    chain: Vec<Certificate>,
    policy: SnpPolicy,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            report: Report::parse(&read("virtee-sev/report_milan.hex")).unwrap(),
            vcek: cert("virtee-sev/vcek_milan.der"),
            chain: chain("virtee-sev/cert_chain_milan"),
            policy: SnpPolicy::default(),
        },
        Case {
            report: Report::parse(&read("go-sev-guest/attestation.bin")).unwrap(),
            vcek: cert("go-sev-guest/vcek.testcer"),
            chain: chain("go-sev-guest/milan.testcer"),
            // this guest's policy allows debugging (bit 19 of 0xB0000)
            policy: SnpPolicy {
                allow_debug: true,
                ..SnpPolicy::default()
            },
        },
    ]
}

fn is_invalid(r: &fleetmesh_attest::Result<impl std::fmt::Debug>, says: &str) {
    match r {
        Err(Error::EvidenceInvalid(m)) => assert!(m.contains(says), "{m:?} lacks {says:?}"),
        other => panic!("expected invalid ({says}), got {other:?}"),
    }
}

#[test]
fn both_snp_reports_verify_with_their_vcek_and_amds_chain() {
    for c in cases() {
        let v = verify(&c.report, &c.vcek, &c.chain, now(), &c.policy).unwrap();
        assert_eq!(v.product, Product::Milan);
        assert_eq!(v.key, "VCEK");
        assert_eq!(v.report.version, 2);
        // the decoded TCB is the VCEK's (verify compares them; the values are the vectors')
        assert!(v.tcb.snp > 0 && v.tcb.microcode > 0, "{:?}", v.tcb);
    }
    // the go-sev-guest report binds 01 02 03 04 05 and zeros
    let c = &cases()[1];
    let mut data = [0u8; 64];
    data[..5].copy_from_slice(&[1, 2, 3, 4, 5]);
    let bound = SnpPolicy {
        report_data: Some(data),
        ..c.policy.clone()
    };
    verify(&c.report, &c.vcek, &c.chain, now(), &bound).unwrap();
}

#[test]
fn every_bit_flip_in_the_signed_bytes_is_rejected() {
    for c in cases() {
        let mut rejected = 0;
        for byte in 0..0x2A0 {
            for bit in 0..8 {
                let mut b = c.report.bytes.clone();
                b[byte] ^= 1 << bit;
                // a flip may make the report unreadable (version, algorithm) or invalid
                let r =
                    Report::parse(&b).and_then(|r| verify(&r, &c.vcek, &c.chain, now(), &c.policy));
                assert!(r.is_err(), "flip of bit {bit} of byte {byte:#x} accepted");
                rejected += 1;
            }
        }
        assert_eq!(rejected, 0x2A0 * 8);
        // and a flip in the signature itself
        let mut b = c.report.bytes.clone();
        b[0x2A0] ^= 1;
        is_invalid(
            &verify(
                &Report::parse(&b).unwrap(),
                &c.vcek,
                &c.chain,
                now(),
                &c.policy,
            ),
            "signature",
        );
    }
}

#[test]
fn swapped_certificates_expired_chains_and_policy_are_refused_with_the_reason() {
    let [milan, go] = <[Case; 2]>::try_from(cases()).ok().unwrap();
    let at = |c: &Case, t: &str| {
        verify(
            &c.report,
            &c.vcek,
            &c.chain,
            parse_rfc3339(t).unwrap(),
            &c.policy,
        )
    };
    let certs = |vcek: &Certificate, chain: &[Certificate]| {
        verify(&milan.report, vcek, chain, now(), &milan.policy)
    };
    // another chip's VCEK (same ASK): the signature does not verify
    is_invalid(&certs(&go.vcek, &milan.chain), "signature");
    // a Turin VCEK under the Milan chain, the Turin chain under a Milan VCEK
    let turin_vcek = cert("virtee-sev/vcek_turin.der");
    let turin_chain = chain("virtee-sev/cert_chain_turin");
    is_invalid(&certs(&turin_vcek, &milan.chain), "not issued by");
    is_invalid(&certs(&milan.vcek, &turin_chain), "not issued by");
    // the VLEK chain's ASVK did not issue a VCEK
    is_invalid(
        &certs(&milan.vcek, &chain("go-sev-guest/milanvlek.testcer")),
        "not issued by",
    );
    // ASK and ARK swapped: the root is not AMD's ARK
    let swapped = vec![milan.chain[1].clone(), milan.chain[0].clone()];
    is_invalid(&certs(&milan.vcek, &swapped), "AMD's ARKs");
    // a self-made root is not trusted, even when consistent: the VCEK as its own chain
    is_invalid(
        &certs(&milan.vcek, &[milan.vcek.clone(), milan.vcek.clone()]),
        "AMD's ARKs",
    );
    // time: the VCEK expires 2030-04-03, and was not valid in 2019
    is_invalid(&at(&milan, "2031-01-01T00:00:00Z"), "expired");
    is_invalid(&at(&milan, "2019-01-01T00:00:00Z"), "not valid yet");
    at(&milan, "2030-04-02T00:00:00Z").unwrap();
    // policy
    let with = |p: SnpPolicy| verify(&milan.report, &milan.vcek, &milan.chain, now(), &p);
    is_invalid(
        &with(SnpPolicy {
            report_data: Some([0; 64]),
            ..SnpPolicy::default()
        }),
        "REPORT_DATA",
    );
    is_invalid(
        &with(SnpPolicy {
            measurement: Some([0; 48]),
            ..SnpPolicy::default()
        }),
        "MEASUREMENT",
    );
    with(SnpPolicy {
        measurement: Some(milan.report.measurement),
        ..SnpPolicy::default()
    })
    .unwrap();
    is_invalid(
        &with(SnpPolicy {
            vmpl: Some(1),
            ..SnpPolicy::default()
        }),
        "VMPL",
    );
    let high = Tcb {
        snp: 200,
        ..Tcb::default()
    };
    is_invalid(
        &with(SnpPolicy {
            min_tcb: Some(high),
            ..SnpPolicy::default()
        }),
        "below the minimum",
    );
    // debugging allowed by the guest policy is refused unless asked for
    is_invalid(
        &verify(
            &go.report,
            &go.vcek,
            &go.chain,
            now(),
            &SnpPolicy::default(),
        ),
        "debugging",
    );
    // malformed input is told apart from invalid evidence
    assert!(matches!(
        Report::parse(&[0u8; 100]),
        Err(Error::EvidenceMalformed(_))
    ));
    let mut v9 = milan.report.bytes.clone();
    v9[0] = 9;
    assert!(matches!(
        Report::parse(&v9),
        Err(Error::EvidenceMalformed(_))
    ));
    assert!(matches!(
        Certificate::from_der(&[0x30, 0x03, 1, 2]),
        Err(Error::EvidenceMalformed(_))
    ));
    assert!(matches!(
        parse_rfc3339("tomorrow"),
        Err(Error::EvidenceMalformed(_))
    ));
}

// ---- NVIDIA Hopper ----

use fleetmesh_attest::nvidia::{self, Evidence, Rim};

fn nv(rel: &str) -> Vec<u8> {
    let p = vectors().join("../nvidia/nvtrust").join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn hopper() -> (Evidence, Vec<Certificate>) {
    let e = Evidence::parse(&nv("hopperAttestationReport.txt")).unwrap();
    let chain =
        Certificate::from_pem_bundle(std::str::from_utf8(&nv("hopperCertChain.txt")).unwrap())
            .unwrap();
    (e, chain)
}

#[test]
fn nvidia_evidence_verifies_with_its_chain_and_nonce_and_the_rims_name_their_mismatches() {
    let (e, chain) = hopper();
    // the nonce NVIDIA's attestation service reported for this evidence
    let claims: serde_json::Value =
        serde_json::from_slice(&nv("nras_overall_claims_remote.json")).unwrap();
    let nonce: [u8; 32] = hex::decode(claims["eat_nonce"].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    nvidia::verify(&e, &chain, now(), Some(&nonce)).unwrap();
    assert_eq!(e.blocks.len(), 64);
    assert_eq!(e.driver_version().as_deref(), Some("550.90.07"));
    assert_eq!(e.vbios_version().as_deref(), Some("96.00.9F.00.01"));
    // every evidence of the SDK's sample file verifies with its own chain and nonce
    let samples: serde_json::Value = serde_json::from_slice(&nv("gpu_evidence.json")).unwrap();
    use base64::Engine as _;
    let b64 = |v: &serde_json::Value| {
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap())
            .unwrap()
    };
    let samples = samples.as_array().unwrap();
    assert_eq!(samples.len(), 8);
    for s in samples {
        let ev = Evidence::parse(&b64(&s["evidence"])).unwrap();
        let ch =
            Certificate::from_pem_bundle(std::str::from_utf8(&b64(&s["certificate"])).unwrap())
                .unwrap();
        let n: [u8; 32] = hex::decode(s["nonce"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        nvidia::verify(&ev, &ch, now(), Some(&n)).unwrap();
        // another GPU's evidence under this chain does not verify
        assert!(nvidia::check_signature(&e, &ch[0]).is_err());
    }
    // the bundled RIMs do not describe this GPU: the mismatching indices are named (the
    // lists were computed independently with Python's minidom)
    let rim = |f: &str| Rim::parse(std::str::from_utf8(&nv(f)).unwrap()).unwrap();
    let driver = rim("Driver_RIM_test_no_gpu.swidtag");
    assert_eq!(driver.entries.len(), 21);
    assert_eq!(
        nvidia::mismatches(&e, &driver),
        [7, 21, 22, 25, 26, 27, 29, 30, 31, 32, 34, 36, 37, 39, 40]
    );
    let vbios = rim("1010_0200_882_96005E0001_test_no_gpu.swidtag");
    assert_eq!(vbios.entries.len(), 12);
    assert_eq!(nvidia::mismatches(&e, &vbios), [1, 2, 3, 9, 11]);
}

#[test]
fn nvidia_evidence_with_a_flipped_bit_a_wrong_nonce_or_a_bad_chain_is_refused() {
    let (e, chain) = hopper();
    nvidia::check_chain(&chain, now()).unwrap();
    let raw = hex::decode(
        std::str::from_utf8(&nv("hopperAttestationReport.txt"))
            .unwrap()
            .trim(),
    )
    .unwrap();
    // every bit of the signed bytes (request and response up to the signature)
    for byte in 0..raw.len() - 96 {
        for bit in 0..8 {
            let mut b = raw.clone();
            b[byte] ^= 1 << bit;
            let r = Evidence::parse(&b).and_then(|ev| nvidia::check_signature(&ev, &chain[0]));
            assert!(r.is_err(), "flip of bit {bit} of byte {byte} accepted");
        }
    }
    is_invalid(&nvidia::verify(&e, &chain, now(), Some(&[7; 32])), "nonce");
    // the chain without its root, reordered, or checked before it was issued
    is_invalid(
        &nvidia::verify(&e, &chain[..4], now(), None),
        "NVIDIA Device Identity CA",
    );
    let mut swapped = chain.clone();
    swapped.swap(1, 2);
    is_invalid(&nvidia::verify(&e, &swapped, now(), None), "not issued by");
    is_invalid(
        &nvidia::verify(
            &e,
            &chain,
            parse_rfc3339("2000-01-01T00:00:00Z").unwrap(),
            None,
        ),
        "not valid yet",
    );
    // malformed evidence
    assert!(matches!(
        Evidence::parse(&raw[..100]),
        Err(Error::EvidenceMalformed(_))
    ));
    assert!(matches!(
        Rim::parse("<x/>"),
        Err(Error::EvidenceMalformed(_))
    ));
}

#[test]
fn the_job_binding_commits_to_model_prompt_output_and_job_and_no_evidence_is_invented() {
    use fleetmesh_attest::{binding_message, binding_nonce, collect_report_in, snp_report_data};
    use sha2::Digest as _;
    let (d, p, o, j) = (
        [7u8; 32],
        vec![1u32, 2, 3],
        vec![4u32, 5],
        b"job-1".to_vec(),
    );
    let nonce = binding_nonce(&d, &p, &o, &j);
    let base = snp_report_data(&nonce);
    // the message is what the docs say, byte for byte
    let mut want = b"fleetmesh/tee-binding/v1".to_vec();
    want.extend([7u8; 32]);
    want.extend(3u32.to_le_bytes());
    for i in [1u32, 2, 3] {
        want.extend(i.to_le_bytes());
    }
    want.extend(2u32.to_le_bytes());
    for i in [4u32, 5] {
        want.extend(i.to_le_bytes());
    }
    want.extend(5u32.to_le_bytes());
    want.extend(b"job-1");
    assert_eq!(binding_message(&d, &p, &o, &j), want);
    // one nonce for every platform: SHA-256 of it; SEV-SNP's REPORT_DATA is the nonce and
    // 32 zero bytes
    assert_eq!(nonce.to_vec(), sha2::Sha256::digest(&want).to_vec());
    assert_eq!(base[..32], nonce);
    assert_eq!(base[32..], [0u8; 32]);
    // every input moves it, including a token moved from the prompt to the output
    for other in [
        binding_nonce(&[8; 32], &p, &o, &j),
        binding_nonce(&d, &[1, 2], &o, &j),
        binding_nonce(&d, &[1, 2], &[3, 4, 5], &j),
        binding_nonce(&d, &p, &[4, 6], &j),
        binding_nonce(&d, &p, &o, b"job-2"),
    ] {
        assert_ne!(other, nonce);
    }
    // a report bound to another job is refused by the verifier
    let c = &cases()[0];
    let bound = SnpPolicy {
        report_data: Some(base),
        ..SnpPolicy::default()
    };
    is_invalid(
        &verify(&c.report, &c.vcek, &c.chain, now(), &bound),
        "REPORT_DATA",
    );
    // a host without configfs-tsm says so
    let dir = tempfile::tempdir().unwrap();
    let err = collect_report_in(&dir.path().join("tsm/report"), &base).unwrap_err();
    assert!(
        err.to_string().contains("cannot produce TEE evidence"),
        "{err}"
    );
}

#[test]
fn the_bundled_rims_are_signed_by_nvidia_and_a_changed_rim_is_not() {
    // the RIM signing chain expired in 2025-2026: check it when it was valid
    let then = parse_rfc3339("2024-01-01T00:00:00Z").unwrap();
    for f in [
        "Driver_RIM_test_no_gpu.swidtag",
        "1010_0200_882_96005E0001_test_no_gpu.swidtag",
    ] {
        let xml = String::from_utf8(nv(f)).unwrap();
        let rim = nvidia::verify_rim(&xml, then).unwrap();
        assert!(!rim.entries.is_empty());
        // the same document in another serialization (single quotes) has the same digest
        // and the same entries: the values come from the verified tree, not a second reading
        let requoted = xml.replace("active=\"True\"", "active='True'");
        assert_ne!(requoted, xml);
        assert_eq!(nvidia::verify_rim(&requoted, then).unwrap(), rim);
        // and it is refused today, its signer having expired
        is_invalid(&nvidia::verify_rim(&xml, now()), "expired");
        // a changed golden value, attribute or text no longer matches the digest
        for (from, to) in [
            ("active=\"True\"", "active=\"False\""),
            ("Measurement_7\"", "Measurement_8\""),
        ] {
            if let Some(i) = xml.find(from) {
                let changed = format!("{}{}{}", &xml[..i], to, &xml[i + from.len()..]);
                is_invalid(&nvidia::verify_rim(&changed, then), "digest");
            }
        }
        let hash = xml.find("ns2:Hash0=\"").unwrap() + 11;
        let mut changed = xml.clone().into_bytes();
        changed[hash] = if changed[hash] == b'0' { b'1' } else { b'0' };
        is_invalid(
            &nvidia::verify_rim(&String::from_utf8(changed).unwrap(), then),
            "digest",
        );
        // a changed signature value
        let sv = xml.find("<ds:SignatureValue>").unwrap() + 19;
        let mut changed = xml.clone().into_bytes();
        changed[sv] = if changed[sv] == b'A' { b'B' } else { b'A' };
        is_invalid(
            &nvidia::verify_rim(&String::from_utf8(changed).unwrap(), then),
            "signature",
        );
    }
    assert!(matches!(
        nvidia::verify_rim("<a><!-- x --></a>", 0),
        Err(Error::EvidenceMalformed(_))
    ));
}

#[test]
fn the_hosts_certificate_table_round_trips_and_verifies_its_report() {
    use fleetmesh_attest::{snp::CertTable, to_pem};
    let c = &cases()[0];
    let table = CertTable {
        vcek: Some(c.vcek.der().to_vec()),
        vlek: None,
        ask: Some(c.chain[0].der().to_vec()),
        ark: Some(c.chain[1].der().to_vec()),
        other: vec![([0x92; 16], b"a CRL".to_vec())],
    };
    let aux = table.encode();
    // the VCEK's GUID 63da758d-e664-… in RFC 4122 byte order, then offset and length
    assert_eq!(&aux[..4], &[0x63, 0xda, 0x75, 0x8d]);
    assert_eq!(u32::from_le_bytes(aux[16..20].try_into().unwrap()), 24 * 5);
    assert_eq!(CertTable::parse(&aux).unwrap(), table);
    let (key, chain) = table.chain().unwrap().unwrap();
    verify(&c.report, &key, &chain, now(), &c.policy).unwrap();
    // PEM written here reads back as the same certificate
    for cert in [&c.vcek, &c.chain[0], &c.chain[1]] {
        let again = Certificate::from_pem_bundle(&to_pem(cert.der())).unwrap();
        assert_eq!(again[0].der(), cert.der());
    }
    // a table without the chain gives none; bad tables are malformed
    let lone = CertTable {
        vcek: table.vcek.clone(),
        ..CertTable::default()
    };
    assert!(lone.chain().unwrap().is_none());
    let mut outside = aux.clone();
    outside[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut unterminated = aux[..24].to_vec();
    unterminated[16..24].fill(0);
    let mut twice = aux.clone();
    twice[24..40].copy_from_slice(&aux[..16]);
    for (bad, says) in [
        (&unterminated[..], "no terminating entry"),
        (&outside[..], "outside the blob"),
        (&twice[..], "twice"),
    ] {
        let e = CertTable::parse(bad).unwrap_err();
        assert!(matches!(e, Error::EvidenceMalformed(_)), "{e}");
        assert!(e.to_string().contains(says), "{e}");
    }
}

#[test]
fn gpu_evidence_comes_from_the_driver_or_the_reason_it_cannot() {
    use fleetmesh_attest::gpu::collect_gpu_evidence;
    let nonce = [0x5a; 32];
    match collect_gpu_evidence(0, &nonce) {
        // a GPU in confidential-computing mode: its evidence verifies over our nonce
        Ok(e) => {
            let chain =
                Certificate::from_pem_bundle(std::str::from_utf8(&e.chain).unwrap()).unwrap();
            let ev = Evidence::parse(&e.report).unwrap();
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs() as i64;
            nvidia::verify(&ev, &chain, t, Some(&nonce)).unwrap();
        }
        // anywhere else: a request error naming what is missing, never evidence
        Err(e) => {
            assert!(matches!(e, Error::Unavailable(_)), "{e}");
            let s = e.to_string();
            assert!(s.contains("cannot produce NVIDIA GPU evidence"), "{s}");
            assert!(
                [
                    "no NVIDIA driver",
                    "confidential computing",
                    "GPU 0",
                    "R535"
                ]
                .iter()
                .any(|w| s.contains(w)),
                "{s}"
            );
        }
    }
}

// Certification paths, CRLs and OCSP with trust anchors made in the test (tee/pki.rs), and
// the RIMs' XML parsing and canonicalization (tee/rim_xml.rs).
#[path = "attest/pki.rs"]
mod pki;
#[path = "attest/revocation.rs"]
mod revocation;
#[path = "attest/rim_xml.rs"]
mod rim_xml;
