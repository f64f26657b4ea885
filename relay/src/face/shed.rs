//! Load shedding in a fixed order, and the directional strain ledger.
//!
//! The relay serves at one of three rungs: **0** normal; **1** new subscriptions and writes
//! are refused from connections that are not a granted peer's; **2** only granted peers
//! are served (others' subscriptions are closed), each within its grant's events per
//! window and its grant's shards. The rung follows the relay's pressure — how late its tasks are scheduled, how
//! long an event waits for the store's writer and how long the writer's queue will take
//! (smoothed), and how much of the output budget is queued — rising at once and stepping down one rung after five calm seconds; or
//! the operator pins it (`[relay] shedding`).
//!
//! A granted peer is a key the node grants to (its ledger says so through
//! [`Relay::set_granted`]): a federation link's key, or a face client authenticated by
//! NIP-42. Unauthenticated clients refused while shedding are sent an `AUTH` challenge and
//! an `auth-required:` refusal, so a granted peer's client can authenticate and retry.
//!
//! Every refusal is counted per key (`ip:ADDR` for an anonymous client) as **inbound**
//! strain ([`Relay::strain`]); what peers refuse of ours as over a limit is **outbound**
//! strain, counted by the sync client per round.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64};
use std::time::{Duration, Instant};

use super::*;
pub use crate::limits::Shedding;

/// What a granted key may write per window while the relay sheds at rung 2.
#[derive(Debug, Clone, PartialEq)]
pub struct Allowance {
    /// Events per window (its grant's capacity in force).
    pub events: u64,
    /// The window, seconds.
    pub window_secs: u64,
    /// The grant's shards: at rung 2 an event outside all of them is refused (empty: any
    /// event).
    pub shards: Arc<Vec<fleetmesh_proto::filter::Filter>>,
}

/// Whether a key (hex) is granted, and its allowance.
pub type Granted = Arc<dyn Fn(&str) -> Option<Allowance> + Send + Sync>;

/// Pressure (ms of delay) from which rung 1 holds.
pub const RUNG1_MS: u64 = 50;
/// Pressure (ms) from which rung 2 holds.
pub const RUNG2_MS: u64 = 250;
/// How long the pressure must stay below a rung's threshold before stepping down.
pub const CALM: Duration = Duration::from_secs(5);
/// How often the pressure is sampled.
const TICK: Duration = Duration::from_millis(50);
/// Keys in the strain ledger; past it, new ones are counted under `others`.
const MAX_STRAINED: usize = 4096;

/// The rung for `pressure_ms` of delay and `output_pct` of the output budget queued,
/// coming from `current`, calm (below the current rung's threshold) for `calm_for`: up at
/// once, down one rung after [`CALM`].
pub fn next_rung(current: u8, pressure_ms: u64, output_pct: u64, calm_for: Duration) -> u8 {
    let wanted = if pressure_ms >= RUNG2_MS || output_pct >= 80 {
        2
    } else if pressure_ms >= RUNG1_MS || output_pct >= 50 {
        1
    } else {
        0
    };
    if wanted >= current {
        wanted
    } else if calm_for >= CALM {
        current - 1
    } else {
        current
    }
}

/// The relay's shedding state.
pub(super) struct Shed {
    mode: Shedding,
    rung: AtomicU8,
    /// Smoothed scheduling delay, µs.
    lag_us: AtomicU64,
    granted: std::sync::RwLock<Option<Granted>>,
    /// Events taken per granted key in its current window, while at rung 2.
    used: Mutex<HashMap<String, (u64, u64)>>,
    /// Inbound strain: messages refused while shedding, per key.
    strain: Mutex<BTreeMap<String, u64>>,
}

impl Shed {
    pub(super) fn new(mode: Shedding) -> Shed {
        Shed {
            mode,
            rung: AtomicU8::new(match mode {
                Shedding::Rung1 => 1,
                Shedding::Rung2 => 2,
                Shedding::Auto | Shedding::Off => 0,
            }),
            lag_us: AtomicU64::new(0),
            granted: std::sync::RwLock::default(),
            used: Mutex::default(),
            strain: Mutex::default(),
        }
    }

    pub(super) fn rung(&self) -> u8 {
        self.rung.load(Relaxed)
    }

    /// The allowance of `key`, when granted.
    pub(super) fn allowance(&self, key: &str) -> Option<Allowance> {
        let g = self
            .granted
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        g.as_ref().and_then(|f| f(key))
    }

