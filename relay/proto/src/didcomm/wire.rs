//! A packed message as read off the wire, in typed structs rather than a
//! `serde_json::Value`: a JWE's and a JWS's fields are borrowed from the bytes (the
//! ciphertext is not copied, let alone decoded, while the message is read), the lists are
//! bounded as they are read, and a body that is not a JSON object, or a field of the wrong
//! type, is refused at the first byte that does not fit. What the layer is — JWE
//! (`ciphertext`), JWS (`signatures`) or plaintext — is decided as `unpack` always did.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A JSON string, borrowed from the message where it has no escapes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub(crate) struct Text<'a>(#[serde(borrow)] pub Cow<'a, str>);

impl Text<'_> {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// A JSON array of at most `N` items: the `N + 1`th is refused as it is read, so a long
/// list never fills memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bounded<T, const N: usize>(pub Vec<T>);

impl<'de, T: Deserialize<'de>, const N: usize> Deserialize<'de> for Bounded<T, N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T, const N: usize>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for V<T, N> {
            type Value = Bounded<T, N>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "an array of at most {N} items")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    if items.len() == N {
                        return Err(de::Error::custom(format!("more than {N} items")));
                    }
                    items.push(item);
                }
                Ok(Bounded(items))
            }
        }
        d.deserialize_seq(V(PhantomData))
    }
}

/// The header of one JWE recipient (or of one JWS signature): its key id.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct KidHeader<'a> {
    #[serde(borrow, default)]
    pub kid: Option<Text<'a>>,
}

/// One recipient of a JWE.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Recipient<'a> {
    #[serde(borrow, default)]
    pub header: Option<KidHeader<'a>>,
    #[serde(borrow, default)]
    pub encrypted_key: Option<Text<'a>>,
}

/// One signature of a JWS.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Signature<'a> {
    #[serde(borrow, default)]
    pub protected: Option<Text<'a>>,
    #[serde(borrow, default)]
    pub signature: Option<Text<'a>>,
    #[serde(borrow, default)]
    pub header: Option<KidHeader<'a>>,
}

/// The most signatures a JWS is read with (one is taken; more are refused by count).
pub(crate) const MAX_SIGNATURES: usize = 8;

/// A JWE in general JSON serialization; what is missing is refused by name when it is used.
#[derive(Debug, Clone, Default)]
pub(crate) struct Jwe<'a> {
    pub protected: Option<Text<'a>>,
    pub recipients: Option<Bounded<Recipient<'a>, { super::jose::MAX_RECIPIENTS }>>,
    pub iv: Option<Text<'a>>,
    pub ciphertext: Option<Text<'a>>,
    pub tag: Option<Text<'a>>,
}

/// A JWS in general JSON serialization.
#[derive(Debug, Clone, Default)]
pub(crate) struct Jws<'a> {
    pub payload: Option<Text<'a>>,
    pub signatures: Option<Bounded<Signature<'a>, MAX_SIGNATURES>>,
}

/// A plaintext message's head: what is checked before its body is read into memory.
#[derive(Debug, Clone, Default)]
pub(crate) struct Head<'a> {
    pub id: Option<Text<'a>>,
    pub type_: Option<Text<'a>>,
    pub typ: Option<Text<'a>>,
}

