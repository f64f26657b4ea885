//! BOLT #11 invoices: [`decode`] reads one (bech32, its tagged fields, the signature),
//! checks what a payer must check, and returns what it says as [`Invoice`] — the amount in
//! millisatoshis, the payment hash and secret, the description or its hash, the expiry, the
//! payee (its `n` field, or the key the signature recovers), route hints, fallback
//! addresses and feature bits.
//!
//! Refused, with the reason: bad bech32 (checksum, case, separator, length), an unknown
//! multiplier or an amount below a millisatoshi, a signature that does not hold or does
//! not recover, a field that appears twice where it may not, and required feature bits
//! this reader does not know. An invoice without a payment secret (`s`) — the legacy form
//! the spec's first examples use — decodes with a warning: a payer refuses to pay it.

use std::str::FromStr as _;

use lightning_invoice::{
    Bolt11Invoice, Bolt11SemanticError, Currency, Fallback, SignedRawBolt11Invoice,
};
use serde::{Deserialize, Serialize};

use crate::{Result, SettleError};

/// The longest invoice read, in characters (BOLT #11 sets no limit; 7089 is the most a
/// QR code holds).
pub const MAX_LEN: usize = 7089;

/// Expiry when the invoice names none, seconds.
pub const DEFAULT_EXPIRY: u64 = 3600;
/// `min_final_cltv_expiry_delta` when the invoice names none.
pub const DEFAULT_MIN_FINAL_CLTV: u64 = 18;

/// One hop of a route hint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hop {
    /// The hop's node (compressed key, hex).
    pub pubkey: String,
    /// The channel from it, `block x transaction x output`.
    pub short_channel_id: String,
    /// Base fee, millisatoshis.
    pub fee_base_msat: u32,
    /// Proportional fee, millionths.
    pub fee_proportional_millionths: u32,
    /// CLTV delta.
    pub cltv_expiry_delta: u16,
}

/// What an invoice says, checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invoice {
    /// `bitcoin`, `testnet`, `signet`, `regtest` or `simnet`.
    pub network: String,
    /// The amount, millisatoshis (`None`: any amount).
    pub amount_msat: Option<u64>,
    /// When it was made, Unix seconds.
    pub timestamp: u64,
    /// The payment hash (hex).
    pub payment_hash: String,
    /// The payment secret (hex), when it has one.
    pub payment_secret: Option<String>,
    /// The description, when it carries one.
    pub description: Option<String>,
    /// SHA-256 of a description it does not carry (hex).
    pub description_hash: Option<String>,
    /// Seconds after `timestamp` it stops being payable.
    pub expiry_secs: u64,
    /// `timestamp + expiry_secs`.
    pub expires_at: u64,
    /// The last hop's CLTV delta.
    pub min_final_cltv_expiry_delta: u64,
    /// The payee (compressed key, hex): its `n` field, else the key the signature recovers.
    pub payee: String,
    /// Private route hints, each a list of hops.
    pub route_hints: Vec<Vec<Hop>>,
    /// On-chain fallback addresses.
    pub fallbacks: Vec<String>,
    /// Feature bits set.
    pub features: Vec<usize>,
    /// What a payer should know before paying (a missing payment secret).
    pub warnings: Vec<String>,
}

fn refuse(why: impl Into<String>) -> SettleError {
    SettleError::Invoice(why.into())
}

