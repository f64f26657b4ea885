//! The ledger's state and the S0–S4 ladder: a fold over evidence-log lines. Every rule
//! here is docs/protocol.md's "Ledger" section, in integers, so any implementation that
//! reads the same lines takes the same decisions.

use std::collections::BTreeMap;

use fleetmesh_proto::event::Event;
use fleetmesh_proto::ledger::{BudgetReceipt, Grant, ZERO};
use fleetmesh_proto::noun::Noun as _;
use fleetmesh_proto::{Remedy, Rung};
use serde::{Deserialize, Serialize};

use crate::evidence::{Counts, Line, line_id};

/// How long an S3 suspension lasts, seconds.
pub const SUSPENSION_SECS: u64 = 86_400;
/// Clean windows in a row that end a probation.
pub const PROBATION_WINDOWS: u64 = 10;
/// Receipts kept per peer while their window waits to be judged.
const PENDING_RECEIPTS: usize = 64;

/// One decision of the ladder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// The peer judged.
    pub peer: String,
    /// The window judged (for a receipt or grant refused on arrival: the window it names,
    /// or 0).
    pub window: u64,
    /// The severity.
    pub severity: Rung,
    /// The remedy carried out.
    pub remedy: Remedy,
    /// The capacity (events per window) in force after it.
    pub capacity: u64,
    /// Ids of the evidence lines it rests on (the triggering line first).
    pub evidence: Vec<String>,
    /// What was found, in words.
    pub why: String,
    /// When (the triggering line's time).
    pub at: u64,
}

/// A peer's standing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standing {
    /// The last severity decided (S0 before any).
    pub severity: Option<Rung>,
    /// The last window judged.
    pub last_window: Option<u64>,
    /// The capacity in force, events per window (0 without a grant of ours).
    pub capacity: u64,
    /// On probation (S2) until that many clean windows in a row.
    pub probation: bool,
    /// Clean windows in a row.
    pub clean_run: u64,
    /// Suspended (S3) until then.
    pub suspended_until: Option<u64>,
    /// Revoked (S4): permanent.
    pub revoked: bool,
    /// Our grant to the peer (event id).
    pub grant_out: Option<String>,
    /// The peer's grant to us (event id).
    pub grant_in: Option<String>,
    /// The peer's receipt chain: last seq and hash.
    pub chain_in: Option<(u64, String)>,
    /// Our receipt chain to the peer: last seq and hash.
    pub chain_out: Option<(u64, String)>,
    /// Payments between us, summed (absent when there were none).
    #[serde(default, skip_serializing_if = "crate::settlement::Settled::is_empty")]
    pub settled: crate::settlement::Settled,
}

impl Standing {
    /// Whether the standing says more than payments: a grant either way, a window judged,
    /// a receipt chain, a remedy. A buyer the node only sold jobs to is not a peer of the
    /// ledger.
    pub fn beyond_payments(&self) -> bool {
        let bare = Standing {
            settled: crate::settlement::Settled::default(),
            ..self.clone()
        };
        bare != Standing::default()
    }
}

/// What the ledger holds per peer.
#[derive(Debug, Clone, Default)]
struct PeerState {
    standing: Standing,
    ours: Option<(Grant, String)>,
    theirs: Option<Grant>,
    /// Receipts by window, with the id of their line.
    receipts: BTreeMap<u64, (BudgetReceipt, String)>,
    /// The last payments recorded, by [`settled_key`]: one recorded again (a retry after
    /// a crash) is counted once.
    settled_jobs: std::collections::VecDeque<String>,
}

/// Payments remembered per peer against a second record of the same one.
const SETTLED_JOBS: usize = 256;

/// What makes a payment the same payment: the side, the state, the job, as the line
/// writes them (`payee:redeemed:<job>`; docs/protocol.md).
fn settled_key(s: &crate::settlement::Settlement) -> Option<String> {
    let job = s.job.as_deref()?;
    let v = serde_json::to_value((s.role, s.state)).ok()?;
    Some(format!("{}:{}:{job}", v[0].as_str()?, v[1].as_str()?))
}

