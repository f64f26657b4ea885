//! Nutzaps (NIP-61): Cashu proofs P2PK-locked to a recipient and published as a Nostr
//! event, the payment being its own receipt — tips and small payments to a node.
//!
//! - [`Info`]: the recipient's kind 10019: the relays it reads nutzaps on (`relay`), the
//!   mints it takes (`mint`, with units), and the key nutzaps are locked to (`pubkey`; a
//!   key of its own, never the recipient's Nostr key; x-only hex, locked to as `02…`).
//! - [`Nutzap`]: a kind 9321 read back — its `proof` tags (each one proof's JSON), the mint
//!   (`u`), the unit, the recipient (`p`), the zapped event (`e`), the comment — bounded,
//!   with [`Nutzap::check`] saying whether a recipient may take it: a mint it lists, sats,
//!   every proof locked (P2PK, one signature) to its nutzap key alone.
//! - [`nutzap_tags`]: the tags of a kind 9321 a sender publishes.
//!
//! The events are signed where the keys are (the appliance); this module reads and writes
//! their tags.

mod redeem;
pub use redeem::{key, start};

use crate::cashu::nut10::{Kind, Lock, x_only};
use crate::cashu::{Proof, Token, token::normalize_mint};
use crate::{Result, SettleError};

/// The recipient's informational event (replaceable).
pub const INFO: u16 = 10019;
/// A nutzap.
pub const NUTZAP: u16 = 9321;
/// A redemption record (NIP-60 spending history).
pub const REDEEMED: u16 = 7376;
/// The most proofs one nutzap may carry.
pub const MAX_PROOFS: usize = 64;

fn refused(why: impl Into<String>) -> SettleError {
    SettleError::Refused(why.into())
}

/// A kind 10019.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    /// Where the recipient reads nutzaps.
    pub relays: Vec<String>,
    /// The mints it takes, normalized.
    pub mints: Vec<String>,
    /// The key to lock to (x-only, hex).
    pub pubkey: String,
}

impl Info {
    /// Its tags (every mint in sats).
    pub fn tags(&self) -> Vec<Vec<String>> {
        let mut tags: Vec<Vec<String>> = self
            .relays
            .iter()
            .map(|r| vec!["relay".into(), r.clone()])
            .collect();
        tags.extend(
            self.mints
                .iter()
                .map(|m| vec!["mint".into(), m.clone(), "sat".into()]),
        );
        tags.push(vec!["pubkey".into(), self.pubkey.clone()]);
        tags
    }

    /// Reads the tags of a kind 10019: only mints that take sats (or name no unit); the
    /// key as x-only hex, from either its 32-byte or its 33-byte form.
    pub fn from_tags(tags: &[Vec<String>]) -> Result<Info> {
        let mut info = Info {
            relays: Vec::new(),
            mints: Vec::new(),
            pubkey: String::new(),
        };
        for t in tags {
            match (t.first().map(String::as_str), t.get(1)) {
                (Some("relay"), Some(r)) if r.starts_with("ws://") || r.starts_with("wss://") => {
                    info.relays.push(r.clone());
                }
                (Some("mint"), Some(m)) if t.len() == 2 || t[2..].iter().any(|u| u == "sat") => {
                    info.mints.push(normalize_mint(m));
                }
                (Some("pubkey"), Some(k)) if info.pubkey.is_empty() => {
                    let x = x_only(k).ok_or_else(|| {
                        refused(format!("nutzap info: pubkey {k:?} is not a key"))
                    })?;
                    info.pubkey = hex::encode(x.to_byte_array());
                }
                _ => {}
            }
        }
        if info.pubkey.is_empty() {
            return Err(refused("nutzap info: no pubkey to lock to"));
        }
        if info.mints.is_empty() {
            return Err(refused("nutzap info: no mint that takes sats"));
        }
        Ok(info)
    }
}

/// The tags of a kind 9321 of `token`'s proofs to `recipient` (its Nostr key, hex),
/// zapping `zapped` (an event id and a relay hint) when given.
pub fn nutzap_tags(
    token: &Token,
    recipient: &str,
    zapped: Option<(&str, &str)>,
) -> Result<Vec<Vec<String>>> {
    let mut tags = Vec::with_capacity(token.proofs.len() + 4);
    for p in &token.proofs {
        let json = serde_json::to_string(p).map_err(|e| refused(e.to_string()))?;
        tags.push(vec!["proof".into(), json]);
    }
    tags.push(vec!["u".into(), token.mint.clone()]);
    tags.push(vec!["unit".into(), token.unit.clone()]);
    tags.push(vec!["p".into(), recipient.to_owned()]);
    if let Some((id, relay)) = zapped {
        tags.push(vec!["e".into(), id.to_owned(), relay.to_owned()]);
    }
    Ok(tags)
}

/// A kind 9321 read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nutzap {
    /// The proofs as a token of the mint, in the unit.
    pub token: Token,
    /// The recipient's Nostr key (hex).
    pub recipient: String,
    /// The zapped event, if any.
    pub zapped: Option<String>,
}

