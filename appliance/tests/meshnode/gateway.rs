//! Key namespaces and quotas at the gateway, through `meshnode run`: every client of the
//! job API is a key (NIP-98, signed here by the `nostr` crate as well as by `meshnode job`),
//! every blob uploader a key (BUD-01), every relay writer a key — and none of them can read,
//! overwrite or delete what another wrote, while each one's quota holds only it back.

use super::*;
use fleetmesh_proto::{NodeKeys, UnsignedEvent};
use nostr::hashes::Hash as _;
use nostr::nips::nip98::{HttpData, HttpMethod};
use serde_json::json;
use sha2::Digest as _;

const TOKEN: &str = "t0ken-of-the-operator";

fn keys_of(dir: &Path) -> NodeKeys {
    NodeKeys::load(&dir.join("keys")).unwrap()
}

/// `meshnode job ARGS` as `buyer`, without the token (signed by the buyer's key): its
/// exit code and JSON output.
fn job_as(args: &[&str], d: &Daemon, buyer: &Path) -> (Option<i32>, Value) {
    let (o, v) = super::jobs::job(args, d, buyer);
    (o.status.code(), v)
}

/// An `Authorization` header by `keys` for `method` on `url` (with `body`'s digest), made
/// by the `nostr` crate: an independent NIP-98 implementation.
async fn nip98(keys: &NodeKeys, method: HttpMethod, url: &str, body: Option<&[u8]>) -> String {
    let signer = nostr::Keys::parse(&hex::encode(keys.nostr().to_secret_bytes())).unwrap();
    let mut data = HttpData::new(nostr::Url::parse(url).unwrap(), method);
    if let Some(b) = body {
        data = data.payload(nostr::hashes::sha256::Hash::hash(b));
    }
    data.to_authorization(&signer).await.unwrap()
}

/// GET `url` with `auth` (if any): the status, the `WWW-Authenticate` header, the JSON.
async fn get_as(http: &reqwest::Client, url: &str, auth: Option<&str>) -> (u16, String, Value) {
    let mut r = http.get(url);
    if let Some(a) = auth {
        r = r.header("authorization", a);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let www = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, www, r.json().await.unwrap_or(Value::Null))
}