/// The ledger: the fold over the evidence log.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    us: Option<String>,
    peers: BTreeMap<String, PeerState>,
    /// Decisions taken so far (those of earlier segments included).
    decided: u64,
}

/// A grant as a checkpoint keeps it: with the fields its event's tags carry.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct KeptGrant {
    #[serde(flatten)]
    grant: Grant,
    pair: String,
    expires_at: Option<u64>,
}

impl From<&Grant> for KeptGrant {
    fn from(g: &Grant) -> KeptGrant {
        KeptGrant {
            grant: g.clone(),
            pair: g.pair.clone(),
            expires_at: g.expires_at,
        }
    }
}

impl From<KeptGrant> for Grant {
    fn from(k: KeptGrant) -> Grant {
        Grant {
            pair: k.pair,
            expires_at: k.expires_at,
            ..k.grant
        }
    }
}

/// One peer in a [`Snapshot`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PeerSnapshot {
    standing: Standing,
    #[serde(default)]
    ours: Option<(KeptGrant, String)>,
    #[serde(default)]
    theirs: Option<KeptGrant>,
    #[serde(default)]
    receipts: Vec<(u64, BudgetReceipt, String)>,
    #[serde(default, skip_serializing_if = "std::collections::VecDeque::is_empty")]
    settled_jobs: std::collections::VecDeque<String>,
}

/// The ledger's whole state, as a checkpoint line carries it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    us: String,
    decided: u64,
    peers: BTreeMap<String, PeerSnapshot>,
}

/// Events that may fall on different sides of a window boundary in two counts of the same
/// traffic.
const EVENT_SLACK: u64 = 16;
/// The least byte slack, for windows of small events.
const BYTE_SLACK: u64 = 16_384;

/// Whether a peer's count of some traffic (`claimed`: events, bytes) diverges from ours
/// (`measured`): by more than a tenth of the larger and more than what crosses a window
/// boundary — [`EVENT_SLACK`] events, and their bytes at the mean size of the events we
/// measured (at least [`BYTE_SLACK`]: a few large events on the other side of a boundary
/// are not a lie). Only our own count sets the byte slack, so a peer cannot widen it by
/// what it claims.
fn counts_diverge(claimed: (u64, u64), measured: (u64, u64)) -> bool {
    let mean = measured.1.checked_div(measured.0).unwrap_or(0);
    let byte_slack = BYTE_SLACK.max(EVENT_SLACK.saturating_mul(mean));
    diverge(claimed.0, measured.0, EVENT_SLACK) || diverge(claimed.1, measured.1, byte_slack)
}

/// Whether two counts diverge: by more than a tenth of the larger and more than `floor`.
fn diverge(a: u64, b: u64, floor: u64) -> bool {
    let gap = a.abs_diff(b);
    gap > floor && u128::from(gap) * 10 > u128::from(a.max(b))
}

/// Whether a receipt's counts per shard diverge from ours (`measured`, by the shards of
/// our grant `g`, event id `ours`): only for a receipt that spends against that grant and
/// a grant that names shards. What was found, in words.
fn shards_diverge(
    g: &Grant,
    ours: Option<&str>,
    r: &BudgetReceipt,
    measured: &[fleetmesh_proto::ledger::Moved],
) -> Option<String> {
    let n = g.shards.as_ref().map_or(0, Vec::len);
    if n == 0 || ours != Some(r.grant.as_str()) {
        return None;
    }
    let Some(theirs) = r.shards.as_ref().filter(|t| t.len() == n) else {
        return Some(format!(
            "its receipt counts {} shards of our grant, which names {n}",
            r.shards.as_ref().map_or(0, Vec::len)
        ));
    };
    theirs.iter().enumerate().find_map(|(i, t)| {
        let m = measured.get(i).copied().unwrap_or_default();
        counts_diverge((t.events, t.bytes), (m.events, m.bytes)).then(|| {
            format!(
                "its receipt says it sent {} events ({} bytes) in shard {i}; measured {} ({})",
                t.events, t.bytes, m.events, m.bytes
            )
        })
    })
}

