//! Reading what is addressed to the node, through the [`RelayPort`].
//!
//! A service of the node (the mailbox, NWC, nutzaps, the offer desk) reads events of one
//! kind as they arrive on the node's own relay (its live fan-out) and on every remote
//! relay it follows (a subscription each, reconnected with backoff), and hands each one
//! once (by id) to its handler on the blocking pool. [`announce_and_read`] is the whole
//! pattern for a service that announces itself and reads events `p`-tagging the node;
//! [`forward_live`], [`follow`] and [`each_once`] are its parts, for a service that reads
//! something else (the offer desk reads open asks).

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use fleetmesh_proto::Event;
use fleetmesh_proto::filter::{Filter, FilterLimits};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::{LiveEvent, PortError, RelayPort};

/// Event ids remembered to drop duplicates (the same event from several relays).
pub const SEEN: usize = 4096;

/// Event ids seen, the latest [`SEEN`]: a set for lookups, their order for forgetting the
/// oldest.
#[derive(Default)]
struct Seen {
    ids: HashSet<[u8; 32]>,
    order: VecDeque<[u8; 32]>,
}

impl Seen {
    /// True the first time `id` is seen.
    fn first(&mut self, id: [u8; 32]) -> bool {
        if !self.ids.insert(id) {
            return false;
        }
        self.order.push_back(id);
        if self.order.len() > SEEN
            && let Some(old) = self.order.pop_front()
        {
            self.ids.remove(&old);
        }
        true
    }
}

/// Sends the events arriving on the node's relay (`live`) that `keep` takes to `tx`, until
/// either ends; `who` names the reader when it falls behind.
pub fn forward_live(
    mut live: broadcast::Receiver<Arc<LiveEvent>>,
    keep: impl Fn(&Event) -> bool + Send + 'static,
    tx: mpsc::Sender<Event>,
    who: &'static str,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match live.recv().await {
                Ok(arrived) => {
                    if keep(&arrived.event) && tx.send((*arrived.event).clone()).await.is_err() {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(
                        reader = who,
                        skipped = n,
                        "fell behind the relay's live events"
                    );
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    })
}

/// Handles each event `rx` brings once (by id, the latest [`SEEN`] remembered), one at a
/// time on the blocking pool: a flood waits in the channel (and the live fan-out drops the
/// oldest), it does not take a thread each.
pub fn each_once(
    mut rx: mpsc::Receiver<Event>,
    handle: impl Fn(Event) + Send + Sync + 'static,
) -> tokio::task::JoinHandle<()> {
    let handle = Arc::new(handle);
    tokio::spawn(async move {
        let mut seen = Seen::default();
        while let Some(e) = rx.recv().await {
            if !seen.first(e.id) {
                continue;
            }
            let h = handle.clone();
            let _ = tokio::task::spawn_blocking(move || h(e)).await;
        }
    })
}

/// Follows `url` with the subscription `filter` (made again at each connection) as `key`
/// (NIP-42 when asked), sending what matches to `tx` and publishing what `out` carries on
/// the same connection; reconnects with backoff until `tx` closes.
pub fn follow(
    port: Arc<dyn RelayPort>,
    url: String,
    filter: impl Fn() -> Value + Send + 'static,
    key: secp256k1::Keypair,
    tx: mpsc::Sender<Event>,
    out: broadcast::Sender<Event>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut backoff = Duration::from_secs(1);
        loop {
            let outgoing = out.subscribe();
            let ended = port
                .subscribe_to(&url, filter(), Some(key), tx.clone(), outgoing)
                .await;
            if tx.is_closed() {
                return;
            }
            tracing::warn!(relay = %url, ended = ?ended.err(), "subscription ended; reconnecting");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(60));
        }
    })
}

/// A service of the node that reads events addressed to it: of `kind`, `p`-tagging `me`.
pub struct Inbox {
    /// The kind read.
    pub kind: u16,
    /// The node's key (x-only hex), and the key it connects to relays as.
    pub me: (String, secp256k1::Keypair),
    /// Where reading starts on `[node] relays` at each connection (unix seconds).
    pub since: fn() -> u64,
    /// Whether what the node's store already holds is read too (at start, up to
    /// [`BACKLOG`] events).
    pub backlog: bool,
    /// Its name in logs.
    pub who: &'static str,
}

/// The most stored events an inbox reads at start.
pub const BACKLOG: u64 = 1000;

/// The stored events of `kind` `p`-tagging `me`, oldest first.
async fn stored(port: &dyn RelayPort, kind: u16, me: &str) -> crate::Result<Vec<Event>> {
    let filter = Filter::from_value(
        &json!({"kinds": [kind], "#p": [me]}),
        FilterLimits::default(),
    )
    .map_err(|e| PortError::Store(e.to_string()))?;
    let mut found = port.stored(filter, BACKLOG).await?;
    found.sort_by_key(|e| e.created_at);
    Ok(found)
}

/// Stores `announce` on the node's `relay` (before anything is read) and publishes it on
/// `relays`; hands each event the inbox reads — held in the node's store when it has a
/// backlog, live on the node's relay, and on `relays` from `since` — once to `handle`, one at a time on the blocking pool; sends what `out`
/// carries on the relay connections. The tasks doing so.
pub async fn announce_and_read(
    port: &Arc<dyn RelayPort>,
    relays: &[String],
    announce: Event,
    inbox: Inbox,
    out: &broadcast::Sender<Event>,
    handle: impl Fn(Event) + Send + Sync + 'static,
) -> Vec<tokio::task::JoinHandle<()>> {
    if let Err(e) = port.publish(announce.clone()).await {
        tracing::warn!(service = inbox.who, error = %e, "its announcement was not stored");
    }
    let (tx, rx) = mpsc::channel::<Event>(256);
    let (kind, (me, key)) = (inbox.kind, inbox.me);
    let mine = me.clone();
    let to_me = move |e: &Event| {
        e.kind == kind
            && e.tags
                .iter()
                .any(|t| t.first().is_some_and(|n| n == "p") && t.get(1) == Some(&mine))
    };
    let mut tasks = vec![forward_live(port.live(), to_me, tx.clone(), inbox.who)];
    if inbox.backlog {
        let (port, tx, me, who) = (port.clone(), tx.clone(), me.clone(), inbox.who);
        tasks.push(tokio::spawn(async move {
            match stored(port.as_ref(), kind, &me).await {
                Ok(events) => {
                    for e in events {
                        if tx.send(e).await.is_err() {
                            return;
                        }
                    }
                }
                Err(e) => tracing::warn!(service = who, error = %e, "reading the store"),
            }
        }));
    }
    for url in relays {
        let (me, since) = (me.clone(), inbox.since);
        let filter = move || json!({"kinds": [kind], "#p": [me], "since": since()});
        tasks.push(follow(
            port.clone(),
            url.clone(),
            filter,
            key,
            tx.clone(),
            out.clone(),
        ));
    }
    drop(tx);
    let (port, relays, who) = (port.clone(), relays.to_vec(), inbox.who);
    tasks.push(tokio::spawn(async move {
        for url in &relays {
            let sent = port
                .publish_to(url, vec![announce.clone()], Duration::from_secs(10))
                .await;
            if let Err(e) = sent {
                tracing::warn!(service = who, relay = %url, error = %e, "its announcement was not published");
            }
        }
    }));
    tasks.push(each_once(rx, handle));
    tasks
}
