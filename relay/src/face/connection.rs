//! One relay connection: its subscriptions, its messages (EVENT, REQ, CLOSE; the NEG-*
//! ones in [`super::negentropy`]), and a REQ's answer streamed from the store as the
//! client drains its outbox.

use super::*;
/// A subscription of one connection.
pub(super) struct Sub {
    pub(super) filters: Arc<Vec<Filter>>,
    pub(super) generation: u64,
    /// Live events held back until the stored ones and EOSE are sent.
    pub(super) pending: Option<Vec<Arc<LiveEvent>>>,
    /// Its query, while the stored events are still streaming out.
    pub(super) query: Option<AbortHandle>,
}

impl Drop for Sub {
    fn drop(&mut self) {
        if let Some(q) = self.query.take() {
            q.abort();
        }
    }
}

/// Background work finished for a connection.
pub(super) enum Done {
    Query(QueryDone),
    NegOpened(NegOpened),
    /// A query's output was refused by the outbox: the connection must close.
    Refused(Refused),
}

pub(super) struct QueryDone {
    pub(super) subid: String,
    pub(super) generation: u64,
    /// The ids of the stored events sent, or why the query failed.
    pub(super) result: Result<HashSet<[u8; 32]>>,
}

pub(super) struct Connection {
    pub(super) relay: Arc<Relay>,
    pub(super) out: Outbox,
    pub(super) subs: HashMap<String, Sub>,
    pub(super) generation: u64,
    pub(super) events: TokenBucket,
    pub(super) reqs: TokenBucket,
    pub(super) peer: SocketAddr,
    /// The live fan-out, subscribed only while the connection has subscriptions: a
    /// publish-only connection is never woken for other connections' events. Taken before
    /// a REQ's query starts, so nothing committed after the query's snapshot is missed.
    pub(super) live: Option<broadcast::Receiver<Arc<LiveEvent>>>,
    /// NIP-77 sessions by subscription id.
    pub(super) negs: HashMap<String, NegSession>,
    /// Held by the running query: one at a time per connection.
    pub(super) turn: Arc<tokio::sync::Mutex<()>>,
    /// Background tasks of this connection, cancelled when it ends.
    pub(super) tasks: Vec<AbortHandle>,
    /// A federation peer's session: its shard filters, rate and tally.
    pub(super) session: Option<PeerSession>,
    /// The `Host` the client connected to (what a NIP-42 `relay` tag must name).
    pub(super) host: Option<String>,
    /// The key the client authenticated as (NIP-42), hex.
    pub(super) authed: Option<String>,
    /// The NIP-42 challenge sent on this connection.
    pub(super) challenge: Option<String>,
    /// Whether its key is granted, and when that was asked ([`Connection::allowance`]).
    pub(super) granted: Option<(Instant, Option<Allowance>)>,
}

pub(super) fn text(s: String) -> Message {
    Message::Text(s.into())
}

/// Sends on a connection's queue from any thread; false if the client is too slow or gone.
pub(super) fn push(out: &Outbox, msg: String) -> bool {
    out.try_send(text(msg)).is_ok()
}

impl Connection {
    pub(super) fn send(&self, msg: String) -> bool {
        match self.out.try_send(text(msg)) {
            Ok(()) => true,
            Err(why) => {
                self.refused(why);
                false
            }
        }
    }

    /// Counts and logs why the connection's output was refused (it is then closed).
    pub(super) fn refused(&self, why: Refused) {
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

    pub(super) fn notice(&self, msg: &str) -> bool {
        self.relay.metrics.notices.fetch_add(1, Relaxed);
        self.send(message::notice(msg))
    }

    /// A NOTICE for a message that is not a NIP-01 one, counted against a peer.
    pub(super) fn malformed(&self, msg: &str) -> bool {
        self.count(PeerRefusal::Malformed);
        self.notice(msg)
    }

    /// Counts a refusal against the peer of a peer session.
    pub(super) fn count(&self, why: PeerRefusal) {
        if let Some(p) = &self.session {
            p.tally.refused(why);
        }
    }

    pub(super) fn reject(&self, id: &str, why: Rejection, msg: &str) -> bool {
        self.relay.metrics.reject(why);
        // one line per refusal only at debug: a flood of them is summarised instead
        let key = self.session.as_ref().map(|p| p.name.as_str());
        debug!(peer = %self.peer, key, id, reason = msg, "event rejected");
        self.send(message::ok(id, false, msg))
    }

    /// Handles one text message; false when the connection must close.
    pub(super) fn handle_text(&mut self, text: &str, queries: &mpsc::Sender<Done>) -> bool {
        let limits = &self.relay.limits;
        if text.len() > limits.max_message_length {
            return self.malformed(&format!(
                "invalid: message of {} bytes exceeds the limit of {} bytes",
                text.len(),
                limits.max_message_length
            ));
        }
        // The common case first: a well-formed EVENT, parsed in one pass.
        if text.trim_start().starts_with("[\"EVENT\"")
            && let Some(event) = Event::from_event_message(text)
        {
            self.relay.metrics.events_received.fetch_add(1, Relaxed);
            if !self.events.take() {
                self.count(PeerRefusal::RateLimited);
                return self.reject(
                    &event.id_hex(),
                    Rejection::RateLimited,
                    "rate-limited: slow down, too many events",
                );
            }
            return self.on_parsed_event(event);
        }
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => return self.malformed(&format!("invalid: message is not JSON: {e}")),
        };
        let Some(arr) = value.as_array() else {
            return self.malformed("invalid: a message must be a JSON array");
        };
        match arr.first().and_then(Value::as_str) {
            Some("EVENT") => self.on_event(arr),
            Some("REQ") => self.on_req(arr, queries),
            Some("CLOSE") => self.on_close(arr),
            Some("AUTH") => self.on_auth(arr),
            Some(kind @ ("NEG-OPEN" | "NEG-MSG" | "NEG-CLOSE")) if self.relay.limits.negentropy => {
                self.on_neg(kind, arr, queries)
            }
            Some(other) => {
                let other = other.chars().take(32).collect::<String>();
                self.malformed(&format!("invalid: unknown message type {other:?}"))
            }
            None => self.malformed("invalid: a message must start with its type as a string"),
        }
    }

