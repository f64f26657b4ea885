//! L402 (bLIP-26, formerly LSAT): paid HTTP requests — a macaroon that commits to a
//! Lightning invoice's payment hash, and the invoice's preimage as proof of payment.
//!
//! - [`Macaroon`]: the libmacaroons/go-macaroon **version 2 binary** format (what LND and
//!   aperture send, base64), its HMAC-SHA256 chain (`HMAC(HMAC("macaroons-key-generator",
//!   root), id)`, then one HMAC per first-party caveat), bounded on decode.
//! - [`Identifier`]: L402's version-0 identifier: version (u16, big-endian), payment hash,
//!   a 32-byte token id.
//! - [`Challenge`] (`WWW-Authenticate: L402 macaroon="…", invoice="…"`) and
//!   [`Credential`] (`Authorization: L402 <macaroon>:<preimage hex>`), `LSAT` accepted as
//!   the scheme's old name.
//! - [`Minter`]: mints a route's macaroon under a root key derived from a node secret
//!   and the token id (nothing stored per challenge) and checks a credential: the chain,
//!   the preimage, then every caveat it knows — `services` must name [`SERVICE`],
//!   `fleetmesh_capabilities` the route, `fleetmesh_valid_until` a time not past,
//!   `fleetmesh_amount_sat` at least the route's price now. Caveats it does not know are
//!   skipped (a holder may attenuate for others), as the L402 spec says.
//! - [`Spent`]: which paid credentials were used (`l402.sqlite`): a credential buys one
//!   request, redeemed before the request runs and released when the node refused it.
//!
//! Use it where the node prices a route (`[api.prices]`, the appliance's `l402` module)
//! and where a client pays one (`meshnode settle l402`, `job submit --pay l402`).

use base64::Engine as _;
use hmac::{Hmac, Mac as _};
use sha2::{Digest as _, Sha256};

use crate::{Result, SettleError};

/// The service name in `services` caveats.
pub const SERVICE: &str = "fleetmesh";
/// The largest macaroon (decoded) read from a stranger.
pub const MAX_MACAROON_BYTES: usize = 4096;
/// The most caveats a macaroon may carry.
pub const MAX_CAVEATS: usize = 32;

const KEY_GENERATOR: &[u8] = b"macaroons-key-generator";

fn refused(why: impl Into<String>) -> SettleError {
    SettleError::Refused(why.into())
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    m.update(data);
    m.finalize().into_bytes().into()
}

/// A macaroon with first-party caveats only (third-party ones are refused on decode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Macaroon {
    /// Its location hint (not signed).
    pub location: String,
    /// Its public identifier.
    pub identifier: Vec<u8>,
    /// Its first-party caveats, in order.
    pub caveats: Vec<Vec<u8>>,
    /// The last HMAC of the chain.
    pub signature: [u8; 32],
}

// the V2 binary format's field types
const EOS: u8 = 0;
const LOCATION: u8 = 1;
const IDENTIFIER: u8 = 2;
const VID: u8 = 4;
const SIGNATURE: u8 = 6;

fn put_field(out: &mut Vec<u8>, kind: u8, data: &[u8]) {
    out.push(kind);
    let mut n = data.len();
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    }
    out.extend_from_slice(data);
}

/// A reader over the V2 binary encoding.
struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    fn byte(&mut self) -> Result<u8> {
        let (&b, rest) = self
            .rest
            .split_first()
            .ok_or_else(|| refused("macaroon: truncated"))?;
        self.rest = rest;
        Ok(b)
    }

    /// The next field: its type and data, or `None` at an end-of-section.
    fn next(&mut self) -> Result<Option<(u8, &'a [u8])>> {
        let kind = self.byte()?;
        if kind == EOS {
            return Ok(None);
        }
        let mut len = 0usize;
        for shift in (0..).step_by(7) {
            if shift > 14 {
                return Err(refused("macaroon: a field length over 2 MiB"));
            }
            let b = self.byte()?;
            len |= usize::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
        }
        if len > self.rest.len() {
            return Err(refused("macaroon: a field runs past the end"));
        }
        let (data, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(Some((kind, data)))
    }
}

