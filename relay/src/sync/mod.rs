//! NIP-77 sync with a peer relay (ours or any other that speaks NIP-77): reconcile the
//! local store's items for a filter with the peer's by negentropy (protocol 0x61), then
//! fetch what is missing here and push what is missing there, so no event crosses the
//! wire twice. Fetched events are verified (id, signature, schema) before they are stored.
//!
//! Used by `meshnode sync`; the store is accessed directly, so it runs beside a running
//! daemon too (SQLite WAL takes the writes of both).

use std::collections::HashSet;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use negentropy::{Id, Negentropy, NegentropyStorageVector};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::store::{EventStore, InsertOutcome};
use crate::{Error, Result};
use fleetmesh_proto::event::Event;
use fleetmesh_proto::filter::{Filter, FilterLimits};
use fleetmesh_proto::unix_now;

mod client;
pub use client::{auth_message, publish, query, subscribe};

/// Which way events flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    /// Fetch what the peer has and we lack.
    Pull,
    /// Send what we have and the peer lacks.
    Push,
    /// Both (the default).
    #[default]
    Both,
}

impl std::str::FromStr for Direction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pull" => Ok(Direction::Pull),
            "push" => Ok(Direction::Push),
            "both" => Ok(Direction::Both),
            _ => Err(format!("unknown direction {s:?} (pull, push or both)")),
        }
    }
}

mod in_flight;
pub mod textfile;
mod tls;
pub use in_flight::InFlight;
use tls::tls_config;

/// How to sync.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    /// The NIP-01 filter whose events are reconciled. Default: `{}` (everything).
    pub filter: Value,
    /// Which way events flow. Default: both.
    pub direction: Direction,
    /// Largest negentropy message we send, in bytes (0: unlimited). Default 50 000.
    pub frame_size: u64,
    /// Most local items reconciled. Default 1 000 000.
    pub max_items: usize,
    /// Ids per REQ when fetching, events in flight when pushing. Default 250.
    pub batch: usize,
    /// Longest wait for any one answer from the peer. Default 30 s.
    pub timeout: Duration,
    /// Reconcile only: report what would move, move nothing. Default false.
    pub dry_run: bool,
    /// Trust anchors (PEM certificates) for a `wss://` peer, beside the web's public roots
    /// (Mozilla's list): a private CA, or a relay's self-signed certificate. Default none.
    pub ca_pem: Option<Vec<u8>>,
    /// The ids being fetched by this node's other rounds, shared by them: an id another
    /// round is fetching is left to it, so rounds with several peers at once fetch each
    /// missing event once. Default none.
    pub in_flight: Option<std::sync::Arc<InFlight>>,
    /// Most events fetched this round; the ids past it are left for later rounds (counted
    /// in [`SyncReport::held_back`]). A node shedding load holds a granted peer's pulls to
    /// what its grant leaves in the window. Default: no limit.
    pub max_fetch: usize,
    /// Events pushed must match one of these (a peer's grant to us names the shards it
    /// takes); empty: any. Default empty.
    pub push_only: std::sync::Arc<Vec<fleetmesh_proto::filter::Filter>>,
}

impl Default for SyncOptions {
    fn default() -> Self {
        SyncOptions {
            filter: json!({}),
            direction: Direction::Both,
            frame_size: 50_000,
            max_items: 1_000_000,
            batch: 250,
            timeout: Duration::from_secs(30),
            dry_run: false,
            ca_pem: None,
            in_flight: None,
            max_fetch: usize::MAX,
            push_only: Default::default(),
        }
    }
}

