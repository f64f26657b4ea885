//! NIP-01 events: the signed record everything in fleetmesh travels as.
//!
//! - [`UnsignedEvent`] is built by the author and turned into an [`Event`] by
//!   [`UnsignedEvent::sign`], which computes the id and a BIP-340 signature.
//! - [`Event::from_json`] parses a wire event **without verifying it**; call
//!   [`Event::verify`] (id, then signature) before trusting it.

pub mod canonical;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// A signed Nostr event, as it travels on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// SHA-256 of the canonical serialization.
    pub id: [u8; 32],
    /// BIP-340 x-only public key of the author.
    pub pubkey: [u8; 32],
    /// Unix time in seconds.
    pub created_at: u64,
    /// Event kind (see `fleetmesh_schemas::constants::kind`).
    pub kind: u16,
    /// Tags: each a non-empty list of strings.
    pub tags: Vec<Vec<String>>,
    /// Arbitrary string content; JSON for most fleetmesh kinds.
    pub content: String,
    /// BIP-340 Schnorr signature over `id`.
    pub sig: [u8; 64],
}

/// An event before signing: the author's fields only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsignedEvent {
    /// Unix time in seconds.
    pub created_at: u64,
    /// Event kind.
    pub kind: u16,
    /// Tags.
    pub tags: Vec<Vec<String>>,
    /// Content.
    pub content: String,
}

impl UnsignedEvent {
    /// Computes the id for `keypair`'s public key and signs it with fresh auxiliary
    /// randomness (BIP-340's recommended nonce hardening).
    ///
    /// # Errors
    /// [`Error::Random`] if the OS random source fails.
    pub fn sign(self, keypair: &secp256k1::Keypair) -> Result<Event> {
        let mut aux = [0u8; 32];
        getrandom::fill(&mut aux).map_err(|e| Error::Random(e.to_string()))?;
        Ok(self.sign_with_aux(keypair, &aux))
    }

    /// Signs with the given BIP-340 auxiliary randomness (deterministic; for tests and
    /// vectors).
    pub fn sign_with_aux(self, keypair: &secp256k1::Keypair, aux: &[u8; 32]) -> Event {
        let pubkey = keypair.x_only_public_key().0.to_byte_array();
        let id = canonical::event_id(
            &pubkey,
            self.created_at,
            self.kind,
            &self.tags,
            &self.content,
        );
        let sig = sign_schnorr(keypair, &id, aux);
        Event {
            id,
            pubkey,
            created_at: self.created_at,
            kind: self.kind,
            tags: self.tags,
            content: self.content,
            sig,
        }
    }
}

/// NIP-01 replaceable kinds: 0, 3 and 10000–19999.
pub fn kind_is_replaceable(kind: u16) -> bool {
    kind == 0 || kind == 3 || (10000..20000).contains(&kind)
}

/// BIP-340 signature of a 32-byte message (an event id) with the given auxiliary
/// randomness.
pub fn sign_schnorr(keypair: &secp256k1::Keypair, msg: &[u8; 32], aux: &[u8; 32]) -> [u8; 64] {
    secp256k1::schnorr::sign_with_aux_rand(msg, keypair, aux).to_byte_array()
}

/// Checks a BIP-340 signature of a 32-byte message (an event id) by an x-only public key.
/// Returns false for a public key that is not on the curve.
pub fn verify_schnorr(pubkey: &[u8; 32], msg: &[u8; 32], sig: &[u8; 64]) -> bool {
    let Ok(pubkey) = secp256k1::XOnlyPublicKey::from_byte_array(*pubkey) else {
        return false;
    };
    let sig = secp256k1::schnorr::Signature::from_byte_array(*sig);
    secp256k1::schnorr::verify(&sig, msg, &pubkey).is_ok()
}

