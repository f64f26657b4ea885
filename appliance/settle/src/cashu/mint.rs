//! The mint's HTTP API (`/v1`, NUT-01…09), as the wallet calls it.
//!
//! Every call is bounded: 10 s to connect, [`MintClient::timeout`] in all (a melt waits
//! for a Lightning payment), [`MAX_ANSWER_BYTES`] of answer. A refusal comes back as
//! [`SettleError::Mint`] with the mint's `detail` and `code`; anything else that goes wrong
//! on the way is [`SettleError::Unreachable`], where the request may or may not have taken
//! effect.

use std::collections::BTreeMap;
use std::time::Duration;

use secp256k1::PublicKey;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{BlindSignature, BlindedMessage, Proof, dhke, token::normalize_mint};
use crate::{Result, SettleError};

/// The largest answer read from a mint.
pub const MAX_ANSWER_BYTES: u64 = 8 << 20;

/// A keyset as `/v1/keysets` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeysetInfo {
    /// Its id.
    pub id: String,
    /// Its unit.
    pub unit: String,
    /// Whether the mint signs new outputs with it.
    pub active: bool,
    /// Fee per input, thousandths of the unit (NUT-02).
    #[serde(default)]
    pub input_fee_ppk: u64,
}

/// A mint quote (NUT-04): the invoice to pay for ecash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MintQuote {
    /// Its id.
    pub quote: String,
    /// The BOLT11 invoice.
    pub request: String,
    /// `UNPAID`, `PAID` or `ISSUED`.
    #[serde(default)]
    pub state: String,
    /// Unix seconds after which the invoice is void.
    #[serde(default)]
    pub expiry: Option<u64>,
    /// What mints before `state` said instead.
    #[serde(default, skip_serializing)]
    paid: Option<bool>,
}

/// A melt quote (NUT-05): what paying an invoice costs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeltQuote {
    /// Its id.
    pub quote: String,
    /// The invoice's amount, in the unit.
    pub amount: u64,
    /// What the mint holds back for Lightning fees (the unused part comes back, NUT-08).
    pub fee_reserve: u64,
    /// `UNPAID`, `PENDING` or `PAID`.
    #[serde(default)]
    pub state: String,
    /// The payment's preimage once paid.
    #[serde(default)]
    pub payment_preimage: Option<String>,
    /// Signatures on the blank outputs for the unused fee reserve.
    #[serde(default)]
    pub change: Option<Vec<BlindSignature>>,
    /// What mints before `state` said instead.
    #[serde(default, skip_serializing)]
    paid: Option<bool>,
}

/// A client of one mint.
#[derive(Debug, Clone)]
pub struct MintClient {
    url: String,
    http: reqwest::blocking::Client,
}

