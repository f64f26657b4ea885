//! The provider's side of the market over relays: the node publishes its terms (kind
//! 30812, [`fleetmesh_proto::provider::Terms`]: what it sells now, its prices and mints,
//! the models it serves and the circuits it proves, with their digests)
//! on its own relay and on every relay of `[node] relays`, again whenever they change
//! (a reload, a ComputeProvider manifest); and it reads open asks (kind 30810) as they
//! arrive — on its relay (published there, or synced from a peer) and on those relays —
//! answering each it can fill with an offer: a compute/1.0 `offer` gift-wrapped to the
//! buyer ([`crate::mailbox::wrap_compute`]), published where the ask was read. The buyer
//! then sends the job itself by gift wrap, which the mailbox takes.
//!
//! An ask is answered once, only while it has not expired, and only when it is open or
//! names this node (`p`); asks of revoked keys and of the node itself, and asks it cannot
//! fill (engine, mode, tokens, a bid under its price), get no answer — counted in
//! `fleetmesh_offers_total{outcome}`. With `[jobs] publish_asks = false` (a
//! ComputeProvider's `publishAsks: false`) no ask is answered (`not-answering`); the terms
//! are still published, for buyers who send jobs directly.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetmesh_port::inbox::{each_once, follow, forward_live};
use fleetmesh_port::{RelayPort, Tasks};
use fleetmesh_proto::ask::Ask;
use fleetmesh_proto::noun::Noun as _;
use fleetmesh_proto::provider::{ModelTerm, Terms};
use fleetmesh_proto::{Engine, Event, NodeKeys};
use fleetmesh_schemas::constants::kind;
use serde_json::json;
use tokio::sync::{broadcast, mpsc};

use crate::mailbox::wrap_compute;
use crate::service::JobService;
use crate::service::offers::offer_message;

/// How often the terms are compared with what the node sells now.
const TERMS_EVERY: Duration = Duration::from_secs(2);
/// How long one configured relay may take to take the terms.
const RELAY_TIMEOUT: Duration = Duration::from_secs(10);

fn count(outcome: &'static str) {
    metrics::counter!("fleetmesh_offers_total", "outcome" => outcome).increment(1);
}

/// What the offer desk works with.
struct Desk {
    keys: NodeKeys,
    jobs: Arc<JobService>,
    relay: Arc<dyn RelayPort>,
    out: broadcast::Sender<Event>,
    /// The id of the terms event last published.
    terms: Mutex<Option<String>>,
}

/// Stores the node's terms (with the Cashu `mints` it takes and the `regions` it runs in)
/// on its relay, then starts
/// publishing them (on `relays` too, and again when they change) and answering asks.
pub async fn start(
    relays: Vec<String>,
    keys: NodeKeys,
    jobs: Arc<JobService>,
    relay: Arc<dyn RelayPort>,
    (mints, regions): (Vec<String>, Vec<String>),
    models: Models,
) -> Tasks {
    let mut tasks = Vec::new();
    let (out, _) = broadcast::channel(256);
    let (tx, rx) = mpsc::channel::<Event>(256);
    let desk = Arc::new(Desk {
        keys,
        jobs,
        relay,
        out,
        terms: Mutex::default(),
    });
    let is_ask = |e: &Event| e.kind == kind::COMPUTE_ASK;
    tasks.push(forward_live(
        desk.relay.live(),
        is_ask,
        tx.clone(),
        "offers",
    ));
    for url in &relays {
        let filter = || json!({"kinds": [kind::COMPUTE_ASK], "since": fleetmesh_proto::unix_now().saturating_sub(60)});
        let key = *desk.keys.nostr();
        tasks.push(follow(
            desk.relay.clone(),
            url.clone(),
            filter,
            key,
            tx.clone(),
            desk.out.clone(),
        ));
    }
    drop(tx);
    let d = desk.clone();
    tasks.push(each_once(rx, move |ask| d.answer(ask)));
    // read off the runtime: a circuit's zkey is hashed the first time it is seen
    let current = {
        let (jobs, sold, models) = (desk.jobs.clone(), Arc::new((mints, regions)), models);
        move || {
            let (jobs, sold, models) = (jobs.clone(), sold.clone(), models.clone());
            async move {
                tokio::task::spawn_blocking(move || terms_now(&jobs, &sold, &models))
                    .await
                    .ok()
            }
        }
    };
    // on the node's own relay before it serves anything
    let mut last = current()
        .await
        .unwrap_or_else(|| desk.jobs.limits().terms());
    desk.publish_terms(&last, &[]).await;
    tasks.push(tokio::spawn(async move {
        let mut first = true;
        loop {
            let Some(now) = current().await else {
                tokio::time::sleep(TERMS_EVERY).await;
                continue;
            };
            if first || now != last {
                desk.publish_terms(&now, &relays).await;
                (last, first) = (now, false);
            }
            tokio::time::sleep(TERMS_EVERY).await;
        }
    }));
    Tasks(tasks)
}

