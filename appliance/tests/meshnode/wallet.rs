//! `meshnode wallet` against a real Cashu mint: nutshell (PyPI `cashu` 0.19.2, the
//! reference implementation) started by the test on loopback with its FakeWallet
//! Lightning backend, and nutshell's own wallet (`cashu`) as the other party. Nothing on
//! our side is mocked; amounts are computed from the mint's own keyset fee.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

use super::{assert_usage_error, meshnode, repo, run, stderr, stdout};

/// nutshell's bin directory (`mint`, `cashu`), installed by `nutshell/nutshell.sh`;
/// `None`, with a message, only where python3 cannot make a venv and `CI` is not `true`.
pub(super) fn nutshell(what: &str) -> Option<PathBuf> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let venv = Command::new("python3")
        .args(["-m", "venv", "--help"])
        .output();
    if !venv.is_ok_and(|o| o.status.success()) {
        assert!(
            !ci,
            "CI=true but python3 cannot make a venv (.ci/test installs it)"
        );
        eprintln!("SKIPPED {what}: python3 with venv is not installed");
        return None;
    }
    let script = repo().join("appliance/tests/meshnode/nutshell/nutshell.sh");
    let o = Command::new(script).output().unwrap();
    assert!(o.status.success(), "nutshell.sh: {}", stderr(&o));
    Some(PathBuf::from(stdout(&o).trim()))
}

/// `GET url` as JSON, `None` if it does not answer 2xx.
fn get_json(url: &str) -> Option<Value> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let r = reqwest::blocking::get(url).ok()?;
    r.status().is_success().then(|| r.json().ok()).flatten()
}

/// A nutshell mint on a free loopback port, killed when dropped.
pub(super) struct Mint {
    child: Child,
    pub(super) url: String,
    bin: PathBuf,
    dir: tempfile::TempDir,
}