impl MintClient {
    /// A client of the mint at `url` (`http://` or `https://`).
    pub fn new(url: &str) -> Result<MintClient> {
        let url = normalize_mint(url);
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(SettleError::Refused(format!(
                "mint {url:?} is not an http(s) URL"
            )));
        }
        let http = crate::http::client(Self::timeout(), None).map_err(|reason| {
            SettleError::Unreachable {
                url: url.clone(),
                reason,
            }
        })?;
        Ok(MintClient { url, http })
    }

    /// The whole-request limit: 120 s (a melt answers once the payment settled).
    pub fn timeout() -> Duration {
        Duration::from_secs(120)
    }

    /// The mint's URL, normalized.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn unreachable(&self, reason: impl std::fmt::Display) -> SettleError {
        SettleError::Unreachable {
            url: self.url.clone(),
            reason: reason.to_string(),
        }
    }

    fn call<T: DeserializeOwned>(&self, req: reqwest::blocking::RequestBuilder) -> Result<T> {
        let (status, body) =
            crate::http::send(req, MAX_ANSWER_BYTES).map_err(|e| self.unreachable(e))?;
        if !status.is_success() {
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let detail = v
                .get("detail")
                .map(|d| d.as_str().map_or_else(|| d.to_string(), str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(200).collect());
            if status.is_server_error() && v.get("code").is_none() {
                return Err(self.unreachable(format!("{status}: {detail}")));
            }
            return Err(SettleError::Mint {
                url: self.url.clone(),
                status: status.as_u16(),
                code: v.get("code").and_then(Value::as_i64),
                detail,
            });
        }
        serde_json::from_slice(&body).map_err(|e| self.unreachable(format!("answer: {e}")))
    }

    fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.call(self.http.get(format!("{}{path}", self.url)))
    }

    fn post<T: DeserializeOwned>(&self, path: &str, body: &Value) -> Result<T> {
        self.call(self.http.post(format!("{}{path}", self.url)).json(body))
    }

    /// `GET /v1/info` (NUT-06).
    pub fn info(&self) -> Result<Value> {
        self.get("/v1/info")
    }

    /// `GET /v1/keysets` (NUT-02).
    pub fn keysets(&self) -> Result<Vec<KeysetInfo>> {
        #[derive(Deserialize)]
        struct Answer {
            keysets: Vec<KeysetInfo>,
        }
        Ok(self.get::<Answer>("/v1/keysets")?.keysets)
    }

    /// `GET /v1/keys/{id}` (NUT-01): the keyset's public key per amount, refused unless
    /// they derive `id` (a mint cannot hand one wallet keys of its own to tag it).
    pub fn keys(&self, id: &str) -> Result<BTreeMap<u64, PublicKey>> {
        #[derive(Deserialize)]
        struct Set {
            id: String,
            keys: BTreeMap<String, String>,
        }
        #[derive(Deserialize)]
        struct Answer {
            keysets: Vec<Set>,
        }
        if !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(SettleError::Keyset(format!("id {id:?} is not hex")));
        }
        let answer: Answer = self.get(&format!("/v1/keys/{id}"))?;
        let set = answer
            .keysets
            .into_iter()
            .find(|s| s.id == id)
            .ok_or_else(|| {
                SettleError::Keyset(format!("{} does not list keyset {id}", self.url))
            })?;
        let mut keys = BTreeMap::new();
        for (amount, key) in &set.keys {
            let amount: u64 = amount
                .parse()
                .map_err(|_| SettleError::Keyset(format!("amount {amount:?} in keyset {id}")))?;
            keys.insert(amount, dhke::point(key, "keyset key")?);
        }
        check_keyset_id(id, &keys)?;
        Ok(keys)
    }

    /// `POST /v1/mint/quote/bolt11` (NUT-04).
    pub fn mint_quote(&self, amount: u64, unit: &str) -> Result<MintQuote> {
        self.post(
            "/v1/mint/quote/bolt11",
            &json!({"amount": amount, "unit": unit}),
        )
        .map(state_from_paid)
    }

    /// `GET /v1/mint/quote/bolt11/{quote}` (NUT-04).
    pub fn mint_quote_state(&self, quote: &str) -> Result<MintQuote> {
        self.get(&format!("/v1/mint/quote/bolt11/{}", path_part(quote)?))
            .map(state_from_paid)
    }

    /// `POST /v1/mint/bolt11` (NUT-04): signatures on `outputs` for a paid quote.
    pub fn mint(&self, quote: &str, outputs: &[BlindedMessage]) -> Result<Vec<BlindSignature>> {
        self.signatures(
            "/v1/mint/bolt11",
            &json!({"quote": quote, "outputs": outputs}),
        )
    }

    /// `POST /v1/swap` (NUT-03): `inputs` spent, `outputs` signed.
    pub fn swap(
        &self,
        inputs: &[Proof],
        outputs: &[BlindedMessage],
    ) -> Result<Vec<BlindSignature>> {
        self.signatures("/v1/swap", &json!({"inputs": inputs, "outputs": outputs}))
    }

    fn signatures(&self, path: &str, body: &Value) -> Result<Vec<BlindSignature>> {
        #[derive(Deserialize)]
        struct Answer {
            signatures: Vec<BlindSignature>,
        }
        Ok(self.post::<Answer>(path, body)?.signatures)
    }

    /// `POST /v1/melt/quote/bolt11` (NUT-05).
    pub fn melt_quote(&self, invoice: &str, unit: &str) -> Result<MeltQuote> {
        self.post(
            "/v1/melt/quote/bolt11",
            &json!({"request": invoice, "unit": unit}),
        )
        .map(melt_state_from_paid)
    }

    /// `GET /v1/melt/quote/bolt11/{quote}` (NUT-05).
    pub fn melt_quote_state(&self, quote: &str) -> Result<MeltQuote> {
        self.get(&format!("/v1/melt/quote/bolt11/{}", path_part(quote)?))
            .map(melt_state_from_paid)
    }

    /// `POST /v1/melt/bolt11` (NUT-05, with NUT-08 blank `outputs` for the change).
    pub fn melt(
        &self,
        quote: &str,
        inputs: &[Proof],
        outputs: &[BlindedMessage],
    ) -> Result<MeltQuote> {
        self.post(
            "/v1/melt/bolt11",
            &json!({"quote": quote, "inputs": inputs, "outputs": outputs}),
        )
        .map(melt_state_from_paid)
    }

    /// `POST /v1/checkstate` (NUT-07): `UNSPENT`, `PENDING` or `SPENT` per `Y` (hex).
    pub fn check_state(&self, ys: &[String]) -> Result<Vec<(String, String)>> {
        #[derive(Deserialize)]
        struct State {
            #[serde(rename = "Y")]
            y: String,
            state: String,
        }
        #[derive(Deserialize)]
        struct Answer {
            states: Vec<State>,
        }
        let mut out = Vec::with_capacity(ys.len());
        for chunk in ys.chunks(100) {
            let a: Answer = self.post("/v1/checkstate", &json!({"Ys": chunk}))?;
            out.extend(a.states.into_iter().map(|s| (s.y, s.state)));
        }
        Ok(out)
    }

    /// `POST /v1/restore` (NUT-09): the mint's signatures on those of `outputs` it signed
    /// before, with the outputs they belong to.
    pub fn restore(
        &self,
        outputs: &[BlindedMessage],
    ) -> Result<Vec<(BlindedMessage, BlindSignature)>> {
        #[derive(Deserialize)]
        struct Answer {
            outputs: Vec<BlindedMessage>,
            signatures: Vec<BlindSignature>,
        }
        let a: Answer = self.post("/v1/restore", &json!({"outputs": outputs}))?;
        if a.outputs.len() != a.signatures.len() {
            return Err(self.unreachable("restore: outputs and signatures differ in number"));
        }
        Ok(a.outputs.into_iter().zip(a.signatures).collect())
    }
}

