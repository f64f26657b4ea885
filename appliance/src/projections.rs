//! What the node projects for standard Nostr clients, every `[ledger] publish_secs`: a
//! NIP-66 relay discovery event (kind 30166) about its own face — the NIP-11 document it
//! serves, its supported NIPs (`N`) and requirements (`R`: auth, payment, writes) read from
//! that document — and, with the ledger, a NIP-85 trusted assertion (kind 30385) about
//! each peer the ledger judged ([`fleetmesh_ledger::projection`]). Both go to the node's
//! own relay and to each of `[node] relays` (the 30166 only when the face is advertised
//! by a `ws`/`wss` endpoint: a bare listener address means nothing elsewhere); a relay that cannot be reached is logged and
//! tried again next time.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use fleetmesh_proto::projection::RelayMonitor;
use fleetmesh_proto::{Event, NodeKeys};
use fleetmesh_relay::face::Relay;
use serde_json::Value;

/// How long one configured relay may take to take the projections.
const RELAY_TIMEOUT: Duration = Duration::from_secs(10);

/// What the projector publishes with.
pub struct Projector {
    /// The node's keys.
    pub keys: NodeKeys,
    /// Its relay.
    pub relay: Arc<Relay>,
    /// The NIP-11 document it serves (kept current by reloads).
    pub nip11: Arc<RwLock<String>>,
    /// The face's URL: the `d` of the 30166 event; `None` when no `ws`/`wss` endpoint is
    /// advertised (the listener's address then names it, and it stays on this relay).
    pub face: (String, bool),
    /// `[node] relays`.
    pub relays: Vec<String>,
    /// The ledger, once it runs.
    #[cfg(feature = "federation")]
    pub accounts: Arc<std::sync::OnceLock<Arc<crate::ledger::Accounts>>>,
}

/// The URL the face is known by, and whether it is advertised: a `wss`/`ws` endpoint of
/// `[node] endpoints`, else the address it listens on (`local`), not advertised.
pub fn face_url(config: &crate::config::Config, local: std::net::SocketAddr) -> (String, bool) {
    config
        .node
        .endpoints
        .iter()
        .find(|e| e.scheme == "wss" || e.scheme == "ws")
        .map_or_else(
            || (format!("ws://{local}/"), false),
            |e| (e.url.clone(), true),
        )
}

/// The NIP-66 event a monitor would write about the relay at `url` serving `doc`.
pub fn monitor(url: &str, doc: &Value) -> RelayMonitor {
    let flag = |key: &str, name: &str| {
        let on = doc["limitation"][key].as_bool().unwrap_or(false);
        if on {
            name.to_owned()
        } else {
            format!("!{name}")
        }
    };
    let host = url.split("://").nth(1).unwrap_or_default();
    let host = host.split(['/', ':']).next().unwrap_or_default();
    RelayMonitor {
        relay: url.to_owned(),
        rtt_open: None,
        rtt_read: None,
        rtt_write: None,
        network: Some(
            if host.ends_with(".onion") {
                "tor"
            } else {
                "clearnet"
            }
            .into(),
        ),
        types: Vec::new(),
        nips: doc["supported_nips"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n.as_u64().and_then(|n| u32::try_from(n).ok()))
            .collect(),
        requirements: vec![
            flag("auth_required", "auth"),
            flag("payment_required", "payment"),
            flag("restricted_writes", "writes"),
        ],
        kinds: Vec::new(),
        document: Some(doc.clone()),
    }
}

impl Projector {
    /// The projections as of `now`, signed.
    fn events(&self, now: u64) -> Vec<Event> {
        let doc: Value = serde_json::from_str(
            &self
                .nip11
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
        .unwrap_or_default();
        let mut events = Vec::new();
        match monitor(&self.face.0, &doc).sign(&self.keys, now) {
            Ok(e) => events.push(e),
            Err(e) => tracing::warn!(error = %e, "the relay projection could not be signed"),
        }
        #[cfg(feature = "federation")]
        if let Some(accounts) = self.accounts.get() {
            for a in accounts.assertions(now) {
                match a.sign(&self.keys, now) {
                    Ok(e) => events.push(e),
                    Err(e) => tracing::warn!(error = %e, "an assertion could not be signed"),
                }
            }
        }
        events
    }

    /// Publishes the projections once: here, then on every configured relay.
    async fn publish(&self) {
        let events = self.events(fleetmesh_proto::unix_now());
        for e in &events {
            if let Err(why) = self.relay.publish(e.clone()).await {
                tracing::debug!(kind = e.kind, error = %why, "a projection was not stored here");
            }
        }
        // a face nobody was told of (no ws/wss endpoint) is not announced to other relays
        let outward: Vec<Event> = events
            .iter()
            .filter(|e| {
                self.face.1
                    || e.kind != fleetmesh_schemas::constants::kind::RELAY_MONITOR_PROJECTION
            })
            .cloned()
            .collect();
        for url in &self.relays {
            if outward.is_empty() {
                break;
            }
            match fleetmesh_relay::sync::publish(url, &outward, None, RELAY_TIMEOUT).await {
                Ok(verdicts) => {
                    let refused = verdicts.iter().filter(|(_, ok, _)| !ok).count();
                    tracing::debug!(relay = %url, published = events.len(), refused, "projections published");
                }
                Err(e) => tracing::warn!(relay = %url, error = %e, "projections not published"),
            }
        }
        metrics::counter!("fleetmesh_projections_published_total").increment(events.len() as u64);
    }

    /// Publishes every `every` (the first a few seconds after start-up) until aborted;
    /// `None` when `every` is zero.
    pub fn spawn(self, every: Duration) -> Option<tokio::task::JoinHandle<()>> {
        if every.is_zero() {
            return None;
        }
        Some(tokio::spawn(async move {
            tokio::time::sleep(every.min(Duration::from_secs(5))).await;
            loop {
                self.publish().await;
                tokio::time::sleep(every).await;
            }
        }))
    }
}
