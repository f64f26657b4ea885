//! Spending conditions (NUT-10): proofs whose secret is a lock — to a key (NUT-11 P2PK) or
//! to a hash and a key (NUT-14 HTLC) — with a locktime after which refund keys may spend.
//! What escrow is made of: a buyer locks a job's bid to the provider's key with a refund
//! to itself; the provider unlocks it by signing.
//!
//! [`Lock::parse`] reads a secret (`None` for a plain one), [`Lock::secret`] writes one,
//! [`Lock::witness`] makes the witness that unlocks it with our key (and preimage), or
//! says why this wallet cannot.

use secp256k1::{Keypair, PublicKey, XOnlyPublicKey};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::dhke;
use crate::{Result, SettleError};

/// The kind of a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// NUT-11: signatures by the locked key(s).
    P2pk,
    /// NUT-14: the preimage of a SHA-256 hash (and signatures, when keys are named).
    Htlc,
}

/// A lock as written in a NUT-10 secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    /// P2PK or HTLC.
    pub kind: Kind,
    /// P2PK: the key (33-byte compressed, hex); HTLC: the hash (hex).
    pub data: String,
    /// Further keys that may sign (`pubkeys`).
    pub pubkeys: Vec<String>,
    /// Signatures needed (`n_sigs`, default 1).
    pub n_sigs: usize,
    /// Unix seconds after which the refund keys (or, with none, anyone) may spend.
    pub locktime: Option<u64>,
    /// Keys that may spend after the locktime.
    pub refund: Vec<String>,
    /// `SIG_INPUTS` (the default) or `SIG_ALL`.
    pub sigflag: String,
}

fn refused(why: impl Into<String>) -> SettleError {
    SettleError::Refused(why.into())
}

/// A key as people give it: 33-byte compressed hex, or a 32-byte x-only (Nostr) key, to
/// which NIP-61 prefixes `02`. The compressed form, hex.
pub fn key_hex(text: &str) -> Result<String> {
    let text = text.trim().trim_start_matches("did:nostr:");
    let full = match text.len() {
        64 => format!("02{text}"),
        _ => text.to_owned(),
    };
    dhke::point(&full, "lock key")
        .map(|p| hex::encode(p.serialize()))
        .map_err(|_| {
            refused(format!(
                "{text:?} is not a public key (64 or 66 hex characters)"
            ))
        })
}

impl Lock {
    /// A P2PK lock to `to`, with an optional locktime and refund keys.
    pub fn p2pk(to: &str, locktime: Option<u64>, refund: Vec<String>) -> Result<Lock> {
        Ok(Lock {
            kind: Kind::P2pk,
            data: key_hex(to)?,
            pubkeys: Vec::new(),
            n_sigs: 1,
            locktime,
            refund: refund.iter().map(|k| key_hex(k)).collect::<Result<_>>()?,
            sigflag: "SIG_INPUTS".into(),
        })
    }

    /// An HTLC on `hash` (SHA-256, hex), optionally also needing a signature by `to`.
    pub fn htlc(
        hash: &str,
        to: Option<&str>,
        locktime: Option<u64>,
        refund: Vec<String>,
    ) -> Result<Lock> {
        let h = hex::decode(hash).ok().filter(|h| h.len() == 32);
        if h.is_none() {
            return Err(refused(format!("hash {hash:?} is not 32 bytes of hex")));
        }
        Ok(Lock {
            kind: Kind::Htlc,
            data: hash.to_ascii_lowercase(),
            pubkeys: to.map(key_hex).transpose()?.into_iter().collect(),
            n_sigs: 1,
            locktime,
            refund: refund.iter().map(|k| key_hex(k)).collect::<Result<_>>()?,
            sigflag: "SIG_INPUTS".into(),
        })
    }

