//! NIP-01 events, BIP-340, identity and the store's basics against the shared vectors and
//! against an independent implementation (the `nostr` crate).

use std::path::PathBuf;

use fleetmesh_proto::event::{canonical, sign_schnorr, verify_schnorr};
use fleetmesh_proto::identity::{DescriptorInfo, Software, verify_descriptor};
use fleetmesh_proto::{Endpoint, Error, Event, NodeClass, NodeKeys, UnsignedEvent};
use fleetmesh_relay::Store;
use fleetmesh_relay::store::EventStore as _;
use fleetmesh_relay::store::InsertOutcome;
use nostr::JsonUtil as _;
use serde_json::Value;

fn vectors() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .join("tests/vectors")
}

fn hex32(s: &str) -> [u8; 32] {
    let mut b = [0u8; 32];
    hex::decode_to_slice(s, &mut b).unwrap();
    b
}

#[test]
fn bip340_vectors() {
    let text = std::fs::read_to_string(vectors().join("bip340-test-vectors.csv")).unwrap();
    let (mut signed, mut verified, mut skipped) = (0, 0, 0);
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (index, seckey, pubkey, aux, msg, sig, result) =
            (f[0], f[1], f[2], f[3], f[4], f[5], f[6]);
        let msg = hex::decode(msg).unwrap();
        // Nostr signs only 32-byte event ids, and so do we: rows 15-18 (messages of 0, 1,
        // 17 and 100 bytes) do not apply.
        let Ok(msg) = <[u8; 32]>::try_from(msg.as_slice()) else {
            skipped += 1;
            continue;
        };
        let pubkey = hex32(&pubkey.to_lowercase());
        let mut sig64 = [0u8; 64];
        hex::decode_to_slice(sig.to_lowercase(), &mut sig64).unwrap();
        assert_eq!(
            verify_schnorr(&pubkey, &msg, &sig64),
            result == "TRUE",
            "row {index}: verification"
        );
        verified += 1;
        if !seckey.is_empty() {
            let kp = secp256k1::Keypair::from_secret_bytes(hex32(&seckey.to_lowercase())).unwrap();
            assert_eq!(
                kp.x_only_public_key().0.to_byte_array(),
                pubkey,
                "row {index}: pubkey"
            );
            let ours = sign_schnorr(&kp, &msg, &hex32(&aux.to_lowercase()));
            assert_eq!(ours, sig64, "row {index}: signature must match exactly");
            signed += 1;
        }
    }
    assert_eq!((signed, verified, skipped), (4, 15, 4));
}

