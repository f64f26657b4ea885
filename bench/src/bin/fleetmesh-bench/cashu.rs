//! `cashu`: payments through the Cashu wallet, fleetmesh-settle against nutshell's own
//! wallet (PyPI `cashu` 0.19.2, the reference implementation, installed by
//! `appliance/tests/meshnode/nutshell/nutshell.sh`), both against one nutshell mint on
//! loopback with its FakeWallet backend, started here. A payment is a token one wallet
//! sends (8 sat, swapping when its proofs do not add up, as the CLIs do) and a second
//! receives (a swap); rounds
//! alternate, the Python side timing itself in process (`bench_wallet.py`, its start-up
//! excluded). With `--meshnode PATH`, also the two command-line wallets as a user runs
//! them: `meshnode wallet send` + `receive` against `cashu send` + `cashu receive`.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fleetmesh_bench::{Comparison, report};
use fleetmesh_settle::cashu::{MintClient, Wallet};

pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A nutshell mint on a free loopback port (its URL), killed when dropped.
pub(crate) struct Mint(Child, pub(crate) String);

impl Drop for Mint {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free loopback port.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

pub(crate) fn start_mint(bin: &Path, dir: &Path) -> Mint {
    let port = free_port();
    let child = Command::new(bin.join("mint"))
        .current_dir(dir)
        .env("MINT_BACKEND_BOLT11_SAT", "FakeWallet")
        .env("MINT_LISTEN_HOST", "127.0.0.1")
        .env("MINT_LISTEN_PORT", port.to_string())
        .env("MINT_PRIVATE_KEY", "fleetmesh bench mint")
        .env("MINT_DATABASE", dir.join("mint-db"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nutshell's mint starts");
    let url = format!("http://127.0.0.1:{port}");
    let client = MintClient::new(&url).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while client.info().is_err() {
        assert!(Instant::now() < deadline, "the mint answers within 60 s");
        std::thread::sleep(Duration::from_millis(200));
    }
    Mint(child, url)
}

/// Where nutshell (PyPI `cashu` 0.19.2) is installed, installing it the first time: the
/// folder of its `mint`, `cashu` and `python`.
pub(crate) fn nutshell() -> PathBuf {
    PathBuf::from(
        out(&mut Command::new(
            repo().join("appliance/tests/meshnode/nutshell/nutshell.sh"),
        ))
        .trim(),
    )
}

/// What one payment moves: enough that the payee's swap fee (1 sat for a few proofs at
/// nutshell's default 100 ppk) leaves it something; `bench_wallet.py` pays the same.
const PAY: u64 = 8;

/// `n` payments of [`PAY`] sat between our wallets: a token sent by the payer, received
/// by the payee.
fn ours(payer: &mut Wallet, payee: &mut Wallet, mint: &MintClient, n: usize) {
    for _ in 0..n {
        let (token, _) = payer.send(mint, PAY, None, None).expect("send");
        payee.receive(mint, &token, None).expect("receive");
    }
}

/// Runs `cmd`, which must succeed; its stdout.
pub(crate) fn out(cmd: &mut Command) -> String {
    let o = cmd.output().expect("runs");
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs the Cashu wallet benchmark: `cashu [N] [--rounds R] [--meshnode PATH]`.
pub fn run(args: &[String]) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (mut n, mut rounds, mut meshnode) = (20usize, 5usize, None::<PathBuf>);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rounds" => rounds = it.next().and_then(|v| v.parse().ok()).expect("--rounds R"),
            "--meshnode" => meshnode = it.next().map(PathBuf::from),
            v => n = v.parse().expect("N payments"),
        }
    }
    let bin = nutshell();
    let work = tempfile::tempdir().unwrap();
    let mint = start_mint(&bin, work.path());
    let client = MintClient::new(&mint.1).unwrap();
    let mut payer = Wallet::open(&work.path().join("payer.sqlite")).unwrap();
    let mut payee = Wallet::open(&work.path().join("payee.sqlite")).unwrap();
    let fund = 10 * (n * (rounds + 2)) as u64 + 64;
    payer
        .mint(&client, fund, Duration::from_secs(30), |_| {})
        .expect("minting our side");
    let mut peer = Command::new(bin.join("python"))
        .arg(repo().join("appliance/tests/meshnode/nutshell/bench_wallet.py"))
        .args([&mint.1, &n.to_string()])
        .arg(work.path().join("theirs"))
        .arg(rounds.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python runs");
    let mut to_peer = peer.stdin.take().unwrap();
    let mut from_peer = BufReader::new(peer.stdout.take().unwrap()).lines();
    assert_eq!(from_peer.next().unwrap().unwrap(), "ready");
    let mut theirs = || -> Duration {
        writeln!(to_peer, "round").unwrap();
        let ns: u64 = from_peer
            .next()
            .expect("a timing")
            .unwrap()
            .parse()
            .unwrap();
        Duration::from_nanos(ns)
    };
    println!(
        "cashu: {n} payments of {PAY} sat (send + receive) per round, {rounds} rounds, one nutshell mint"
    );
    // a warm-up round each
    ours(&mut payer, &mut payee, &client, n);
    theirs();
    let (mut us, mut them) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        ours(&mut payer, &mut payee, &client, n);
        us.push(t.elapsed());
        them.push(theirs());
    }
    let ops = n as u64;
    let c = Comparison::of_rounds(us, them, ops);
    report("payment, in process", "nutshell 0.19.2", &c);
    drop(to_peer);
    let _ = peer.wait();
    if let Some(meshnode) = meshnode {
        cli(&meshnode, &bin, &mint.1, work.path(), rounds);
    }
}

/// The command-line wallets, a payment per round each, a payer's wallet to a payee's:
/// `meshnode wallet` against nutshell's `cashu` (each a fresh process, as a user runs
/// them).
fn cli(meshnode: &Path, bin: &Path, url: &str, work: &Path, rounds: usize) {
    let mesh = |who: &str, args: &[&str]| {
        let dir = work.join(format!("cli-ours-{who}"));
        let mut cmd = Command::new(meshnode);
        cmd.args(["wallet", "--key-dir"])
            .arg(dir)
            .args(["--mint", url])
            .args(args);
        out(&mut cmd)
    };
    let cashu = |who: &str, args: &[&str]| {
        out(Command::new(bin.join("cashu"))
            .arg("-y")
            .args(args)
            .env("CASHU_DIR", work.join(format!("cli-theirs-{who}")))
            .env("MINT_URL", url))
    };
    let (fund, pay) = ((10 * (rounds + 1) as u64).to_string(), PAY.to_string());
    mesh("payer", &["mint", "--amount", &fund]);
    cashu("payer", &["invoice", &fund]);
    let (mut us, mut them) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        let token = mesh("payer", &["send", "--amount", &pay]);
        mesh("payee", &["receive", token.trim()]);
        us.push(t.elapsed());
        let t = Instant::now();
        let sent = cashu("payer", &["send", &pay]);
        let token = sent
            .split_whitespace()
            .find(|w| w.starts_with("cashu"))
            .expect("a token")
            .to_owned();
        cashu("payee", &["receive", &token]);
        them.push(t.elapsed());
    }
    let c = Comparison::of_rounds(us, them, 1);
    report("payment, command line", "cashu CLI 0.19.2", &c);
}
