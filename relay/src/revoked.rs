//! Nostr keys their owners revoked (kind 11802): a key revokes itself by listing its own
//! `secp256k1-bip340` key in a revocation it signs, from `revoked_at` on. The relay refuses
//! events by a revoked key created at or after that time (`blocked:`), so a leaked key
//! cannot speak for its owner, nor take its revocation back (a newer revocation by it is
//! refused too). Revocations are one-way: a later one that leaves a key out does not
//! restore it. Other key types (Ed25519, X25519) and other keys' revocations do not block
//! events; DID resolution reads those from the events themselves.

use std::collections::HashMap;
use std::sync::RwLock;

use fleetmesh_proto::event::Event;
use fleetmesh_proto::nodes::Revocation;
use fleetmesh_proto::words::KeyType;
use fleetmesh_schemas::constants::kind;

/// The revoked Nostr keys a relay knows, with when each was revoked.
#[derive(Debug, Default)]
pub struct Revoked(RwLock<HashMap<[u8; 32], u64>>);

impl Revoked {
    /// What `store`'s revocations say.
    ///
    /// # Errors
    /// The store's failure.
    pub fn from_store<S: crate::store::EventStore + ?Sized>(store: &S) -> crate::Result<Revoked> {
        let revoked = Revoked::default();
        let filter = fleetmesh_proto::filter::Filter::from_value(
            &serde_json::json!({"kinds": [kind::KEY_REVOCATION]}),
            fleetmesh_proto::filter::FilterLimits::default(),
        )
        .expect("a valid filter");
        for stored in store.query(&[filter], 1_000_000, fleetmesh_proto::unix_now())? {
            if let Ok(e) = Event::from_json(&stored.raw) {
                revoked.learn(&e);
            }
        }
        Ok(revoked)
    }

    /// Learns from `event` if it is a valid revocation (kind 11802) that revokes its own
    /// signer's Nostr key; the earliest time given stands.
    pub fn learn(&self, event: &Event) {
        if event.kind != kind::KEY_REVOCATION {
            return;
        }
        let Ok(revocation) = Revocation::try_from(event) else {
            return;
        };
        let signer = hex::encode(event.pubkey);
        let at = revocation
            .revoked
            .iter()
            .filter(|k| k.key_type == KeyType::Secp256k1 && k.public == signer)
            .map(|k| k.revoked_at)
            .min();
        if let Some(at) = at {
            let mut map = self
                .0
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let entry = map.entry(event.pubkey).or_insert(at);
            *entry = (*entry).min(at);
            tracing::info!(key = %signer, revoked_at = at, "a key is revoked");
        }
    }

    /// When `pubkey` was revoked, if it was.
    pub fn since(&self, pubkey: &[u8; 32]) -> Option<u64> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(pubkey)
            .copied()
    }

    /// When `pubkey` was revoked, if that is at or before `t`: what speaks for it at `t`
    /// is refused.
    pub fn revoked_by(&self, pubkey: &[u8; 32], t: u64) -> Option<u64> {
        self.since(pubkey).filter(|at| *at <= t)
    }

    /// The refusal (NIP-01 `blocked:`) of an event by a key revoked at or before its
    /// `created_at`.
    ///
    /// # Errors
    /// The message to send back.
    pub fn check(&self, event: &Event) -> Result<(), String> {
        match self.revoked_by(&event.pubkey, event.created_at) {
            Some(at) => Err(format!(
                "blocked: the author's key was revoked at {at} (kind 11802)"
            )),
            None => Ok(()),
        }
    }

    /// How many keys are revoked.
    pub fn len(&self) -> usize {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// True when no key is revoked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
