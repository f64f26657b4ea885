//! NIP-59 gift wrap both ways with the `nostr` crate (an independent NIP-59), and every
//! layer's check: the wrap's kind, signature and recipient, the seal's kind, signature and
//! empty tags, the rumor's id and missing signature, the rumor's author against the seal's
//! signer.

use fleetmesh_proto::{Error, Event, NodeKeys, UnsignedEvent, nip44, nip59};
use fleetmesh_schemas::constants::kind;
use serde_json::json;

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn message(content: &str) -> UnsignedEvent {
    UnsignedEvent {
        created_at: 1_767_225_600,
        kind: 14,
        tags: vec![vec!["subject".into(), "job".into()]],
        content: content.into(),
    }
}

fn ours(keys: &nostr::Keys) -> secp256k1::Keypair {
    secp256k1::Keypair::from_secret_bytes(keys.secret_key().to_secret_bytes()).unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

#[test]
fn gift_wraps_interoperate_with_the_nostr_crate_both_ways() {
    use nostr::JsonUtil as _;
    let (sender, recipient) = (nostr::Keys::generate(), nostr::Keys::generate());
    let rt = runtime();
    // ours → theirs
    let wrap = nip59::wrap(
        &ours(&sender),
        &recipient.public_key().to_hex(),
        message("compute/1.0 ✓"),
        kind::GIFT_WRAP,
        now(),
    )
    .unwrap();
    let theirs = nostr::Event::from_json(wrap.to_json()).unwrap();
    theirs.verify().unwrap();
    let opened = rt
        .block_on(nostr::nips::nip59::extract_rumor(&recipient, &theirs))
        .unwrap();
    assert_eq!(opened.sender, sender.public_key());
    assert_eq!(opened.rumor.content, "compute/1.0 ✓");
    assert_eq!(opened.rumor.kind.as_u16(), 14);
    assert_eq!(opened.rumor.created_at.as_secs(), 1_767_225_600);
    // their rumor id is ours
    let mut rumor = opened.rumor.clone();
    rumor.ensure_id();
    let ours_opened = nip59::unwrap(&ours(&recipient), &wrap).unwrap();
    assert_eq!(rumor.id.unwrap().to_bytes(), ours_opened.rumor.id);
    // the wrap says nothing of the sender: a one-time key, the recipient's p tag, times
    // drawn up to two days back
    assert_ne!(wrap.pubkey, sender.public_key().to_bytes());
    assert_eq!(
        wrap.tags,
        [vec!["p".to_owned(), recipient.public_key().to_hex()]]
    );
    for t in [wrap.created_at, ours_opened.seal.created_at] {
        assert!(t <= now() && t + nip59::MAX_TWEAK_SECS >= now(), "{t}");
    }
    assert!(
        fleetmesh_schemas::SchemaSet::embedded()
            .validate_event(&wrap.to_value())
            .unwrap()
    );

    // theirs → ours
    let rumor = nostr::EventBuilder::new(nostr::Kind::Custom(14), "from rust-nostr")
        .build(sender.public_key());
    let theirs = rt
        .block_on(nostr::EventBuilder::gift_wrap(
            &sender,
            &recipient.public_key(),
            rumor,
            [],
        ))
        .unwrap();
    let wrap = Event::from_json(&theirs.as_json()).unwrap();
    let opened = nip59::unwrap(&ours(&recipient), &wrap).unwrap();
    assert_eq!(opened.sender, sender.public_key().to_bytes());
    assert_eq!(opened.rumor.content, "from rust-nostr");
    // not for the sender, nor anyone else
    assert!(nip59::unwrap(&ours(&sender), &wrap).is_err());
}

/// A wrap of kind `wrap_kind` around `seal` (any event) to `recipient`, by a one-time key.
fn wrap_around(seal: &Event, recipient: &NodeKeys, wrap_kind: u16) -> Event {
    let one_time = NodeKeys::generate().unwrap();
    let key = nip44::conversation_key(
        &one_time.nostr().secret_key(),
        &recipient.nostr_pubkey_hex(),
    )
    .unwrap();
    one_time
        .sign(UnsignedEvent {
            created_at: now(),
            kind: wrap_kind,
            tags: vec![vec!["p".into(), recipient.nostr_pubkey_hex()]],
            content: nip44::encrypt(&key, seal.to_json().as_bytes()).unwrap(),
        })
        .unwrap()
}

/// A seal signed by `signer` around `rumor` (any JSON) to `recipient`.
fn seal_of(
    rumor: &serde_json::Value,
    signer: &NodeKeys,
    recipient: &NodeKeys,
    tags: Vec<Vec<String>>,
) -> Event {
    let key = nip44::conversation_key(&signer.nostr().secret_key(), &recipient.nostr_pubkey_hex())
        .unwrap();
    signer
        .sign(UnsignedEvent {
            created_at: now(),
            kind: kind::SEAL,
            tags,
            content: nip44::encrypt(&key, rumor.to_string().as_bytes()).unwrap(),
        })
        .unwrap()
}

#[test]
fn every_layer_is_checked_and_a_refusal_names_it() {
    let (alice, bob, mallory) = (
        NodeKeys::generate().unwrap(),
        NodeKeys::generate().unwrap(),
        NodeKeys::generate().unwrap(),
    );
    // every refusal is the same from unwrap_verified (which skips only the wrap's signature)
    let refused = |wrap: &Event| -> String {
        let e = nip59::unwrap(bob.nostr(), wrap).unwrap_err().to_string();
        let verified = nip59::unwrap_verified(bob.nostr(), wrap)
            .unwrap_err()
            .to_string();
        assert_eq!(e, verified);
        e
    };
    let rumor = nip59::Rumor::new(alice.nostr_pubkey(), message("hi")).to_value();
    // the honest one opens, for kind 1059 and the live 21059
    for k in [kind::GIFT_WRAP, kind::EPHEMERAL_GIFT_WRAP] {
        let w = wrap_around(&seal_of(&rumor, &alice, &bob, vec![]), &bob, k);
        let opened = nip59::unwrap(bob.nostr(), &w).unwrap();
        assert_eq!(opened.sender, alice.nostr_pubkey());
        assert_eq!(opened.rumor.content, "hi");
    }
    // Mallory seals Alice's rumor: the author is not the signer
    let forged = wrap_around(
        &seal_of(&rumor, &mallory, &bob, vec![]),
        &bob,
        kind::GIFT_WRAP,
    );
    let e = refused(&forged);
    assert!(
        e.contains(&format!(
            "the seal is signed by {}",
            mallory.nostr_pubkey_hex()
        )),
        "{e}"
    );
    // a seal with tags, a seal of another kind
    let tagged = seal_of(&rumor, &alice, &bob, vec![vec!["p".into(), "x".into()]]);
    assert!(refused(&wrap_around(&tagged, &bob, kind::GIFT_WRAP)).contains("the seal has tags"));
    let note = alice
        .sign(UnsignedEvent {
            created_at: now(),
            kind: 1,
            tags: vec![],
            content: "x".into(),
        })
        .unwrap();
    assert!(refused(&wrap_around(&note, &bob, kind::GIFT_WRAP)).contains("not a seal"));
    // a signed rumor, a rumor whose id is not its hash
    let mut signed = rumor.clone();
    signed["sig"] = json!("00".repeat(64));
    let w = wrap_around(
        &seal_of(&signed, &alice, &bob, vec![]),
        &bob,
        kind::GIFT_WRAP,
    );
    assert!(refused(&w).contains("the rumor is signed"));
    let mut altered = rumor.clone();
    altered["content"] = json!("bye");
    let w = wrap_around(
        &seal_of(&altered, &alice, &bob, vec![]),
        &bob,
        kind::GIFT_WRAP,
    );
    assert!(refused(&w).contains("the rumor's id is not the hash"));
    // not addressed to Bob; for Bob but another kind; re-signed content
    let honest = wrap_around(
        &seal_of(&rumor, &alice, &bob, vec![]),
        &bob,
        kind::GIFT_WRAP,
    );
    let e = nip59::unwrap(mallory.nostr(), &honest).unwrap_err();
    assert!(e.to_string().contains("not addressed to this key"), "{e}");
    let mut other_kind = honest.clone();
    other_kind.kind = 4;
    assert!(refused(&other_kind).contains("kind 4 is not a gift wrap"));
    let mut tampered = honest.clone();
    // one base64 character changed (to another: a random wrap holds an `A` there 1 in 64)
    let other = if &tampered.content[10..11] == "A" {
        "B"
    } else {
        "A"
    };
    tampered.content.replace_range(10..11, other);
    assert!(matches!(
        nip59::unwrap(bob.nostr(), &tampered),
        Err(Error::InvalidEvent { .. })
    ));
    // a wrap whose content does not decrypt for Bob (encrypted to Mallory, tagged Bob)
    let mut misdirected = wrap_around(
        &seal_of(&rumor, &alice, &bob, vec![]),
        &mallory,
        kind::GIFT_WRAP,
    );
    misdirected.tags = vec![vec!["p".into(), bob.nostr_pubkey_hex()]];
    let misdirected = NodeKeys::generate()
        .unwrap()
        .sign(UnsignedEvent {
            created_at: misdirected.created_at,
            kind: misdirected.kind,
            tags: misdirected.tags,
            content: misdirected.content,
        })
        .unwrap();
    assert!(matches!(
        nip59::unwrap(bob.nostr(), &misdirected),
        Err(Error::Crypto(_))
    ));
    // nip59::wrap refuses a kind that is not a gift wrap
    assert!(
        nip59::wrap(
            alice.nostr(),
            &bob.nostr_pubkey_hex(),
            message("x"),
            1,
            now()
        )
        .is_err()
    );
}
