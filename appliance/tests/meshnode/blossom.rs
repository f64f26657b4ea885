//! The node's Blossom store (BUD-01/02): uploads with Nostr authorization, reads by hash,
//! deletes by the uploader, listing, and bytes served counted per peer.

use super::*;
use base64::Engine as _;
use fleetmesh_relay::{NodeKeys, UnsignedEvent};
use sha2::Digest as _;

/// A BUD-02 authorization header for `verb` on blob `hash`, signed by `keys`.
pub(crate) fn auth(keys: &NodeKeys, verb: &str, hash: &str, expires_in: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let ev = keys
        .sign(UnsignedEvent {
            created_at: now - 5,
            kind: 24242,
            tags: vec![
                vec!["t".into(), verb.into()],
                vec!["x".into(), hash.into()],
                vec!["expiration".into(), (now as i64 + expires_in).to_string()],
            ],
            content: format!("{verb} {hash}"),
        })
        .unwrap();
    format!(
        "Nostr {}",
        base64::engine::general_purpose::STANDARD.encode(ev.to_json())
    )
}

/// The node's largest blob (`appliance/src/blossom.rs` MAX_BLOB): 64 MiB.
fn fleetmesh_max_blob() -> usize {
    64 << 20
}

#[test]
fn blobs_are_stored_by_hash_served_counted_and_deleted_by_their_uploader() {
    let (_node, d) = super::inference::serve(&[], "");
    let (alice, bob) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
    let body = b"job input: the quick brown fox".to_vec();
    let hash = hex::encode(sha2::Sha256::digest(&body));
    runtime().block_on(async {
        let http = http_client();
        let put = |a: Option<String>, b: Vec<u8>| {
            let mut r = http
                .put(d.url("/upload"))
                .header("content-type", "text/plain")
                .body(b);
            if let Some(a) = a {
                r = r.header("authorization", a);
            }
            r.send()
        };
        // refused: no authorization, another blob's hash, expired, the wrong verb
        for (a, says) in [
            (None, "Authorization"),
            (
                Some(auth(&alice, "upload", &"00".repeat(32), 60)),
                "does not list",
            ),
            (Some(auth(&alice, "upload", &hash, -10)), "expired"),
            (Some(auth(&alice, "delete", &hash, 60)), "not for upload"),
            (Some("Nostr %%%".to_string()), "not base64"),
            (Some("Bearer x".to_string()), "scheme must be Nostr"),
        ] {
            let r = put(a, body.clone()).await.unwrap();
            assert_eq!(r.status().as_u16(), 401);
            let reason = r.headers()["x-reason"].to_str().unwrap().to_string();
            assert!(reason.contains(says), "{reason}");
        }
        let r = put(Some(auth(&alice, "upload", &hash, 60)), body.clone())
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let desc: Value = r.json().await.unwrap();
        assert_eq!(desc["sha256"], hash.as_str());
        assert_eq!(desc["size"], body.len());
        assert_eq!(desc["type"], "text/plain");
        assert!(desc["url"].as_str().unwrap().ends_with(&hash));
        // bob uploads the same bytes: one blob, two owners
        let r = put(Some(auth(&bob, "upload", &hash, 60)), body.clone())
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        // read by hash, with or without an extension; HEAD gives the size only
        for path in [format!("/{hash}"), format!("/{hash}.txt")] {
            let r = http.get(d.url(&path)).send().await.unwrap();
            assert_eq!(r.status().as_u16(), 200);
            assert_eq!(r.headers()["content-type"], "text/plain");
            assert_eq!(r.bytes().await.unwrap().to_vec(), body);
        }
        // CORS (BUD-01): any origin, and the preflight
        let r = http.get(d.url(&format!("/{hash}"))).send().await.unwrap();
        assert_eq!(r.headers()["access-control-allow-origin"], "*");
        let r = http
            .request(reqwest::Method::OPTIONS, d.url("/upload"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 204);
        assert!(
            r.headers()["access-control-allow-methods"]
                .to_str()
                .unwrap()
                .contains("PUT")
        );
        let r = http.head(d.url(&format!("/{hash}"))).send().await.unwrap();
        assert_eq!(
            r.headers()["content-length"],
            body.len().to_string().as_str()
        );
        let r = http
            .get(d.url(&format!("/{}", "ab".repeat(32))))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 404);
        // bytes served, per peer
        let served = get_json(&http, d.url("/v1/blobs/served")).await;
        // three full reads above (HEAD sends no body)
        assert_eq!(served["bytes_served"]["127.0.0.1"], 3 * body.len());
        // listing
        let listed = get_json(&http, d.url(&format!("/list/{}", alice.nostr_pubkey_hex()))).await;
        assert_eq!(listed[0]["sha256"], hash.as_str());
        // delete: not by a stranger; alice's claim goes, bob's keeps the blob; then bob's
        let stranger = NodeKeys::generate().unwrap();
        let del = |k: &NodeKeys| {
            http.delete(d.url(&format!("/{hash}")))
                .header("authorization", auth(k, "delete", &hash, 60))
                .send()
        };
        assert_eq!(del(&stranger).await.unwrap().status().as_u16(), 403);
        assert_eq!(del(&alice).await.unwrap().status().as_u16(), 200);
        assert_eq!(status(&http, d.url(&format!("/{hash}"))).await, 200);
        assert_eq!(del(&bob).await.unwrap().status().as_u16(), 200);
        assert_eq!(status(&http, d.url(&format!("/{hash}"))).await, 404);
        // a blob over the size limit is refused before it is read
        let big = vec![0u8; fleetmesh_max_blob() + 1];
        let r = put(Some(auth(&alice, "upload", &"00".repeat(32), 60)), big)
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 413);
        assert!(
            r.headers()["x-reason"]
                .to_str()
                .unwrap()
                .contains("at most")
        );
        // the rest of the node is unaffected
        assert_eq!(status(&http, d.url("/healthz")).await, 200);
    });
}
