//! Signed hop envelopes (`fleetmesh/hop/1`, type `deliver`): a payload carried across
//! several nodes keeps one BIP-340 signature per hop, so that its recipient knows the
//! whole path it took and every node on it can be held to what it passed on.
//!
//! Hop `i` is signed by the node that sends it (`from`) over
//! `SHA-256("fleetmesh/hop/1" ‖ id ‖ digest ‖ prev ‖ from ‖ to ‖ at)`: the envelope's
//! random id, the payload's SHA-256, the previous hop's sender (32 zero bytes for the
//! first), this hop's sender and receiver, and when it was sent (u64, big-endian). The
//! sender makes the first hop with [`Envelope::new`]; each node that passes it on checks
//! the path so far ([`Envelope::check`], the path ending at itself) and adds its own hop
//! ([`Envelope::extend`]); the recipient checks the whole path. A dropped hop (the chain
//! does not continue where the last hop ended), a reordered one (times go backwards), a
//! re-signed one (a signature not by the hop's sender), a changed payload and a path that
//! does not end here are refused, each by name ([`crate::Error::Hop`]); a replayed
//! envelope (an id seen before) is for the receiver to refuse, with the ids it keeps.
//! Mediated DIDComm delivery carries its messages in these.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::event::{sign_schnorr, verify_schnorr};
use crate::{Error, Result};

/// The protocol id.
pub const PROTOCOL: &str = "fleetmesh/hop/1";
/// The most hops a path may have.
pub const MAX_HOPS: usize = 16;
/// Seconds a hop may be dated ahead of the checker's clock.
pub const MAX_SKEW_SECS: u64 = 300;

/// One hop of the path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hop {
    /// The sender of this hop (x-only key, hex).
    pub from: String,
    /// Its receiver (x-only key, hex).
    pub to: String,
    /// When it was sent, Unix seconds.
    pub at: u64,
    /// The sender's BIP-340 signature (hex).
    pub sig: String,
}

/// A payload with the path it took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    /// [`PROTOCOL`].
    pub protocol: String,
    /// `deliver`: the payload is for the path's last receiver.
    #[serde(rename = "type")]
    pub type_: String,
    /// Random, for replay suppression (hex).
    pub id: String,
    /// SHA-256 of the payload (hex).
    pub digest: String,
    /// The payload, standard base64.
    pub payload: String,
    /// The path, first hop first.
    pub hops: Vec<Hop>,
}

fn bad(reason: impl Into<String>) -> Error {
    Error::Hop(reason.into())
}

fn key32(hex_text: &str, what: &str) -> Result<[u8; 32]> {
    let mut k = [0u8; 32];
    hex::decode_to_slice(hex_text, &mut k)
        .map_err(|_| bad(format!("{what} is not 32 bytes of hex")))?;
    Ok(k)
}

fn signed_message(
    id: &[u8; 32],
    digest: &[u8; 32],
    prev: &[u8; 32],
    from: &[u8; 32],
    to: &[u8; 32],
    at: u64,
) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(PROTOCOL.as_bytes());
    for part in [id, digest, prev, from, to] {
        h.update(part);
    }
    h.update(at.to_be_bytes());
    h.finalize().into()
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

impl Envelope {
    /// The first hop of `payload`, from `keys` to `to` (x-only, hex) at `now`.
    ///
    /// # Errors
    /// [`Error::Hop`] for a malformed `to`; [`Error::Random`] if the random source fails.
    pub fn new(keys: &secp256k1::Keypair, to: &str, payload: &[u8], now: u64) -> Result<Envelope> {
        use base64::Engine as _;
        let mut id = [0u8; 32];
        getrandom::fill(&mut id).map_err(|e| Error::Random(e.to_string()))?;
        let mut env = Envelope {
            protocol: PROTOCOL.into(),
            type_: "deliver".into(),
            id: hex::encode(id),
            digest: hex::encode(Sha256::digest(payload)),
            payload: b64().encode(payload),
            hops: Vec::new(),
        };
        env.push(keys, [0u8; 32], to, now)?;
        Ok(env)
    }

