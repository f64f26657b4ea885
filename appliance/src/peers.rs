//! The node's view of its peers: who they are, whether they speak our protocol, the
//! transport in use, their last heartbeat, the last sync round and what it moved, and what
//! was refused from them. Written by the peering tasks ([`crate::peering`], the federation
//! transports), read by `GET /v1/peers` and `meshnode peers`.
//!
//! Anyone can make a key and announce a valid descriptor, so nothing here grows with what
//! strangers send: the table holds at most its capacity (a new peer takes the place of the
//! one heard from least recently among those without a working link, or is left out and
//! counted when every entry has one), and the refusal counts keep
//! [`REFUSAL_SOURCES`] sources each, the rest under `"(others)"`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use fleetmesh_relay::face::{PeerRefusal, Tally, TallyCounts};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// One peer as this node sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerView {
    /// Its Nostr key (hex), or for a `[[peering.peers]]` relay face its URL.
    pub id: String,
    /// `did:nostr:…`, once its descriptor is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub did: Option<String>,
    /// Its class (backbone, community, edge, leaf), from its descriptor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Its libp2p peer id, once heard on the gossip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub libp2p: Option<String>,
    /// Whether its protocol digest is ours (a node that differs is never peered).
    pub digest_match: bool,
    /// Its digest when it differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The transport the rounds run over: `iroh`, `ws` or `wss`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// Where it is reached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addrs: Vec<String>,
    /// For a QUIC link, the path its traffic took at the last round: `direct` (punched
    /// through NAT where it had to be) or `relay` (through an iroh relay server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `up` (a link or a last round that worked), `down`, `inbound` (it dials us), or
    /// `not peered` (another digest, no reachable endpoint).
    pub link: String,
    /// Unix time of its last heartbeat heard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat: Option<u64>,
    /// Unix time of the last round that completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync: Option<u64>,
    /// Rounds that completed and that failed.
    pub rounds_ok: u64,
    /// Rounds that failed.
    pub rounds_failed: u64,
    /// Events fetched from it, in all.
    pub fetched: u64,
    /// Events it accepted from us, in all.
    pub sent: u64,
    /// Its events refused here (bad signature, outside the filter, revoked) and ours it
    /// refused, in all.
    pub refused: u64,
    /// Outbound strain: our events it answered as over a limit (`rate-limited:`,
    /// `auth-required:`: it sheds load), every attempt counted, in all.
    #[serde(default)]
    pub strained: u64,
    /// Why the last round or link failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The traffic with it both ways (its sessions on our relay face and our rounds with
    /// it) and what was refused from it, by reason: the ledger's measurements.
    #[serde(default)]
    pub traffic: TallyCounts,
}

/// The most sources each refusal count keeps by name.
pub const REFUSAL_SOURCES: usize = 256;

/// Where refusals from sources past [`REFUSAL_SOURCES`] are counted.
const OTHERS: &str = "(others)";

/// The table, shared by the tasks and the API.
#[derive(Debug)]
pub struct Peers {
    /// The most entries in `peers` (and tallies kept).
    cap: usize,
    peers: Mutex<BTreeMap<String, PeerView>>,
    /// Peers left out because the table was full of peers with working links.
    left_out: AtomicU64,
    /// Gossip messages refused, by the libp2p peer they came through.
    gossip_refused: Mutex<BTreeMap<String, u64>>,
    /// Hello refusals on the QUIC endpoint, by the remote's Ed25519 key.
    hello_refused: Mutex<BTreeMap<String, u64>>,
    /// Traffic per peer key, shared with the relay sessions it opens.
    tallies: Mutex<BTreeMap<String, Arc<Tally>>>,
    kicks: Mutex<Vec<Arc<Notify>>>,
    /// Peers the ledger suspended (until then) or revoked (`u64::MAX`).
    #[cfg_attr(not(feature = "federation"), allow(dead_code))]
    barred: Mutex<BTreeMap<String, u64>>,
    /// The ledger's window, seconds (0: none): each tally counts per window of it.
    window_secs: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counts one refusal from `source`, by name while fewer than [`REFUSAL_SOURCES`] are.
fn count_refusal(counts: &Mutex<BTreeMap<String, u64>>, source: &str) {
    let mut counts = lock(counts);
    let key = if counts.contains_key(source) || counts.len() < REFUSAL_SOURCES {
        source
    } else {
        OTHERS
    };
    *counts.entry(key.to_owned()).or_default() += 1;
}

impl Peers {
    /// A table of at most `cap` peers.
    pub fn new(cap: usize) -> Peers {
        Peers {
            cap: cap.max(1),
            peers: Mutex::default(),
            left_out: AtomicU64::new(0),
            gossip_refused: Mutex::default(),
            hello_refused: Mutex::default(),
            tallies: Mutex::default(),
            kicks: Mutex::default(),
            barred: Mutex::default(),
            window_secs: AtomicU64::new(0),
        }
    }

    /// Bars the peer `id` until `until` (Unix seconds; `u64::MAX`: for good): no rounds
    /// with it, its sessions admit nothing.
    #[cfg_attr(not(feature = "federation"), allow(dead_code))]
    pub fn bar(&self, id: &str, until: u64) {
        lock(&self.barred).insert(id.to_owned(), until);
        self.update(id, |_| {});
    }

