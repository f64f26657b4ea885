//! `meshnode init`: node directories, keys, descriptors, manifests, refusals.

use super::*;

#[test]
fn init_creates_a_private_node_with_a_descriptor_others_can_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    let op = "ab".repeat(32);
    let o = init(
        &dir,
        &[
            "--operator",
            &op,
            "--class",
            "backbone",
            "--relay",
            "wss://r1.example/",
            "--relay",
            "ws://127.0.0.1:9/",
            "--endpoint",
            "wss=wss://n.example/",
            "--face-port",
            "17001",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);

    // Key files 0600 in a 0700 directory, node directory 0700.
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("keys")), 0o700);
    for f in ["nostr.sec", "ed25519.sec", "x25519.sec"] {
        assert_eq!(mode(&dir.join("keys").join(f)), 0o600, "{f}");
        assert_eq!(
            std::fs::read_to_string(dir.join("keys").join(f))
                .unwrap()
                .trim()
                .len(),
            64
        );
    }
    // A real SQLite database.
    let header = std::fs::read(dir.join("fleetmesh.db")).unwrap();
    assert!(header.starts_with(b"SQLite format 3\0"));

    // The descriptor verifies under the nostr crate, and is what init announced.
    let json = std::fs::read_to_string(dir.join("descriptor.json")).unwrap();
    let theirs = nostr::prelude::Event::from_json(&json).unwrap();
    theirs
        .verify()
        .expect("the nostr crate verifies our descriptor");
    assert_eq!(theirs.kind.as_u16(), 11801);
    let pubkey = theirs.pubkey.to_hex();
    assert!(out.contains(&format!("pubkey:     {pubkey}")), "{out}");
    assert!(
        out.contains(&format!("did:        did:nostr:{pubkey}")),
        "{out}"
    );
    assert!(out.contains(&theirs.id.to_hex()));
    // Its content carries the settings and the protocol digest, and matches its schema.
    let ev: Value = serde_json::from_str(&json).unwrap();
    SchemaSet::embedded()
        .validate(&fleetmesh_schemas::SchemaKey::Event(11801), &ev)
        .unwrap();
    let content: Value = serde_json::from_str(ev["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["class"], "backbone");
    assert_eq!(content["operator"], op);
    assert_eq!(content["relays"][1], "ws://127.0.0.1:9/");
    assert_eq!(content["endpoints"][0]["url"], "wss://n.example/");
    assert_eq!(
        content["protocol_digest"],
        SchemaSet::embedded().digest().to_hex()
    );
    let ours = fleetmesh_proto::Event::from_json(&json).unwrap();
    fleetmesh_proto::identity::verify_descriptor(&ours).expect("ed25519 proof and keys hold");

    // The store holds the same descriptor (doctor reads it from there).
    let o = run(&["doctor", dir.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(report["node"]["pubkey"], pubkey);
    assert_eq!(report["node"]["descriptor"], theirs.id.to_hex());
    assert_eq!(report["node"]["events"], 1);

    // The config records the face port.
    let config = std::fs::read_to_string(dir.join("meshnode.toml")).unwrap();
    assert!(config.contains("listen = \"127.0.0.1:17001\""), "{config}");
}

#[test]
fn init_refuses_to_overwrite_a_node_or_a_non_empty_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    assert!(init(&dir, &[]).status.success());
    let key_before = std::fs::read(dir.join("keys/nostr.sec")).unwrap();
    let db_before = std::fs::read(dir.join("fleetmesh.db")).unwrap();
    let o = init(&dir, &["--class", "leaf"]);
    assert_usage_error(&o, "already holds a node");
    assert_eq!(stderr(&o).lines().count(), 1, "one line on stderr");
    assert_eq!(
        std::fs::read(dir.join("keys/nostr.sec")).unwrap(),
        key_before
    );
    assert_eq!(std::fs::read(dir.join("fleetmesh.db")).unwrap(), db_before);

    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    assert_usage_error(&init(&other, &[]), "not empty");
    assert_eq!(
        std::fs::read_to_string(other.join("notes.txt")).unwrap(),
        "mine"
    );
    // An existing empty directory is fine.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(init(&empty, &[]).status.success());
    // No staging directories are left behind.
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn init_rejects_bad_flags_naming_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("n");
    assert_usage_error(&init(&dir, &["--operator", "xyz"]), "--operator");
    assert_usage_error(&init(&dir, &["--operator", &"AB".repeat(32)]), "--operator");
    assert_usage_error(&init(&dir, &["--face-port", "70000"]), "--face-port");
    assert_usage_error(&init(&dir, &["--face-port", "0"]), "--face-port");
    assert_usage_error(&init(&dir, &["--relay", "https://x.example"]), "--relay");
    assert_usage_error(&init(&dir, &["--endpoint", "wss://x"]), "SCHEME=URL");
    assert_usage_error(&init(&dir, &["--class", "core"]), "class");
    assert!(!dir.exists(), "a refused init leaves nothing behind");
}

#[test]
fn init_from_a_mesh_node_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = tmp.path().join("node.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: fleetmesh.org/v1alpha1\nkind: MeshNode\nmetadata:\n  name: edge-7\nspec:\n  class: leaf\n  relays: [\"wss://r.example/\"]\n  endpoints:\n    - scheme: iroh\n      url: iroh://abc\n  facePort: 17002\n",
    )
    .unwrap();
    let dir = tmp.path().join("n");
    let o = init(&dir, &["--manifest", manifest.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let config = std::fs::read_to_string(dir.join("meshnode.toml")).unwrap();
    assert!(config.contains("class = \"leaf\""), "{config}");
    assert!(config.contains("scheme = \"iroh\""), "{config}");
    assert!(config.contains("127.0.0.1:17002"), "{config}");

    // A typo in the spec is named by its path, and nothing is created.
    let bad = tmp.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: fleetmesh.org/v1alpha1\nkind: MeshNode\nmetadata: {name: x}\nspec:\n  clas: leaf\n",
    )
    .unwrap();
    let dir2 = tmp.path().join("n2");
    let o = init(&dir2, &["--manifest", bad.to_str().unwrap()]);
    assert_usage_error(&o, "/spec");
    assert!(stderr(&o).contains("clas"), "{}", stderr(&o));
    assert!(!dir2.exists());
    // Not YAML at all.
    std::fs::write(&bad, "spec: [unclosed").unwrap();
    assert_usage_error(&init(&dir2, &["--manifest", bad.to_str().unwrap()]), "YAML");
    // Flags and a manifest do not mix.
    let o = init(
        &dir2,
        &["--manifest", manifest.to_str().unwrap(), "--class", "edge"],
    );
    assert_eq!(o.status.code(), Some(2));
}
