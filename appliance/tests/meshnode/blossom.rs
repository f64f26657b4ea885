//! The node's Blossom store (BUD-01/02/06): uploads with Nostr authorization, reads by
//! hash, deletes by the uploader, listing, and bytes served counted per peer — and the
//! attacks on it: bodies sent without authorization, stalled or lying uploads, pages and
//! SVGs served back as the node's origin, whole blobs read into memory, an unbounded and
//! public served table, and a damaged index.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;

use super::*;
use base64::Engine as _;
use fleetmesh_proto::{NodeKeys, UnsignedEvent};
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
    // the served table is read as the operator: no proxy in front
    let (node, d) = super::inference::serve_edited(&[], "", &[NO_PROXY]);
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
        // read whole: bytes are counted as the client takes them, and a response dropped
        // unread may never be taken
        let r = http.get(d.url(&format!("/{hash}"))).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
        assert_eq!(r.bytes().await.unwrap().as_ref(), body.as_slice());
        assert_eq!(del(&bob).await.unwrap().status().as_u16(), 200);
        assert_eq!(status(&http, d.url(&format!("/{hash}"))).await, 404);
        // (a blob over the size limit: see
        // an_upload_is_refused_on_its_headers_before_its_body_is_read)
        // the rest of the node is unaffected
        assert_eq!(status(&http, d.url("/healthz")).await, 200);
    });
    // the deleted blob's file is gone, and the refusals left nothing behind
    assert_eq!(blob_files(node.path()), Vec::<String>::new());
    // /metrics has the totals (two uploads; four reads: three above the served table's
    // check, one after alice's delete) and no peer
    let m = d.scrape();
    let bytes =
        |direction: &str| m.must("fleetmesh_blobs_bytes_total", &[("direction", direction)]);
    let n = body.len() as f64;
    assert_eq!((bytes("in"), bytes("out")), (2.0 * n, 4.0 * n));
    assert!(!m.text.contains("127.0.0.1"), "{}", m.text);
}

/// A fresh node with `edits` to its config, running.
pub(super) fn node_with(edits: &[(&str, &str)]) -> (tempfile::TempDir, Daemon) {
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &[]).status.success());
    edit_config(dir.path(), edits);
    let d = run_node(dir.path());
    (dir, d)
}

/// The files in the node's blob directory other than its index: blobs and partial
/// uploads.
fn blob_files(node: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(node.join("blobs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("index.sqlite"))
        .collect();
    names.sort();
    names
}

/// `n` bytes that are not all alike (a fixed LCG), so that ranges of them differ.
pub(crate) fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u8
        })
        .collect()
}

pub(crate) fn sha256_hex(b: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(b))
}

/// A response head read off a raw socket.
struct Head {
    status: u16,
    /// Header lines, lower-cased.
    text: String,
}

/// Sends `head` (the request line and headers, without the blank line) and `body_part` on
/// a fresh connection, and reads the response head without sending anything more; the
/// socket stays open (returned) as a client still writing its body would keep it. Panics
/// if no response head comes within 30 s.
fn raw_request(addr: &str, head: &str, body_part: &[u8]) -> (Head, TcpStream) {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut out = format!("{head}\r\nHost: {addr}\r\n\r\n").into_bytes();
    out.extend_from_slice(body_part);
    s.write_all(&out).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        assert!(
            Instant::now() < deadline,
            "no response head within 30 s; got {:?}",
            String::from_utf8_lossy(&got)
        );
        match s.read(&mut buf) {
            Ok(0) => panic!(
                "closed before a response: {:?}",
                String::from_utf8_lossy(&got)
            ),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => panic!("{e} after {:?}", String::from_utf8_lossy(&got)),
        }
    }
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    (Head { status, text }, s)
}

