//! Lightning invoices issued and paid through one trait, [`Lightning`], whatever holds
//! the channels: the node's Cashu mint (its NUT-04 bolt11 quotes and NUT-05 melts), an
//! LND node's REST API, a Core Lightning node's REST API (`clnrest`).
//!
//! What L402 needs: an invoice for a price (with its payment hash), and a payment that
//! yields the preimage. Every invoice a backend hands back is decoded and checked
//! (amount, payment hash) and every preimage hashed against the invoice, so a backend
//! that answers wrongly is refused, never trusted.
//!
//! LND: `POST /v1/invoices` (`value`, `memo`, `expiry` → `r_hash` base64,
//! `payment_request`) and `POST /v1/channels/transactions` (`payment_request` →
//! `payment_error`, `payment_preimage` base64, `payment_route.total_fees_msat`), the
//! macaroon hex in `Grpc-Metadata-macaroon`. Core Lightning: `POST /v1/invoice`
//! (`amount_msat`, `label`, `description`, `expiry` → `bolt11`, `payment_hash` hex) and
//! `POST /v1/pay` (`bolt11` → `status`, `payment_preimage` hex, `amount_msat`,
//! `amount_sent_msat`), the rune in `Rune`. Both over https (or http on loopback), a
//! self-signed node certificate trusted when given.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::cashu::{MintClient, Wallet};
use crate::{Result, SettleError};

/// The largest answer read from a Lightning node.
pub const MAX_ANSWER_BYTES: u64 = 1 << 20;

/// An invoice a backend issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The BOLT11 invoice.
    pub bolt11: String,
    /// Its payment hash.
    pub payment_hash: [u8; 32],
    /// The Cashu mint quote behind it (the Cashu backend), to claim once paid.
    pub quote: Option<String>,
}

/// A payment made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The invoice's preimage (checked against its payment hash).
    pub preimage: [u8; 32],
    /// The routing fee, msat.
    pub fee_msat: u64,
}

/// Something that issues and pays Lightning invoices.
pub trait Lightning: Send + Sync {
    /// What it is, for messages (`cashu <mint>`, `lnd <url>`, `cln <url>`).
    fn describe(&self) -> String;
    /// An invoice for `amount_sat` described by `memo`, payable for `expiry_secs`.
    fn invoice(&self, amount_sat: u64, memo: &str, expiry_secs: u64) -> Result<Issued>;
    /// Pays `bolt11`; its preimage.
    fn pay(&self, bolt11: &str) -> Result<Sent>;
}

/// `bolt11` decoded and checked to carry `amount_sat` and, when given, `hash`.
pub fn checked_invoice(bolt11: &str, amount_sat: u64, hash: Option<[u8; 32]>) -> Result<Issued> {
    let inv = crate::bolt11::decode(bolt11)?;
    if inv.amount_msat != Some(amount_sat * 1000) {
        return Err(SettleError::Invoice(format!(
            "the backend's invoice is for {:?} msat, not {} sat",
            inv.amount_msat, amount_sat
        )));
    }
    let mut payment_hash = [0u8; 32];
    hex::decode_to_slice(&inv.payment_hash, &mut payment_hash)
        .map_err(|_| SettleError::Invoice("payment hash".into()))?;
    if hash.is_some_and(|h| h != payment_hash) {
        return Err(SettleError::Invoice(
            "the backend named another payment hash than its invoice carries".into(),
        ));
    }
    Ok(Issued {
        bolt11: bolt11.to_owned(),
        payment_hash,
        quote: None,
    })
}

/// `preimage` checked to hash to `bolt11`'s payment hash.
pub fn checked_preimage(bolt11: &str, preimage: &[u8]) -> Result<[u8; 32]> {
    let inv = crate::bolt11::decode(bolt11)?;
    let pre: [u8; 32] = preimage.try_into().map_err(|_| {
        SettleError::Refused(format!("a preimage of {} bytes, not 32", preimage.len()))
    })?;
    if hex::encode(Sha256::digest(pre)) != inv.payment_hash {
        return Err(SettleError::Refused(
            "the preimage the payer returned does not hash to the invoice's payment hash".into(),
        ));
    }
    Ok(pre)
}

/// Which REST API a [`Rest`] node speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// LND's REST proxy.
    Lnd,
    /// Core Lightning's `clnrest`.
    Cln,
}

/// A Lightning node's REST API.
///
/// Its HTTP client is made for each call, on the calling thread (a blocking client may
/// not be made or dropped on an async runtime's thread; calls run on blocking threads).
pub struct Rest {
    flavor: Flavor,
    url: String,
    credential: String,
    tls_cert: Option<Vec<u8>>,
}

