//! The relay face: NIP-01 over a WebSocket.
//!
//! One task per connection reads client messages, and one writes the connection's
//! outbound queue, which is bounded in bytes ([`outbox`]). An EVENT is parsed, checked
//! against the limits, verified (id, then signature), schema-checked when fleetmesh
//! defines its kind, then either fanned out (ephemeral) or handed to the store's
//! [`Writer`]; its `OK` is sent by the writer thread after the commit, so `OK true` means
//! stored. A REQ reads the matching events' keys (never their bodies) from the bounded
//! reader pool, then streams the bodies in pages as the client drains its queue, newest
//! first, then `EOSE`, then live events; live events that arrive meanwhile are held back
//! and sent after `EOSE`. A connection runs one query at a time; a CLOSE, a REQ replacing
//! the subscription or the end of the connection cancels its query. NIP-77's NEG-OPEN
//! loads a filter's `(created_at, id)` items from the pool and keeps a negentropy session
//! per subscription id until NEG-CLOSE. Every rejection carries a NIP-01 prefix; a
//! malformed message gets a NOTICE and the connection stays. A connection with nothing
//! open that sends nothing for `idle_timeout_secs`, or that answers no ping, is closed;
//! oversized frames close with 1009, invalid UTF-8 with 1007.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::thread::JoinHandle;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use fleetmesh_schemas::SchemaSet;
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::Result;

mod negentropy;
mod outbox;
use self::negentropy::{NegOpened, NegSession};
use self::outbox::{Outbox, OutputBudget, Refused};
use crate::event::Event;
use crate::filter::{Filter, FilterLimits};
use crate::limits::{Limits, TokenBucket};
use crate::message;
use crate::metrics::{Metrics, Rejection};
use crate::store::readers::Readers;
use crate::store::writer::{QueueError, Writer};
use crate::store::{Durability, InsertOutcome, now};

/// How the relay is set up.
#[derive(Debug, Clone, Default)]
pub struct RelayConfig {
    /// Limits and rate limits.
    pub limits: Limits,
    /// How hard commits are pushed to disk.
    pub durability: Durability,
}

/// An event that was accepted, on its way to live subscribers.
#[derive(Debug)]
pub struct LiveEvent {
    /// The event.
    pub event: Arc<Event>,
    /// Its JSON as served.
    pub json: Arc<str>,
}

/// The relay: store handles, the live fan-out, limits and counters. Share it in an `Arc`.
pub struct Relay {
    limits: Limits,
    writer: Writer,
    readers: Arc<Readers>,
    live: broadcast::Sender<Arc<LiveEvent>>,
    schemas: &'static SchemaSet,
    metrics: Arc<Metrics>,
    shutdown: watch::Sender<bool>,
    /// Output queued on all connections together, in bytes.
    output: Arc<OutputBudget>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Capacity of the live fan-out; a connection that falls this far behind loses events
/// (and is told so).
const LIVE_CAPACITY: usize = 8192;
/// Most messages written between two flushes.
const FLUSH_EVERY: usize = 256;
/// Stored events read per page while a REQ's answer streams out.
const PAGE: usize = 32;
/// Read-only store connections: the most queries running at once, all clients together.
const READERS: usize = 8;

impl Relay {
    /// Starts the writer thread and the reader pool over the store at `db`.
    ///
    /// Returns the relay and the writer thread's handle: after the last `Arc<Relay>` is
    /// dropped, joining it waits for every queued event to be committed.
    ///
    /// # Errors
    /// If the store cannot be opened.
    pub fn start(db: &Path, config: RelayConfig) -> Result<(Arc<Relay>, JoinHandle<()>)> {
        let (writer, handle) = Writer::start(db, config.durability, 65_536, 1024)?;
        let readers = Arc::new(Readers::new(db, READERS)?);
        let (live, _) = broadcast::channel(LIVE_CAPACITY);
        let (shutdown, _) = watch::channel(false);
        let relay = Arc::new(Relay {
            limits: config.limits,
            writer,
            readers,
            live,
            schemas: SchemaSet::embedded(),
            metrics: Arc::new(Metrics::default()),
            shutdown,
            output: Arc::new(OutputBudget::default()),
        });
        Ok((relay, handle))
    }