    /// Takes one event of `key`'s allowance `a` at rung 2; false when it is spent.
    pub(super) fn take(&self, key: &str, a: &Allowance) -> bool {
        let w = fleetmesh_proto::unix_now() / a.window_secs.max(1);
        let mut used = self
            .used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if used.len() > MAX_STRAINED {
            used.retain(|_, (uw, _)| *uw == w);
        }
        let slot = used.entry(key.to_owned()).or_insert((w, 0));
        if slot.0 != w {
            *slot = (w, 0);
        }
        if slot.1 >= a.events {
            return false;
        }
        slot.1 += 1;
        true
    }

    pub(super) fn strained_inbound(&self, key: &str) {
        let mut s = self
            .strain
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = if s.len() >= MAX_STRAINED && !s.contains_key(key) {
            "others"
        } else {
            key
        };
        *s.entry(key.to_owned()).or_default() += 1;
    }
}

impl Relay {
    /// The rung the relay sheds at now (0 to 2).
    pub fn shedding_rung(&self) -> u8 {
        self.shed.rung()
    }

    /// Tells the relay which keys are granted peers, and their allowance.
    pub fn set_granted(&self, granted: Granted) {
        *self
            .shed
            .granted
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(granted);
    }

    /// Key `key`'s allowance when the node grants it (see [`Relay::set_granted`]); `None`
    /// for a key it grants nothing, or before a ledger is set.
    pub fn allowance(&self, key: &str) -> Option<Allowance> {
        self.shed.allowance(key)
    }

    /// The pressure the shedder last saw: (scheduling lag, writer sojourn, writer
    /// backlog), ms.
    pub fn pressure(&self) -> (u64, u64, u64) {
        (
            self.shed.lag_us.load(Relaxed) / 1000,
            self.writer.sojourn_us() / 1000,
            self.writer.backlog_us() / 1000,
        )
    }

    /// The inbound strain ledger: messages refused while shedding, per key (`ip:ADDR`
    /// for an anonymous client). The outbound side — what peers refused of ours as over a
    /// limit — is counted by the sync client ([`crate::sync::SyncReport::push_limited`]).
    pub fn strain(&self) -> BTreeMap<String, u64> {
        self.shed
            .strain
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Samples the pressure every 50 ms and moves the rung ([`next_rung`]) until the
    /// relay shuts down; nothing with a pinned or disabled `[relay] shedding`.
    pub fn spawn_shedder(self: &Arc<Self>) -> Option<tokio::task::JoinHandle<()>> {
        if self.shed.mode != Shedding::Auto {
            return None;
        }
        let relay = self.clone();
        let mut stop = self.shutdown.subscribe();
        Some(tokio::spawn(async move {
            let mut calm_since = Instant::now();
            loop {
                let t = Instant::now();
                tokio::select! {
                    () = tokio::time::sleep(TICK) => {}
                    _ = stop.changed() => return,
                }
                let late = t.elapsed().saturating_sub(TICK).as_micros();
                let late = u64::try_from(late).unwrap_or(u64::MAX);
                let s = &relay.shed;
                let lag = (s.lag_us.load(Relaxed).saturating_mul(7) + late) / 8;
                s.lag_us.store(lag, Relaxed);
                let w = &relay.writer;
                let pressure_ms = lag.max(w.sojourn_us()).max(w.backlog_us()) / 1000;
                relay.writer.fade_sojourn();
                let total = relay.limits.max_queued_bytes_total.max(1) as u64;
                let output_pct = relay.output.used() as u64 * 100 / total;
                let current = s.rung();
                let threshold = [RUNG1_MS, RUNG2_MS, RUNG2_MS][usize::from(current.min(2))];
                if current > 0 && pressure_ms >= threshold / 2 {
                    calm_since = Instant::now();
                }
                let next = next_rung(current, pressure_ms, output_pct, calm_since.elapsed());
                if next != current {
                    s.rung.store(next, Relaxed);
                    // shedding: what waited past the rung-2 threshold in the store's queue
                    // is refused rather than committed late
                    relay
                        .writer
                        .set_shed_after((next > 0).then(|| Duration::from_millis(RUNG2_MS)));
                    calm_since = Instant::now();
                    info!(
                        rung = next,
                        pressure_ms, output_pct, "load shedding rung changed"
                    );
                }
            }
        }))
    }
}