#[test]
fn an_upload_is_refused_on_its_headers_before_its_body_is_read() {
    // an hour of body timeout: a server that read the body before answering would not
    // answer these within the 30 s the client waits
    let (node, d) = node_with(&[("body_timeout_secs = 30", "body_timeout_secs = 3600")]);
    let alice = NodeKeys::generate().unwrap();
    let body = bytes(1024, 1);
    let hash = sha256_hex(&body);
    // 64 MiB (or one byte more) declared, 1 KiB sent: the answer comes while the client
    // is still "writing"
    let put = |length: usize, extra: &str| {
        format!(
            "PUT /upload HTTP/1.1\r\nContent-Type: application/octet-stream\r\n\
             Content-Length: {length}{extra}"
        )
    };
    let max = fleetmesh_max_blob();
    for (length, extra, status, says) in [
        (max, String::new(), 401, "authorization"),
        (
            max,
            format!("\r\nAuthorization: {}", auth(&alice, "delete", &hash, 60)),
            401,
            "not for upload",
        ),
        (
            max,
            format!("\r\nAuthorization: {}", auth(&alice, "upload", &hash, -10)),
            401,
            "expired",
        ),
        // X-SHA-256 names a blob the authorization does not list
        (
            max,
            format!(
                "\r\nAuthorization: {}\r\nX-SHA-256: {}",
                auth(&alice, "upload", &hash, 60),
                "ab".repeat(32)
            ),
            401,
            "does not list",
        ),
        // authorized, but declared over the limit
        (
            max + 1,
            format!("\r\nAuthorization: {}", auth(&alice, "upload", &hash, 60)),
            413,
            "at most",
        ),
    ] {
        let (head, _still_open) = raw_request(&d.addr, &put(length, &extra), &body);
        assert_eq!(head.status, status, "{}", head.text);
        let reason = head
            .text
            .lines()
            .find_map(|l| l.strip_prefix("x-reason: "))
            .unwrap_or_else(|| panic!("no X-Reason in {}", head.text));
        assert!(reason.contains(says), "{reason}");
    }
    assert_eq!(blob_files(node.path()), Vec::<String>::new());
}

#[test]
fn a_stalled_upload_is_cut_off_and_leaves_no_file() {
    let (node, d) = node_with(&[("body_timeout_secs = 30", "body_timeout_secs = 1")]);
    let alice = NodeKeys::generate().unwrap();
    let body = bytes(1 << 20, 2);
    let hash = sha256_hex(&body);
    let head = format!(
        "PUT /upload HTTP/1.1\r\nContent-Type: application/octet-stream\r\n\
         Content-Length: {}\r\nX-SHA-256: {hash}\r\nAuthorization: {}",
        body.len(),
        auth(&alice, "upload", &hash, 60)
    );
    // a quarter of the body, then nothing
    let (got, _stalled) = raw_request(&d.addr, &head, &body[..body.len() / 4]);
    assert_eq!(got.status, 408, "{}", got.text);
    assert!(got.text.contains("body_timeout_secs"), "{}", got.text);
    assert_eq!(blob_files(node.path()), Vec::<String>::new());
    assert_eq!(
        runtime().block_on(status(&http_client(), d.url(&format!("/{hash}")))),
        404
    );
    // the same upload, sent whole, is stored
    runtime().block_on(async {
        let r = http_client()
            .put(d.url("/upload"))
            .header("authorization", auth(&alice, "upload", &hash, 60))
            .header("x-sha-256", &hash)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
    });
    assert_eq!(blob_files(node.path()), vec![hash]);
}

#[test]
fn an_upload_that_hashes_to_another_blob_is_refused_and_leaves_nothing() {
    let (node, d) = node_with(&[]);
    let alice = NodeKeys::generate().unwrap();
    let (meant, sent) = (bytes(200_000, 3), bytes(200_000, 4));
    let (meant_hash, sent_hash) = (sha256_hex(&meant), sha256_hex(&sent));
    runtime().block_on(async {
        let http = http_client();
        // declared with X-SHA-256 (and authorized for it): 400
        let r = http
            .put(d.url("/upload"))
            .header("authorization", auth(&alice, "upload", &meant_hash, 60))
            .header("x-sha-256", &meant_hash)
            .body(sent.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400);
        let reason = r.headers()["x-reason"].to_str().unwrap().to_string();
        assert!(
            reason.contains(&sent_hash) && reason.contains("X-SHA-256"),
            "{reason}"
        );
        // declared by the authorization's x tag only: 401
        let r = http
            .put(d.url("/upload"))
            .header("authorization", auth(&alice, "upload", &meant_hash, 60))
            .body(sent.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 401);
        let reason = r.headers()["x-reason"].to_str().unwrap().to_string();
        assert!(reason.contains("does not list"), "{reason}");
        for h in [&meant_hash, &sent_hash] {
            assert_eq!(status(&http, d.url(&format!("/{h}"))).await, 404);
        }
        let listed = get_json(&http, d.url(&format!("/list/{}", alice.nostr_pubkey_hex()))).await;
        assert_eq!(listed, serde_json::json!([]));
    });
    assert_eq!(blob_files(node.path()), Vec::<String>::new());
}

