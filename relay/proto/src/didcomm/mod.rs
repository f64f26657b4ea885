//! DIDComm Messaging v2 between nodes that know each other by DID: plaintext, signed
//! (JWS: EdDSA with the node's Ed25519 key, ES256K with its Nostr key), anoncrypt
//! (ECDH-ES+A256KW) and authcrypt (ECDH-1PU+A256KW, A256CBC-HS512) to the X25519 key
//! agreement keys of a DID document, and routing through mediators with `forward`
//! messages. Use it where a peer has a reachable DIDComm endpoint; NIP-59 gift wrap
//! ([`crate::nip59`]) is the fallback through any Nostr relay.
//!
//! - [`pack_signed`] and [`pack_encrypted`] (with [`Pack`] saying how) make a message
//!   to send; [`forward`] wraps one for each mediator a recipient's
//!   DIDCommMessaging service names;
//! - [`unpack`] opens any of them with a node's keys, checking every layer, the
//!   nesting, and that the sender a layer proves is the message's `from`; [`Unpacked`]
//!   says what was proven ([`Meta`]);
//! - [`PeerDoc`] reads the keys and services of any DID Core document.
//!
//! Only X25519 key agreement is implemented (what `did:nostr` documents carry); a JWE for
//! another curve is refused by name. Refusals are [`crate::Error::DidComm`].

mod doc;
mod jose;
mod wire;

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use doc::{PeerDoc, Service, did_of};
pub use jose::{ALG_ANON, ALG_AUTH, Enc, TYP_ENCRYPTED, TYP_SIGNED, VerifyKey};
use jose::{AuthSender, SignKey, err};
use wire::Packed;

use crate::{NodeKeys, Result};

/// `typ` of a plaintext message.
pub const TYP_PLAIN: &str = "application/didcomm-plain+json";
/// The message type of a mediator's `forward`.
pub const FORWARD: &str = "https://didcomm.org/routing/2.0/forward";
/// The largest packed message [`unpack`] reads.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;
/// The most layers (encryption in encryption in signature) one message may have.
const MAX_LAYERS: usize = 3;

/// A DIDComm plaintext message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Unique per sender.
    pub id: String,
    /// The message type URI (protocol, version, name).
    #[serde(rename = "type")]
    pub type_: String,
    /// The sender's DID; absent for anonymous messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The recipients' DIDs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to: Vec<String>,
    /// The thread this message belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thid: Option<String>,
    /// Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_time: Option<u64>,
    /// Unix seconds after which the message must not be processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_time: Option<u64>,
    /// The body.
    #[serde(default)]
    pub body: Value,
    /// Attachments, as sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Value>,
    /// Every other header, kept as sent.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Message {
    /// A message of `type_` with a fresh random id and the current time.
    ///
    /// # Errors
    /// [`crate::Error::Random`] if the random source fails.
    pub fn new(type_: &str, body: Value) -> Result<Message> {
        Ok(Message {
            id: uuid()?,
            type_: type_.to_owned(),
            from: None,
            to: Vec::new(),
            thid: None,
            created_time: Some(crate::unix_now()),
            expires_time: None,
            body,
            attachments: Vec::new(),
            extra: BTreeMap::new(),
        })
    }

    /// The plaintext message as JSON, with its `typ`.
    pub fn to_json(&self) -> Value {
        let mut v = serde_json::to_value(self).expect("a message serializes");
        v["typ"] = json!(TYP_PLAIN);
        v
    }
}

/// A random UUID (version 4), the usual form of message ids.
fn uuid() -> Result<String> {
    let mut b: [u8; 16] = jose::random(16)?[..].try_into().expect("16");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    ))
}

/// Which of a node's keys signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignWith {
    /// The Ed25519 key (`#ed25519`), EdDSA.
    Ed25519,
    /// The Nostr key (`#key-0`), ES256K.
    Secp256k1,
}