/// The JSON shape of an event on the wire. Hex fields borrow from the input (they never
/// contain escapes); a hex field that arrives escaped is malformed anyway.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire<'a> {
    #[serde(borrow)]
    id: &'a str,
    #[serde(borrow)]
    pubkey: &'a str,
    created_at: u64,
    kind: u16,
    tags: Vec<Vec<String>>,
    content: String,
    #[serde(borrow)]
    sig: &'a str,
}

/// The JSON shape of an event, for writing.
#[derive(Serialize)]
struct WireOut<'a> {
    id: String,
    pubkey: String,
    created_at: u64,
    kind: u16,
    tags: &'a [Vec<String>],
    content: &'a str,
    sig: String,
}

/// Lowercase hex digit values; 0xff marks anything else (uppercase included: NIP-01 ids,
/// keys and signatures are lowercase).
const HEX_VALUE: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

fn decode_hex<const N: usize>(field: &'static str, s: &str) -> Result<[u8; N]> {
    let bad = || Error::InvalidEvent {
        field,
        reason: format!("must be {} lowercase hex characters", N * 2),
    };
    let bytes = s.as_bytes();
    if bytes.len() != N * 2 {
        return Err(bad());
    }
    let mut out = [0u8; N];
    let mut invalid = 0u8;
    for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        let (hi, lo) = (HEX_VALUE[pair[0] as usize], HEX_VALUE[pair[1] as usize]);
        invalid |= (hi | lo) & 0xf0;
        *o = (hi << 4) | (lo & 0x0f);
    }
    if invalid != 0 {
        return Err(bad());
    }
    Ok(out)
}

