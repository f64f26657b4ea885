//! The blob store's parts, one at a time.

use super::media::passive;
use super::*;

#[test]
fn ranges_follow_rfc_9110() {
    let part = |start, end| Span::Part { start, end };
    for (range, want) in [
        (None, Span::Whole),
        (Some("bytes=0-9"), part(0, 9)),
        (Some("bytes=10-"), part(10, 99)),
        (Some("bytes=-10"), part(90, 99)),
        (Some("bytes=-1000"), part(0, 99)),
        (Some("bytes=50-1000"), part(50, 99)),
        (Some("BYTES=99-99"), part(99, 99)),
        (Some("bytes=100-"), Span::Unsatisfiable),
        (Some("bytes=100-200"), Span::Unsatisfiable),
        (Some("bytes=-0"), Span::Unsatisfiable),
        // ignored: another unit, several ranges, malformed, backwards
        (Some("items=0-1"), Span::Whole),
        (Some("bytes=0-1,5-6"), Span::Whole),
        (Some("bytes=a-b"), Span::Whole),
        (Some("bytes=+1-2"), Span::Whole),
        (Some("bytes=9-3"), Span::Whole),
        (Some("bytes="), Span::Whole),
    ] {
        assert_eq!(span(range, 100), want, "{range:?}");
    }
    assert_eq!(span(Some("bytes=0-"), 0), Span::Unsatisfiable);
    assert_eq!(span(Some("bytes=-5"), 0), Span::Unsatisfiable);
}

#[test]
fn only_passive_types_are_shown_inline() {
    for t in [
        "image/png",
        "IMAGE/JPEG",
        "text/plain; charset=utf-8",
        "application/json",
        "application/octet-stream",
        "video/mp4",
        "audio/ogg",
    ] {
        assert!(passive(t), "{t}");
    }
    for t in [
        "text/html",
        "application/xhtml+xml",
        "image/svg+xml",
        "text/xml",
        "application/xml",
        "text/javascript",
        "application/javascript",
        "application/pdf",
        "text/css",
        "application/x-unknown",
        "video/x-something+xml",
        "",
    ] {
        assert!(!passive(t), "{t}");
    }
}

#[test]
fn upload_media_types_are_cleaned() {
    let m = |s: &str| clean_media(Some(&HeaderValue::from_str(s).unwrap()));
    assert_eq!(m("Text/HTML"), "text/html");
    assert_eq!(m("text/plain; charset=utf-8"), "text/plain; charset=utf-8");
    assert_eq!(m("nonsense"), "application/octet-stream");
    assert_eq!(m("a/b c"), "application/octet-stream");
    assert_eq!(clean_media(None), "application/octet-stream");
}

#[test]
fn the_served_table_keeps_the_heaviest_peers() {
    let mut s = Served::new(2);
    s.add("a", 10);
    s.add("b", 5);
    s.add("a", 10);
    s.add("c", 1); // full: b (5) goes
    assert_eq!(s.bytes.len(), 2);
    assert_eq!(s.bytes.get("a"), Some(&20));
    assert_eq!(s.bytes.get("c"), Some(&1));
    assert!(!s.bytes.contains_key("b"));
    s.add("d", 1); // c (1) goes: a throwaway key only replaces the last one
    assert_eq!(s.bytes.get("a"), Some(&20));
    assert!(s.bytes.contains_key("d") && !s.bytes.contains_key("c"));
    assert_eq!(s.evicted, 2);
}

fn store(token: Option<&str>) -> (tempfile::TempDir, Arc<Blossom>) {
    let dir = tempfile::tempdir().unwrap();
    let blobs = Arc::new(BlobStore::open(dir.path()).unwrap());
    let s = Blossom::new(blobs, &BlobsSection::default(), token, &[]);
    (dir, s)
}

#[test]
fn the_served_table_is_for_the_operator_only() {
    let local: SocketAddr = "127.0.0.1:5000".parse().unwrap();
    let mapped: SocketAddr = "[::ffff:127.0.0.1]:5000".parse().unwrap();
    let remote: SocketAddr = "203.0.113.7:5000".parse().unwrap();
    let none = HeaderMap::new();
    let (_d, open) = store(None);
    assert!(open.operator(&none, local).is_ok());
    assert!(open.operator(&none, mapped).is_ok());
    let r = open.operator(&none, remote).unwrap_err();
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // a proxy on loopback passes strangers on: never the operator
    for h in ["forwarded", "x-forwarded-for", "x-real-ip"] {
        let mut proxied = HeaderMap::new();
        proxied.insert(h, HeaderValue::from_static("203.0.113.7"));
        let r = open.operator(&proxied, local).unwrap_err();
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{h}");
    }
    let (_d, mut behind) = store(None);
    Arc::get_mut(&mut behind).unwrap().proxies = vec![local.ip()];
    assert!(
        behind.operator(&none, local).is_err(),
        "a per_ip_exempt address"
    );
    assert!(
        behind.operator(&none, mapped).is_err(),
        "its mapped form too"
    );
    let (_d, guarded) = store(Some("a-token-of-16-chars"));
    let bearer = |t: &str| {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {t}")).unwrap(),
        );
        h
    };
    for peer in [local, remote] {
        assert!(
            guarded
                .operator(&bearer("a-token-of-16-chars"), peer)
                .is_ok()
        );
        for h in [none.clone(), bearer("a-token-of-16-charX")] {
            let r = guarded.operator(&h, peer).unwrap_err();
            assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        }
    }
}