#[test]
fn uploads_are_stored_whole_and_served_in_ranges_from_the_file() {
    let (node, d) = node_with(&[]);
    let alice = NodeKeys::generate().unwrap();
    // several read and write chunks, and not a round size
    let body = bytes((1 << 20) + 123, 5);
    let hash = sha256_hex(&body);
    let size = body.len();
    runtime().block_on(async {
        let http = http_client();
        // BUD-06 preflight: what the upload would get, with no body
        let check = |a: Option<String>, sha: Option<&str>, len: Option<String>| {
            let mut r = http
                .head(d.url("/upload"))
                .header("x-content-type", "application/octet-stream");
            if let Some(a) = a {
                r = r.header("authorization", a);
            }
            if let Some(sha) = sha {
                r = r.header("x-sha-256", sha);
            }
            if let Some(len) = len {
                r = r.header("x-content-length", len);
            }
            r.send()
        };
        let ok = || Some(auth(&alice, "upload", &hash, 60));
        for (a, sha, len, want) in [
            (ok(), Some(hash.as_str()), Some(size.to_string()), 200),
            (None, Some(hash.as_str()), Some(size.to_string()), 401),
            (ok(), Some(&*"cd".repeat(32)), Some(size.to_string()), 401),
            (ok(), None, Some(size.to_string()), 400),
            (ok(), Some("not-a-hash"), Some(size.to_string()), 400),
            (ok(), Some(hash.as_str()), None, 411),
            (ok(), Some(hash.as_str()), Some("many".into()), 400),
            (
                ok(),
                Some(hash.as_str()),
                Some(((64 << 20) + 1).to_string()),
                413,
            ),
        ] {
            let r = check(a, sha, len.clone()).await.unwrap();
            assert_eq!(r.status().as_u16(), want, "{sha:?} {len:?}");
            if want != 200 {
                assert!(r.headers().contains_key("x-reason"));
            }
        }
        // the preflight stored nothing
        assert_eq!(status(&http, d.url(&format!("/{hash}"))).await, 404);

        let r = http
            .put(d.url("/upload"))
            .header("authorization", auth(&alice, "upload", &hash, 60))
            .header("x-sha-256", &hash)
            .header("content-type", "application/octet-stream")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let desc: Value = r.json().await.unwrap();
        assert_eq!(desc["sha256"], hash.as_str());
        assert_eq!(desc["size"], size);
        // the file on disk is the body, under its hash
        let on_disk = std::fs::read(node.path().join("blobs").join(&hash)).unwrap();
        assert_eq!(sha256_hex(&on_disk), hash);
        assert_eq!(on_disk, body);

        let url = d.url(&format!("/{hash}"));
        let r = http.get(&url).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
        assert_eq!(r.headers()["accept-ranges"], "bytes");
        assert_eq!(r.bytes().await.unwrap().to_vec(), on_disk);
        let r = http.head(&url).send().await.unwrap();
        assert_eq!(r.headers()["accept-ranges"], "bytes");
        assert_eq!(r.headers()["content-length"], size.to_string().as_str());
        assert!(r.bytes().await.unwrap().is_empty());
        // single ranges: the bytes of the file, and where they are
        for (range, start, end) in [
            ("bytes=0-99".to_string(), 0, 99),
            ("bytes=1000-".to_string(), 1000, size - 1),
            ("bytes=-500".to_string(), size - 500, size - 1),
            (format!("bytes=70000-{}", size * 2), 70_000, size - 1),
            (
                format!("bytes={}-{}", size - 1, size - 1),
                size - 1,
                size - 1,
            ),
        ] {
            let r = http.get(&url).header("range", &range).send().await.unwrap();
            assert_eq!(r.status().as_u16(), 206, "{range}");
            assert_eq!(
                r.headers()["content-range"],
                format!("bytes {start}-{end}/{size}").as_str(),
                "{range}"
            );
            assert_eq!(
                r.headers()["content-length"],
                (end - start + 1).to_string().as_str()
            );
            assert_eq!(
                r.bytes().await.unwrap().to_vec(),
                &on_disk[start..=end],
                "{range}"
            );
        }
        // nothing of it exists: 416, with the size
        for range in [
            format!("bytes={size}-"),
            format!("bytes={}-", size + 10),
            "bytes=-0".into(),
        ] {
            let r = http.get(&url).header("range", &range).send().await.unwrap();
            assert_eq!(r.status().as_u16(), 416, "{range}");
            assert_eq!(
                r.headers()["content-range"],
                format!("bytes */{size}").as_str()
            );
        }
        // a range the server does not take (several at once): the whole blob
        let r = http
            .get(&url)
            .header("range", "bytes=0-1,5-6")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        assert_eq!(r.bytes().await.unwrap().len(), size);
    });
}