impl Event {
    /// Parses an event from its JSON form. Checks the shape (fields, hex lengths) only:
    /// **does not verify** the id or the signature.
    ///
    /// # Errors
    /// [`Error::InvalidEvent`] naming the first malformed field.
    pub fn from_json(json: &str) -> Result<Event> {
        let wire: Wire<'_> = serde_json::from_str(json).map_err(|e| Error::InvalidEvent {
            field: "event",
            reason: e.to_string(),
        })?;
        Event::from_wire(wire)
    }

    /// The signed event of an HTTP `Authorization: Nostr <base64 event>` header value (the
    /// scheme of NIP-98 and Blossom's BUD-01), decoded and verified; what it authorizes is
    /// the caller's to check (kind, tags, times).
    ///
    /// # Errors
    /// Why not, in words: another scheme, not base64, not an event, or an event whose id or
    /// signature does not hold.
    pub fn from_authorization(value: &str) -> std::result::Result<Event, String> {
        use base64::Engine as _;
        let b64 = value
            .strip_prefix("Nostr ")
            .ok_or_else(|| "the Authorization scheme must be Nostr".to_string())?;
        let json = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|e| format!("the authorization is not base64: {e}"))?;
        let ev = Event::from_json(&String::from_utf8_lossy(&json))
            .map_err(|e| format!("the authorization is not an event: {e}"))?;
        ev.verify()
            .map_err(|e| format!("the authorization does not verify: {e}"))?;
        Ok(ev)
    }

    /// Parses a whole `["EVENT", {...}]` client message in one pass, borrowing the hex
    /// fields from `text` instead of building a JSON tree first (the relay's hot path).
    /// Checks the shape only: **does not verify**. `None` for anything else, a malformed
    /// event included: the caller then takes the general path, which names what is wrong.
    pub fn from_event_message(text: &str) -> Option<Event> {
        let (tag, wire): (&str, Wire<'_>) = serde_json::from_str(text).ok()?;
        if tag != "EVENT" {
            return None;
        }
        Event::from_wire(wire).ok()
    }

    /// Like [`Event::from_json`], from an already parsed JSON value.
    ///
    /// # Errors
    /// [`Error::InvalidEvent`] naming the first malformed field.
    pub fn from_value(value: &serde_json::Value) -> Result<Event> {
        let wire = Wire::deserialize(value).map_err(|e| Error::InvalidEvent {
            field: "event",
            reason: e.to_string(),
        })?;
        Event::from_wire(wire)
    }

    fn from_wire(w: Wire<'_>) -> Result<Event> {
        if let Some(i) = w.tags.iter().position(Vec::is_empty) {
            return Err(Error::InvalidEvent {
                field: "tags",
                reason: format!("tag {i} is empty"),
            });
        }
        Ok(Event {
            id: decode_hex("id", w.id)?,
            pubkey: decode_hex("pubkey", w.pubkey)?,
            created_at: w.created_at,
            kind: w.kind,
            tags: w.tags,
            content: w.content,
            sig: decode_hex("sig", w.sig)?,
        })
    }

    /// Checks that `id` is the hash of the event's fields and that `sig` is a valid BIP-340
    /// signature of `id` by `pubkey`.
    ///
    /// # Errors
    /// [`Error::InvalidEvent`] with field `id` or `sig` (or `pubkey` for a key that is not
    /// on the curve).
    pub fn verify(&self) -> Result<()> {
        let id = canonical::event_id(
            &self.pubkey,
            self.created_at,
            self.kind,
            &self.tags,
            &self.content,
        );
        if id != self.id {
            return Err(Error::InvalidEvent {
                field: "id",
                reason: "does not match the event's canonical hash".into(),
            });
        }
        // Parsing an x-only key costs a square root: do it once.
        let pubkey = secp256k1::XOnlyPublicKey::from_byte_array(self.pubkey).map_err(|_| {
            Error::InvalidEvent {
                field: "pubkey",
                reason: "not a valid x-only secp256k1 public key".into(),
            }
        })?;
        let sig = secp256k1::schnorr::Signature::from_byte_array(self.sig);
        secp256k1::schnorr::verify(&sig, &self.id, &pubkey).map_err(|_| Error::InvalidEvent {
            field: "sig",
            reason: "signature verification failed".into(),
        })
    }

    /// The event's JSON form.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.to_wire()).expect("an event always serializes")
    }

    /// The event's JSON form as a value.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self.to_wire()).expect("an event always serializes")
    }

    fn to_wire(&self) -> WireOut<'_> {
        WireOut {
            id: hex::encode(self.id),
            pubkey: hex::encode(self.pubkey),
            created_at: self.created_at,
            kind: self.kind,
            tags: &self.tags,
            content: &self.content,
            sig: hex::encode(self.sig),
        }
    }

    /// The id as lowercase hex.
    pub fn id_hex(&self) -> String {
        hex::encode(self.id)
    }

    /// NIP-01 replaceable: kinds 0, 3 and 10000–19999 (one event per author and kind).
    pub fn is_replaceable(&self) -> bool {
        kind_is_replaceable(self.kind)
    }

    /// NIP-01 ephemeral: kinds 20000–29999 (fanned out, never stored).
    pub fn is_ephemeral(&self) -> bool {
        (20000..30000).contains(&self.kind)
    }

    /// NIP-01 addressable: kinds 30000–39999 (one event per author, kind and `d` tag).
    pub fn is_addressable(&self) -> bool {
        (30000..40000).contains(&self.kind)
    }

    /// The `d` tag's value for addressable events (`""` when the tag is absent), `Some("")`
    /// for replaceable events, `None` for the rest: the key under which versions replace
    /// each other, together with kind and pubkey.
    pub fn replacement_key(&self) -> Option<&str> {
        if self.is_addressable() {
            Some(self.tag_value("d").unwrap_or(""))
        } else if self.is_replaceable() {
            Some("")
        } else {
            None
        }
    }

    /// NIP-40: the `expiration` tag as Unix seconds, if present and well formed.
    pub fn expiration(&self) -> Option<u64> {
        self.tag_value("expiration").and_then(|v| v.parse().ok())
    }

    /// The first value of the first tag named `name`.
    pub fn tag_value(&self, name: &str) -> Option<&str> {
        self.tags
            .iter()
            .find(|t| t.first().is_some_and(|n| n == name))
            .and_then(|t| t.get(1))
            .map(String::as_str)
    }
}