impl Ledger {
    /// The node whose log this is.
    pub fn us(&self) -> Option<&str> {
        self.us.as_deref()
    }

    /// How many decisions the fold has taken, those before a checkpoint it began from
    /// included.
    pub fn decided(&self) -> u64 {
        self.decided
    }

    /// The whole state (`None` before the node line).
    pub fn snapshot(&self) -> Option<Snapshot> {
        Some(Snapshot {
            us: self.us.clone()?,
            decided: self.decided,
            peers: self
                .peers
                .iter()
                .map(|(k, p)| {
                    let snap = PeerSnapshot {
                        standing: p.standing.clone(),
                        ours: p.ours.as_ref().map(|(g, id)| (g.into(), id.clone())),
                        theirs: p.theirs.as_ref().map(Into::into),
                        receipts: p
                            .receipts
                            .iter()
                            .map(|(w, (r, id))| (*w, r.clone(), id.clone()))
                            .collect(),
                        settled_jobs: p.settled_jobs.clone(),
                    };
                    (k.clone(), snap)
                })
                .collect(),
        })
    }

    /// Takes a checkpoint's state: the state itself when the fold has taken nothing yet
    /// (a segment replayed alone), else only when it is the fold's own.
    fn checkpoint(&mut self, state: serde_json::Value) -> Result<(), String> {
        let snap: Snapshot = serde_json::from_value(state)
            .map_err(|e| format!("a checkpoint that does not read: {e}"))?;
        if self.us.as_deref() != Some(snap.us.as_str()) {
            return Err(format!("a checkpoint of {}'s ledger", snap.us));
        }
        if self.peers.is_empty() && self.decided == 0 {
            self.decided = snap.decided;
            self.peers = snap
                .peers
                .into_iter()
                .map(|(k, p)| {
                    let state = PeerState {
                        standing: p.standing,
                        ours: p.ours.map(|(g, id)| (g.into(), id)),
                        theirs: p.theirs.map(Into::into),
                        receipts: p
                            .receipts
                            .into_iter()
                            .map(|(w, r, id)| (w, (r, id)))
                            .collect(),
                        settled_jobs: p.settled_jobs,
                    };
                    (k, state)
                })
                .collect();
            return Ok(());
        }
        // compared as written: the JSON is what the line carries
        let ours = serde_json::to_value(self.snapshot()).expect("a snapshot serializes");
        if ours != serde_json::to_value(&snap).expect("a snapshot serializes") {
            return Err("a checkpoint that is not the fold of the lines before it".into());
        }
        Ok(())
    }

    /// Every peer's standing.
    pub fn standings(&self) -> BTreeMap<String, Standing> {
        self.peers
            .iter()
            .map(|(k, v)| (k.clone(), v.standing.clone()))
            .collect()
    }

    /// One peer's standing.
    pub fn standing(&self, peer: &str) -> Option<&Standing> {
        self.peers.get(peer).map(|p| &p.standing)
    }

    /// Our grant to `peer` in force, with its event id.
    pub fn grant_out(&self, peer: &str) -> Option<(&Grant, &str)> {
        let p = self.peers.get(peer)?;
        p.ours.as_ref().map(|(g, id)| (g, id.as_str()))
    }

    /// The peer's grant to us.
    pub fn grant_in(&self, peer: &str) -> Option<&Grant> {
        self.peers.get(peer)?.theirs.as_ref()
    }

