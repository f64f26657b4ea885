//! The node as a Nostr Wallet Connect (NIP-47) wallet service, backed by its Cashu
//! wallet (`[settlement] nwc = true`): it publishes its info event (kind 13194: the
//! methods it answers, `encryption` `nip44_v2`) on its relay and its `[node] relays`, reads
//! requests (kind 23194, `p`-tagged with its key, NIP-44 v2) there, answers each from
//! [`fleetmesh_settle::nwc::Grants`] — only for a client key granted a connection
//! (`meshnode settle nwc-connect`), only the methods granted, within its budget — and sends
//! the answer (kind 23195, `e` the request, `p` the client) back where requests are read.
//!
//! Invoices it made are claimed into the wallet once the mint says they are paid, looked
//! for every 5 s. Each connection's client is notified (kind 23197, NIP-44 v2; the info
//! event's `notifications` tag) of `payment_received` when an invoice it made is claimed
//! and `payment_sent` when it paid one, the transaction as `lookup_invoice` gives it
//! (counted as `notified`). Requests are answered one at a time (a payment waits for the one before it); one that
//! does not open, is expired, or is not NIP-44 is dropped and counted in
//! `fleetmesh_nwc_requests_total{outcome}`.
//!
//! The client side is here too: [`request`] sends one request to any NWC wallet given its
//! connection URI (`meshnode settle nwc-pay` and the others), and [`NwcLightning`] makes
//! such a wallet the node's Lightning backend (`[settlement.lightning] backend = "nwc"`,
//! `job submit --pay nwc`).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use fleetmesh_port::RelayPort;
use fleetmesh_proto::{Event, NodeKeys, UnsignedEvent, nip44};
use fleetmesh_settle::nwc::{Failure, Grants, METHODS, Uri};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use fleetmesh_port::inbox::{Inbox, announce_and_read};

/// The wallet service's info event kind (replaceable).
pub const INFO: u16 = 13194;
/// A request's kind (ephemeral).
pub const REQUEST: u16 = 23194;
/// An answer's kind (ephemeral).
pub const RESPONSE: u16 = 23195;
/// A notification (NIP-44 v2).
pub const NOTIFICATION: u16 = 23197;
/// The connections' file in the node directory.
pub const FILE: &str = "nwc.sqlite";

fn count(outcome: &'static str) {
    metrics::counter!("fleetmesh_nwc_requests_total", "outcome" => outcome).increment(1);
}

/// The grants of the node in `dir`, its wallet invoicing at the first of `[settlement]
/// mints` and paying there — or through `[settlement.lightning]` when that is a Lightning
/// node (LND, CLN), whose payments give real preimages.
///
/// # Errors
/// When `nwc.sqlite` cannot be opened (a damaged file is refused, never recreated), or the
/// Lightning node's credential cannot be read.
pub fn grants(dir: &Path, settlement: &crate::config::SettlementSection) -> anyhow::Result<Grants> {
    let keys = NodeKeys::load(&dir.join(crate::node::KEYS_DIR))?;
    let wallet = dir.join(fleetmesh_settle::cashu::WALLET_FILE);
    let mint = settlement.mints.first().map(String::as_str);
    let mut g = Grants::open(&dir.join(FILE), &wallet, mint)
        .with_context(|| format!("opening {}", dir.join(FILE).display()))?;
    g.set_key(*keys.nostr());
    use crate::config::Backend;
    if matches!(settlement.lightning.backend, Backend::Lnd | Backend::Cln) {
        g.set_payer(
            settlement
                .lightning
                .open(&wallet, mint)
                .map_err(anyhow::Error::msg)?,
        );
    }
    Ok(g)
}

/// The info event: the methods answered, NIP-44 v2 only.
fn info(keys: &NodeKeys) -> fleetmesh_proto::Result<Event> {
    keys.sign(UnsignedEvent {
        created_at: fleetmesh_proto::unix_now(),
        kind: INFO,
        tags: vec![
            vec!["encryption".into(), "nip44_v2".into()],
            // read by clients that predate the encryption tag
            vec!["v".into(), "1.0".into()],
            vec![
                "notifications".into(),
                fleetmesh_settle::nwc::NOTIFICATIONS.join(" "),
            ],
        ],
        content: METHODS.join(" "),
    })
}

/// What the service works with.
struct Service {
    keys: NodeKeys,
    relay: Arc<dyn RelayPort>,
    grants: Mutex<Grants>,
    out: broadcast::Sender<Event>,
}