impl Macaroon {
    /// A macaroon minted with `root_key` for `identifier`, with `caveats` added.
    pub fn mint(root_key: &[u8], location: &str, identifier: Vec<u8>, caveats: &[&str]) -> Self {
        let mut m = Macaroon {
            location: location.to_owned(),
            signature: hmac(&hmac(KEY_GENERATOR, root_key), &identifier),
            identifier,
            caveats: Vec::new(),
        };
        for c in caveats {
            m.add_caveat(c.as_bytes());
        }
        m
    }

    /// Adds a first-party caveat (attenuates; anyone holding the macaroon may).
    pub fn add_caveat(&mut self, caveat: &[u8]) {
        self.signature = hmac(&self.signature, caveat);
        self.caveats.push(caveat.to_vec());
    }

    /// Whether its chain holds under `root_key`, in equal time for every wrong one.
    pub fn signature_holds(&self, root_key: &[u8]) -> bool {
        let mut sig = hmac(&hmac(KEY_GENERATOR, root_key), &self.identifier);
        for c in &self.caveats {
            sig = hmac(&sig, c);
        }
        sig.iter()
            .zip(&self.signature)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    /// The V2 binary encoding.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![2u8];
        if !self.location.is_empty() {
            put_field(&mut out, LOCATION, self.location.as_bytes());
        }
        put_field(&mut out, IDENTIFIER, &self.identifier);
        out.push(EOS);
        for c in &self.caveats {
            put_field(&mut out, IDENTIFIER, c);
            out.push(EOS);
        }
        out.push(EOS);
        put_field(&mut out, SIGNATURE, &self.signature);
        out
    }

    /// The V2 binary encoding in standard base64 (as LND and aperture send it).
    pub fn to_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.to_bytes())
    }

    /// Decodes the V2 binary encoding. Refuses the V1 format, third-party caveats, more
    /// than [`MAX_CAVEATS`] or [`MAX_MACAROON_BYTES`], and trailing bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Macaroon> {
        if bytes.len() > MAX_MACAROON_BYTES {
            return Err(refused(format!(
                "macaroon: over {MAX_MACAROON_BYTES} bytes"
            )));
        }
        let Some((&2, rest)) = bytes.split_first() else {
            return Err(refused(
                "macaroon: not the version 2 binary format (first byte 0x02)",
            ));
        };
        let mut f = Fields { rest };
        let mut location = String::new();
        let mut identifier = None;
        while let Some((kind, data)) = f.next()? {
            match (kind, &identifier) {
                (LOCATION, None) if location.is_empty() => {
                    location = String::from_utf8(data.to_vec())
                        .map_err(|_| refused("macaroon: a location that is not UTF-8"))?;
                }
                (IDENTIFIER, None) => identifier = Some(data.to_vec()),
                _ => {
                    return Err(refused(format!(
                        "macaroon: unexpected field {kind} in its head"
                    )));
                }
            }
        }
        let identifier = identifier.ok_or_else(|| refused("macaroon: no identifier"))?;
        let mut caveats = Vec::new();
        loop {
            let mut id = None;
            let mut any = false;
            while let Some((kind, data)) = f.next()? {
                any = true;
                match (kind, &id) {
                    (LOCATION, None) => {}
                    (IDENTIFIER, None) => id = Some(data.to_vec()),
                    (VID, _) => {
                        return Err(refused(
                            "macaroon: a third-party caveat (this node mints none)",
                        ));
                    }
                    _ => {
                        return Err(refused(format!(
                            "macaroon: unexpected field {kind} in a caveat"
                        )));
                    }
                }
            }
            if !any {
                break;
            }
            let id = id.ok_or_else(|| refused("macaroon: a caveat without an identifier"))?;
            if caveats.len() == MAX_CAVEATS {
                return Err(refused(format!("macaroon: over {MAX_CAVEATS} caveats")));
            }
            caveats.push(id);
        }
        let signature = match f.next()? {
            Some((SIGNATURE, s)) => <[u8; 32]>::try_from(s)
                .map_err(|_| refused("macaroon: a signature that is not 32 bytes"))?,
            _ => return Err(refused("macaroon: no signature")),
        };
        if !f.rest.is_empty() {
            return Err(refused("macaroon: bytes after its signature"));
        }
        Ok(Macaroon {
            location,
            identifier,
            caveats,
            signature,
        })
    }

    /// Decodes base64 (standard or URL-safe, padded or not) of the V2 binary format.
    pub fn from_base64(text: &str) -> Result<Macaroon> {
        if text.len() > MAX_MACAROON_BYTES * 4 / 3 + 4 {
            return Err(refused(format!(
                "macaroon: over {MAX_MACAROON_BYTES} bytes"
            )));
        }
        let unpadded = text.trim().trim_end_matches('=');
        let bytes = if unpadded.contains(['-', '_']) {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(unpadded)
        } else {
            base64::engine::general_purpose::STANDARD_NO_PAD.decode(unpadded)
        }
        .map_err(|e| refused(format!("macaroon: not base64 ({e})")))?;
        Macaroon::from_bytes(&bytes)
    }

    /// Its caveats as text (`key=value`); one that is not UTF-8 shows lossily.
    pub fn caveat_texts(&self) -> Vec<String> {
        self.caveats
            .iter()
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect()
    }
}