    /// What the link column says of a peer barred until `until`, if it still is.
    fn barred_link(&self, id: &str) -> Option<&'static str> {
        match lock(&self.barred).get(id) {
            Some(&u64::MAX) => Some("revoked (ledger)"),
            Some(&u) if u > fleetmesh_proto::unix_now() => Some("suspended (ledger)"),
            _ => None,
        }
    }

    /// Whether the peer `id` is barred now.
    #[cfg_attr(not(feature = "federation"), allow(dead_code))]
    pub fn barred(&self, id: &str) -> bool {
        lock(&self.barred)
            .get(id)
            .is_some_and(|u| *u > fleetmesh_proto::unix_now())
    }

    /// Has every tally count per window of `secs` seconds (the ledger's).
    #[cfg_attr(not(feature = "federation"), allow(dead_code))]
    pub fn set_window(&self, secs: u64) {
        self.window_secs
            .store(secs, std::sync::atomic::Ordering::Relaxed);
        for t in lock(&self.tallies).values() {
            t.set_window(secs);
        }
    }

    /// Changes the peer `id`'s entry, made if new. A full table makes room by dropping the
    /// entry heard from least recently among those without a working link (`up`, or
    /// `inbound`: it dials us); when every entry has one, a new peer is left out (counted
    /// as `left_out`) and `f` is not run. A barred peer's link column keeps saying so
    /// whatever a round or a link ending in the meantime says.
    pub fn update(&self, id: &str, f: impl FnOnce(&mut PeerView)) {
        let barred = self.barred_link(id);
        let mut peers = lock(&self.peers);
        let mut dropped = None;
        if !peers.contains_key(id) && peers.len() >= self.cap {
            let stalest = peers
                .values()
                .filter(|v| v.link != "up" && v.link != "inbound")
                .min_by_key(|v| v.last_heartbeat.max(v.last_sync))
                .map(|v| v.id.clone());
            let Some(old) = stalest else {
                self.left_out.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(peer = %id, "the peers table is full of linked peers: left out");
                return;
            };
            peers.remove(&old);
            dropped = Some(old);
        }
        let view = peers.entry(id.to_owned()).or_insert_with(|| PeerView {
            id: id.to_owned(),
            link: "down".into(),
            ..PeerView::default()
        });
        f(view);
        if let Some(b) = barred {
            view.link = b.into();
        }
        drop(peers);
        if let Some(old) = dropped {
            tracing::debug!(peer = %old, "dropped from the full peers table");
            lock(&self.tallies).remove(&old);
        }
    }

    /// The entry of `id`.
    #[cfg_attr(not(feature = "federation"), allow(dead_code))]
    pub fn get(&self, id: &str) -> Option<PeerView> {
        lock(&self.peers).get(id).cloned()
    }

    /// The tally of `id` when it has one already (a peer linked or in session with us):
    /// what faces open to any key (message streams, Blossom) count a peer's traffic in
    /// without keeping one per stranger.
    pub fn tally_known(&self, id: &str) -> Option<Arc<Tally>> {
        lock(&self.tallies).get(id).cloned()
    }

    /// The traffic tally of the peer `id` (made if new), for its relay sessions. Past the
    /// table's capacity a new peer's tally counts without being kept.
    pub fn tally(&self, id: &str) -> Arc<Tally> {
        let mut tallies = lock(&self.tallies);
        if !tallies.contains_key(id) && tallies.len() >= self.cap {
            return Arc::default();
        }
        let secs = self.window_secs.load(std::sync::atomic::Ordering::Relaxed);
        tallies
            .entry(id.to_owned())
            .or_insert_with(|| {
                let t = Arc::new(Tally::default());
                t.set_window(secs);
                t
            })
            .clone()
    }

    /// Records a round with `id`: what it moved, or why it failed. `live`: its messages
    /// were counted in the tally as they crossed (a round over a peer link), so only its
    /// refusals are added here.
    pub fn round(
        &self,
        id: &str,
        outcome: Result<&fleetmesh_relay::sync::SyncReport, String>,
        live: bool,
    ) {
        if let Ok(r) = outcome {
            let t = self.tally(id);
            if !live {
                t.received(
                    r.returned as u64,
                    (r.neg_bytes_down + r.transfer_bytes_down) as u64,
                );
                t.sent(
                    (r.pushed + r.push_refused) as u64,
                    (r.neg_bytes_up + r.transfer_bytes_up) as u64,
                );
            }
            t.refused_n(PeerRefusal::OutOfFilter, r.out_of_filter as u64);
            t.refused_n(PeerRefusal::Forged, r.forged as u64);
        }
        self.update(id, |v| match outcome {
            Ok(r) => {
                v.link = "up".into();
                v.rounds_ok += 1;
                v.last_sync = Some(fleetmesh_proto::unix_now());
                v.fetched += r.fetched as u64;
                v.sent += r.pushed as u64;
                v.refused += (r.fetch_failed + r.push_refused) as u64;
                v.strained += r.push_limited as u64;
                v.last_error = None;
            }
            Err(e) => {
                v.link = "down".into();
                v.rounds_failed += 1;
                v.last_error = Some(e);
            }
        });
    }

