//! The appliance's readers of outside text: the Bacalhau job-spec reader
//! (`fleetmesh_market::bacalhau`), the BOLT11 reader (`fleetmesh_settle::bolt11`), the
//! NIP-98 authorization reader (`fleetmesh_proto::nip98`) and, since the appliance is a
//! binary crate, its Blossom authorization reader compiled here from its source file
//! (`#[path]`).

use fleetmesh_market::bacalhau;

#[path = "../../../appliance/src/http/blobs/auth.rs"]
pub mod blossom_auth;

use fleetmesh_proto::nip98;

/// The host and paths the NIP-98 harness checks authorizations against (its seeds are
/// signed for them).
pub const NIP98_HOST: &str = "127.0.0.1:7777";

/// A NIP-98 `Authorization` header value, checked for a job read and a submission at the
/// fixed [`crate::NOW`], and a checked one's body commitment.
pub fn nip98_authorization(data: &[u8]) {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    for (method, path) in [("GET", "/v1/jobs/abc?x=1"), ("POST", "/v1/jobs")] {
        if let Ok(signed) = nip98::check(value, method, NIP98_HOST, path, crate::NOW) {
            let _ = signed.covers(b"{}");
        }
    }
}

/// A Blossom `Authorization` header value, checked for an upload and a delete (with and
/// without a blob hash) at the fixed [`crate::NOW`].
pub fn blossom_authorization(data: &[u8]) {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    let hash = "b1674191a88ec5cdd733e4240a81803105dc412d6c6708d53ab94fc248f4f553";
    for (verb, h) in [
        ("upload", None),
        ("upload", Some(hash)),
        ("delete", Some(hash)),
    ] {
        let _ = blossom_auth::check_authorization(value, verb, h, crate::NOW);
    }
}

/// A Bacalhau job spec (YAML or JSON), as `meshnode job submit` reads it: `local` sources
/// resolve under an empty directory and `urlDownload` sources "download" a few bytes, so
/// nothing outside is read.
pub fn bacalhau_spec(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = bacalhau::is_spec(text);
    let download = |url: &str| -> Result<Vec<u8>, String> {
        if url.len().is_multiple_of(2) {
            Ok(url.as_bytes().to_vec())
        } else {
            Err("offline".into())
        }
    };
    // `local` sources are read on the submitting machine: under a directory that does not
    // exist nothing relative resolves, and specs naming an absolute SourcePath (which
    // could be /dev/zero or /dev/stdin) are left out.
    if let Ok(doc) = serde_yaml::from_str::<serde_json::Value>(text)
        && names_absolute_source(&doc)
    {
        return;
    }
    let base = std::path::Path::new("/nonexistent/fleetmesh-fuzz");
    let _ = bacalhau::parse(text, base, &download);
}

fn names_absolute_source(v: &serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::Object(m) => m.iter().any(|(k, v)| {
            (k.eq_ignore_ascii_case("sourcepath")
                && v.as_str()
                    .is_some_and(|p| std::path::Path::new(p).is_absolute()))
                || names_absolute_source(v)
        }),
        Value::Array(a) => a.iter().any(names_absolute_source),
        _ => false,
    }
}

/// A BOLT11 invoice (`meshnode settle decode`): decoded or refused, never a panic; an
/// invoice that decodes decodes the same again, upper-cased too, and its sums hold.
pub fn bolt11(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(inv) = fleetmesh_settle::bolt11::decode(text) else {
        return;
    };
    assert_eq!(
        fleetmesh_settle::bolt11::decode(text).ok(),
        Some(inv.clone())
    );
    assert_eq!(
        inv.expires_at,
        inv.timestamp.saturating_add(inv.expiry_secs),
        "{text}"
    );
    let upper = text.to_ascii_uppercase();
    assert_eq!(
        fleetmesh_settle::bolt11::decode(&upper)
            .ok()
            .map(|u| u.payment_hash),
        Some(inv.payment_hash),
        "{text}"
    );
}