    /// Applies one line (its text, as in the log) and returns the decisions it led to.
    ///
    /// # Errors
    /// A line that is not one of the log's, or that comes before the `node` line: the
    /// reason, and nothing changed.
    pub fn apply(&mut self, text: &str) -> Result<Vec<Decision>, String> {
        if text.len() > crate::evidence::MAX_LINE {
            return Err(format!("longer than {} bytes", crate::evidence::MAX_LINE));
        }
        let line: Line = serde_json::from_str(text).map_err(|e| format!("not a log line: {e}"))?;
        let id = line_id(text);
        // a torn tail cut from the log: a fact about the file, taken wherever it falls (even
        // before the node line, when the node line itself was torn)
        if let Line::Repaired { .. } = line {
            return Ok(Vec::new());
        }
        if let Line::Node { pubkey, .. } = &line {
            return match &self.us {
                Some(us) if us != pubkey => {
                    Err(format!("a second node line ({pubkey}) in the log of {us}"))
                }
                _ => {
                    self.us = Some(pubkey.clone());
                    Ok(Vec::new())
                }
            };
        }
        let Some(us) = self.us.clone() else {
            return Err("a line before the node line".into());
        };
        let decided = match line {
            Line::Node { .. } | Line::Repaired { .. } => unreachable!("handled above"),
            Line::Checkpoint { state, .. } => {
                self.checkpoint(state)?;
                Vec::new()
            }
            Line::Grant { at, peer, event } => self.grant(&us, at, &peer, &event, id),
            Line::Receipt { at, peer, receipt } => self.receipt(at, &peer, &receipt, id),
            Line::Sent { peer, receipt, .. } => {
                let r = BudgetReceipt::from_value(&receipt)
                    .map_err(|e| format!("our own receipt does not read: {e}"))?;
                let p = self.peers.entry(peer).or_default();
                p.standing.chain_out = Some((r.seq, r.hash()));
                Vec::new()
            }
            Line::Measure {
                at,
                peer,
                window,
                counts,
                ..
            } => self.judge(at, &peer, window, counts, id),
            Line::Settled {
                peer, settlement, ..
            } => {
                settlement.check()?;
                let p = self.peers.entry(peer).or_default();
                let key = settled_key(&settlement);
                // recorded again (a retry after a crash): counted once
                if !key.as_ref().is_some_and(|k| p.settled_jobs.contains(k)) {
                    p.standing.settled.add(&settlement);
                    if let Some(k) = key {
                        p.settled_jobs.push_back(k);
                        if p.settled_jobs.len() > SETTLED_JOBS {
                            p.settled_jobs.pop_front();
                        }
                    }
                }
                Vec::new()
            }
            Line::Revoke { peer, .. } => {
                let p = self.peers.entry(peer).or_default();
                p.ours = None;
                p.standing.grant_out = None;
                p.standing.capacity = 0;
                Vec::new()
            }
        };
        self.decided += decided.len() as u64;
        Ok(decided)
    }

    fn decide(
        &mut self,
        peer: &str,
        window: u64,
        severity: Rung,
        evidence: Vec<String>,
        why: String,
        at: u64,
    ) -> Decision {
        let p = self.peers.entry(peer.to_owned()).or_default();
        let s = &mut p.standing;
        let remedy = match severity {
            Rung::S0 => {
                if let Some((g, _)) = &p.ours {
                    s.capacity = s.capacity.saturating_add(g.aimd.increase).min(g.events);
                }
                s.clean_run = s.clean_run.saturating_add(1);
                if s.probation && s.clean_run >= PROBATION_WINDOWS {
                    s.probation = false;
                }
                Remedy::Increase
            }
            Rung::S1 => {
                if let Some((g, _)) = &p.ours {
                    s.capacity = (s.capacity / 2).max(g.aimd.min);
                }
                s.clean_run = 0;
                Remedy::Halve
            }
            Rung::S2 => {
                s.probation = true;
                s.clean_run = 0;
                Remedy::Probation
            }
            Rung::S3 => {
                s.suspended_until = Some(at.saturating_add(SUSPENSION_SECS));
                s.clean_run = 0;
                Remedy::Suspend
            }
            Rung::S4 => {
                s.revoked = true;
                s.capacity = 0;
                s.grant_out = None;
                s.grant_in = None;
                p.ours = None;
                p.theirs = None;
                p.receipts.clear();
                Remedy::Revoke
            }
        };
        s.severity = Some(severity);
        s.last_window = Some(s.last_window.map_or(window, |w| w.max(window)));
        Decision {
            peer: peer.to_owned(),
            window,
            severity,
            remedy,
            capacity: s.capacity,
            evidence,
            why,
            at,
        }
    }

