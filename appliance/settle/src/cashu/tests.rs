//! The NUT-00 and NUT-02 test vectors (`vectors/cashu.json`), tokens from strangers, and
//! the wallet file refusing what it is not.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::Value;

use super::{Proof, Token, Wallet, dhke};

fn vectors() -> Value {
    serde_json::from_str(include_str!("../../vectors/cashu.json")).unwrap()
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap()
}

#[test]
fn hash_to_curve_matches_the_vectors() {
    for case in vectors()["hash_to_curve"].as_array().unwrap() {
        let x = hex::decode(s(&case["message"])).unwrap();
        let y = dhke::hash_to_curve(&x).unwrap();
        assert_eq!(hex::encode(y.serialize()), s(&case["point"]));
    }
}

#[test]
fn blinding_and_signing_match_the_vectors_and_unblind_to_the_mints_check() {
    let v = vectors();
    for case in v["blinded_messages"].as_array().unwrap() {
        let x = hex::decode(s(&case["x"])).unwrap();
        let r = dhke::scalar(s(&case["r"]), "r").unwrap();
        let b_ = dhke::blind(&x, &r).unwrap();
        assert_eq!(hex::encode(b_.serialize()), s(&case["B_"]));
        // the mint signs with k; the unblinded C is what the mint checks: k·hash_to_curve(x)
        let k = dhke::scalar(&"5a".repeat(32), "k").unwrap();
        let kk = secp256k1::PublicKey::from_secret_key(&k);
        let c_ = dhke::sign(&k, &b_).unwrap();
        let c = dhke::unblind(&c_, &r, &kk).unwrap();
        let expected = dhke::sign(&k, &dhke::hash_to_curve(&x).unwrap()).unwrap();
        assert_eq!(c, expected);
        let wrong_r = dhke::scalar(&"01".repeat(32), "r").unwrap();
        assert_ne!(dhke::unblind(&c_, &wrong_r, &kk).unwrap(), expected);
    }
    for case in v["blind_signatures"].as_array().unwrap() {
        let k = dhke::scalar(s(&case["k"]), "k").unwrap();
        let b_ = dhke::point(s(&case["B_"]), "B_").unwrap();
        assert_eq!(
            hex::encode(dhke::sign(&k, &b_).unwrap().serialize()),
            s(&case["C_"])
        );
    }
}

#[test]
fn keyset_ids_derive_from_their_keys() {
    for case in vectors()["keysets_v1"].as_array().unwrap() {
        let mut keys = BTreeMap::new();
        for (a, k) in case["keys"].as_object().unwrap() {
            keys.insert(a.parse::<u64>().unwrap(), dhke::point(s(k), "key").unwrap());
        }
        assert_eq!(dhke::keyset_id(&keys), s(&case["id"]));
        super::mint::check_keyset_id(s(&case["id"]), &keys).unwrap();
        // a mint that swaps two keys gets a different id, and is refused
        let (one, two) = (keys[&1], keys[&2]);
        keys.insert(1, two);
        keys.insert(2, one);
        assert!(super::mint::check_keyset_id(s(&case["id"]), &keys).is_err());
    }
}

#[test]
fn amounts_split_into_powers_of_two() {
    assert_eq!(dhke::split(13), vec![1, 4, 8]);
    assert_eq!(dhke::split(0), Vec::<u64>::new());
    assert_eq!(dhke::split(u64::MAX).len(), 64);
    assert_eq!(super::input_fee([100, 100, 100]), 1);
    assert_eq!(super::input_fee([100; 11]), 2);
    assert_eq!(super::input_fee([]), 0);
}

fn token_of(case: &Value) -> Token {
    Token {
        mint: s(&case["mint"]).into(),
        unit: s(&case["unit"]).into(),
        memo: case["memo"].as_str().map(str::to_owned),
        proofs: serde_json::from_value::<Vec<Proof>>(case["proofs"].clone()).unwrap(),
    }
}

#[test]
fn tokens_v3_and_v4_decode_to_the_vectors_and_v4_encodes_to_them() {
    let v = vectors();
    let v3 = &v["token_v3"];
    assert_eq!(Token::parse(s(&v3["serialized"])).unwrap(), token_of(v3));
    for bad in v3["invalid"].as_array().unwrap() {
        assert!(Token::parse(s(bad)).is_err());
    }
    for case in v["token_v4"].as_array().unwrap() {
        let want = token_of(case);
        assert_eq!(Token::parse(s(&case["serialized"])).unwrap(), want);
        assert_eq!(
            want.to_v4().unwrap(),
            s(&case["serialized"]).trim_end_matches('=')
        );
        assert_eq!(
            Token::parse(&format!("cashu:{}", want.to_v4().unwrap())).unwrap(),
            want
        );
    }
}

fn v4_of(value: &ciborium::value::Value) -> String {
    let mut out = Vec::new();
    ciborium::ser::into_writer(value, &mut out).unwrap();
    format!(
        "cashuB{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(out)
    )
}