impl Drop for Mint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Mint {
    pub(super) fn start(bin: &Path) -> Mint {
        let dir = tempfile::tempdir().unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(dir.path().join("mint.log")).unwrap();
        let child = Command::new(bin.join("mint"))
            .current_dir(dir.path())
            .env("MINT_BACKEND_BOLT11_SAT", "FakeWallet")
            .env("MINT_LISTEN_HOST", "127.0.0.1")
            .env("MINT_LISTEN_PORT", port.to_string())
            .env("MINT_PRIVATE_KEY", "fleetmesh wallet test mint")
            .env("MINT_DATABASE", dir.path().join("mint-db"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let mint = Mint {
            child,
            url: format!("http://127.0.0.1:{port}"),
            bin: bin.to_owned(),
            dir,
        };
        let info = format!("{}/v1/info", mint.url);
        super::peering::wait_until("nutshell's mint answers /v1/info", || {
            get_json(&info).is_some()
        });
        mint
    }

    /// The active sat keyset's input fee, thousandths of a sat per proof.
    fn fee_ppk(&self) -> u64 {
        let v = get_json(&format!("{}/v1/keysets", self.url)).unwrap();
        let set = v["keysets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["active"] == true && k["unit"] == "sat")
            .unwrap()
            .clone();
        set["input_fee_ppk"].as_u64().unwrap_or(0)
    }

    /// nutshell's own wallet (`cashu`), its files in the mint's directory.
    pub(super) fn cashu(&self, args: &[&str]) -> Output {
        Command::new(self.bin.join("cashu"))
            .arg("-y")
            .args(args)
            .env("CASHU_DIR", self.dir.path().join("nutshell-wallet"))
            .env("MINT_URL", &self.url)
            .output()
            .unwrap()
    }

    fn cashu_balance(&self) -> u64 {
        let o = self.cashu(&["balance"]);
        assert!(o.status.success(), "cashu balance: {}", stderr(&o));
        let text = stdout(&o);
        let n = text
            .split("Balance:")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("no balance in {text:?}"));
        n.parse().unwrap()
    }

    /// A token from nutshell's wallet, worth `amount`.
    fn cashu_send(&self, amount: u64) -> String {
        let o = self.cashu(&["send", &amount.to_string()]);
        assert!(o.status.success(), "cashu send: {}", stderr(&o));
        stdout(&o)
            .split_whitespace()
            .find(|w| w.starts_with("cashuB"))
            .unwrap_or_else(|| panic!("no token in {}", stdout(&o)))
            .to_owned()
    }
}

/// `meshnode wallet --key-dir DIR ARGS…`.
pub(super) fn wallet(dir: &Path, args: &[&str]) -> Output {
    let mut a = vec!["wallet", "--key-dir", dir.to_str().unwrap()];
    a.extend_from_slice(args);
    run(&a)
}

pub(super) fn ok(o: Output, what: &str) -> Output {
    assert!(o.status.success(), "{what}: {} {}", stdout(&o), stderr(&o));
    o
}

/// (unspent, sent, reserved) at `mint`.
pub(super) fn balance(dir: &Path, mint: &str) -> (u64, u64, u64) {
    let o = ok(wallet(dir, &["balance", "--json"]), "balance");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .find(|b| b["mint"] == mint)
        .map_or((0, 0, 0), |b| {
            let n = |k: &str| b[k].as_u64().unwrap();
            (n("unspent"), n("sent"), n("reserved"))
        })
}

/// The proofs a token carries, to compute the mint's input fee for it.
fn proofs_in(token: &str) -> u64 {
    fleetmesh_settle::cashu::Token::parse(token)
        .unwrap()
        .proofs
        .len() as u64
}

#[test]
fn tokens_go_both_ways_between_our_wallet_and_nutshells_own_against_a_real_mint() {
    let Some(bin) = nutshell("the Cashu wallet interop test") else {
        return;
    };
    let mint = Mint::start(&bin);
    let ppk = mint.fee_ppk();
    let home = tempfile::tempdir().unwrap();
    let dir = home.path();

    // Mint 100 sat (FakeWallet pays the invoice): the invoice is shown on stderr.
    let o = ok(
        wallet(dir, &["--mint", &mint.url, "mint", "--amount", "100"]),
        "mint",
    );
    let inv = stderr(&o);
    let invoice = inv
        .split_whitespace()
        .find(|w| w.starts_with("lnbc"))
        .unwrap();
    assert_eq!(
        fleetmesh_settle::bolt11::decode(invoice)
            .unwrap()
            .amount_msat,
        Some(100_000)
    );
    assert_eq!(balance(dir, &mint.url), (100, 0, 0));

    // Our token, taken by nutshell's wallet.
    let o = ok(
        wallet(dir, &["--mint", &mint.url, "send", "--amount", "30"]),
        "send",
    );
    let token = stdout(&o).trim().to_owned();
    assert!(token.starts_with("cashuB"), "{token}");
    let (unspent, sent, _) = balance(dir, &mint.url);
    assert_eq!(sent, 30);
    // 100 was minted as 64 + 32 + 4: no set adds up to 30, so the 64 is swapped
    assert_eq!(unspent, 100 - 30 - ppk.div_ceil(1000));
    let before = mint.cashu_balance();
    let o = mint.cashu(&["receive", &token]);
    assert!(o.status.success(), "cashu receive: {}", stderr(&o));
    let fee = (proofs_in(&token) * ppk).div_ceil(1000);
    assert_eq!(mint.cashu_balance(), before + 30 - fee);
    // The mint says the sent proofs are spent: `check` moves them out of "sent".
    let o = ok(wallet(dir, &["--mint", &mint.url, "check"]), "check");
    assert!(
        stderr(&o).contains("30 sat of sent tokens claimed"),
        "{}",
        stderr(&o)
    );
    assert_eq!(balance(dir, &mint.url), (unspent, 0, 0));

    // nutshell's token, taken by ours: refused until the mint is trusted.
    let o = mint.cashu(&["invoice", "100"]);
    assert!(o.status.success(), "cashu invoice: {}", stderr(&o));
    let theirs = mint.cashu_send(20);
    assert_usage_error(&wallet(dir, &["receive", &theirs]), "does not trust");
    let fee = (proofs_in(&theirs) * ppk).div_ceil(1000);
    ok(
        wallet(dir, &["--mint", &mint.url, "receive", &theirs]),
        "receive",
    );
    assert_eq!(balance(dir, &mint.url).0, unspent + 20 - fee);
    // ... and once only: the mint refuses spent proofs, the wallet says so.
    assert_usage_error(
        &wallet(dir, &["--mint", &mint.url, "receive", &theirs]),
        "already spent",
    );
    // A token locked (NUT-11 P2PK) to nutshell's wallet key is not ours to take.
    let o = mint.cashu(&["lock"]);
    let lock = stdout(&o)
        .split_whitespace()
        .find(|w| w.starts_with("P2PK:"))
        .unwrap_or_else(|| panic!("no lock in {}", stdout(&o)))
        .to_owned();
    let o = mint.cashu(&["send", "2", "--lock", &lock]);
    let locked = stdout(&o)
        .split_whitespace()
        .find(|w| w.starts_with("cashuB"))
        .unwrap()
        .to_owned();
    assert_usage_error(
        &wallet(dir, &["--mint", &mint.url, "receive", &locked]),
        "and this wallet has no key to sign with",
    );
    // A trusted mint in meshnode.toml does as well as --mint; the token read from stdin.
    std::fs::write(
        dir.join("meshnode.toml"),
        format!("[settlement]\nmints = [\"{}/\"]\n", mint.url),
    )
    .unwrap();
    let theirs = mint.cashu_send(8);
    let have = balance(dir, &mint.url).0;
    let fee = (proofs_in(&theirs) * ppk).div_ceil(1000);
    let mut cmd = meshnode();
    cmd.args(["wallet", "--key-dir", dir.to_str().unwrap(), "receive", "-"]);
    ok(
        super::with_stdin(cmd, theirs.as_bytes()),
        "receive from stdin",
    );
    assert_eq!(balance(dir, &mint.url).0, have + 8 - fee);

    // Pay an invoice of nutshell's wallet from our ecash (melt); the unused fee reserve
    // comes back as change.
    let o = mint.cashu(&["invoice", "10", "--no-check"]);
    let text = stdout(&o) + &stderr(&o);
    let invoice = text
        .split_whitespace()
        .find(|w| w.starts_with("lnbc"))
        .unwrap_or_else(|| panic!("no invoice in {text}"));
    let have = balance(dir, &mint.url).0;
    let o = ok(wallet(dir, &["pay", invoice]), "pay");
    let said = stderr(&o);
    let fee: u64 = said
        .split("(fee ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(balance(dir, &mint.url), (have - 10 - fee, 0, 0));
    let o = ok(wallet(dir, &["history", "--json"]), "history");
    let h: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let kinds: Vec<&str> = h
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["pay", "receive", "receive", "send", "mint"]);
}

#[test]
fn a_wallet_killed_between_the_mints_answer_and_its_record_loses_nothing() {
    let Some(bin) = nutshell("the Cashu wallet crash test") else {
        return;
    };
    let mint = Mint::start(&bin);
    let ppk = mint.fee_ppk();
    let home = tempfile::tempdir().unwrap();
    let dir = home.path();
    let crash = |args: &[&str]| {
        let mut a = vec![
            "wallet",
            "--key-dir",
            dir.to_str().unwrap(),
            "--mint",
            &mint.url,
        ];
        a.extend_from_slice(args);
        let o = meshnode()
            .args(&a)
            .env("MESHNODE_WALLET_FAULT", "exit-after-answer")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(70), "{}", stderr(&o));
        assert!(stderr(&o).contains("fault injected"), "{}", stderr(&o));
    };
    let check = || {
        let o = ok(wallet(dir, &["--mint", &mint.url, "check"]), "check");
        stderr(&o)
    };

    // Minting: the mint signed, the process died before writing the proofs down.
    crash(&["mint", "--amount", "64"]);
    assert_eq!(balance(dir, &mint.url), (0, 0, 0));
    assert!(check().contains("64 sat recovered"));
    assert_eq!(balance(dir, &mint.url), (64, 0, 0));

    // Receiving: the token's proofs are spent at the mint, ours restored.
    let theirs = {
        let o = mint.cashu(&["invoice", "50"]);
        assert!(o.status.success(), "{}", stderr(&o));
        mint.cashu_send(21)
    };
    let fee = (proofs_in(&theirs) * ppk).div_ceil(1000);
    crash(&["receive", &theirs]);
    assert_eq!(balance(dir, &mint.url), (64, 0, 0));
    check();
    assert_eq!(balance(dir, &mint.url), (64 + 21 - fee, 0, 0));

    // Sending with a swap (no proofs add up to 3): the input (the 64, largest first) stays
    // reserved, not spendable twice, until recovery finds it spent and restores the new
    // proofs; the token never reached anyone, so all of them are ours again.
    let total = 64 + 21 - fee;
    crash(&["send", "--amount", "3"]);
    assert_eq!(balance(dir, &mint.url), (total - 64, 0, 64));
    check();
    let unspent = total - ppk.div_ceil(1000);
    assert_eq!(balance(dir, &mint.url), (unspent, 0, 0));

    // Paying: the invoice is paid, the change restored.
    let o = mint.cashu(&["invoice", "5", "--no-check"]);
    let text = stdout(&o) + &stderr(&o);
    let invoice = text
        .split_whitespace()
        .find(|w| w.starts_with("lnbc"))
        .unwrap()
        .to_owned();
    let before = unspent;
    crash(&["pay", &invoice]);
    check();
    let (after, _, reserved) = balance(dir, &mint.url);
    assert_eq!(reserved, 0);
    assert!(
        after < before - 5 + 1 && after + 5 + 3 >= before,
        "{before} → {after}"
    );
    // and paying it again is refused by the mint (already paid), inputs back
    let o = wallet(dir, &["--mint", &mint.url, "pay", &invoice]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(balance(dir, &mint.url).0, after);

    // A backup restored after the wallet spent what it holds: `check` asks the mint and
    // stops counting proofs it says are spent (here: all of them, swapped by a receive
    // the backup never saw).
    let held = balance(dir, &mint.url).0;
    let backup = dir.join("wallet.backup");
    std::fs::copy(dir.join("wallet.sqlite"), &backup).unwrap();
    let o = ok(
        wallet(
            dir,
            &["--mint", &mint.url, "send", "--amount", &held.to_string()],
        ),
        "send all",
    );
    let token = stdout(&o).trim().to_owned();
    ok(
        wallet(dir, &["--mint", &mint.url, "receive", &token]),
        "take it back",
    );
    for side in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.join(format!("wallet.sqlite{side}")));
    }
    std::fs::copy(&backup, dir.join("wallet.sqlite")).unwrap();
    assert_eq!(balance(dir, &mint.url).0, held, "the backup believes it");
    let said = check();
    assert!(
        said.contains(&format!("{held} sat held here were already spent")),
        "{said}"
    );
    assert_eq!(balance(dir, &mint.url), (0, 0, 0));
}