    pub(super) fn on_event(&mut self, arr: &[Value]) -> bool {
        let relay = self.relay.clone();
        relay.metrics.events_received.fetch_add(1, Relaxed);
        let raw = match arr {
            [_, ev] => ev,
            _ => return self.malformed("invalid: EVENT takes exactly one event"),
        };
        // The id as sent, for the OK even when the event is malformed.
        let claimed_id = raw
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if !self.events.take() {
            self.count(PeerRefusal::RateLimited);
            return self.reject(
                &claimed_id,
                Rejection::RateLimited,
                "rate-limited: slow down, too many events",
            );
        }
        let event = match Event::from_value(raw) {
            Ok(e) => e,
            Err(e) => {
                self.count(PeerRefusal::Malformed);
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
        self.on_parsed_event(event)
    }

    /// An event of the right shape: admitted (signature, limits, schema), then stored, or
    /// fanned out when ephemeral.
    fn on_parsed_event(&mut self, event: Event) -> bool {
        let relay = self.relay.clone();
        let limits = &relay.limits;
        let id = event.id_hex();
        // shed before any work on the event (its signature is the costly part)
        if let Some(why) = self.outside_grant(&event) {
            return self.reject(&id, Rejection::Blocked, why);
        }
        if let Some(why) = self.shed(super::auth::Ask::Event) {
            return !why.is_empty() && self.reject(&id, Rejection::RateLimited, &why);
        }
        if let Err(why) = limits.admit(&event, relay.schemas, fleetmesh_proto::unix_now()) {
            self.count(if why.forged {
                PeerRefusal::Forged
            } else {
                PeerRefusal::Invalid
            });
            return self.reject(&id, Rejection::Invalid, &why.reason);
        }
        if let Some(p) = &self.session
            && let Some((why, msg)) = p.refusal(&event)
        {
            p.tally.refused(why);
            return self.reject(&id, Rejection::Blocked, msg);
        }
        if let Err(msg) = relay.revoked.check(&event) {
            return self.reject(&id, Rejection::Blocked, &msg);
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
        let revoked = relay.revoked.clone();
        let json_for_live = json.clone();
        let done_id = id.clone();
        // a granted peer's events skip the queue others fill
        let priority = self.allowance().is_some();
        let insert = if priority {
            Writer::insert_priority
        } else {
            Writer::insert
        };
        let queued = insert(
            &relay.writer,
            event,
            json,
            Box::new(move |outcome| {
                let (accepted, msg, why) = match outcome {
                    Ok(InsertOutcome::Stored) => {
                        revoked.learn(&ev_for_live);
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
                    Ok(InsertOutcome::Shed) => (
                        false,
                        "rate-limited: the relay is shedding load; try again later".into(),
                        Some(Rejection::RateLimited),
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

    pub(super) fn on_req(&mut self, arr: &[Value], queries: &mpsc::Sender<Done>) -> bool {
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
        if let Some(why) = self.shed(super::auth::Ask::Subscribe) {
            return !why.is_empty() && self.send(message::closed(&subid, &why));
        }
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
            .map_err(|e| format!("invalid: {e}"))
            .and_then(|f| self.private_view(f))
        {
            Ok(f) => Arc::new(f),
            Err(why) => {
                if self.subs.remove(&subid).is_some() {
                    relay.metrics.subscriptions_open.fetch_sub(1, Relaxed);
                }
                return !why.is_empty() && self.send(message::closed(&subid, &why));
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

    pub(super) fn on_close(&mut self, arr: &[Value]) -> bool {
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

    pub(super) fn on_query_done(&mut self, done: QueryDone) -> bool {
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

    pub(super) fn on_live(&mut self, ev: &Arc<LiveEvent>) -> bool {
        if !self.served_live() {
            // rung 2 serves granted peers only: this connection's subscriptions end
            let why = "rate-limited: the relay is shedding load and serves granted peers only";
            let closed: Vec<String> = self.subs.drain().map(|(id, _)| id).collect();
            self.relay
                .metrics
                .subscriptions_open
                .fetch_sub(closed.len() as u64, Relaxed);
            return closed.iter().all(|id| self.send(message::closed(id, why)));
        }
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
pub(super) async fn stream_query(
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
        .run(move |s| s.query_keys(&filters, cap, fleetmesh_proto::unix_now()))
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
