//! Paying a Lightning address (LUD-16) or an LNURL-pay URL (LUD-06): the payee's service
//! is asked for an invoice of the amount, which is checked before anything is paid.
//!
//! `name@domain` is `https://domain/.well-known/lnurlp/name`, a bech32 `lnurl1…` string
//! (LUD-01, either case) the URL it encodes, `lnurlp://host/…` (LUD-17) `https://host/…`
//! (http only for a loopback
//! host, as for every settlement call that carries no secret but must not be redirected
//! by a network in the middle). The service's answer must be a `payRequest` whose
//! `minSendable`..`maxSendable` holds the amount; the invoice its `callback` returns must
//! be for exactly that amount and carry the SHA-256 of the service's `metadata` as its
//! description hash (LUD-06), so that the invoice is the one that service issued for this
//! payment. Answers are bounded in bytes and time.

use std::time::Duration;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::{Result, SettleError};

/// The largest answer read from an LNURL service.
pub const MAX_ANSWER_BYTES: u64 = 64 << 10;

fn refused(why: impl Into<String>) -> SettleError {
    SettleError::Refused(why.into())
}

/// Whether `host` (with anything after it) is a loopback host.
fn loopback(host: &str) -> bool {
    ["127.", "localhost", "[::1]"]
        .iter()
        .any(|p| host.starts_with(p))
}

/// Whether `url` may be called: https, or http to a loopback host.
fn allowed(url: &str) -> bool {
    url.starts_with("https://") || url.strip_prefix("http://").is_some_and(loopback)
}

/// The URL of LUD-17's `lnurlp://rest`: https, http to a loopback host.
fn lnurlp(rest: &str) -> String {
    let scheme = if loopback(rest) { "http" } else { "https" };
    format!("{scheme}://{rest}")
}

/// The URL a bech32 `lnurl1…` string encodes (LUD-01; all upper or all lower case).
fn bech32_url(s: &str) -> Result<String> {
    use bech32::primitives::decode::CheckedHrpstring;
    let not = |why: String| refused(format!("{s:.24}…: not a bech32 LNURL: {why}"));
    let checked = CheckedHrpstring::new::<lightning_invoice::Bolt11Bech32>(s)
        .map_err(|e| not(e.to_string()))?;
    if !checked.hrp().as_str().eq_ignore_ascii_case("lnurl") {
        return Err(not(format!("its prefix is {}", checked.hrp())));
    }
    String::from_utf8(checked.byte_iter().collect()).map_err(|_| not("not a URL".into()))
}

/// The LNURL-pay URL of `to`: a Lightning address `name@domain`, a bech32 `lnurl1…`
/// string, `lnurlp://…`, or an https URL as is.
pub fn pay_url(to: &str) -> Result<String> {
    let to = to.trim();
    let to = ["lightning:", "LIGHTNING:"]
        .iter()
        .find_map(|p| to.strip_prefix(p))
        .unwrap_or(to);
    let url = if to.len() > 6 && to[..6].eq_ignore_ascii_case("lnurl1") {
        // the URL it encodes is taken as a URL, never as an address
        let url = bech32_url(to)?;
        match url.strip_prefix("lnurlp://") {
            Some(rest) => lnurlp(rest),
            None => url,
        }
    } else if let Some(rest) = to.strip_prefix("lnurlp://") {
        lnurlp(rest)
    } else {
        address_or_url(to)?
    };
    if !allowed(&url) {
        return Err(refused(format!(
            "{url}: an LNURL service over https (http only on loopback)"
        )));
    }
    Ok(url)
}

/// The LNURL-pay URL of a Lightning address `name@domain`, or `to` itself.
fn address_or_url(to: &str) -> Result<String> {
    Ok(match to.split_once('@') {
        Some((name, domain))
            if !name.is_empty()
                && !domain.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.+".contains(&b)) =>
        {
            let local = domain.starts_with("127.") || domain.starts_with("localhost");
            let scheme = if local { "http" } else { "https" };
            format!(
                "{scheme}://{domain}/.well-known/lnurlp/{}",
                name.to_ascii_lowercase()
            )
        }
        Some(_) => return Err(refused(format!("{to:?} is not a Lightning address"))),
        None => to.to_owned(),
    })
}

fn get(http: &reqwest::blocking::Client, url: &str) -> Result<Value> {
    let unreachable = |reason: String| SettleError::Unreachable {
        url: url.to_owned(),
        reason,
    };
    let (status, body) = crate::http::send(http.get(url), MAX_ANSWER_BYTES).map_err(unreachable)?;
    let v: Value = serde_json::from_slice(&body)
        .map_err(|e| unreachable(format!("the answer is not JSON: {e}")))?;
    if v["status"] == "ERROR" || !status.is_success() {
        return Err(refused(format!(
            "{url}: {}",
            v["reason"].as_str().unwrap_or(status.as_str())
        )));
    }
    Ok(v)
}