/// What a sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Local items reconciled.
    pub local_items: usize,
    /// Negentropy round trips (NEG-OPEN or NEG-MSG answered by the peer).
    pub rounds: usize,
    /// Bytes of negentropy messages sent (the WebSocket text, NEG-* framing included).
    pub neg_bytes_up: usize,
    /// Bytes of negentropy messages received.
    pub neg_bytes_down: usize,
    /// Negentropy payload bytes sent (binary, before hex and JSON framing).
    pub neg_payload_up: usize,
    /// Negentropy payload bytes received (binary).
    pub neg_payload_down: usize,
    /// Ids we have and the peer lacks.
    pub have: usize,
    /// Ids the peer has and we lack.
    pub need: usize,
    /// Events fetched, verified and stored.
    pub fetched: usize,
    /// Events fetched but refused (bad id, signature or schema), or not returned.
    pub fetch_failed: usize,
    /// Of those, events outside the filter of the round (the peer reconciled or returned
    /// what was not asked for).
    pub out_of_filter: usize,
    /// Of those, events whose id or signature did not hold.
    pub forged: usize,
    /// Events the peer accepted (`OK true`).
    pub pushed: usize,
    /// Events the peer refused.
    pub push_refused: usize,
    /// Answers `OK false` as over a limit (`rate-limited:`, `auth-required:`), each
    /// attempt counted: the strain we put on the peer.
    pub push_limited: usize,
    /// Bytes of EVENT/REQ/OK traffic sent.
    pub transfer_bytes_up: usize,
    /// Bytes of EVENT/REQ/OK traffic received.
    pub transfer_bytes_down: usize,
    /// Events the peer returned when asked for them, taken or refused.
    pub returned: usize,
    /// Ids we lack that another round of ours was fetching already (left to it).
    pub in_flight: usize,
    /// Ids we lack left for a later round: past [`SyncOptions::max_fetch`].
    pub held_back: usize,
}

impl SyncReport {
    /// Adds what another round moved (its counts, not its reconciliation state) to this.
    pub fn absorb(&mut self, r: &SyncReport) {
        self.fetched += r.fetched;
        self.pushed += r.pushed;
        self.fetch_failed += r.fetch_failed;
        self.push_refused += r.push_refused;
        self.push_limited += r.push_limited;
        self.neg_bytes_up += r.neg_bytes_up;
        self.neg_bytes_down += r.neg_bytes_down;
        self.transfer_bytes_up += r.transfer_bytes_up;
        self.transfer_bytes_down += r.transfer_bytes_down;
        self.returned += r.returned;
        self.out_of_filter += r.out_of_filter;
        self.forged += r.forged;
        self.in_flight += r.in_flight;
        self.held_back += r.held_back;
    }
}

/// A conversation with a peer relay over a transport other than a WebSocket (an iroh QUIC
/// stream, say): NIP-01 text messages each way. The transport pumps its frames through the
/// two channels; either channel closing ends the conversation.
#[derive(Debug)]
pub struct Link {
    /// Messages to the peer.
    pub tx: tokio::sync::mpsc::Sender<String>,
    /// Messages from the peer.
    pub rx: tokio::sync::mpsc::Receiver<String>,
}

enum Wire {
    Ws(
        Box<
            tokio_tungstenite::WebSocketStream<
                tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
            >,
        >,
    ),
    Link(Link),
}

struct Peer {
    url: String,
    wire: Wire,
    timeout: Duration,
}

/// `filter` parsed for a conversation with `peer`, its errors named for that peer.
pub(crate) fn parse_filter(peer: &str, filter: &Value) -> Result<Filter> {
    Filter::from_value(filter, FilterLimits::default()).map_err(|e| Error::Sync {
        peer: peer.to_owned(),
        reason: format!("filter: {e}"),
    })
}

impl Peer {
    /// Connects to `peer` (`ws://` or `wss://`, TLS checked against the web's roots and
    /// `ca_pem`); every answer is then awaited at most `timeout`.
    async fn connect(peer: &str, ca_pem: Option<&[u8]>, timeout: Duration) -> Result<Peer> {
        let tls = if peer.starts_with("wss://") {
            Some(tokio_tungstenite::Connector::Rustls(tls_config(
                peer, ca_pem,
            )?))
        } else {
            None
        };
        let (ws, _) = tokio_tungstenite::connect_async_tls_with_config(peer, None, true, tls)
            .await
            .map_err(|e| Error::Sync {
                peer: peer.to_owned(),
                reason: format!("connect: {e}"),
            })?;
        Ok(Peer {
            url: peer.to_owned(),
            wire: Wire::Ws(Box::new(ws)),
            timeout,
        })
    }

