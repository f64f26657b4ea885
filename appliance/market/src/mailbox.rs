//! The node's mailbox: compute/1.0 jobs that arrive gift-wrapped (NIP-59) through relays
//! instead of by HTTP, so that a buyer who knows only the node's key (its `did:nostr`) can
//! reach it through any relay the node reads.
//!
//! The daemon reads gift wraps `p`-tagged with its key as they arrive on its own relay
//! (from the live fan-out, no connection of its own) and on every relay of `[node]
//! relays` (a subscription on each, reconnected with backoff). A wrap that opens ([`fleetmesh_proto::nip59::unwrap`]:
//! every layer checked) and whose rumor is a compute message (kind
//! [`kind::COMPUTE_RUMOR`]) carries what `POST /v1/jobs` takes, `{"ask", "payload"}`; it
//! goes through the same job service (the same checks, store and engines), and only when
//! the ask's buyer is the wrap's verified sender. When the job is final (the job service
//! says so as it happens, [`JobService::finishes`]; a 1 s tick catches the rest), its
//! payment settled, the node wraps the
//! answer back to the buyer — `{"job": <its status>, "result": <the result, NIP-44 to the
//! buyer>, "receipt": <the receipt event>}`, or `{"in_reply_to": <the submission rumor's
//! id>, "error": {code, message}}` for a refused submission — and publishes it on its own relay and on every relay it reads.
//! Wraps that do not open are counted (`fleetmesh_mailbox_total{outcome}`) and dropped;
//! nothing of theirs is run.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetmesh_port::inbox::{each_once, follow, forward_live};
use fleetmesh_port::{RelayPort, Tasks};
use fleetmesh_proto::{Event, NodeKeys, UnsignedEvent, nip59};
use fleetmesh_schemas::constants::kind;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::jobs::JobRecord;
use crate::service::JobService;
use crate::{Refusal, refuse};

/// Jobs waiting for their answer at once; past it the oldest is answered no more.
const PENDING: usize = 4096;

/// The mailbox's state: the jobs whose answer it owes.
struct Mailbox {
    keys: NodeKeys,
    jobs: Arc<JobService>,
    relay: Arc<dyn RelayPort>,
    out: broadcast::Sender<Event>,
    pending: Mutex<VecDeque<String>>,
    /// Held while answering, so that a job is answered once.
    answering: Mutex<()>,
    /// `[api] jobs_by_key`.
    by_key: bool,
}

fn count(outcome: &'static str) {
    metrics::counter!("fleetmesh_mailbox_total", "outcome" => outcome).increment(1);
}

/// A compute/1.0 message `content` from `keys` to `to` (x-only, hex), gift-wrapped as kind
/// 1059 around a rumor of kind [`kind::COMPUTE_RUMOR`]; and the rumor's id, which a
/// refusal of it names. The node's answers and `meshnode job submit --via giftwrap` use it.
///
/// # Errors
/// As [`nip59::wrap`].
pub fn wrap_compute(
    keys: &NodeKeys,
    to: &str,
    content: &Value,
) -> fleetmesh_proto::Result<(String, Event)> {
    let now = fleetmesh_proto::unix_now();
    let message = UnsignedEvent {
        created_at: now,
        kind: kind::COMPUTE_RUMOR,
        tags: Vec::new(),
        content: content.to_string(),
    };
    let rumor_id = hex::encode(nip59::Rumor::new(keys.nostr_pubkey(), message.clone()).id);
    let wrap = nip59::wrap(keys.nostr(), to, message, kind::GIFT_WRAP, now)?;
    Ok((rumor_id, wrap))
}

/// Submits a compute/1.0 submission `content` (`{"ask", "payload"}`, what `POST /v1/jobs`
/// takes) that arrived by key from `sender` (x-only, hex): only when the ask's buyer is
/// the sender, and when the node takes jobs by key at all (`by_key`, `[api] jobs_by_key`).
/// The gift-wrap mailbox, the DIDComm endpoint and `POST /v1/jobs` by a key (NIP-98) use
/// it. The job, and whether it is new.
///
/// # Errors
/// The job service's refusal; `mismatch` when the ask's buyer is not the sender.
pub fn submit_from(
    jobs: &JobService,
    by_key: bool,
    sender: &str,
    content: &[u8],
) -> Result<(JobRecord, bool), Refusal> {
    if !by_key {
        return Err(refuse(
            "by_key_off",
            "this node takes jobs only by HTTP with its API token ([api] jobs_by_key = false)",
        ));
    }
    let buyer: Option<String> = serde_json::from_slice::<Value>(content)
        .ok()
        .and_then(|v| v["ask"]["pubkey"].as_str().map(str::to_owned));
    if buyer.as_deref() != Some(sender) {
        return Err(refuse(
            "mismatch",
            "the ask's buyer is not the message's sender",
        ));
    }
    jobs.submit(content)
}

/// What a buyer is told about its job: `{"job": <status>, "result": <the result, NIP-44
/// to the buyer, once final>, "receipt": <the receipt event, once final>}`.
pub fn answer(rec: &JobRecord) -> Value {
    let receipt: Value = rec
        .receipt
        .as_deref()
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or(Value::Null);
    json!({"job": rec.to_json(), "result": rec.result, "receipt": receipt})
}

