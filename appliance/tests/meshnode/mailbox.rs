//! compute/1.0 through a relay: a buyer who knows only the provider's `did:nostr` submits a
//! job gift-wrapped (NIP-59) to the provider's relay, and gets the job's final status, its
//! result and its receipt back the same way; the node's mailbox runs it through the same
//! job service as HTTP jobs. Wraps it cannot open or that are not for it run nothing.

use super::*;
use fleetmesh_proto::NodeKeys;

#[test]
fn a_job_gift_wrapped_through_the_relay_runs_and_its_answer_comes_back_wrapped() {
    // the job is read as the operator below: no proxy in front
    let (node_dir, d) = super::inference::serve_edited(&[], "", &[NO_PROXY]);
    let provider = NodeKeys::load(&node_dir.path().join("keys")).unwrap();
    let did = provider.did();
    let relay = format!("ws://{}/", d.addr);
    let buyer = tempfile::tempdir().unwrap();
    assert!(init(buyer.path(), &[]).status.success());
    let work = tempfile::tempdir().unwrap();
    let file = upper_job(work.path(), "by gift wrap", "wrapped-1");
    let out = work.path().join("out");
    let submit = |to: &str, extra: &[&str]| -> Output {
        let mut args = vec![
            "job",
            "submit",
            file.to_str().unwrap(),
            "--to",
            to,
            "--key-dir",
            buyer.path().to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    let o = submit(
        &did,
        &[
            "--via",
            "giftwrap",
            "--relay",
            &relay,
            "--wait-secs",
            "60",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{} {}", stdout(&o), stderr(&o));
    let answer: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(answer["job"]["state"], "verified", "{answer}");
    assert_eq!(answer["receipt"]["pubkey"], provider.nostr_pubkey_hex());
    assert_eq!(answer["receipt"]["kind"], 30811);
    assert_eq!(
        std::fs::read_to_string(out.join("stdout")).unwrap(),
        "BY GIFT WRAP"
    );
    // the receipt verifies with the nostr crate too, and the job is the node's like any
    let receipt = nostr::Event::from_json(answer["receipt"].to_string()).unwrap();
    receipt.verify().unwrap();
    let id = answer["job"]["id"].as_str().unwrap().to_owned();
    runtime().block_on(async {
        let v = get_json(&http_client(), d.url(&format!("/v1/jobs/{id}"))).await;
        assert_eq!(v["state"], "verified", "{v}");
    });
    // the same file again is the same job, answered again; without --via (auto) by gift
    // wrap, as the provider's DID document names no DIDComm endpoint
    let o = submit(&did, &["--relay", &relay, "--wait-secs", "60"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("names no DIDComm endpoint: by gift wrap"),
        "{}",
        stderr(&o)
    );
    let again: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(again["job"]["id"], id.as_str());

    // a job for a key no node here holds: no answer, said so
    let nobody = NodeKeys::generate().unwrap().nostr_pubkey_hex();
    let o = submit(
        &nobody,
        &["--via", "giftwrap", "--relay", &relay, "--wait-secs", "2"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no answer for job"), "{}", stderr(&o));
    // a wrap for the node that is not a compute message, and one that does not open
    let stranger = NodeKeys::generate().unwrap();
    let chat = fleetmesh_proto::nip59::wrap(
        stranger.nostr(),
        &provider.nostr_pubkey_hex(),
        fleetmesh_proto::UnsignedEvent {
            created_at: 1_767_225_600,
            kind: 14,
            tags: vec![],
            content: "hello".into(),
        },
        1059,
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap();
    let forged = stranger
        .sign(fleetmesh_proto::UnsignedEvent {
            created_at: chat.created_at,
            kind: 1059,
            tags: vec![vec!["p".into(), provider.nostr_pubkey_hex()]],
            content: chat.content.clone(),
        })
        .unwrap();
    runtime().block_on(publish_all(&relay, &[chat, forged]));
    let counted = |outcome: &str| {
        d.scrape()
            .value("fleetmesh_mailbox_total", &[("outcome", outcome)])
            .unwrap_or(0.0)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while counted("other") < 1.0 || counted("unopened") < 1.0 {
        assert!(Instant::now() < deadline, "{}", d.scrape().text);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(counted("accepted"), 2.0);

    // a buyer whose key revoked itself (as the node's relay knows): its wrap is opened,
    // refused and counted, and nothing runs
    let buyer_keys = NodeKeys::load(&buyer.path().join("keys")).unwrap();
    let now = unix_now();
    let revocation = self_revocation(&buyer_keys, now - 5, now - 10, None);
    runtime().block_on(publish_all(&relay, &[revocation]));
    let refused_before = counted("refused");
    // another job: the relay still holds the answers about the first
    let flags = ["--via", "giftwrap", "--relay", &relay, "--wait-secs", "3"];
    let o = submit(
        &did,
        &[&flags[..], &["--idempotency-key", "after-revocation"]].concat(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stderr(&o).contains("no answer for job"), "{}", stderr(&o));
    assert!(counted("refused") > refused_before, "{}", d.scrape().text);
    assert_eq!(counted("accepted"), 2.0);

    // bad input, refused before anything is sent
    let o = submit(&did, &["--via", "didcomm"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("needs a --relay that holds"),
        "{}",
        stderr(&o)
    );
    let o = submit(&did, &["--via", "giftwrap"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("needs a --relay"), "{}", stderr(&o));
    let o = submit("npub1abc", &["--via", "giftwrap", "--relay", &relay]);
    assert_eq!(o.status.code(), Some(2));
    // by http, --to must be the key of the node at --node
    let url = d.url("");
    let o = submit(&nobody, &["--node", &url]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(&format!("not --to {nobody}")),
        "{}",
        stderr(&o)
    );
}
