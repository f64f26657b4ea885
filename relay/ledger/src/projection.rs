//! A peer's standing as a NIP-85 trusted assertion (kind 30385): what the node tells
//! standard Nostr clients about the peers its ledger judged. The rank is integer
//! arithmetic over the recorded decisions and the standing (docs/protocol.md, "Projections"),
//! so any node with the same evidence log publishes the same numbers.

use fleetmesh_proto::projection::Assertion;
use fleetmesh_proto::{Remedy, Rung};

use crate::{Decision, Standing};

/// The highest rank a peer on probation (S2) gets.
pub const PROBATION_CEILING: u8 = 40;
/// The highest rank a suspended peer (S3, suspension not over) gets.
pub const SUSPENDED_CEILING: u8 = 10;

/// The assertion about `peer` (hex key) from its `standing` and the decisions about it
/// (in any order; others' are ignored) at time `now`; `None` before its first judged
/// window (nothing to say).
///
/// rank = ⌊100 × clean windows / judged windows⌋, then at most
/// [`PROBATION_CEILING`] on probation, [`SUSPENDED_CEILING`] while suspended, and 0
/// once revoked; `rung` is the standing's last severity; `complaints` the overruns it was
/// sent a complaint/1.0 for; `reporters` 1 (this node's own judgement).
pub fn assertion(
    peer: &str,
    standing: &Standing,
    decisions: &[Decision],
    now: u64,
) -> Option<Assertion> {
    let about: Vec<&Decision> = decisions.iter().filter(|d| d.peer == peer).collect();
    if about.is_empty() {
        return None;
    }
    let judged = u64::try_from(about.len()).unwrap_or(u64::MAX);
    let count = |r: Remedy| {
        u64::try_from(about.iter().filter(|d| d.remedy == r).count()).unwrap_or(u64::MAX)
    };
    let clean = count(Remedy::Increase);
    let mut rank = u8::try_from(u128::from(clean) * 100 / u128::from(judged)).unwrap_or(100);
    if standing.probation {
        rank = rank.min(PROBATION_CEILING);
    }
    if standing.suspended_until.is_some_and(|u| u > now) {
        rank = rank.min(SUSPENDED_CEILING);
    }
    if standing.revoked {
        rank = 0;
    }
    let mut a = Assertion::about_node(peer, rank);
    a.rung = Some(standing.severity.unwrap_or(Rung::S0));
    a.complaints = Some(count(Remedy::Halve));
    a.reporters = Some(1);
    Some(a)
}