/// Starts the mailbox on the node's relay and on `relays`.
pub fn start(
    relays: Vec<String>,
    keys: NodeKeys,
    jobs: Arc<JobService>,
    relay: Arc<dyn RelayPort>,
    by_key: bool,
) -> Tasks {
    let mut tasks = Vec::new();
    let (out, _) = broadcast::channel(256);
    let (tx, rx) = mpsc::channel::<Event>(256);
    let me = keys.nostr_pubkey_hex();
    let live = relay.live();
    let mailbox = Arc::new(Mailbox {
        keys,
        jobs,
        relay,
        out,
        pending: Mutex::default(),
        answering: Mutex::default(),
        by_key,
    });
    let mine = me.clone();
    let to_me = move |e: &Event| {
        e.kind == kind::GIFT_WRAP
            && e.tags
                .iter()
                .any(|t| t.first().is_some_and(|n| n == "p") && t.get(1) == Some(&mine))
    };
    tasks.push(forward_live(live, to_me, tx.clone(), "mailbox"));
    for url in relays {
        // wraps are dated up to two days back (NIP-59)
        let me = me.clone();
        let filter = move || {
            let since = fleetmesh_proto::unix_now().saturating_sub(nip59::MAX_TWEAK_SECS + 600);
            json!({"kinds": [kind::GIFT_WRAP], "#p": [me], "since": since})
        };
        // the relays may serve gift wraps only to their recipient, authenticated (NIP-42)
        let key = *mailbox.keys.nostr();
        tasks.push(follow(
            mailbox.relay.clone(),
            url,
            filter,
            key,
            tx.clone(),
            mailbox.out.clone(),
        ));
    }
    let m = mailbox.clone();
    tasks.push(each_once(rx, move |wrap| m.open(&wrap)));
    tasks.push(tokio::spawn(async move {
        // each job that ends is answered at once; the tick catches the rest (a job it
        // took before its submission was noted pending)
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut finishes = Some(mailbox.jobs.finishes());
        loop {
            match finishes.as_mut() {
                Some(f) => tokio::select! {
                    _ = tick.tick() => {}
                    changed = f.changed() => if changed.is_err() { finishes = None },
                },
                None => {
                    tick.tick().await;
                }
            }
            let m = mailbox.clone();
            let _ = tokio::task::spawn_blocking(move || m.answer_finished(None)).await;
        }
    }));
    Tasks(tasks)
}

impl Mailbox {
    /// Opens one wrap and submits its job; refusals are answered, failures to open counted.
    fn open(&self, wrap: &Event) {
        // verified already: by the node's relay on its way in, or by the subscription
        let opened = match nip59::unwrap_verified(self.keys.nostr(), wrap) {
            Ok(o) => o,
            Err(e) => {
                count("unopened");
                tracing::debug!(wrap = %wrap.id_hex(), error = %e, "a gift wrap that does not open");
                return;
            }
        };
        if opened.rumor.kind != kind::COMPUTE_RUMOR {
            count("other");
            return;
        }
        let sender = hex::encode(opened.sender);
        if let Some(at) = self
            .relay
            .revoked_at(&opened.sender, fleetmesh_proto::unix_now())
        {
            count("refused");
            tracing::info!(sender, revoked_at = at, "a gift wrap from a revoked key");
            return;
        }
        // a refusal names the submission it refuses (the rumor's id), so that a buyer never
        // takes an old refusal the relay still holds for the answer to a new submission
        let in_reply_to = hex::encode(opened.rumor.id);
        match submit_from(
            &self.jobs,
            self.by_key,
            &sender,
            opened.rumor.content.as_bytes(),
        ) {
            Ok((rec, _)) => {
                count("accepted");
                tracing::info!(job = %rec.id, buyer = %sender, "job by gift wrap");
                let mut pending = self
                    .pending
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if !pending.contains(&rec.id) {
                    pending.push_back(rec.id.clone());
                }
                if pending.len() > PENDING {
                    pending.pop_front();
                }
                drop(pending);
                // a job that ended before it was noted pending is answered now
                self.answer_finished(Some(&rec.id));
            }
            Err(r) => {
                count("refused");
                self.reply(
                    &sender,
                    &json!({"in_reply_to": in_reply_to,
                            "error": {"code": r.code, "message": r.message}}),
                );
            }
        }
    }

    /// Answers the pending jobs that are final: job `only`, or every one.
    fn answer_finished(&self, only: Option<&str>) {
        let _one_at_a_time = self
            .answering
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let ids: Vec<String> = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|p| only.is_none_or(|o| *p == o))
            .cloned()
            .collect();
        for id in ids {
            let Ok(Some(rec)) = self.jobs.job(&id) else {
                continue;
            };
            if !rec.state.is_final() {
                continue;
            }
            self.reply(&rec.buyer, &answer(&rec));
            self.pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .retain(|p| *p != id);
        }
    }

    /// Wraps `content` to `to` and publishes it on the node's relay and every relay read.
    fn reply(&self, to: &str, content: &Value) {
        let wrap = match wrap_compute(&self.keys, to, content) {
            Ok((_, w)) => w,
            Err(e) => {
                tracing::warn!(to, error = %e, "wrapping an answer");
                return;
            }
        };
        let _ = self.out.send(wrap.clone());
        let relay = self.relay.clone();
        let handle = tokio::runtime::Handle::current();
        if let Err(e) = handle.block_on(relay.publish(wrap)) {
            tracing::warn!(to, error = %e, "publishing an answer on the node's relay");
        }
    }
}
