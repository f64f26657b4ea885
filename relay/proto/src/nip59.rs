//! NIP-59 gift wrap on NIP-44 v2: how a node sends a private message to a key through any
//! Nostr relay, the sender hidden from everyone but the recipient.
//!
//! Three layers, each NIP-44 encrypted to the recipient:
//! - the **rumor**: the message as an event with an id and no signature (so a leaked rumor
//!   proves nothing), authored by the sender;
//! - the **seal** (kind 13, no tags): the rumor encrypted with the sender's key, signed by
//!   the sender;
//! - the **wrap** (kind 1059, stored and forwarded; or 21059, live, which relays do not
//!   store): the seal encrypted with a one-time key that signs the wrap, `p`-tagged with
//!   the recipient.
//!
//! The seal's and the wrap's `created_at` are drawn up to two days into the past, as the
//! NIP says, so that timing does not link them; the rumor keeps the real time.
//!
//! [`wrap`] builds the three; [`unwrap`] checks all of them and says who sent it
//! ([`unwrap_verified`] the same for a wrap whose signature was already checked): the
//! wrap's signature and kind, that it is addressed to the recipient, the seal's signature
//! and kind, that the seal has no tags, the rumor's id, and that the rumor's author is the
//! seal's signer (otherwise anyone could seal someone else's rumor).

use secp256k1::Keypair;
use serde_json::{Value, json};

use crate::event::canonical;
use crate::{Error, Event, Result, UnsignedEvent};
use fleetmesh_schemas::constants::kind;

/// How far into the past the seal's and the wrap's `created_at` may be drawn: two days.
pub const MAX_TWEAK_SECS: u64 = 2 * 24 * 3600;

fn fail(reason: impl Into<String>) -> Error {
    Error::GiftWrap(reason.into())
}

/// A message inside a gift wrap: an event without a signature, its id computed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rumor {
    /// The id, over the NIP-01 serialization.
    pub id: [u8; 32],
    /// The author (the sender), x-only.
    pub pubkey: [u8; 32],
    /// Unix seconds.
    pub created_at: u64,
    /// Kind.
    pub kind: u16,
    /// Tags.
    pub tags: Vec<Vec<String>>,
    /// Content.
    pub content: String,
}

impl Rumor {
    /// `event` as authored by `pubkey`, its id computed.
    pub fn new(pubkey: [u8; 32], event: UnsignedEvent) -> Rumor {
        let id = canonical::event_id(
            &pubkey,
            event.created_at,
            event.kind,
            &event.tags,
            &event.content,
        );
        Rumor {
            id,
            pubkey,
            created_at: event.created_at,
            kind: event.kind,
            tags: event.tags,
            content: event.content,
        }
    }

    /// As JSON: the NIP-01 fields but `sig`.
    pub fn to_value(&self) -> Value {
        json!({
            "id": hex::encode(self.id),
            "pubkey": hex::encode(self.pubkey),
            "created_at": self.created_at,
            "kind": self.kind,
            "tags": self.tags,
            "content": self.content,
        })
    }

    /// Parses a rumor and checks its id; a `sig`, if one is there, is refused (a signed
    /// rumor would prove its author's words to whoever it leaks to).
    ///
    /// # Errors
    /// [`Error::GiftWrap`] naming the field.
    pub fn from_value(v: &Value) -> Result<Rumor> {
        if v.get("sig").is_some() {
            return Err(fail("the rumor is signed; a rumor carries no signature"));
        }
        let hex32 = |field: &str| -> Result<[u8; 32]> {
            v[field]
                .as_str()
                .and_then(|s| hex::decode(s).ok())
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
                .ok_or_else(|| fail(format!("the rumor's {field} is not 64 hex digits")))
        };
        let tags: Vec<Vec<String>> = serde_json::from_value(v["tags"].clone())
            .map_err(|e| fail(format!("the rumor's tags: {e}")))?;
        let rumor = Rumor::new(
            hex32("pubkey")?,
            UnsignedEvent {
                created_at: v["created_at"]
                    .as_u64()
                    .ok_or_else(|| fail("the rumor's created_at is not a number"))?,
                kind: v["kind"]
                    .as_u64()
                    .and_then(|k| u16::try_from(k).ok())
                    .ok_or_else(|| fail("the rumor's kind is not a kind"))?,
                tags,
                content: v["content"]
                    .as_str()
                    .ok_or_else(|| fail("the rumor's content is not a string"))?
                    .to_owned(),
            },
        );
        if rumor.id != hex32("id")? {
            return Err(fail("the rumor's id is not the hash of its fields"));
        }
        Ok(rumor)
    }
}

/// A `created_at` up to [`MAX_TWEAK_SECS`] before `now`.
fn tweaked(now: u64) -> Result<u64> {
    let mut r = [0u8; 8];
    getrandom::fill(&mut r).map_err(|e| Error::Random(e.to_string()))?;
    Ok(now.saturating_sub(u64::from_le_bytes(r) % MAX_TWEAK_SECS))
}