/// L402's version-0 macaroon identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identifier {
    /// The invoice's payment hash.
    pub payment_hash: [u8; 32],
    /// A random id of this credential.
    pub token_id: [u8; 32],
}

impl Identifier {
    /// The encoding: version 0 (u16 big-endian), payment hash, token id.
    pub fn to_bytes(&self) -> Vec<u8> {
        [&[0u8, 0][..], &self.payment_hash, &self.token_id].concat()
    }

    /// Decodes a version-0 identifier (66 bytes).
    pub fn from_bytes(b: &[u8]) -> Result<Identifier> {
        match b {
            [0, 0, rest @ ..] if rest.len() == 64 => Ok(Identifier {
                payment_hash: rest[..32].try_into().expect("32 bytes"),
                token_id: rest[32..].try_into().expect("32 bytes"),
            }),
            [0, 0, ..] => Err(refused(format!(
                "macaroon identifier: {} bytes, version 0 has 66",
                b.len()
            ))),
            [hi, lo, ..] => Err(refused(format!(
                "macaroon identifier: version {} (this node knows 0)",
                u16::from_be_bytes([*hi, *lo])
            ))),
            _ => Err(refused("macaroon identifier: shorter than its version")),
        }
    }
}

/// Splits `L402 …`/`LSAT …` (any case) into what follows the scheme.
fn after_scheme(header: &str) -> Option<&str> {
    let (scheme, rest) = header.trim().split_once(' ')?;
    (scheme.eq_ignore_ascii_case("L402") || scheme.eq_ignore_ascii_case("LSAT"))
        .then_some(rest.trim())
}

/// Whether an `Authorization` header names the L402 (or LSAT) scheme.
pub fn is_l402(header: &str) -> bool {
    after_scheme(header).is_some()
}

/// A server's challenge: `WWW-Authenticate: L402 macaroon="…", invoice="…"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// The macaroon, base64.
    pub macaroon: String,
    /// The BOLT11 invoice to pay.
    pub invoice: String,
}

impl Challenge {
    /// The header's value.
    pub fn header(&self) -> String {
        format!(
            "L402 macaroon=\"{}\", invoice=\"{}\"",
            self.macaroon, self.invoice
        )
    }

    /// Reads a `WWW-Authenticate` value (`L402` or `LSAT`; parameters in any order).
    pub fn parse(header: &str) -> Result<Challenge> {
        let rest = after_scheme(header)
            .ok_or_else(|| refused(format!("not an L402 challenge: {header:.60}")))?;
        let (mut macaroon, mut invoice) = (None, None);
        for part in rest.split(',') {
            let Some((k, v)) = part.split_once('=') else {
                continue;
            };
            let v = v.trim().trim_matches('"').to_owned();
            match k.trim().to_ascii_lowercase().as_str() {
                "macaroon" => macaroon = Some(v),
                "invoice" => invoice = Some(v),
                _ => {}
            }
        }
        match (macaroon, invoice) {
            (Some(macaroon), Some(invoice)) => Ok(Challenge { macaroon, invoice }),
            _ => Err(refused("an L402 challenge without macaroon= and invoice=")),
        }
    }
}