    /// A conversation over `link`, named `name` in errors.
    fn over(name: &str, link: Link, timeout: Duration) -> Peer {
        Peer {
            url: name.to_owned(),
            wire: Wire::Link(link),
            timeout,
        }
    }

    async fn close(&mut self) {
        match &mut self.wire {
            Wire::Ws(ws) => {
                let _ = ws.as_mut().close(None).await;
            }
            Wire::Link(link) => link.rx.close(),
        }
    }

    /// The next text message, `None` when the conversation is over (cancel-safe).
    async fn next_text(&mut self) -> Option<Result<String>> {
        match &mut self.wire {
            Wire::Ws(ws) => loop {
                match ws.next().await? {
                    Ok(Message::Text(t)) => return Some(Ok(t.as_str().to_owned())),
                    Ok(_) => {}
                    Err(e) => return Some(Err(self.err(format!("receive: {e}")))),
                }
            },
            Wire::Link(link) => link.rx.recv().await.map(Ok),
        }
    }

    fn err(&self, reason: impl Into<String>) -> Error {
        Error::Sync {
            peer: self.url.clone(),
            reason: reason.into(),
        }
    }

    async fn send(&mut self, text: String) -> Result<usize> {
        let n = text.len();
        match &mut self.wire {
            Wire::Ws(ws) => ws
                .send(Message::Text(text.into()))
                .await
                .map_err(|e| self.err(format!("send: {e}")))?,
            Wire::Link(link) => link
                .tx
                .send(text)
                .await
                .map_err(|_| self.err("send: the link closed"))?,
        }
        Ok(n)
    }

    /// The next JSON array message, and its size.
    async fn recv(&mut self) -> Result<(Value, usize)> {
        let t = tokio::time::timeout(self.timeout, self.next_text())
            .await
            .map_err(|_| self.err(format!("no answer within {:?}", self.timeout)))?
            .ok_or_else(|| self.err("the connection closed"))??;
        let v: Value = serde_json::from_str(&t).map_err(|e| self.err(format!("not JSON: {e}")))?;
        Ok((v, t.len()))
    }
}

/// How a sync advances, for a progress display; `Display` gives each as one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncProgress {
    /// Connected; reconciliation starts over this many local items.
    Reconciling {
        /// Items on this side matching the filter.
        local_items: usize,
    },
    /// Every fifth round of reconciliation: the differences found so far.
    Round {
        /// Rounds so far.
        round: usize,
        /// Events found missing on the peer so far.
        to_send: usize,
        /// Events found missing here so far.
        to_fetch: usize,
    },
    /// Reconciliation is over.
    Reconciled {
        /// Rounds it took.
        rounds: usize,
        /// Events missing on the peer.
        to_send: usize,
        /// Events missing here.
        to_fetch: usize,
    },
    /// Events fetched (stored or already here) of those missing here.
    Fetched {
        /// So far.
        done: usize,
        /// In all.
        total: usize,
    },
    /// Events the peer accepted of those missing there.
    Pushed {
        /// So far.
        done: usize,
        /// In all.
        total: usize,
    },
    /// The peer answered `rate-limited:`; these events go again after the pause.
    RateLimited {
        /// Events to send again.
        events: usize,
        /// The pause first.
        pause: Duration,
    },
}

impl std::fmt::Display for SyncProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SyncProgress::Reconciling { local_items } => {
                write!(f, "sync: reconciling {local_items} local items")
            }
            SyncProgress::Round {
                round,
                to_send,
                to_fetch,
            } => write!(
                f,
                "sync: round {round}: {to_send} to send, {to_fetch} to fetch so far"
            ),
            SyncProgress::Reconciled {
                rounds,
                to_send,
                to_fetch,
            } => write!(
                f,
                "sync: reconciled in {rounds} rounds: {to_send} to send, {to_fetch} to fetch"
            ),
            SyncProgress::Fetched { done, total } => write!(f, "sync: fetched {done}/{total}"),
            SyncProgress::Pushed { done, total } => write!(f, "sync: pushed {done}/{total}"),
            SyncProgress::RateLimited { events, pause } => write!(
                f,
                "sync: the peer rate-limits; {events} events again in {pause:?}"
            ),
        }
    }
}

