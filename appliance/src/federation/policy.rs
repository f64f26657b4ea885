//! Per-peer rules of the federation's rounds: what a stored Peering manifest says about a
//! peer (its direction, interval and filters; without one, `[peering]`'s), and how load
//! shedding holds rounds back: paused with peers granted nothing, capped to the grant.

use std::time::Duration;

use super::Ctx;

/// What a peer's link shows while our rounds with it pause for load shedding.
const PAUSED: &str = "paused (shedding)";

/// Whether our rounds with `key` pause: while the relay sheds (rung 1 or 2), rounds with a
/// peer the node grants nothing wait — what they would fetch takes the store's writer from
/// the granted peers the relay still serves — and resume when the rung falls or a grant
/// is issued. Says so on the peer's link.
pub(super) fn paused(ctx: &Ctx, key: &str) -> bool {
    let rung = ctx.relay.shedding_rung();
    let pause = rung >= 1 && ctx.relay.allowance(key).is_none();
    ctx.table.update(key, |v| {
        if pause {
            v.link = PAUSED.into();
        } else if v.link == PAUSED {
            v.link = "up".into();
        }
    });
    if pause {
        tracing::debug!(peer = %key, rung, "rounds paused: shedding, and no grant to this peer");
    }
    pause
}

/// The most events a round may fetch from `key`: while the relay sheds at rung 2, what the
/// peer's grant leaves of its events in the current window (what it pushed to us counted
/// too), so a granted peer is served within its grant both ways; else no limit.
pub(super) fn pull_allowance(ctx: &Ctx, key: &str) -> usize {
    if ctx.relay.shedding_rung() < 2 {
        return usize::MAX;
    }
    let Some(a) = ctx.relay.allowance(key) else {
        return 0;
    };
    let taken = ctx.table.tally(key).this_window().events_in;
    usize::try_from(a.events.saturating_sub(taken)).unwrap_or(usize::MAX)
}

/// What a stored Peering manifest says about one peer; without one, `[peering]`'s.
pub(super) struct Policy {
    pub(super) enabled: bool,
    pub(super) direction: fleetmesh_relay::sync::Direction,
    pub(super) every: Duration,
    /// NIP-01 filters (JSON), one round each.
    pub(super) filters: Vec<String>,
}

impl Policy {
    /// Without a manifest, for our rounds with `key`: both ways, or only pulling when the
    /// peer runs rounds with us too (it opened one within three intervals), so that each
    /// event crosses the pair once — fetched by the side that lacks it — not twice.
    pub(super) fn mutual(ctx: &Ctx, key: &str) -> Policy {
        let mut pol = Policy::of(ctx);
        let now = fleetmesh_proto::unix_now();
        let recent = ctx
            .table
            .tally(key)
            .reconciled_at()
            .is_some_and(|t| now.saturating_sub(t) <= 3 * ctx.every.as_secs().max(1));
        if recent {
            pol.direction = fleetmesh_relay::sync::Direction::Pull;
        }
        pol
    }

    pub(super) fn of(ctx: &Ctx) -> Policy {
        Policy {
            enabled: true,
            direction: fleetmesh_relay::sync::Direction::Both,
            every: ctx.every,
            filters: vec![ctx.filter.clone()],
        }
    }
}

/// The Peering manifest stored for the peer `key` (`DIR/manifests/Peering/*.json` whose
/// `spec.peer` is it; `meshnode apply` validated it): read before each round, so an apply
/// takes effect at the next one. Its `sync`: `enabled`, `direction`, `intervalSecs`,
/// `filters` (one round each; default, as the schema says: the fleetmesh kinds).
pub(super) fn policy(dir: &std::path::Path, key: &str) -> Option<Policy> {
    let stored = dir.join(crate::node::MANIFESTS_DIR).join("Peering");
    let doc = std::fs::read_dir(stored).ok()?.find_map(|e| {
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(e.ok()?.path()).ok()?).ok()?;
        (doc["spec"]["peer"] == key).then_some(doc)
    })?;
    let sync = &doc["spec"]["sync"];
    Some(Policy {
        enabled: sync["enabled"].as_bool().unwrap_or(true),
        direction: sync["direction"].as_str().unwrap_or("both").parse().ok()?,
        every: Duration::from_secs(sync["intervalSecs"].as_u64().unwrap_or(300).max(1)),
        filters: match sync["filters"].as_array() {
            Some(fs) if !fs.is_empty() => fs.iter().map(ToString::to_string).collect(),
            _ => vec![
                serde_json::json!({"kinds": fleetmesh_schemas::constants::kind::FLEETMESH})
                    .to_string(),
            ],
        },
    })
}