/// A client's credential: `Authorization: L402 <macaroon base64>:<preimage hex>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// The macaroon.
    pub macaroon: Macaroon,
    /// The invoice's preimage.
    pub preimage: [u8; 32],
}

impl Credential {
    /// The header's value for `macaroon` (base64 as given) and `preimage`.
    pub fn header(macaroon: &str, preimage: &[u8; 32]) -> String {
        format!("L402 {macaroon}:{}", hex::encode(preimage))
    }

    /// Reads an `Authorization` value. One macaroon only (the spec allows a
    /// comma-separated list; this node mints one per credential).
    pub fn parse(header: &str) -> Result<Credential> {
        let rest = after_scheme(header).ok_or_else(|| refused("not an L402 credential"))?;
        let (mac, preimage) = rest
            .rsplit_once(':')
            .ok_or_else(|| refused("L402 credential: not <macaroon>:<preimage>"))?;
        if mac.contains(',') {
            return Err(refused("L402 credential: one macaroon, not a list"));
        }
        let mut pre = [0u8; 32];
        hex::decode_to_slice(preimage.trim(), &mut pre)
            .map_err(|_| refused("L402 credential: the preimage is not 32 bytes of hex"))?;
        Ok(Credential {
            macaroon: Macaroon::from_base64(mac)?,
            preimage: pre,
        })
    }
}

/// What a verified credential paid for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paid {
    /// The invoice's payment hash, hex.
    pub payment_hash: String,
    /// The amount the macaroon says was paid, in sats.
    pub amount_sat: u64,
    /// The value of the node's first `fleetmesh_quote` caveat (a Cashu mint quote to
    /// claim), when it minted one.
    pub quote: Option<String>,
}

/// Mints and checks this node's macaroons.
pub struct Minter {
    secret: [u8; 32],
}

impl Minter {
    /// A minter whose root keys derive from `secret` (keep it: macaroons minted under it
    /// stop verifying when it changes).
    pub fn new(secret: [u8; 32]) -> Minter {
        Minter { secret }
    }

    fn root_key(&self, token_id: &[u8; 32]) -> [u8; 32] {
        hmac(
            &self.secret,
            &[b"fleetmesh/l402/v1/".as_slice(), token_id].concat(),
        )
    }

    /// A macaroon for one request to `route` costing `amount_sat`, committing to
    /// `payment_hash`, usable until `valid_until` (unix seconds); `quote` names the Cashu
    /// mint quote behind the invoice, when there is one.
    pub fn mint(
        &self,
        payment_hash: [u8; 32],
        route: &str,
        amount_sat: u64,
        valid_until: u64,
        quote: Option<&str>,
    ) -> Macaroon {
        let mut token_id = [0u8; 32];
        getrandom::fill(&mut token_id).expect("the OS's random numbers");
        let id = Identifier {
            payment_hash,
            token_id,
        };
        let mut caveats = vec![
            format!("services={SERVICE}:0"),
            format!("{SERVICE}_capabilities={route}"),
            format!("{SERVICE}_valid_until={valid_until}"),
            format!("{SERVICE}_amount_sat={amount_sat}"),
        ];
        if let Some(q) = quote {
            caveats.push(format!("{SERVICE}_quote={q}"));
        }
        let refs: Vec<&str> = caveats.iter().map(String::as_str).collect();
        Macaroon::mint(&self.root_key(&token_id), SERVICE, id.to_bytes(), &refs)
    }

