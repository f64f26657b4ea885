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
//! oversized frames close with 1009, invalid UTF-8 with 1007. A session a federation peer
//! opens over a peer link ([`Relay::serve_frames`] with a [`PeerSession`]) is also held to
//! the shard filters agreed with that peer and its rate, and counted in its [`Tally`].

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

mod auth;
mod connection;
mod negentropy;
mod outbox;
mod peer;
mod private;
mod shed;
pub use self::auth::AUTH_KIND;
use self::connection::{Connection, Done};
use self::negentropy::{NegOpened, NegSession};
use self::outbox::{Outbox, OutputBudget, Refused};
pub use self::peer::{PeerRefusal, PeerSession, ShardCounts, Tally, TallyCounts};
pub use self::shed::{Allowance, CALM, Granted, Shedding, next_rung};
use crate::limits::{Limits, TokenBucket};
use crate::message;
use crate::metrics::{Metrics, Rejection};
use crate::store::EventStore;
use crate::store::readers::Readers;
use crate::store::writer::{QueueError, Writer};
use crate::store::{Durability, InsertOutcome};
use fleetmesh_proto::event::Event;
use fleetmesh_proto::filter::{Filter, FilterLimits};
use fleetmesh_proto::unix_now;

/// How the relay is set up.
#[derive(Debug, Clone, Default)]
pub struct RelayConfig {
    /// Limits and rate limits.
    pub limits: Limits,
    /// How hard commits are pushed to disk.
    pub durability: Durability,
}

/// An event that was accepted, on its way to live subscribers (defined with the relay
/// port, through which the node's services read it).
pub use fleetmesh_port::LiveEvent;

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
    /// Keys revoked by their owners (kind 11802): their later events are refused.
    revoked: Arc<crate::revoked::Revoked>,
    /// Load shedding: the rung, the granted keys, the strain ledger.
    shed: shed::Shed,
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