impl PeerDoc {
    /// What a node's own DID document says of its keys, without its services.
    pub fn of(keys: &NodeKeys) -> PeerDoc {
        let nostr = keys
            .nostr()
            .x_only_public_key()
            .0
            .public_key(secp256k1::Parity::Even);
        PeerDoc {
            did: keys.did(),
            agreement: vec![(kid(keys, "x25519"), keys.x25519_public())],
            authentication: vec![
                (kid(keys, "key-0"), VerifyKey::Secp256k1(nostr)),
                (
                    kid(keys, "ed25519"),
                    VerifyKey::Ed25519(keys.ed25519_public()),
                ),
            ],
            services: Vec::new(),
        }
    }
}

/// The key ids a node's DID document gives its keys.
fn kid(keys: &NodeKeys, fragment: &str) -> String {
    format!("{}#{fragment}", keys.did())
}

fn sign_key(keys: &NodeKeys, with: SignWith) -> (String, SignKey<'_>) {
    match with {
        SignWith::Ed25519 => (kid(keys, "ed25519"), SignKey::Ed25519(keys.ed25519())),
        SignWith::Secp256k1 => {
            // The document's key-0 is the even-y point of the x-only key: sign with the
            // secret whose public key that is (BIP-340's convention).
            let (_, parity) = keys.nostr().x_only_public_key();
            let sk = keys.nostr().secret_key();
            let sk = if parity == secp256k1::Parity::Odd {
                sk.negate()
            } else {
                sk
            };
            (kid(keys, "key-0"), SignKey::Secp256k1(sk))
        }
    }
}

fn check_from(msg: &Message, keys: &NodeKeys) -> Result<()> {
    if msg.from.as_deref() != Some(keys.did().as_str()) {
        return Err(err(format!(
            "a message signed or authcrypted by {} must say from: {0}",
            keys.did()
        )));
    }
    Ok(())
}

/// A signed message (JWS), non-repudiable; its `from` must be this node.
///
/// # Errors
/// [`crate::Error::DidComm`] when `from` is not this node.
pub fn pack_signed(msg: &Message, keys: &NodeKeys, with: SignWith) -> Result<Value> {
    check_from(msg, keys)?;
    let (kid, key) = sign_key(keys, with);
    Ok(jose::sign(msg.to_json().to_string().as_bytes(), &kid, &key))
}

/// How [`pack_encrypted`] protects a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pack {
    /// Authcrypt from this node (else anoncrypt).
    pub auth: bool,
    /// Sign inside the encryption.
    pub sign: Option<SignWith>,
    /// Hide an authcrypt sender from observers: authcrypt inside anoncrypt.
    pub protect_sender: bool,
    /// The content encryption of the anoncrypt layer (authcrypt is A256CBC-HS512).
    pub enc: Enc,
}

impl Default for Pack {
    fn default() -> Pack {
        Pack {
            auth: true,
            sign: None,
            protect_sender: false,
            enc: Enc::A256CbcHs512,
        }
    }
}

/// Encrypts `msg` to every key agreement key of `to` (which `msg.to` must name).
///
/// # Errors
/// [`crate::Error::DidComm`] when `to` has no X25519 key agreement key, `msg` does not
/// name it, or a signed or authcrypted message is not from this node.
pub fn pack_encrypted(msg: &Message, keys: &NodeKeys, to: &PeerDoc, how: Pack) -> Result<Value> {
    if !msg.to.contains(&to.did) {
        return Err(err(format!("the message's to does not name {}", to.did)));
    }
    if to.agreement.is_empty() {
        return Err(err(format!("{} has no X25519 key agreement key", to.did)));
    }
    if how.auth || how.sign.is_some() {
        check_from(msg, keys)?;
    }
    let mut payload = match how.sign {
        Some(with) => pack_signed(msg, keys, with)?,
        None => msg.to_json(),
    };
    if how.auth {
        let skid = kid(keys, "x25519");
        let sender = AuthSender {
            kid: &skid,
            secret: keys.x25519(),
        };
        payload = jose::seal(
            payload.to_string().as_bytes(),
            &to.agreement,
            Some(sender),
            Enc::A256CbcHs512,
        )?;
    }
    if !how.auth || how.protect_sender {
        payload = jose::seal(payload.to_string().as_bytes(), &to.agreement, None, how.enc)?;
    }
    Ok(payload)
}

