//! `meshnode wallet …`: the node's Cashu wallet ([`fleetmesh_settle::cashu`]) from the
//! command line. Its proofs live in `wallet.sqlite` in the node directory (or
//! `--key-dir`); the mints it trusts are `[settlement] mints` of the `meshnode.toml`
//! there, and `--mint`.
//!
//! `send` prints nothing but the token on stdout, so that it can be piped; everything
//! else goes to stderr. A refusal (by the mint or by the wallet) exits 2 with its reason.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use fleetmesh_ledger::settlement::State::{Escrowed, Refunded};
use fleetmesh_settle::SettleError;
use fleetmesh_settle::cashu::nut10::Lock;
use fleetmesh_settle::cashu::{MintClient, Token, Wallet, token::normalize_mint};

use crate::cli::Outcome;

use fleetmesh_settle::cashu::WALLET_FILE;

/// How `meshnode job submit` pays.
#[derive(Debug, Args)]
pub struct PayArgs {
    /// Pay for the job: `cashu` locks the ask's bid (with --route auto the price the
    /// chosen provider offered; in sats, plus the mint's fee for redeeming it) from the buyer's wallet (`wallet.sqlite` of `--key-dir`, else of the
    /// buyer identity) to the provider's key, refundable to the buyer ten minutes after
    /// the ask expires (`meshnode wallet check` takes it back then if unredeemed).
    /// `l402` pays the node's HTTP API when it prices `/v1/jobs` (`[api.prices]`): the
    /// invoice of its `402` answer, at most the bid, through the buyer's
    /// `[settlement.lightning]` (or its Cashu wallet), then the job is sent again with the
    /// credential (`--node`, over HTTP).
    /// `nwc` is `l402` paid through the NWC wallet of `--nwc-uri`.
    #[arg(long, value_name = "cashu|l402|nwc", value_parser = ["cashu", "l402", "nwc"])]
    pub pay: Option<String>,
    /// The NWC wallet `--pay nwc` pays through (its `nostr+walletconnect://` URI).
    #[arg(
        long,
        env = "MESHNODE_NWC_URI",
        hide_env_values = true,
        value_name = "URI",
        requires = "pay"
    )]
    pub nwc_uri: Option<String>,
    /// The mint to pay from [default: the first of `[settlement] mints` of the buyer's
    /// directory, else the one mint its wallet holds ecash of].
    #[arg(long, value_name = "URL", requires = "pay")]
    pub mint: Option<String>,
}

/// Seconds after the ask's expiration when a buyer may take an unredeemed escrow back.
pub const REFUND_GRACE_SECS: u64 = 600;

