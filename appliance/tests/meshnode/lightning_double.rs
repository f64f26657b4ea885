//! The Lightning double the L402 and NWC tests pay through, named as such: no Lightning
//! node can run here (no chain, no peers). A loopback HTTP server speaking LND's and Core
//! Lightning's documented REST shapes (`/v1/invoices`, `/v1/channels/transactions`;
//! `/v1/invoice`, `/v1/pay`), checking their credentials, issuing real BOLT11 invoices
//! (signed; a description or its hash) and settling those it issued by revealing their
//! preimages, as a network would to a payer; and an LNURL-pay service (LUD-06/16) that
//! invoices through it.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use bitcoin::hashes::{Hash as _, sha256};
use bitcoin::secp256k1::{Secp256k1, SecretKey};
use lightning_invoice::{Currency, InvoiceBuilder, PaymentSecret};
use serde_json::{Value, json};

/// What the double knows of an invoice it issued.
pub(super) struct Issued {
    pub(super) preimage: [u8; 32],
    pub(super) paid: bool,
}

/// The Lightning double: see the module docs.
pub(super) struct LightningDouble {
    pub(super) url: String,
    /// LND's macaroon (binary, as `invoice.macaroon` is on disk).
    pub(super) macaroon: Vec<u8>,
    /// CLN's rune.
    pub(super) rune: String,
    pub(super) book: Arc<Mutex<HashMap<String, Issued>>>,
}

pub(super) fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn b64v(v: &Value) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(v.as_str()?)
        .ok()
}

impl LightningDouble {
    pub(super) fn start() -> LightningDouble {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let double = LightningDouble {
            url,
            macaroon: vec![0x02, 0x01, 0x03, 0x6c, 0x6e, 0x64, 0x00, 0xaa, 0xbb],
            rune: "double-rune_0123456789".into(),
            book: Arc::default(),
        };
        let (mac, rune, book) = (
            hex::encode(&double.macaroon),
            double.rune.clone(),
            double.book.clone(),
        );
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (mac, rune, book) = (mac.clone(), rune.clone(), book.clone());
                std::thread::spawn(move || serve(stream, &mac, &rune, &book));
            }
        });
        double
    }

    /// How many invoices it issued and how many of them were paid.
    pub(super) fn counts(&self) -> (usize, usize) {
        let book = self.book.lock().unwrap();
        (book.len(), book.values().filter(|i| i.paid).count())
    }
}

/// Answers the requests of one connection (keep-alive) until it closes.
fn serve(stream: TcpStream, mac: &str, rune: &str, book: &Mutex<HashMap<String, Issued>>) {
    let mut out = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        let mut headers = HashMap::new();
        loop {
            let mut h = String::new();
            r.read_line(&mut h).unwrap();
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
            }
        }
        let len: usize = headers
            .get("content-length")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let (status, answer) = answer(&path, &headers, &body, mac, rune, book);
        let text = answer.to_string();
        let reply = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
            text.len()
        );
        if out.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// A signed BOLT11 invoice for `msat` (described by `memo`, or by its hash when it is
/// `hash:HEX`): the invoice, its payment hash (hex), its preimage.
fn make_invoice(msat: u64, memo: &str, expiry: u64, n: usize) -> (String, String, [u8; 32]) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let preimage = sha256::Hash::hash(format!("double {n} {nanos}").as_bytes()).to_byte_array();
    let hash = sha256::Hash::hash(&preimage);
    let key = SecretKey::from_slice(&[0x42; 32]).unwrap();
    let builder = InvoiceBuilder::new(Currency::Regtest);
    let builder = match memo.strip_prefix("hash:") {
        Some(h) => builder.description_hash(h.parse().unwrap()),
        None => builder.description(memo.to_owned()),
    };
    let invoice = builder
        .payment_hash(hash)
        .payment_secret(PaymentSecret([n as u8; 32]))
        .current_timestamp()
        .min_final_cltv_expiry_delta(144)
        .amount_milli_satoshis(msat)
        .expiry_time(std::time::Duration::from_secs(expiry))
        .build_signed(|m| Secp256k1::new().sign_ecdsa_recoverable(m, &key))
        .unwrap();
    (invoice.to_string(), hash.to_string(), preimage)
}

/// The payment hash of an invoice, hex.
pub(super) fn hash_of(bolt11: &str) -> String {
    let inv: lightning_invoice::Bolt11Invoice = bolt11.parse().unwrap();
    inv.payment_hash().to_string()
}

