//! NIP-19 addresses of addressable events (`naddr1…`): the kind, author and `d` of an event
//! a reader fetches by address from the relays the address names. A node's descriptor
//! lists its terms (kind 30812, `d` = `compute`) this way, as a `nostr:naddr1…` service,
//! so that a buyer who resolves its DID knows where its current terms are.
//!
//! The bech32 string carries TLV records: 0 the `d` identifier (UTF-8), 1 a relay (UTF-8,
//! repeatable), 2 the author (32 bytes), 3 the kind (4 bytes, big-endian). Unknown types
//! are passed over, as NIP-19 asks; a decoded address is bounded (the string at most
//! [`MAX_LEN`] characters) and must carry the identifier, the author and the kind.

use bech32::{Bech32, Hrp};

use crate::{Error, Result};

/// The most characters an `naddr` string may have (a few dozen relays' worth).
pub const MAX_LEN: usize = 5000;

const HRP: &str = "naddr";

/// An addressable event's address: `kind:author:d`, and where it may be found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// The event's kind.
    pub kind: u16,
    /// The author's public key, hex.
    pub author: String,
    /// The `d` tag's value.
    pub identifier: String,
    /// Relays it is on.
    pub relays: Vec<String>,
}

fn bad(reason: impl Into<String>) -> Error {
    Error::InvalidEvent {
        field: "naddr",
        reason: reason.into(),
    }
}

impl Address {
    /// The `naddr1…` string (without `nostr:`).
    ///
    /// # Errors
    /// [`Error::InvalidEvent`] when the author is not 32 bytes of hex, or the identifier or
    /// a relay is longer than a TLV record holds (255 bytes).
    pub fn to_naddr(&self) -> Result<String> {
        let author = hex::decode(&self.author)
            .ok()
            .filter(|a| a.len() == 32)
            .ok_or_else(|| bad("the author is not 32 bytes of hex"))?;
        let mut tlv = Vec::new();
        let mut put = |t: u8, v: &[u8]| -> Result<()> {
            let len = u8::try_from(v.len()).map_err(|_| bad("a TLV value over 255 bytes"))?;
            tlv.extend_from_slice(&[t, len]);
            tlv.extend_from_slice(v);
            Ok(())
        };
        put(0, self.identifier.as_bytes())?;
        for r in &self.relays {
            put(1, r.as_bytes())?;
        }
        put(2, &author)?;
        put(3, &u32::from(self.kind).to_be_bytes())?;
        let hrp = Hrp::parse(HRP).map_err(|e| bad(e.to_string()))?;
        bech32::encode::<Bech32>(hrp, &tlv).map_err(|e| bad(e.to_string()))
    }