    /// The lock of a secret; `None` for a plain (unlocked) secret.
    pub fn parse(secret: &str) -> Result<Option<Lock>> {
        if !secret.trim_start().starts_with('[') {
            return Ok(None);
        }
        let bad = |why: &str| refused(format!("a NUT-10 secret {why}"));
        let v: Value = serde_json::from_str(secret).map_err(|_| bad("that is not JSON"))?;
        let kind = match v.get(0).and_then(Value::as_str) {
            Some("P2PK") => Kind::P2pk,
            Some("HTLC") => Kind::Htlc,
            Some(other) => {
                return Err(bad(&format!(
                    "of kind {other:?}, which this wallet does not know"
                )));
            }
            None => return Err(bad("without a kind")),
        };
        let body = v.get(1).ok_or_else(|| bad("without a body"))?;
        let data = body
            .get("data")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("without data"))?
            .to_owned();
        let mut lock = Lock {
            kind,
            data,
            pubkeys: Vec::new(),
            n_sigs: 1,
            locktime: None,
            refund: Vec::new(),
            sigflag: "SIG_INPUTS".into(),
        };
        for tag in body
            .get("tags")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(items) = tag.as_array() else {
                continue;
            };
            let strs: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
            match strs.as_slice() {
                ["sigflag", f] => lock.sigflag = (*f).to_owned(),
                ["n_sigs", n] => lock.n_sigs = n.parse().map_err(|_| bad("with a bad n_sigs"))?,
                ["locktime", t] => {
                    lock.locktime = Some(t.parse().map_err(|_| bad("with a bad locktime"))?)
                }
                ["pubkeys", keys @ ..] => lock.pubkeys.extend(keys.iter().map(|k| (*k).to_owned())),
                ["refund", keys @ ..] => lock.refund.extend(keys.iter().map(|k| (*k).to_owned())),
                _ => {}
            }
        }
        Ok(Some(lock))
    }

    /// A fresh secret carrying this lock (a random nonce makes each proof's secret unique).
    pub fn secret(&self) -> Result<String> {
        let mut tags = Vec::new();
        if !self.pubkeys.is_empty() {
            let mut t = vec![json!("pubkeys")];
            t.extend(self.pubkeys.iter().map(|k| json!(k)));
            tags.push(Value::Array(t));
        }
        if let Some(t) = self.locktime {
            tags.push(json!(["locktime", t.to_string()]));
        }
        if !self.refund.is_empty() {
            let mut t = vec![json!("refund")];
            t.extend(self.refund.iter().map(|k| json!(k)));
            tags.push(Value::Array(t));
        }
        tags.push(json!(["sigflag", self.sigflag]));
        let kind = match self.kind {
            Kind::P2pk => "P2PK",
            Kind::Htlc => "HTLC",
        };
        let body = json!({"nonce": dhke::random_secret()?, "data": self.data, "tags": tags});
        Ok(serde_json::to_string(&json!([kind, body])).unwrap_or_default())
    }

    /// Whether the locktime has passed (the mint's test: `locktime < now`).
    fn past(&self, now: u64) -> bool {
        self.locktime.is_some_and(|t| t < now)
    }

    /// The witness that spends `secret` (which carries this lock) with `key` and, for an
    /// HTLC, `preimage`; refused, with the reason, when this wallet cannot spend it.
    ///
    /// As the mints check it: the locked keys may always sign; after the locktime the
    /// refund keys may too (with none, anyone spends without a signature). An HTLC opens
    /// with its preimage (and a signature when it names keys), or after its locktime by
    /// a refund key.
    pub fn witness(
        &self,
        secret: &str,
        key: Option<&Keypair>,
        preimage: Option<&str>,
        now: u64,
    ) -> Result<String> {
        if self.sigflag != "SIG_INPUTS" {
            return Err(refused(format!(
                "a lock with sigflag {}: this wallet signs inputs only",
                self.sigflag
            )));
        }
        let past = self.past(now);
        let mut witness = serde_json::Map::new();
        let mut main = self.pubkeys.clone();
        let signers = match self.kind {
            Kind::P2pk if past && self.refund.is_empty() => Vec::new(),
            Kind::P2pk => {
                main.insert(0, self.data.clone());
                let mut all = main.clone();
                if past {
                    all.extend(self.refund.iter().cloned());
                }
                all
            }
            Kind::Htlc => match preimage {
                Some(pre) => {
                    let bytes = hex::decode(pre).map_err(|_| refused("the preimage is not hex"))?;
                    if hex::encode(Sha256::digest(&bytes)) != self.data {
                        return Err(refused(format!(
                            "the preimage does not hash to the lock's {}",
                            self.data
                        )));
                    }
                    witness.insert("preimage".into(), json!(pre));
                    main.clone()
                }
                None if past => self.refund.clone(),
                None => {
                    return Err(refused(format!(
                        "an HTLC on hash {}: give its preimage",
                        self.data
                    )));
                }
            },
        };
        if !signers.is_empty() {
            if self.n_sigs > 1 {
                return Err(refused(format!(
                    "a lock needing {} signatures: this wallet gives one",
                    self.n_sigs
                )));
            }
            let key = key.ok_or_else(|| {
                refused(format!(
                    "locked to {}, and this wallet has no key to sign with",
                    signers.join(", ")
                ))
            })?;
            let (ours, _) = key.x_only_public_key();
            if !signers.iter().any(|k| x_only(k).is_some_and(|x| x == ours)) {
                let refund = match self.locktime {
                    Some(t) if !past && !self.refund.is_empty() => {
                        format!(" (refund to {} after {t})", self.refund.join(", "))
                    }
                    _ => String::new(),
                };
                return Err(refused(format!(
                    "locked to {}{refund} — not this wallet's key {}",
                    signers.join(", "),
                    hex::encode(ours.to_byte_array())
                )));
            }
            let digest: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
            let mut aux = [0u8; 32];
            getrandom::fill(&mut aux)
                .map_err(|e| SettleError::Crypto(format!("randomness: {e}")))?;
            let sig = secp256k1::schnorr::sign_with_aux_rand(&digest, key, &aux);
            witness.insert(
                "signatures".into(),
                json!([hex::encode(sig.to_byte_array())]),
            );
        }
        Ok(Value::Object(witness).to_string())
    }
}

/// The x-only key of a compressed (or x-only) hex key: what BIP-340 signatures, and so
/// the mints, compare.
pub fn x_only(hex_key: &str) -> Option<XOnlyPublicKey> {
    let bytes = hex::decode(hex_key).ok()?;
    match bytes.len() {
        33 => PublicKey::from_slice(&bytes)
            .ok()
            .map(|p| p.x_only_public_key().0),
        32 => XOnlyPublicKey::from_byte_array(bytes.try_into().ok()?).ok(),
        _ => None,
    }
}
