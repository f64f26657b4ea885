//! `meshnode settle nwc-…`: Nostr Wallet Connect (NIP-47) from the command line. The
//! wallet side grants, lists and revokes connections to the node's wallet (`nwc.sqlite` in
//! the node directory, served by the daemon with `[settlement] nwc = true`); the client
//! side pays an invoice, asks the balance or makes an invoice through any NWC wallet
//! service given its connection URI (`--uri`, or `MESHNODE_NWC_URI`).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use fleetmesh_settle::nwc::{METHODS, Uri};
use serde_json::{Value, json};

use crate::cli::Outcome;

/// `meshnode settle nwc-connect`.
#[derive(Debug, Args)]
pub struct ConnectArgs {
    /// The node directory whose wallet the connection spends [default: $MESHNODE_HOME or
    /// the platform data directory].
    #[arg(long, value_name = "DIR")]
    pub key_dir: Option<PathBuf>,
    /// The connection's name (unique).
    #[arg(long)]
    pub name: String,
    /// Most sats it may spend in all (invoices and fees) [default: no limit].
    #[arg(long, value_name = "SATS")]
    pub budget: Option<u64>,
    /// The methods it may call, comma-separated [default: all: pay_invoice, make_invoice,
    /// lookup_invoice, list_transactions, get_balance, get_info].
    #[arg(long, value_delimiter = ',')]
    pub methods: Vec<String>,
    /// A relay the client reaches the node through (its own face, one of `[node]
    /// relays`). Repeatable; at least one.
    #[arg(long = "relay", value_name = "URL", required = true)]
    pub relays: Vec<String>,
}

/// `meshnode settle nwc-connections` and `nwc-revoke`.
#[derive(Debug, Args)]
pub struct GrantsArgs {
    /// The node directory [default: $MESHNODE_HOME or the platform data directory].
    #[arg(long, value_name = "DIR")]
    pub key_dir: Option<PathBuf>,
    /// `nwc-revoke`: the connection to end.
    #[arg(long)]
    pub name: Option<String>,
}

/// The client commands' connection.
#[derive(Debug, Args)]
pub struct ClientArgs {
    /// The wallet's connection URI (`nostr+walletconnect://…`).
    #[arg(
        long,
        env = "MESHNODE_NWC_URI",
        hide_env_values = true,
        value_name = "URI"
    )]
    pub uri: String,
    /// Seconds to wait for the wallet's answer.
    #[arg(long, default_value_t = 60)]
    pub wait_secs: u64,
}