impl Rest {
    /// A client of the node at `url` (https, or http on a loopback address) of `flavor`,
    /// authorized by `credential` (LND: the macaroon's bytes or their hex; CLN: the
    /// rune), trusting `tls_cert` (PEM, the node's self-signed certificate) when given.
    pub fn new(
        flavor: Flavor,
        url: &str,
        credential: &[u8],
        tls_cert: Option<&[u8]>,
    ) -> Result<Rest> {
        let url = url.trim_end_matches('/').to_owned();
        let loopback = ["http://127.", "http://localhost", "http://[::1]"]
            .iter()
            .any(|p| url.starts_with(p));
        if !url.starts_with("https://") && !loopback {
            return Err(SettleError::Refused(format!(
                "{url}: a Lightning node's API over https (http only on loopback: the \
                 credential travels with every request)"
            )));
        }
        let text = std::str::from_utf8(credential).map(str::trim).ok();
        let credential = match flavor {
            // a macaroon file is binary; one given as hex is taken as it is
            Flavor::Lnd => {
                match text.filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_hexdigit())) {
                    Some(hex) => hex.to_owned(),
                    None => hex::encode(credential),
                }
            }
            Flavor::Cln => text
                .filter(|t| !t.is_empty() && !t.contains(char::is_whitespace))
                .ok_or_else(|| SettleError::Refused("a CLN rune is one line of text".into()))?
                .to_owned(),
        };
        if let Some(pem) = tls_cert {
            // checked now (a PEM that holds no certificate would only fail at the first call)
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| SettleError::Refused(format!("the TLS certificate: {e}")))?;
            if certs.is_empty() {
                return Err(SettleError::Refused(
                    "the TLS certificate: no PEM certificate in the file".into(),
                ));
            }
        }
        Ok(Rest {
            flavor,
            url,
            credential,
            tls_cert: tls_cert.map(<[u8]>::to_vec),
        })
    }

    fn post(&self, path: &str, body: &Value) -> Result<Value> {
        let url = format!("{}{path}", self.url);
        let http = crate::http::client(Duration::from_secs(120), self.tls_cert.as_deref())
            .map_err(|reason| SettleError::Unreachable {
                url: self.url.clone(),
                reason,
            })?;
        let req = http.post(&url).json(body);
        let req = match self.flavor {
            Flavor::Lnd => req.header("Grpc-Metadata-macaroon", &self.credential),
            Flavor::Cln => req.header("Rune", &self.credential),
        };
        let unreachable = |reason: String| SettleError::Unreachable {
            url: self.url.clone(),
            reason,
        };
        let (status, bytes) = crate::http::send(req, MAX_ANSWER_BYTES).map_err(unreachable)?;
        let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if !status.is_success() {
            // LND: {"code", "message"}; CLN: {"code", "message"} (or a bare text)
            let detail = v["message"]
                .as_str()
                .or(v["error"].as_str())
                .map(str::to_owned)
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(200).collect());
            return Err(SettleError::Refused(format!(
                "{} {path}: {status}: {detail}",
                self.describe()
            )));
        }
        if v.is_null() {
            return Err(unreachable(format!("{path}: the answer is not JSON")));
        }
        Ok(v)
    }
}

fn b64(v: &Value) -> Option<Vec<u8>> {
    let s = v.as_str()?;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(s))
        .ok()
}

fn hex32(v: &Value) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(v.as_str()?, &mut out).ok()?;
    Some(out)
}

/// A JSON number or a decimal string (LND's int64 fields), as u64.
fn number(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_str()?.parse().ok())
}

impl Lightning for Rest {
    fn describe(&self) -> String {
        match self.flavor {
            Flavor::Lnd => format!("lnd {}", self.url),
            Flavor::Cln => format!("cln {}", self.url),
        }
    }

