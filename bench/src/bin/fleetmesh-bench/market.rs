//! `market`: a paid job's round trip through the market, by phase, on a cluster of three
//! provider nodes with a nutshell mint (FakeWallet) on loopback, as a buyer runs it:
//! `meshnode job submit JOB --route auto --pay cashu` (a fresh process per job).
//!
//! ```text
//! fleetmesh-bench market --meshnode PATH [N]
//! ```
//!
//! Node 0's relay is where the market meets (the buyer's `--node`); nodes 1 and 2 read asks
//! there (`[node] relays`). The three sell the same wasm job at 1, 2 and 3 sat; the buyer
//! bids 3 sat, so all three offer and the cheapest runs it. The phases are read off the
//! buyer's stderr lines as they come (each timed when read) and the provider's log:
//! - *start*: the process up, its keys and job file read, the providers' terms read;
//! - *offers*: the ask out until every provider that sells it has offered (`--offer-secs`
//!   is only the ceiling);
//! - *choose*: the buyer's NIP-85 standings read, the offers ranked;
//! - *escrow*: the price locked to the provider at the mint (NUT-14 HTLC, delivery mode);
//! - *job*: gift-wrapped to the provider, run, answered, the result opened and the receipt
//!   checked, the process gone;
//! - *redeem*: on the provider, from the job sent until its log says the escrow was
//!   redeemed (the clock of its log lines, the same machine's).
//!
//! No baseline runs the same protocol; the figures are absolute, and what they are for is
//! where a round trip's time goes. Payments against nutshell's own wallet are `cashu`.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fleetmesh_bench::median;
use serde_json::{Value, json};

use crate::cashu::{free_port, nutshell, out, repo, start_mint};