/// Syncs `store` (any [`EventStore`]) with the relay at `peer` (`ws://` or `wss://`);
/// `progress` is told how the work advances ([`SyncProgress`]).
///
/// # Errors
/// [`Error::Sync`] when the peer cannot be reached, answers NEG-ERR (for example a relay
/// without NIP-77) or breaks the protocol; [`Error::Store`] when the store fails.
pub async fn sync<S: EventStore + ?Sized>(
    store: &mut S,
    peer: &str,
    opts: &SyncOptions,
    progress: impl FnMut(&SyncProgress),
) -> Result<SyncReport> {
    run(store, peer, None, opts, progress).await
}

/// [`sync`] over `link` instead of a WebSocket: the same conversation with the peer named
/// `name` (in errors), carried by another transport (the federation's iroh QUIC links).
///
/// # Errors
/// As [`sync`].
pub async fn sync_over<S: EventStore + ?Sized>(
    store: &mut S,
    name: &str,
    link: Link,
    opts: &SyncOptions,
    progress: impl FnMut(&SyncProgress),
) -> Result<SyncReport> {
    run(store, name, Some(link), opts, progress).await
}

async fn run<S: EventStore + ?Sized>(
    store: &mut S,
    peer: &str,
    link: Option<Link>,
    opts: &SyncOptions,
    mut progress: impl FnMut(&SyncProgress),
) -> Result<SyncReport> {
    let filter = parse_filter(peer, &opts.filter)?;
    let items = store
        .negentropy_items(std::slice::from_ref(&filter), opts.max_items, unix_now())?
        .ok_or_else(|| Error::Sync {
            peer: peer.to_owned(),
            reason: format!(
                "the filter matches more than {} local events; narrow it",
                opts.max_items
            ),
        })?;
    let mut report = SyncReport {
        local_items: items.len(),
        ..SyncReport::default()
    };
    let neg_err = |e: negentropy::Error| Error::Sync {
        peer: peer.to_owned(),
        reason: format!("negentropy: {e}"),
    };
    let mut storage = NegentropyStorageVector::with_capacity(items.len());
    for (created_at, id) in items {
        storage
            .insert(created_at, Id::from_byte_array(id))
            .map_err(neg_err)?;
    }
    storage.seal().map_err(neg_err)?;
    let mut neg = Negentropy::owned(storage, opts.frame_size).map_err(neg_err)?;

    let mut p = match link {
        Some(link) => Peer::over(peer, link, opts.timeout),
        None => Peer::connect(peer, opts.ca_pem.as_deref(), opts.timeout).await?,
    };
    progress(&SyncProgress::Reconciling {
        local_items: report.local_items,
    });

    // Reconciliation.
    let subid = "fleetmesh-sync";
    let initial = neg.initiate().map_err(neg_err)?;
    report.neg_payload_up += initial.len();
    let open = json!(["NEG-OPEN", subid, opts.filter, hex::encode(&initial)]).to_string();
    report.neg_bytes_up += p.send(open).await?;
    let (mut have, mut need): (Vec<Id>, Vec<Id>) = (Vec::new(), Vec::new());
    loop {
        let (v, n) = p.recv().await?;
        match (v[0].as_str(), v[1].as_str()) {
            (Some("NEG-MSG"), Some(s)) if s == subid => {
                report.neg_bytes_down += n;
                report.rounds += 1;
                let msg = v[2]
                    .as_str()
                    .and_then(|h| hex::decode(h).ok())
                    .ok_or_else(|| p.err("NEG-MSG without a hex message"))?;
                report.neg_payload_down += msg.len();
                match neg
                    .reconcile_with_ids(&msg, &mut have, &mut need)
                    .map_err(neg_err)?
                {
                    Some(next) => {
                        report.neg_payload_up += next.len();
                        let text = json!(["NEG-MSG", subid, hex::encode(&next)]).to_string();
                        report.neg_bytes_up += p.send(text).await?;
                    }
                    None => break,
                }
                if report.rounds.is_multiple_of(5) {
                    progress(&SyncProgress::Round {
                        round: report.rounds,
                        to_send: have.len(),
                        to_fetch: need.len(),
                    });
                }
            }
            (Some("NEG-ERR"), Some(s)) if s == subid => {
                return Err(p.err(format!(
                    "NEG-ERR: {}",
                    v[2].as_str().unwrap_or("(no reason)")
                )));
            }
            (Some("NOTICE"), _) => {
                return Err(p.err(format!("NOTICE: {}", v[1].as_str().unwrap_or(""))));
            }
            _ => {}
        }
    }
    report.neg_bytes_up += p.send(json!(["NEG-CLOSE", subid]).to_string()).await?;
    report.have = have.len();
    report.need = need.len();
    progress(&SyncProgress::Reconciled {
        rounds: report.rounds,
        to_send: report.have,
        to_fetch: report.need,
    });

    if opts.dry_run {
        p.close().await;
        return Ok(report);
    }
    // what another round is fetching is left to it (a round that only pushes claims none)
    let pulls = opts.direction != Direction::Push;
    let claimed = opts.in_flight.as_ref().filter(|_| pulls).map(|f| {
        let (claimed, skipped) = f.claim(std::mem::take(&mut need));
        report.in_flight = skipped;
        claimed
    });
    let need = match &claimed {
        Some(c) => c.ids.as_slice(),
        None => need.as_slice(),
    };
    report.held_back = need.len().saturating_sub(opts.max_fetch);
    let need = &need[..need.len().min(opts.max_fetch)];
    if pulls && !need.is_empty() {
        pull(
            store,
            &mut p,
            need,
            &filter,
            opts,
            &mut report,
            &mut progress,
        )
        .await?;
    }
    if opts.direction != Direction::Pull && !have.is_empty() {
        push(store, &mut p, &have, opts, &mut report, &mut progress).await?;
    }
    p.close().await;
    Ok(report)
}