/// Reads and checks the invoice `text` (`lightning:` prefix allowed, any case but mixed).
///
/// # Errors
/// [`SettleError::Invoice`] naming why a payer must refuse it.
pub fn decode(text: &str) -> Result<Invoice> {
    let text = text.trim();
    if text.len() > MAX_LEN {
        return Err(refuse(format!("longer than {MAX_LEN} characters")));
    }
    let text = strip_scheme(text);
    if text.bytes().any(|b| b.is_ascii_uppercase()) && text.bytes().any(|b| b.is_ascii_lowercase())
    {
        return Err(refuse(
            "mixed upper and lower case (bech32 allows one or the other)",
        ));
    }
    if !text.contains('1') {
        return Err(refuse(
            "no bech32 separator (`1`) between the prefix and the data",
        ));
    }
    let signed = SignedRawBolt11Invoice::from_str(text).map_err(|e| refuse(e.to_string()))?;
    let mut warnings = Vec::new();
    match Bolt11Invoice::from_signed(signed.clone()) {
        Ok(_) => {}
        // the legacy form: the rest of the checks are made below
        Err(Bolt11SemanticError::NoPaymentSecret) => warnings.push(
            "no payment secret (`s`): payers refuse invoices without one (BOLT #11)".to_owned(),
        ),
        Err(e) => return Err(refuse(semantic(&e))),
    }
    if !signed.check_signature() {
        return Err(refuse(match signed.payee_pub_key() {
            Some(_) => "the signature does not hold for the payee its `n` field names",
            None => "the signature does not recover the payee's key",
        }));
    }
    let payee = match signed.payee_pub_key() {
        Some(k) => k.0,
        None => {
            signed
                .recover_payee_pub_key()
                .map_err(|e| refuse(format!("the signature does not recover a key: {e}")))?
                .0
        }
    };
    if let Some(f) = signed.features()
        && f.requires_unknown_bits()
    {
        return Err(refuse(semantic(&Bolt11SemanticError::InvalidFeatures)));
    }
    let amount_msat = match signed.amount_pico_btc() {
        Some(p) if p % 10 != 0 => {
            return Err(refuse(semantic(&Bolt11SemanticError::ImpreciseAmount)));
        }
        p => p.map(|p| p / 10),
    };
    let payment_hash = signed
        .payment_hash()
        .ok_or_else(|| refuse(semantic(&Bolt11SemanticError::NoPaymentHash)))?;
    let timestamp = signed.raw_invoice().data.timestamp.as_unix_timestamp();
    let expiry_secs = signed
        .expiry_time()
        .map_or(DEFAULT_EXPIRY, lightning_invoice::ExpiryTime::as_seconds);
    let network: bitcoin::Network = signed.currency().into();
    Ok(Invoice {
        network: network_name(signed.currency()).to_owned(),
        amount_msat,
        timestamp,
        payment_hash: payment_hash.0.to_string(),
        payment_secret: signed.payment_secret().map(|s| hex::encode(s.0)),
        description: signed.description().map(|d| d.as_inner().0.clone()),
        description_hash: signed.description_hash().map(|h| h.0.to_string()),
        expiry_secs,
        expires_at: timestamp.saturating_add(expiry_secs),
        min_final_cltv_expiry_delta: signed
            .min_final_cltv_expiry_delta()
            .map_or(DEFAULT_MIN_FINAL_CLTV, |d| d.0),
        payee: payee.to_string(),
        route_hints: signed
            .private_routes()
            .iter()
            .map(|r| {
                r.0.iter()
                    .map(|h| Hop {
                        pubkey: h.src_node_id.to_string(),
                        short_channel_id: scid(h.short_channel_id),
                        fee_base_msat: h.fees.base_msat,
                        fee_proportional_millionths: h.fees.proportional_millionths,
                        cltv_expiry_delta: h.cltv_expiry_delta,
                    })
                    .collect()
            })
            .collect(),
        fallbacks: signed
            .fallbacks()
            .into_iter()
            .filter_map(|f| address(f, network))
            .collect(),
        features: signed.features().map_or_else(Vec::new, |f| {
            let flags = f.le_flags();
            (0..flags.len() * 8)
                .filter(|i| flags[i / 8] & (1 << (i % 8)) != 0)
                .collect()
        }),
        warnings,
    })
}

/// `text` without a `lightning:` URI scheme (any case).
fn strip_scheme(text: &str) -> &str {
    match text.get(..10) {
        Some(p) if p.eq_ignore_ascii_case("lightning:") => &text[10..],
        _ => text,
    }
}

fn network_name(c: Currency) -> &'static str {
    match c {
        Currency::Bitcoin => "bitcoin",
        Currency::BitcoinTestnet => "testnet",
        Currency::Regtest => "regtest",
        Currency::Simnet => "simnet",
        Currency::Signet => "signet",
    }
}

/// A short channel id as `block x transaction x output`.
pub fn scid(id: u64) -> String {
    format!("{}x{}x{}", id >> 40, (id >> 16) & 0xff_ffff, id & 0xffff)
}

