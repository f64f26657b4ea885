//! The accountability ledger in the daemon ([`fleetmesh_ledger`] does the arithmetic):
//! grants to linked peers, the receipts of every window, the window judged on the S0–S4
//! ladder, and the remedies carried out. Everything it acts on goes to the evidence log
//! `DIR/ledger/evidence.jsonl` first; `meshnode ledger replay` of that file takes the
//! same decisions.
//!
//! - **Grants**: with `[ledger] grant_events`, every peer whose QUIC link is up gets a
//!   grant (kind 30801, `d` = the blinded pair id), published on the node's relay and
//!   sent to the peer over the link; `meshnode grant issue|list|revoke` for one peer.
//! - **Windows**: at the end of each `[ledger] window_secs` window of Unix time, a
//!   budget/1.0 receipt (what was sent and received over the pair's links in the window,
//!   as the peer's tally counted it message by message) is signed, logged and sent to each
//!   linked peer as a signed DIDComm message over the link; a quarter window later (at
//!   least a second) the node's own measurement of each granted peer is logged, which has
//!   the window judged.
//! - **Delivery**: grants and receipts to a peer go out in order through its outbox; one
//!   the peer did not take (no link, refused — it may not have linked back to us yet —,
//!   no answer) stays there, ahead of the later ones, and is sent again at the next
//!   window. A receipt lost on the way would otherwise be a gap in our chain at the peer,
//!   which it judges S4. The peer takes a receipt it already has as a retry. An outbox
//!   holds [`OUTBOX`] messages at most (the oldest go first), in memory only.
//! - **Remedies**: S1 halves the capacity and sends the peer a complaint/1.0 notice; S2
//!   (probation), S3 (suspended 24 h: no rounds, its sessions admit nothing) and S4
//!   (peering revoked, our grant deleted by NIP-09, the link closed, never dialled again)
//!   publish a kind 30802 report naming the evidence lines.
//! - **Segments**: past `[ledger] evidence_max_bytes` the log starts a new segment that
//!   begins with a checkpoint of the state ([`fleetmesh_ledger::Books::rotate`]); `evidence_segments` old
//!   ones are kept.
//! - **Faults** (`[ledger] fault`, for federation tests): receipts that understate what
//!   was sent, or a chain whose links are wrong from the third receipt on.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use fleetmesh_ledger::{Decision, Line};
use fleetmesh_proto::ledger::{
    BudgetReceipt, ChainHead, Complaints, Grant, Moved, Period, Report, Traffic, ZERO, pair_id,
};
use fleetmesh_proto::noun::Noun as _;
use fleetmesh_proto::{Event, NodeKeys, Remedy, Rung, UnsignedEvent};
use fleetmesh_relay::face::Relay;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::config::{Fault, LedgerSection};
use crate::peers::Peers;
use fleetmesh_transport::link::Links;

/// A budget/1.0 receipt, as a DIDComm message type.
pub const RECEIPT: &str = fleetmesh_didcomm::LEDGER_TYPES[0];
/// A grant (kind 30801 event) sent to its peer.
pub const GRANT: &str = fleetmesh_didcomm::LEDGER_TYPES[1];
/// A complaint/1.0 notice.
pub const COMPLAINT: &str = fleetmesh_didcomm::LEDGER_TYPES[2];
/// Ledger messages waiting to be recorded; past it a peer's message is refused (429).
pub const INBOX: usize = 1024;

/// Messages an outbox holds for a peer that takes none (past it the oldest are dropped).
pub const OUTBOX: usize = 64;

/// A ledger message from a peer: its key (hex, the DIDComm signer), the type, the body.
pub type Inbound = (String, String, Value);