/// The payment (compute/1.0 `payment`) for job `job_id`: the ask's `bid` (msat or sat) in
/// sats plus the redeem fee, locked to `provider` with a refund to `buyer` after
/// `expires_at` and [`REFUND_GRACE_SECS`], from the wallet in `dir`. With the node's
/// `offer` (its NIP-11 `fleetmesh` object), a bid under its price or a mint it does not
/// take is refused before anything is locked; with `htlc` (a delivery-mode offer's hash)
/// the lock is a NUT-14 HTLC with the provider's key. Says on stderr what it locked.
#[allow(clippy::too_many_arguments)]
pub fn pay_job(
    args: &PayArgs,
    dir: &Path,
    buyer: &secp256k1::Keypair,
    provider: &str,
    job_id: &str,
    (bid, limits, engine): (
        &serde_json::Value,
        &serde_json::Value,
        fleetmesh_proto::Engine,
    ),
    expires_at: u64,
    (offer, htlc): (Option<&serde_json::Value>, Option<&str>),
) -> anyhow::Result<Option<serde_json::Value>> {
    if args.pay.as_deref() != Some("cashu") {
        return Ok(None);
    }
    let amount = bid["amount"].as_u64().context("the bid has no amount")?;
    let sats = match bid["unit"].as_str() {
        Some("msat") => amount.div_ceil(1000),
        Some("sat") => amount,
        other => anyhow::bail!("--pay cashu pays sats; the bid is in {other:?}"),
    };
    let trusted = trusted_mints(dir)?;
    let mut wallet = Wallet::open(&dir.join(WALLET_FILE))?;
    wallet.set_key(*buyer);
    let mint = MintClient::new(&pick_mint(&wallet, args.mint.as_deref(), &trusted)?)?;
    if let Some(offer) = offer {
        let price = serde_json::from_value::<fleetmesh_market::service::Price>(
            offer["jobs"]["prices"][engine.as_str()].clone(),
        )
        .ok();
        let need = price.and_then(|p| fleetmesh_market::service::payments::price_sat(&p, limits));
        if let Some(need) = need.filter(|n| *n > sats) {
            anyhow::bail!(
                "the node charges up to {need} sat for this job; the bid is {sats} sat (set \
                 \"bid\" in the job file)"
            );
        }
        let takes: Vec<String> = offer["settlement"]["mints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m.as_str().map(normalize_mint))
            .collect();
        if !takes.iter().any(|m| m == mint.url()) {
            anyhow::bail!(
                "the node takes tokens of {}, not of {}: pay with --mint one of them",
                if takes.is_empty() {
                    "no mint".to_owned()
                } else {
                    takes.join(", ")
                },
                mint.url()
            );
        }
    }
    let locktime = expires_at + REFUND_GRACE_SECS;
    let refund = hex::encode(buyer.public_key().serialize());
    // delivery mode, where the provider offered one: an HTLC with its key, opened by the
    // preimage it sends with the output
    let lock = match htlc {
        Some(hash) => Lock::htlc(hash, Some(provider), Some(locktime), vec![refund])?,
        None => Lock::p2pk(provider, Some(locktime), vec![refund])?,
    };
    let gross = wallet.gross(&mint, sats.max(1))?;
    let (token, fee) = wallet.send(&mint, gross, Some(format!("job {job_id}")), Some(&lock))?;
    // in the buyer's books against the provider, the job named as its receipt will name it
    crate::settlement::record_as_buyer(
        dir,
        buyer,
        provider,
        crate::settlement::payer(
            Escrowed,
            mint.url(),
            gross,
            fleetmesh_proto::receipt::blinded_job_id(&buyer.secret_key(), provider, job_id).ok(),
        ),
    );
    let to = if htlc.is_some() {
        "the provider's key and delivery hash"
    } else {
        "the provider"
    };
    eprintln!(
        "meshnode: {gross} sat locked to {to} at {} (fee {fee} sat), refundable after {locktime}",
        mint.url()
    );
    Ok(Some(
        serde_json::json!({"method": "cashu", "token": token.to_v4()?}),
    ))
}

/// `meshnode wallet`.
#[derive(Debug, Args)]
pub struct WalletArgs {
    /// The mint to work with (http or https URL) [default: the first of `[settlement]
    /// mints`, else the one mint the wallet holds ecash of]. `receive` also trusts it.
    #[arg(long, global = true, value_name = "URL")]
    pub mint: Option<String>,
    /// The wallet's directory (its `wallet.sqlite` and `meshnode.toml`) [default:
    /// $MESHNODE_HOME or the platform data directory].
    #[arg(long, global = true, value_name = "DIR")]
    pub key_dir: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: WalletCommand,
}

/// `meshnode wallet …`.
#[derive(Debug, Subcommand)]
pub enum WalletCommand {
    /// Sats per mint: unspent, in sent tokens not yet claimed, in operations in flight.
    Balance {
        /// One JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Buy ecash: asks the mint for an invoice (shown on stderr), waits for it to be paid
    /// and mints the proofs (NUT-04).
    Mint {
        /// Sats.
        #[arg(long)]
        amount: u64,
        /// How long to wait for the payment, seconds.
        #[arg(long, default_value_t = 600)]
        wait_secs: u64,
    },
    /// Print a `cashuB…` token worth exactly `--amount` sats (swapping first when needed),
    /// optionally locked: escrow.
    Send {
        /// Sats.
        #[arg(long)]
        amount: u64,
        /// A note for the receiver, carried in the token.
        #[arg(long)]
        memo: Option<String>,
        /// Lock the token to this key (NUT-11 P2PK; a 33-byte compressed key or a Nostr
        /// key, hex, or `did:nostr:…`): only its holder can spend it.
        #[arg(long, value_name = "KEY")]
        lock: Option<String>,
        /// Lock it to the preimage of this SHA-256 hash (NUT-14 HTLC; hex), and to `--lock`'s
        /// key too when given.
        #[arg(long, value_name = "HEX")]
        hash: Option<String>,
        /// After this time (Unix seconds, or `+SECS` from now) the `--refund` keys may
        /// spend it instead (with none, anyone).
        #[arg(long, value_name = "UNIX|+SECS")]
        locktime: Option<String>,
        /// A key that may spend it after `--locktime`; `self` is this wallet's key.
        #[arg(long, value_name = "KEY|self")]
        refund: Vec<String>,
    },
    /// Take a token (`cashuB…` or `cashuA…`; `-` reads it from stdin): its proofs are
    /// swapped for fresh ones at its mint, which must be trusted. Proofs locked to this
    /// wallet's key are signed for.
    Receive {
        /// The token.
        #[arg(value_name = "TOKEN")]
        token: String,
        /// The preimage that opens an HTLC-locked token (hex).
        #[arg(long, value_name = "HEX")]
        preimage: Option<String>,
    },
    /// The public key tokens are locked to for this wallet (the node's Nostr key, 33-byte
    /// compressed hex), from `keys/` of the wallet's directory.
    Key,
    /// Pay a BOLT11 invoice with the mint's ecash (NUT-05); unused fee reserve comes back
    /// (NUT-08).
    Pay {
        /// The invoice.
        #[arg(value_name = "BOLT11")]
        invoice: String,
    },
    /// Finish operations an earlier run left in flight (NUT-09 restore), and ask the mint
    /// which sent tokens were claimed (NUT-07).
    Check,
    /// The latest payments in and out.
    History {
        /// How many.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// One JSON array.
        #[arg(long)]
        json: bool,
    },
}

/// `meshnode wallet …`.
pub fn run(args: &WalletArgs) -> anyhow::Result<Outcome> {
    let dir = crate::node::dir_or_home(args.key_dir.clone())?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let trusted = trusted_mints(&dir)?;
    let mut wallet = Wallet::open(&dir.join(WALLET_FILE))?;
    let key = crate::cli::job::keys_in(&dir, "the wallet's key")
        .ok()
        .map(|(_, k)| *k.nostr());
    if let Some(k) = key {
        wallet.set_key(k);
    }
    crate::settlement::fault_hook(&mut wallet);
    let result = match &args.command {
        WalletCommand::Balance { json } => balance(&wallet, *json),
        WalletCommand::History { limit, json } => history(&wallet, *limit, *json),
        WalletCommand::Key => {
            let k = key.with_context(|| {
                format!("no keys in {}: `meshnode init` makes them", dir.display())
            })?;
            println!("{}", hex::encode(k.public_key().serialize()));
            Ok(())
        }
        WalletCommand::Receive { token, preimage } => {
            let text = if token == "-" {
                crate::cli::read_input(
                    Path::new("-"),
                    fleetmesh_settle::cashu::token::MAX_TOKEN_CHARS as u64,
                    "the token",
                )?
            } else {
                token.clone()
            };
            receive(
                &mut wallet,
                args.mint.as_deref(),
                &trusted,
                &text,
                preimage.as_deref(),
            )
        }
        cmd => {
            let mint = MintClient::new(&pick_mint(&wallet, args.mint.as_deref(), &trusted)?)?;
            match cmd {
                WalletCommand::Mint { amount, wait_secs } => {
                    let got = wallet.mint(&mint, *amount, Duration::from_secs(*wait_secs), |q| {
                        eprintln!(
                            "meshnode wallet: pay this invoice to mint {amount} sat at {}:",
                            mint.url()
                        );
                        eprintln!("{}", q.request);
                    });
                    got.map(|n| eprintln!("meshnode wallet: minted {n} sat at {}", mint.url()))
                }
                WalletCommand::Send {
                    amount,
                    memo,
                    lock,
                    hash,
                    locktime,
                    refund,
                } => {
                    let lock = lock_of(key.as_ref(), lock, hash, locktime, refund)?;
                    let sent = wallet.send(&mint, *amount, memo.clone(), lock.as_ref());
                    sent.and_then(|(token, fee)| {
                        println!("{}", token.to_v4()?);
                        eprintln!(
                            "meshnode wallet: token of {amount} sat at {} (fee {fee} sat)",
                            mint.url()
                        );
                        Ok(())
                    })
                }
                WalletCommand::Pay { invoice } => wallet.pay(&mint, invoice).map(|p| {
                    eprintln!(
                        "meshnode wallet: paid {} sat (fee {} sat) from {}",
                        p.amount,
                        p.fee,
                        mint.url()
                    );
                    if let Some(pre) = &p.preimage {
                        println!("{pre}");
                    }
                }),
                WalletCommand::Check => wallet.check(&mint).map(|c| {
                    eprintln!(
                        "meshnode wallet: {} sat recovered, {} sat of sent tokens claimed, {} sat \
                         of escrow refunded at {}",
                        c.recovered,
                        c.claimed,
                        c.refunded,
                        mint.url()
                    );
                    if c.gone > 0 {
                        eprintln!(
                            "meshnode wallet: {} sat held here were already spent at the mint \
                             (a restored backup, or a copy of this wallet spent them)",
                            c.gone
                        );
                    }
                    // each refund in the books, against the key the escrow was locked to
                    if let Some(k) = &key {
                        for (payee, sats) in &c.refunds {
                            let s = crate::settlement::payer(Refunded, mint.url(), *sats, None);
                            crate::settlement::record_as_buyer(&dir, k, payee, s);
                        }
                    }
                }),
                _ => unreachable!("handled above"),
            }
        }
    };
    match result {
        Ok(()) => Ok(Outcome::Ok),
        Err(e @ (SettleError::Unreachable { .. } | SettleError::Store { .. })) => Err(e.into()),
        Err(e) => {
            eprintln!("meshnode wallet: {e}");
            Ok(Outcome::Malformed)
        }
    }
}

/// `[settlement] mints` of the directory's `meshnode.toml`, if it has one.
fn trusted_mints(dir: &Path) -> anyhow::Result<Vec<String>> {
    if !dir.join(crate::config::FILE).is_file() {
        return Ok(Vec::new());
    }
    let config = crate::config::Config::load(dir)?;
    Ok(config
        .settlement
        .mints
        .iter()
        .map(|m| normalize_mint(m))
        .collect())
}

/// The mint the wallet of `dir` pays at: `given`, else the first of its `[settlement]
/// mints`, else the one mint it holds ecash of.
pub fn mint_of(dir: &Path, given: Option<&str>) -> anyhow::Result<String> {
    let wallet = Wallet::open(&dir.join(WALLET_FILE))?;
    pick_mint(&wallet, given, &trusted_mints(dir)?)
}

/// `--mint`, else the first trusted mint, else the one mint the wallet holds ecash of.
fn pick_mint(wallet: &Wallet, given: Option<&str>, trusted: &[String]) -> anyhow::Result<String> {
    if let Some(m) = given
        .map(normalize_mint)
        .or_else(|| trusted.first().cloned())
    {
        return Ok(m);
    }
    let held: Vec<String> = wallet.balances()?.into_iter().map(|b| b.mint).collect();
    match held.as_slice() {
        [one] => Ok(one.clone()),
        [] => anyhow::bail!("no mint: name one with --mint URL or in [settlement] mints"),
        _ => anyhow::bail!(
            "the wallet holds ecash of {} mints: name one with --mint",
            held.len()
        ),
    }
}

/// The lock `send`'s flags describe, if any.
fn lock_of(
    key: Option<&secp256k1::Keypair>,
    to: &Option<String>,
    hash: &Option<String>,
    locktime: &Option<String>,
    refund: &[String],
) -> Result<Option<Lock>, SettleError> {
    let locktime = locktime
        .as_deref()
        .map(|t| match t.strip_prefix('+') {
            Some(secs) => secs.parse::<u64>().map(|s| fleetmesh_proto::unix_now() + s),
            None => t.parse(),
        })
        .transpose()
        .map_err(|_| SettleError::Refused("--locktime: Unix seconds or +SECS".into()))?;
    let refund = refund
        .iter()
        .map(|k| match (k.as_str(), key) {
            ("self", Some(ours)) => Ok(hex::encode(ours.public_key().serialize())),
            ("self", None) => Err(SettleError::Refused(
                "--refund self: this wallet has no key (meshnode init makes one)".into(),
            )),
            (k, _) => Ok(k.to_owned()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    match (to, hash) {
        (None, None) if locktime.is_some() || !refund.is_empty() => Err(SettleError::Refused(
            "--locktime and --refund go with --lock or --hash".into(),
        )),
        (None, None) => Ok(None),
        (Some(to), None) => Lock::p2pk(to, locktime, refund).map(Some),
        (to, Some(hash)) => Lock::htlc(hash, to.as_deref(), locktime, refund).map(Some),
    }
}

fn receive(
    wallet: &mut Wallet,
    given: Option<&str>,
    trusted: &[String],
    text: &str,
    preimage: Option<&str>,
) -> Result<(), SettleError> {
    let token = Token::parse(text)?;
    let given = given.map(normalize_mint);
    if given.as_deref() != Some(token.mint.as_str()) && !trusted.contains(&token.mint) {
        return Err(SettleError::Refused(format!(
            "token of mint {}, which this wallet does not trust: add it to [settlement] mints or pass --mint {}",
            token.mint, token.mint
        )));
    }
    let mint = MintClient::new(&token.mint)?;
    let (amount, fee) = wallet.receive(&mint, &token, preimage)?;
    eprintln!(
        "meshnode wallet: received {amount} sat at {} (fee {fee} sat)",
        mint.url()
    );
    Ok(())
}

fn balance(wallet: &Wallet, json: bool) -> Result<(), SettleError> {
    let balances = wallet.balances()?;
    if json {
        println!("{}", serde_json::to_string(&balances).unwrap_or_default());
        return Ok(());
    }
    for b in &balances {
        println!(
            "{}: {} sat ({} sat in sent tokens not yet claimed, {} sat in flight)",
            b.mint, b.unspent, b.sent, b.reserved
        );
    }
    println!(
        "total: {} sat",
        balances.iter().map(|b| b.unspent).sum::<u64>()
    );
    Ok(())
}

fn history(wallet: &Wallet, limit: usize, json: bool) -> Result<(), SettleError> {
    let lines = wallet.history(limit)?;
    if json {
        println!("{}", serde_json::to_string(&lines).unwrap_or_default());
        return Ok(());
    }
    for l in lines {
        println!(
            "{} {} {} sat (fee {}) {} {}",
            l.at, l.kind, l.amount, l.fee, l.mint, l.detail
        );
    }
    Ok(())
}