/// A Cashu token (`meshnode wallet receive`): parsed or refused, never a panic; a token
/// that parses writes as version 4 and reads back the same, its amount summed.
pub fn cashu_token(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(token) = fleetmesh_settle::cashu::Token::parse(text) else {
        return;
    };
    let amount = token.amount().expect("a parsed token's amount sums");
    let v4 = token.to_v4().expect("a parsed token writes as version 4");
    let again = fleetmesh_settle::cashu::Token::parse(&v4).expect("its v4 text parses");
    assert_eq!(again, token, "{text}");
    assert_eq!(again.amount().ok(), Some(amount));
}

/// Nostr Wallet Connect's readers: mode byte 0, a connection URI (`meshnode settle nwc-…
/// --uri`), which writes back to the same URI when it parses; 1, a request's JSON as the
/// wallet service reads it from a granted client (answered or refused with a NIP-47 code,
/// never a panic; the wallet itself is out of reach: no mint).
pub fn nwc(data: &[u8]) {
    use fleetmesh_settle::nwc::{Grants, METHODS, Uri};
    static GRANTS: std::sync::OnceLock<(tempfile::TempDir, std::sync::Mutex<Grants>)> =
        std::sync::OnceLock::new();
    let Some((mode, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    if mode % 2 == 0 {
        if let Ok(uri) = Uri::parse(text) {
            let again = Uri::parse(&uri.to_string()).expect("a URI written back parses");
            assert_eq!(again, uri, "{text}");
        }
        return;
    }
    let Ok(request) = serde_json::from_str::<serde_json::Value>(text) else {
        return;
    };
    let (_, grants) = GRANTS.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let g = Grants::open(
            &dir.path().join("nwc.sqlite"),
            &dir.path().join("w.sqlite"),
            None,
        )
        .expect("a fresh grants file");
        let all: Vec<String> = METHODS.iter().map(|m| (*m).to_owned()).collect();
        g.grant("fuzz", &"11".repeat(32), &all, Some(10))
            .expect("a grant");
        (dir, std::sync::Mutex::new(g))
    });
    let g = grants
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Err(f) = g.handle(&"11".repeat(32), &request) {
        assert!(!f.code.is_empty());
    }
}

/// `fleetmesh_settle::l402`: the first byte picks a macaroon (V2 binary), an
/// `Authorization: L402` credential, or a `WWW-Authenticate` challenge. A decoded macaroon
/// writes back and reads equal; a credential is checked by a minter (refused, never a
/// panic: no fuzzed input holds its signature).
pub fn l402(data: &[u8]) {
    use fleetmesh_settle::l402::{Challenge, Credential, Macaroon, Minter};
    let Some((mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => {
            if let Ok(m) = Macaroon::from_bytes(rest) {
                let again = Macaroon::from_bytes(&m.to_bytes()).expect("written back, it reads");
                assert_eq!(again, m);
                assert_eq!(Macaroon::from_base64(&m.to_base64()).ok(), Some(m));
            }
        }
        1 => {
            let Ok(text) = std::str::from_utf8(rest) else {
                return;
            };
            if let Ok(c) = Credential::parse(text) {
                let minter = Minter::new([9; 32]);
                assert!(minter.verify(&c, "/v1/jobs", 1, crate::NOW).is_err());
            }
        }
        _ => {
            if let Ok(c) = std::str::from_utf8(rest).map(Challenge::parse)
                && let Ok(c) = c
            {
                assert_eq!(Challenge::parse(&c.header()).ok(), Some(c));
            }
        }
    }
}

/// `fleetmesh_settle::nutzap`: a JSON array of tags read as a kind 10019 and as a kind
/// 9321. What reads as info writes back and reads equal; a nutzap is checked against a
/// recipient (taken or refused, never a panic).
pub fn nutzap(data: &[u8]) {
    use fleetmesh_settle::nutzap::{Info, Nutzap};
    let Ok(tags) = serde_json::from_slice::<Vec<Vec<String>>>(data) else {
        return;
    };
    if let Ok(info) = Info::from_tags(&tags) {
        assert_eq!(Info::from_tags(&info.tags()).ok(), Some(info));
    }
    if let Ok(zap) = Nutzap::read(&tags, "") {
        let me = zap.recipient.clone();
        let _ = zap.check(&me, std::slice::from_ref(&zap.token.mint), &"11".repeat(32));
    }
}