    /// Reads an `naddr1…` string, with or without `nostr:` (NIP-21).
    ///
    /// # Errors
    /// [`Error::InvalidEvent`] (field `naddr`) naming why: too long, not bech32 or another
    /// prefix, a truncated record, a record of the wrong size, a kind over 65535, or a
    /// missing identifier, author or kind.
    pub fn from_naddr(s: &str) -> Result<Address> {
        let s = s.strip_prefix("nostr:").unwrap_or(s);
        if s.len() > MAX_LEN {
            return Err(bad(format!("{} characters; at most {MAX_LEN}", s.len())));
        }
        let (hrp, data) = bech32::decode(s).map_err(|e| bad(e.to_string()))?;
        if hrp.as_str() != HRP {
            return Err(bad(format!("prefix {:?}, not {HRP:?}", hrp.as_str())));
        }
        let (mut identifier, mut author, mut kind) = (None, None, None);
        let mut relays = Vec::new();
        let mut rest = data.as_slice();
        while let [t, len, tail @ ..] = rest {
            let len = usize::from(*len);
            let Some((v, next)) = tail.split_at_checked(len) else {
                return Err(bad(format!(
                    "a type {t} record of {len} bytes is cut short"
                )));
            };
            let text =
                || String::from_utf8(v.to_vec()).map_err(|_| bad(format!("type {t} is not UTF-8")));
            match t {
                0 => identifier = Some(text()?),
                1 => relays.push(text()?),
                2 => {
                    let a: [u8; 32] = v
                        .try_into()
                        .map_err(|_| bad("the author is not 32 bytes"))?;
                    author = Some(hex::encode(a));
                }
                3 => {
                    let k: [u8; 4] = v.try_into().map_err(|_| bad("the kind is not 4 bytes"))?;
                    let k = u16::try_from(u32::from_be_bytes(k))
                        .map_err(|_| bad("the kind is over 65535"))?;
                    kind = Some(k);
                }
                _ => {}
            }
            rest = next;
        }
        if !rest.is_empty() {
            return Err(bad("a record is cut short"));
        }
        Ok(Address {
            kind: kind.ok_or_else(|| bad("no kind"))?,
            author: author.ok_or_else(|| bad("no author"))?,
            identifier: identifier.ok_or_else(|| bad("no identifier"))?,
            relays,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address() -> Address {
        Address {
            kind: 30812,
            author: "7e7e9c42a91bfef19fa929e5fda1b72e0ebc1a4c1141673e2794234d86addf4e".into(),
            identifier: "compute".into(),
            relays: vec![
                "wss://relay.example.org".into(),
                "ws://127.0.0.1:7777/".into(),
            ],
        }
    }

    #[test]
    fn an_address_reads_back_and_as_rust_nostr_reads_it() {
        let a = address();
        let s = a.to_naddr().unwrap();
        assert!(s.starts_with("naddr1"), "{s}");
        assert_eq!(Address::from_naddr(&s).unwrap(), a);
        assert_eq!(Address::from_naddr(&format!("nostr:{s}")).unwrap(), a);
        // the nostr crate's NIP-19 reads ours, and we read its
        use nostr::nips::nip19::{FromBech32 as _, Nip19Coordinate, ToBech32 as _};
        let theirs = Nip19Coordinate::from_bech32(&s).unwrap();
        assert_eq!(theirs.coordinate.kind.as_u16(), a.kind);
        assert_eq!(theirs.coordinate.public_key.to_hex(), a.author);
        assert_eq!(theirs.coordinate.identifier, a.identifier);
        let relays: Vec<String> = theirs.relays.iter().map(ToString::to_string).collect();
        assert_eq!(relays.len(), 2, "{relays:?}");
        assert_eq!(
            Address::from_naddr(&theirs.to_bech32().unwrap())
                .unwrap()
                .author,
            a.author
        );
    }

    #[test]
    fn addresses_made_by_other_clients_read() {
        // the strings nostr-tools' NIP-19 tests decode: one from habla.news, one from
        // go-nostr with its records in another order (author and kind before the relays)
        let habla = Address::from_naddr(
            "naddr1qq98yetxv4ex2mnrv4esygrl54h466tz4v0re4pyuavvxqptsejl0vxcmnhfl60z3rth2xkpjspsgqqqw4rsf34vl5",
        )
        .unwrap();
        assert_eq!(habla.kind, 30023);
        assert_eq!(habla.identifier, "references");
        assert_eq!(
            habla.author,
            "7fa56f5d6962ab1e3cd424e758c3002b8665f7b0d8dcee9fe9e288d7751ac194"
        );
        let go = Address::from_naddr(
            "naddr1qqrxyctwv9hxzq3q80cvv07tjdrrgpa0j7j7tmnyl2yr6yr7l8j4s3evf6u64th6gkwsxpqqqp65wqfwwaehxw309aex2mrp0yhxummnw3ezuetcv9khqmr99ekhjer0d4skjm3wv4uxzmtsd3jjucm0d5q3vamnwvaz7tmwdaehgu3wvfskuctwvyhxxmmd0zfmwx",
        )
        .unwrap();
        assert_eq!((go.kind, go.identifier.as_str()), (30023, "banana"));
        assert_eq!(
            go.author,
            "3bf0c63fcb93463407af97a5e5ee64fa883d107ef9e558472c4eb9aaaefa459d"
        );
        assert_eq!(
            go.relays,
            [
                "wss://relay.nostr.example.mydomain.example.com",
                "wss://nostr.banana.com"
            ]
        );
    }

    #[test]
    fn bad_addresses_are_refused_with_a_reason() {
        let s = address().to_naddr().unwrap();
        let mut flipped = s.clone().into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'q' { b'p' } else { b'q' };
        let flipped = String::from_utf8(flipped).unwrap();
        let npub = {
            let hrp = Hrp::parse("npub").unwrap();
            bech32::encode::<Bech32>(hrp, &[1u8; 32]).unwrap()
        };
        let without_kind = {
            let mut tlv = vec![0, 1, b'x', 2, 32];
            tlv.extend([7u8; 32]);
            bech32::encode::<Bech32>(Hrp::parse(HRP).unwrap(), &tlv).unwrap()
        };
        let cut = bech32::encode::<Bech32>(Hrp::parse(HRP).unwrap(), &[0, 9, b'x']).unwrap();
        let big_kind = {
            let mut tlv = vec![0, 1, b'x', 2, 32];
            tlv.extend([7u8; 32]);
            tlv.extend([3, 4, 0, 1, 0, 0]);
            bech32::encode::<Bech32>(Hrp::parse(HRP).unwrap(), &tlv).unwrap()
        };
        for (s, why) in [
            (flipped, "checksum"),
            (npub, "prefix"),
            (without_kind, "no kind"),
            (cut, "cut short"),
            (big_kind, "over 65535"),
            ("naddr1".to_owned() + &"q".repeat(MAX_LEN), "at most"),
        ] {
            let e = Address::from_naddr(&s).unwrap_err().to_string();
            assert!(e.to_lowercase().contains(why), "{why}: {e}");
        }
        let mut long = address();
        long.identifier = "x".repeat(256);
        assert!(long.to_naddr().is_err());
        long.identifier = "compute".into();
        long.author = "ab".into();
        assert!(long.to_naddr().is_err());
    }
}
