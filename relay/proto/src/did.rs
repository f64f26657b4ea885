//! `did:nostr` DID documents (W3C DID Core 1.0, the Nostr Community Group's did:nostr
//! method) built from a node's verified descriptor (kind 11801): how other DID tooling —
//! DIDComm, verifiable credentials — finds a node's keys and endpoints without DNS.
//!
//! The document has the `did:nostr` method's `DIDNostr` type and three Multikey
//! verification methods:
//! - `#key-0`, the Nostr key (secp256k1, BIP-340): `publicKeyMultibase` is the method's
//!   base16 form, `f` + multicodec `e701` + `02` + the x coordinate; it authenticates and
//!   asserts (DIDComm's ES256K signatures);
//! - `#ed25519`, the transport's signing key (`z` base58btc of multicodec `ed01` + key),
//!   also authenticating and asserting (DIDComm's EdDSA signatures);
//! - `#x25519`, the key agreement key (`z` base58btc of multicodec `ec01` + key), for
//!   DIDComm's ECDH.
//!
//! Services: `#relay-N` (type `Relay`) per relay of the descriptor, `#endpoint-N` (the
//! descriptor's scheme as type) per endpoint — a `didcomm` endpoint as a DIDCommMessaging
//! service ([`DIDCOMM_SCHEME`]), a `compute` endpoint (the `nostr:naddr1…` of the node's
//! terms, [`crate::provider::TERMS_SCHEME`]) as a `ComputeProvider` service. [`document`] takes a descriptor that
//! [`crate::identity::verify_descriptor`] accepted; [`parse_did`] reads a DID back to its
//! key.

use serde_json::{Value, json};

use crate::identity::DescriptorContent;
use crate::{Error, Result};

/// The JSON-LD contexts of a document.
pub const CONTEXT: [&str; 2] = [
    "https://www.w3.org/ns/did/v1",
    "https://w3id.org/security/multikey/v1",
];

/// The key of a `did:nostr:<64 lowercase hex>`.
///
/// # Errors
/// [`Error::InvalidDescriptor`] naming what is wrong with the DID.
pub fn parse_did(did: &str) -> Result<[u8; 32]> {
    let hex = did
        .strip_prefix("did:nostr:")
        .ok_or_else(|| Error::InvalidDescriptor(format!("{did:?} is not a did:nostr DID")))?;
    let ok = hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let bytes = ok.then(|| hex::decode(hex).ok()).flatten();
    bytes
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| {
            Error::InvalidDescriptor(format!(
                "{did:?}: a did:nostr key is 64 lowercase hex digits"
            ))
        })
}

/// Base58 (Bitcoin's alphabet) of `bytes`, leading zero bytes as `1`s.
pub fn base58btc(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 58] = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
    let zeros = bytes.iter().take_while(|&&b| b == 0).count();
    // base-58 digits, least significant first
    let mut digits: Vec<u8> = Vec::with_capacity(bytes.len() * 138 / 100 + 1);
    for &b in &bytes[zeros..] {
        let mut carry = u32::from(b);
        for d in &mut digits {
            carry += u32::from(*d) << 8;
            *d = (carry % 58) as u8;
            carry /= 58;
        }
        while carry > 0 {
            digits.push((carry % 58) as u8);
            carry /= 58;
        }
    }
    std::iter::repeat_n('1', zeros)
        .chain(
            digits
                .iter()
                .rev()
                .map(|&d| char::from(ALPHABET[usize::from(d)])),
        )
        .collect()
}

/// The Multikey `publicKeyMultibase` of a key of `key_type` (`secp256k1-bip340`,
/// `ed25519`, `x25519`) given in hex; `None` for another type or a bad key.
pub fn multikey(key_type: &str, public_hex: &str) -> Option<String> {
    let key = hex::decode(public_hex).ok().filter(|k| k.len() == 32)?;
    match key_type {
        "secp256k1-bip340" => Some(format!("fe70102{}", hex::encode(key))),
        "ed25519" | "x25519" => {
            let codec: [u8; 2] = if key_type == "ed25519" {
                [0xed, 0x01]
            } else {
                [0xec, 0x01]
            };
            Some(format!("z{}", base58btc(&[&codec[..], &key].concat())))
        }
        _ => None,
    }
}

