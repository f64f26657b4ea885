//! `events`: parsing and verifying N signed NIP-01 events (id recomputation and BIP-340
//! check), fleetmesh-relay against the `nostr` crate (rust-nostr), and validating fleetmesh
//! kinds against their schemas.

use fleetmesh_bench::{compare, report};
use fleetmesh_proto::{Event, NodeKeys, UnsignedEvent};
use fleetmesh_schemas::SchemaSet;
use nostr::JsonUtil as _;

/// Runs the events benchmark over `n` events.
pub fn run(n: usize) {
    let keys = NodeKeys::generate().expect("random source");
    let json: Vec<String> = (0..n)
        .map(|i| {
            keys.sign(UnsignedEvent {
                created_at: 1_700_000_000 + i as u64,
                kind: 1,
                tags: vec![
                    vec!["t".into(), format!("tag{i}")],
                    vec!["p".into(), "ab".repeat(32)],
                ],
                content: format!("event number {i}: \"quoted\"\nand a line break, é"),
            })
            .expect("signing")
            .to_json()
        })
        .collect();
    let ops = n as u64;
    println!(
        "events: {n} signed kind-1 events, {} bytes each on average",
        json.iter().map(String::len).sum::<usize>() / n
    );

    let c = compare(
        9,
        ops,
        || {
            json.iter()
                .map(|j| Event::from_json(j).expect("parses").created_at)
                .sum()
        },
        || {
            json.iter()
                .map(|j| {
                    nostr::prelude::Event::from_json(j)
                        .expect("parses")
                        .created_at
                        .as_secs()
                })
                .sum()
        },
    );
    report("parse event JSON", "rust-nostr", &c);

    let ours: Vec<Event> = json.iter().map(|j| Event::from_json(j).unwrap()).collect();
    let theirs: Vec<nostr::prelude::Event> = json
        .iter()
        .map(|j| nostr::prelude::Event::from_json(j).unwrap())
        .collect();
    let c = compare(
        9,
        ops,
        || ours.iter().map(|e| e.verify().is_ok() as u64).sum(),
        || theirs.iter().map(|e| e.verify().is_ok() as u64).sum(),
    );
    report("verify id + BIP-340 signature", "rust-nostr", &c);

    // Schema validation has no baseline to race; report its cost per event beside the
    // verification above so the relay's budget per event is visible.
    let ask = SchemaSet::embedded();
    let example: serde_json::Value = serde_json::from_str(include_str!(
        "../../../../schemas/examples/events/kind-30810.json"
    ))
    .unwrap();
    let instance = &example["valid"][0];
    let c = compare(
        9,
        ops,
        || {
            (0..n)
                .map(|_| ask.validate_event(instance).is_ok() as u64)
                .sum()
        },
        || ours.iter().map(|e| e.verify().is_ok() as u64).sum(),
    );
    report("schema-check a kind-30810 ask", "our verify", &c);
}