/// Publishes the info event here (before the node serves) and on `relays`, and starts
/// answering requests read on the node's relay and on `relays`.
///
/// # Errors
/// When the connections' file cannot be opened, or the info event cannot be signed.
pub async fn start(
    dir: &Path,
    relays: Vec<String>,
    relay: Arc<dyn RelayPort>,
    settlement: &crate::config::SettlementSection,
) -> anyhow::Result<fleetmesh_port::Tasks> {
    let keys = NodeKeys::load(&dir.join(crate::node::KEYS_DIR))?;
    let grants = grants(dir, settlement)?;
    let info = info(&keys)?;
    let (out, _) = broadcast::channel(256);
    let inbox = Inbox {
        kind: REQUEST,
        me: (keys.nostr_pubkey_hex(), *keys.nostr()),
        // requests are ephemeral: only those of the last minute are answered
        since: || fleetmesh_proto::unix_now().saturating_sub(60),
        backlog: false,
        who: "nwc",
    };
    let service = Arc::new(Service {
        keys,
        relay: relay.clone(),
        grants: Mutex::new(grants),
        out: out.clone(),
    });
    let s = service.clone();
    let mut tasks =
        announce_and_read(&relay, &relays, info, inbox, &out, move |r| s.answer(&r)).await;
    // paid invoices reach the wallet without anyone looking them up
    let s = service.clone();
    tasks.push(tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
        loop {
            tick.tick().await;
            let s = s.clone();
            let _ = tokio::task::spawn_blocking(move || {
                let n = s
                    .grants
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .settle_pending();
                if n > 0 {
                    tracing::info!(invoices = n, "paid NWC invoices claimed into the wallet");
                }
                s.notify();
            })
            .await;
        }
    }));
    Ok(fleetmesh_port::Tasks(tasks))
}

impl Service {
    /// Seals `body` to `client` (NIP-44 v2), signs it as `kind` with `tags` and sends it
    /// where answers go: the node's relay and the relays requests are read on. Whether it
    /// went out.
    fn send(&self, client: &str, kind: u16, tags: Vec<Vec<String>>, body: &Value) -> bool {
        let sealed = nip44::conversation_key(&self.keys.nostr().secret_key(), client)
            .and_then(|k| nip44::encrypt(&k, body.to_string().as_bytes()));
        let event = sealed.and_then(|content| {
            self.keys.sign(UnsignedEvent {
                created_at: fleetmesh_proto::unix_now(),
                kind,
                tags,
                content,
            })
        });
        match event {
            Ok(e) => {
                let _ = self.out.send(e.clone());
                if let Err(err) = self.relay.broadcast(e) {
                    tracing::warn!(kind, error = %err, "an NWC event not passed on by the node's relay");
                }
                true
            }
            Err(e) => {
                tracing::warn!(kind, error = %e, "sealing an NWC event");
                false
            }
        }
    }

    /// Sends each queued notification (kind 23197) to its connection's client.
    fn notify(&self) {
        let notices = self
            .grants
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take_notices();
        for n in notices {
            let body = json!({"notification_type": n.kind, "notification": n.transaction});
            if self.send(
                &n.client,
                NOTIFICATION,
                vec![vec!["p".into(), n.client.clone()]],
                &body,
            ) {
                count("notified");
            }
        }
    }

    /// Answers one request, or drops it (counted) when it cannot be answered; then sends
    /// the notifications it led to (a payment sent, an invoice claimed).
    fn answer(&self, request: &Event) {
        let now = fleetmesh_proto::unix_now();
        if request.expiration().is_some_and(|t| t <= now) {
            count("expired");
            return;
        }
        if request.tag_value("encryption") != Some("nip44_v2") {
            // NIP-04 (the default without the tag) is not spoken here: the info event says so
            count("unsupported-encryption");
            return;
        }
        let client = hex::encode(request.pubkey);
        let opened = nip44::conversation_key(&self.keys.nostr().secret_key(), &client)
            .and_then(|k| nip44::decrypt(&k, &request.content));
        let Ok(plain) = opened else {
            count("unopened");
            return;
        };
        let parsed: Value = serde_json::from_slice(&plain).unwrap_or(Value::Null);
        let method = parsed["method"].as_str().unwrap_or_default().to_owned();
        let outcome = self
            .grants
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .handle(&client, &parsed);
        let body = match outcome {
            Ok(result) => {
                count("answered");
                json!({"result_type": method, "result": result, "error": null})
            }
            Err(Failure { code, message }) => {
                count("refused");
                tracing::info!(client, method, code, %message, "an NWC request refused");
                json!({"result_type": method, "result": null, "error": {"code": code, "message": message}})
            }
        };
        let tags = vec![
            vec!["p".into(), client.clone()],
            vec!["e".into(), request.id_hex()],
        ];
        self.send(&client, RESPONSE, tags, &body);
        self.notify();
    }
}

