//! A mediator (`[didcomm] mediate = true`): a forward opens at the mediator and then at its
//! recipient; against strangers, it holds only messages encrypted to their next hop, and one
//! source's flood neither evicts what others are owed nor blocks them (per-source quotas),
//! checked by picking everything up as the owner does.

use super::didcomm::{
    did_of_node, didcomm_node, mesh_pack, meshnode_unpack, node, ok_json, peer, peer_python,
    routed_through, write_doc,
};
use super::*;

#[test]
fn a_forward_through_a_mediator_opens_at_the_mediator_and_then_at_the_recipient() {
    let Some(py) = peer_python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (a, a_doc, a_did) = node(tmp.path(), "a");
    let (m, m_doc, m_did) = node(tmp.path(), "m");
    let p = tmp.path().join("p");
    assert!(
        peer(&py, &["init", p.to_str().unwrap()], b"")
            .status
            .success()
    );
    let p_doc = p.join("doc.json");

    // didcomm → mediator (meshnode) → a (meshnode)
    let a_routed = tmp.path().join("a-routed.json");
    routed_through(&a_doc, &m_did, &a_routed);
    let (p_s, m_doc_s) = (p.to_str().unwrap(), m_doc.to_str().unwrap());
    let args = [
        "pack",
        "--dir",
        p_s,
        "--to-doc",
        a_routed.to_str().unwrap(),
        "--mode",
        "authcrypt",
        "--forward",
        "--doc",
        m_doc_s,
        "--body",
        r#"{"via":"mediator"}"#,
    ];
    let packed = peer(&py, &args, b"");
    assert!(packed.status.success(), "{}", stderr(&packed));
    // a cannot open the outer layer; the mediator can, and finds a forward to a
    let o = meshnode_unpack(&a, &[&p_doc], &packed.stdout);
    assert_usage_error(&o, "no recipient key id is ours");
    let fwd = ok_json(
        &meshnode_unpack(&m, &[], &packed.stdout),
        "the mediator unpacking",
    );
    assert_eq!(
        fwd["message"]["type"],
        "https://didcomm.org/routing/2.0/forward"
    );
    assert_eq!(fwd["message"]["body"]["next"], a_did.as_str());
    assert_eq!(fwd["meta"]["anonymous_sender"], true);
    let inner = fwd["message"]["attachments"][0]["data"]["json"].to_string();
    let out = ok_json(
        &meshnode_unpack(&a, &[&p_doc], inner.as_bytes()),
        "a unpacking",
    );
    assert_eq!(out["message"]["body"]["via"], "mediator");
    assert_eq!(out["meta"]["authenticated"], true);

    // meshnode → mediator (meshnode) → p (didcomm)
    let p_routed = tmp.path().join("p-routed.json");
    routed_through(&p_doc, &m_did, &p_routed);
    let flags = ["--mediator-doc", m_doc_s];
    let packed = mesh_pack(&a, &p_routed, &flags, r#"{"back":true}"#);
    let fwd = ok_json(&meshnode_unpack(&m, &[], &packed), "the mediator unpacking");
    let inner = fwd["message"]["attachments"][0]["data"]["json"].to_string();
    let unpack = [
        "unpack",
        "--dir",
        p_s,
        "--sender-doc",
        a_doc.to_str().unwrap(),
        "-",
    ];
    let out = ok_json(&peer(&py, &unpack, inner.as_bytes()), "didcomm unpacking");
    assert_eq!(out["message"]["body"]["back"], true);
    // without the mediator's document the route cannot be built
    let (a_s, to) = (a.to_str().unwrap(), p_routed.to_str().unwrap());
    let o = run(&[
        "didcomm",
        "pack",
        "--to",
        to,
        "--key-dir",
        a_s,
        "--body",
        "{}",
    ]);
    assert_usage_error(&o, "give its --mediator-doc");
}

/// An HTTP client whose connections come from the local address `ip` (any 127.0.0.0/8
/// address is this host's on Linux): a source of its own to a node.
fn client_at(ip: &str) -> reqwest::blocking::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::blocking::Client::builder()
        .local_address(ip.parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap()
}

/// `POST /didcomm` of `body` to `d` by `client`: the status, `Retry-After` if any, and
/// the body.
fn post_by(
    client: &reqwest::blocking::Client,
    d: &Daemon,
    body: &[u8],
) -> (u16, Option<u64>, String) {
    let r = client
        .post(d.url("/didcomm"))
        .header("content-type", "application/didcomm-encrypted+json")
        .body(body.to_vec())
        .send()
        .unwrap();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    (r.status().as_u16(), retry, r.text().unwrap())
}

/// Every message the mediator `m` (its document `m_doc`) holds for the node of `dir`,
/// picked up as its owner does (Message Pickup 3.0: delivery requests signed by its key,
/// carrying its descriptor, each delivery acknowledged) until it says none are left.
fn pick_up_all(m: &Daemon, m_doc: &fleetmesh_proto::didcomm::PeerDoc, dir: &Path) -> Vec<Value> {
    use fleetmesh_proto::didcomm::{self, Message, Pack, SignWith};
    let keys = fleetmesh_proto::NodeKeys::load(&dir.join("keys")).unwrap();
    let descriptor: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("descriptor.json")).unwrap())
            .unwrap();
    let client = client_at("127.0.0.1");
    let ask = |type_: &str, body: Value| {
        let mut msg = Message::new(type_, body).unwrap();
        msg.from = Some(keys.did());
        msg.to = vec![m_doc.did.clone()];
        msg.extra.insert("return_route".into(), "all".into());
        msg.attachments = vec![serde_json::json!({
            "id": "descriptor",
            "media_type": "application/nostr+json",
            "data": {"json": descriptor},
        })];
        let how = Pack {
            auth: false,
            sign: Some(SignWith::Secp256k1),
            ..Pack::default()
        };
        let packed = didcomm::pack_encrypted(&msg, &keys, m_doc, how).unwrap();
        let (code, _, text) = post_by(&client, m, packed.to_string().as_bytes());
        assert_eq!(code, 200, "{text}");
        let docs = vec![m_doc.clone()];
        didcomm::unpack(text.as_bytes(), &keys, &docs, unix_now())
            .unwrap()
            .message
    };
    let mut got = Vec::new();
    loop {
        let body = serde_json::json!({"limit": 32, "recipient_did": keys.did()});
        let reply = ask(
            "https://didcomm.org/messagepickup/3.0/delivery-request",
            body,
        );
        if reply.type_ == "https://didcomm.org/messagepickup/3.0/status" {
            assert_eq!(reply.body["message_count"], 0, "{:?}", reply.body);
            return got;
        }
        assert_eq!(
            reply.type_,
            "https://didcomm.org/messagepickup/3.0/delivery"
        );
        let mut ids = Vec::new();
        for a in &reply.attachments {
            ids.push(a["id"].clone());
            got.push(a["data"]["json"].clone());
        }
        assert!(!ids.is_empty());
        ask(
            "https://didcomm.org/messagepickup/3.0/messages-received",
            serde_json::json!({ "message_id_list": ids }),
        );
    }
}