#[test]
fn blobs_are_served_so_that_a_browser_never_runs_them_as_the_node() {
    let (_node, d) = node_with(&[]);
    let alice = NodeKeys::generate().unwrap();
    let html = b"<html><script>fetch('/v1/jobs')</script></html>".to_vec();
    let svg = b"<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>".to_vec();
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    runtime().block_on(async {
        let http = http_client();
        for (body, media, attachment) in [
            (html, "text/html", true),
            (svg, "image/svg+xml", true),
            (png, "image/png", false),
        ] {
            let hash = sha256_hex(&body);
            let r = http
                .put(d.url("/upload"))
                .header("authorization", auth(&alice, "upload", &hash, 60))
                .header("content-type", media)
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 200);
            for method in [reqwest::Method::GET, reqwest::Method::HEAD] {
                let r = http
                    .request(method.clone(), d.url(&format!("/{hash}")))
                    .send()
                    .await
                    .unwrap();
                let h = r.headers();
                assert_eq!(r.status().as_u16(), 200);
                // BUD-01: the type it was uploaded with
                assert_eq!(h["content-type"], media, "{method} {media}");
                assert_eq!(h["x-content-type-options"], "nosniff", "{method} {media}");
                let csp = h["content-security-policy"].to_str().unwrap();
                assert!(
                    csp.contains("sandbox") && csp.contains("default-src 'none'"),
                    "{method} {media}: {csp}"
                );
                assert_eq!(
                    h.get("content-disposition")
                        .map(|v| v.to_str().unwrap().to_string()),
                    attachment.then(|| "attachment".to_string()),
                    "{method} {media}"
                );
            }
        }
    });
}

#[test]
fn the_served_table_is_bounded_and_shown_to_the_operator_only() {
    let token = "operator-token-0123456789";
    let (_node, d) = node_with(&[
        ("served_peers = 1024", "served_peers = 2"),
        (
            "allowed_origins = []",
            &format!("allowed_origins = []\ntoken = \"{token}\""),
        ),
    ]);
    let (a, b, c) = (
        NodeKeys::generate().unwrap(),
        NodeKeys::generate().unwrap(),
        NodeKeys::generate().unwrap(),
    );
    let body = bytes(5000, 6);
    let hash = sha256_hex(&body);
    runtime().block_on(async {
        let http = http_client();
        let r = http
            .put(d.url("/upload"))
            .header("authorization", auth(&a, "upload", &hash, 60))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        // reads by three keys: a the whole blob twice, b once, then c one byte
        for (k, range) in [(&a, None), (&a, None), (&b, None), (&c, Some("bytes=0-0"))] {
            let mut r = http
                .get(d.url(&format!("/{hash}")))
                .header("authorization", auth(k, "get", &hash, 60));
            if let Some(range) = range {
                r = r.header("range", range);
            }
            let r = r.send().await.unwrap();
            assert!(r.status().is_success());
            r.bytes().await.unwrap();
        }
        // not without the token, nor with a wrong one
        let served = d.url("/v1/blobs/served");
        for bearer in [None, Some("operator-token-0123456788"), Some("x")] {
            let mut r = http.get(&served);
            if let Some(t) = bearer {
                r = r.header("authorization", format!("Bearer {t}"));
            }
            let r = r.send().await.unwrap();
            assert_eq!(r.status().as_u16(), 401, "{bearer:?}");
            assert!(r.headers().contains_key("x-reason"));
        }
        let r = http
            .get(&served)
            .header("authorization", format!("Bearer {token}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let v: Value = r.json().await.unwrap();
        // two peers kept: the heaviest reader, and the newest, which took b's place
        let table = v["bytes_served"].as_object().unwrap();
        assert_eq!(table.len(), 2, "{v}");
        assert_eq!(
            v["bytes_served"][a.nostr_pubkey_hex()],
            2 * body.len(),
            "{v}"
        );
        assert_eq!(v["bytes_served"][c.nostr_pubkey_hex()], 1, "{v}");
        assert!(table.get(&b.nostr_pubkey_hex()).is_none(), "{v}");
        assert_eq!(v["evicted"], 1);
        assert_eq!(v["max_peers"], 2);
    });
}

#[test]
fn a_blob_index_that_is_empty_or_not_sqlite_stops_the_node_untouched() {
    for (what, content) in [
        ("empty", Vec::new()),
        (
            "garbage",
            b"this is not a SQLite database, just some bytes\n".repeat(50),
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        assert!(init(dir.path(), &[]).status.success());
        let blobs = dir.path().join("blobs");
        std::fs::create_dir(&blobs).unwrap();
        let index = blobs.join("index.sqlite");
        std::fs::write(&index, &content).unwrap();
        let mut child = meshnode()
            .args([
                "run",
                dir.path().to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let o = child.wait_with_output().unwrap();
                panic!("{what}: the node kept running: {}", stdout(&o));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let o = child.wait_with_output().unwrap();
        assert_usage_error(&o, &index.display().to_string());
        assert_eq!(std::fs::read(&index).unwrap(), content, "{what}");
        let mut left: Vec<String> = std::fs::read_dir(&blobs)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, vec!["index.sqlite".to_string()], "{what}");
    }
}
