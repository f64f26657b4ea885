//! `sync`: NIP-77 reconciliation, ours over the relay against the reference protocol.
//!
//! For each set size N and difference count D, two sets share N items and each holds D/2
//! of its own. The baseline is the negentropy reference implementation (rust-nostr's
//! `negentropy`, protocol 0x61) run in memory between two storages: round trips and
//! payload bytes each way. Ours is the same reconciliation through the product: items
//! loaded from two SQLite stores by `(created_at, id)`, `fleetmesh_relay::sync` as the
//! client, our relay face as the server, over a loopback WebSocket (dry run: reconcile
//! only). Both use a 50 000-byte frame limit. Reported: rounds, payload bytes (binary) and
//! wire bytes (hex in JSON) each way, wall time, and the ratio of our payload bytes to the
//! reference's.

use std::time::Instant;

use fleetmesh_proto::Event;
use fleetmesh_relay::limits::Limits;
use fleetmesh_relay::store::EventStore as _;
use fleetmesh_relay::store::{NegItem, Store};
use fleetmesh_relay::sync::{SyncOptions, sync};
use negentropy::{Id, Negentropy, NegentropyStorageVector};

const FRAME: u64 = 50_000;

/// A small deterministic generator (xorshift64*), so runs reconcile the same sets.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn item(&mut self) -> NegItem {
        let mut id = [0u8; 32];
        for chunk in id.chunks_mut(8) {
            chunk.copy_from_slice(&self.next().to_le_bytes());
        }
        (1_600_000_000 + self.next() % 100_000_000, id)
    }
}

/// (shared, only on the client side, only on the server side).
fn sets(n: usize, d: usize) -> (Vec<NegItem>, Vec<NegItem>, Vec<NegItem>) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ n as u64);
    let shared = (0..n).map(|_| rng.item()).collect();
    let client = (0..d / 2).map(|_| rng.item()).collect();
    let server = (0..d - d / 2).map(|_| rng.item()).collect();
    (shared, client, server)
}

fn storage<'a>(parts: impl Iterator<Item = &'a NegItem>) -> NegentropyStorageVector {
    let mut s = NegentropyStorageVector::new();
    for (t, id) in parts {
        s.insert(*t, Id::from_byte_array(*id)).expect("insert");
    }
    s.seal().expect("seal");
    s
}

struct Figures {
    rounds: usize,
    up: usize,
    down: usize,
    wire_up: usize,
    wire_down: usize,
    have: usize,
    need: usize,
    secs: f64,
}

fn reference(n: usize, d: usize) -> Figures {
    let (shared, client, server) = sets(n, d);
    let start = Instant::now();
    let mut c = Negentropy::owned(storage(shared.iter().chain(&client)), FRAME).expect("client");
    let mut s = Negentropy::owned(storage(shared.iter().chain(&server)), FRAME).expect("server");
    let (mut have, mut need) = (Vec::new(), Vec::new());
    let mut msg = c.initiate().expect("initiate");
    let (mut up, mut down, mut rounds) = (msg.len(), 0, 0);
    loop {
        let reply = s.reconcile(&msg).expect("server reconcile");
        down += reply.len();
        rounds += 1;
        match c
            .reconcile_with_ids(&reply, &mut have, &mut need)
            .expect("client reconcile")
        {
            Some(next) => {
                up += next.len();
                msg = next;
            }
            None => break,
        }
    }
    Figures {
        rounds,
        up,
        down,
        wire_up: 0,
        wire_down: 0,
        have: have.len(),
        need: need.len(),
        secs: start.elapsed().as_secs_f64(),
    }
}