/// The descriptor endpoint scheme of a DIDComm endpoint: its URL is where messages are
/// POSTed (`https://…/didcomm`), or the `did:nostr` of the mediator that takes them.
pub const DIDCOMM_SCHEME: &str = "didcomm";

/// A DIDCommMessaging service (DIDComm v2.1 shape): direct to `url`, or — when `url` is a
/// DID — through that mediator, its key agreement key the one routing key.
fn didcomm_service(id: &str, url: &str) -> Value {
    let routing: Vec<String> = if url.starts_with("did:") {
        vec![format!("{url}#x25519")]
    } else {
        Vec::new()
    };
    json!({
        "id": id,
        "type": "DIDCommMessaging",
        "serviceEndpoint": {"uri": url, "accept": ["didcomm/v2"], "routingKeys": routing},
    })
}

/// The DID document of the node whose verified descriptor is `d`.
pub fn document(d: &DescriptorContent) -> Value {
    let did = &d.did;
    let fragment = |key_type: &str| match key_type {
        "secp256k1-bip340" => "key-0",
        "ed25519" => "ed25519",
        _ => "x25519",
    };
    let methods: Vec<Value> = d
        .keys
        .iter()
        .filter_map(|k| {
            Some(json!({
                "id": format!("{did}#{}", fragment(&k.key_type)),
                "type": "Multikey",
                "controller": did,
                "publicKeyMultibase": multikey(&k.key_type, &k.public)?,
            }))
        })
        .collect();
    let has = |t: &str| d.keys.iter().any(|k| k.key_type == t);
    let refs = |types: &[&str]| -> Vec<String> {
        types
            .iter()
            .filter(|t| has(t))
            .map(|t| format!("{did}#{}", fragment(t)))
            .collect()
    };
    let services: Vec<Value> = d
        .relays
        .iter()
        .enumerate()
        .map(|(i, r)| json!({"id": format!("{did}#relay-{i}"), "type": "Relay", "serviceEndpoint": r}))
        .chain(d.endpoints.iter().enumerate().map(|(i, e)| {
            let id = format!("{did}#endpoint-{i}");
            if e.scheme == DIDCOMM_SCHEME {
                return didcomm_service(&id, &e.url);
            }
            if e.scheme == crate::provider::TERMS_SCHEME {
                return json!({"id": id, "type": "ComputeProvider", "serviceEndpoint": e.url});
            }
            json!({"id": id, "type": e.scheme, "serviceEndpoint": e.url})
        }))
        .collect();
    let mut doc = json!({
        "@context": CONTEXT,
        "id": did,
        "type": "DIDNostr",
        "verificationMethod": methods,
        "authentication": refs(&["secp256k1-bip340", "ed25519"]),
        "assertionMethod": refs(&["secp256k1-bip340", "ed25519"]),
        "keyAgreement": refs(&["x25519"]),
    });
    if !services.is_empty() {
        doc["service"] = json!(services);
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::{base58btc, multikey, parse_did};

    #[test]
    fn base58_and_multikeys_match_their_specs() {
        assert_eq!(base58btc(b"Hello World!"), "2NEpo7TZRRrLZSi2U");
        assert_eq!(base58btc(&[0, 0, 1]), "112");
        assert_eq!(base58btc(&[]), "");
        // every Ed25519 Multikey reads z6Mk…, every X25519 one z6LS… (the multicodec
        // prefixes in base58btc), whatever the key
        for key in [
            "00".repeat(32),
            "ff".repeat(32),
            "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29".to_owned(),
        ] {
            let ed = multikey("ed25519", &key).unwrap();
            let x = multikey("x25519", &key).unwrap();
            assert!(ed.starts_with("z6Mk") && ed.len() == 48, "{ed}");
            assert!(x.starts_with("z6LS") && x.len() == 48, "{x}");
        }
        let x = "124c0fa99407182ece5a24fad9b7f6674902fc422843d3128d38a0afbee0fdd2";
        assert_eq!(
            multikey("secp256k1-bip340", x).unwrap(),
            format!("fe70102{x}")
        );
        assert_eq!(multikey("rsa", x), None);
        assert_eq!(multikey("ed25519", "abcd"), None);
        assert!(parse_did(&format!("did:nostr:{x}")).is_ok());
        for bad in [
            "did:key:z6Mk",
            "did:nostr:ABCD",
            &format!("did:nostr:{}", x.to_uppercase()),
        ] {
            assert!(parse_did(bad).is_err(), "{bad}");
        }
    }
}
