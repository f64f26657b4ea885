//! The accountability ledger's reader of outside bytes: an evidence log (what
//! `meshnode ledger replay FILE` reads, and what peers' grants and receipts become in it)
//! folded line by line by [`Ledger::apply`].
//!
//! Two shapes of input: any text, taken as log lines; or a script (first byte `!`) whose
//! operations are turned into well-formed lines here — grants signed by the node, receipts
//! signed by the peer, measurements — with fuzzed numbers, so the ladder's arithmetic and
//! chain checks are reached, not only the parsers.

use fleetmesh_ledger::{Counts, Ledger, Line, ladder::Decision};
use fleetmesh_proto::ledger::{Aimd, BudgetReceipt, Grant, Moved, ZERO, pair_id};
use fleetmesh_proto::noun::Noun as _;
use fleetmesh_proto::{NodeKeys, Remedy, Rung};
use serde_json::Value;

use crate::NOW;

/// Lines folded per input.
const MAX_LINES: usize = 256;

/// An evidence log: the fold must never panic, every decision must carry the remedy of
/// its rung and name its evidence, a receipt in a line reads back the same, and a second
/// fold of the same lines takes the same decisions to the same standings (what replay
/// rests on).
pub fn evidence(data: &[u8]) {
    let lines = match data.strip_prefix(b"!") {
        Some(script) => scripted(script),
        None => String::from_utf8_lossy(data)
            .lines()
            .take(MAX_LINES)
            .map(str::to_owned)
            .collect(),
    };
    let fold = |lines: &[String]| {
        let mut l = Ledger::default();
        let mut decided = Vec::new();
        for line in lines {
            if let Ok(ds) = l.apply(line) {
                decided.extend(ds);
            }
        }
        (l, decided)
    };
    let (a, decided) = fold(&lines);
    for d in &decided {
        check_decision(d);
    }
    for line in &lines {
        if let Ok(v) = serde_json::from_str::<Value>(line)
            && let Some(r) = v.get("receipt")
            && let Ok(r) = BudgetReceipt::from_value(r)
        {
            let back = serde_json::to_value(&r).expect("a receipt serializes");
            assert_eq!(BudgetReceipt::from_value(&back).expect("reads back"), r);
            let _ = r.verify();
        }
    }
    let (b, again) = fold(&lines);
    assert_eq!(decided, again, "a second fold decided otherwise");
    assert_eq!(a.standings(), b.standings());
}

fn check_decision(d: &Decision) {
    let want = match d.severity {
        Rung::S0 => Remedy::Increase,
        Rung::S1 => Remedy::Halve,
        Rung::S2 => Remedy::Probation,
        Rung::S3 => Remedy::Suspend,
        Rung::S4 => Remedy::Revoke,
    };
    assert_eq!(d.remedy, want, "{d:?}");
    assert!(!d.evidence.is_empty(), "a decision without evidence: {d:?}");
    if d.severity == Rung::S4 {
        assert_eq!(d.capacity, 0, "{d:?}");
    }
}

/// Reads little-endian u64s from the script, zeros past its end.
struct Script<'a>(&'a [u8]);

impl Script<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(*b)
    }

    /// A number: one byte picks its size, so small ones are common and huge ones reachable.
    fn num(&mut self) -> u64 {
        let width = match self.byte().unwrap_or(0) % 4 {
            0 => 1,
            1 => 2,
            2 => 4,
            _ => 8,
        };
        let mut n = [0u8; 8];
        for b in n.iter_mut().take(width) {
            *b = self.byte().unwrap_or(0);
        }
        u64::from_le_bytes(n)
    }
}

/// A few per-shard counts, or none.
fn shards(s: &mut Script<'_>) -> Option<Vec<Moved>> {
    let n = s.byte().unwrap_or(0) % 4;
    (n > 0).then(|| {
        (0..n - 1)
            .map(|_| Moved {
                events: s.num(),
                bytes: s.num(),
            })
            .collect()
    })
}

fn line(l: &Line) -> String {
    serde_json::to_string(l).expect("a line serializes")
}

/// Well-formed log lines from a script of operations between the node and one peer.
fn scripted(script: &[u8]) -> Vec<String> {
    let (us, peer): &(NodeKeys, NodeKeys) = crate::relay::didcomm_keys();
    let peer_hex = peer.nostr_pubkey_hex();
    let mut s = Script(script);
    let mut out = vec![line(&Line::Node {
        at: NOW,
        pubkey: us.nostr_pubkey_hex(),
    })];
    let (mut seq, mut prev, mut grant_id) = (0u64, ZERO.to_owned(), ZERO.to_owned());
    let mut ours_id = ZERO.to_owned();
    while out.len() < MAX_LINES
        && let Some(op) = s.byte()
    {
        let at = NOW.saturating_add(s.num() % 1_000_000);
        match op % 4 {
            // our grant to the peer, or the peer's to us
            0 | 1 => {
                let ours = op % 4 == 0;
                let (by, other) = if ours { (us, peer) } else { (peer, us) };
                let g = Grant {
                    events: s.num(),
                    bytes: s.num(),
                    window_secs: s.num(),
                    aimd: Aimd {
                        initial: s.num(),
                        min: s.num(),
                        increase: s.num(),
                    },
                    shards: shards(&mut s).map(|v| {
                        (0..v.len())
                            .map(|k| serde_json::json!({"kinds": [k]}))
                            .collect()
                    }),
                    starts_at: None,
                    pair: pair_id(&by.nostr().secret_key(), &other.nostr_pubkey_hex())
                        .expect("a valid key"),
                    expires_at: None,
                };
                let Ok(e) = g.sign(by, at) else { continue };
                if ours {
                    ours_id = e.id_hex();
                } else {
                    grant_id = e.id_hex();
                }
                out.push(line(&Line::Grant {
                    at,
                    peer: peer_hex.clone(),
                    event: e.to_value(),
                }));
            }
            // the peer's receipt: the chain's next, or a fuzzed seq
            2 => {
                let honest = s.byte().unwrap_or(0) % 4 != 0;
                let spends = if s.byte().unwrap_or(0) % 2 == 0 {
                    &ours_id
                } else {
                    &grant_id
                };
                let r = BudgetReceipt::new(
                    peer_hex.clone(),
                    spends.clone(),
                    s.num(),
                    s.num(),
                    if honest { seq } else { s.num() },
                    prev.clone(),
                    Moved {
                        events: s.num(),
                        bytes: s.num(),
                    },
                    Moved {
                        events: s.num(),
                        bytes: s.num(),
                    },
                    at,
                )
                .with_shards(shards(&mut s));
                let Ok(r) = r.sign(peer) else { continue };
                if honest {
                    seq += 1;
                    prev = r.hash();
                }
                out.push(line(&Line::Receipt {
                    at,
                    peer: peer_hex.clone(),
                    receipt: serde_json::to_value(&r).expect("a receipt serializes"),
                }));
            }
            // our measurement of a window
            _ => out.push(line(&Line::Measure {
                at,
                peer: peer_hex.clone(),
                window: s.num(),
                window_secs: s.num(),
                counts: Counts {
                    events_in: s.num(),
                    bytes_in: s.num(),
                    events_out: s.num(),
                    bytes_out: s.num(),
                    out_of_filter: s.num() % 2,
                    malformed: s.num() % 2,
                    forged: s.num() % 2,
                    shards: shards(&mut s).unwrap_or_default(),
                    blob_in: s.num(),
                    blob_out: s.num(),
                },
            })),
        }
    }
    out
}