/// One request to the double: LND's shapes under `Grpc-Metadata-macaroon`, CLN's under
/// `Rune`.
fn answer(
    path: &str,
    headers: &HashMap<String, String>,
    body: &Value,
    mac: &str,
    rune: &str,
    book: &Mutex<HashMap<String, Issued>>,
) -> (u16, Value) {
    let lnd = matches!(path, "/v1/invoices" | "/v1/channels/transactions");
    let authorized = if lnd {
        headers.get("grpc-metadata-macaroon").map(String::as_str) == Some(mac)
    } else {
        headers.get("rune").map(String::as_str) == Some(rune)
    };
    if !authorized {
        return (
            401,
            json!({"code": 16, "message": "verification failed: signature mismatch"}),
        );
    }
    let num = |v: &Value| v.as_u64().or_else(|| v.as_str()?.parse().ok());
    let mut book = book.lock().unwrap();
    match path {
        "/v1/invoices" | "/v1/invoice" => {
            let msat = if lnd {
                num(&body["value"]).unwrap() * 1000
            } else {
                num(&body["amount_msat"]).unwrap()
            };
            let memo = match b64v(&body["description_hash"]) {
                // LND takes a description hash (LNURL-pay, LUD-06) instead of a memo
                Some(h) if lnd => format!("hash:{}", hex::encode(h)),
                _ => body[if lnd { "memo" } else { "description" }]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            };
            let expiry = num(&body["expiry"]).unwrap_or(3600);
            let (bolt11, hash, preimage) = make_invoice(msat, &memo, expiry, book.len());
            book.insert(
                hash.clone(),
                Issued {
                    preimage,
                    paid: false,
                },
            );
            let raw_hash = hex::decode(&hash).unwrap();
            if lnd {
                (
                    200,
                    json!({"r_hash": b64(&raw_hash), "payment_request": bolt11,
                             "add_index": book.len().to_string(), "payment_addr": b64(&[7; 32])}),
                )
            } else {
                (
                    200,
                    json!({"payment_hash": hash, "bolt11": bolt11, "expires_at": 0,
                             "payment_secret": hex::encode([7; 32]), "created_index": book.len()}),
                )
            }
        }
        "/v1/channels/transactions" | "/v1/pay" => {
            let bolt11 = body[if lnd { "payment_request" } else { "bolt11" }]
                .as_str()
                .unwrap_or_default();
            let hash = hash_of(bolt11);
            let Some(issued) = book.get_mut(&hash).filter(|i| !i.paid) else {
                return if lnd {
                    (
                        200,
                        json!({"payment_error": "unable to find a path to destination"}),
                    )
                } else {
                    (
                        500,
                        json!({"code": 210, "message": "Ran out of routes to try"}),
                    )
                };
            };
            issued.paid = true;
            let pre = issued.preimage;
            if lnd {
                (
                    200,
                    json!({"payment_error": "", "payment_preimage": b64(&pre),
                             "payment_route": {"total_fees_msat": "0"}}),
                )
            } else {
                let inv: lightning_invoice::Bolt11Invoice = bolt11.parse().unwrap();
                let msat = inv.amount_milli_satoshis().unwrap();
                (
                    200,
                    json!({"status": "complete", "payment_preimage": hex::encode(pre),
                             "payment_hash": hash, "amount_msat": msat,
                             "amount_sent_msat": msat + 1, "parts": 1}),
                )
            }
        }
        _ => (404, json!({"code": 5, "message": "Not Found"})),
    }
}

/// An LNURL-pay service (LUD-06) on a loopback port, invoicing through the double's LND
/// shape, taking 1 to 10 sat: its host, for the addresses `alice@HOST` (honest),
/// `mallory@HOST` (invoices without the metadata's hash) and `greedy@HOST` (invoices for a
/// sat more than asked).
pub(super) fn lnurl_service(ln: &LightningDouble) -> String {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let metadata = json!([["text/plain", "alice's tips"]]).to_string();
    let (lnd, mac) = (ln.url.clone(), hex::encode(&ln.macaroon));
    let me = host.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut r = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if r.read_line(&mut line).is_err() {
                continue;
            }
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                    break;
                }
            }
            let path = line
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_owned();
            // alice is honest; mallory's invoices do not carry the metadata's hash, greedy's
            // ask one sat more than the payer asked for
            let answer = if let Some(name) = path.strip_prefix("/.well-known/lnurlp/") {
                json!({"tag": "payRequest", "callback": format!("http://{me}/cb/{name}"),
                       "minSendable": 1000, "maxSendable": 10_000, "metadata": metadata,
                       "commentAllowed": 32})
            } else if let Some((name, q)) = path
                .strip_prefix("/cb/")
                .and_then(|rest| rest.split_once('?'))
            {
                let amount: u64 = q
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("amount="))
                    .and_then(|a| a.parse().ok())
                    .unwrap_or(0);
                let hash = sha256::Hash::hash(metadata.as_bytes()).to_byte_array();
                let mut ask = json!({"value": (amount / 1000).to_string(),
                                     "description_hash": b64(&hash)});
                match name {
                    "mallory" => ask = json!({"value": (amount / 1000).to_string(), "memo": "x"}),
                    "greedy" => ask["value"] = json!((amount / 1000 + 1).to_string()),
                    _ => {}
                }
                let v: Value = reqwest::blocking::Client::new()
                    .post(format!("{lnd}/v1/invoices"))
                    .header("Grpc-Metadata-macaroon", &mac)
                    .json(&ask)
                    .send()
                    .unwrap()
                    .json()
                    .unwrap();
                json!({"pr": v["payment_request"], "routes": []})
            } else {
                json!({"status": "ERROR", "reason": "not found"})
            };
            let text = answer.to_string();
            let mut out = stream;
            let _ = out.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                    text.len()
                )
                .as_bytes(),
            );
        }
    });
    host
}