/// Most events per store transaction. A commit writes each B-tree page it changed once, so
/// when the writer falls behind, larger groups cost less per event (and it catches up).
const WRITE_BATCH: usize = 4096;
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
        let (writer, handle) = Writer::start(db, config.durability, 65_536, WRITE_BATCH)?;
        let readers = Arc::new(Readers::new(db, READERS)?);
        // the revocations stored: read once here, then learnt as they arrive
        let revoked = Arc::new(crate::revoked::Revoked::from_store(
            &crate::store::Store::open_read_only(db)?,
        )?);
        let (live, _) = broadcast::channel(LIVE_CAPACITY);
        let (shutdown, _) = watch::channel(false);
        let shed = shed::Shed::new(config.limits.shedding);
        if shed.rung() > 0 {
            // pinned: stale writes of others are refused from the start
            writer.set_shed_after(Some(std::time::Duration::from_millis(shed::RUNG2_MS)));
        }
        let relay = Arc::new(Relay {
            limits: config.limits,
            writer,
            readers,
            live,
            schemas: SchemaSet::embedded(),
            metrics: Arc::new(Metrics::default()),
            shutdown,
            output: Arc::new(OutputBudget::default()),
            revoked,
            shed,
        });
        Ok((relay, handle))
    }

    /// Passes an ephemeral event (kinds 20000–29999) the node itself made on to the live
    /// subscriptions, as one from a client would be: checked as [`Relay::publish`] checks,
    /// never stored.
    ///
    /// # Errors
    /// The refusal, as a NIP-01 message; `invalid:` for a kind that is not ephemeral.
    pub fn broadcast(&self, event: Event) -> std::result::Result<(), String> {
        if !event.is_ephemeral() {
            return Err("invalid: not an ephemeral event".into());
        }
        self.limits
            .admit(&event, self.schemas, unix_now())
            .map_err(|m| m.to_string())?;
        self.revoked.check(&event)?;
        self.metrics.events_ephemeral.fetch_add(1, Relaxed);
        let json: Arc<str> = event.to_json().into();
        let _ = self.live.send(Arc::new(LiveEvent {
            event: Arc::new(event),
            json,
        }));
        Ok(())
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
            .admit(&event, self.schemas, unix_now())
            .map_err(|m| m.to_string())?;
        self.revoked.check(&event)?;
        let json: Arc<str> = event.to_json().into();
        let event = Arc::new(event);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (live, metrics) = (self.live.clone(), self.metrics.clone());
        let (ev, js) = (event.clone(), json.clone());
        let revoked = self.revoked.clone();
        self.writer
            .insert(
                event,
                json,
                Box::new(move |outcome| {
                    if let Ok(InsertOutcome::Stored) = outcome {
                        revoked.learn(&ev);
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

    /// The keys revoked by their owners that this relay knows (kind 11802).
    pub fn revoked(&self) -> &Arc<crate::revoked::Revoked> {
        &self.revoked
    }

    /// Every event the relay accepts from now on, as its live fan-out sees it (a receiver
    /// that falls behind loses the oldest). The node's mailbox reads its gift wraps here.
    pub fn live(&self) -> broadcast::Receiver<Arc<LiveEvent>> {
        self.live.subscribe()
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

    /// Runs `f` with one of the store's reader connections, on a blocking thread.
    pub(crate) async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&crate::store::Store) -> Result<T> + Send + 'static,
    {
        self.readers.run(f).await
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
                 fleetmesh_relay_output_queued_bytes {}\n\
                 # HELP fleetmesh_relay_shedding_rung The load shedding rung: 0 normal, 1 writes \
                 and new subscriptions from granted peers only, 2 granted peers only.\n\
                 # TYPE fleetmesh_relay_shedding_rung gauge\nfleetmesh_relay_shedding_rung {}\n",
                self.queued_output_bytes(),
                self.shed.rung()
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
        self.spawn_purge(every, || crate::store::writer::Purge::Expired(unix_now()));
    }

    /// Keeps at most `keep` events not by `spare` (the node's own key), deleting the
    /// oldest every `every`: a leaf node's bounded cache.
    pub fn spawn_eviction(
        self: &Arc<Self>,
        keep: usize,
        spare: [u8; 32],
        every: std::time::Duration,
    ) {
        self.spawn_purge(every, move || crate::store::writer::Purge::Oldest {
            keep,
            spare,
        });
    }

    fn spawn_purge(
        self: &Arc<Self>,
        every: std::time::Duration,
        what: impl Fn() -> crate::store::writer::Purge + Send + 'static,
    ) {
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
                let what = what();
                let _ = relay.writer.purge(
                    what,
                    Box::new(move |r| match r {
                        Err(e) => warn!(error = %e, ?what, "purging events failed"),
                        Ok(n) if n > 0 => debug!(purged = n, ?what, "events purged"),
                        Ok(_) => {}
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
                     headers: axum::http::HeaderMap,
                     ws: WebSocketUpgrade| async move {
                        let host = headers
                            .get(axum::http::header::HOST)
                            .and_then(|h| h.to_str().ok())
                            .map(str::to_owned);
                        relay.upgrade(ws, peer, host)
                    },
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

    /// Upgrades an HTTP request to a relay connection; `host`, the request's `Host`, is
    /// what a NIP-42 `relay` tag must name.
    pub fn upgrade(
        self: Arc<Self>,
        ws: WebSocketUpgrade,
        peer: SocketAddr,
        host: Option<String>,
    ) -> Response {
        // Frames far past the advertised limit are a protocol error and end the
        // connection; those up to 4x get a NOTICE and the connection stays.
        let hard = self
            .limits
            .max_message_length
            .saturating_mul(4)
            .max(1 << 20);
        ws.max_message_size(hard)
            .max_frame_size(hard)
            .on_upgrade(move |socket| self.serve(socket, peer, host))
    }

    /// Serves one WebSocket connection until it closes.
    pub async fn serve(self: Arc<Self>, socket: WebSocket, peer: SocketAddr, host: Option<String>) {
        let (sink, stream) = socket.split();
        self.serve_connection(stream, sink, peer, None, host).await;
    }

    /// Serves one connection of WebSocket-shaped messages carried by any transport (an iroh
    /// QUIC stream framed by `fleetmesh-transport`, say) until it closes: the same limits,
    /// budgets, pings and idle timeout as a WebSocket connection. `peer` is the address
    /// that the per-connection logs name; `session`, for a peer the transport
    /// authenticated, what its session is held to and where its traffic is counted.
    pub async fn serve_frames<St, Si>(
        self: Arc<Self>,
        stream: St,
        sink: Si,
        peer: SocketAddr,
        session: Option<PeerSession>,
    ) where
        St: futures_util::Stream<Item = std::result::Result<Message, axum::Error>>
            + Unpin
            + Send
            + 'static,
        Si: futures_util::Sink<Message> + Unpin + Send + 'static,
    {
        self.serve_connection(stream, sink, peer, session, None)
            .await;
    }

    async fn serve_connection<St, Si>(
        self: Arc<Self>,
        mut stream: St,
        mut sink: Si,
        peer: SocketAddr,
        session: Option<PeerSession>,
        host: Option<String>,
    ) where
        St: futures_util::Stream<Item = std::result::Result<Message, axum::Error>>
            + Unpin
            + Send
            + 'static,
        Si: futures_util::Sink<Message> + Unpin + Send + 'static,
    {
        self.metrics.connections_total.fetch_add(1, Relaxed);
        self.metrics.connections_open.fetch_add(1, Relaxed);
        debug!(%peer, "relay connection opened");
        let (out, mut drain) = outbox::outbox(
            self.limits.max_queued_bytes,
            self.output.clone(),
            self.limits.max_queued_bytes_total,
        );
        let tally = session.as_ref().map(|s| s.tally.clone());
        let send_task = tokio::spawn(async move {
            // Write whatever is queued, then flush once: a REQ's results or a batch of OKs
            // go out in a few syscalls instead of one per message.
            'outer: while let Some(first) = drain.rx.recv().await {
                let mut next = Some(first);
                let (mut written, mut bytes) = (0, 0);
                while let Some(q) = next.take() {
                    let closing = matches!(q.msg, Message::Close(_));
                    bytes += q.bytes;
                    if let (Some(t), Message::Text(text)) = (&tally, &q.msg) {
                        t.sent_message(text.as_str());
                    }
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
            events: match session.as_ref().and_then(|s| s.rate) {
                Some((rate, burst)) => TokenBucket::new(rate, burst),
                None => TokenBucket::new(self.limits.events_per_second, self.limits.event_burst),
            },
            session,
            host,
            authed: None,
            challenge: None,
            granted: None,
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
                            if let Some(p) = &conn.session {
                                p.tally.received_message(text.as_str());
                            }
                            if !conn.handle_text(text.as_str(), &query_tx) {
                                break ("too slow", None);
                            }
                            // frames already buffered are read without touching the socket,
                            // so without this a flooding connection would keep its worker
                            // (and every task queued behind it) for as long as it sends
                            tokio::task::coop::consume_budget().await;
                        }
                        Some(Ok(Message::Binary(_))) => {
                            spoke = heard;
                            if !conn.malformed("invalid: binary messages are not supported; send text") {
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
                    // a ping goes out after one interval of silence; its answer has at
                    // least one more (a loaded client or link is not taken for a dead one)
                    if now.duration_since(heard) >= ping_every * 3 {
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