#[test]
fn tokens_from_strangers_are_refused_with_a_reason() {
    use ciborium::value::Value as C;
    let good = token_of(&vectors()["token_v4"][0]);
    let proof = |a: C, c: Vec<u8>| {
        C::Map(vec![
            (C::from("a"), a),
            (C::from("s"), C::from("00")),
            (C::from("c"), C::Bytes(c)),
        ])
    };
    let c = hex::decode(&good.proofs[0].c).unwrap();
    let token = |proofs: Vec<C>| {
        v4_of(&C::Map(vec![
            (
                C::from("t"),
                C::Array(vec![C::Map(vec![
                    (C::from("i"), C::Bytes(vec![0, 1])),
                    (C::from("p"), C::Array(proofs)),
                ])]),
            ),
            (C::from("m"), C::from("http://127.0.0.1:3338")),
            (C::from("u"), C::from("sat")),
        ]))
    };
    assert!(Token::parse(&token(vec![proof(C::from(1u64), c.clone())])).is_ok());
    let cases = [
        (token(vec![]), "no proofs"),
        (token(vec![proof(C::from(0u64), c.clone())]), "amount 0"),
        (token(vec![proof(C::from(-1i64), c.clone())]), "unsigned"),
        (
            token(vec![
                proof(C::from(u64::MAX), c.clone()),
                proof(C::from(2u64), c.clone()),
            ]),
            "overflow",
        ),
        (token(vec![proof(C::from(1u64), vec![5; 33])]), "proof C"),
        (
            token(vec![proof(C::from(1u64), c.clone()); 1001]),
            "more than 1000",
        ),
        ("cashuB".to_owned(), "cashuB"),
        ("cashuB!!!!".to_owned(), "base64"),
        // a byte string that claims 2^60 bytes must not be allocated
        (
            format!(
                "cashuB{}",
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .encode([0x5b, 0x10, 0, 0, 0, 0, 0, 0, 0])
            ),
            "cashuB",
        ),
        ("cashuC0000".to_owned(), "cashuA or cashuB"),
        ("x".repeat(super::token::MAX_TOKEN_CHARS + 1), "longer than"),
    ];
    for (text, says) in cases {
        let e = Token::parse(&text).unwrap_err().to_string();
        assert!(e.contains(says), "{e:?} should say {says:?}");
    }
    // deep nesting is bounded by the decoder, not the stack
    let deep = format!(
        "cashuB{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([0x81u8; 100_000])
    );
    assert!(Token::parse(&deep).is_err());
}

#[test]
fn a_damaged_wallet_file_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wallet.sqlite");
    let junk = b"this is not a wallet, and it must not be replaced by one".repeat(100);
    std::fs::write(&path, &junk).unwrap();
    let e = Wallet::open(&path).unwrap_err().to_string();
    assert!(e.contains("wallet store"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), junk);
    // a fresh file opens, twice, and holds nothing
    let fresh = dir.path().join("fresh.sqlite");
    drop(Wallet::open(&fresh).unwrap());
    assert!(Wallet::open(&fresh).unwrap().balances().unwrap().is_empty());
}

fn keypair(byte: u8) -> secp256k1::Keypair {
    secp256k1::Keypair::from_secret_key(&dhke::scalar(&hex::encode([byte; 32]), "k").unwrap())
}

fn verify_witness(secret: &str, witness: &str, signer: &secp256k1::Keypair) -> bool {
    use sha2::Digest as _;
    let w: Value = serde_json::from_str(witness).unwrap();
    let sig = hex::decode(s(&w["signatures"][0])).unwrap();
    let sig = secp256k1::schnorr::Signature::from_byte_array(sig.try_into().unwrap());
    let digest = sha2::Sha256::digest(secret.as_bytes());
    secp256k1::schnorr::verify(&sig, &digest, &signer.x_only_public_key().0).is_ok()
}