/// A fallback as an address on `network` (`None` for a witness version it cannot be).
fn address(f: &Fallback, network: bitcoin::Network) -> Option<String> {
    let a = match f {
        Fallback::SegWitProgram { version, program } => {
            let p = bitcoin::WitnessProgram::new(*version, program).ok()?;
            bitcoin::Address::from_witness_program(p, network)
        }
        Fallback::PubKeyHash(h) => bitcoin::Address::p2pkh(*h, network),
        Fallback::ScriptHash(h) => bitcoin::Address::p2sh_from_hash(*h, network),
    };
    Some(a.to_string())
}

/// A semantic refusal in words.
fn semantic(e: &Bolt11SemanticError) -> String {
    match e {
        Bolt11SemanticError::NoPaymentHash => "no payment hash".into(),
        Bolt11SemanticError::MultiplePaymentHashes => "more than one payment hash".into(),
        Bolt11SemanticError::NoDescription => "no description and no description hash".into(),
        Bolt11SemanticError::MultipleDescriptions => "more than one description".into(),
        Bolt11SemanticError::NoPaymentSecret => "no payment secret".into(),
        Bolt11SemanticError::MultiplePaymentSecrets => "more than one payment secret".into(),
        Bolt11SemanticError::InvalidFeatures => {
            "feature bits that require something this reader does not know (or lack payment_secret)"
                .into()
        }
        Bolt11SemanticError::InvalidSignature => "the signature does not hold for the payee".into(),
        Bolt11SemanticError::ImpreciseAmount => "an amount below a millisatoshi".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn vectors() -> Value {
        serde_json::from_str(include_str!("../vectors/bolt11.json")).unwrap()
    }

    #[test]
    fn the_specs_examples_decode_to_what_the_spec_says() {
        let v = vectors();
        let signer = v["signed_by"].as_str().unwrap();
        for case in v["valid"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            let got =
                decode(case["invoice"].as_str().unwrap()).unwrap_or_else(|e| panic!("{name}: {e}"));
            let got = serde_json::to_value(&got).unwrap();
            // every field the spec's breakdown gives
            for (key, value) in case.as_object().unwrap() {
                if key != "name" && key != "invoice" {
                    assert_eq!(&got[key], value, "{name}: {key}");
                }
            }
            assert_eq!(got["payee"], signer, "{name}: recovered from the signature");
            let legacy = case["payment_secret"].is_null();
            assert_eq!(
                got["warnings"].as_array().unwrap().is_empty(),
                !legacy,
                "{name}"
            );
        }
    }

    #[test]
    fn the_specs_invalid_invoices_are_refused_with_a_reason() {
        for case in vectors()["invalid"].as_array().unwrap() {
            let why = case["why"].as_str().unwrap();
            let e = decode(case["invoice"].as_str().unwrap()).expect_err(why);
            let says = case["says"].as_str().unwrap();
            assert!(e.to_string().contains(says), "{why}: {e}");
        }
        // and what is not an invoice at all, or too long to be one
        for bad in [
            "",
            "lnbc",
            "lightning:",
            "not an invoice",
            &"q".repeat(MAX_LEN + 1),
        ] {
            assert!(decode(bad).is_err(), "{bad:.20}");
        }
    }

    #[test]
    fn a_lightning_uri_and_surrounding_space_are_taken() {
        let v = vectors();
        let first = v["valid"][0]["invoice"].as_str().unwrap();
        let plain = decode(first).unwrap();
        assert_eq!(decode(&format!("  LIGHTNING:{first}\n")).unwrap(), plain);
    }

    #[test]
    fn a_changed_character_is_refused_never_a_panic() {
        let v = vectors();
        for case in v["valid"].as_array().unwrap() {
            let inv = case["invoice"].as_str().unwrap().to_lowercase();
            for i in (0..inv.len()).step_by(7) {
                let mut b = inv.clone().into_bytes();
                b[i] = if b[i] == b'q' { b'p' } else { b'q' };
                let s = String::from_utf8(b).unwrap();
                if s != inv {
                    assert!(decode(&s).is_err(), "{s}");
                }
            }
        }
    }
}
