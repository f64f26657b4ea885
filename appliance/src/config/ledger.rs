//! `[ledger]`: the accountability ledger's window, and the grant the node gives every peer
//! it links with (see [`crate::ledger`]).

use serde::{Deserialize, Serialize};

/// `[ledger]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LedgerSection {
    /// Window length, seconds: receipts are exchanged and traffic judged once a window.
    /// 1 to 86 400. Default 60. Short windows judge sooner and cost a receipt per peer
    /// each time.
    pub window_secs: u64,
    /// Events per window granted to every peer the node links with (kind 30801, the AIMD
    /// ceiling and the first window's capacity); 0 (the default) grants nothing by itself
    /// — `meshnode grant issue` grants one peer.
    pub grant_events: u64,
    /// Bytes per window at full capacity. Default 0: 4 KiB per granted event.
    pub grant_bytes: u64,
    /// The capacity's floor, events per window; an overrun at the floor suspends. Default
    /// 0: a quarter of `grant_events` (at least 1).
    pub grant_min: u64,
    /// Events added to the capacity after each clean window. Default 0: a tenth of
    /// `grant_events`.
    pub grant_increase: u64,
    /// The shards the automatic grant covers: NIP-01 filters as JSON text (at most 16),
    /// e.g. `['{"kinds":[1]}', '{"kinds":[30023]}']`. Receipts count per shard, a peer's
    /// pushes outside them are refused and count as S3. Default none: every event.
    pub grant_shards: Vec<String>,
    /// Seconds between two publications of the node's projections for standard Nostr
    /// clients: a NIP-85 trusted assertion (kind 30385) about each peer the ledger judged,
    /// and a NIP-66 relay discovery event (kind 30166) about this face; on the node's relay
    /// and on `[node] relays`. 0 publishes none. 1 to 86 400. Default 600.
    pub publish_secs: u64,
    /// Past this many bytes the evidence log starts a new segment at the next window's
    /// end: the old one is kept as `ledger/evidence-<time>.jsonl`, the new one begins with
    /// a checkpoint of the state (so it replays alone). At least 16 384. Default 64 MiB.
    pub evidence_max_bytes: u64,
    /// Rotated segments kept (older ones are removed); 0 keeps them all. Default 16.
    pub evidence_segments: usize,
    /// Fault injection for federation tests: this node misbehaves on purpose so that its
    /// peers' remedies can be watched (`meshnode cluster start --fault I=KIND`); logged as
    /// an error at start-up. Never set it on a node that serves anyone. Default `none`.
    pub fault: Fault,
}

/// A misbehaviour a node can be told to show its peers (`[ledger] fault`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// None: the node is honest.
    #[default]
    None,
    /// Its receipts claim a quarter of what it sent (S2 at its peers: probation, report).
    Understate,
    /// From its third receipt on, each names a wrong previous receipt (S4: revoked).
    CorruptChain,
}

impl Default for LedgerSection {
    fn default() -> Self {
        LedgerSection {
            window_secs: 60,
            grant_events: 0,
            grant_bytes: 0,
            grant_min: 0,
            grant_increase: 0,
            grant_shards: Vec::new(),
            publish_secs: 600,
            evidence_max_bytes: 64 << 20,
            evidence_segments: 16,
            fault: Fault::None,
        }
    }
}

impl LedgerSection {
    /// The terms of the automatic grant (`grant_events` > 0), defaults filled in.
    pub fn terms(&self) -> Option<(u64, u64, u64, u64)> {
        (self.grant_events > 0).then(|| {
            let e = self.grant_events;
            let bytes = if self.grant_bytes > 0 {
                self.grant_bytes
            } else {
                e.saturating_mul(4096)
            };
            let min = if self.grant_min > 0 {
                self.grant_min
            } else {
                (e / 4).max(1)
            };
            let inc = if self.grant_increase > 0 {
                self.grant_increase
            } else {
                e / 10
            };
            (e, bytes, min, inc)
        })
    }

    /// The automatic grant's shards as JSON values (`None`: none named). Call after
    /// [`LedgerSection::check`].
    #[cfg_attr(not(feature = "federation"), allow(dead_code))]
    pub fn shards(&self) -> Option<Vec<serde_json::Value>> {
        (!self.grant_shards.is_empty()).then(|| {
            self.grant_shards
                .iter()
                .filter_map(|s| serde_json::from_str(s).ok())
                .collect()
        })
    }

    /// Refuses values out of range, naming the key.
    pub(crate) fn check(&self) -> Result<(), String> {
        check_shards(&self.grant_shards).map_err(|e| format!("[ledger] grant_shards: {e}"))?;
        if !(1..=86_400).contains(&self.window_secs) {
            return Err(format!(
                "[ledger] window_secs = {}: must be between 1 and 86400",
                self.window_secs
            ));
        }
        if self.evidence_max_bytes < 16_384 {
            return Err(format!(
                "[ledger] evidence_max_bytes = {}: must be at least 16384",
                self.evidence_max_bytes
            ));
        }
        if self.publish_secs > 86_400 {
            return Err(format!(
                "[ledger] publish_secs = {}: must be between 0 (none) and 86400",
                self.publish_secs
            ));
        }
        if let Some((e, _, min, _)) = self.terms()
            && min > e
        {
            return Err(format!(
                "[ledger] grant_min = {min}: must not exceed grant_events = {e}"
            ));
        }
        Ok(())
    }
}

/// Grant shards as a grant carries them: at most 16 NIP-01 filters, each JSON text that
/// parses as a filter.
///
/// # Errors
/// Which one does not, and why.
pub fn check_shards(shards: &[String]) -> Result<(), String> {
    if shards.len() > 16 {
        return Err(format!("{} shards; a grant names at most 16", shards.len()));
    }
    for s in shards {
        let v: serde_json::Value =
            serde_json::from_str(s).map_err(|e| format!("{s:?} is not JSON: {e}"))?;
        fleetmesh_proto::filter::Filter::from_value(&v, Default::default())
            .map_err(|e| format!("{s:?} is not a NIP-01 filter: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::LedgerSection;

    #[test]
    fn out_of_range_ledger_settings_are_refused_naming_the_key() {
        assert_eq!(LedgerSection::default().check(), Ok(()));
        for (bad, key) in [
            (
                LedgerSection {
                    window_secs: 0,
                    ..Default::default()
                },
                "window_secs = 0",
            ),
            (
                LedgerSection {
                    window_secs: 86_401,
                    ..Default::default()
                },
                "window_secs = 86401",
            ),
            (
                LedgerSection {
                    publish_secs: 86_401,
                    ..Default::default()
                },
                "publish_secs = 86401",
            ),
            (
                LedgerSection {
                    grant_events: 4,
                    grant_min: 5,
                    ..Default::default()
                },
                "grant_min = 5",
            ),
            (
                LedgerSection {
                    evidence_max_bytes: 1000,
                    ..Default::default()
                },
                "evidence_max_bytes = 1000",
            ),
            (
                LedgerSection {
                    grant_shards: vec![r#"{"kinds":"one"}"#.into()],
                    ..Default::default()
                },
                "grant_shards",
            ),
            (
                LedgerSection {
                    grant_shards: vec!["{}".into(); 17],
                    ..Default::default()
                },
                "17 shards",
            ),
        ] {
            let why = bad.check().unwrap_err();
            assert!(why.starts_with("[ledger] ") && why.contains(key), "{why}");
        }
        // 0 publishes nothing, and is allowed
        let off = LedgerSection {
            publish_secs: 0,
            ..Default::default()
        };
        assert_eq!(off.check(), Ok(()));
    }
}