#[test]
fn locks_are_written_read_and_unlocked_only_by_their_key_or_after_their_locktime() {
    use super::nut10::{Kind, Lock};
    let (ours, theirs) = (keypair(7), keypair(9));
    let our_hex = hex::encode(ours.public_key().serialize());
    let their_hex = hex::encode(theirs.public_key().serialize());
    // nutshell's own P2PK secret (a token its wallet locked) reads as a lock
    let locked = Token::parse(include_str!(
        "../../../../bench/fuzz/corpus/settle_cashu_token/nutshell-p2pk"
    ))
    .unwrap();
    let lock = Lock::parse(&locked.proofs[0].secret).unwrap().unwrap();
    assert_eq!(
        (lock.kind, lock.n_sigs, lock.sigflag.as_str()),
        (Kind::P2pk, 1, "SIG_INPUTS")
    );
    assert!(
        lock.witness(&locked.proofs[0].secret, Some(&ours), None, 0)
            .unwrap_err()
            .to_string()
            .contains("not this wallet's key")
    );
    assert_eq!(Lock::parse("9a6dbb84").unwrap(), None);

    // ours: a P2PK lock to a Nostr (x-only) key with a refund to theirs after t = 1000
    let x_only = hex::encode(ours.x_only_public_key().0.to_byte_array());
    let lock = Lock::p2pk(&x_only, Some(1000), vec![their_hex.clone()]).unwrap();
    let secret = lock.secret().unwrap();
    assert_ne!(
        secret,
        lock.secret().unwrap(),
        "each secret has its own nonce"
    );
    let read = Lock::parse(&secret).unwrap().unwrap();
    assert_eq!(read, lock);
    let w = read.witness(&secret, Some(&ours), None, 999).unwrap();
    assert!(verify_witness(&secret, &w, &ours));
    assert!(!verify_witness(&secret, &w, &theirs));
    // before the locktime the refund key cannot (and is told when it may); after it both can
    let e = read
        .witness(&secret, Some(&theirs), None, 1000)
        .unwrap_err()
        .to_string();
    assert!(e.contains("refund to") && e.contains("after 1000"), "{e}");
    let after = |k: &secp256k1::Keypair| read.witness(&secret, Some(k), None, 1001);
    assert!(verify_witness(&secret, &after(&theirs).unwrap(), &theirs));
    assert!(verify_witness(&secret, &after(&ours).unwrap(), &ours));
    assert!(after(&keypair(3)).is_err());
    assert!(
        read.witness(&secret, None, None, 0)
            .unwrap_err()
            .to_string()
            .contains("no key")
    );
    // no refund keys: after the locktime anyone spends, with an empty witness
    let open = Lock::p2pk(&their_hex, Some(10), vec![]).unwrap();
    assert_eq!(
        open.witness(&open.secret().unwrap(), None, None, 11)
            .unwrap(),
        "{}"
    );

    // an HTLC past its locktime opens by its refund key, without the preimage
    let h = Lock::htlc(&"ab".repeat(32), None, Some(5), vec![their_hex.clone()]).unwrap();
    let hs = h.secret().unwrap();
    assert!(verify_witness(
        &hs,
        &h.witness(&hs, Some(&theirs), None, 6).unwrap(),
        &theirs
    ));
    let e = h
        .witness(&hs, Some(&theirs), None, 5)
        .unwrap_err()
        .to_string();
    assert!(e.contains("preimage"), "{e}");

    // HTLC: the preimage, and our signature since our key is named
    let preimage = hex::encode([42u8; 32]);
    let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest([42u8; 32]));
    let htlc = Lock::htlc(&hash, Some(&our_hex), None, vec![]).unwrap();
    let secret = htlc.secret().unwrap();
    let w = htlc
        .witness(&secret, Some(&ours), Some(&preimage), 0)
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&w).unwrap()["preimage"],
        preimage.as_str()
    );
    assert!(verify_witness(&secret, &w, &ours));
    for (pre, says) in [
        (None, "give its preimage"),
        (Some(hex::encode([1u8; 32])), "does not hash"),
    ] {
        let e = htlc
            .witness(&secret, Some(&ours), pre.as_deref(), 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{e}");
    }
    // what this wallet does not sign for is said
    for (text, says) in [
        (
            r#"["P2PK",{"data":"02aa","tags":[["sigflag","SIG_ALL"]]}]"#,
            "SIG_ALL",
        ),
        (
            r#"["P2PK",{"data":"02aa","tags":[["n_sigs","2"]]}]"#,
            "2 signatures",
        ),
    ] {
        let l = Lock::parse(text).unwrap().unwrap();
        assert!(
            l.witness(text, Some(&ours), None, 0)
                .unwrap_err()
                .to_string()
                .contains(says)
        );
    }
    for (text, says) in [
        (r#"["DLC",{"data":"x"}]"#, "does not know"),
        ("[1", "not JSON"),
        (r#"["P2PK",{}]"#, "without data"),
    ] {
        assert!(
            Lock::parse(text).unwrap_err().to_string().contains(says),
            "{text}"
        );
    }
    assert!(Lock::p2pk("not a key", None, vec![]).is_err());
    assert!(Lock::htlc("abcd", None, None, vec![]).is_err());
}

#[test]
fn a_token_from_too_many_keysets_is_refused_before_the_mint_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let mut wallet = Wallet::open(&dir.path().join("w.sqlite")).unwrap();
    // nothing listens here: a request would fail as unreachable, not as refused
    let mint = super::MintClient::new("http://127.0.0.1:1").unwrap();
    let c = token_of(&vectors()["token_v4"][0]).proofs[0].c.clone();
    let proofs = (0..=super::wallet::MAX_KEYSETS)
        .map(|i| Proof {
            amount: 1,
            id: format!("00{i:014x}"),
            secret: format!("{i:064x}"),
            c: c.clone(),
            witness: None,
        })
        .collect();
    let token = Token {
        mint: mint.url().to_owned(),
        unit: "sat".into(),
        memo: None,
        proofs,
    };
    let e = wallet.receive(&mint, &token, None).unwrap_err().to_string();
    assert!(e.contains("keysets; a token carries at most 16"), "{e}");
}
