//! `meshnode wrap` and `meshnode unwrap` (NIP-59) against nostr-tools, an independent
//! implementation in another language, both ways, and through a running node's relay;
//! wraps that must not open are refused with the reason. Skipped (with a message) only
//! where `node` is absent and `CI` is not `true`.

use super::*;

/// The pinned nostr-tools' npm directory, installed by `nostr-tools/tools.sh` when node
/// is here and the package is not.
fn nostr_tools() -> Option<PathBuf> {
    node_tool("nostr-tools", "nostr-tools gift-wrap interop")
}

/// nostr-tools' NIP-59: `giftwrap.mjs NPM_DIR ARGS…`, its one JSON line.
fn js(npm: &Path, args: &[&str]) -> Value {
    let script = repo().join("appliance/tests/meshnode/nostr-tools/giftwrap.mjs");
    let o = Command::new("node")
        .arg(script)
        .arg(npm)
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "giftwrap.mjs {args:?}: {}", stderr(&o));
    serde_json::from_str(stdout(&o).trim()).unwrap()
}

fn keys(dir: &Path) -> fleetmesh_proto::NodeKeys {
    fleetmesh_proto::NodeKeys::load(&dir.join("keys")).unwrap()
}

fn pubkey(dir: &Path) -> String {
    keys(dir).nostr_pubkey_hex()
}

fn secret(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("keys/nostr.sec"))
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn gift_wraps_cross_with_nostr_tools_both_ways_and_through_the_relay() {
    let tmp = tempfile::tempdir().unwrap();
    let (alice, bob) = (tmp.path().join("alice"), tmp.path().join("bob"));
    assert!(init(&alice, &[]).status.success());
    assert!(init(&bob, &[]).status.success());
    let (a, b) = (alice.to_str().unwrap(), bob.to_str().unwrap());
    let wrap = |to: &str, extra: &[&str]| -> Output {
        let mut args = vec![
            "wrap",
            "--to",
            to,
            "--key-dir",
            a,
            "--content",
            "hello, bob",
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    let unwrap =
        |key_dir: &str, file: &Path| run(&["unwrap", "--key-dir", key_dir, file.to_str().unwrap()]);

    // ours, opened here: the rumor and the verified sender
    let o = wrap(&pubkey(&bob), &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let ours: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(ours["kind"], 1059);
    let ours_file = tmp.path().join("ours.json");
    std::fs::write(&ours_file, ours.to_string()).unwrap();
    let o = unwrap(b, &ours_file);
    assert!(o.status.success(), "{}", stderr(&o));
    let opened: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(opened["sender"], pubkey(&alice));
    assert_eq!(
        opened["sender_did"],
        format!("did:nostr:{}", pubkey(&alice))
    );
    assert_eq!(opened["rumor"]["content"], "hello, bob");
    assert_eq!(opened["rumor"]["kind"], 14);
    assert!(opened["rumor"].get("sig").is_none());

    // refusals: not for this key, not an event, a kind that is no wrap, a bad recipient
    let o = unwrap(a, &ours_file);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("not addressed to this key"),
        "{}",
        stderr(&o)
    );
    let junk = tmp.path().join("junk.json");
    std::fs::write(&junk, "{\"kind\": 1059").unwrap();
    let o = unwrap(b, &junk);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not a Nostr event"), "{}", stderr(&o));
    let o = wrap(&pubkey(&bob), &["--kind", "4"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("kind 1059 or 21059"), "{}", stderr(&o));
    let o = wrap("npub1xyz", &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("64 hex digits"), "{}", stderr(&o));
    // the live kind, to a did:nostr
    let o = wrap(&format!("did:nostr:{}", pubkey(&bob)), &["--kind", "21059"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let live_file = tmp.path().join("live.json");
    std::fs::write(&live_file, stdout(&o)).unwrap();
    assert!(unwrap(b, &live_file).status.success());

    // through a relay: the wrap is stored, and served only to bob, who authenticates
    // (NIP-42) and finds it by its p tag
    let node = run_node(&bob);
    let url = format!("ws://{}/", node.addr);
    runtime().block_on(async {
        publish_all(
            &url,
            &[fleetmesh_proto::Event::from_json(&ours.to_string()).unwrap()],
        )
        .await;
        assert!(
            req_events(&url, serde_json::json!({}))
                .await
                .iter()
                .all(|e| e["kind"] != 1059)
        );
        let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
        let req = serde_json::json!(["REQ", "w", {"kinds": [1059], "#p": [pubkey(&bob)]}]);
        ws.send(WsMessage::Text(req.to_string().into()))
            .await
            .unwrap();
        let challenge = next_json(&mut ws).await;
        assert_eq!(challenge[0], "AUTH", "{challenge}");
        let closed = next_json(&mut ws).await;
        assert!(
            closed[2].as_str().unwrap().starts_with("auth-required:"),
            "{closed}"
        );
        let auth = fleetmesh_relay::sync::auth_message(
            keys(&bob).nostr(),
            &url,
            challenge[1].as_str().unwrap(),
        )
        .unwrap();
        ws.send(WsMessage::Text(auth.into())).await.unwrap();
        assert_eq!(next_json(&mut ws).await[2], true);
        ws.send(WsMessage::Text(req.to_string().into()))
            .await
            .unwrap();
        let found = next_json(&mut ws).await;
        assert_eq!(found[2], ours, "{found}");
        assert_eq!(next_json(&mut ws).await[0], "EOSE");
    });

    // nostr-tools, both ways
    let Some(npm) = nostr_tools() else { return };
    let rumor = js(
        &npm,
        &["unwrap", &secret(&bob), ours_file.to_str().unwrap()],
    );
    assert_eq!(rumor["pubkey"], pubkey(&alice));
    assert_eq!(rumor["content"], "hello, bob");
    let theirs = js(
        &npm,
        &["wrap", &secret(&alice), &pubkey(&bob), "from nostr-tools"],
    );
    let theirs_file = tmp.path().join("theirs.json");
    std::fs::write(&theirs_file, theirs.to_string()).unwrap();
    let o = unwrap(b, &theirs_file);
    assert!(o.status.success(), "{}", stderr(&o));
    let opened: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(opened["sender"], pubkey(&alice));
    assert_eq!(opened["rumor"]["content"], "from nostr-tools");
    // and nostr-tools' wrap is not Alice's to open
    assert_eq!(unwrap(a, &theirs_file).status.code(), Some(2));
}
