//! Unit tests of [`super`]: URIs, grants and the requests' answers.

use super::*;

#[test]
fn uris_round_trip_and_bad_ones_are_refused_with_the_reason() {
    let u = Uri {
        wallet: "ab".repeat(32),
        relays: vec![
            "wss://relay.example.org/path?x=1".into(),
            "ws://127.0.0.1:7777/".into(),
        ],
        secret: "cd".repeat(32),
        lud16: Some("me@example.org".into()),
    };
    let text = u.to_string();
    assert!(text.starts_with("nostr+walletconnect://abab"), "{text}");
    assert!(
        text.contains("relay=wss%3A%2F%2Frelay.example.org%2Fpath%3Fx%3D1"),
        "{text}"
    );
    assert_eq!(Uri::parse(&text).unwrap(), u);
    for (bad, says) in [
        ("https://x", "not nostr+walletconnect"),
        (
            "nostr+walletconnect://abc?relay=wss%3A%2F%2Fr&secret=00",
            "wallet key",
        ),
        (
            &format!(
                "nostr+walletconnect://{}?secret={}",
                "a".repeat(64),
                "b".repeat(64)
            ),
            "no relay",
        ),
        (
            &format!(
                "nostr+walletconnect://{}?relay=https%3A%2F%2Fr&secret={}",
                "a".repeat(64),
                "b".repeat(64)
            ),
            "not a ws",
        ),
        (
            &format!(
                "nostr+walletconnect://{}?relay=wss%3A%2F%2Fr",
                "a".repeat(64)
            ),
            "no secret",
        ),
        (
            &format!(
                "nostr+walletconnect://{}?relay=wss%3A%2F%2Fr&secret=zz",
                "a".repeat(64)
            ),
            "secret",
        ),
        (
            &format!(
                "nostr+walletconnect://{}?relay=%ZZ&secret=zz",
                "a".repeat(64)
            ),
            "decode",
        ),
    ] {
        let e = Uri::parse(bad).unwrap_err().to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn connections_are_granted_listed_and_checked_before_any_wallet_work() {
    let dir = tempfile::tempdir().unwrap();
    let g = Grants::open(
        &dir.path().join("nwc.sqlite"),
        &dir.path().join("w.sqlite"),
        None,
    )
    .unwrap();
    let client = "11".repeat(32);
    g.grant(
        "app",
        &client,
        &["get_info".into(), "pay_invoice".into()],
        Some(10),
    )
    .unwrap();
    assert!(
        g.grant("app", &"22".repeat(32), &[], None).is_err(),
        "names are unique"
    );
    assert!(g.grant("x", &client, &["steal".into()], None).is_err());
    assert_eq!(g.list().unwrap()[0].budget_sat, Some(10));
    let info = g
        .handle(&client, &json!({"method": "get_info", "params": {}}))
        .unwrap();
    assert_eq!(info["methods"], json!(["get_info", "pay_invoice"]));
    let code = |c: &str, m: &str| {
        g.handle(c, &json!({"method": m, "params": {}}))
            .unwrap_err()
            .code
    };
    assert_eq!(code(&"33".repeat(32), "get_info"), "UNAUTHORIZED");
    assert_eq!(code(&client, "get_balance"), "RESTRICTED");
    assert_eq!(code(&client, "multi_pay_invoice"), "NOT_IMPLEMENTED");
    assert_eq!(code(&client, "pay_invoice"), "OTHER");
    assert!(g.revoke("app").unwrap());
    assert_eq!(code(&client, "get_info"), "UNAUTHORIZED");
}