#[test]
fn the_wallet_refuses_bad_input_with_a_reason() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path();
    let cases: [(&[&str], &str); 5] = [
        (&["receive", "cashuBnotatoken"], "token"),
        (&["receive", "hello"], "cashuA or cashuB"),
        (
            &["--mint", "ftp://mint.example", "send", "--amount", "1"],
            "not an http(s) URL",
        ),
        (
            &["--mint", "http://127.0.0.1:1", "send", "--amount", "0"],
            "amount 0",
        ),
        // not enough ecash: said before any mint is asked
        (
            &["--mint", "http://127.0.0.1:1", "send", "--amount", "5"],
            "not enough ecash",
        ),
    ];
    for (args, says) in cases {
        assert_usage_error(&wallet(dir, args), says);
    }
    // An expired invoice (BOLT #11's own example, 2017) is refused before any mint is asked.
    let v: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("appliance/settle/vectors/bolt11.json")).unwrap(),
    )
    .unwrap();
    let expired = v["valid"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["amount_msat"].is_u64())
        .unwrap()["invoice"]
        .as_str()
        .unwrap();
    assert_usage_error(
        &wallet(dir, &["--mint", "http://127.0.0.1:1", "pay", expired]),
        "expired",
    );
    // A config with a mint that is not a URL stops the wallet, naming the key.
    std::fs::write(
        dir.join("meshnode.toml"),
        "[settlement]\nmints = [\"mint.example\"]\n",
    )
    .unwrap();
    let o = wallet(dir, &["balance"]);
    assert!(
        !o.status.success() && stderr(&o).contains("[settlement] mints"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn locked_tokens_are_escrow_nutshell_unlocks_ours_we_unlock_theirs_refunds_wait_for_the_locktime() {
    let Some(bin) = nutshell("the Cashu lock interop test") else {
        return;
    };
    let mint = Mint::start(&bin);
    let ppk = mint.fee_ppk();
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("node");
    assert!(super::init(&dir, &[]).status.success());
    let our_key = stdout(&ok(wallet(&dir, &["key"]), "key")).trim().to_owned();
    let m = |args: &[&str]| {
        let mut a = vec!["--mint", mint.url.as_str()];
        a.extend_from_slice(args);
        wallet(&dir, &a)
    };
    ok(m(&["mint", "--amount", "100"]), "mint");
    let o = mint.cashu(&["invoice", "100"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = mint.cashu(&["lock"]);
    let theirs = stdout(&o)
        .split_whitespace()
        .find_map(|w| w.strip_prefix("P2PK:"))
        .unwrap()
        .to_owned();

    // Ours locked to nutshell's key (NUT-11): we cannot take it back, nutshell can.
    let o = ok(
        m(&["send", "--amount", "10", "--lock", &theirs]),
        "send --lock",
    );
    let token = stdout(&o).trim().to_owned();
    assert_usage_error(&m(&["receive", &token]), "not this wallet's key");
    let before = mint.cashu_balance();
    let o = mint.cashu(&["receive", &token]);
    assert!(o.status.success(), "cashu receive: {}", stderr(&o));
    assert_eq!(
        mint.cashu_balance(),
        before + 10 - (proofs_in(&token) * ppk).div_ceil(1000)
    );

    // nutshell's locked to our key: we sign for it.
    let o = mint.cashu(&["send", "6", "--lock", &format!("P2PK:{our_key}")]);
    assert!(o.status.success(), "cashu send --lock: {}", stderr(&o));
    let token = stdout(&o)
        .split_whitespace()
        .find(|w| w.starts_with("cashuB"))
        .unwrap()
        .to_owned();
    let have = balance(&dir, &mint.url).0;
    ok(m(&["receive", &token]), "receive a token locked to us");
    assert_eq!(
        balance(&dir, &mint.url).0,
        have + 6 - (proofs_in(&token) * ppk).div_ceil(1000)
    );

    // Escrow's refund: locked to nutshell with a refund to us after a locktime 3 s ahead;
    // before it we are refused, after it the mint takes our signature.
    let o = ok(
        m(&[
            "send",
            "--amount",
            "8",
            "--lock",
            &theirs,
            "--locktime",
            "+3",
            "--refund",
            "self",
        ]),
        "send with a refund",
    );
    let token = stdout(&o).trim().to_owned();
    assert_usage_error(&m(&["receive", &token]), "not this wallet's key");
    std::thread::sleep(std::time::Duration::from_secs(4));
    let have = balance(&dir, &mint.url).0;
    ok(m(&["receive", &token]), "the refund after the locktime");
    assert_eq!(
        balance(&dir, &mint.url).0,
        have + 8 - (proofs_in(&token) * ppk).div_ceil(1000)
    );

    // HTLC (NUT-14) on a preimage, also locked to our key: the mint checks both.
    let preimage = hex::encode(rand_bytes());
    let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
        hex::decode(&preimage).unwrap(),
    ));
    let o = ok(
        m(&["send", "--amount", "4", "--hash", &hash, "--lock", &our_key]),
        "send --hash",
    );
    let token = stdout(&o).trim().to_owned();
    assert_usage_error(&m(&["receive", &token]), "give its preimage");
    let wrong = hex::encode(rand_bytes());
    assert_usage_error(
        &m(&["receive", &token, "--preimage", &wrong]),
        "does not hash",
    );
    let have = balance(&dir, &mint.url).0;
    ok(
        m(&["receive", &token, "--preimage", &preimage]),
        "receive with the preimage",
    );
    assert_eq!(
        balance(&dir, &mint.url).0,
        have + 4 - (proofs_in(&token) * ppk).div_ceil(1000)
    );
}

fn rand_bytes() -> [u8; 32] {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).unwrap();
    b
}
