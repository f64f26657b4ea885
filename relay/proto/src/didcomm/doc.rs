//! The part of a DID document DIDComm needs — key agreement keys, authentication keys,
//! DIDCommMessaging services — read from any W3C DID Core document, not only ours:
//! Multikey and the 2020 suites (`publicKeyMultibase`), JsonWebKey2020 (`publicKeyJwk`),
//! the 2018/2019 suites (`publicKeyBase58`). Relationships may reference a method (by
//! absolute or relative DID URL) or embed it.

use serde_json::Value;

use super::jose::{VerifyKey, err, unb64};
use crate::Result;

/// A DIDCommMessaging service of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// Where to send (`https://…`, `ws://…`).
    pub uri: String,
    /// Mediators' key agreement key ids, the first hop first; empty for direct delivery.
    pub routing_keys: Vec<String>,
}

/// The keys and services of one DID that DIDComm uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerDoc {
    /// The DID.
    pub did: String,
    /// Key agreement keys (X25519): key id and public key.
    pub agreement: Vec<(String, [u8; 32])>,
    /// Authentication keys: key id and key.
    pub authentication: Vec<(String, VerifyKey)>,
    /// DIDCommMessaging services, in document order.
    pub services: Vec<Service>,
}

/// The DID of a DID URL (`did:x:y#frag` → `did:x:y`).
pub fn did_of(kid: &str) -> &str {
    kid.split_once('#').map_or(kid, |(did, _)| did)
}

/// Base58btc decoding (Bitcoin's alphabet).
fn unbase58(s: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8; 58] = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
    if s.len() > 256 {
        return None;
    }
    let zeros = s.bytes().take_while(|&b| b == b'1').count();
    // base-256 digits, least significant first
    let mut bytes: Vec<u8> = Vec::new();
    for c in s.bytes() {
        let mut carry = ALPHABET.iter().position(|&a| a == c)? as u32;
        for b in &mut bytes {
            carry += u32::from(*b) * 58;
            *b = (carry & 0xff) as u8;
            carry >>= 8;
        }
        while carry > 0 {
            bytes.push((carry & 0xff) as u8);
            carry >>= 8;
        }
    }
    let mut out = vec![0u8; zeros];
    out.extend(bytes.iter().rev());
    Some(out)
}

enum Key {
    Ed25519([u8; 32]),
    X25519([u8; 32]),
    Secp256k1(secp256k1::PublicKey),
}

fn key32(bytes: &[u8]) -> Option<[u8; 32]> {
    bytes.try_into().ok()
}

fn from_multicodec(bytes: &[u8]) -> Option<Key> {
    match bytes {
        [0xed, 0x01, rest @ ..] => key32(rest).map(Key::Ed25519),
        [0xec, 0x01, rest @ ..] => key32(rest).map(Key::X25519),
        [0xe7, 0x01, rest @ ..] => secp256k1::PublicKey::from_slice(rest)
            .ok()
            .map(Key::Secp256k1),
        _ => None,
    }
}

fn from_jwk(jwk: &Value) -> Option<Key> {
    let field = |name: &str| jwk.get(name).and_then(Value::as_str);
    let bytes = |name: &str| field(name).and_then(|v| unb64(v, name).ok());
    match (field("kty")?, field("crv")?) {
        ("OKP", "Ed25519") => key32(&bytes("x")?).map(Key::Ed25519),
        ("OKP", "X25519") => key32(&bytes("x")?).map(Key::X25519),
        ("EC", "secp256k1") => {
            let point = [&[4u8][..], &bytes("x")?, &bytes("y")?].concat();
            secp256k1::PublicKey::from_slice(&point)
                .ok()
                .map(Key::Secp256k1)
        }
        _ => None,
    }
}

fn method_key(method: &Value) -> Option<Key> {
    if let Some(mb) = method.get("publicKeyMultibase").and_then(Value::as_str) {
        let bytes = match mb.split_at_checked(1)? {
            ("z", rest) => unbase58(rest)?,
            ("f", rest) => hex::decode(rest).ok()?,
            _ => return None,
        };
        return from_multicodec(&bytes);
    }
    if let Some(jwk) = method.get("publicKeyJwk") {
        return from_jwk(jwk);
    }
    let raw = unbase58(method.get("publicKeyBase58").and_then(Value::as_str)?)?;
    match method.get("type").and_then(Value::as_str)? {
        "Ed25519VerificationKey2018" => key32(&raw).map(Key::Ed25519),
        "X25519KeyAgreementKey2019" => key32(&raw).map(Key::X25519),
        _ => None,
    }
}