impl Nutzap {
    /// Reads the tags and content of a kind 9321: at most [`MAX_PROOFS`] proofs, one
    /// mint, one recipient.
    pub fn read(tags: &[Vec<String>], content: &str) -> Result<Nutzap> {
        let mut proofs = Vec::new();
        let (mut mint, mut unit, mut recipient, mut zapped) = (None, None, None, None);
        for t in tags {
            let (Some(name), Some(value)) = (t.first(), t.get(1)) else {
                continue;
            };
            match name.as_str() {
                "proof" => {
                    if proofs.len() == MAX_PROOFS {
                        return Err(refused(format!("nutzap: over {MAX_PROOFS} proofs")));
                    }
                    let p: Proof = serde_json::from_str(value)
                        .map_err(|e| refused(format!("nutzap: a proof: {e}")))?;
                    proofs.push(p);
                }
                "u" if mint.is_none() => mint = Some(normalize_mint(value)),
                "unit" if unit.is_none() => unit = Some(value.clone()),
                "p" if recipient.is_none() => recipient = Some(value.to_ascii_lowercase()),
                "e" if zapped.is_none() => zapped = Some(value.clone()),
                _ => {}
            }
        }
        if proofs.is_empty() {
            return Err(refused("nutzap: no proof"));
        }
        Ok(Nutzap {
            token: Token {
                mint: mint.ok_or_else(|| refused("nutzap: no mint (u)"))?,
                unit: unit.unwrap_or_else(|| "sat".into()),
                memo: (!content.is_empty()).then(|| content.chars().take(256).collect()),
                proofs,
            },
            recipient: recipient.ok_or_else(|| refused("nutzap: no recipient (p)"))?,
            zapped,
        })
    }

    /// Whether the recipient `me` (its Nostr key), taking `mints`, with nutzap key `key`
    /// (x-only hex), may take this: its recipient, a mint it lists, sats, every proof
    /// P2PK-locked to `key` alone. The reason when not.
    pub fn check(&self, me: &str, mints: &[String], key: &str) -> Result<()> {
        if self.recipient != me {
            return Err(refused("nutzap: to another key"));
        }
        if !mints.contains(&self.token.mint) {
            return Err(refused(format!(
                "nutzap: of mint {}, not one this node lists",
                self.token.mint
            )));
        }
        if self.token.unit != "sat" {
            return Err(refused(format!("nutzap: in {}, not sat", self.token.unit)));
        }
        for p in &self.token.proofs {
            let lock = Lock::parse(&p.secret)?
                .ok_or_else(|| refused("nutzap: an unlocked proof (anyone could take it)"))?;
            let to_key = lock.kind == Kind::P2pk
                && lock.pubkeys.is_empty()
                && x_only(&lock.data).is_some_and(|x| hex::encode(x.to_byte_array()) == key);
            if !to_key {
                return Err(refused(
                    "nutzap: a proof not locked to this node's nutzap key alone",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proof(secret: &str) -> Proof {
        Proof {
            amount: 2,
            id: "009a1f293253e41e".into(),
            secret: secret.into(),
            c: "02".to_owned() + &"ab".repeat(32),
            witness: None,
        }
    }

    #[test]
    fn info_and_nutzaps_write_and_read_back_and_a_recipient_takes_only_its_own() {
        let key = "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798";
        let info = Info {
            relays: vec!["wss://relay.example".into()],
            mints: vec!["https://mint.example".into()],
            pubkey: key.into(),
        };
        assert_eq!(Info::from_tags(&info.tags()).unwrap(), info);
        // the 33-byte form reads as the same key; a mint in another unit only is skipped
        let mut tags = info.tags();
        *tags.last_mut().unwrap() = vec!["pubkey".into(), format!("02{key}")];
        tags.push(vec![
            "mint".into(),
            "https://usd.example".into(),
            "usd".into(),
        ]);
        assert_eq!(Info::from_tags(&tags).unwrap(), info);
        tags.retain(|t| t[0] != "pubkey");
        assert!(
            Info::from_tags(&tags)
                .unwrap_err()
                .to_string()
                .contains("no pubkey")
        );

        let locked = Lock::p2pk(key, None, Vec::new()).unwrap().secret().unwrap();
        let token = Token {
            mint: "https://mint.example".into(),
            unit: "sat".into(),
            memo: None,
            proofs: vec![proof(&locked)],
        };
        let me = "11".repeat(32);
        let tags = nutzap_tags(&token, &me, Some(("ee", "wss://r"))).unwrap();
        let zap = Nutzap::read(&tags, "").unwrap();
        assert_eq!(zap.token, token);
        assert_eq!(zap.zapped.as_deref(), Some("ee"));
        zap.check(&me, &info.mints, key).unwrap();
        let why = |r: Result<()>| r.unwrap_err().to_string();
        assert!(why(zap.check(&"22".repeat(32), &info.mints, key)).contains("another key"));
        assert!(why(zap.check(&me, &[], key)).contains("not one this node lists"));
        assert!(why(zap.check(&me, &info.mints, &"33".repeat(32))).contains("not locked"));
        let plain = Token {
            proofs: vec![proof(&"cd".repeat(32))],
            ..token.clone()
        };
        let zap = Nutzap::read(&nutzap_tags(&plain, &me, None).unwrap(), "hi").unwrap();
        assert_eq!(zap.token.memo.as_deref(), Some("hi"));
        assert!(why(zap.check(&me, &info.mints, key)).contains("unlocked"));
        assert!(Nutzap::read(&[vec!["u".into(), "https://m".into()]], "").is_err());
    }
}
