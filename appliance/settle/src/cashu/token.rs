//! Cashu tokens as people paste them (NUT-00): `cashuB…` (version 4, CBOR) and the older
//! `cashuA…` (version 3, JSON), both base64url. [`Token::parse`] takes either; the wallet
//! writes version 4.
//!
//! A token is bearer money from a stranger: its text is bounded ([`MAX_TOKEN_CHARS`],
//! [`MAX_PROOFS`]), every field is checked for shape here and the proofs themselves by
//! the mint when they are swapped.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use ciborium::value::Value;
use serde::{Deserialize, Serialize};

use super::Proof;
use crate::{Result, SettleError};

/// The longest token text taken (about 4 000 proofs' worth).
pub const MAX_TOKEN_CHARS: usize = 1 << 20;
/// The most proofs one token may carry.
pub const MAX_PROOFS: usize = 1000;

/// A token: proofs of one mint in one unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Token {
    /// The mint's URL, without a trailing slash.
    pub mint: String,
    /// The unit (`sat`).
    pub unit: String,
    /// The sender's note, if any.
    pub memo: Option<String>,
    /// The proofs.
    pub proofs: Vec<Proof>,
}

fn bad(why: impl Into<String>) -> SettleError {
    SettleError::Token(why.into())
}

/// Base64 as found in the wild: URL-safe or standard alphabet, padded or not.
fn unbase64(s: &str) -> Result<Vec<u8>> {
    let s = s.trim_end_matches('=');
    URL_SAFE_NO_PAD
        .decode(s)
        .or_else(|_| STANDARD_NO_PAD.decode(s))
        .map_err(|e| bad(format!("not base64: {e}")))
}

impl Token {
    /// Parses `cashuB…` or `cashuA…` (a `cashu:` URI prefix is taken), checking shapes:
    /// one mint, amounts that are positive and do not overflow, keyset ids and `C` in hex.
    pub fn parse(text: &str) -> Result<Token> {
        let text = text.trim();
        if text.len() > MAX_TOKEN_CHARS {
            return Err(bad(format!("longer than {MAX_TOKEN_CHARS} characters")));
        }
        let text = text.strip_prefix("cashu:").unwrap_or(text);
        let mut token = if let Some(rest) = text.strip_prefix("cashuB") {
            Self::from_v4(&unbase64(rest)?)?
        } else if let Some(rest) = text.strip_prefix("cashuA") {
            Self::from_v3(&unbase64(rest)?)?
        } else {
            return Err(bad("does not start with cashuA or cashuB"));
        };
        // hex as the mints write it, so a token reads back the same from its v4 bytes
        for p in &mut token.proofs {
            p.id.make_ascii_lowercase();
            p.c.make_ascii_lowercase();
        }
        token.check()?;
        Ok(token)
    }

    fn check(&self) -> Result<()> {
        if self.proofs.is_empty() {
            return Err(bad("no proofs"));
        }
        if self.proofs.len() > MAX_PROOFS {
            return Err(bad(format!("more than {MAX_PROOFS} proofs")));
        }
        if !(self.mint.starts_with("http://") || self.mint.starts_with("https://")) {
            return Err(bad(format!("mint {:?} is not an http(s) URL", self.mint)));
        }
        self.amount()?;
        for p in &self.proofs {
            if p.amount == 0 {
                return Err(bad("a proof of amount 0"));
            }
            if p.id.is_empty() || hex::decode(&p.id).is_err() {
                return Err(bad(format!("keyset id {:?} is not hex", p.id)));
            }
            super::dhke::point(&p.c, "proof C").map_err(|e| bad(e.to_string()))?;
            if p.secret.is_empty() {
                return Err(bad("an empty secret"));
            }
        }
        Ok(())
    }

    /// The sum of the proofs' amounts.
    pub fn amount(&self) -> Result<u64> {
        self.proofs.iter().try_fold(0u64, |sum, p| {
            sum.checked_add(p.amount)
                .ok_or_else(|| bad("amounts overflow"))
        })
    }

    fn from_v3(json: &[u8]) -> Result<Token> {
        #[derive(Deserialize)]
        struct V3 {
            token: Vec<V3Entry>,
            unit: Option<String>,
            memo: Option<String>,
        }
        #[derive(Deserialize)]
        struct V3Entry {
            mint: String,
            proofs: Vec<Proof>,
        }
        let v3: V3 = serde_json::from_slice(json).map_err(|e| bad(format!("cashuA: {e}")))?;
        let mut entries = v3.token.into_iter();
        let first = entries.next().ok_or_else(|| bad("cashuA: no entries"))?;
        let mint = normalize_mint(&first.mint);
        let mut proofs = first.proofs;
        for e in entries {
            if normalize_mint(&e.mint) != mint {
                return Err(bad("cashuA: proofs of more than one mint"));
            }
            proofs.extend(e.proofs);
        }
        Ok(Token {
            mint,
            unit: v3.unit.unwrap_or_else(|| "sat".into()),
            memo: v3.memo,
            proofs,
        })
    }