    fn push(&mut self, keys: &secp256k1::Keypair, prev: [u8; 32], to: &str, at: u64) -> Result<()> {
        let from = keys.x_only_public_key().0.to_byte_array();
        let msg = signed_message(
            &key32(&self.id, "the id")?,
            &key32(&self.digest, "the digest")?,
            &prev,
            &from,
            &key32(to, "the next hop")?,
            at,
        );
        let mut aux = [0u8; 32];
        getrandom::fill(&mut aux).map_err(|e| Error::Random(e.to_string()))?;
        self.hops.push(Hop {
            from: hex::encode(from),
            to: to.to_owned(),
            at,
            sig: hex::encode(sign_schnorr(keys, &msg, &aux)),
        });
        Ok(())
    }

    /// Adds this node's hop to `to`: the path so far must end at `keys` ([`check`] it
    /// first) and have room.
    ///
    /// # Errors
    /// [`Error::Hop`] when the path does not end here or is full.
    ///
    /// [`check`]: Envelope::check
    pub fn extend(&mut self, keys: &secp256k1::Keypair, to: &str, now: u64) -> Result<()> {
        let me = hex::encode(keys.x_only_public_key().0.to_byte_array());
        let last = self
            .hops
            .last()
            .ok_or_else(|| bad("an envelope without hops"))?;
        if last.to != me {
            return Err(bad(format!(
                "the path ends at {}, not at this node",
                last.to
            )));
        }
        if self.hops.len() >= MAX_HOPS {
            return Err(bad(format!("the path has {MAX_HOPS} hops already")));
        }
        let prev = key32(&last.from, "hop sender")?;
        self.push(keys, prev, to, now.max(last.at))
    }

