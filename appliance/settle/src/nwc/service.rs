//! The node as a Nostr Wallet Connect (NIP-47) wallet service, backed by its Cashu
//! wallet (`[settlement] nwc = true`): it publishes its info event (kind 13194: the
//! methods it answers, `encryption` `nip44_v2`) on its relay and its `[node] relays`, reads
//! requests (kind 23194, `p`-tagged with its key, NIP-44 v2) there, answers each from
//! [`Grants`] — only for a client key granted a connection
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

use std::sync::{Arc, Mutex};

use fleetmesh_port::inbox::{Inbox, announce_and_read};
use fleetmesh_port::{RelayPort, Tasks};
use fleetmesh_proto::{Event, NodeKeys, UnsignedEvent, nip44};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::{Failure, Grants, METHODS};
use crate::SettleError;

/// The wallet service's info event kind (replaceable).
pub const INFO: u16 = 13194;
/// A request's kind (ephemeral).
pub const REQUEST: u16 = 23194;
/// An answer's kind (ephemeral).
pub const RESPONSE: u16 = 23195;
/// A notification (NIP-44 v2).
pub const NOTIFICATION: u16 = 23197;
fn count(outcome: &'static str) {
    metrics::counter!("fleetmesh_nwc_requests_total", "outcome" => outcome).increment(1);
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
            vec!["notifications".into(), super::NOTIFICATIONS.join(" ")],
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

/// Publishes the info event of the wallet service of `keys` here (before the node
/// serves) and on `relays`, and starts answering, from `grants`, the requests read on the
/// node's relay and on `relays`.
///
/// # Errors
/// When the info event cannot be signed.
pub async fn start(
    keys: NodeKeys,
    grants: Grants,
    relays: Vec<String>,
    relay: Arc<dyn RelayPort>,
) -> crate::Result<Tasks> {
    let info = info(&keys).map_err(|e| SettleError::Crypto(e.to_string()))?;
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
    Ok(Tasks(tasks))
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