/// Wraps `message` from `sender` to `recipient` (x-only, hex) as a gift wrap of
/// `wrap_kind` (1059 or 21059) made at `now`; the rumor keeps `message.created_at`.
///
/// # Errors
/// [`Error::GiftWrap`] for another kind; [`Error::Crypto`] for a recipient key off the
/// curve; [`Error::Random`].
pub fn wrap(
    sender: &Keypair,
    recipient: &str,
    message: UnsignedEvent,
    wrap_kind: u16,
    now: u64,
) -> Result<Event> {
    if wrap_kind != kind::GIFT_WRAP && wrap_kind != kind::EPHEMERAL_GIFT_WRAP {
        return Err(fail(format!(
            "a gift wrap is kind {} or {}, not {wrap_kind}",
            kind::GIFT_WRAP,
            kind::EPHEMERAL_GIFT_WRAP
        )));
    }
    let rumor = Rumor::new(sender.x_only_public_key().0.to_byte_array(), message);
    let to_recipient = crate::nip44::conversation_key(&sender.secret_key(), recipient)?;
    let seal = UnsignedEvent {
        created_at: tweaked(now)?,
        kind: kind::SEAL,
        tags: Vec::new(),
        content: crate::nip44::encrypt(&to_recipient, rumor.to_value().to_string().as_bytes())?,
    }
    .sign(sender)?;
    let one_time = loop {
        let mut secret = zeroize::Zeroizing::new([0u8; 32]);
        getrandom::fill(&mut *secret).map_err(|e| Error::Random(e.to_string()))?;
        if let Ok(k) = Keypair::from_secret_bytes(*secret) {
            break k;
        }
    };
    let from_one_time = crate::nip44::conversation_key(&one_time.secret_key(), recipient)?;
    UnsignedEvent {
        created_at: tweaked(now)?,
        kind: wrap_kind,
        tags: vec![vec!["p".into(), recipient.to_ascii_lowercase()]],
        content: crate::nip44::encrypt(&from_one_time, seal.to_json().as_bytes())?,
    }
    .sign(&one_time)
}

/// What [`unwrap`] found: the message and who sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unwrapped {
    /// The message.
    pub rumor: Rumor,
    /// The sender: the seal's signer, who is the rumor's author.
    pub sender: [u8; 32],
    /// The seal.
    pub seal: Event,
}

/// Opens the gift wrap `wrap` with `recipient`'s key, checking every layer (the module's
/// list).
///
/// # Errors
/// [`Error::GiftWrap`] naming the first check that failed; [`Error::InvalidEvent`] for a
/// signature or id that does not verify; [`Error::Crypto`] for a layer that does not
/// decrypt.
pub fn unwrap(recipient: &Keypair, wrap: &Event) -> Result<Unwrapped> {
    if wrap.kind != kind::GIFT_WRAP && wrap.kind != kind::EPHEMERAL_GIFT_WRAP {
        return Err(fail(format!("kind {} is not a gift wrap", wrap.kind)));
    }
    wrap.verify()?;
    unwrap_verified(recipient, wrap)
}

/// [`unwrap`] of a wrap whose id and signature were already checked — by the relay that
/// stored it, or by a subscription that verifies what it receives — so that the one-time
/// key's signature is not checked twice. Every other check is [`unwrap`]'s.
///
/// # Errors
/// As [`unwrap`].
pub fn unwrap_verified(recipient: &Keypair, wrap: &Event) -> Result<Unwrapped> {
    if wrap.kind != kind::GIFT_WRAP && wrap.kind != kind::EPHEMERAL_GIFT_WRAP {
        return Err(fail(format!("kind {} is not a gift wrap", wrap.kind)));
    }
    let me = hex::encode(recipient.x_only_public_key().0.to_byte_array());
    if !wrap
        .tags
        .iter()
        .any(|t| t.first().is_some_and(|n| n == "p") && t.get(1) == Some(&me))
    {
        return Err(fail(
            "the wrap is not addressed to this key (no p tag for it)",
        ));
    }
    let key = crate::nip44::conversation_key(&recipient.secret_key(), &hex::encode(wrap.pubkey))?;
    let seal_json = crate::nip44::decrypt(&key, &wrap.content)?;
    let seal = Event::from_json(
        std::str::from_utf8(&seal_json).map_err(|_| fail("the seal is not UTF-8"))?,
    )
    .map_err(|e| fail(format!("the seal is not an event: {e}")))?;
    if seal.kind != kind::SEAL {
        return Err(fail(format!(
            "the wrap holds kind {}, not a seal (kind {})",
            seal.kind,
            kind::SEAL
        )));
    }
    seal.verify()?;
    if !seal.tags.is_empty() {
        return Err(fail("the seal has tags; a seal has none"));
    }
    let key = crate::nip44::conversation_key(&recipient.secret_key(), &hex::encode(seal.pubkey))?;
    let rumor_json = crate::nip44::decrypt(&key, &seal.content)?;
    let value: Value = serde_json::from_slice(&rumor_json)
        .map_err(|e| fail(format!("the rumor is not JSON: {e}")))?;
    let rumor = Rumor::from_value(&value)?;
    if rumor.pubkey != seal.pubkey {
        return Err(fail(format!(
            "the seal is signed by {}, the rumor's author is {}",
            hex::encode(seal.pubkey),
            hex::encode(rumor.pubkey)
        )));
    }
    Ok(Unwrapped {
        sender: seal.pubkey,
        rumor,
        seal,
    })
}