/// Wraps `packed` (addressed to `next`) for a mediator: a `forward` message whose
/// attachment is `packed`, anoncrypted to the mediator's key agreement key `routing_key`
/// (a key of `mediator`).
///
/// # Errors
/// [`crate::Error::DidComm`] when `mediator` has no key `routing_key`.
pub fn forward(packed: &Value, next: &str, mediator: &PeerDoc, routing_key: &str) -> Result<Value> {
    let key = mediator
        .agreement
        .iter()
        .find(|(kid, _)| kid == routing_key)
        .ok_or_else(|| {
            err(format!(
                "{} has no key agreement key {routing_key}",
                mediator.did
            ))
        })?;
    let mut msg = Message::new(FORWARD, json!({ "next": next }))?;
    msg.to = vec![mediator.did.clone()];
    msg.attachments = vec![json!({ "data": { "json": packed } })];
    jose::seal(
        msg.to_json().to_string().as_bytes(),
        std::slice::from_ref(key),
        None,
        Enc::A256CbcHs512,
    )
}

/// The next hop and the message to pass on, of a `forward` message a mediator unpacked.
///
/// # Errors
/// [`crate::Error::DidComm`] when it is not a forward with `body.next` and one JSON
/// attachment.
pub fn forwarded(msg: &Message) -> Result<(String, Value)> {
    if msg.type_ != FORWARD {
        return Err(err(format!("{} is not a forward", msg.type_)));
    }
    let next = msg
        .body
        .get("next")
        .and_then(Value::as_str)
        .ok_or_else(|| err("a forward without body.next"))?;
    let [attachment] = msg.attachments.as_slice() else {
        return Err(err("a forward carries one attachment"));
    };
    let inner = attachment
        .get("data")
        .and_then(|d| {
            d.get("json").cloned().or_else(|| {
                let b = d.get("base64")?.as_str()?;
                serde_json::from_slice(&jose::unb64(b, "base64").ok()?).ok()
            })
        })
        .ok_or_else(|| err("a forward attachment without data.json or data.base64"))?;
    Ok((next.to_owned(), inner))
}

/// What the layers of an unpacked message proved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Meta {
    /// It was encrypted to us.
    pub encrypted: bool,
    /// An authcrypt layer proved the sender (repudiably).
    pub authenticated: bool,
    /// A signature proved the sender (non-repudiably).
    pub non_repudiation: bool,
    /// Encrypted with no sender authenticated by encryption.
    pub anonymous_sender: bool,
    /// Authcrypt inside anoncrypt.
    pub protected_sender: bool,
    /// The authcrypt sender's key id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encrypted_from: Option<String>,
    /// Our key id it was encrypted to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encrypted_to: Option<String>,
    /// The signer's key id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sign_from: Option<String>,
    /// The signature algorithm.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sign_alg: Option<&'static str>,
    /// The anoncrypt content encryption.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enc_alg_anon: Option<&'static str>,
    /// The authcrypt content encryption.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enc_alg_auth: Option<&'static str>,
}

/// An unpacked message and what proved it.
#[derive(Debug, Clone, PartialEq)]
pub struct Unpacked {
    /// The plaintext message.
    pub message: Message,
    /// What its layers proved.
    pub meta: Meta,
}

/// Finds the DID documents of senders (for authcrypt and signatures).
pub trait Resolve {
    /// The document of `did`, if known.
    fn resolve(&self, did: &str) -> Option<PeerDoc>;
}

impl Resolve for Vec<PeerDoc> {
    fn resolve(&self, did: &str) -> Option<PeerDoc> {
        self.iter()
            .find(|d| d.did == did)
            .cloned()
            .or_else(|| PeerDoc::from_did(did))
    }
}

fn sender_doc(docs: &dyn Resolve, kid: &str) -> Result<PeerDoc> {
    docs.resolve(did_of(kid)).ok_or_else(|| {
        err(format!(
            "unknown kid {kid}: no DID document for {}",
            did_of(kid)
        ))
    })
}

