//! `store`: the relay's store alone, as it grows — what `relay --prefill` measures end to
//! end, without the sockets and signature checks in the way, so a profile of it shows the
//! store's own costs.
//!
//! Inserts N kind-1 events (random ids, 1 000 authors, a `t` and a `p` tag, ~480 bytes of
//! JSON, one second apart) in transactions of B (default 4 096, the most the relay's writer
//! commits at once), and prints the rate of each window of W events; then the file's size against the events' JSON
//! bytes, REQ-shaped queries (author, kind, tag, time range; 100 results) and the NIP-77
//! item list of every event. The events are not signed: the store takes events already
//! verified and checks nothing of the kind.
//!
//! ```text
//! fleetmesh-bench store [--events N] [--window W] [--batch B] [--dir DIR]
//! ```

use std::time::{Duration, Instant};

use fleetmesh_proto::Event;
use fleetmesh_proto::filter::{Filter, FilterLimits};
use fleetmesh_proto::unix_now;
use fleetmesh_relay::Store;
use fleetmesh_relay::store::EventStore as _;
use rand::rngs::StdRng;
use rand::{Rng as _, RngCore as _, SeedableRng as _};
use serde_json::json;

const AUTHORS: usize = 1_000;
const BATCH: usize = 4_096;

/// A named kind of REQ filter, the `q`th of its kind.
type Shape<'a> = (&'static str, Box<dyn Fn(usize) -> serde_json::Value + 'a>);

struct Opts {
    events: usize,
    window: usize,
    batch: usize,
    dir: Option<std::path::PathBuf>,
}

fn parse(args: &[String]) -> Opts {
    let mut o = Opts {
        events: 1_000_000,
        window: 100_000,
        batch: BATCH,
        dir: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let Some(v) = it.next() else {
            eprintln!("store: {a} needs a value");
            std::process::exit(2)
        };
        let num = || {
            v.parse().unwrap_or_else(|_| {
                eprintln!("store: {a} needs a number");
                std::process::exit(2)
            })
        };
        match a.as_str() {
            "--events" => o.events = num(),
            "--window" => o.window = num(),
            "--batch" => o.batch = num(),
            "--dir" => o.dir = Some(v.into()),
            _ => {
                eprintln!("store: unknown option {a}");
                std::process::exit(2)
            }
        }
    }
    o.batch = o.batch.max(1);
    o.window = o.window.max(o.batch);
    o
}

/// The `i`th synthetic event: one second after the previous, by one of [`AUTHORS`].
pub fn synthetic(rng: &mut StdRng, authors: &[[u8; 32]], base: u64, i: usize) -> Event {
    let mut id = [0u8; 32];
    rng.fill_bytes(&mut id);
    let mut sig = [0u8; 64];
    rng.fill_bytes(&mut sig);
    let p = authors[rng.gen_range(0..authors.len())];
    Event {
        id,
        pubkey: authors[i % authors.len()],
        created_at: base + i as u64,
        kind: 1,
        tags: vec![
            vec!["t".into(), format!("topic{}", i % 50)],
            vec!["p".into(), hex::encode(p)],
        ],
        content: format!("synthetic note {i}: a sentence of ordinary length."),
        sig,
    }
}

fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e3;
    (at(0.5), at(0.99))
}

/// Runs the store bench.
pub fn run(args: &[String]) {
    let o = parse(args);
    let tmp =
        tempfile::tempdir_in(o.dir.clone().unwrap_or_else(std::env::temp_dir)).expect("a temp dir");
    let path = tmp.path().join("store.db");
    let mut store = Store::create(&path).expect("a fresh store");
    let mut rng = StdRng::seed_from_u64(18);
    let authors: Vec<[u8; 32]> = (0..AUTHORS)
        .map(|_| {
            let mut a = [0u8; 32];
            rng.fill_bytes(&mut a);
            a
        })
        .collect();
    let base = unix_now() - o.events as u64 - 10;
    println!(
        "store: {} events in transactions of {}, rate per window of {}",
        o.events, o.batch, o.window
    );
    let (mut json_bytes, mut first_rate) = (0u64, None);
    let mut i = 0;
    while i < o.events {
        let end = (i + o.window).min(o.events);
        let started = Instant::now();
        while i < end {
            let n = o.batch.min(end - i);
            let batch: Vec<(Event, String)> = (i..i + n)
                .map(|j| {
                    let e = synthetic(&mut rng, &authors, base, j);
                    let j = e.to_json();
                    (e, j)
                })
                .collect();
            json_bytes += batch.iter().map(|(_, j)| j.len() as u64).sum::<u64>();
            let refs: Vec<(&Event, &str)> = batch.iter().map(|(e, j)| (e, j.as_str())).collect();
            store.insert_batch(&refs).expect("insert");
            i += n;
        }
        let rate = o.window as f64 / started.elapsed().as_secs_f64();
        let first = *first_rate.get_or_insert(rate);
        println!(
            "  stored {:>9}: {:>9.0} events/s ({:.2} of the first window)",
            i,
            rate,
            rate / first
        );
    }
    let size = store.size_bytes().expect("size");
    println!(
        "file {:.1} MB for {:.1} MB of event JSON: x{:.2}",
        size as f64 / 1e6,
        json_bytes as f64 / 1e6,
        size as f64 / json_bytes as f64
    );
    drop(store);
    let reader = Store::open_read_only(&path).expect("read-only");
    let fl = FilterLimits { max_values: 1000 };
    let kinds: [Shape<'_>; 4] = [
        (
            "author",
            Box::new(|q| json!({"authors": [hex::encode(authors[q * 7 % AUTHORS])], "limit": 100})),
        ),
        ("kind", Box::new(|_| json!({"kinds": [1], "limit": 100}))),
        (
            "tag",
            Box::new(|q| json!({"kinds": [1], "#t": [format!("topic{}", q % 50)], "limit": 100})),
        ),
        (
            "time range",
            Box::new(|q| {
                let since = base + (q * 7919 % o.events.max(1)) as u64;
                json!({"since": since, "until": since + 3600, "limit": 100})
            }),
        ),
    ];
    for (name, filter) in kinds {
        let mut lat = Vec::new();
        for q in 0..200 {
            let f = Filter::from_value(&filter(q), fl).expect("filter");
            let t = Instant::now();
            let got = reader.query(&[f], 500, unix_now()).expect("query");
            lat.push(t.elapsed());
            assert!(!got.is_empty(), "every bench query has results");
        }
        let (p50, p99) = percentiles(lat);
        println!("query {name:<10} p50 {p50:.3} ms  p99 {p99:.3} ms");
    }
    let all = Filter::from_value(&json!({}), fl).expect("filter");
    let t = Instant::now();
    let items = reader
        .negentropy_items(&[all], usize::MAX, unix_now())
        .expect("items")
        .expect("within the bound");
    println!(
        "NIP-77 items of every event: {} in {:.3} s",
        items.len(),
        t.elapsed().as_secs_f64()
    );
}