/// A peer's outbox: (number, DIDComm type, body), oldest first.
type Outbox = std::collections::VecDeque<(u64, &'static str, Value)>;

/// A grant's shard filters, parsed (one that does not parse matches nothing); empty for
/// no grant or one that names no shards.
fn shard_filters(g: Option<&Grant>) -> Vec<fleetmesh_proto::filter::Filter> {
    let nothing = || fleetmesh_proto::filter::Filter {
        ids: Some(Vec::new()),
        ..Default::default()
    };
    g.and_then(|g| g.shards.as_ref())
        .map(|shards| {
            shards
                .iter()
                .map(|v| {
                    fleetmesh_proto::filter::Filter::from_value(v, Default::default())
                        .unwrap_or_else(|_| nothing())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The shard filters `peer`'s tally counts by: those of our grant to it (inbound) and of
/// its grant to us (outbound).
fn shards_between(
    l: &fleetmesh_ledger::Ledger,
    peer: &str,
) -> (
    Vec<fleetmesh_proto::filter::Filter>,
    Vec<fleetmesh_proto::filter::Filter>,
) {
    (
        shard_filters(l.grant_out(peer).map(|(g, _)| g)),
        shard_filters(l.grant_in(peer)),
    )
}

/// Counts per shard padded (or cut) to a grant's `n` shards; `None` when it names none.
fn per_shard(mut counts: Vec<Moved>, n: usize) -> Option<Vec<Moved>> {
    (n > 0).then(|| {
        counts.resize(n, Moved::default());
        counts
    })
}

/// The ledger of a running node.
pub struct Accounts {
    books: crate::settlement::Books,
    keys: NodeKeys,
    descriptor: Event,
    relay: Arc<Relay>,
    table: Arc<Peers>,
    links: Links,
    config: LedgerSection,
    /// Grants and receipts not taken yet, per peer, and the next message's number.
    outbox: Mutex<(HashMap<String, Outbox>, u64)>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Accounts {
    /// The ledger of the node in `dir` over its `books` (opened with
    /// [`crate::settlement::open_books`], its evidence log replayed); bars the peers they
    /// say are suspended or revoked.
    ///
    /// # Errors
    /// The keys'.
    pub fn open(
        dir: &Path,
        books: crate::settlement::Books,
        descriptor: Event,
        relay: Arc<Relay>,
        table: Arc<Peers>,
        links: Links,
        config: LedgerSection,
    ) -> anyhow::Result<Arc<Accounts>> {
        let keys = NodeKeys::load(&dir.join(crate::node::KEYS_DIR))?;
        let now = fleetmesh_proto::unix_now();
        let mut standings = lock(&books).ledger().standings();
        standings.retain(|_, s| s.beyond_payments());
        for (peer, s) in &standings {
            if s.revoked {
                table.bar(peer, u64::MAX);
            } else if let Some(until) = s.suspended_until.filter(|u| *u > now) {
                table.bar(peer, until);
            }
        }
        table.set_window(config.window_secs);
        for peer in standings.into_keys() {
            let (inbound, outbound) = shards_between(lock(&books).ledger(), &peer);
            table.tally(&peer).set_shards(inbound, outbound);
        }
        if config.fault != Fault::None {
            tracing::error!(fault = ?config.fault, "[ledger] fault is set: this node misbehaves on purpose towards its peers");
        }
        Ok(Arc::new(Accounts {
            books,
            keys,
            descriptor,
            relay,
            table,
            links,
            config,
            outbox: Mutex::default(),
        }))
    }

    /// Records `line` and carries out what it decided.
    async fn record(&self, line: Line) {
        let peer = line.peer().map(str::to_owned);
        let decided = match lock(&self.books).record(line) {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "the ledger could not record a line");
                return;
            }
        };
        if let Some(p) = peer {
            self.meter_shards(&p);
        }
        for d in decided {
            self.carry_out(&d).await;
        }
    }

    /// Has `peer`'s tally count by the shards of the grants between us as they stand.
    fn meter_shards(&self, peer: &str) {
        let (inbound, outbound) = shards_between(lock(&self.books).ledger(), peer);
        self.table.tally(peer).set_shards(inbound, outbound);
    }

    /// Whether `peer` (hex) is one the ledger takes messages from: linked now, or known
    /// to the books (granted, or judged before).
    pub fn knows(&self, peer: &str) -> bool {
        // a buyer or provider the node only paid or was paid by is not a peer of the ledger
        lock(&self.links).contains_key(peer)
            || lock(&self.books)
                .ledger()
                .standing(peer)
                .is_some_and(fleetmesh_ledger::Standing::beyond_payments)
    }

    /// What `peer` (hex) may write while the relay sheds at rung 2: the capacity of our
    /// grant in force, per window, within its shards; `None` when we do not grant it (or
    /// it is barred).
    pub fn allowance(&self, peer: &str) -> Option<fleetmesh_relay::face::Allowance> {
        if self.table.barred(peer) {
            return None;
        }
        let books = lock(&self.books);
        let l = books.ledger();
        let (g, _) = l.grant_out(peer)?;
        let capacity = l.standing(peer).map_or(g.events, |s| s.capacity);
        Some(fleetmesh_relay::face::Allowance {
            events: capacity,
            window_secs: g.window_secs.max(1),
            shards: Arc::new(shard_filters(Some(g))),
        })
    }

    /// The NIP-85 assertions (kind 30385) about the peers judged so far, at `now`
    /// ([`fleetmesh_ledger::projection`]).
    pub fn assertions(&self, now: u64) -> Vec<fleetmesh_proto::projection::Assertion> {
        let books = lock(&self.books);
        let decisions = match books.decisions(None) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "the ledger's decisions could not be read");
                return Vec::new();
            }
        };
        books
            .ledger()
            .standings()
            .iter()
            .filter_map(|(p, s)| fleetmesh_ledger::projection::assertion(p, s, &decisions, now))
            .collect()
    }

    /// Issues (or re-issues) our grant to `peer` with these terms; logs, publishes and
    /// sends it. Returns the event.
    ///
    /// # Errors
    /// Signing, or a peer key that is not one.
    pub async fn issue(
        &self,
        peer: &str,
        (events, bytes, min, increase): (u64, u64, u64, u64),
        window_secs: u64,
        shards: Option<Vec<Value>>,
    ) -> anyhow::Result<Event> {
        let g = Grant {
            events,
            bytes,
            window_secs,
            aimd: fleetmesh_proto::ledger::Aimd {
                initial: events,
                min,
                increase,
            },
            shards,
            starts_at: None,
            pair: pair_id(&self.keys.nostr().secret_key(), peer)
                .with_context(|| format!("{peer} is not a Nostr key"))?,
            expires_at: None,
        };
        let event = g.sign(&self.keys, fleetmesh_proto::unix_now())?;
        self.record(Line::Grant {
            at: fleetmesh_proto::unix_now(),
            peer: peer.to_owned(),
            event: event.to_value(),
        })
        .await;
        if let Err(e) = self.relay.publish(event.clone()).await {
            tracing::warn!(%peer, error = %e, "our grant was not stored");
        }
        self.deliver(peer, GRANT, event.to_value()).await;
        tracing::info!(%peer, events, bytes, window_secs, "grant issued");
        Ok(event)
    }

    /// Revokes our grant to `peer`: logged, and deleted (NIP-09) from our relay.
    pub async fn revoke(&self, peer: &str) -> bool {
        let had = lock(&self.books)
            .ledger()
            .grant_out(peer)
            .map(|(_, id)| id.to_owned());
        self.record(Line::Revoke {
            at: fleetmesh_proto::unix_now(),
            peer: peer.to_owned(),
        })
        .await;
        self.delete_grant(peer).await;
        had.is_some()
    }

    /// Our grants: peer, terms, event id, capacity now.
    pub fn grants(&self) -> Value {
        let books = lock(&self.books);
        let l = books.ledger();
        let out: Vec<Value> = l
            .standings()
            .into_iter()
            .filter_map(|(peer, s)| {
                let (g, _) = l.grant_out(&peer)?;
                Some(
                    json!({"peer": peer, "grant": s.grant_out, "events": g.events, "bytes": g.bytes,
                    "window_secs": g.window_secs, "aimd": g.aimd, "shards": g.shards, "capacity": s.capacity}),
                )
            })
            .collect();
        Value::Array(out)
    }

    async fn delete_grant(&self, peer: &str) {
        let Ok(pair) = pair_id(&self.keys.nostr().secret_key(), peer) else {
            return;
        };
        let coordinate = format!(
            "{}:{}:{pair}",
            fleetmesh_schemas::constants::kind::BUDGET,
            self.keys.nostr_pubkey_hex()
        );
        let deletion = UnsignedEvent {
            created_at: fleetmesh_proto::unix_now(),
            kind: 5,
            tags: vec![
                vec!["a".into(), coordinate],
                vec!["k".into(), "30801".into()],
            ],
            content: "grant revoked".into(),
        };
        if let Ok(e) = self.keys.sign(deletion)
            && let Err(why) = self.relay.publish(e).await
        {
            tracing::warn!(%peer, error = %why, "the grant's deletion was not stored");
        }
    }

    /// Puts `body` (a grant or a receipt) in `peer`'s outbox, then sends what the outbox
    /// holds, oldest first, until the peer does not take one.
    async fn deliver(&self, peer: &str, type_: &'static str, body: Value) {
        {
            let mut guard = lock(&self.outbox);
            let (boxes, next) = &mut *guard;
            *next += 1;
            let queue = boxes.entry(peer.to_owned()).or_default();
            queue.push_back((*next, type_, body));
            if queue.len() > OUTBOX {
                queue.pop_front();
                tracing::warn!(%peer, max = OUTBOX, "the peer's outbox is full: its oldest message is dropped");
            }
        }
        loop {
            let front = lock(&self.outbox)
                .0
                .get(peer)
                .and_then(|q| q.front().cloned());
            let Some((n, type_, body)) = front else { break };
            if !self.send(peer, type_, body).await {
                break;
            }
            // a concurrent delivery may have sent it too (the peer takes it as a retry)
            if let Some(q) = lock(&self.outbox).0.get_mut(peer)
                && q.front().is_some_and(|(m, ..)| *m == n)
            {
                q.pop_front();
            }
        }
    }

    /// Sends `body` as a signed DIDComm message of `type_` over the link to `peer`;
    /// whether the peer took it.
    async fn send(&self, peer: &str, type_: &str, body: Value) -> bool {
        let link = lock(&self.links).get(peer).cloned();
        let Some(link) = link else {
            tracing::debug!(%peer, type_, "no link: not sent");
            return false;
        };
        let sent = async {
            let doc = fleetmesh_proto::didcomm::PeerDoc::parse(&fleetmesh_proto::did::document(
                &link.content,
            ))?;
            let packed =
                fleetmesh_didcomm::request(&self.keys, &self.descriptor, &doc, type_, body)?;
            fleetmesh_didcomm::exchange_over(&link, &packed, &self.keys, &vec![doc]).await?;
            anyhow::Ok(())
        };
        match sent.await {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(%peer, type_, error = %format!("{e:#}"), "a ledger message was not taken");
                false
            }
        }
    }

    /// Takes a ledger message from a peer.
    async fn inbound(&self, (from, type_, body): Inbound) {
        let at = fleetmesh_proto::unix_now();
        match type_.as_str() {
            RECEIPT => {
                self.record(Line::Receipt {
                    at,
                    peer: from,
                    receipt: body,
                })
                .await
            }
            GRANT => {
                self.record(Line::Grant {
                    at,
                    peer: from,
                    event: body,
                })
                .await
            }
            COMPLAINT => {
                metrics::counter!("fleetmesh_ledger_complaints_total", "direction" => "received")
                    .increment(1);
                tracing::warn!(peer = %from, complaint = %body, "a peer complains about us");
            }
            _ => {}
        }
    }

    /// Ends window `w`: a receipt to every linked peer; grants to new ones.
    async fn close_window(&self, w: u64) {
        let secs = self.config.window_secs;
        let peers: Vec<String> = lock(&self.links).keys().cloned().collect();
        for peer in peers {
            if self.table.barred(&peer) {
                continue;
            }
            if let Some(terms) = self.config.terms()
                && lock(&self.books).ledger().grant_out(&peer).is_none()
                && lock(&self.books)
                    .ledger()
                    .standing(&peer)
                    .is_none_or(|s| !s.revoked)
                && let Err(e) = self.issue(&peer, terms, secs, self.config.shards()).await
            {
                tracing::warn!(%peer, error = %format!("{e:#}"), "no grant issued");
            }
            let tally = self.table.tally(&peer);
            let c = tally.window(w);
            let (seq, prev, grant, shards) = {
                let books = lock(&self.books);
                let l = books.ledger();
                let s = l.standing(&peer).cloned().unwrap_or_default();
                let (seq, prev) = s
                    .chain_out
                    .map_or((0, ZERO.to_owned()), |(n, h)| (n + 1, h));
                let n = l
                    .grant_in(&peer)
                    .and_then(|g| g.shards.as_ref())
                    .map_or(0, Vec::len);
                (
                    seq,
                    prev,
                    s.grant_in.unwrap_or_else(|| ZERO.to_owned()),
                    per_shard(tally.window_shards(w).outbound, n),
                )
            };
            let (prev, shrink) = match self.config.fault {
                Fault::None => (prev, 1),
                Fault::Understate => (prev, 4),
                Fault::CorruptChain if seq >= 2 => (fleetmesh_ledger::evidence::line_id(&prev), 1),
                Fault::CorruptChain => (prev, 1),
            };
            let r = BudgetReceipt::new(
                self.keys.nostr_pubkey_hex(),
                grant,
                w,
                secs,
                seq,
                prev,
                Moved {
                    events: c.events_out / shrink,
                    bytes: c.bytes_out / shrink,
                },
                Moved {
                    events: c.events_in,
                    bytes: c.bytes_in,
                },
                fleetmesh_proto::unix_now(),
            )
            .with_shards(shards);
            let Ok(r) = r.sign(&self.keys) else { continue };
            let body = serde_json::to_value(&r).expect("a receipt serializes");
            self.record(Line::Sent {
                at: fleetmesh_proto::unix_now(),
                peer: peer.clone(),
                receipt: body.clone(),
            })
            .await;
            self.deliver(&peer, RECEIPT, body).await;
        }
    }

    /// Starts a new segment of the evidence log once it is past `[ledger]
    /// evidence_max_bytes` (between windows: the measurements of the last one are in).
    fn rotate(&self) {
        let c = &self.config;
        let rotated = lock(&self.books).rotate(
            fleetmesh_proto::unix_now(),
            c.evidence_max_bytes,
            c.evidence_segments,
        );
        if let Err(e) = rotated {
            tracing::error!(error = %e, "the evidence log could not be rotated");
        }
    }

    /// Judges window `w` of every peer we grant to.
    async fn measure(&self, w: u64) {
        let granted: Vec<String> = {
            let books = lock(&self.books);
            let l = books.ledger();
            l.standings()
                .into_keys()
                .filter(|p| l.grant_out(p).is_some())
                .collect()
        };
        for peer in granted {
            let n = lock(&self.books)
                .ledger()
                .grant_out(&peer)
                .and_then(|(g, _)| g.shards.as_ref())
                .map_or(0, Vec::len);
            let tally = self.table.tally(&peer);
            let mut counts: fleetmesh_ledger::Counts = tally.window(w).into();
            counts.shards = per_shard(tally.window_shards(w).inbound, n).unwrap_or_default();
            self.record(Line::Measure {
                at: fleetmesh_proto::unix_now(),
                peer,
                window: w,
                window_secs: self.config.window_secs,
                counts,
            })
            .await;
        }
    }

    async fn carry_out(&self, d: &Decision) {
        metrics::counter!("fleetmesh_ledger_decisions_total", "severity" => d.severity.as_str(), "remedy" => d.remedy.as_str()).increment(1);
        if d.severity == Rung::S0 {
            tracing::debug!(peer = %d.peer, window = d.window, capacity = d.capacity, "clean window");
            return;
        }
        tracing::warn!(peer = %d.peer, window = d.window, severity = %d.severity, remedy = %d.remedy, why = %d.why, "ledger decision");
        match d.remedy {
            Remedy::Increase | Remedy::Probation => {}
            Remedy::Halve => {
                let complaint = json!({
                    "protocol": "complaint/1.0",
                    "type": "complaint",
                    "id": fleetmesh_ledger::evidence::line_id(&format!("{}{}", d.peer, d.window)),
                    "subject": d.peer,
                    "reason": "over-limit",
                    "evidence": d.evidence.iter().take(32).map(|id| json!({"type": "note", "digest": id})).collect::<Vec<_>>(),
                });
                metrics::counter!("fleetmesh_ledger_complaints_total", "direction" => "sent")
                    .increment(1);
                // a notice, not evidence: not kept for a later try
                self.send(&d.peer, COMPLAINT, complaint).await;
            }
            Remedy::Suspend => self.table.bar(
                &d.peer,
                d.at.saturating_add(fleetmesh_ledger::ladder::SUSPENSION_SECS),
            ),
            Remedy::Revoke => {
                self.table.bar(&d.peer, u64::MAX);
                lock(&self.outbox).0.remove(&d.peer);
                self.delete_grant(&d.peer).await;
                if let Some(link) = lock(&self.links).remove(&d.peer) {
                    link.close();
                }
            }
        }
        if d.severity >= Rung::S2 {
            self.report(d).await;
        }
    }

    /// Publishes a kind 30802 report of decision `d`.
    async fn report(&self, d: &Decision) {
        let s = lock(&self.books)
            .ledger()
            .standing(&d.peer)
            .cloned()
            .unwrap_or_default();
        let secs = self.config.window_secs;
        let c = self.table.tally(&d.peer).window(d.window);
        let (seq, head) = s.chain_in.clone().unwrap_or((0, ZERO.to_owned()));
        let report = Report {
            subject: d.peer.clone(),
            period: Period {
                start: d.window.saturating_mul(secs),
                end: d.window.saturating_add(1).saturating_mul(secs),
            },
            served: Traffic {
                bytes: c.bytes_out,
                jobs: 0,
                events: Some(c.events_out),
            },
            consumed: Some(Traffic {
                bytes: c.bytes_in,
                jobs: 0,
                events: Some(c.events_in),
            }),
            receipt_chain: ChainHead {
                budget: s.grant_out.clone().unwrap_or_else(|| ZERO.to_owned()),
                head,
                seq,
                unacked: None,
            },
            complaints: Complaints {
                filed: 0,
                open: 0,
                resolved: None,
            },
            rung: d.severity,
            rung_since: Some(d.at),
            outstanding: None,
            remedy: Some(d.remedy),
            window: Some(d.window),
            evidence: Some(d.evidence.iter().take(32).cloned().collect()),
            note: Some(d.why.chars().take(280).collect()),
            expires_at: None,
        };
        match report.sign(&self.keys, fleetmesh_proto::unix_now()) {
            Ok(e) => {
                if let Err(why) = self.relay.publish(e).await {
                    tracing::warn!(peer = %d.peer, error = %why, "the report was not stored");
                }
            }
            Err(e) => tracing::warn!(error = %e, "the report could not be signed"),
        }
    }

    /// Runs the windows and takes the peers' messages until aborted.
    pub fn spawn(
        self: &Arc<Self>,
        mut inbox: mpsc::Receiver<Inbound>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let me = self.clone();
        let messages = tokio::spawn(async move {
            while let Some(m) = inbox.recv().await {
                me.inbound(m).await;
            }
        });
        let me = self.clone();
        let windows = tokio::spawn(async move {
            let secs = me.config.window_secs;
            let grace = Duration::from_millis((secs * 250).max(1000));
            loop {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                let w = now.as_secs() / secs;
                let end = Duration::from_secs((w + 1) * secs);
                tokio::time::sleep(end.saturating_sub(now)).await;
                me.close_window(w).await;
                tokio::time::sleep(grace).await;
                me.measure(w).await;
                me.rotate();
            }
        });
        vec![messages, windows]
    }
}