#[test]
fn a_mediator_holds_only_encrypted_messages_and_one_sources_flood_neither_evicts_nor_blocks() {
    use fleetmesh_proto::didcomm::{self, FORWARD, Message, Pack, PeerDoc, forward};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tmp = tempfile::tempdir().unwrap();
    let (m_dir, m, _) = didcomm_node(
        |port| format!("didcomm=http://127.0.0.1:{port}/didcomm"),
        &[("mediate = false", "mediate = true")],
    );
    let m_did = did_of_node(m_dir.path());
    let m_doc: Value = reqwest::blocking::get(m.url("/.well-known/did.json"))
        .unwrap()
        .json()
        .unwrap();
    let m_doc = PeerDoc::parse(&m_doc).unwrap();
    let routing = format!("{m_did}#x25519");
    // the victim: a DID that picks its messages up from m
    let (v_dir, v_doc_file, v_did) = node(tmp.path(), "victim");
    let v_doc = PeerDoc::parse(
        &serde_json::from_str(&std::fs::read_to_string(&v_doc_file).unwrap()).unwrap(),
    )
    .unwrap();
    // a message of `n` bytes of text anoncrypted to `to`, by anyone
    let stranger = fleetmesh_proto::NodeKeys::generate().unwrap();
    let sealed = |to: &PeerDoc, n: usize| {
        let mut msg = Message::new(
            "https://didcomm.org/basicmessage/2.0/message",
            serde_json::json!({ "content": "x".repeat(n) }),
        )
        .unwrap();
        msg.to = vec![to.did.clone()];
        let anon = Pack {
            auth: false,
            ..Pack::default()
        };
        didcomm::pack_encrypted(&msg, &stranger, to, anon).unwrap()
    };
    let to_victim = |item: &Value| {
        forward(item, &v_did, &m_doc, &routing)
            .unwrap()
            .to_string()
            .into_bytes()
    };

    let post_from = |ip: &str, body: &[u8]| post_by(&client_at(ip), &m, body);
    // the victim's real message, held
    let first = sealed(&v_doc, 100);
    let (code, _, text) = post_from("127.0.0.5", &to_victim(&first));
    assert_eq!(code, 202, "{text}");
    let mut held = vec![first.clone()];

    // one source floods the victim's DID with small messages: it gets its quota, then
    // 429 with Retry-After; the victim's message is not pushed out
    let small = sealed(&v_doc, 10);
    let (flooder, mut refused) = (client_at("127.0.0.1"), 0);
    for _ in 0..260 {
        match post_by(&flooder, &m, &to_victim(&small)) {
            (202, _, _) => held.push(small.clone()),
            (429, Some(retry), text) => {
                assert!(text.contains("\"source_quota\""), "{text}");
                assert!((1..=86_400).contains(&retry), "{retry}");
                refused += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        held.len() - 1,
        64,
        "[didcomm] source_messages = 64 by default"
    );
    assert_eq!(refused, 260 - 64);

    // another floods it with messages near the 2 MiB a held message may be: refused once
    // it has its 8 MiB waiting, long before the node's 64 MiB are full
    let big = sealed(&v_doc, 1_400_000);
    let big_len = big.to_string().len();
    assert!((1_800_000..2 << 20).contains(&big_len), "{big_len}");
    let (flooder, mut accepted) = (client_at("127.0.0.3"), 0);
    let refusal = loop {
        let (code, retry, text) = post_by(&flooder, &m, &to_victim(&big));
        if code != 202 || accepted == 40 {
            break (code, retry, text);
        }
        accepted += 1;
        held.push(big.clone());
    };
    assert_eq!(accepted, (8 << 20) / big_len, "{refusal:?}");
    assert_eq!(refusal.0, 429, "{refusal:?}");
    assert!(refusal.1.is_some() && refusal.2.contains("\"source_quota\""));

    // a legitimate sender elsewhere is still held, a large message included
    let (code, _, text) = post_from("127.0.0.2", &to_victim(&big));
    assert_eq!(code, 202, "{text}");
    held.push(big.clone());
    let legit = sealed(&v_doc, 50);
    let (code, _, text) = post_from("127.0.0.2", &to_victim(&legit));
    assert_eq!(code, 202, "{text}");
    held.push(legit.clone());
    // and one packed by PyPI didcomm (authcrypt in a forward for m), where it runs
    if let Some(py) = peer_python() {
        let p = tmp.path().join("p");
        assert!(
            peer(&py, &["init", p.to_str().unwrap()], b"")
                .status
                .success()
        );
        let v_routed = tmp.path().join("victim-routed.json");
        routed_through(&v_doc_file, &m_did, &v_routed);
        let m_doc_file = write_doc(tmp.path(), &m);
        let args = [
            "pack",
            "--dir",
            p.to_str().unwrap(),
            "--to-doc",
            v_routed.to_str().unwrap(),
            "--mode",
            "authcrypt",
            "--forward",
            "--doc",
            m_doc_file.to_str().unwrap(),
            "--body",
            r#"{"from":"pypi"}"#,
        ];
        let packed = peer(&py, &args, b"");
        assert!(packed.status.success(), "{}", stderr(&packed));
        let (code, _, text) = post_from("127.0.0.6", &packed.stdout);
        assert_eq!(code, 202, "{text}");
        let fwd = ok_json(
            &meshnode_unpack(m_dir.path(), &[], &packed.stdout),
            "m unpacking",
        );
        held.push(fwd["message"]["attachments"][0]["data"]["json"].clone());
    }

    // what holding needs: a JWE to the next hop's key agreement key; plaintext is refused
    let refused_as = |body: &[u8], code: &str| {
        let (status, _, text) = post_from("127.0.0.4", body);
        assert_eq!(status, 400, "{text}");
        assert!(text.contains(&format!("\"{code}\"")), "{text}");
    };
    let mut plain = Message::new(
        "https://didcomm.org/basicmessage/2.0/message",
        serde_json::json!({"content": "hi"}),
    )
    .unwrap();
    plain.to = vec![v_did.clone()];
    refused_as(&to_victim(&plain.to_json()), "not_encrypted");
    // a plaintext, unsigned forward
    let mut bare = Message::new(FORWARD, serde_json::json!({ "next": v_did })).unwrap();
    bare.attachments = vec![serde_json::json!({"data": {"json": first}})];
    refused_as(bare.to_json().to_string().as_bytes(), "not_encrypted");
    // a JWE for someone else, sent on to the victim
    refused_as(&to_victim(&sealed(&m_doc, 10)), "not_for_next_hop");

    // the victim picks up everything that was held, in order: its first message first
    let got = pick_up_all(&m, &m_doc, &v_dir);
    assert_eq!(got.len(), held.len());
    assert_eq!(got[0], first);
    assert_eq!(got, held);
}