    fn invoice(&self, amount_sat: u64, memo: &str, expiry_secs: u64) -> Result<Issued> {
        let bad = |what: &str| SettleError::Unreachable {
            url: self.url.clone(),
            reason: format!("the invoice answer has no {what}"),
        };
        match self.flavor {
            Flavor::Lnd => {
                let v = self.post(
                    "/v1/invoices",
                    &json!({"value": amount_sat.to_string(), "memo": memo,
                            "expiry": expiry_secs.to_string()}),
                )?;
                let hash = b64(&v["r_hash"])
                    .and_then(|h| <[u8; 32]>::try_from(h).ok())
                    .ok_or_else(|| bad("r_hash"))?;
                let bolt11 = v["payment_request"]
                    .as_str()
                    .ok_or_else(|| bad("payment_request"))?;
                checked_invoice(bolt11, amount_sat, Some(hash))
            }
            Flavor::Cln => {
                let mut label = [0u8; 16];
                getrandom::fill(&mut label).expect("the OS's random numbers");
                let v = self.post(
                    "/v1/invoice",
                    &json!({"amount_msat": amount_sat * 1000,
                            "label": format!("fleetmesh-{}", hex::encode(label)),
                            "description": memo, "expiry": expiry_secs}),
                )?;
                let hash = hex32(&v["payment_hash"]).ok_or_else(|| bad("payment_hash"))?;
                let bolt11 = v["bolt11"].as_str().ok_or_else(|| bad("bolt11"))?;
                checked_invoice(bolt11, amount_sat, Some(hash))
            }
        }
    }

    fn pay(&self, bolt11: &str) -> Result<Sent> {
        let inv = crate::bolt11::decode(bolt11)?;
        match self.flavor {
            Flavor::Lnd => {
                let v = self.post(
                    "/v1/channels/transactions",
                    &json!({"payment_request": bolt11}),
                )?;
                if let Some(e) = v["payment_error"].as_str().filter(|e| !e.is_empty()) {
                    return Err(SettleError::Refused(format!("{}: {e}", self.describe())));
                }
                let pre = b64(&v["payment_preimage"]).unwrap_or_default();
                Ok(Sent {
                    preimage: checked_preimage(bolt11, &pre)?,
                    fee_msat: number(&v["payment_route"]["total_fees_msat"]).unwrap_or(0),
                })
            }
            Flavor::Cln => {
                let v = self.post("/v1/pay", &json!({"bolt11": bolt11}))?;
                if v["status"] != "complete" {
                    return Err(SettleError::Refused(format!(
                        "{}: the payment is {}",
                        self.describe(),
                        v["status"]
                    )));
                }
                let pre = hex32(&v["payment_preimage"]).unwrap_or_default();
                let sent = number(&v["amount_sent_msat"]).unwrap_or(0);
                let amount = number(&v["amount_msat"]).or(inv.amount_msat).unwrap_or(0);
                Ok(Sent {
                    preimage: checked_preimage(bolt11, &pre)?,
                    fee_msat: sent.saturating_sub(amount),
                })
            }
        }
    }
}

/// The node's Cashu wallet as a Lightning backend: invoices are the mint's bolt11
/// quotes (claimed into the wallet once paid, [`CashuLightning::claim`]); payments are
/// melts, which need the mint to return the preimage.
pub struct CashuLightning {
    /// The wallet file.
    pub wallet: PathBuf,
    /// The mint to invoice and pay at.
    pub mint: String,
}

impl CashuLightning {
    /// Mints the sats of a paid quote into the wallet; `Ok(false)` while it is unpaid.
    pub fn claim(&self, quote: &str, amount_sat: u64) -> Result<bool> {
        let mint = MintClient::new(&self.mint)?;
        let state = mint.mint_quote_state(quote)?.state;
        match state.as_str() {
            "PAID" => {
                Wallet::open(&self.wallet)?.claim(&mint, quote, amount_sat, &state)?;
                Ok(true)
            }
            // claimed already (by an earlier run that stopped before it recorded so)
            "ISSUED" => Ok(true),
            _ => Ok(false),
        }
    }
}

impl Lightning for CashuLightning {
    fn describe(&self) -> String {
        format!("cashu {}", self.mint)
    }

    fn invoice(&self, amount_sat: u64, _memo: &str, _expiry_secs: u64) -> Result<Issued> {
        let mint = MintClient::new(&self.mint)?;
        let quote = Wallet::open(&self.wallet)?.mint_quote(&mint, amount_sat)?;
        let mut issued = checked_invoice(&quote.request, amount_sat, None)?;
        issued.quote = Some(quote.quote);
        Ok(issued)
    }

    fn pay(&self, bolt11: &str) -> Result<Sent> {
        let mint = MintClient::new(&self.mint)?;
        let paid = Wallet::open(&self.wallet)?.pay(&mint, bolt11)?;
        let pre = paid.preimage.as_deref().and_then(|p| hex::decode(p).ok());
        let Some(pre) = pre else {
            return Err(SettleError::Refused(format!(
                "the mint {} paid the invoice but returned no preimage (a mint settles an \
                 invoice of its own internally, without one); proof of payment needs a \
                 backend that returns it",
                self.mint
            )));
        };
        Ok(Sent {
            preimage: checked_preimage(bolt11, &pre)?,
            fee_msat: paid.fee * 1000,
        })
    }
}
