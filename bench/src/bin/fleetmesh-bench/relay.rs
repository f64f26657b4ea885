//! `relay`: our relay face against rust-nostr's `LocalRelay`, in the same run, driven by the
//! same load, as the stores grow.
//!
//! ```text
//! fleetmesh-bench relay [--prefill N,N,..] [--events N] [--conns K] [--window W]
//!                       [--reqs M] [--rounds R] [--python PATH] [--baselines B,B,..]
//! ```
//!
//! Every relay runs at once, each on its own store: ours (`meshnode`'s relay with its
//! defaults: SQLite WAL on disk, `OK` only after the commit) and the baselines, each with
//! its rate limits raised so that none throttles the load. Baselines (`--baselines`):
//!
//! - `0.45`: rust-nostr 0.45.1's `LocalRelay` on its default in-memory store, which keeps
//!   only the newest 75 000 events (older ones are evicted: it never holds more), from the
//!   PyPI `nostr-sdk` bindings (the Rust relay under a thin Python start-up script,
//!   `bench/relay_baseline.py`) run by the interpreter `--python` names (default:
//!   `$FLEETMESH_BENCH_PYTHON`, else the venv `bench/relay.sh` makes);
//! - `0.44`: `nostr-relay-builder` 0.44.1's `LocalRelay` in this process (in-memory, the
//!   same 75 000 cap), the baseline of earlier runs, kept for history;
//! - `lmdb`: the same 0.44.1 `LocalRelay` on rust-nostr's LMDB store (`nostr-lmdb` 0.44, the
//!   persistent store it recommends: every event kept, like ours), with the bench's
//!   `lmdb-baseline` feature (`bench/relay.sh` turns it on).
//!
//! For each prefill stage (ascending), each relay is first filled to that many events
//! through the normal path (`relay-client fill`; its rate is printed too), then R timed
//! rounds alternate between the relays: EVENTS new events over K connections with at most
//! W in flight on each (events/s from the first send to the last `OK`, and each `OK`'s
//! latency), then M REQs by author, by kind and tag, and by time range. Each stage prints
//! the median round of each relay and ours against each baseline. At the end: our store's
//! size per event and the time to list every event's NIP-77 item.

use std::io::BufRead as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetmesh_proto::filter::{Filter, FilterLimits};
use fleetmesh_relay::limits::Limits;
use fleetmesh_relay::store::EventStore as _;
use fleetmesh_relay::{Relay, RelayConfig, Store};
use serde_json::Value;

struct Opts {
    prefill: Vec<usize>,
    events: usize,
    conns: usize,
    window: usize,
    reqs: usize,
    rounds: usize,
    python: PathBuf,
    baselines: Vec<String>,
}

fn default_python() -> PathBuf {
    if let Some(p) = std::env::var_os("FLEETMESH_BENCH_PYTHON") {
        return p.into();
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".cache/fleetmesh/bench-venv/bin/python")
}

fn parse(args: &[String]) -> Opts {
    let mut o = Opts {
        prefill: vec![0, 100_000, 1_000_000],
        events: 40_000,
        conns: 16,
        window: 64,
        reqs: 480,
        rounds: 2,
        python: default_python(),
        baselines: vec!["0.45".into(), "0.44".into()],
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let Some(v) = it.next() else {
            eprintln!("relay: {a} needs a value");
            std::process::exit(2)
        };
        let num = |s: &str| -> usize {
            s.replace('_', "").parse().unwrap_or_else(|_| {
                eprintln!("relay: {a} needs a number, not {s}");
                std::process::exit(2)
            })
        };
        match a.as_str() {
            "--prefill" => o.prefill = v.split(',').map(num).collect(),
            "--events" => o.events = num(v),
            "--conns" => o.conns = num(v).max(1),
            "--window" => o.window = num(v).max(1),
            "--reqs" => o.reqs = num(v),
            "--rounds" => o.rounds = num(v).max(1),
            "--python" => o.python = v.into(),
            "--baselines" => {
                o.baselines = v
                    .split(',')
                    .filter(|b| !b.is_empty())
                    .map(str::to_owned)
                    .collect();
                if let Some(b) = o
                    .baselines
                    .iter()
                    .find(|b| !["0.45", "0.44", "lmdb"].contains(&b.as_str()))
                {
                    eprintln!("relay: unknown baseline {b} (0.45, 0.44, lmdb)");
                    std::process::exit(2)
                }
            }
            _ => {
                eprintln!("relay: unknown option {a}");
                std::process::exit(2)
            }
        }
    }
    o.prefill.sort_unstable();
    o
}