/// One request to the wallet of connection URI `uri` (the client side of NIP-47),
/// waiting `wait_secs` for its answer: its result, or the wallet's error (code and
/// message). A relay of the URI that cannot be read is given to `on_error`.
///
/// # Errors
/// A URI that does not parse, no relay that can be read, no answer in time.
pub fn request(
    uri: &str,
    wait_secs: u64,
    method: &str,
    params: Value,
    on_error: impl Fn(fleetmesh_relay::Error) + Clone + Send + 'static,
) -> anyhow::Result<Result<Value, Value>> {
    let uri = Uri::parse(uri)?;
    let bytes: [u8; 32] = hex::decode(&uri.secret)?
        .try_into()
        .map_err(|_| anyhow::anyhow!("the URI's secret is not 32 bytes"))?;
    let secret =
        secp256k1::SecretKey::from_secret_bytes(bytes).context("the URI's secret is not a key")?;
    let keypair = secp256k1::Keypair::from_secret_key(&secret);
    let key = nip44::conversation_key(&secret, &uri.wallet)?;
    let content = nip44::encrypt(
        &key,
        json!({"method": method, "params": params})
            .to_string()
            .as_bytes(),
    )?;
    let now = fleetmesh_proto::unix_now();
    let event = UnsignedEvent {
        created_at: now,
        kind: REQUEST,
        tags: vec![
            vec!["p".into(), uri.wallet.clone()],
            vec!["encryption".into(), "nip44_v2".into()],
            vec!["expiration".into(), (now + wait_secs).to_string()],
        ],
        content,
    }
    .sign(&keypair)?;
    let filter = json!({"kinds": [RESPONSE], "authors": [uri.wallet], "#e": [event.id_hex()]});
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let answer = runtime.block_on(async {
        let (mut rx, out, tasks) =
            fleetmesh_relay::sync::subscribe_all(&uri.relays, &filter, keypair, on_error);
        // the subscriptions are open before the request goes out
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = out.send(event);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(wait_secs);
        loop {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Err(_) => anyhow::bail!("no answer from the wallet within {wait_secs} s"),
                Ok(None) => anyhow::bail!("no relay of the URI could be read"),
                Ok(Some(e)) => {
                    let Ok(plain) = nip44::decrypt(&key, &e.content) else {
                        continue;
                    };
                    if let Ok(v) = serde_json::from_slice::<Value>(&plain) {
                        tasks.iter().for_each(|t| t.abort());
                        return anyhow::Ok(v);
                    }
                }
            }
        }
    })?;
    Ok(match answer.get("error").filter(|e| !e.is_null()) {
        Some(e) => Err(e.clone()),
        None => Ok(answer["result"].clone()),
    })
}

/// An NWC wallet as a Lightning backend (`[settlement.lightning] backend = "nwc"`, `job
/// submit --pay nwc`): `make_invoice` issues, `pay_invoice` pays and returns the preimage.
/// Each request runs on a thread of its own (it drives its own relay connections).
pub struct NwcLightning {
    /// The connection URI (its secret spends from the wallet).
    pub uri: String,
}

impl NwcLightning {
    /// A backend over connection `uri`, checked to parse.
    pub fn new(uri: &str) -> anyhow::Result<NwcLightning> {
        Uri::parse(uri.trim())?;
        Ok(NwcLightning {
            uri: uri.trim().to_owned(),
        })
    }

    fn call(&self, method: &'static str, params: Value) -> fleetmesh_settle::Result<Value> {
        use fleetmesh_settle::SettleError;
        let uri = self.uri.clone();
        let answer = std::thread::spawn(move || {
            request(&uri, 60, method, params, |e| {
                tracing::warn!(error = %e, "an NWC relay could not be read");
            })
        })
        .join()
        .map_err(|_| SettleError::Refused("the NWC request panicked".into()))?
        .map_err(|e| SettleError::Unreachable {
            url: "nwc".into(),
            reason: format!("{e:#}"),
        })?;
        answer.map_err(|e| {
            SettleError::Refused(format!(
                "the NWC wallet refused {method}: {} {}",
                e["code"].as_str().unwrap_or("OTHER"),
                e["message"].as_str().unwrap_or_default()
            ))
        })
    }
}

impl fleetmesh_settle::lightning::Lightning for NwcLightning {
    fn describe(&self) -> String {
        let wallet = Uri::parse(&self.uri).map(|u| u.wallet).unwrap_or_default();
        format!("nwc {}", wallet.get(..16).unwrap_or_default())
    }

    fn invoice(
        &self,
        amount_sat: u64,
        memo: &str,
        expiry_secs: u64,
    ) -> fleetmesh_settle::Result<fleetmesh_settle::lightning::Issued> {
        let v = self.call(
            "make_invoice",
            json!({"amount": amount_sat * 1000, "description": memo, "expiry": expiry_secs}),
        )?;
        let bolt11 = v["invoice"].as_str().unwrap_or_default();
        fleetmesh_settle::lightning::checked_invoice(bolt11, amount_sat, None)
    }

    fn pay(&self, bolt11: &str) -> fleetmesh_settle::Result<fleetmesh_settle::lightning::Sent> {
        let v = self.call("pay_invoice", json!({"invoice": bolt11}))?;
        let pre = hex::decode(v["preimage"].as_str().unwrap_or_default()).unwrap_or_default();
        Ok(fleetmesh_settle::lightning::Sent {
            preimage: fleetmesh_settle::lightning::checked_preimage(bolt11, &pre)?,
            fee_msat: v["fees_paid"].as_u64().unwrap_or(0),
        })
    }
}