/// A provider node, killed when dropped; its log is `DIR/log`.
struct Node {
    child: Child,
    dir: PathBuf,
    url: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Initialises and starts provider `i` (selling wasm at `i + 1` sat a job at `mint`,
/// reading asks on `market`'s relay when given).
fn provider(bin: &Path, work: &Path, i: usize, mint: &str, market: Option<&str>) -> Node {
    let dir = work.join(format!("node{i}"));
    out(Command::new(bin).arg("init").arg(&dir));
    let path = dir.join("meshnode.toml");
    let mut toml = std::fs::read_to_string(&path).expect("meshnode.toml");
    let relays = market.map_or(String::new(), |m| format!("\"ws://{m}/\""));
    for (from, to) in [
        (
            "[jobs.prices]\n".to_owned(),
            format!(
                "[jobs.prices]\nwasm = {{ amount = {}, unit = \"sat\", per = \"job\" }}\n",
                i + 1
            ),
        ),
        ("mints = []".to_owned(), format!("mints = [\"{mint}\"]")),
        ("\nrelays = []".to_owned(), format!("\nrelays = [{relays}]")),
    ] {
        assert!(toml.contains(&from), "{from:?} in meshnode.toml");
        toml = toml.replacen(&from, &to, 1);
    }
    std::fs::write(&path, toml).expect("meshnode.toml written");
    let port = free_port();
    let log = std::fs::File::create(dir.join("log")).expect("a log file");
    let mut child = Command::new(bin)
        .arg("run")
        .arg(&dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("MESHNODE_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("meshnode run");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("the node says where it listens");
    assert!(first.starts_with("meshnode listening on"), "{first:?}");
    Node {
        child,
        dir,
        url: format!("127.0.0.1:{port}"),
    }
}

/// A buyer's stderr line and when it was read.
struct Line {
    at: Instant,
    wall: SystemTime,
    text: String,
}

/// One job's phases, and when it was sent (for the provider's redeem).
struct Trip {
    phases: [Duration; 5],
    sent: SystemTime,
}

const PHASES: [&str; 5] = ["start", "offers", "choose", "escrow", "job"];

/// Runs `job submit` of `file` and times its phases.
fn trip(bin: &Path, file: &Path, buyer: &Path, market: &str, mint: &str) -> Trip {
    let start = Instant::now();
    let mut child = Command::new(bin)
        .args(["job", "submit"])
        .arg(file)
        .args(["--route", "auto", "--offer-secs", "60", "--wait-secs", "60"])
        .args(["--node", &format!("http://{market}"), "--key-dir"])
        .arg(buyer)
        .args(["--pay", "cashu", "--mint", mint])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("meshnode job submit");
    let err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        BufReader::new(err)
            .lines()
            .map_while(Result::ok)
            .map(|text| Line {
                at: Instant::now(),
                wall: SystemTime::now(),
                text,
            })
            .collect::<Vec<_>>()
    });
    let o = child.wait_with_output().expect("the buyer's answer");
    let end = Instant::now();
    let lines = reader.join().expect("stderr read");
    let said = || lines.iter().map(|l| l.text.as_str()).collect::<Vec<_>>();
    assert!(o.status.success(), "job submit: {:?}", said());
    let answer: Value = String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_default();
    assert_eq!(answer["job"]["state"], "verified", "{answer}");
    let find = |what: &str| {
        lines
            .iter()
            .find(|l| l.text.contains(what))
            .unwrap_or_else(|| panic!("no {what:?} in {:?}", said()))
    };
    let marks = [
        start,
        find(") published on").at,
        find("has offered").at,
        find("meshnode: offer from").at,
        find("meshnode: sending the job to").at,
        end,
    ];
    let mut phases = [Duration::ZERO; 5];
    for (p, w) in phases.iter_mut().zip(marks.windows(2)) {
        *p = w[1].saturating_duration_since(w[0]);
    }
    Trip {
        phases,
        sent: find("meshnode: sending the job to").wall,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The time of a log line that starts with an RFC 3339 UTC timestamp
/// (`2026-12-03T17:30:01.123456Z`, tracing's default).
fn log_time(line: &str) -> Option<SystemTime> {
    let stamp = line.split_whitespace().next()?.strip_suffix('Z')?;
    let (date, time) = stamp.split_once('T')?;
    let mut ymd = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, mo, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let mut hms = time.split(':');
    let (h, mi) = (
        hms.next()?.parse::<i64>().ok()?,
        hms.next()?.parse::<i64>().ok()?,
    );
    let secs: f64 = hms.next()?.parse().ok()?;
    let whole = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60;
    let at = Duration::from_secs(u64::try_from(whole).ok()?) + Duration::from_secs_f64(secs);
    Some(UNIX_EPOCH + at)
}

/// When the providers' logs say escrows were redeemed, in order.
fn redeemed(nodes: &[Node]) -> Vec<SystemTime> {
    let mut all: Vec<SystemTime> = nodes
        .iter()
        .flat_map(|n| {
            std::fs::read_to_string(n.dir.join("log"))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("job payment redeemed"))
                .filter_map(log_time)
                .collect::<Vec<_>>()
        })
        .collect();
    all.sort();
    all
}

/// Runs the market benchmark: `market --meshnode PATH [N]`.
pub fn run(args: &[String]) {
    let (mut n, mut meshnode) = (10usize, None::<PathBuf>);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--meshnode" => meshnode = it.next().map(PathBuf::from),
            v => n = v.parse().expect("N jobs"),
        }
    }
    let bin = meshnode.expect("--meshnode PATH: a release build of meshnode");
    let work = tempfile::tempdir().expect("a work folder");
    let mint = start_mint(&nutshell(), work.path());
    let first = provider(&bin, work.path(), 0, &mint.1, None);
    let market = first.url.clone();
    let mut nodes = vec![first];
    for i in 1..3 {
        nodes.push(provider(&bin, work.path(), i, &mint.1, Some(&market)));
    }
    let node = format!("http://{market}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let shown =
            out(Command::new(&bin).args(["market", "providers", "--json", "--node", &node]));
        let seen = serde_json::from_str::<Value>(shown.trim())
            .ok()
            .and_then(|v| v.as_array().map(Vec::len));
        if seen == Some(3) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "three providers' terms within 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let buyer = work.path().join("buyer");
    out(Command::new(&bin).arg("init").arg(&buyer));
    let fund = (4 * (n + 1) + 16).to_string();
    out(Command::new(&bin)
        .args(["wallet", "--key-dir"])
        .arg(&buyer)
        .args(["--mint", &mint.1, "mint", "--amount", &fund]));
    let jobs = work.path().join("jobs");
    std::fs::create_dir_all(&jobs).expect("a jobs folder");
    std::fs::copy(
        repo().join("appliance/demo/upper.wat"),
        jobs.join("upper.wat"),
    )
    .expect("the demo module");
    std::fs::write(jobs.join("in.txt"), "round trip").expect("the input");
    println!(
        "market: {n} paid wasm jobs through `job submit --route auto --pay cashu`, 3 provider nodes, one nutshell mint (first job a warm-up)"
    );
    let mut trips = Vec::new();
    for i in 0..=n {
        let file = jobs.join(format!("job{i}.json"));
        let job = json!({"engine": "wasm", "mode": "delivery", "module": "upper.wat",
            "input": "in.txt", "limits": {"fuel": 10_000_000}, "name": format!("trip-{i}"),
            "bid": {"amount": 3000, "unit": "msat"}});
        std::fs::write(&file, job.to_string()).expect("the job file");
        let t = trip(&bin, &file, &buyer, &market, &mint.1);
        if i > 0 {
            trips.push(t);
        }
    }
    // the provider redeems after it answered: wait for the last one
    let deadline = Instant::now() + Duration::from_secs(30);
    while redeemed(&nodes).len() < n + 1 {
        assert!(
            Instant::now() < deadline,
            "every escrow redeemed within 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let redeems = redeemed(&nodes);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    for (k, name) in PHASES.iter().enumerate() {
        let each: Vec<Duration> = trips.iter().map(|t| t.phases[k]).collect();
        println!("  {name:<8} median {:>8.1} ms", ms(median(each)));
    }
    let totals: Vec<Duration> = trips.iter().map(|t| t.phases.iter().sum()).collect();
    println!("  {:<8} median {:>8.1} ms", "total", ms(median(totals)));
    let after: Vec<Duration> = trips
        .iter()
        .zip(&redeems[1..])
        .map(|(t, r)| r.duration_since(t.sent).unwrap_or_default())
        .collect();
    println!(
        "  {:<8} median {:>8.1} ms after the job was sent",
        "redeem",
        ms(median(after))
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_times_read_as_unix_time() {
        let t = log_time("2026-12-03T17:30:01.250000Z  INFO x: job payment redeemed").unwrap();
        let since = t.duration_since(UNIX_EPOCH).unwrap();
        // 2026-12-03 is day 20 790 since 1970-01-01
        assert_eq!(since.as_secs(), 20_790 * 86_400 + 17 * 3600 + 30 * 60 + 1);
        assert_eq!(since.subsec_millis(), 250);
        assert!(log_time("not a time").is_none());
    }
}