/// The key `kid` names in one of a document's relationships.
fn key_of<T: Copy>(keys: &[(String, T)], kid: &str, what: &str) -> Result<T> {
    keys.iter()
        .find(|(k, _)| k == kid)
        .map(|(_, key)| *key)
        .ok_or_else(|| err(format!("unknown kid {kid}: not {what} of its document")))
}

/// Opens a packed message addressed to this node, layer by layer: anoncrypt (optionally
/// around authcrypt), authcrypt, a signature, then the plaintext. Checks that signed and
/// authcrypted messages are `from` the key's DID, that encrypted ones name this node in
/// `to`, and that the message has not expired at `now`. Each layer is read into typed
/// fields, not a JSON tree: a layer of the wrong shape is refused where it stops fitting,
/// and a JWE's header and recipients are checked before its content is decoded.
///
/// # Errors
/// [`crate::Error::DidComm`] naming the layer and the check that failed.
pub fn unpack(packed: &[u8], keys: &NodeKeys, docs: &dyn Resolve, now: u64) -> Result<Unpacked> {
    if packed.len() > MAX_MESSAGE_BYTES {
        return Err(err(format!("a message over {MAX_MESSAGE_BYTES} bytes")));
    }
    let our_kid = kid(keys, "x25519");
    let mut meta = Meta::default();
    let mut layers = 0;
    let mut current: Cow<'_, [u8]> = Cow::Borrowed(packed);
    let mut what = "not JSON";
    let message = loop {
        layers += 1;
        if layers > MAX_LAYERS + 1 {
            return Err(err(format!("more than {MAX_LAYERS} layers")));
        }
        let inner = match wire::read(&current, what)? {
            Packed::Jwe(jwe) => {
                if meta.non_repudiation || meta.authenticated {
                    return Err(err("encryption inside a signature or authcrypt"));
                }
                let opened = jose::open(
                    &jwe,
                    &|kid| (kid == our_kid).then(|| keys.x25519().clone()),
                    &|skid| {
                        key_of(
                            &sender_doc(docs, skid)?.agreement,
                            skid,
                            "a key agreement key",
                        )
                    },
                )?;
                if meta.encrypted && opened.skid.is_none() {
                    return Err(err("anoncrypt inside anoncrypt"));
                }
                meta.encrypted = true;
                meta.encrypted_to = Some(opened.kid);
                match opened.skid {
                    Some(skid) => {
                        meta.protected_sender = meta.enc_alg_anon.is_some();
                        meta.authenticated = true;
                        meta.anonymous_sender = false;
                        meta.encrypted_from = Some(skid);
                        meta.enc_alg_auth = Some(opened.enc.name());
                    }
                    None => {
                        meta.anonymous_sender = true;
                        meta.enc_alg_anon = Some(opened.enc.name());
                    }
                }
                what = "the decrypted payload is not JSON";
                opened.plain
            }
            Packed::Jws(jws) => {
                if meta.non_repudiation {
                    return Err(err("a signature inside a signature"));
                }
                let verified = jose::verify(&jws, &|kid| {
                    key_of(
                        &sender_doc(docs, kid)?.authentication,
                        kid,
                        "an authentication key",
                    )
                })?;
                meta.non_repudiation = true;
                meta.sign_from = Some(verified.kid);
                meta.sign_alg = Some(verified.alg);
                what = "the signed payload is not JSON";
                verified.payload
            }
            Packed::Plain(head) => break plaintext(&current, &head)?,
        };
        current = Cow::Owned(inner);
    };
    for (what, kid) in [
        ("signed", &meta.sign_from),
        ("authcrypted", &meta.encrypted_from),
    ] {
        if let Some(kid) = kid
            && message.from.as_deref() != Some(did_of(kid))
        {
            return Err(err(format!(
                "{what} by {kid} but from {}",
                message.from.as_deref().unwrap_or("nobody")
            )));
        }
    }
    if meta.encrypted && !message.to.is_empty() && !message.to.contains(&keys.did()) {
        return Err(err(format!("encrypted to us but to {:?}", message.to)));
    }
    if let Some(expires) = message.expires_time
        && expires <= now
    {
        return Err(err(format!("the message expired at {expires} (now {now})")));
    }
    Ok(Unpacked { message, meta })
}