#[test]
fn nip01_id_vectors() {
    let text = std::fs::read_to_string(vectors().join("nip01-event-id.vectors.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let cases = doc["vectors"].as_array().unwrap();
    assert!(cases.len() >= 8);
    for v in cases {
        let tags: Vec<Vec<String>> = serde_json::from_value(v["tags"].clone()).unwrap();
        let pubkey = hex32(v["pubkey"].as_str().unwrap());
        let created = v["created_at"].as_u64().unwrap();
        let kind = v["kind"].as_u64().unwrap() as u16;
        let content = v["content"].as_str().unwrap();
        assert_eq!(
            canonical::serialize(&pubkey, created, kind, &tags, content),
            v["serialized"].as_str().unwrap(),
            "{}",
            v["description"]
        );
        assert_eq!(
            hex::encode(canonical::event_id(&pubkey, created, kind, &tags, content)),
            v["id"].as_str().unwrap(),
            "{}",
            v["description"]
        );
    }
}

fn sample(content: &str) -> UnsignedEvent {
    UnsignedEvent {
        created_at: 1_700_000_000,
        kind: 1,
        tags: vec![
            vec!["t".into(), "fleetmesh".into()],
            vec!["p".into(), "ab\"c\n".into()],
        ],
        content: content.into(),
    }
}

#[test]
fn our_events_verify_under_the_nostr_crate_and_back() {
    let keys = NodeKeys::generate().unwrap();
    for content in [
        "hello",
        "line\nbreak \"quoted\" \\ tab\t \u{2028} é 🚀",
        "\u{1}\u{1f}",
    ] {
        let ours = keys.sign(sample(content)).unwrap();
        ours.verify().unwrap();
        let theirs = nostr::prelude::Event::from_json(ours.to_json()).unwrap();
        theirs.verify().expect("the nostr crate accepts our event");
        assert_eq!(theirs.id.to_hex(), ours.id_hex());
    }

    // An event made by the nostr crate passes our parse and verify.
    let nkeys = nostr::prelude::Keys::generate();
    let tags = [nostr::prelude::Tag::parse(["e", &"00".repeat(32)]).unwrap()];
    let theirs = nostr::prelude::EventBuilder::new(nostr::prelude::Kind::from(30810), "{\"x\": 1}")
        .tags(tags)
        .custom_created_at(nostr::prelude::Timestamp::from(1_700_000_123))
        .sign_with_keys(&nkeys)
        .unwrap();
    let ours = Event::from_json(&theirs.as_json()).unwrap();
    ours.verify().expect("we accept the nostr crate's event");
    assert_eq!(ours.id_hex(), theirs.id.to_hex());
}

#[test]
fn tampering_is_caught_and_named() {
    let keys = NodeKeys::generate().unwrap();
    let good = keys.sign(sample("x")).unwrap();
    let mut e = good.clone();
    e.content.push('!');
    assert!(matches!(
        e.verify(),
        Err(Error::InvalidEvent { field: "id", .. })
    ));
    let mut e = good.clone();
    e.sig[10] ^= 1;
    assert!(matches!(
        e.verify(),
        Err(Error::InvalidEvent { field: "sig", .. })
    ));
    // Another key's signature over the right id.
    let other = NodeKeys::generate().unwrap().sign(sample("x")).unwrap();
    let mut e = good.clone();
    e.sig = other.sig;
    assert!(matches!(
        e.verify(),
        Err(Error::InvalidEvent { field: "sig", .. })
    ));
    // Malformed JSON is named by field, and never panics.
    let json = good.to_json();
    for (bad, field) in [
        (
            json.replace(&good.id_hex(), &good.id_hex().to_uppercase()),
            "id",
        ),
        (json.replace(&good.id_hex(), "abc"), "id"),
        (
            json.replace(&good.id_hex(), &format!("g{}", &good.id_hex()[1..])),
            "id",
        ),
        (
            json.replace(
                &hex::encode(good.sig),
                &format!("{}/", &hex::encode(good.sig)[1..]),
            ),
            "sig",
        ),
        (json.replacen("\"kind\":1", "\"kind\":70000", 1), "event"),
        (json.replacen("\"tags\":[", "\"tags\":[[],", 1), "tags"),
        ("{".to_owned(), "event"),
        (json.replacen('}', ",\"extra\":1}", 1), "event"),
    ] {
        match Event::from_json(&bad) {
            Err(Error::InvalidEvent { field: f, .. }) => assert_eq!(f, field, "{bad}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
}

fn info() -> DescriptorInfo {
    DescriptorInfo {
        software: Software {
            name: "fleetmesh".into(),
            version: "0.1.0".into(),
        },
        class: NodeClass::Backbone,
        operator: Some("11".repeat(32)),
        relays: vec!["wss://relay.example/".into()],
        endpoints: vec!["wss=wss://n.example/".parse::<Endpoint>().unwrap()],
        protocol_digest: "22".repeat(32),
        predecessor: None,
    }
}

#[test]
fn descriptor_binds_all_three_keys_and_validates() {
    let keys = NodeKeys::generate().unwrap();
    let event = keys.descriptor(&info(), 1_700_000_000).unwrap();
    let content = verify_descriptor(&event).unwrap();
    assert_eq!(content.did, keys.did());
    assert_eq!(content.keys.len(), 3);
    assert_eq!(event.tag_value("protocol"), Some("22".repeat(32).as_str()));
    assert_eq!(event.tag_value("class"), Some("backbone"));
    nostr::prelude::Event::from_json(event.to_json())
        .unwrap()
        .verify()
        .unwrap();
    fleetmesh_schemas::SchemaSet::embedded()
        .validate(
            &fleetmesh_schemas::SchemaKey::Event(11801),
            &event.to_value(),
        )
        .unwrap();

    // Peering is allowed only on equal protocol digests.
    let ours = fleetmesh_schemas::ProtocolDigest([0x22; 32]);
    fleetmesh_proto::identity::check_peer(&event, &ours).unwrap();
    let other = fleetmesh_schemas::ProtocolDigest([0x23; 32]);
    match fleetmesh_proto::identity::check_peer(&event, &other) {
        Err(Error::ProtocolMismatch { theirs, .. }) => assert_eq!(theirs, "22".repeat(32)),
        r => panic!("{r:?}"),
    }

    // The descriptor's content, edited, then signed by `signer`.
    let forge = |signer: &NodeKeys, edit: &dyn Fn(&mut Value)| {
        let mut content: Value = serde_json::from_str(&event.content).unwrap();
        edit(&mut content);
        signer
            .sign(UnsignedEvent {
                created_at: event.created_at,
                kind: event.kind,
                tags: event.tags.clone(),
                content: content.to_string(),
            })
            .unwrap()
    };
    // Someone else's Ed25519 key cannot be claimed: the thief signs with its own Nostr key.
    let thief = NodeKeys::generate().unwrap();
    let forged = forge(&thief, &|c| {
        c["did"] = Value::from(thief.did());
        c["keys"][0]["public"] = Value::from(thief.nostr_pubkey_hex());
    });
    let err = verify_descriptor(&forged).unwrap_err().to_string();
    assert!(err.contains("ed25519 proof"), "{err}");
    // A DID that is not the signer's.
    let forged = forge(&keys, &|c| c["did"] = Value::from(thief.did()));
    let err = verify_descriptor(&forged).unwrap_err().to_string();
    assert!(err.contains("did"), "{err}");
    // The protocol tag and the content must agree with ours, both of them.
    let mut tagged = event.clone();
    tagged.tags[0][1] = "23".repeat(32);
    let tagged = keys
        .sign(UnsignedEvent {
            created_at: tagged.created_at,
            kind: tagged.kind,
            tags: tagged.tags,
            content: tagged.content,
        })
        .unwrap();
    assert!(matches!(
        fleetmesh_proto::identity::check_peer(&tagged, &ours),
        Err(Error::ProtocolMismatch { .. })
    ));
    // A secp256k1 key entry that is not the signer's.
    let forged = forge(&keys, &|c| {
        c["keys"][0]["public"] = Value::from("00".repeat(32))
    });
    let err = verify_descriptor(&forged).unwrap_err().to_string();
    assert!(err.contains("secp256k1"), "{err}");
}

#[test]
fn key_files_are_private_and_round_trip() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("keys");
    let keys = NodeKeys::generate().unwrap();
    keys.save(&dir).unwrap();
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    for name in fleetmesh_proto::identity::KEY_FILES {
        let mode = std::fs::metadata(dir.join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "{name}");
    }
    let loaded = NodeKeys::load(&dir).unwrap();
    assert_eq!(loaded.nostr_pubkey(), keys.nostr_pubkey());
    assert_eq!(loaded.ed25519_public(), keys.ed25519_public());
    assert_eq!(loaded.x25519_public(), keys.x25519_public());
    // Never overwritten.
    assert!(matches!(keys.save(&dir), Err(Error::Io { .. })));
    assert_eq!(
        NodeKeys::load(&dir).unwrap().nostr_pubkey(),
        keys.nostr_pubkey()
    );
    // Readable by others: refused with the fix named.
    let f = dir.join("ed25519.sec");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = NodeKeys::load(&dir).unwrap_err().to_string();
    assert!(err.contains("chmod 600"), "{err}");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&f, "zz").unwrap();
    let err = NodeKeys::load(&dir).unwrap_err().to_string();
    assert!(err.contains("64 hex"), "{err}");
}

#[test]
fn store_keeps_events_across_reopen_and_refuses_newer_files() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t.db");
    let keys = NodeKeys::generate().unwrap();
    let a = keys.sign(sample("a")).unwrap();
    {
        let mut store = Store::create(&path).unwrap();
        assert_eq!(store.insert_event(&a).unwrap(), InsertOutcome::Stored);
        assert_eq!(
            store.insert_event(&a).unwrap(),
            InsertOutcome::Duplicate,
            "a duplicate is not stored twice"
        );
        store.set_meta("k", "v1").unwrap();
        store.set_meta("k", "v2").unwrap();
    }
    assert!(
        Store::create(&path).is_err(),
        "create never opens an existing file"
    );
    let mut store = Store::open(&path).unwrap();
    assert_eq!(store.event_count().unwrap(), 1);
    assert_eq!(store.meta("k").unwrap().as_deref(), Some("v2"));
    assert_eq!(
        store.latest_event(&keys.nostr_pubkey(), 1).unwrap(),
        Some(a.clone())
    );
    // Same created_at: NIP-01 keeps the lowest id.
    let b = keys.sign(sample("b")).unwrap();
    store.insert_event(&b).unwrap();
    let low = if a.id < b.id { &a } else { &b };
    assert_eq!(
        store
            .latest_event(&keys.nostr_pubkey(), 1)
            .unwrap()
            .as_ref(),
        Some(low)
    );
    drop(store); // checkpoints the WAL into the main file

    // Pretend a future build wrote the file: SQLite keeps `user_version` as a big-endian
    // u32 at byte offset 60 of the database header.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[60..64].copy_from_slice(&99u32.to_be_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let err = Store::open(&path).unwrap_err().to_string();
    assert!(err.contains("newer"), "{err}");
    // Refused without being touched.
    assert_eq!(std::fs::read(&path).unwrap()[60..64], 99u32.to_be_bytes());
}

#[test]
fn a_rotated_descriptor_names_its_predecessor_only_with_the_old_keys_proof() {
    use fleetmesh_proto::identity::{predecessor, rotation_proof};
    let (old, new) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
    let mut with = info();
    with.predecessor = Some(rotation_proof(old.nostr(), &new.nostr_pubkey()).unwrap());
    let event = new.descriptor(&with, 1_700_000_000).unwrap();
    verify_descriptor(&event).unwrap();
    assert_eq!(predecessor(&event).unwrap(), Some(old.nostr_pubkey_hex()));
    fleetmesh_schemas::SchemaSet::embedded()
        .validate_event(&event.to_value())
        .unwrap();
    // a proof made for another successor, or by a key claiming to be another's
    let stranger = NodeKeys::generate().unwrap();
    let mut forged = info();
    forged.predecessor = Some(rotation_proof(old.nostr(), &stranger.nostr_pubkey()).unwrap());
    let e = verify_descriptor(&new.descriptor(&forged, 1_700_000_000).unwrap()).unwrap_err();
    assert!(e.to_string().contains("proof does not verify"), "{e}");
    let mut claimed = info();
    let mut p = rotation_proof(stranger.nostr(), &new.nostr_pubkey()).unwrap();
    p.key = old.nostr_pubkey_hex();
    claimed.predecessor = Some(p);
    assert!(verify_descriptor(&new.descriptor(&claimed, 1_700_000_000).unwrap()).is_err());
}