    /// Checks `cred` for a request to `route` whose price is `price_sat`, at `now`: the
    /// macaroon's chain, the preimage against its payment hash, every caveat this node
    /// knows. The reason when it does not hold.
    pub fn verify(&self, cred: &Credential, route: &str, price_sat: u64, now: u64) -> Result<Paid> {
        let id = Identifier::from_bytes(&cred.macaroon.identifier)?;
        if !cred.macaroon.signature_holds(&self.root_key(&id.token_id)) {
            return Err(refused(
                "L402: the macaroon's signature does not hold (not minted here, or altered)",
            ));
        }
        if <[u8; 32]>::from(Sha256::digest(cred.preimage)) != id.payment_hash {
            return Err(refused(
                "L402: the preimage does not hash to the macaroon's payment hash (pay the invoice)",
            ));
        }
        let mut amount = None;
        let mut quote = None;
        for c in cred.macaroon.caveat_texts() {
            let Some((key, value)) = c.split_once('=') else {
                continue;
            };
            let (key, value) = (key.trim(), value.trim());
            let list = || value.split(',').map(str::trim);
            match key.strip_prefix(SERVICE).and_then(|k| k.strip_prefix('_')) {
                None if key == "services"
                    && !list().any(|s| s.split(':').next() == Some(SERVICE)) =>
                {
                    return Err(refused(format!(
                        "L402: services={value} excludes {SERVICE}"
                    )));
                }
                Some("capabilities") if !list().any(|r| r == route) => {
                    return Err(refused(format!(
                        "L402: this credential is for {value}, not {route}"
                    )));
                }
                Some("valid_until") => {
                    let until: u64 = value
                        .parse()
                        .map_err(|_| refused(format!("L402: valid_until={value}")))?;
                    if until < now {
                        return Err(refused(format!("L402: the credential expired at {until}")));
                    }
                }
                Some("amount_sat") => {
                    let paid: u64 = value
                        .parse()
                        .map_err(|_| refused(format!("L402: amount_sat={value}")))?;
                    if paid < price_sat {
                        return Err(refused(format!(
                            "L402: {paid} sat paid; {route} costs {price_sat} sat now"
                        )));
                    }
                    amount.get_or_insert(paid);
                }
                Some("quote") => {
                    quote.get_or_insert(value.to_owned());
                }
                // caveats this node does not know: skipped, as L402 says
                _ => {}
            }
        }
        Ok(Paid {
            payment_hash: hex::encode(id.payment_hash),
            amount_sat: amount.ok_or_else(|| refused("L402: no amount caveat"))?,
            quote,
        })
    }
}

/// The credentials used (`l402.sqlite`): each buys one request.
pub struct Spent {
    db: rusqlite::Connection,
    path: String,
}

const SCHEMA: i64 = 1;

impl Spent {
    /// Opens (creating) the file at `path`.
    pub fn open(path: &std::path::Path) -> Result<Spent> {
        let db = crate::open_db(path, SCHEMA)?;
        let s = Spent {
            db,
            path: path.display().to_string(),
        };
        s.db.execute_batch(
            "CREATE TABLE IF NOT EXISTS spent (payment_hash TEXT PRIMARY KEY, route TEXT NOT \
             NULL, amount_sat INTEGER NOT NULL, quote TEXT, used_at INTEGER NOT NULL, claimed \
             INTEGER NOT NULL DEFAULT 0); PRAGMA user_version = 1;",
        )
        .map_err(|e| s.store(e))?;
        Ok(s)
    }

    fn store(&self, e: rusqlite::Error) -> SettleError {
        SettleError::Store {
            path: self.path.clone(),
            reason: e.to_string(),
        }
    }