    fn grant(
        &mut self,
        us: &str,
        at: u64,
        peer: &str,
        event: &serde_json::Value,
        id: String,
    ) -> Vec<Decision> {
        if self.peers.get(peer).is_some_and(|p| p.standing.revoked) {
            return Vec::new();
        }
        let signer = event["pubkey"].as_str().unwrap_or_default();
        let read = Event::from_value(event).and_then(|e| Grant::from_event(&e).map(|g| (g, e.id)));
        match read {
            Ok((g, eid)) if signer == us => {
                let eid = hex::encode(eid);
                let p = self.peers.entry(peer.to_owned()).or_default();
                let cap = match &p.ours {
                    Some(_) => p.standing.capacity.clamp(g.aimd.min, g.events),
                    None => g.aimd.initial,
                };
                p.standing.capacity = cap;
                p.standing.grant_out = Some(eid);
                p.ours = Some((g, id));
                Vec::new()
            }
            Ok((g, eid)) if signer == peer => {
                let p = self.peers.entry(peer.to_owned()).or_default();
                p.standing.grant_in = Some(hex::encode(eid));
                p.theirs = Some(g);
                Vec::new()
            }
            // A grant signed by a third key says nothing about this pair.
            Ok(_) => Vec::new(),
            // The peer's grant that does not verify: an invalid signature (S4) when it
            // claims to be the peer's, malformed (S3) otherwise.
            Err(why) if signer == peer => {
                // an id or signature that does not hold is S4; any other failure, malformed
                let forged = matches!(
                    why,
                    fleetmesh_proto::Error::InvalidEvent {
                        field: "id" | "sig",
                        ..
                    }
                );
                let severity = if forged { Rung::S4 } else { Rung::S3 };
                vec![self.decide(peer, 0, severity, vec![id], format!("its grant: {why}"), at)]
            }
            Err(_) => Vec::new(),
        }
    }

    fn receipt(
        &mut self,
        at: u64,
        peer: &str,
        receipt: &serde_json::Value,
        id: String,
    ) -> Vec<Decision> {
        if self.peers.get(peer).is_some_and(|p| p.standing.revoked) {
            return Vec::new();
        }
        let window = receipt["window"].as_u64().unwrap_or(0);
        let r = match BudgetReceipt::from_value(receipt) {
            Ok(r) => r,
            Err(e) => {
                let why = format!("a malformed receipt: {e}");
                return vec![self.decide(peer, window, Rung::S3, vec![id], why, at)];
            }
        };
        if r.from != peer || !r.verify() {
            let why = if r.from != peer {
                format!("a receipt signed for {} came from {peer}", r.from)
            } else {
                "a receipt whose signature does not hold".to_owned()
            };
            return vec![self.decide(peer, window, Rung::S4, vec![id], why, at)];
        }
        let hash = r.hash();
        let p = self.peers.entry(peer.to_owned()).or_default();
        if p.receipts.values().any(|(old, _)| old.hash() == hash)
            || p.standing
                .chain_in
                .as_ref()
                .is_some_and(|(_, h)| *h == hash)
        {
            // The same receipt again (a retry): nothing new.
            return Vec::new();
        }
        let (want_seq, want_prev) = match &p.standing.chain_in {
            Some((seq, h)) => (seq.saturating_add(1), h.clone()),
            None => (0, ZERO.to_owned()),
        };
        if r.seq != want_seq || r.prev != want_prev {
            let why = if r.seq < want_seq {
                format!("a fork: a second receipt {} of its chain", r.seq)
            } else if r.seq > want_seq {
                format!("a gap: receipt {} where {want_seq} was next", r.seq)
            } else {
                format!("receipt {} does not link to the one before", r.seq)
            };
            return vec![self.decide(peer, window, Rung::S4, vec![id], why, at)];
        }
        p.standing.chain_in = Some((r.seq, hash));
        p.receipts.insert(r.window, (r, id));
        while p.receipts.len() > PENDING_RECEIPTS {
            p.receipts.pop_first();
        }
        Vec::new()
    }