/// A plaintext message's `typ`, `id` and `type`, checked before its body is read; its type.
fn head_type<'h>(head: &'h wire::Head<'_>) -> Result<&'h str> {
    if let Some(typ) = &head.typ
        && typ.as_str() != TYP_PLAIN
    {
        return Err(err(format!("typ {:?} is not {TYP_PLAIN}", typ.as_str())));
    }
    if head.id.is_none() {
        return Err(err("not a DIDComm message: missing field `id`"));
    }
    head.type_
        .as_ref()
        .map(wire::Text::as_str)
        .ok_or_else(|| err("not a DIDComm message: missing field `type`"))
}

fn plaintext(bytes: &[u8], head: &wire::Head<'_>) -> Result<Message> {
    head_type(head)?;
    let mut message: Message =
        serde_json::from_slice(bytes).map_err(|e| err(format!("not a DIDComm message: {e}")))?;
    message.extra.remove("typ");
    Ok(message)
}

/// What a packed message is on the outside, as [`outer`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outer {
    /// A JWE (`application/didcomm-encrypted+json`).
    Encrypted,
    /// A JWS (`application/didcomm-signed+json`).
    Signed,
    /// A plaintext message, of this type.
    Plain(String),
}

/// What `packed` is on the outside, read as [`unpack`] reads its first layer but without
/// opening it, and — for a plaintext — without reading its body into memory.
///
/// # Errors
/// [`crate::Error::DidComm`], as [`unpack`] refuses a first layer that does not fit.
pub fn outer(packed: &[u8]) -> Result<Outer> {
    if packed.len() > MAX_MESSAGE_BYTES {
        return Err(err(format!("a message over {MAX_MESSAGE_BYTES} bytes")));
    }
    Ok(match wire::read(packed, "not JSON")? {
        Packed::Jwe(_) => Outer::Encrypted,
        Packed::Jws(_) => Outer::Signed,
        Packed::Plain(head) => Outer::Plain(head_type(&head)?.to_owned()),
    })
}