fn children_cpu() -> Duration {
    // SAFETY: getrusage fills the struct we pass; RUSAGE_CHILDREN covers waited-for children.
    #[allow(unsafe_code)]
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Runs the load generator with `args`; its JSON report and its CPU time, or `None` when it
/// failed (its own message is on stderr).
fn client(args: &[String]) -> Option<(Value, Duration)> {
    let before = children_cpu();
    let out = Command::new(std::env::current_exe().expect("own path"))
        .arg("relay-client")
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .expect("the client runs");
    if !out.status.success() {
        return None;
    }
    let report: Value = serde_json::from_slice(&out.stdout).expect("the client prints JSON");
    Some((report, children_cpu() - before))
}

/// Our relay on the store at `db` with `limits`, listening on 127.0.0.1:0: the relay, its
/// `ws://` URL and the server task.
pub async fn serve(db: &Path, limits: Limits) -> (Arc<Relay>, String, tokio::task::JoinHandle<()>) {
    let (relay, _writer) = Relay::start(
        db,
        RelayConfig {
            limits,
            ..Default::default()
        },
    )
    .expect("relay starts");
    let (addr, server) = relay
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind");
    (relay, format!("ws://{addr}/"), server)
}

/// One relay under test.
struct Target {
    name: String,
    url: String,
    stored: usize,
    /// Of which filled (old) events.
    filled: usize,
    /// Why it is left out of the rest of the run.
    failed: Option<&'static str>,
    /// Kept alive while the relay runs.
    _guard: Guard,
}

#[allow(dead_code)] // each variant only holds what must live as long as its relay
enum Guard {
    Ours(Arc<Relay>, tokio::task::JoinHandle<()>),
    Python(Child),
    InProcess(Box<nostr_relay_builder::prelude::LocalRelay>),
}

impl Drop for Guard {
    fn drop(&mut self) {
        match self {
            Guard::Ours(relay, server) => {
                relay.close_all();
                server.abort();
            }
            Guard::Python(child) => {
                drop(child.stdin.take()); // the script stops when its stdin closes
                let _ = child.wait();
            }
            Guard::InProcess(local) => local.shutdown(),
        }
    }
}

fn start_python(python: &Path) -> Target {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("relay_baseline.py");
    let mut child = Command::new(python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| {
            eprintln!(
                "relay: cannot run {} ({e}); bench/relay.sh makes a venv with nostr-sdk 0.45.1, \
                 or pass --python PATH or --baselines 0.44",
                python.display()
            );
            std::process::exit(1)
        });
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .expect("the baseline prints its URL");
    assert!(line.starts_with("ws://"), "baseline said {line:?}");
    Target {
        name: "LocalRelay 0.45.1".into(),
        url: line.trim().to_owned(),
        stored: 0,
        filled: 0,
        failed: None,
        _guard: Guard::Python(child),
    }
}

/// `nostr-relay-builder` 0.44.1's `LocalRelay` in this process, from `builder` (which
/// picks its store), with the rate limit raised.
async fn local_044(name: &str, builder: nostr_relay_builder::prelude::RelayBuilder) -> Target {
    use nostr_relay_builder::prelude::*;
    let builder = builder
        .addr(std::net::IpAddr::from([127, 0, 0, 1]))
        .rate_limit(RateLimit {
            max_reqs: 100_000,
            notes_per_minute: u32::MAX,
        });
    let local = LocalRelay::new(builder);
    local.run().await.expect("LocalRelay starts");
    Target {
        name: name.into(),
        url: local.url().await.to_string(),
        stored: 0,
        filled: 0,
        failed: None,
        _guard: Guard::InProcess(Box::new(local)),
    }
}

/// LocalRelay 0.44.1 on rust-nostr's LMDB store (`nostr-lmdb`) in `dir`.
#[cfg(feature = "lmdb-baseline")]
async fn start_lmdb(dir: &Path) -> Target {
    let db = nostr_lmdb::NostrLMDB::open(dir).expect("an LMDB store");
    local_044(
        "LocalRelay 0.44.1 LMDB",
        nostr_relay_builder::prelude::RelayBuilder::default().database(db),
    )
    .await
}

/// Built without the `lmdb-baseline` feature: says how to get it.
#[cfg(not(feature = "lmdb-baseline"))]
async fn start_lmdb(_dir: &Path) -> Target {
    eprintln!(
        "relay: the lmdb baseline needs the bench's `lmdb-baseline` feature (bench/relay.sh \
         builds with it)"
    );
    std::process::exit(2)
}

fn raised_limits() -> Limits {
    Limits {
        events_per_second: 1e9,
        event_burst: 1e9,
        reqs_per_second: 1e9,
        req_burst: 1e9,
        ..Limits::default()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

/// Parent: runs every relay and prints the comparison.
pub fn run(args: &[String]) {
    let o = parse(args);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("bench.db");
    drop(Store::create(&db).expect("a fresh store"));
    let (relay, url, server) = rt.block_on(serve(&db, raised_limits()));
    let mut targets = vec![Target {
        name: "fleetmesh".into(),
        url,
        stored: 0,
        filled: 0,
        failed: None,
        _guard: Guard::Ours(relay, server),
    }];
    for b in &o.baselines {
        targets.push(match b.as_str() {
            "0.44" => rt.block_on(local_044(
                "LocalRelay 0.44.1",
                nostr_relay_builder::prelude::RelayBuilder::default(),
            )),
            "lmdb" => rt.block_on(start_lmdb(&dir.path().join("lmdb"))),
            _ => start_python(&o.python),
        });
    }
    println!(
        "relay: prefill {:?}; rounds of {} events over {} connections ({} in flight each), \
         then {} REQs; {} rounds per relay per stage, alternating; load generator in a child \
         process",
        o.prefill, o.events, o.conns, o.window, o.reqs, o.rounds
    );
    for &stage in &o.prefill {
        println!("\n== {stage} events stored before the rounds ==");
        for t in &mut targets {
            if t.stored < stage && t.failed.is_none() {
                let count = stage - t.stored;
                let args = [
                    "fill".into(),
                    t.url.clone(),
                    count.to_string(),
                    o.conns.to_string(),
                ];
                match client(&args) {
                    Some((r, _)) => println!(
                        "fill {:<20} {count:>9} events at {:>8.0} events/s ({} accepted)",
                        t.name,
                        r["events_per_sec"].as_f64().unwrap_or(f64::NAN),
                        r["accepted"]
                    ),
                    None => t.failed = Some("the fill failed"),
                }
                t.stored = stage;
                t.filled += count;
            }
        }
        let mut reports: Vec<Vec<(Value, Duration)>> = vec![Vec::new(); targets.len()];
        for _ in 0..o.rounds {
            for (t, rep) in targets.iter_mut().zip(&mut reports) {
                if t.failed.is_some() {
                    continue;
                }
                let args = [
                    "round".into(),
                    t.url.clone(),
                    o.events.to_string(),
                    o.conns.to_string(),
                    o.window.to_string(),
                    o.reqs.to_string(),
                    t.filled.to_string(),
                ];
                match client(&args) {
                    Some(r) => rep.push(r),
                    None => t.failed = Some("a round failed"),
                }
                t.stored += o.events;
            }
        }
        for t in &targets {
            if let Some(why) = t.failed {
                println!("{}: left out ({why}; its messages are above)", t.name);
            }
        }
        print_stage(&o, &targets, &reports);
    }
    drop(targets); // every relay stops (ours closes its connections: Guard's drop)
    let store = Store::open_read_only(&db).expect("our store");
    let (n, size) = (
        store.event_count().expect("count"),
        store.size_bytes().expect("size"),
    );
    println!(
        "\nours: {n} events in {:.1} MB ({:.0} bytes per event)",
        size as f64 / 1e6,
        size as f64 / n.max(1) as f64
    );
    let all =
        Filter::from_value(&serde_json::json!({}), FilterLimits { max_values: 1 }).expect("filter");
    let t = Instant::now();
    let items = store
        .negentropy_items(&[all], usize::MAX, fleetmesh_proto::unix_now())
        .expect("items")
        .expect("no bound");
    println!(
        "ours: NIP-77 items of all {} events in {:.3} s",
        items.len(),
        t.elapsed().as_secs_f64()
    );
}

/// A printed row: its name, how it is read off a report, and whether higher is better.
type Row<'a> = (&'static str, Box<dyn Fn(&Value) -> f64 + 'a>, bool);

fn print_stage(o: &Opts, targets: &[Target], reports: &[Vec<(Value, Duration)>]) {
    let med = |i: usize, f: &dyn Fn(&Value) -> f64| {
        median(reports[i].iter().map(|(r, _)| f(r)).collect())
    };
    let key = |k: &'static str| move |r: &Value| r[k].as_f64().unwrap_or(f64::NAN);
    let pair = |k: &'static str, j: usize| move |r: &Value| r[k][j].as_f64().unwrap_or(f64::NAN);
    let rows: Vec<Row<'_>> = vec![
        ("ingest events/s", Box::new(key("events_per_sec")), true),
        ("OK p50 ms", Box::new(key("ok_p50_ms")), false),
        ("OK p99 ms", Box::new(key("ok_p99_ms")), false),
        ("REQ->EOSE p50 ms", Box::new(key("eose_p50_ms")), false),
        ("REQ->EOSE p99 ms", Box::new(key("eose_p99_ms")), false),
        (
            "  author p50 ms",
            Box::new(pair("eose_author_ms", 0)),
            false,
        ),
        (
            "  author p99 ms",
            Box::new(pair("eose_author_ms", 1)),
            false,
        ),
        ("  kind+tag p50 ms", Box::new(pair("eose_tag_ms", 0)), false),
        ("  kind+tag p99 ms", Box::new(pair("eose_tag_ms", 1)), false),
        (
            "  time range p50 ms",
            Box::new(pair("eose_range_ms", 0)),
            false,
        ),
        (
            "  time range p99 ms",
            Box::new(pair("eose_range_ms", 1)),
            false,
        ),
        (
            "events per REQ",
            Box::new(move |r: &Value| key("req_events")(r) / o.reqs.max(1) as f64),
            true,
        ),
        ("empty REQs", Box::new(key("empty_reqs")), false),
        ("accepted", Box::new(key("accepted")), true),
    ];
    print!("{:<22}", "");
    for t in targets {
        print!(" {:>26}", t.name);
    }
    for t in &targets[1..] {
        print!(" {:>16}", format!("vs {}", short(&t.name)));
    }
    println!();
    for (name, f, higher_is_better) in rows {
        print!("{name:<22}");
        let vals: Vec<f64> = (0..targets.len()).map(|i| med(i, &*f)).collect();
        for v in &vals {
            print!(" {v:>26.2}");
        }
        if name.ends_with("ms") || name.starts_with("ingest") {
            for v in &vals[1..] {
                let ratio = if higher_is_better {
                    vals[0] / v
                } else {
                    v / vals[0]
                };
                print!(" {:>16}", format!("x{ratio:.2}"));
            }
        }
        println!();
    }
    print!("{:<22}", "client CPU s");
    for rep in reports {
        let cpu = median(rep.iter().map(|(_, c)| c.as_secs_f64()).collect());
        print!(" {cpu:>26.2}");
    }
    println!();
}

fn short(name: &str) -> &str {
    name.strip_prefix("LocalRelay ").unwrap_or(name)
}