/// An invoice for `amount_msat` from the LNURL-pay service at `url` (with `comment`
/// where it takes comments), checked as the module says.
pub fn invoice(url: &str, amount_msat: u64, comment: Option<&str>) -> Result<String> {
    let http = crate::http::client(Duration::from_secs(30), None).map_err(|reason| {
        SettleError::Unreachable {
            url: url.to_owned(),
            reason,
        }
    })?;
    let offer = get(&http, url)?;
    if offer["tag"] != "payRequest" {
        return Err(refused(format!("{url}: not an LNURL-pay service")));
    }
    let (min, max) = (
        offer["minSendable"].as_u64().unwrap_or(u64::MAX),
        offer["maxSendable"].as_u64().unwrap_or(0),
    );
    if !(min..=max).contains(&amount_msat) {
        return Err(refused(format!(
            "{url} takes {min} to {max} msat, not {amount_msat}"
        )));
    }
    let metadata = offer["metadata"]
        .as_str()
        .ok_or_else(|| refused(format!("{url}: no metadata")))?;
    let callback = offer["callback"]
        .as_str()
        .filter(|c| allowed(c))
        .ok_or_else(|| refused(format!("{url}: no https callback")))?;
    let mut target = reqwest::Url::parse(callback)
        .map_err(|e| refused(format!("{url}: callback {callback:?}: {e}")))?;
    target
        .query_pairs_mut()
        .append_pair("amount", &amount_msat.to_string());
    let room = offer["commentAllowed"].as_u64().unwrap_or(0) as usize;
    if let Some(c) = comment.filter(|c| !c.is_empty() && room > 0) {
        target
            .query_pairs_mut()
            .append_pair("comment", &c.chars().take(room).collect::<String>());
    }
    let answer = get(&http, target.as_str())?;
    let pr = answer["pr"]
        .as_str()
        .ok_or_else(|| refused(format!("{callback}: no invoice (pr)")))?;
    let inv = crate::bolt11::decode(pr)?;
    if inv.amount_msat != Some(amount_msat) {
        return Err(refused(format!(
            "{callback} gave an invoice for {:?} msat, not {amount_msat}",
            inv.amount_msat
        )));
    }
    if inv.description_hash.as_deref() != Some(&hex::encode(Sha256::digest(metadata.as_bytes()))) {
        return Err(refused(format!(
            "{callback} gave an invoice whose description hash is not the service's metadata's"
        )));
    }
    Ok(pr.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lightning_addresses_become_https_urls_and_hostile_ones_are_refused() {
        assert_eq!(
            pay_url("Alice@example.com").unwrap(),
            "https://example.com/.well-known/lnurlp/alice"
        );
        assert_eq!(
            pay_url("bob@127.0.0.1:8080").unwrap(),
            "http://127.0.0.1:8080/.well-known/lnurlp/bob"
        );
        assert!(pay_url("a b@example.com").is_err());
        assert!(pay_url("@example.com").is_err());
        assert!(pay_url("http://example.com/lnurlp/x").is_err());
        assert_eq!(
            pay_url("https://example.com/lnurlp/x").unwrap(),
            "https://example.com/lnurlp/x"
        );
        // LUD-17's scheme
        assert_eq!(
            pay_url("lnurlp://example.com/pay/1").unwrap(),
            "https://example.com/pay/1"
        );
        assert_eq!(
            pay_url("lnurlp://127.0.0.1:9/pay").unwrap(),
            "http://127.0.0.1:9/pay"
        );
    }

    #[test]
    fn bech32_lnurls_decode_to_their_urls_and_bad_ones_are_refused() {
        // LUD-01's example
        let lud01 = "LNURL1DP68GURN8GHJ7UM9WFMXJCM99E3K7MF0V9CXJ0M385EKVCENXC6R2C35XVUKXEFCV5MKVV34X5EKZD3EV56NYD3HXQURZEPEXEJXXEPNXSCRVWFNV9NXZCN9XQ6XYEFHVGCXXCMYXYMNSERXFQ5FNS";
        assert_eq!(
            pay_url(lud01).unwrap(),
            "https://service.com/api?q=3fc3645b439ce8e7f2553a69e5267081d96dcd340693afabe04be7b0ccd178df"
        );
        assert_eq!(
            pay_url(&lud01.to_lowercase()).unwrap(),
            pay_url(lud01).unwrap()
        );
        assert_eq!(
            pay_url(&format!("lightning:{lud01}")).unwrap(),
            pay_url(lud01).unwrap()
        );
        // longer than bech32's 90 characters, as LNURLs are: encoded by the bech32 crate
        let long = format!("https://example.com/.well-known/lnurlp/{}", "a".repeat(200));
        let hrp = bech32::Hrp::parse("lnurl").unwrap();
        let encoded = bech32::encode::<lightning_invoice::Bolt11Bech32>(hrp, long.as_bytes())
            .unwrap()
            .to_uppercase();
        assert!(encoded.len() > 300);
        assert_eq!(pay_url(&encoded).unwrap(), long);
        // one character changed: the checksum fails; mixed case; too short; plain http
        let mut bad = lud01.to_owned();
        bad.replace_range(20..21, "Q");
        for s in [
            bad.as_str(),
            "LNURL1dp68gurn8ghj7um9wfmxjcm99e3k7mf0v9cxj0m385ekvcenxc6r2c35xvukxefcv5mkvv34x5ekzd3ev56nyd3hxqurzepexejxxepnxscrvwfnv9nxzcn9xq6xyefhvgcxxcmyxymnserxfq5fns",
            "lnurl1qqqqqqqq",
        ] {
            assert!(pay_url(s).is_err(), "{s}");
        }
        let http = bech32::encode::<bech32::Bech32>(
            bech32::Hrp::parse("lnurl").unwrap(),
            b"http://example.com/pay",
        )
        .unwrap();
        let e = pay_url(&http).unwrap_err().to_string();
        assert!(e.contains("over https"), "{e}");
    }
}