/// The models the node serves now, for its terms.
pub type Models = Arc<dyn Fn() -> Vec<ModelTerm> + Send + Sync>;

/// What the node sells now: its engines, modes, prices and limits, the `mints` it takes,
/// the `regions` it runs in, the models it serves (when it runs `llm` jobs) and the
/// circuits installed (when it proves).
fn terms_now(
    jobs: &JobService,
    (mints, regions): &(Vec<String>, Vec<String>),
    models: &Models,
) -> Terms {
    let mut terms = jobs.limits().terms();
    terms.mints.clone_from(mints);
    terms.regions.clone_from(regions);
    if terms.engines.contains(&Engine::Llm) {
        terms.models = models();
    }
    if terms.engines.contains(&Engine::Groth16Prove) {
        terms.circuits = jobs.circuits();
    }
    terms
}

impl Desk {
    /// Signs `terms` and publishes them here and on `relays`.
    async fn publish_terms(&self, terms: &Terms, relays: &[String]) {
        let event = match terms.sign(&self.keys, fleetmesh_proto::unix_now()) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "the node's terms could not be signed");
                return;
            }
        };
        if let Err(e) = self.relay.publish(event.clone()).await {
            tracing::warn!(error = %e, "the node's terms were not stored on its relay");
        }
        *self
            .terms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(event.id_hex());
        for url in relays {
            let sent = self
                .relay
                .publish_to(url, vec![event.clone()], RELAY_TIMEOUT)
                .await;
            if let Err(e) = sent {
                tracing::warn!(relay = %url, error = %e, "the node's terms were not published");
            }
        }
        tracing::info!(terms = %event.id_hex(), engines = ?terms.engines, "terms published");
    }

    /// Answers one ask with an offer when the node can fill it.
    fn answer(&self, event: Event) {
        if !self.jobs.limits().publish_asks {
            count("not-answering");
            return;
        }
        let now = fleetmesh_proto::unix_now();
        let ask = match Ask::from_event(event, now) {
            Ok(a) => a,
            Err(e) => {
                count("invalid");
                tracing::debug!(error = %e, "an ask that does not hold");
                return;
            }
        };
        let me = self.keys.nostr_pubkey_hex();
        let named: Vec<&str> = ask
            .event
            .tags
            .iter()
            .filter(|t| t.first().is_some_and(|n| n == "p"))
            .filter_map(|t| t.get(1).map(String::as_str))
            .collect();
        if ask.buyer() == me || !(named.is_empty() || named.contains(&me.as_str())) {
            count("not-for-us");
            return;
        }
        if self.relay.revoked_at(&ask.event.pubkey, now).is_some() {
            count("revoked");
            return;
        }
        let price = match self.jobs.quote(&ask) {
            Ok(p) => p,
            Err(r) => {
                count("declined");
                tracing::debug!(ask = %ask.event.id_hex(), code = r.code, "an ask not offered for");
                return;
            }
        };
        let terms = self
            .terms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        // delivery-mode escrow may be locked to a hash whose preimage comes with the output
        let htlc = (ask.mode == fleetmesh_proto::Mode::Delivery && price > 0)
            .then(|| self.jobs.delivery_lock(&ask))
            .flatten();
        let offer = offer_message(&ask, price, terms.as_deref(), htlc.as_deref());
        let wrap = match wrap_compute(&self.keys, &ask.buyer(), &offer) {
            Ok((_, w)) => w,
            Err(e) => {
                tracing::warn!(error = %e, "wrapping an offer");
                return;
            }
        };
        count("offered");
        tracing::info!(ask = %ask.event.id_hex(), buyer = %ask.buyer(), price_sat = price, "offer sent");
        let _ = self.out.send(wrap.clone());
        let relay = self.relay.clone();
        if let Err(e) = tokio::runtime::Handle::current().block_on(relay.publish(wrap)) {
            tracing::warn!(error = %e, "publishing an offer on the node's relay");
        }
    }
}