async fn pull<S: EventStore + ?Sized>(
    store: &mut S,
    p: &mut Peer,
    need: &[Id],
    filter: &Filter,
    opts: &SyncOptions,
    report: &mut SyncReport,
    progress: &mut impl FnMut(&SyncProgress),
) -> Result<()> {
    let schemas = fleetmesh_schemas::SchemaSet::embedded();
    let limits = crate::limits::Limits::default();
    // a revoked key's events from its revocation on are not taken, as the relay face
    // refuses them; revocations in a batch count for the batch
    let revoked = crate::revoked::Revoked::from_store(&*store)?;
    for (n, chunk) in need.chunks(opts.batch.max(1)).enumerate() {
        let ids: Vec<String> = chunk.iter().map(|id| hex::encode(id.as_bytes())).collect();
        let wanted: HashSet<&str> = ids.iter().map(String::as_str).collect();
        let sub = format!("fetch-{n}");
        let req = json!(["REQ", sub, {"ids": ids, "limit": ids.len()}]).to_string();
        report.transfer_bytes_up += p.send(req).await?;
        let mut got: Vec<(Event, String)> = Vec::with_capacity(chunk.len());
        let mut returned = 0usize;
        loop {
            let (v, size) = p.recv().await?;
            report.transfer_bytes_down += size;
            match v[0].as_str() {
                Some("EVENT") if v[1] == sub.as_str() => {
                    returned += 1;
                    if returned > chunk.len() {
                        return Err(p.err("the peer sent more events than were asked for"));
                    }
                    // Verified here: the peer is not trusted.
                    // The checks the relay face applies on ingest, at its default limits.
                    let Ok(e) = Event::from_value(&v[2]) else {
                        report.fetch_failed += 1;
                        continue;
                    };
                    if let Err(why) = limits.admit(&e, schemas, unix_now()) {
                        report.fetch_failed += 1;
                        report.forged += usize::from(why.forged);
                    } else if !wanted.contains(e.id_hex().as_str()) || !filter.matches(&e) {
                        // a peer that reconciled ids outside the agreed filter gets
                        // nothing of them stored
                        report.fetch_failed += 1;
                        report.out_of_filter += 1;
                    } else {
                        let json = e.to_json();
                        got.push((e, json));
                    }
                }
                Some("EOSE") if v[1] == sub.as_str() => break,
                Some("CLOSED") if v[1] == sub.as_str() => {
                    return Err(p.err(format!("REQ closed: {}", v[2].as_str().unwrap_or(""))));
                }
                _ => {}
            }
        }
        p.send(json!(["CLOSE", sub]).to_string()).await?;
        got.iter().for_each(|(e, _)| revoked.learn(e));
        let before = got.len();
        got.retain(|(e, _)| revoked.check(e).is_ok());
        report.fetch_failed += before - got.len();
        let refs: Vec<(&Event, &str)> = got.iter().map(|(e, j)| (e, j.as_str())).collect();
        for outcome in store.insert_batch(&refs)? {
            match outcome {
                InsertOutcome::Stored | InsertOutcome::Duplicate => report.fetched += 1,
                InsertOutcome::Superseded | InsertOutcome::Deleted | InsertOutcome::Shed => {
                    report.fetch_failed += 1
                }
            }
        }
        report.returned += returned;
        // Ids the peer reconciled but did not return (deleted or expired meanwhile).
        report.fetch_failed += chunk.len().saturating_sub(returned);
        progress(&SyncProgress::Fetched {
            done: report.fetched,
            total: need.len(),
        });
    }
    Ok(())
}