    /// Counts a gossip message refused from `via`.
    #[cfg_attr(not(feature = "federation"), allow(dead_code))]
    pub fn gossip_refused(&self, via: &str) {
        count_refusal(&self.gossip_refused, via);
    }

    /// Counts a QUIC hello refused from `remote`.
    #[cfg_attr(not(feature = "federation"), allow(dead_code))]
    pub fn hello_refused(&self, remote: &str) {
        count_refusal(&self.hello_refused, remote);
    }

    /// A wake-up for a peering task: [`Peers::kick_all`] notifies it.
    pub fn kick(&self) -> Arc<Notify> {
        let n = Arc::new(Notify::new());
        lock(&self.kicks).push(n.clone());
        n
    }

    /// Starts a round with every peer now (new events to pass on).
    pub fn kick_all(&self) {
        let mut kicks = lock(&self.kicks);
        kicks.retain(|k| Arc::strong_count(k) > 1);
        for k in kicks.iter() {
            k.notify_one();
        }
    }

    /// Kicks every peering task when the relay takes new events (a client's, or a peer's
    /// pushed over a link), at most five times a second.
    pub fn spawn_kicker(
        self: &Arc<Self>,
        relay: &fleetmesh_relay::face::Relay,
    ) -> tokio::task::JoinHandle<()> {
        let mut live = relay.live();
        let me = self.clone();
        tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                match live.recv().await {
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return,
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                while !matches!(
                    live.try_recv(),
                    Err(tokio::sync::broadcast::error::TryRecvError::Empty
                        | tokio::sync::broadcast::error::TryRecvError::Closed)
                ) {}
                me.kick_all();
            }
        })
    }

    /// The table as served by `GET /v1/peers`.
    pub fn snapshot(&self) -> serde_json::Value {
        let tallies = lock(&self.tallies);
        let peers: Vec<PeerView> = lock(&self.peers)
            .values()
            .map(|v| PeerView {
                traffic: tallies.get(&v.id).map(|t| t.counts()).unwrap_or_default(),
                ..v.clone()
            })
            .collect();
        serde_json::json!({
            "peers": peers,
            "gossip_refused": *lock(&self.gossip_refused),
            "hello_refused": *lock(&self.hello_refused),
            "left_out": self.left_out.load(Ordering::Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_drops_the_stalest_unlinked_peer_and_leaves_out_new_ones_when_all_are_up() {
        let t = Peers::new(3);
        for (id, beat) in [("a", 30), ("b", 10), ("c", 20)] {
            t.update(id, |v| v.last_heartbeat = Some(beat));
            t.tally(id).received(1, 10);
        }
        t.update("a", |v| v.link = "up".into());
        // b is the stalest of those not up: it makes room for d, its tally goes with it
        t.update("d", |v| v.link = "up".into());
        assert!(t.get("b").is_none());
        assert!(t.get("a").is_some() && t.get("c").is_some() && t.get("d").is_some());
        t.update("e", |v| v.link = "up".into());
        assert!(
            t.get("c").is_none(),
            "c was the only one left without a link"
        );
        // every entry is up: a newcomer is left out and counted, known peers still change
        let mut ran = false;
        t.update("f", |_| ran = true);
        assert!(!ran && t.get("f").is_none());
        t.update("a", |v| v.rounds_ok = 7);
        assert_eq!(t.get("a").unwrap().rounds_ok, 7);
        let snap = t.snapshot();
        assert_eq!(snap["left_out"], 1);
        assert_eq!(snap["peers"].as_array().unwrap().len(), 3);
        // tallies are kept for at most as many peers; b's went with it
        assert!(!lock(&t.tallies).contains_key("b"));
        t.tally("g").received(1, 1);
        t.tally("h").received(1, 1);
        assert!(lock(&t.tallies).len() <= 3);
    }

    #[test]
    fn a_peer_that_dials_us_keeps_its_place() {
        let t = Peers::new(2);
        t.update("x", |v| v.link = "inbound".into());
        t.update("y", |v| v.last_heartbeat = Some(99));
        t.update("z", |_| {});
        assert!(t.get("x").is_some() && t.get("z").is_some() && t.get("y").is_none());
    }

    #[test]
    fn refusals_are_counted_by_source_up_to_a_bound_and_the_rest_together() {
        let t = Peers::new(8);
        for i in 0..REFUSAL_SOURCES + 50 {
            t.hello_refused(&format!("key{i}"));
            t.gossip_refused(&format!("peer{i}"));
        }
        t.hello_refused("key0");
        let snap = t.snapshot();
        for field in ["hello_refused", "gossip_refused"] {
            let counts = snap[field].as_object().unwrap();
            assert_eq!(counts.len(), REFUSAL_SOURCES + 1, "{field}");
            assert_eq!(counts[OTHERS], 50, "{field}");
        }
        assert_eq!(snap["hello_refused"]["key0"], 2);
    }
}