/// POST `body` to `url` as JSON with `auth`: the status and the JSON answer.
async fn post_as(http: &reqwest::Client, url: &str, auth: &str, body: &str) -> (u16, Value) {
    let r = http
        .post(url)
        .header("authorization", auth)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[test]
fn each_key_reads_only_its_own_jobs_and_is_held_back_only_by_its_own_quota() {
    let token_line = format!("allowed_origins = []\ntoken = \"{TOKEN}\"");
    let (_node, d) = super::blossom::node_with(&[
        ("allowed_origins = []", token_line.as_str()),
        ("per_buyer = 16", "per_buyer = 1"),
    ]);
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    assert!(init(a.path(), &[]).status.success());
    assert!(init(b.path(), &[]).status.success());
    let (ka, kb) = (keys_of(a.path()), keys_of(b.path()));
    let work = tempfile::tempdir().unwrap();
    let upper = |name: &str| super::upper_job(work.path(), "hello", name);

    // a's job, submitted and followed by `meshnode job` without the token: by a's key
    let file = upper("upper-a");
    let (code, sub) = job_as(&["submit", file.to_str().unwrap()], &d, a.path());
    assert_eq!(code, Some(0), "{sub}");
    let id = sub["job"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, st) = job_as(&["status", &id], &d, a.path());
        if code == Some(0) {
            assert_eq!(st["state"], "verified", "{st}");
            break;
        }
        assert!(code == Some(3) && Instant::now() < deadline, "{st}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // b sees nothing of it, by any route: exactly what a job that does not exist shows
    for what in ["status", "receipt"] {
        let (code, v) = job_as(&[what, &id], &d, b.path());
        assert_eq!(code, Some(2), "{what}: {v}");
        assert_eq!(v["error"]["code"], "not_found", "{what}: {v}");
    }
    let out = tempfile::tempdir().unwrap();
    let (code, v) = job_as(
        &["result", &id, "--out", out.path().to_str().unwrap()],
        &d,
        b.path(),
    );
    assert_eq!((code, &v["error"]["code"]), (Some(2), &json!("not_found")));
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);

    runtime().block_on(async {
        let http = http_client();
        let url = d.url(&format!("/v1/jobs/{id}"));
        // nobody: 401, naming both schemes; the operator sees every job
        let (s, www, v) = get_as(&http, &url, None).await;
        assert_eq!(s, 401, "{v}");
        assert!(www.contains("Nostr") && www.contains("Bearer"), "{www}");
        let bearer = format!("Bearer {TOKEN}");
        let (s, _, v) = get_as(&http, &url, Some(&bearer)).await;
        assert_eq!(
            (s, v["buyer"].as_str()),
            (200, Some(ka.nostr_pubkey_hex().as_str()))
        );
        // signed by the nostr crate: a reads its job, b gets what a missing job gets
        for path in ["", "/result", "/receipt"] {
            let u = format!("{url}{path}");
            let by_a = nip98(&ka, HttpMethod::GET, &u, None).await;
            assert_eq!(get_as(&http, &u, Some(&by_a)).await.0, 200, "{u}");
            let by_b = nip98(&kb, HttpMethod::GET, &u, None).await;
            let (s, _, v) = get_as(&http, &u, Some(&by_b)).await;
            assert_eq!((s, &v["error"]["code"]), (404, &json!("not_found")), "{u}");
        }
        let missing = d.url(&format!("/v1/jobs/{}", "ee".repeat(32)));
        let by_b = nip98(&kb, HttpMethod::GET, &missing, None).await;
        assert_eq!(get_as(&http, &missing, Some(&by_b)).await.0, 404);

        // authorizations that do not hold: 401 with the reason, before anything is read
        let elsewhere = nip98(&ka, HttpMethod::GET, &missing, None).await;
        let (s, _, v) = get_as(&http, &url, Some(&elsewhere)).await;
        assert_eq!(s, 401, "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains("not for"),
            "{v}"
        );
        let jobs = d.url("/v1/jobs");
        let for_get = nip98(&kb, HttpMethod::GET, &jobs, None).await;
        let (s, v) = post_as(&http, &jobs, &for_get, "{}").await;
        assert_eq!(s, 401, "{v}");
        // a POST's authorization must commit to its body
        let body = json!({"ask": {"pubkey": ka.nostr_pubkey_hex()}, "payload": "x"}).to_string();
        let no_payload = nip98(&kb, HttpMethod::POST, &jobs, None).await;
        let (s, v) = post_as(&http, &jobs, &no_payload, &body).await;
        assert_eq!(s, 401, "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains("payload"),
            "{v}"
        );
        let other_body = nip98(&kb, HttpMethod::POST, &jobs, Some(b"{}")).await;
        assert_eq!(post_as(&http, &jobs, &other_body, &body).await.0, 401);
        // b cannot submit in a's name
        let signed = nip98(&kb, HttpMethod::POST, &jobs, Some(body.as_bytes())).await;
        let (s, v) = post_as(&http, &jobs, &signed, &body).await;
        assert_eq!((s, &v["error"]["code"]), (400, &json!("mismatch")), "{v}");
    });

    // quotas: a's runaway job holds a's one unfinished slot; a's next job is refused
    // `quota` (429) while b's runs
    let limits = json!({"fuel": 1_000_000_000_000_000u64, "wall_secs": 60});
    let spin = super::spin_job(work.path(), "spin-a", limits);
    let (code, v) = job_as(&["submit", spin.to_str().unwrap()], &d, a.path());
    assert_eq!(code, Some(0), "{v}");
    let again = upper("upper-a2");
    let (code, v) = job_as(&["submit", again.to_str().unwrap()], &d, a.path());
    assert_eq!(code, Some(2), "{v}");
    assert_eq!(v["error"]["code"], "quota", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("per_buyer"),
        "{v}"
    );
    let theirs = upper("upper-b");
    let (code, v) = job_as(&["submit", theirs.to_str().unwrap()], &d, b.path());
    assert_eq!(code, Some(0), "{v}");
    let b_id = v["job"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    while job_as(&["status", &b_id], &d, b.path()).0 != Some(0) {
        assert!(Instant::now() < deadline, "b's job never finished");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn blobs_and_events_stay_their_writers_and_each_key_has_its_own_blob_quota() {
    let (_node, d) =
        super::blossom::node_with(&[("per_key_bytes = 1073741824", "per_key_bytes = 1048576")]);
    let (ka, kb) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
    let big = vec![7u8; 700 << 10];
    let more = vec![9u8; 400 << 10];
    let hash = |b: &[u8]| hex::encode(sha2::Sha256::digest(b));
    let (h_big, h_more) = (hash(&big), hash(&more));
    runtime().block_on(async {
        let http = http_client();
        let put = |k: &NodeKeys, bytes: &[u8]| {
            let auth = super::blossom::auth(k, "upload", &hash(bytes), 300);
            http.put(d.url("/upload"))
                .header("authorization", auth)
                .header("x-sha-256", hash(bytes))
                .body(bytes.to_vec())
                .send()
        };
        assert_eq!(put(&ka, &big).await.unwrap().status(), 200);
        // a's 700 KiB and 400 KiB more pass a's 1 MiB: refused, in the preflight too
        let head = http
            .head(d.url("/upload"))
            .header(
                "authorization",
                super::blossom::auth(&ka, "upload", &h_more, 300),
            )
            .header("x-sha-256", &h_more)
            .header("x-content-length", more.len().to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(head.status(), 413);
        assert!(
            head.headers()["x-reason"]
                .to_str()
                .unwrap()
                .contains("quota")
        );
        let r = put(&ka, &more).await.unwrap();
        assert_eq!(r.status(), 413);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "quota", "{v}");
        let gone = http.get(d.url(&format!("/{h_more}"))).send().await.unwrap();
        assert_eq!(gone.status(), 404);
        // a holds its blob already: uploading it again is not counted twice
        assert_eq!(put(&ka, &big).await.unwrap().status(), 200);
        // b's quota is b's own
        assert_eq!(put(&kb, &more).await.unwrap().status(), 200);
        // b cannot delete a's blob
        let del = http
            .delete(d.url(&format!("/{h_big}")))
            .header(
                "authorization",
                super::blossom::auth(&kb, "delete", &h_big, 300),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(del.status(), 403);
        let kept = http.get(d.url(&format!("/{h_big}"))).send().await.unwrap();
        assert_eq!(kept.status(), 200);
        assert_eq!(kept.bytes().await.unwrap().len(), big.len());

        // on the relay, b's deletions of a's events, by id and by address, delete nothing
        let ws = format!("ws://{}/", d.addr);
        let now = unix_now();
        let sign = |k: &NodeKeys, kind: u16, tags: Vec<Vec<String>>| {
            k.sign(UnsignedEvent {
                created_at: now,
                kind,
                tags,
                content: "mine".into(),
            })
            .unwrap()
        };
        let note = sign(&ka, 1, vec![]);
        let list = sign(&ka, 30000, vec![vec!["d".into(), "friends".into()]]);
        let address = format!("30000:{}:friends", ka.nostr_pubkey_hex());
        publish_all(&ws, &[note.clone(), list.clone()]).await;
        let deletion = sign(
            &kb,
            5,
            vec![vec!["e".into(), note.id_hex()], vec!["a".into(), address]],
        );
        // and b's addressable event under the same d tag is b's own, not a's replaced
        let own = sign(&kb, 30000, vec![vec!["d".into(), "friends".into()]]);
        publish_all(&ws, &[deletion, own]).await;
        let ids = json!({"ids": [note.id_hex(), list.id_hex()]});
        assert_eq!(req_events(&ws, ids).await.len(), 2);
        let lists = json!({"kinds": [30000], "#d": ["friends"]});
        assert_eq!(req_events(&ws, lists).await.len(), 2);
    });
}