    /// Checks the whole path as the node `me` (x-only, hex) receiving it at `now`: every
    /// hop signed by its sender, each continuing where the last ended, in time order, not
    /// dated ahead of `now`, the first no older than `max_age_secs`, the last ending at
    /// `me`, the payload matching its digest. Returns the payload and the path's origin.
    ///
    /// # Errors
    /// [`Error::Hop`] naming the hop and the check.
    pub fn check(&self, me: &str, now: u64, max_age_secs: u64) -> Result<(Vec<u8>, String)> {
        use base64::Engine as _;
        if self.protocol != PROTOCOL || self.type_ != "deliver" {
            return Err(bad(format!("not a {PROTOCOL} deliver envelope")));
        }
        if self.hops.is_empty() || self.hops.len() > MAX_HOPS {
            return Err(bad(format!(
                "a path of 1 to {MAX_HOPS} hops, not {}",
                self.hops.len()
            )));
        }
        let payload = b64()
            .decode(&self.payload)
            .map_err(|_| bad("the payload is not base64"))?;
        if hex::encode(Sha256::digest(&payload)) != self.digest {
            return Err(bad("the payload does not match its digest"));
        }
        let (id, digest) = (
            key32(&self.id, "the id")?,
            key32(&self.digest, "the digest")?,
        );
        let mut prev = [0u8; 32];
        let n = self.hops.len();
        for (i, hop) in self.hops.iter().enumerate() {
            let at = format!("hop {} of {n}", i + 1);
            if i > 0 {
                let before = &self.hops[i - 1];
                if hop.from != before.to {
                    return Err(bad(format!(
                        "{at} is sent by {} but hop {i} went to {} (a hop dropped or reordered)",
                        hop.from, before.to
                    )));
                }
                if hop.at < before.at {
                    return Err(bad(format!("{at} is dated before hop {i} (reordered)")));
                }
            }
            if hop.at > now + MAX_SKEW_SECS {
                return Err(bad(format!("{at} is dated {} s ahead", hop.at - now)));
            }
            let (from, to) = (
                key32(&hop.from, "a hop sender")?,
                key32(&hop.to, "a hop receiver")?,
            );
            let sig: [u8; 64] = hex::decode(&hop.sig)
                .ok()
                .and_then(|s| s.try_into().ok())
                .ok_or_else(|| bad(format!("{at}: the signature is not 64 bytes of hex")))?;
            let msg = signed_message(&id, &digest, &prev, &from, &to, hop.at);
            if !verify_schnorr(&from, &msg, &sig) {
                return Err(bad(format!(
                    "{at} is not signed by its sender {} (re-signed or changed)",
                    hop.from
                )));
            }
            prev = from;
        }
        if now.saturating_sub(self.hops[0].at) > max_age_secs {
            return Err(bad(format!(
                "the path began more than {max_age_secs} s ago"
            )));
        }
        let last = &self.hops[n - 1];
        if last.to != me {
            return Err(bad(format!(
                "the path ends at {}, not at this node",
                last.to
            )));
        }
        Ok((payload, self.hops[0].from.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> secp256k1::Keypair {
        secp256k1::Keypair::from_secret_bytes([seed; 32]).unwrap()
    }

    fn hexkey(k: &secp256k1::Keypair) -> String {
        hex::encode(k.x_only_public_key().0.to_byte_array())
    }

    fn refused(env: &Envelope, me: &str, now: u64, why: &str) {
        let e = env.check(me, now, 3600).unwrap_err().to_string();
        assert!(e.contains(why), "{e} should say {why:?}");
    }

    #[test]
    fn a_path_checks_hop_by_hop_and_every_tampering_is_named() {
        let (a, m, n, p) = (key(1), key(2), key(3), key(4));
        let now = 1_800_000_000;
        let mut env = Envelope::new(&a, &hexkey(&m), b"{\"hello\":1}", now).unwrap();
        assert_eq!(env.check(&hexkey(&m), now, 3600).unwrap().1, hexkey(&a));
        env.extend(&m, &hexkey(&n), now + 1).unwrap();
        env.extend(&n, &hexkey(&p), now + 2).unwrap();
        let (payload, origin) = env.check(&hexkey(&p), now + 3, 3600).unwrap();
        assert_eq!(
            (payload.as_slice(), origin),
            (&b"{\"hello\":1}"[..], hexkey(&a))
        );
        // it round-trips as JSON and validates against its schema
        let json = serde_json::to_value(&env).unwrap();
        fleetmesh_schemas::SchemaSet::embedded()
            .validate(&"fleetmesh/hop/1".parse().unwrap(), &json)
            .unwrap();
        assert_eq!(serde_json::from_value::<Envelope>(json).unwrap(), env);

        refused(&env, &hexkey(&n), now + 3, "not at this node");
        let mut dropped = env.clone();
        dropped.hops.remove(1);
        refused(&dropped, &hexkey(&p), now + 3, "a hop dropped or reordered");
        let mut reordered = env.clone();
        reordered.hops.swap(1, 2);
        refused(
            &reordered,
            &hexkey(&p),
            now + 3,
            "a hop dropped or reordered",
        );
        let mut backdated = env.clone();
        backdated.hops[2].at = now;
        refused(&backdated, &hexkey(&p), now + 3, "hop 3 of 3");
        // a hop re-signed by another key that claims to be its sender
        let mut resigned = env.clone();
        let (sig_by_other, _) = {
            let mut other = Envelope::new(&key(9), &hexkey(&p), b"{\"hello\":1}", now).unwrap();
            other.id.clone_from(&env.id);
            other.hops.clear();
            other
                .push(
                    &key(9),
                    key32(&env.hops[0].from, "").unwrap(),
                    &hexkey(&p),
                    now + 2,
                )
                .unwrap();
            (other.hops[0].sig.clone(), ())
        };
        resigned.hops[1].sig = sig_by_other;
        refused(
            &resigned,
            &hexkey(&p),
            now + 3,
            "hop 2 of 3 is not signed by its sender",
        );
        let mut changed = env.clone();
        changed.payload = "eyJoZWxsbyI6Mn0=".into();
        refused(&changed, &hexkey(&p), now + 3, "does not match its digest");
        let mut rehashed = changed.clone();
        rehashed.digest = hex::encode(Sha256::digest(b"{\"hello\":2}"));
        refused(&rehashed, &hexkey(&p), now + 3, "hop 1 of 3 is not signed");
        refused(&env, &hexkey(&p), now + 7200, "began more than 3600 s ago");
        refused(&env, &hexkey(&p), now - 400, "ahead");
        // only the node the path ends at may extend it
        let mut taken = env.clone();
        assert!(taken.extend(&m, &hexkey(&a), now + 3).is_err());
    }
}
