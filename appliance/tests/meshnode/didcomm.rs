//! DIDComm Messaging v2 against an independent implementation, both ways: `meshnode
//! didcomm pack` output opened by PyPI didcomm 0.3.2 (SICPA's, through `didcomm/peer.py`)
//! and the reverse, for anoncrypt (each content encryption), authcrypt, protected sender,
//! and signatures by both keys; a forward through a mediator; every refusal by name. The
//! peer is skipped (with a message) only where python3 cannot make its venv and `CI` is
//! not `true`.

use super::*;

/// The venv's python with the pinned didcomm, from `didcomm/peer.sh`.
pub(super) fn peer_python() -> Option<PathBuf> {
    venv_python("didcomm/peer.sh", "DIDComm interop")
}

/// The flags of one way of packing, and what the other side must report of it.
type Case<'a> = (&'a [&'a str], &'a [(&'a str, Value)]);

/// `peer.py ARGS…` with `input` on stdin.
pub(super) fn peer(py: &Path, args: &[&str], input: &[u8]) -> Output {
    let mut cmd = Command::new(py);
    cmd.arg(repo().join("appliance/tests/meshnode/didcomm/peer.py"))
        .args(args);
    with_stdin(cmd, input)
}

pub(super) fn ok_json(o: &Output, what: &str) -> Value {
    assert!(o.status.success(), "{what}: {} {}", stdout(o), stderr(o));
    serde_json::from_str(stdout(o).trim()).unwrap_or_else(|e| panic!("{what}: {e}: {}", stdout(o)))
}

/// A node directory and its DID document file.
pub(super) fn node(tmp: &Path, name: &str) -> (PathBuf, PathBuf, String) {
    let dir = tmp.join(name);
    assert!(init(&dir, &[]).status.success());
    let o = run(&["did", "show", dir.to_str().unwrap()]);
    let doc = ok_json(&o, "did show");
    let path = tmp.join(format!("{name}.json"));
    std::fs::write(&path, doc.to_string()).unwrap();
    (dir, path, doc["id"].as_str().unwrap().to_owned())
}

pub(super) fn meshnode_unpack(dir: &Path, senders: &[&Path], packed: &[u8]) -> Output {
    let mut cmd = meshnode();
    cmd.args(["didcomm", "unpack", "--key-dir", dir.to_str().unwrap()]);
    for s in senders {
        cmd.args(["--sender-doc", s.to_str().unwrap()]);
    }
    cmd.arg("-");
    with_stdin(cmd, packed)
}

#[test]
fn didcomm_interoperates_with_pypi_didcomm_both_ways_and_refuses_what_does_not_hold() {
    let Some(py) = peer_python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (a, a_doc, a_did) = node(tmp.path(), "a");
    let p = tmp.path().join("p");
    let o = peer(&py, &["init", p.to_str().unwrap()], b"");
    assert!(o.status.success(), "peer init: {}", stderr(&o));
    let p_doc = p.join("doc.json");
    let p_did =
        serde_json::from_str::<Value>(&std::fs::read_to_string(&p_doc).unwrap()).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
    let (a_doc_s, p_s) = (a_doc.to_str().unwrap(), p.to_str().unwrap());

    // meshnode → didcomm: (meshnode flags, what didcomm must report)
    let cases: &[Case<'_>] = &[
        (
            &[],
            &[
                ("authenticated", true.into()),
                ("encrypted_from", format!("{a_did}#x25519").into()),
            ],
        ),
        (
            &["--anon"],
            &[
                ("anonymous_sender", true.into()),
                ("enc_alg_anon", "A256CBC_HS512_ECDH_ES_A256KW".into()),
            ],
        ),
        (
            &["--anon", "--enc", "A256GCM"],
            &[("enc_alg_anon", "A256GCM_ECDH_ES_A256KW".into())],
        ),
        (
            &["--anon", "--enc", "XC20P"],
            &[("enc_alg_anon", "XC20P_ECDH_ES_A256KW".into())],
        ),
        (
            &["--anon", "--sign"],
            &[
                ("non_repudiation", true.into()),
                ("sign_alg", "ED25519".into()),
            ],
        ),
        (
            &["--auth", "--sign", "secp256k1"],
            &[
                ("authenticated", true.into()),
                ("sign_alg", "ES256K".into()),
                ("sign_from", format!("{a_did}#key-0").into()),
            ],
        ),
        (
            &["--protect-sender", "--enc", "XC20P"],
            &[
                ("authenticated", true.into()),
                ("anonymous_sender", true.into()),
            ],
        ),
        (
            &["--sign"],
            &[
                ("encrypted", false.into()),
                ("sign_from", format!("{a_did}#ed25519").into()),
            ],
        ),
        (
            &["--sign", "secp256k1"],
            &[("encrypted", false.into()), ("sign_alg", "ES256K".into())],
        ),
    ];
    for (i, (flags, expect)) in cases.iter().enumerate() {
        let body = format!(r#"{{"case":{i},"text":"héllo"}}"#);
        let packed = mesh_pack(&a, &p_doc, flags, &body);
        let unpack = ["unpack", "--dir", p_s, "--sender-doc", a_doc_s, "-"];
        let what = format!("didcomm unpacking meshnode's {flags:?}");
        let out = ok_json(&peer(&py, &unpack, &packed), &what);
        assert_eq!(
            out["message"]["body"],
            serde_json::from_str::<Value>(&body).unwrap()
        );
        assert_eq!(out["message"]["to"][0], p_did.as_str(), "{flags:?}");
        for (field, value) in *expect {
            assert_eq!(
                &out["metadata"][field], value,
                "{flags:?}: {field} in {out}"
            );
        }
    }

    // didcomm → meshnode: (peer.py flags, what meshnode must report)
    let p_key = |f: &str| format!("{p_did}#{f}");
    let cases: &[Case<'_>] = &[
        (
            &["--mode", "anoncrypt"],
            &[
                ("anonymous_sender", true.into()),
                ("enc_alg_anon", "XC20P".into()),
            ],
        ),
        (
            &["--mode", "anoncrypt", "--enc", "A256GCM"],
            &[("enc_alg_anon", "A256GCM".into())],
        ),
        (
            &[
                "--mode",
                "anoncrypt",
                "--enc",
                "A256CBC-HS512",
                "--sign",
                "secp256k1",
            ],
            &[
                ("enc_alg_anon", "A256CBC-HS512".into()),
                ("sign_alg", "ES256K".into()),
                ("sign_from", p_key("key-0").into()),
            ],
        ),
        (
            &["--mode", "authcrypt"],
            &[
                ("authenticated", true.into()),
                ("encrypted_from", p_key("x25519").into()),
                ("enc_alg_auth", "A256CBC-HS512".into()),
            ],
        ),
        (
            &["--mode", "authcrypt", "--protect-sender"],
            &[
                ("protected_sender", true.into()),
                ("authenticated", true.into()),
            ],
        ),
        (
            &["--mode", "authcrypt", "--sign", "ed25519"],
            &[
                ("non_repudiation", true.into()),
                ("sign_alg", "EdDSA".into()),
            ],
        ),
        (
            &["--mode", "signed"],
            &[
                ("encrypted", false.into()),
                ("sign_from", p_key("ed25519").into()),
            ],
        ),
        (
            &["--mode", "signed", "--sign", "secp256k1"],
            &[
                ("non_repudiation", true.into()),
                ("sign_alg", "ES256K".into()),
            ],
        ),
    ];
    for (i, (flags, expect)) in cases.iter().enumerate() {
        let body = format!(r#"{{"case":{i}}}"#);
        let mut args = vec!["pack", "--dir", p_s, "--to-doc", a_doc_s, "--body", &body];
        args.extend_from_slice(flags);
        let packed = peer(&py, &args, b"");
        assert!(
            packed.status.success(),
            "peer pack {flags:?}: {}",
            stderr(&packed)
        );
        let out = ok_json(
            &meshnode_unpack(&a, &[&p_doc], &packed.stdout),
            &format!("meshnode unpacking didcomm's {flags:?}"),
        );
        assert_eq!(out["message"]["body"]["case"], i, "{flags:?}");
        assert_eq!(out["message"]["from"], p_did.as_str(), "{flags:?}");
        for (field, value) in *expect {
            assert_eq!(&out["meta"][field], value, "{flags:?}: {field} in {out}");
        }
    }

    // refusals, each by name, exit 2
    let p_pack = |flags: &[&str], body: &str| {
        let mut args = vec!["pack", "--dir", p_s, "--to-doc", a_doc_s, "--body", body];
        args.extend_from_slice(flags);
        peer(&py, &args, b"")
    };
    let authcrypt = p_pack(&["--mode", "authcrypt"], "{}");
    assert!(authcrypt.status.success());
    let jwe: Value = serde_json::from_slice(&authcrypt.stdout).unwrap();
    let refused = |packed: &[u8], senders: &[&Path], why: &str| {
        let o = meshnode_unpack(&a, senders, packed);
        assert_usage_error(&o, why);
    };
    // no sender document: the skid cannot be resolved
    refused(&authcrypt.stdout, &[], "unknown kid");
    // a flipped ciphertext byte
    let tampered = flip_first(&jwe, "ciphertext");
    refused(
        tampered.to_string().as_bytes(),
        &[&p_doc],
        "does not decrypt",
    );
    // a recipient list that is not the one the key derivation saw
    let mut other = jwe.clone();
    other["recipients"][0]["header"]["kid"] = format!("{a_did}#other").into();
    refused(
        other.to_string().as_bytes(),
        &[&p_doc],
        "apv does not match",
    );
    // a message for someone else
    let (_, b_doc, _) = node(tmp.path(), "b");
    let for_b = mesh_pack(&a, &b_doc, &["--anon"], "{}");
    refused(&for_b, &[], "no recipient key id is ours");
    // from that is not the authenticated sender
    let no_from = p_pack(&["--mode", "authcrypt", "--no-from"], "{}");
    assert!(no_from.status.success(), "{}", stderr(&no_from));
    refused(&no_from.stdout, &[&p_doc], "but from nobody");
    // expired
    let expired = mesh_pack(&a, &a_doc, &["--expires-in", "0"], "{}");
    refused(&expired, &[&a_doc], "expired");
    // not JSON, and a JWS whose payload is not what was signed
    refused(b"{not json", &[], "not JSON");
    let signed = p_pack(&["--mode", "signed"], r#"{"n":1}"#);
    let mut jws: Value = serde_json::from_slice(&signed.stdout).unwrap();
    let payload = serde_json::json!({"id": "x", "type": "t", "from": p_did, "body": {"n": 2}});
    jws["payload"] = base64_url(payload.to_string().as_bytes()).into();
    refused(jws.to_string().as_bytes(), &[&p_doc], "does not verify");
    // and didcomm refuses meshnode's message with a flipped tag
    let packed: Value = serde_json::from_slice(&mesh_pack(&a, &p_doc, &[], "{}")).unwrap();
    let tampered = flip_first(&packed, "tag");
    let unpack = ["unpack", "--dir", p_s, "--sender-doc", a_doc_s, "-"];
    let o = peer(&py, &unpack, tampered.to_string().as_bytes());
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
}

/// `meshnode didcomm pack --to DOC --key-dir DIR FLAGS… --body BODY`, its output.
pub(super) fn mesh_pack(dir: &Path, to: &Path, flags: &[&str], body: &str) -> Vec<u8> {
    let (dir, to) = (dir.to_str().unwrap(), to.to_str().unwrap());
    let mut args = vec![
        "didcomm",
        "pack",
        "--to",
        to,
        "--key-dir",
        dir,
        "--body",
        body,
    ];
    args.extend_from_slice(flags);
    let o = run(&args);
    assert!(o.status.success(), "pack {flags:?}: {}", stderr(&o));
    o.stdout
}

/// `v` with the first base64url character of `field` changed.
fn flip_first(v: &Value, field: &str) -> Value {
    let mut v = v.clone();
    let text = v[field].as_str().unwrap();
    let flip = if text.starts_with('A') { "B" } else { "A" };
    v[field] = format!("{flip}{}", &text[1..]).into();
    v
}

fn base64_url(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The recipient's DID document with a DIDCommMessaging service routed through
/// `mediator`'s key agreement key.
pub(super) fn routed_through(doc: &Path, mediator_did: &str, out: &Path) {
    let mut d: Value = serde_json::from_str(&std::fs::read_to_string(doc).unwrap()).unwrap();
    let did = d["id"].as_str().unwrap().to_owned();
    d["service"] = serde_json::json!([{
        "id": format!("{did}#didcomm"),
        "type": "DIDCommMessaging",
        "serviceEndpoint": {
            "uri": "https://mediator.example.org/didcomm",
            "accept": ["didcomm/v2"],
            "routingKeys": [format!("{mediator_did}#x25519")],
        },
    }]);
    std::fs::write(out, d.to_string()).unwrap();
}

/// A node with `endpoint` in its descriptor and `edits` made to its config, running
/// on a port chosen before `init` (the endpoint names it): its directory, the daemon, the
/// port.
pub(super) fn didcomm_node(
    endpoint: impl Fn(u16) -> String,
    edits: &[(&str, &str)],
) -> (tempfile::TempDir, Daemon, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let endpoint = endpoint(port);
    let o = init(dir.path(), &["--endpoint", &endpoint]);
    assert!(o.status.success(), "{}", stderr(&o));
    edit_config(dir.path(), edits);
    let listen = format!("127.0.0.1:{port}");
    let mut cmd = meshnode();
    cmd.args(["run", dir.path().to_str().unwrap(), "--listen", &listen]);
    (dir, Daemon::start(cmd), port)
}

pub(super) fn did_of_node(dir: &Path) -> String {
    fleetmesh_proto::NodeKeys::load(&dir.join("keys"))
        .unwrap()
        .did()
}

#[test]
fn a_buyer_who_knows_only_the_did_gets_a_job_run_by_didcomm_directly_and_through_a_mediator() {
    let work = tempfile::tempdir().unwrap();
    let file = upper_job(work.path(), "by didcomm", "didcomm-1");
    let buyer = tempfile::tempdir().unwrap();
    assert!(init(buyer.path(), &[]).status.success());
    // without --via: auto, which takes DIDComm when the DID document names an endpoint
    let submit = |did: &str, relays: &[&str], out: &Path, extra: &[&str]| {
        let mut args = vec![
            "job",
            "submit",
            file.to_str().unwrap(),
            "--to",
            did,
            "--key-dir",
            buyer.path().to_str().unwrap(),
            "--wait-secs",
            "60",
            "--out",
            out.to_str().unwrap(),
        ];
        for r in relays {
            args.extend(["--relay", r]);
        }
        args.extend_from_slice(extra);
        run(&args)
    };

    // directly: the provider's descriptor names its /didcomm
    let (p_dir, p, _) = didcomm_node(
        |port| format!("didcomm=http://127.0.0.1:{port}/didcomm"),
        &[],
    );
    let p_did = did_of_node(p_dir.path());
    let p_relay = format!("ws://{}/", p.addr);
    let out = work.path().join("direct");
    let o = submit(&p_did, &[&p_relay], &out, &[]);
    assert!(o.status.success(), "{} {}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("by DIDComm to"), "{}", stderr(&o));
    let answer: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(answer["job"]["state"], "verified", "{answer}");
    assert_eq!(
        answer["receipt"]["pubkey"],
        p_did.strip_prefix("did:nostr:").unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(out.join("stdout")).unwrap(),
        "BY DIDCOMM"
    );
    let counted = |d: &Daemon, outcome: &str| {
        d.scrape()
            .value("fleetmesh_didcomm_total", &[("outcome", outcome)])
            .unwrap_or(0.0)
    };
    assert_eq!(counted(&p, "accepted"), 1.0);
    assert!(counted(&p, "answered") >= 1.0);

    // through a mediator: the provider is reached only by way of m, and picks its
    // messages up there; its descriptor (on m's relay) names m
    let (m_dir, m, _) = didcomm_node(
        |port| format!("didcomm=http://127.0.0.1:{port}/didcomm"),
        &[("mediate = false", "mediate = true")],
    );
    let m_did = did_of_node(m_dir.path());
    let m_relay = format!("ws://{}/", m.addr);
    let config = format!(
        "mediator = \"{m_did}\"\nmediator_url = \"http://{}/\"\npickup_secs = 1",
        m.addr
    );
    let edits = [("pickup_secs = 2", config.as_str())];
    let (q_dir, q, _) = didcomm_node(|_| format!("didcomm={m_did}"), &edits);
    let q_did = did_of_node(q_dir.path());
    let q_key = q_did.strip_prefix("did:nostr:").unwrap().to_owned();
    runtime().block_on(async {
        let filter = serde_json::json!({"kinds": [11801], "authors": [q_key]});
        let found = req_events(&format!("ws://{}/", q.addr), filter).await;
        let descriptor = fleetmesh_proto::Event::from_value(&found[0]).unwrap();
        publish_all(&m_relay, &[descriptor]).await;
    });
    let out = work.path().join("mediated");
    let o = submit(&q_did, &[&m_relay], &out, &["--via", "didcomm"]);
    mediated_answer(&o, &m_did, &out, "BY DIDCOMM");
    assert_eq!(counted(&q, "accepted"), 1.0);
    assert!(counted(&m, "held") >= 2.0 && counted(&m, "delivered") >= 2.0);

    // the mediator checks the signed path of what it holds: a replayed envelope, a hop
    // re-signed by another key, a path that ends elsewhere are refused by name
    use fleetmesh_proto::didcomm::{PeerDoc, forward};
    use fleetmesh_proto::hop::Envelope;
    let sender = fleetmesh_proto::NodeKeys::generate().unwrap();
    let m_doc: Value = reqwest::blocking::get(m.url("/.well-known/did.json"))
        .unwrap()
        .json()
        .unwrap();
    let m_doc = PeerDoc::parse(&m_doc).unwrap();
    let m_key = m_did.strip_prefix("did:nostr:").unwrap();
    let routing = format!("{m_did}#x25519");
    let now = unix_now();
    // a forward to q through m, carrying `item`: m's answer
    let via_m = |item: Value| {
        let fwd = forward(&item, &q_did, &m_doc, &routing).unwrap();
        let r = reqwest::blocking::Client::new()
            .post(m.url("/didcomm"))
            .header("content-type", "application/didcomm-encrypted+json")
            .body(fwd.to_string())
            .send()
            .unwrap();
        (r.status().as_u16(), r.text().unwrap())
    };
    let via_m_env = |env: &Envelope| via_m(serde_json::to_value(env).unwrap());
    // what the mediator holds is encrypted to its next hop
    let q_doc: Value = reqwest::blocking::get(q.url("/.well-known/did.json"))
        .unwrap()
        .json()
        .unwrap();
    let mut note = fleetmesh_proto::didcomm::Message::new(
        "https://didcomm.org/basicmessage/2.0/message",
        serde_json::json!({"content": "hello"}),
    )
    .unwrap();
    note.to = vec![q_did.clone()];
    let anon = fleetmesh_proto::didcomm::Pack {
        auth: false,
        ..Default::default()
    };
    let for_q = fleetmesh_proto::didcomm::pack_encrypted(
        &note,
        &sender,
        &PeerDoc::parse(&q_doc).unwrap(),
        anon,
    )
    .unwrap()
    .to_string();
    let env = Envelope::new(sender.nostr(), m_key, for_q.as_bytes(), now).unwrap();
    assert_eq!(via_m_env(&env).0, 202);
    // a plaintext in the envelope is not held
    let plain = Envelope::new(
        sender.nostr(),
        m_key,
        note.to_json().to_string().as_bytes(),
        now,
    )
    .unwrap();
    let (code, body) = via_m_env(&plain);
    assert_eq!(
        (code, body.contains("not_encrypted")),
        (400, true),
        "{body}"
    );
    let (code, body) = via_m_env(&env);
    assert_eq!((code, body.contains("replayed")), (400, true), "{body}");
    let mut resigned = Envelope::new(sender.nostr(), m_key, b"{}", now).unwrap();
    resigned.hops[0].from = fleetmesh_proto::NodeKeys::generate()
        .unwrap()
        .nostr_pubkey_hex();
    let (code, body) = via_m_env(&resigned);
    assert_eq!(
        (code, body.contains("not signed by its sender")),
        (400, true),
        "{body}"
    );
    // a message too big to hold
    let (code, body) = via_m(serde_json::json!({"x": "a".repeat(2_600_000)}));
    assert_eq!((code, body.contains("too_big")), (413, true), "{body}");
    let elsewhere = Envelope::new(sender.nostr(), &sender.nostr_pubkey_hex(), b"{}", now).unwrap();
    let (code, body) = via_m_env(&elsewhere);
    assert_eq!(
        (code, body.contains("not at this node")),
        (400, true),
        "{body}"
    );

    // refusals: a node that does not mediate takes no forward; POSTs that are not DIDComm
    let packed = mesh_pack(
        buyer.path(),
        &write_doc(work.path(), &p),
        &["--sign", "secp256k1", "--anon"],
        "{}",
    );
    let http = reqwest::blocking::Client::new();
    let post = |d: &Daemon, ct: &str, body: Vec<u8>, origin: bool| {
        let mut r = http
            .post(d.url("/didcomm"))
            .header("content-type", ct)
            .body(body);
        if origin {
            r = r.header("origin", "https://evil.example");
        }
        let r = r.send().unwrap();
        (r.status().as_u16(), r.text().unwrap())
    };
    let enc = "application/didcomm-encrypted+json";
    let (code, body) = post(&p, enc, packed.clone(), false);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("no_descriptor"), "{body}");
    let p_doc = write_doc(work.path(), &p);
    let unsigned = mesh_pack(buyer.path(), &p_doc, &["--anon"], "{}");
    let (code, body) = post(&p, enc, unsigned, false);
    assert_eq!((code, body.contains("unsigned")), (403, true), "{body}");
    // a forward for another DID, to a node that does not mediate
    let routed = work.path().join("routed.json");
    routed_through(&write_doc(work.path(), &q), &p_did, &routed);
    let flags = ["--mediator-doc", p_doc.to_str().unwrap()];
    let forward = mesh_pack(buyer.path(), &routed, &flags, "{}");
    let (code, body) = post(&p, enc, forward, false);
    assert_eq!(
        (code, body.contains("not_a_mediator")),
        (403, true),
        "{body}"
    );
    assert_eq!(post(&p, "application/json", packed.clone(), false).0, 415);
    assert_eq!(post(&p, enc, packed, true).0, 403);
    let (code, body) = post(&p, enc, b"{\"ciphertext\":1}".to_vec(), false);
    assert_eq!((code, body.contains("unopened")), (400, true), "{body}");
    let (code, _) = post(&p, enc, vec![b' '; 5 << 20], false);
    assert_eq!(code, 413);
    assert!(counted(&p, "unopened") >= 1.0);

    // a node that takes jobs by HTTP with its token only refuses them by DIDComm
    let (c_dir, c, _) = didcomm_node(
        |port| format!("didcomm=http://127.0.0.1:{port}/didcomm"),
        &[("jobs_by_key = true", "jobs_by_key = false")],
    );
    let c_did = did_of_node(c_dir.path());
    let o = submit(
        &c_did,
        &[&format!("ws://{}/", c.addr)],
        &work.path().join("closed"),
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let refusal: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(refusal["error"]["code"], "by_key_off", "{refusal}");

    // a buyer whose key revoked itself (as p's relay knows) is refused
    let buyer_keys = fleetmesh_proto::NodeKeys::load(&buyer.path().join("keys")).unwrap();
    let revocation = self_revocation(&buyer_keys, now - 5, now - 10, None);
    runtime().block_on(publish_all(&p_relay, &[revocation]));
    let o = submit(&p_did, &[&p_relay], &work.path().join("revoked"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stderr(&o).contains("revoked"), "{}", stderr(&o));
}

/// `d`'s DID document (`/.well-known/did.json`) in a file.
pub(super) fn write_doc(dir: &Path, d: &Daemon) -> PathBuf {
    let doc = reqwest::blocking::get(d.url("/.well-known/did.json"))
        .unwrap()
        .text()
        .unwrap();
    let path = dir.join(format!("{}.json", d.addr.replace([':', '.'], "-")));
    std::fs::write(&path, doc).unwrap();
    path
}

#[test]
fn a_node_nobody_can_dial_is_mediated_by_a_backbone_over_its_outbound_quic_link() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let work = tempfile::tempdir().unwrap();
    let file = upper_job(work.path(), "behind the backbone", "linked-mediated-1");
    let free = |udp: bool| {
        if udp {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.local_addr().unwrap().port()
        } else {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        }
    };
    // m: mediates, answers DIDComm at a URL, peers over QUIC and gossips on loopback
    let m_peering = format!(
        "[peering]\ninterval_secs = 1\nquic_listen = \"127.0.0.1:{}\"\n\
         gossip_listen = \"/ip4/127.0.0.1/tcp/{}\"\n",
        free(true),
        free(false)
    );
    let (m_dir, m, _) = didcomm_node(
        |port| format!("didcomm=http://127.0.0.1:{port}/didcomm"),
        &[
            ("mediate = false", "mediate = true"),
            ("[peering]\ninterval_secs = 30\n", m_peering.as_str()),
        ],
    );
    let m_did = did_of_node(m_dir.path());
    let m_relay = format!("ws://{}/", m.addr);
    let m_doc: Value = reqwest::blocking::get(m.url("/.well-known/did.json"))
        .unwrap()
        .json()
        .unwrap();
    let gossip = m_doc["service"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["type"] == "libp2p")
        .and_then(|s| s["serviceEndpoint"].as_str())
        .unwrap_or_else(|| panic!("m advertises no gossip address: {m_doc}"))
        .to_owned();
    // l: a leaf (it answers no connections, advertises no address) naming m as its
    // mediator without a URL: it finds m by gossip, dials it, and picks up over that link
    let l_peering = format!(
        "[peering]\ninterval_secs = 1\nquic_listen = \"127.0.0.1:0\"\n\
         gossip_listen = \"/ip4/127.0.0.1/tcp/0\"\nbootstrap = [\"{gossip}\"]\n"
    );
    let l_didcomm = format!("mediator = \"{m_did}\"\npickup_secs = 1");
    let (l_dir, _l, _) = didcomm_node(
        |_| format!("didcomm={m_did}"),
        &[
            ("class = \"edge\"", "class = \"leaf\""),
            ("pickup_secs = 2", l_didcomm.as_str()),
            (
                "[peering]\ninterval_secs = 30\nbootstrap = []\n",
                l_peering.as_str(),
            ),
        ],
    );
    let l_did = did_of_node(l_dir.path());
    let l_key = l_did.strip_prefix("did:nostr:").unwrap().to_owned();
    // its descriptor reaches m's relay over the link, for buyers to resolve there
    super::peering::wait_until("m holds l's descriptor", || {
        let filter = serde_json::json!({"kinds": [11801], "authors": [l_key]});
        !runtime().block_on(req_events(&m_relay, filter)).is_empty()
    });
    let buyer = tempfile::tempdir().unwrap();
    assert!(init(buyer.path(), &[]).status.success());
    let out = work.path().join("out");
    let o = run(&[
        "job",
        "submit",
        file.to_str().unwrap(),
        "--to",
        &l_did,
        "--key-dir",
        buyer.path().to_str().unwrap(),
        "--via",
        "didcomm",
        "--relay",
        &m_relay,
        "--wait-secs",
        "60",
        "--out",
        out.to_str().unwrap(),
    ]);
    let answer = mediated_answer(&o, &m_did, &out, "BEHIND THE BACKBONE");
    assert_eq!(answer["receipt"]["pubkey"], l_key.as_str());
}

/// The answer `job submit` printed (`o`) for a job through the mediator `m_did`: verified,
/// its result's stdout in `out` `expected`.
fn mediated_answer(o: &Output, m_did: &str, out: &Path, expected: &str) -> Value {
    assert!(o.status.success(), "{} {}", stdout(o), stderr(o));
    assert!(
        stderr(o).contains(&format!("mediator {m_did}")),
        "{}",
        stderr(o)
    );
    let answer: Value = serde_json::from_str(stdout(o).trim()).unwrap();
    assert_eq!(answer["job"]["state"], "verified", "{answer}");
    assert_eq!(
        std::fs::read_to_string(out.join("stdout")).unwrap(),
        expected
    );
    answer
}