    /// Records `paid` as used for `route` at `now`; refused when it already was.
    pub fn redeem(&self, paid: &Paid, route: &str, now: u64) -> Result<()> {
        let n = self
            .db
            .execute(
                "INSERT OR IGNORE INTO spent (payment_hash, route, amount_sat, quote, used_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                rusqlite::params![
                    paid.payment_hash,
                    route,
                    paid.amount_sat as i64,
                    paid.quote,
                    now as i64
                ],
            )
            .map_err(|e| self.store(e))?;
        if n == 0 {
            return Err(refused(
                "L402: this credential was already used (each buys one request; pay a new invoice)",
            ));
        }
        Ok(())
    }

    /// Forgets a redemption (the node refused the request, so the credential may be
    /// used again).
    pub fn release(&self, payment_hash: &str) -> Result<()> {
        self.db
            .execute("DELETE FROM spent WHERE payment_hash = ?1", [payment_hash])
            .map_err(|e| self.store(e))?;
        Ok(())
    }

    /// The mint quotes of used credentials not yet claimed: (payment hash, quote, sats).
    pub fn unclaimed(&self) -> Result<Vec<(String, String, u64)>> {
        let mut st = self
            .db
            .prepare(
                "SELECT payment_hash, quote, amount_sat FROM spent WHERE quote IS NOT NULL AND \
                 claimed = 0 ORDER BY used_at LIMIT 100",
            )
            .map_err(|e| self.store(e))?;
        st.query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? as u64))
        })
        .and_then(|rows| rows.collect())
        .map_err(|e| self.store(e))
    }

    /// Marks the quote of `payment_hash` claimed.
    pub fn claimed(&self, payment_hash: &str) -> Result<()> {
        self.db
            .execute(
                "UPDATE spent SET claimed = 1 WHERE payment_hash = ?1",
                [payment_hash],
            )
            .map_err(|e| self.store(e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paid_credential(m: &Minter, route: &str, amount: u64, until: u64) -> Credential {
        let preimage = [7u8; 32];
        let hash: [u8; 32] = Sha256::digest(preimage).into();
        Credential {
            macaroon: m.mint(hash, route, amount, until, None),
            preimage,
        }
    }

    /// libmacaroons' README example, minted and serialized (V2 binary, URL-safe base64)
    /// by pymacaroons 0.13.0 (MIT): the key derivation, the caveat chain and the encoding.
    #[test]
    fn the_libmacaroons_example_matches_pymacaroons_byte_for_byte() {
        let m = Macaroon::mint(
            b"this is our super secret key; only we should know it",
            "http://mybank/",
            b"we used our secret key".to_vec(),
            &["account = 3735928559"],
        );
        assert_eq!(
            hex::encode(m.signature),
            "1efe4763f290dbce0c1d08477367e11f4eee456a64933cf662d79772dbb82128"
        );
        assert_eq!(
            hex::encode(m.to_bytes()),
            "02010e687474703a2f2f6d7962616e6b2f021677652075736564206f757220736563726574206b6579\
             0002146163636f756e74203d2033373335393238353539000006201efe4763f290dbce0c1d08477367\
             e11f4eee456a64933cf662d79772dbb82128"
        );
        let theirs = "AgEOaHR0cDovL215YmFuay8CFndlIHVzZWQgb3VyIHNlY3JldCBrZXkAAhRhY2NvdW50ID0gMzcz\
                      NTkyODU1OQAABiAe_kdj8pDbzgwdCEdzZ-EfTu5FamSTPPZi15dy27ghKA";
        assert_eq!(Macaroon::from_base64(theirs).unwrap(), m);
        assert!(m.signature_holds(b"this is our super secret key; only we should know it"));
        assert!(!m.signature_holds(b"another key"));
    }

    #[test]
    fn a_minted_macaroon_round_trips_and_verifies_and_refuses_what_it_must() {
        let m = Minter::new([1; 32]);
        let cred = paid_credential(&m, "/v1/jobs", 3, 2000);
        let header = Credential::header(&cred.macaroon.to_base64(), &cred.preimage);
        let back = Credential::parse(&header).unwrap();
        assert_eq!(back, cred);
        let paid = m.verify(&back, "/v1/jobs", 3, 1000).unwrap();
        assert_eq!(paid.amount_sat, 3);
        assert_eq!(paid.payment_hash, hex::encode(Sha256::digest([7u8; 32])));
        let why = |r: Result<Paid>| r.unwrap_err().to_string();
        assert!(why(m.verify(&cred, "/v1/proofs/prove", 3, 1000)).contains("not /v1/proofs/prove"));
        assert!(why(m.verify(&cred, "/v1/jobs", 3, 2001)).contains("expired"));
        assert!(why(m.verify(&cred, "/v1/jobs", 4, 1000)).contains("costs 4 sat"));
        assert!(why(Minter::new([2; 32]).verify(&cred, "/v1/jobs", 3, 1000)).contains("signature"));
        let mut wrong = cred.clone();
        wrong.preimage[0] ^= 1;
        assert!(why(m.verify(&wrong, "/v1/jobs", 3, 1000)).contains("preimage"));
        // a caveat added by the holder binds; one removed breaks the chain
        let mut narrowed = cred.clone();
        narrowed.macaroon.add_caveat(b"fleetmesh_valid_until=1500");
        narrowed.macaroon.add_caveat(b"somebody_else=whatever");
        assert!(m.verify(&narrowed, "/v1/jobs", 3, 1400).is_ok());
        assert!(why(m.verify(&narrowed, "/v1/jobs", 3, 1600)).contains("expired at 1500"));
        let mut cut = narrowed.clone();
        cut.macaroon.caveats.remove(2);
        assert!(why(m.verify(&cut, "/v1/jobs", 3, 1400)).contains("signature"));
    }

    #[test]
    fn hostile_encodings_are_refused_with_a_reason_and_never_panic() {
        let m = Minter::new([1; 32]);
        let good = paid_credential(&m, "/v1/jobs", 1, 10).macaroon.to_bytes();
        for cut in 0..good.len() {
            assert!(Macaroon::from_bytes(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(Macaroon::from_bytes(&trailing).is_err());
        let mut v1 = good.clone();
        v1[0] = 1;
        assert!(
            Macaroon::from_bytes(&v1)
                .unwrap_err()
                .to_string()
                .contains("version 2")
        );
        // a third-party caveat (a verification id)
        let mut third = vec![2u8];
        put_field(&mut third, IDENTIFIER, b"id");
        third.push(EOS);
        put_field(&mut third, IDENTIFIER, b"cav");
        put_field(&mut third, VID, b"vid");
        third.extend([EOS, EOS]);
        put_field(&mut third, SIGNATURE, &[0; 32]);
        assert!(
            Macaroon::from_bytes(&third)
                .unwrap_err()
                .to_string()
                .contains("third-party")
        );
        for bad in [
            "L402 x",
            "L402 :00",
            "Bearer abc",
            "L402 AgE=:zz",
            "L402 a,b:00",
        ] {
            assert!(Credential::parse(bad).is_err(), "{bad}");
        }
        assert!(
            Identifier::from_bytes(&[0, 1, 2])
                .unwrap_err()
                .to_string()
                .contains("version 1")
        );
    }

    #[test]
    fn challenges_read_back_in_either_scheme_name_and_any_order() {
        let c = Challenge {
            macaroon: "AgE".into(),
            invoice: "lnbc1".into(),
        };
        assert_eq!(Challenge::parse(&c.header()).unwrap(), c);
        assert_eq!(
            Challenge::parse("LSAT invoice=\"lnbc1\", macaroon=\"AgE\"").unwrap(),
            c
        );
        assert!(Challenge::parse("Bearer realm=x").is_err());
    }

    #[test]
    fn a_credential_is_spent_once_and_released_when_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = Spent::open(&dir.path().join("l402.sqlite")).unwrap();
        let paid = Paid {
            payment_hash: "ab".repeat(32),
            amount_sat: 2,
            quote: Some("q1".into()),
        };
        s.redeem(&paid, "/v1/jobs", 1).unwrap();
        assert!(
            s.redeem(&paid, "/v1/jobs", 2)
                .unwrap_err()
                .to_string()
                .contains("already used")
        );
        assert_eq!(
            s.unclaimed().unwrap(),
            vec![(paid.payment_hash.clone(), "q1".into(), 2)]
        );
        s.claimed(&paid.payment_hash).unwrap();
        assert!(s.unclaimed().unwrap().is_empty());
        s.release(&paid.payment_hash).unwrap();
        s.redeem(&paid, "/v1/jobs", 3).unwrap();
    }
}