    fn judge(&mut self, at: u64, peer: &str, window: u64, m: Counts, id: String) -> Vec<Decision> {
        let p = self.peers.entry(peer.to_owned()).or_default();
        let s = &mut p.standing;
        if s.revoked || s.last_window.is_some_and(|w| window <= w) {
            return Vec::new();
        }
        if let Some(until) = s.suspended_until {
            if at < until {
                return Vec::new();
            }
            s.suspended_until = None;
        }
        let Some((g, grant_line)) = p.ours.clone() else {
            return Vec::new();
        };
        let receipt = p.receipts.remove(&window);
        let mut evidence = vec![id, grant_line];
        if let Some((_, rid)) = &receipt {
            evidence.push(rid.clone());
        }
        let cap = s.capacity;
        let (limit_e, limit_b) = (cap, g.bytes_at(cap));
        let past = |n: u64, limit: u64| u128::from(n) * 10 > u128::from(limit) * 11;
        let over = past(m.events_in, limit_e) || past(m.bytes_in, limit_b);
        let (severity, why) = if m.forged > 0 {
            (
                Rung::S4,
                format!("{} events with a forged id or signature", m.forged),
            )
        } else if m.out_of_filter > 0 || m.malformed > 0 {
            (
                Rung::S3,
                format!(
                    "{} events outside the granted shards, {} malformed frames",
                    m.out_of_filter, m.malformed
                ),
            )
        } else if let Some((r, _)) = receipt.as_ref().filter(|(r, _)| {
            counts_diverge((r.sent.events, r.sent.bytes), (m.events_in, m.bytes_in))
                || counts_diverge(
                    (r.received.events, r.received.bytes),
                    (m.events_out, m.bytes_out),
                )
        }) {
            (
                Rung::S2,
                format!(
                    "its receipt says it sent {} events ({} bytes) and received {} ({} bytes); \
                     measured {} ({}) and {} ({})",
                    r.sent.events,
                    r.sent.bytes,
                    r.received.events,
                    r.received.bytes,
                    m.events_in,
                    m.bytes_in,
                    m.events_out,
                    m.bytes_out
                ),
            )
        } else if let Some(why) = receipt
            .as_ref()
            .and_then(|(r, _)| shards_diverge(&g, s.grant_out.as_deref(), r, &m.shards))
        {
            (Rung::S2, why)
        } else if over && cap <= g.aimd.min {
            (
                Rung::S3,
                format!(
                    "{} events ({} bytes) over a capacity already at its floor of {cap} \
                     events ({limit_b} bytes): a persistent overrun",
                    m.events_in, m.bytes_in
                ),
            )
        } else if over {
            (
                Rung::S1,
                format!(
                    "{} events ({} bytes) over a capacity of {cap} events ({limit_b} bytes)",
                    m.events_in, m.bytes_in
                ),
            )
        } else {
            (
                Rung::S0,
                format!(
                    "{} events ({} bytes) within a capacity of {cap} events ({limit_b} bytes)",
                    m.events_in, m.bytes_in
                ),
            )
        };
        vec![self.decide(peer, window, severity, evidence, why, at)]
    }
}