/// One layer of a packed message.
#[derive(Debug, Clone)]
pub(crate) enum Packed<'a> {
    /// It has a `ciphertext`.
    Jwe(Jwe<'a>),
    /// It has `signatures` (and no `ciphertext`).
    Jws(Jws<'a>),
    /// Neither: a plaintext message, whose head is read (the rest is skipped unread).
    Plain(Head<'a>),
}

impl<'de> Deserialize<'de> for Packed<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Packed<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a DIDComm message (a JSON object: a JWE, a JWS or a plaintext)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let (mut jwe, mut jws, mut head) =
                    (Jwe::default(), Jws::default(), Head::default());
                let (mut encrypted, mut signed) = (false, false);
                while let Some(key) = map.next_key::<Text<'de>>()? {
                    // a field of the wrong type is refused here, naming it
                    let named = |e: A::Error| de::Error::custom(format!("{}: {e}", key.as_str()));
                    match key.as_str() {
                        "protected" => jwe.protected = map.next_value().map_err(named)?,
                        "recipients" => jwe.recipients = map.next_value().map_err(named)?,
                        "iv" => jwe.iv = map.next_value().map_err(named)?,
                        "tag" => jwe.tag = map.next_value().map_err(named)?,
                        "ciphertext" => {
                            encrypted = true;
                            jwe.ciphertext = map.next_value().map_err(named)?;
                        }
                        "payload" => jws.payload = map.next_value().map_err(named)?,
                        "signatures" => {
                            signed = true;
                            jws.signatures = map.next_value().map_err(named)?;
                        }
                        "id" => head.id = map.next_value().map_err(named)?,
                        "type" => head.type_ = map.next_value().map_err(named)?,
                        "typ" => head.typ = map.next_value().map_err(named)?,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(if encrypted {
                    Packed::Jwe(jwe)
                } else if signed {
                    Packed::Jws(jws)
                } else {
                    Packed::Plain(head)
                })
            }
        }
        d.deserialize_map(V)
    }
}

/// Reads one layer from `bytes`; `what` names them in a syntax error ("not JSON", "the
/// decrypted payload is not JSON").
pub(crate) fn read<'a>(bytes: &'a [u8], what: &str) -> crate::Result<Packed<'a>> {
    serde_json::from_slice(bytes).map_err(|e| {
        super::jose::err(match e.classify() {
            serde_json::error::Category::Data => format!("not a DIDComm message: {e}"),
            _ => format!("{what}: {e}"),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The column a serde_json error names.
    fn column(e: &str) -> usize {
        let (_, after) = e.rsplit_once("column ").expect("a position");
        after.trim().parse().expect("a column")
    }

    #[test]
    fn a_body_of_the_wrong_shape_is_refused_where_it_stops_fitting() {
        // an array of zeros: refused at its first byte, whatever follows
        let mut zeros = b"[0".to_vec();
        zeros.extend(",0".repeat(1 << 20).as_bytes());
        zeros.push(b']');
        let e = read(&zeros, "not JSON").unwrap_err().to_string();
        assert!(
            e.contains("not a DIDComm message") && column(&e) <= 1,
            "{e}"
        );
        // a ciphertext that is not a string: refused there, by name
        let mut bad = br#"{"protected":"e30","ciphertext":["#.to_vec();
        bad.extend("0,".repeat(1 << 20).as_bytes());
        let e = read(&bad, "not JSON").unwrap_err().to_string();
        assert!(
            e.contains("ciphertext: invalid type") && column(&e) <= 34,
            "{e}"
        );
        // 65 recipients: refused at the 65th
        let many = format!(
            r#"{{"ciphertext":"","recipients":[{}]}}"#,
            vec![r#"{"header":{"kid":"k"}}"#; 65].join(",")
        );
        let e = read(many.as_bytes(), "not JSON").unwrap_err().to_string();
        assert!(e.contains("recipients: more than 64 items"), "{e}");
        // what a layer is, as before: a ciphertext makes a JWE, signatures a JWS
        let jwe = read(br#"{"signatures":[],"ciphertext":"x"}"#, "").unwrap();
        assert!(matches!(jwe, Packed::Jwe(j) if j.ciphertext.as_ref().unwrap().as_str() == "x"));
        let jws = read(br#"{"payload":"p","signatures":[{}]}"#, "").unwrap();
        assert!(matches!(jws, Packed::Jws(j) if j.signatures.as_ref().unwrap().0.len() == 1));
        let plain = read(br#"{"id":"1","type":"t","body":{"x":[1,2]}}"#, "").unwrap();
        assert!(matches!(plain, Packed::Plain(h) if h.type_.as_ref().unwrap().as_str() == "t"));
        // not JSON at all
        let e = read(b"{not json", "not JSON").unwrap_err().to_string();
        assert!(e.starts_with("didcomm: not JSON: "), "{e}");
    }
}