    /// Stores `event` — one this node made and signed (a receipt, a descriptor) — and
    /// hands it to live subscriptions, as a client's EVENT would; the same admission
    /// checks (signature, schema of fleetmesh kinds) apply. Resolves with the store's
    /// outcome.
    ///
    /// # Errors
    /// The refusal's message (NIP-01 style: `invalid: …`, `error: …`).
    pub async fn publish(&self, event: Event) -> std::result::Result<InsertOutcome, String> {
        self.limits
            .admit(&event, self.schemas, now())
            .map_err(|m| m.to_string())?;
        let json: Arc<str> = event.to_json().into();
        let event = Arc::new(event);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (live, metrics) = (self.live.clone(), self.metrics.clone());
        let (ev, js) = (event.clone(), json.clone());
        self.writer
            .insert(
                event,
                json,
                Box::new(move |outcome| {
                    if let Ok(InsertOutcome::Stored) = outcome {
                        metrics.events_stored.fetch_add(1, Relaxed);
                        let _ = live.send(Arc::new(LiveEvent {
                            event: ev,
                            json: js,
                        }));
                    }
                    let _ = tx.send(outcome);
                }),
            )
            .map_err(|e| match e {
                QueueError::Full => "rate-limited: the store is busy".to_string(),
                QueueError::Stopped => "error: the relay is shutting down".to_string(),
            })?;
        rx.await
            .map_err(|_| "error: the store writer stopped".to_string())?
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Bytes queued for output on all connections together (bounded by
    /// `max_queued_bytes_total`).
    pub fn queued_output_bytes(&self) -> usize {
        self.output.used()
    }

    /// `/metrics` text: the counters plus the store's event count and size.
    ///
    /// # Errors
    /// If the store cannot be read.
    pub async fn render_metrics(&self) -> Result<String> {
        let (events, bytes) = self
            .readers
            .run(|s| Ok((s.event_count()?, s.size_bytes()?)))
            .await?;
        let mut text = self.metrics.render(events, bytes);
        let _ = std::fmt::Write::write_fmt(
            &mut text,
            format_args!(
                "# HELP fleetmesh_relay_output_queued_bytes Bytes queued for output on all relay \
                 connections.\n# TYPE fleetmesh_relay_output_queued_bytes gauge\n\
                 fleetmesh_relay_output_queued_bytes {}\n",
                self.queued_output_bytes()
            ),
        );
        Ok(text)
    }

    /// Asks every connection to close (sent a WebSocket close frame) — for shutdown.
    pub fn close_all(&self) {
        let _ = self.shutdown.send(true);
    }

    /// Has the store's writer commit every event queued so far and end, even if
    /// connections still hold the relay; joining the handle [`Relay::start`] returned then
    /// returns. Blocking: call it off the async runtime.
    pub fn stop_writer(&self) {
        self.writer.stop();
    }

    /// Deletes expired events every `every`, until the relay is shut down.
    pub fn spawn_expiry_purge(self: &Arc<Self>, every: std::time::Duration) {
        let relay = Arc::downgrade(self);
        let mut stop = self.shutdown.subscribe();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop.changed() => return,
                }
                let Some(relay) = relay.upgrade() else { return };
                let _ = relay.writer.purge_expired(
                    now(),
                    Box::new(|r| {
                        if let Err(e) = r {
                            warn!(error = %e, "purging expired events failed");
                        }
                    }),
                );
            }
        });
    }

    /// Logs, every `every` while any came in, one INFO line counting the events turned
    /// away by reason (each refusal itself is logged at DEBUG), until the relay is shut
    /// down.
    pub fn spawn_rejection_summary(self: &Arc<Self>, every: std::time::Duration) {
        let relay = Arc::downgrade(self);
        let mut stop = self.shutdown.subscribe();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            let mut last = Default::default();
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop.changed() => return,
                }
                let Some(relay) = relay.upgrade() else { return };
                if let Some(counts) = relay.metrics.rejections_since(&mut last) {
                    info!(rejected = %counts, seconds = every.as_secs(), "events turned away");
                }
            }
        });
    }

    /// Serves only this relay (WebSocket on `/`) on a new listener at `addr`, with
    /// TCP_NODELAY, until the returned task is aborted: for tests, benchmarks and embedding.
    /// `meshnode run` serves the relay beside its other endpoints instead.
    ///
    /// # Errors
    /// If `addr` cannot be bound.
    pub async fn listen(
        self: &Arc<Self>,
        addr: SocketAddr,
    ) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
        use axum::extract::{ConnectInfo, State};
        use axum::serve::ListenerExt as _;
        let app = axum::Router::new()
            .route(
                "/",
                axum::routing::get(
                    |State(relay): State<Arc<Relay>>,
                     ConnectInfo(peer): ConnectInfo<SocketAddr>,
                     ws: WebSocketUpgrade| async move { relay.upgrade(ws, peer) },
                ),
            )
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await;
        });
        Ok((local, task))
    }

    /// Upgrades an HTTP request to a relay connection.
    pub fn upgrade(self: Arc<Self>, ws: WebSocketUpgrade, peer: SocketAddr) -> Response {
        // Frames far past the advertised limit are a protocol error and end the
        // connection; those up to 4x get a NOTICE and the connection stays.
        let hard = self
            .limits
            .max_message_length
            .saturating_mul(4)
            .max(1 << 20);
        ws.max_message_size(hard)
            .max_frame_size(hard)
            .on_upgrade(move |socket| self.serve(socket, peer))
    }

    /// Serves one WebSocket connection until it closes.
    pub async fn serve(self: Arc<Self>, socket: WebSocket, peer: SocketAddr) {
        self.metrics.connections_total.fetch_add(1, Relaxed);
        self.metrics.connections_open.fetch_add(1, Relaxed);
        debug!(%peer, "relay connection opened");
        let (mut sink, mut stream) = socket.split();
        let (out, mut drain) = outbox::outbox(
            self.limits.max_queued_bytes,
            self.output.clone(),
            self.limits.max_queued_bytes_total,
        );
        let send_task = tokio::spawn(async move {
            // Write whatever is queued, then flush once: a REQ's results or a batch of OKs
            // go out in a few syscalls instead of one per message.
            'outer: while let Some(first) = drain.rx.recv().await {
                let mut next = Some(first);
                let (mut written, mut bytes) = (0, 0);
                while let Some(q) = next.take() {
                    let closing = matches!(q.msg, Message::Close(_));
                    bytes += q.bytes;
                    if sink.feed(q.msg).await.is_err() || closing {
                        let _ = sink.flush().await;
                        break 'outer;
                    }
                    written += 1;
                    if written < FLUSH_EVERY {
                        next = drain.rx.try_recv().ok();
                    }
                }
                if sink.flush().await.is_err() {
                    break;
                }
                drain.written(bytes);
            }
            let _ = sink.close().await;
        });
        let mut conn = Connection {
            relay: self.clone(),
            out,
            subs: HashMap::new(),
            generation: 0,
            events: TokenBucket::new(self.limits.events_per_second, self.limits.event_burst),
            reqs: TokenBucket::new(self.limits.reqs_per_second, self.limits.req_burst),
            peer,
            live: None,
            negs: HashMap::new(),
            turn: Arc::new(tokio::sync::Mutex::new(())),
            tasks: Vec::new(),
        };
        let mut stop = self.shutdown.subscribe();
        let (query_tx, mut query_rx) = mpsc::channel::<Done>(64);
        let ping_every = Duration::from_secs(self.limits.ping_interval_secs.max(1));
        let idle_after = Duration::from_secs(self.limits.idle_timeout_secs.max(1));
        let mut ping = tokio::time::interval_at(Instant::now() + ping_every, ping_every);
        let (mut heard, mut spoke) = (Instant::now(), Instant::now());
        let (reason, code): (&str, Option<u16>) = loop {
            if conn.subs.is_empty() {
                conn.live = None;
            }
            tokio::select! {
                msg = stream.next() => {
                    heard = Instant::now();
                    match msg {
                        Some(Ok(Message::Text(text))) => {
                            spoke = heard;
                            if !conn.handle_text(text.as_str(), &query_tx) {
                                break ("too slow", None);
                            }
                        }
                        Some(Ok(Message::Binary(_))) => {
                            spoke = heard;
                            if !conn.notice("invalid: binary messages are not supported; send text") {
                                break ("too slow", None);
                            }
                        }
                        Some(Ok(Message::Close(_))) | None => break ("closed by peer", None),
                        Some(Ok(_)) => {} // ping/pong: pings are answered by the library
                        Some(Err(e)) => {
                            debug!(%peer, error = %e, "websocket error");
                            break ws_error(e);
                        }
                    }
                },
                _ = ping.tick() => {
                    let now = Instant::now();
                    if now.duration_since(heard) >= ping_every * 2 {
                        break ("no answer to ping", Some(1001));
                    }
                    let nothing_open = conn.subs.is_empty() && conn.negs.is_empty();
                    if nothing_open && now.duration_since(spoke) >= idle_after {
                        break ("idle", Some(1000));
                    }
                    if now.duration_since(heard) >= ping_every
                        && conn.out.try_send(Message::Ping(Vec::new().into())).is_err()
                    {
                        break ("too slow", None);
                    }
                },
                ev = next_live(&mut conn.live) => match ev {
                    Ok(ev) => {
                        if !conn.on_live(&ev) {
                            break ("too slow", None);
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        warn!(%peer, dropped = n, "live subscriber fell behind");
                        if !conn.notice(&format!("error: this connection fell behind; {n} live events were not delivered")) {
                            break ("too slow", None);
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => break ("relay stopped", None),
                },
                Some(done) = query_rx.recv() => {
                    let ok = match done {
                        Done::Query(done) => conn.on_query_done(done),
                        Done::NegOpened(opened) => conn.on_neg_opened(opened),
                        Done::Refused(why) => {
                            conn.refused(why);
                            false
                        }
                    };
                    if !ok {
                        break ("too slow", None);
                    }
                }
                _ = stop.changed() => break ("relay shutting down", Some(1001)),
            }
        };
        if let Some(code) = code {
            // past any budget: the queue may be full, and this is the last message
            let _ = conn.out.tx_close(code, reason);
        }
        for task in &conn.tasks {
            task.abort();
        }
        let open_subs = conn.subs.len() as u64;
        self.metrics
            .subscriptions_open
            .fetch_sub(open_subs, Relaxed);
        drop(conn);
        let _ = send_task.await;
        self.metrics.connections_open.fetch_sub(1, Relaxed);
        debug!(%peer, reason, "relay connection closed");
    }
}

/// Why a read error ends a connection, and the close code it deserves (RFC 6455 §7.4.1).
fn ws_error(e: axum::Error) -> (&'static str, Option<u16>) {
    use tokio_tungstenite::tungstenite::Error as WsError;
    let inner = e.into_inner();
    match inner.downcast_ref::<WsError>() {
        Some(WsError::Capacity(_)) => ("frame too large", Some(1009)),
        Some(WsError::Utf8(_)) => ("invalid UTF-8", Some(1007)),
        _ => ("protocol error", Some(1002)),
    }
}

/// The next live event, or never when not subscribed.
async fn next_live(
    live: &mut Option<broadcast::Receiver<Arc<LiveEvent>>>,
) -> Result<Arc<LiveEvent>, broadcast::error::RecvError> {
    match live {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// A subscription of one connection.
struct Sub {
    filters: Arc<Vec<Filter>>,
    generation: u64,
    /// Live events held back until the stored ones and EOSE are sent.
    pending: Option<Vec<Arc<LiveEvent>>>,
    /// Its query, while the stored events are still streaming out.
    query: Option<AbortHandle>,
}

impl Drop for Sub {
    fn drop(&mut self) {
        if let Some(q) = self.query.take() {
            q.abort();
        }
    }
}

/// Background work finished for a connection.
enum Done {
    Query(QueryDone),
    NegOpened(NegOpened),
    /// A query's output was refused by the outbox: the connection must close.
    Refused(Refused),
}

struct QueryDone {
    subid: String,
    generation: u64,
    /// The ids of the stored events sent, or why the query failed.
    result: Result<HashSet<[u8; 32]>>,
}

struct Connection {
    relay: Arc<Relay>,
    out: Outbox,
    subs: HashMap<String, Sub>,
    generation: u64,
    events: TokenBucket,
    reqs: TokenBucket,
    peer: SocketAddr,
    /// The live fan-out, subscribed only while the connection has subscriptions: a
    /// publish-only connection is never woken for other connections' events. Taken before
    /// a REQ's query starts, so nothing committed after the query's snapshot is missed.
    live: Option<broadcast::Receiver<Arc<LiveEvent>>>,
    /// NIP-77 sessions by subscription id.
    negs: HashMap<String, NegSession>,
    /// Held by the running query: one at a time per connection.
    turn: Arc<tokio::sync::Mutex<()>>,
    /// Background tasks of this connection, cancelled when it ends.
    tasks: Vec<AbortHandle>,
}

fn text(s: String) -> Message {
    Message::Text(s.into())
}

/// Sends on a connection's queue from any thread; false if the client is too slow or gone.
fn push(out: &Outbox, msg: String) -> bool {
    out.try_send(text(msg)).is_ok()
}

impl Connection {
    fn send(&self, msg: String) -> bool {
        match self.out.try_send(text(msg)) {
            Ok(()) => true,
            Err(why) => {
                self.refused(why);
                false
            }
        }
    }

    /// Counts and logs why the connection's output was refused (it is then closed).
    fn refused(&self, why: Refused) {
        match why {
            Refused::Slow => debug!(peer = %self.peer, "reads too slowly; closing"),
            Refused::NodeFull => warn!(
                peer = %self.peer,
                budget = self.relay.limits.max_queued_bytes_total,
                "the relay's output budget is spent; closing this connection"
            ),
            Refused::Closed => {}
        }
    }

    fn notice(&self, msg: &str) -> bool {
        self.relay.metrics.notices.fetch_add(1, Relaxed);
        self.send(message::notice(msg))
    }

    fn reject(&self, id: &str, why: Rejection, msg: &str) -> bool {
        self.relay.metrics.reject(why);
        // one line per refusal only at debug: a flood of them is summarised instead
        debug!(peer = %self.peer, id, reason = msg, "event rejected");
        self.send(message::ok(id, false, msg))
    }

    /// Handles one text message; false when the connection must close.
    fn handle_text(&mut self, text: &str, queries: &mpsc::Sender<Done>) -> bool {
        let limits = &self.relay.limits;
        if text.len() > limits.max_message_length {
            return self.notice(&format!(
                "invalid: message of {} bytes exceeds the limit of {} bytes",
                text.len(),
                limits.max_message_length
            ));
        }
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => return self.notice(&format!("invalid: message is not JSON: {e}")),
        };
        let Some(arr) = value.as_array() else {
            return self.notice("invalid: a message must be a JSON array");
        };
        match arr.first().and_then(Value::as_str) {
            Some("EVENT") => self.on_event(arr),
            Some("REQ") => self.on_req(arr, queries),
            Some("CLOSE") => self.on_close(arr),
            Some(kind @ ("NEG-OPEN" | "NEG-MSG" | "NEG-CLOSE")) if self.relay.limits.negentropy => {
                self.on_neg(kind, arr, queries)
            }
            Some(other) => {
                let other = other.chars().take(32).collect::<String>();
                self.notice(&format!("invalid: unknown message type {other:?}"))
            }
            None => self.notice("invalid: a message must start with its type as a string"),
        }
    }

    fn on_event(&mut self, arr: &[Value]) -> bool {
        let relay = self.relay.clone();
        let limits = &relay.limits;
        relay.metrics.events_received.fetch_add(1, Relaxed);
        let raw = match arr {
            [_, ev] => ev,
            _ => return self.notice("invalid: EVENT takes exactly one event"),
        };
        // The id as sent, for the OK even when the event is malformed.
        let claimed_id = raw
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if !self.events.take() {
            return self.reject(
                &claimed_id,
                Rejection::RateLimited,
                "rate-limited: slow down, too many events",
            );
        }
        let event = match Event::from_value(raw) {
            Ok(e) => e,
            Err(e) => {
                let msg = format!(
                    "invalid: {}",
                    e.to_string().trim_start_matches("invalid event: ")
                );
                if claimed_id.is_empty() {
                    relay.metrics.reject(Rejection::Invalid);
                    return self.notice(&msg);
                }
                return self.reject(&claimed_id, Rejection::Invalid, &msg);
            }
        };
        let id = event.id_hex();
        if let Err(msg) = limits.admit(&event, relay.schemas, now()) {
            return self.reject(&id, Rejection::Invalid, &msg);
        }
        let json: Arc<str> = event.to_json().into();
        if event.is_ephemeral() {
            relay.metrics.events_ephemeral.fetch_add(1, Relaxed);
            let _ = relay.live.send(Arc::new(LiveEvent {
                event: Arc::new(event),
                json,
            }));
            return self.send(message::ok(&id, true, ""));
        }
        let event = Arc::new(event);
        let out = self.out.clone();
        let metrics = relay.metrics.clone();
        let live = relay.live.clone();
        let ev_for_live = event.clone();
        let json_for_live = json.clone();
        let done_id = id.clone();
        let queued = relay.writer.insert(
            event,
            json,
            Box::new(move |outcome| {
                let (accepted, msg, why) = match outcome {
                    Ok(InsertOutcome::Stored) => {
                        metrics.events_stored.fetch_add(1, Relaxed);
                        let _ = live.send(Arc::new(LiveEvent {
                            event: ev_for_live,
                            json: json_for_live,
                        }));
                        (true, String::new(), None)
                    }
                    Ok(InsertOutcome::Duplicate) => (
                        true,
                        "duplicate: already have this event".into(),
                        Some(Rejection::Duplicate),
                    ),
                    Ok(InsertOutcome::Superseded) => (
                        false,
                        "duplicate: a newer version of this event is stored".into(),
                        Some(Rejection::Duplicate),
                    ),
                    Ok(InsertOutcome::Deleted) => (
                        false,
                        "blocked: this event was deleted by its author".into(),
                        Some(Rejection::Blocked),
                    ),
                    Err(e) => {
                        metrics.store_error(&e);
                        (
                            false,
                            format!("error: could not store the event: {e}"),
                            Some(Rejection::Error),
                        )
                    }
                };
                if let Some(why) = why {
                    metrics.reject(why);
                    // one line per refusal only at debug; the periodic summary counts them
                    debug!(id = %done_id, reason = %msg, "event not stored");
                }
                push(&out, message::ok(&done_id, accepted, &msg));
            }),
        );
        match queued {
            Ok(()) => true,
            Err(QueueError::Full) => self.reject(
                &id,
                Rejection::RateLimited,
                "rate-limited: the store is busy, try again shortly",
            ),
            Err(QueueError::Stopped) => {
                self.reject(&id, Rejection::Error, "error: the relay is shutting down")
            }
        }
    }

    fn on_req(&mut self, arr: &[Value], queries: &mpsc::Sender<Done>) -> bool {
        let relay = self.relay.clone();
        let limits = &relay.limits;
        let Some(subid) = arr.get(1).and_then(Value::as_str) else {
            return self.notice("invalid: REQ needs a subscription id string");
        };
        if subid.is_empty() || subid.chars().count() > limits.max_subid_length {
            return self.notice(&format!(
                "invalid: subscription ids are 1 to {} characters",
                limits.max_subid_length
            ));
        }
        let subid = subid.to_owned();
        let filters_json = &arr[2..];
        if filters_json.is_empty() {
            return self.send(message::closed(
                &subid,
                "invalid: REQ needs at least one filter",
            ));
        }
        if filters_json.len() > limits.max_filters {
            return self.send(message::closed(
                &subid,
                &format!(
                    "invalid: {} filters, the most allowed is {}",
                    filters_json.len(),
                    limits.max_filters
                ),
            ));
        }
        if !self.subs.contains_key(&subid) && self.subs.len() >= limits.max_subscriptions {
            return self.send(message::closed(
                &subid,
                &format!(
                    "blocked: too many open subscriptions (the most is {}); CLOSE one first",
                    limits.max_subscriptions
                ),
            ));
        }
        if !self.reqs.take() {
            return self.send(message::closed(
                &subid,
                "rate-limited: slow down, too many REQs",
            ));
        }
        let fl = FilterLimits {
            max_values: limits.max_filter_values,
        };
        let filters = match filters_json
            .iter()
            .map(|f| Filter::from_value(f, fl))
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(f) => Arc::new(f),
            Err(e) => {
                if self.subs.remove(&subid).is_some() {
                    relay.metrics.subscriptions_open.fetch_sub(1, Relaxed);
                }
                return self.send(message::closed(&subid, &format!("invalid: {e}")));
            }
        };
        relay.metrics.reqs.fetch_add(1, Relaxed);
        self.generation += 1;
        let generation = self.generation;
        if self.live.is_none() {
            self.live = Some(relay.live.subscribe());
        }
        let task = tokio::spawn(stream_query(
            relay.clone(),
            self.out.clone(),
            self.turn.clone(),
            subid.clone(),
            filters.clone(),
            generation,
            queries.clone(),
        ));
        // the replaced subscription (if any) is dropped here, cancelling its query
        let replaced = self.subs.insert(
            subid,
            Sub {
                filters,
                generation,
                pending: Some(Vec::new()),
                query: Some(task.abort_handle()),
            },
        );
        if replaced.is_none() {
            relay.metrics.subscriptions_open.fetch_add(1, Relaxed);
        }
        true
    }

    fn on_close(&mut self, arr: &[Value]) -> bool {
        match arr.get(1).and_then(Value::as_str) {
            Some(subid) => {
                if self.subs.remove(subid).is_some() {
                    self.relay.metrics.subscriptions_open.fetch_sub(1, Relaxed);
                }
                true
            }
            None => self.notice("invalid: CLOSE needs a subscription id string"),
        }
    }

    fn on_query_done(&mut self, done: QueryDone) -> bool {
        let Some(sub) = self.subs.get_mut(&done.subid) else {
            return true; // closed meanwhile
        };
        if sub.generation != done.generation {
            return true; // replaced by a newer REQ with the same id
        }
        sub.query = None;
        let sent = match done.result {
            Ok(sent) => sent,
            Err(e) => {
                warn!(peer = %self.peer, error = %e, "query failed");
                self.relay.metrics.store_error(&e.to_string());
                self.subs.remove(&done.subid);
                self.relay.metrics.subscriptions_open.fetch_sub(1, Relaxed);
                return self.send(message::closed(&done.subid, "error: the query failed"));
            }
        };
        let pending = sub.pending.take().unwrap_or_default();
        if !self.send(message::eose(&done.subid)) {
            return false;
        }
        for ev in pending {
            if !sent.contains(&ev.event.id) && !self.send(message::event(&done.subid, &ev.json)) {
                return false;
            }
        }
        true
    }

    fn on_live(&mut self, ev: &Arc<LiveEvent>) -> bool {
        for (subid, sub) in &mut self.subs {
            if !sub.filters.iter().any(|f| f.matches(&ev.event)) {
                continue;
            }
            match &mut sub.pending {
                Some(held) => held.push(ev.clone()),
                None => {
                    if let Err(why) = self.out.try_send(text(message::event(subid, &ev.json))) {
                        self.refused(why);
                        return false;
                    }
                }
            }
        }
        true
    }
}

/// A REQ's stored events, streamed: waits for the connection's turn (one query at a time),
/// reads the matching keys from the reader pool, then the bodies a page at a time, each
/// page only once the client has drained its queue below half (so memory is bounded by the
/// budgets, never by the answer's size). Reports the ids sent, or a refusal, to the
/// connection. Cancelled by aborting its task.
async fn stream_query(
    relay: Arc<Relay>,
    out: Outbox,
    turn: Arc<tokio::sync::Mutex<()>>,
    subid: String,
    filters: Arc<Vec<Filter>>,
    generation: u64,
    done: mpsc::Sender<Done>,
) {
    let _turn = turn.lock_owned().await;
    let cap = relay.limits.max_limit;
    let keys = relay
        .readers
        .run(move |s| s.query_keys(&filters, cap, now()))
        .await;
    let result = match keys {
        Ok(keys) => {
            let mut sent = HashSet::with_capacity(keys.len());
            for page in keys.chunks(PAGE) {
                let rids: Vec<i64> = page.iter().map(|k| k.rid).collect();
                let raws = match relay.readers.run(move |s| s.raw_by_rids(&rids)).await {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = done
                            .send(Done::Query(QueryDone {
                                subid,
                                generation,
                                result: Err(e),
                            }))
                            .await;
                        return;
                    }
                };
                for (key, raw) in page.iter().zip(raws) {
                    // gone since its key was read (deleted, replaced, expired): skipped
                    let Some(raw) = raw else { continue };
                    if let Err(why) = out.send_bulk(text(message::event(&subid, &raw))).await {
                        let _ = done.send(Done::Refused(why)).await;
                        return;
                    }
                    sent.insert(key.id);
                }
            }
            Ok(sent)
        }
        Err(e) => Err(e),
    };
    let _ = done
        .send(Done::Query(QueryDone {
            subid,
            generation,
            result,
        }))
        .await;
}