impl PeerDoc {
    /// Reads a DID document.
    ///
    /// # Errors
    /// [`crate::Error::DidComm`] when it has no `id`, or a relationship references a
    /// method it does not define, or a referenced key cannot be read.
    pub fn parse(doc: &Value) -> Result<PeerDoc> {
        let did = doc
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| err("the DID document has no id"))?
            .to_owned();
        let absolute = |id: &str| {
            if id.starts_with('#') {
                format!("{did}{id}")
            } else {
                id.to_owned()
            }
        };
        let methods: Vec<&Value> = doc
            .get("verificationMethod")
            .and_then(Value::as_array)
            .map(|m| m.iter().collect())
            .unwrap_or_default();
        let resolve = |entry: &Value| -> Result<(String, Key)> {
            let (id, method) = match entry {
                Value::String(id) => {
                    let id = absolute(id);
                    let method = methods
                        .iter()
                        .find(|m| {
                            m.get("id").and_then(Value::as_str).map(absolute) == Some(id.clone())
                        })
                        .ok_or_else(|| err(format!("{id} is referenced but not defined")))?;
                    (id, *method)
                }
                object => {
                    let id = object
                        .get("id")
                        .and_then(Value::as_str)
                        .ok_or_else(|| err("an embedded method has no id"))?;
                    (absolute(id), object)
                }
            };
            let key = method_key(method).ok_or_else(|| {
                err(format!(
                    "{id}: not an Ed25519, X25519 or secp256k1 key this reads"
                ))
            })?;
            Ok((id, key))
        };
        let relation = |name: &str| -> Result<Vec<(String, Key)>> {
            doc.get(name)
                .and_then(Value::as_array)
                .map(|refs| refs.iter().map(&resolve).collect())
                .unwrap_or(Ok(Vec::new()))
        };
        let agreement = relation("keyAgreement")?
            .into_iter()
            .filter_map(|(id, k)| match k {
                Key::X25519(x) => Some((id, x)),
                _ => None,
            })
            .collect();
        let authentication = relation("authentication")?
            .into_iter()
            .filter_map(|(id, k)| match k {
                Key::Ed25519(e) => Some((id, VerifyKey::Ed25519(e))),
                Key::Secp256k1(p) => Some((id, VerifyKey::Secp256k1(p))),
                Key::X25519(_) => None,
            })
            .collect();
        let services = doc
            .get("service")
            .and_then(Value::as_array)
            .map(|s| s.iter().filter_map(service).collect())
            .unwrap_or_default();
        Ok(PeerDoc {
            did,
            agreement,
            authentication,
            services,
        })
    }

    /// What the DID alone says, for a `did:nostr` DID: its Nostr key (`#key-0`) as an
    /// authentication key — enough to verify an ES256K-signed message from it.
    pub fn from_did(did: &str) -> Option<PeerDoc> {
        let x = crate::did::parse_did(did).ok()?;
        let key = secp256k1::PublicKey::from_slice(&[&[2u8][..], &x].concat()).ok()?;
        Some(PeerDoc {
            did: did.to_owned(),
            agreement: Vec::new(),
            authentication: vec![(format!("{did}#key-0"), VerifyKey::Secp256k1(key))],
            services: Vec::new(),
        })
    }
}

fn service(s: &Value) -> Option<Service> {
    if s.get("type").and_then(Value::as_str) != Some("DIDCommMessaging") {
        return None;
    }
    let endpoint = s.get("serviceEndpoint")?;
    let (uri, routing) = match endpoint {
        Value::String(uri) => (uri.clone(), None),
        object => (
            object.get("uri").and_then(Value::as_str)?.to_owned(),
            object.get("routingKeys"),
        ),
    };
    let routing_keys = routing
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    Some(Service { uri, routing_keys })
}

#[cfg(test)]
mod tests {
    use super::unbase58;
    use crate::did::base58btc;

    #[test]
    fn base58_decodes_what_it_encodes() {
        for bytes in [&b""[..], &[0, 0, 1], b"Hello World!", &[0xff; 34]] {
            assert_eq!(unbase58(&base58btc(bytes)).unwrap(), bytes);
        }
        assert_eq!(unbase58("0OIl"), None);
    }
}
