//! Key revocation and rotation across two nodes: `meshnode keys revoke` and `keys rotate`
//! publish on another node's relay, which then refuses the revoked key's later events;
//! `did resolve` through it refuses a descriptor listing a revoked key, follows a rotation
//! to the new key (which must prove its predecessor), and refuses an unproven one.

use super::*;
use fleetmesh_proto::NodeKeys;

fn descriptor_of(dir: &Path) -> fleetmesh_proto::Event {
    let text = std::fs::read_to_string(dir.join("descriptor.json")).unwrap();
    fleetmesh_proto::Event::from_json(text.trim()).unwrap()
}

fn resolve(did: &str, relay: &str) -> Output {
    run(&[
        "did",
        "resolve",
        did,
        "--relay",
        relay,
        "--timeout-secs",
        "5",
    ])
}

#[test]
fn revocations_and_rotations_reach_another_node_which_refuses_the_old_key_and_follows_the_chain() {
    let (_b_dir, b) = super::inference::serve(&[], "");
    let relay = format!("ws://{}/", b.addr);
    let tmp = tempfile::tempdir().unwrap();

    // a leaked Ed25519 key: revoked, the descriptor listing it is refused
    let a = tmp.path().join("a");
    assert!(init(&a, &[]).status.success());
    let a_keys = NodeKeys::load(&a.join("keys")).unwrap();
    runtime().block_on(publish_all(&relay, &[descriptor_of(&a)]));
    assert!(resolve(&a_keys.did(), &relay).status.success());
    let ed = hex::encode(a_keys.ed25519_public());
    let o = run(&[
        "keys",
        "revoke",
        a.to_str().unwrap(),
        "--key",
        &ed,
        "--reason",
        "compromised",
        "--relay",
        &relay,
    ]);
    assert!(o.status.success(), "{} {}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("stored"), "{}", stderr(&o));
    let revocation: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(revocation["kind"], 11802);
    let o = resolve(&a_keys.did(), &relay);
    assert_usage_error(&o, &format!("its ed25519 key {ed} was revoked"));
    // a key that is not the node's is refused
    let o = run(&[
        "keys",
        "revoke",
        a.to_str().unwrap(),
        "--key",
        &"ab".repeat(32),
        "--reason",
        "retired",
    ]);
    assert_usage_error(&o, "is not one of this node's keys");

    // a rotation: the new keys take over, the old key's later events are refused on b
    let c = tmp.path().join("c");
    assert!(init(&c, &[]).status.success());
    let old = NodeKeys::load(&c.join("keys")).unwrap();
    runtime().block_on(publish_all(&relay, &[descriptor_of(&c)]));
    let o = run(&[
        "keys",
        "rotate",
        c.to_str().unwrap(),
        "--grace-secs",
        "0",
        "--relay",
        &relay,
    ]);
    assert!(o.status.success(), "{} {}", stdout(&o), stderr(&o));
    let new = NodeKeys::load(&c.join("keys")).unwrap();
    assert_ne!(new.nostr_pubkey(), old.nostr_pubkey());
    let retired = std::fs::read_dir(c.join("keys.retired")).unwrap().count();
    assert_eq!(retired, 1);
    let printed: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        (printed[0]["kind"].as_u64(), printed[1]["kind"].as_u64()),
        (Some(11802), Some(11801))
    );
    assert_eq!(printed[1]["pubkey"], new.nostr_pubkey_hex());
    let now = unix_now();
    let late = old
        .sign(fleetmesh_proto::UnsignedEvent {
            created_at: now + 1,
            kind: 1,
            tags: vec![],
            content: "x".into(),
        })
        .unwrap();
    runtime().block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(relay.as_str())
            .await
            .unwrap();
        ws.send(WsMessage::Text(
            format!("[\"EVENT\",{}]", late.to_json()).into(),
        ))
        .await
        .unwrap();
        let v = next_json(&mut ws).await;
        assert_eq!(v[2], false, "{v}");
        assert!(v[3].as_str().unwrap().starts_with("blocked:"), "{v}");
    });
    // resolving the old DID follows the rotation
    let o = resolve(&old.did(), &relay);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["id"], new.did());
    assert_eq!(doc["alsoKnownAs"], serde_json::json!([old.did()]));
    // and `did show` is the new node's
    let o = run(&["did", "show", c.to_str().unwrap()]);
    assert!(stdout(&o).contains(&new.did()), "{}", stdout(&o));
    // and the node starts on its new keys
    let d = run_node(&c);
    let info = runtime().block_on(nip11(&d));
    assert_eq!(info["self"], new.nostr_pubkey_hex(), "{info}");
    drop(d);

    // a revocation naming a successor that does not prove it: refused
    let d = tmp.path().join("d");
    let e = tmp.path().join("e");
    assert!(init(&d, &[]).status.success() && init(&e, &[]).status.success());
    let (d_keys, e_keys) = (
        NodeKeys::load(&d.join("keys")).unwrap(),
        NodeKeys::load(&e.join("keys")).unwrap(),
    );
    let claim = self_revocation(&d_keys, now - 10, now - 20, Some(e_keys.nostr_pubkey_hex()));
    runtime().block_on(publish_all(
        &relay,
        &[descriptor_of(&d), descriptor_of(&e), claim],
    ));
    let o = resolve(&d_keys.did(), &relay);
    assert_usage_error(&o, "does not prove");
}