/// A store holding the given items as (unsigned, synthetic) kind-1 events: the store
/// trusts its caller, and reconciliation reads only `(created_at, id)`.
fn fill(path: &std::path::Path, items: impl Iterator<Item = NegItem>) {
    let mut store = Store::create(path).expect("store");
    let mut batch: Vec<(Event, String)> = Vec::with_capacity(10_000);
    let mut flush = |batch: &mut Vec<(Event, String)>| {
        let refs: Vec<(&Event, &str)> = batch.iter().map(|(e, j)| (e, j.as_str())).collect();
        store.insert_batch(&refs).expect("insert");
        batch.clear();
    };
    for (created_at, id) in items {
        let e = Event {
            id,
            pubkey: [7; 32],
            created_at,
            kind: 1,
            tags: vec![],
            content: String::new(),
            sig: [0; 64],
        };
        let json = e.to_json();
        batch.push((e, json));
        if batch.len() == 10_000 {
            flush(&mut batch);
        }
    }
    flush(&mut batch);
}

fn ours(n: usize, d: usize) -> Figures {
    let (shared, client, server) = sets(n, d);
    let dir = tempfile::tempdir().expect("temp dir");
    let (local_db, remote_db) = (dir.path().join("local.db"), dir.path().join("remote.db"));
    fill(&local_db, shared.iter().chain(&client).copied());
    fill(&remote_db, shared.iter().chain(&server).copied());
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let limits = Limits {
            max_neg_items: 2_000_000,
            ..Limits::default()
        };
        let (relay, url, server) = crate::relay::serve(&remote_db, limits).await;
        let mut local = Store::open(&local_db).expect("local store");
        let opts = SyncOptions {
            dry_run: true,
            max_items: 2_000_000,
            frame_size: FRAME,
            ..SyncOptions::default()
        };
        let start = Instant::now();
        let r = sync(&mut local, &url, &opts, |_| {}).await.expect("sync");
        let secs = start.elapsed().as_secs_f64();
        relay.close_all();
        server.abort();
        Figures {
            rounds: r.rounds,
            up: r.neg_payload_up,
            down: r.neg_payload_down,
            wire_up: r.neg_bytes_up,
            wire_down: r.neg_bytes_down,
            have: r.have,
            need: r.need,
            secs,
        }
    })
}

/// Runs the grid and prints one row per case.
pub fn run(args: &[String]) {
    let (mut items, mut diffs, mut relay_max) = (Vec::new(), Vec::new(), 1_000_000usize);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v: usize = it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
            eprintln!("sync: {a} needs a number");
            std::process::exit(2)
        });
        match a.as_str() {
            "--items" => items.push(v),
            "--diffs" => diffs.push(v),
            "--relay-max" => relay_max = v,
            _ => {
                eprintln!("sync: unknown option {a}");
                std::process::exit(2)
            }
        }
    }
    if items.is_empty() {
        items = vec![100_000, 1_000_000];
    }
    if diffs.is_empty() {
        diffs = vec![10, 100, 1000];
    }
    println!(
        "{:>9} {:>5} | {:>6} {:>9} {:>9} {:>7} | {:>6} {:>9} {:>9} {:>10} {:>10} {:>7} | bytes ratio",
        "items",
        "diffs",
        "rounds",
        "up B",
        "down B",
        "secs",
        "rounds",
        "up B",
        "down B",
        "wire up",
        "wire down",
        "secs"
    );
    println!(
        "{:>15} | {:^34} | {:^65} |",
        "", "reference (in memory)", "fleetmesh (SQLite + relay + WebSocket)"
    );
    for &n in &items {
        for &d in &diffs {
            let r = reference(n, d);
            assert_eq!(
                (r.have, r.need),
                (d / 2, d - d / 2),
                "the reference found every difference"
            );
            let row = format!(
                "{n:>9} {d:>5} | {:>6} {:>9} {:>9} {:>7.3} |",
                r.rounds, r.up, r.down, r.secs
            );
            if n > relay_max {
                println!("{row} (relay run skipped: --relay-max {relay_max})");
                continue;
            }
            let o = ours(n, d);
            assert_eq!(
                (o.have, o.need),
                (d / 2, d - d / 2),
                "our sync found every difference"
            );
            println!(
                "{row} {:>6} {:>9} {:>9} {:>10} {:>10} {:>7.3} | x{:.3}",
                o.rounds,
                o.up,
                o.down,
                o.wire_up,
                o.wire_down,
                o.secs,
                (o.up + o.down) as f64 / (r.up + r.down) as f64
            );
        }
    }
}