async fn push<S: EventStore + ?Sized>(
    store: &mut S,
    p: &mut Peer,
    have: &[Id],
    opts: &SyncOptions,
    report: &mut SyncReport,
    progress: &mut impl FnMut(&SyncProgress),
) -> Result<()> {
    for chunk in have.chunks(opts.batch.max(1)) {
        let ids: Vec<[u8; 32]> = chunk.iter().map(|id| *id.as_bytes()).collect();
        let mut pending: Vec<(String, String)> = store
            .events_by_id(&ids)?
            .into_iter()
            .filter_map(|raw| {
                let e = Event::from_json(&raw).ok()?;
                let within =
                    opts.push_only.is_empty() || opts.push_only.iter().any(|f| f.matches(&e));
                within.then(|| (e.id_hex(), raw))
            })
            .collect();
        // A peer that answers `rate-limited:` gets the same events again after a pause
        // that doubles each time (0.5 s up to 8 s), for up to six tries.
        let mut pause = Duration::from_millis(500);
        for attempt in 0.. {
            let mut waiting: HashSet<&str> = pending.iter().map(|(id, _)| id.as_str()).collect();
            for (_, raw) in &pending {
                report.transfer_bytes_up += p.send(format!("[\"EVENT\",{raw}]")).await?;
            }
            let mut limited: HashSet<String> = HashSet::new();
            while !waiting.is_empty() {
                let (v, size) = p.recv().await?;
                report.transfer_bytes_down += size;
                if v[0] == "OK"
                    && let Some(id) = v[1].as_str()
                    && waiting.remove(id)
                {
                    let msg = v[3].as_str().unwrap_or("");
                    let over =
                        msg.starts_with("rate-limited:") || msg.starts_with("auth-required:");
                    if v[2] != true && over {
                        report.push_limited += 1;
                    }
                    if v[2] == true {
                        report.pushed += 1;
                    } else if msg.starts_with("rate-limited:") && attempt < 5 {
                        limited.insert(id.to_owned());
                    } else {
                        report.push_refused += 1;
                    }
                }
            }
            if limited.is_empty() {
                break;
            }
            progress(&SyncProgress::RateLimited {
                events: limited.len(),
                pause,
            });
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(8));
            pending.retain(|(id, _)| limited.contains(id));
        }
        progress(&SyncProgress::Pushed {
            done: report.pushed,
            total: have.len(),
        });
    }
    Ok(())
}