/// `meshnode settle nwc-pay`.
#[derive(Debug, Args)]
pub struct PayArgs {
    /// The BOLT11 invoice to pay.
    #[arg(long, required_unless_present = "to", conflicts_with = "to")]
    pub invoice: Option<String>,
    /// Pay a Lightning address (`name@domain`), a bech32 `lnurl1…`, `lnurlp://…` or an
    /// LNURL-pay URL instead: its service is asked for an invoice of `--amount`, checked
    /// (amount, description hash) before paying.
    #[arg(long, value_name = "ADDRESS", requires = "amount")]
    pub to: Option<String>,
    /// Sats, with `--to`.
    #[arg(long, value_name = "SATS")]
    pub amount: Option<u64>,
    /// A comment for the payee, with `--to` (where its service takes comments).
    #[arg(long, value_name = "TEXT")]
    pub comment: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `meshnode settle nwc-invoice`.
#[derive(Debug, Args)]
pub struct InvoiceArgs {
    /// Sats.
    #[arg(long)]
    pub amount: u64,
    /// What it is for.
    #[arg(long)]
    pub description: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

fn node_dir(given: Option<&PathBuf>) -> anyhow::Result<PathBuf> {
    match given {
        Some(d) => Ok(d.clone()),
        None => crate::node::default_home(),
    }
}

/// `meshnode settle nwc-connect`: a new client key, granted; prints the URI (the only copy
/// of its secret).
pub fn connect(args: &ConnectArgs) -> anyhow::Result<Outcome> {
    let dir = node_dir(args.key_dir.as_ref())?;
    let config = crate::config::Config::load(&dir)?;
    let grants = config.settlement.nwc_grants(&dir)?;
    let client = fleetmesh_proto::NodeKeys::generate()?;
    let methods = if args.methods.is_empty() {
        METHODS.iter().map(|m| (*m).to_owned()).collect()
    } else {
        args.methods.clone()
    };
    let g = grants.grant(
        &args.name,
        &client.nostr_pubkey_hex(),
        &methods,
        args.budget,
    )?;
    let uri = Uri {
        wallet: grants.pubkey.clone(),
        relays: args.relays.clone(),
        secret: hex::encode(client.nostr().to_secret_bytes()),
        lud16: None,
    };
    Uri::parse(&uri.to_string())?;
    if !config.settlement.nwc {
        eprintln!(
            "meshnode: granted; the daemon serves it once [settlement] nwc = true in {}",
            dir.join(crate::config::FILE).display()
        );
    }
    eprintln!(
        "meshnode: connection {:?}: {} (budget {})",
        g.name,
        g.methods.join(", "),
        g.budget_sat
            .map_or("none".to_owned(), |b| format!("{b} sat"))
    );
    println!("{uri}");
    Ok(Outcome::Ok)
}

/// `meshnode settle nwc-connections`: one JSON line per connection.
pub fn connections(args: &GrantsArgs) -> anyhow::Result<Outcome> {
    let dir = node_dir(args.key_dir.as_ref())?;
    let config = crate::config::Config::load(&dir)?;
    for g in config.settlement.nwc_grants(&dir)?.list()? {
        println!("{}", serde_json::to_string(&g)?);
    }
    Ok(Outcome::Ok)
}

/// `meshnode settle nwc-revoke --name NAME`.
pub fn revoke(args: &GrantsArgs) -> anyhow::Result<Outcome> {
    let dir = node_dir(args.key_dir.as_ref())?;
    let name = args
        .name
        .as_deref()
        .context("--name: the connection to end")?;
    let config = crate::config::Config::load(&dir)?;
    anyhow::ensure!(
        config.settlement.nwc_grants(&dir)?.revoke(name)?,
        "no connection named {name:?}"
    );
    eprintln!("meshnode: connection {name:?} revoked");
    Ok(Outcome::Ok)
}

/// One request to the wallet of `args.uri`: its result, or the wallet's error (code and
/// message).
fn request(args: &ClientArgs, method: &str, params: Value) -> anyhow::Result<Result<Value, Value>> {
    let remotes: std::sync::Arc<dyn fleetmesh_port::Remotes> =
        std::sync::Arc::new(fleetmesh_relay::Client);
    Ok(fleetmesh_settle::nwc::request(
        &args.uri,
        args.wait_secs,
        method,
        params,
        &remotes,
        |e| eprintln!("meshnode: {e}"),
    )?)
}

/// Prints `answer`: the result on stdout (exit 0), or the wallet's error on stderr (exit 2).
fn show(answer: Result<Value, Value>) -> anyhow::Result<Outcome> {
    match answer {
        Ok(result) => {
            println!("{result}");
            Ok(Outcome::Ok)
        }
        Err(e) => {
            eprintln!(
                "meshnode: the wallet refused: {} {}",
                e["code"].as_str().unwrap_or("OTHER"),
                e["message"].as_str().unwrap_or_default()
            );
            Ok(Outcome::Malformed)
        }
    }
}

/// `meshnode settle nwc-pay --invoice BOLT11`.
pub fn pay(args: &PayArgs) -> anyhow::Result<Outcome> {
    let invoice = match (&args.invoice, &args.to, args.amount) {
        (Some(i), _, _) => i.clone(),
        (None, Some(to), Some(sats)) => {
            let url = fleetmesh_settle::lnurl::pay_url(to)?;
            let msat = sats.checked_mul(1000).context("--amount: too many sats")?;
            let pr = fleetmesh_settle::lnurl::invoice(&url, msat, args.comment.as_deref())?;
            eprintln!("meshnode: {to} invoiced {sats} sat");
            pr
        }
        _ => anyhow::bail!("--invoice, or --to with --amount"),
    };
    fleetmesh_settle::bolt11::decode(&invoice)?;
    show(request(
        &args.client,
        "pay_invoice",
        json!({"invoice": invoice}),
    )?)
}

/// `meshnode settle nwc-balance`.
pub fn balance(args: &ClientArgs) -> anyhow::Result<Outcome> {
    show(request(args, "get_balance", json!({}))?)
}

/// `meshnode settle nwc-invoice --amount SATS`.
pub fn invoice(args: &InvoiceArgs) -> anyhow::Result<Outcome> {
    let mut params = json!({"amount": args.amount.saturating_mul(1000)});
    if let Some(d) = &args.description {
        params["description"] = json!(d);
    }
    show(request(&args.client, "make_invoice", params)?)
}

/// `meshnode settle nwc-lookup --payment-hash HEX`.
pub fn lookup(args: &LookupArgs) -> anyhow::Result<Outcome> {
    show(request(
        &args.client,
        "lookup_invoice",
        json!({"payment_hash": args.payment_hash}),
    )?)
}

/// `meshnode settle nwc-lookup`.
#[derive(Debug, Args)]
pub struct LookupArgs {
    /// The invoice's payment hash (hex).
    #[arg(long)]
    pub payment_hash: String,
    #[command(flatten)]
    pub client: ClientArgs,
}