    fn from_v4(cbor: &[u8]) -> Result<Token> {
        let value: Value =
            ciborium::de::from_reader(cbor).map_err(|e| bad(format!("cashuB: {e}")))?;
        let map = as_map(&value, "token")?;
        let mint = normalize_mint(text_field(map, "m")?.ok_or_else(|| bad("cashuB: no m"))?);
        let unit = text_field(map, "u")?
            .ok_or_else(|| bad("cashuB: no u"))?
            .to_owned();
        let memo = text_field(map, "d")?.map(str::to_owned);
        let sets = field(map, "t")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("cashuB: no t array"))?;
        let mut proofs = Vec::new();
        for set in sets {
            let set = as_map(set, "t entry")?;
            let id = field(set, "i")
                .and_then(Value::as_bytes)
                .ok_or_else(|| bad("cashuB: keyset id i is not bytes"))?;
            let ps = field(set, "p")
                .and_then(Value::as_array)
                .ok_or_else(|| bad("cashuB: no p array"))?;
            for p in ps {
                if proofs.len() >= MAX_PROOFS {
                    return Err(bad(format!("more than {MAX_PROOFS} proofs")));
                }
                let p = as_map(p, "proof")?;
                let amount = field(p, "a")
                    .and_then(Value::as_integer)
                    .and_then(|i| u64::try_from(i).ok())
                    .ok_or_else(|| bad("cashuB: amount a is not an unsigned integer"))?;
                let secret = text_field(p, "s")?.ok_or_else(|| bad("cashuB: no secret s"))?;
                let c = field(p, "c")
                    .and_then(Value::as_bytes)
                    .ok_or_else(|| bad("cashuB: c is not bytes"))?;
                let witness = text_field(p, "w")?.map(str::to_owned);
                proofs.push(Proof {
                    amount,
                    id: hex::encode(id),
                    secret: secret.to_owned(),
                    c: hex::encode(c),
                    witness,
                });
            }
        }
        Ok(Token {
            mint,
            unit,
            memo,
            proofs,
        })
    }

    /// The version 4 text (`cashuB…`, unpadded base64url, keys in nutshell's order).
    pub fn to_v4(&self) -> Result<String> {
        let mut sets: Vec<(String, Vec<&Proof>)> = Vec::new();
        for p in &self.proofs {
            match sets.iter_mut().find(|(id, _)| *id == p.id) {
                Some((_, ps)) => ps.push(p),
                None => sets.push((p.id.clone(), vec![p])),
            }
        }
        let mut t = Vec::new();
        for (id, ps) in sets {
            let id = hex::decode(&id).map_err(|e| bad(format!("keyset id: {e}")))?;
            let mut proofs = Vec::new();
            for p in ps {
                let c = hex::decode(&p.c).map_err(|e| bad(format!("C: {e}")))?;
                let mut fields = vec![
                    (Value::from("a"), Value::from(p.amount)),
                    (Value::from("s"), Value::from(p.secret.as_str())),
                    (Value::from("c"), Value::Bytes(c)),
                ];
                if let Some(w) = &p.witness {
                    fields.push((Value::from("w"), Value::from(w.as_str())));
                }
                proofs.push(Value::Map(fields));
            }
            t.push(Value::Map(vec![
                (Value::from("i"), Value::Bytes(id)),
                (Value::from("p"), Value::Array(proofs)),
            ]));
        }
        let mut top = vec![(Value::from("t"), Value::Array(t))];
        if let Some(d) = &self.memo {
            top.push((Value::from("d"), Value::from(d.as_str())));
        }
        top.push((Value::from("m"), Value::from(self.mint.as_str())));
        top.push((Value::from("u"), Value::from(self.unit.as_str())));
        let mut out = Vec::new();
        ciborium::ser::into_writer(&Value::Map(top), &mut out)
            .map_err(|e| bad(format!("encoding: {e}")))?;
        Ok(format!("cashuB{}", URL_SAFE_NO_PAD.encode(out)))
    }
}

/// A mint URL as compared and stored: trimmed, without trailing slashes.
pub fn normalize_mint(url: &str) -> String {
    url.trim().trim_end_matches('/').to_owned()
}

fn as_map<'a>(v: &'a Value, what: &str) -> Result<&'a Vec<(Value, Value)>> {
    v.as_map()
        .ok_or_else(|| bad(format!("cashuB: {what} is not a map")))
}

fn field<'a>(map: &'a [(Value, Value)], key: &str) -> Option<&'a Value> {
    map.iter()
        .find(|(k, _)| k.as_text() == Some(key))
        .map(|(_, v)| v)
}

fn text_field<'a>(map: &'a [(Value, Value)], key: &str) -> Result<Option<&'a str>> {
    match field(map, key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_text()
            .map(Some)
            .ok_or_else(|| bad(format!("cashuB: {key} is not text"))),
    }
}