/// The key ids a JWE is encrypted to, its protected header (`alg`, `enc`, `epk`, `apv`, an
/// authcrypt sender) and recipients checked as [`unpack`] checks them and its `iv`,
/// `ciphertext` and `tag` present — without decoding or decrypting anything: what a
/// mediator checks of a message before holding it for another.
///
/// # Errors
/// [`crate::Error::DidComm`] when `packed` is not a JWE (a plaintext or a signed message),
/// or its header or recipients do not hold.
pub fn encrypted_to(packed: &[u8]) -> Result<Vec<String>> {
    if packed.len() > MAX_MESSAGE_BYTES {
        return Err(err(format!("a message over {MAX_MESSAGE_BYTES} bytes")));
    }
    let jwe = match wire::read(packed, "not JSON")? {
        Packed::Jwe(jwe) => jwe,
        Packed::Jws(_) => return Err(err("a signed message (JWS), not an encrypted one")),
        Packed::Plain(_) => return Err(err("a plaintext message, not an encrypted one")),
    };
    let checked = jose::check(&jwe)?;
    for (field, name) in [
        (&jwe.iv, "iv"),
        (&jwe.ciphertext, "ciphertext"),
        (&jwe.tag, "tag"),
    ] {
        if field.is_none() {
            return Err(err(format!("the JWE has no {name:?} string")));
        }
    }
    Ok(checked.kids.iter().map(|k| (*k).to_owned()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(seed: u8) -> NodeKeys {
        NodeKeys::from_secret_bytes([seed; 32], [seed + 1; 32], [seed + 2; 32]).unwrap()
    }

    fn message(from: &NodeKeys, to: &NodeKeys) -> Message {
        let mut m = Message::new("https://fleetmesh.org/test/1.0/t", json!({"n": 1})).unwrap();
        m.from = Some(from.did());
        m.to = vec![to.did()];
        m
    }

    fn refused(packed: &Value, to: &NodeKeys, docs: &Vec<PeerDoc>, why: &str) {
        let e = unpack(packed.to_string().as_bytes(), to, docs, 0).unwrap_err();
        assert!(e.to_string().contains(why), "{e} should say {why:?}");
    }

    #[test]
    fn every_way_of_packing_opens_and_says_what_it_proved() {
        let (a, b) = (keys(1), keys(7));
        let docs = vec![PeerDoc::of(&a)];
        let to = PeerDoc::of(&b);
        for auth in [false, true] {
            for sign in [None, Some(SignWith::Ed25519), Some(SignWith::Secp256k1)] {
                for enc in [Enc::A256CbcHs512, Enc::A256Gcm, Enc::Xc20p] {
                    let protect = auth && enc != Enc::A256CbcHs512;
                    let how = Pack {
                        auth,
                        sign,
                        protect_sender: protect,
                        enc,
                    };
                    let m = message(&a, &b);
                    let packed = pack_encrypted(&m, &a, &to, how).unwrap();
                    let u = unpack(packed.to_string().as_bytes(), &b, &docs, 0).unwrap();
                    assert_eq!(u.message, m, "{how:?}");
                    assert_eq!(u.meta.authenticated, auth);
                    assert_eq!(u.meta.protected_sender, protect);
                    assert_eq!(u.meta.non_repudiation, sign.is_some());
                    // the DID alone verifies an ES256K signature: no document needed
                    if !auth && sign == Some(SignWith::Secp256k1) {
                        let alone = unpack(packed.to_string().as_bytes(), &b, &vec![], 0);
                        assert_eq!(alone.unwrap().message, m);
                    }
                }
            }
        }
    }

    #[test]
    fn layers_that_do_not_hold_together_are_refused_by_name() {
        let (a, b) = (keys(1), keys(7));
        let docs = vec![PeerDoc::of(&a)];
        let to = PeerDoc::of(&b);
        let m = message(&a, &b);
        let anon = Pack {
            auth: false,
            ..Pack::default()
        };
        let anon_jwe = pack_encrypted(&m, &a, &to, anon).unwrap();
        let seal = |inner: &Value| {
            jose::seal(
                inner.to_string().as_bytes(),
                &to.agreement,
                None,
                Enc::Xc20p,
            )
            .unwrap()
        };
        refused(&seal(&anon_jwe), &b, &docs, "anoncrypt inside anoncrypt");
        let signed_jwe = jose::sign(
            anon_jwe.to_string().as_bytes(),
            &kid(&a, "ed25519"),
            &SignKey::Ed25519(a.ed25519()),
        );
        refused(&signed_jwe, &b, &docs, "encryption inside a signature");
        // from is not the signer
        let mut forged = message(&a, &b);
        forged.from = Some(keys(3).did());
        let (k, key) = sign_key(&a, SignWith::Ed25519);
        let jws = jose::sign(forged.to_json().to_string().as_bytes(), &k, &key);
        refused(&jws, &b, &docs, "but from did:nostr:");
        // two signatures
        let mut two = pack_signed(&m, &a, SignWith::Ed25519).unwrap();
        let first = two["signatures"][0].clone();
        two["signatures"].as_array_mut().unwrap().push(first);
        refused(&two, &b, &docs, "one signature, not 2");
        // encrypted to us, but the message is to someone else
        let mut other = message(&a, &b);
        other.to = vec![keys(3).did()];
        refused(&seal(&other.to_json()), &b, &docs, "encrypted to us but to");
        // an unknown enc, a P-256 epk, a small-order epk
        let header = |jwe: &Value| -> Value {
            serde_json::from_slice(&jose::unb64(jwe["protected"].as_str().unwrap(), "").unwrap())
                .unwrap()
        };
        let with_header = |h: &Value| {
            let mut jwe = anon_jwe.clone();
            jwe["protected"] = json!(jose::b64(h.to_string().as_bytes()));
            jwe
        };
        let mut h = header(&anon_jwe);
        h["enc"] = json!("A128GCM");
        refused(&with_header(&h), &b, &docs, "unknown enc");
        let mut h = header(&anon_jwe);
        h["epk"] = json!({"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"});
        refused(&with_header(&h), &b, &docs, "only X25519");
        let mut h = header(&anon_jwe);
        h["epk"]["x"] = json!(jose::b64(&[0u8; 32]));
        refused(&with_header(&h), &b, &docs, "small order");
        let mut h = header(&anon_jwe);
        h["alg"] = json!("ECDH-ES+A128KW");
        refused(&with_header(&h), &b, &docs, "unsupported alg");
        // too big, not JSON, a plaintext of another typ
        let big = vec![b' '; MAX_MESSAGE_BYTES + 1];
        assert!(
            unpack(&big, &b, &docs, 0)
                .unwrap_err()
                .to_string()
                .contains("over")
        );
        let mut plain = m.to_json();
        plain["typ"] = json!("didcomm-plain+json");
        refused(&plain, &b, &docs, "is not application/didcomm-plain+json");
    }

    #[test]
    fn a_message_is_told_apart_and_a_jwe_read_for_its_recipients_without_opening_it() {
        let (a, b) = (keys(1), keys(7));
        let m = message(&a, &b);
        let jwe = pack_encrypted(&m, &a, &PeerDoc::of(&b), Pack::default()).unwrap();
        let jws = pack_signed(&m, &a, SignWith::Ed25519).unwrap();
        let plain = m.to_json();
        let bytes = |v: &Value| v.to_string().into_bytes();
        assert_eq!(outer(&bytes(&jwe)).unwrap(), Outer::Encrypted);
        assert_eq!(outer(&bytes(&jws)).unwrap(), Outer::Signed);
        assert_eq!(
            outer(&bytes(&plain)).unwrap(),
            Outer::Plain(m.type_.clone())
        );
        assert_eq!(encrypted_to(&bytes(&jwe)).unwrap(), [kid(&b, "x25519")]);
        for (not, why) in [(&jws, "signed message"), (&plain, "plaintext message")] {
            let e = encrypted_to(&bytes(not)).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
        // the header is checked, the content never touched: a ciphertext that is not
        // base64 passes, an unknown alg does not
        let mut garbled = jwe.clone();
        garbled["ciphertext"] = json!("*not base64*");
        assert!(encrypted_to(&bytes(&garbled)).is_ok());
        let mut h: Value =
            serde_json::from_slice(&jose::unb64(jwe["protected"].as_str().unwrap(), "").unwrap())
                .unwrap();
        h["alg"] = json!("dir");
        let mut other = jwe.clone();
        other["protected"] = json!(jose::b64(h.to_string().as_bytes()));
        let e = encrypted_to(&bytes(&other)).unwrap_err().to_string();
        assert!(e.contains("unsupported alg"), "{e}");
        let mut no_tag = jwe.clone();
        no_tag.as_object_mut().unwrap().remove("tag");
        let e = encrypted_to(&bytes(&no_tag)).unwrap_err().to_string();
        assert!(e.contains("no \"tag\""), "{e}");
        // a plaintext without an id, and one whose body is never read: its head decides
        let e = outer(br#"{"type":"t","body":[0,0,0]}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field `id`"), "{e}");
    }

    #[test]
    fn a_forward_names_its_next_hop_and_carries_one_message() {
        let (a, b, m) = (keys(1), keys(7), keys(13));
        let packed =
            pack_encrypted(&message(&a, &b), &a, &PeerDoc::of(&b), Pack::default()).unwrap();
        let mediator = PeerDoc::of(&m);
        let fwd = forward(&packed, &b.did(), &mediator, &kid(&m, "x25519")).unwrap();
        let opened = unpack(fwd.to_string().as_bytes(), &m, &vec![], 0).unwrap();
        assert_eq!(forwarded(&opened.message).unwrap(), (b.did(), packed));
        assert!(forward(&fwd, "x", &mediator, "did:nostr:x#other").is_err());
        let mut bad = opened.message.clone();
        bad.attachments.clear();
        assert!(
            forwarded(&bad)
                .unwrap_err()
                .to_string()
                .contains("one attachment")
        );
        bad.type_ = "https://didcomm.org/basicmessage/2.0/message".into();
        assert!(
            forwarded(&bad)
                .unwrap_err()
                .to_string()
                .contains("not a forward")
        );
    }
}