/// Refuses keys that do not derive `id` (version `00` ids; others are refused as unknown).
pub(crate) fn check_keyset_id(id: &str, keys: &BTreeMap<u64, PublicKey>) -> Result<()> {
    if !id.starts_with("00") {
        return Err(SettleError::Keyset(format!(
            "keyset {id}: only version 00 ids are checked, and unchecked keys are not used"
        )));
    }
    let derived = dhke::keyset_id(keys);
    if derived != id {
        return Err(SettleError::Keyset(format!(
            "keys of keyset {id} derive {derived}"
        )));
    }
    Ok(())
}

/// A quote id as one URL path segment.
fn path_part(quote: &str) -> Result<&str> {
    if quote.is_empty()
        || quote.len() > 256
        || !quote
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(SettleError::Refused(format!("quote id {quote:?}")));
    }
    Ok(quote)
}

/// `state` from the `paid` flag of mints that answer without it.
fn state_of(state: &mut String, paid: Option<bool>) {
    if state.is_empty() {
        *state = if paid == Some(true) { "PAID" } else { "UNPAID" }.into();
    }
}

fn state_from_paid(mut q: MintQuote) -> MintQuote {
    state_of(&mut q.state, q.paid);
    q
}

fn melt_state_from_paid(mut q: MeltQuote) -> MeltQuote {
    state_of(&mut q.state, q.paid);
    q
}
