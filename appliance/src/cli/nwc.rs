//! `meshnode settle nwc-…`: Nostr Wallet Connect (NIP-47) from the command line. The
//! wallet side grants, lists and revokes connections to the node's wallet (`nwc.sqlite` in
//! the node directory, served by the daemon with `[settlement] nwc = true`); the client
//! side pays an invoice, asks the balance or makes an invoice through any NWC wallet
//! service given its connection URI (`--uri`, or `MESHNODE_NWC_URI`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use fleetmesh_proto::{UnsignedEvent, nip44};
use fleetmesh_settle::nwc::{METHODS, Uri};
use serde_json::{Value, json};

use crate::cli::Outcome;
use crate::nwc::{REQUEST, RESPONSE};

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
    let grants = crate::nwc::grants(&dir, &config.settlement)?;
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
    for g in crate::nwc::grants(&dir, &config.settlement)?.list()? {
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
        crate::nwc::grants(&dir, &config.settlement)?.revoke(name)?,
        "no connection named {name:?}"
    );
    eprintln!("meshnode: connection {name:?} revoked");
    Ok(Outcome::Ok)
}

/// One request to the wallet of `args.uri`: its result, or the wallet's error (code and
/// message).
fn request(args: &ClientArgs, method: &str, params: Value) -> anyhow::Result<Result<Value, Value>> {
    request_uri(&args.uri, args.wait_secs, method, params)
}

/// One request to the wallet of connection URI `uri`, waiting `wait_secs` for its answer.
fn request_uri(
    uri: &str,
    wait_secs: u64,
    method: &str,
    params: Value,
) -> anyhow::Result<Result<Value, Value>> {
    let uri = Uri::parse(uri)?;
    let bytes: [u8; 32] = hex::decode(&uri.secret)?
        .try_into()
        .map_err(|_| anyhow::anyhow!("the URI's secret is not 32 bytes"))?;
    let secret =
        secp256k1::SecretKey::from_secret_bytes(bytes).context("the URI's secret is not a key")?;
    let keypair = secp256k1::Keypair::from_secret_key(&secret);
    let key = nip44::conversation_key(&secret, &uri.wallet)?;
    let content = nip44::encrypt(
        &key,
        json!({"method": method, "params": params})
            .to_string()
            .as_bytes(),
    )?;
    let now = crate::node::unix_now();
    let event = UnsignedEvent {
        created_at: now,
        kind: REQUEST,
        tags: vec![
            vec!["p".into(), uri.wallet.clone()],
            vec!["encryption".into(), "nip44_v2".into()],
            vec!["expiration".into(), (now + wait_secs).to_string()],
        ],
        content,
    }
    .sign(&keypair)?;
    let filter = json!({"kinds": [RESPONSE], "authors": [uri.wallet], "#e": [event.id_hex()]});
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let answer = runtime.block_on(async {
        let (mut rx, out, tasks) = crate::cli::route::subscribe_all(&uri.relays, &filter, keypair);
        // the subscriptions are open before the request goes out
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = out.send(event);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(wait_secs);
        loop {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Err(_) => anyhow::bail!("no answer from the wallet within {wait_secs} s"),
                Ok(None) => anyhow::bail!("no relay of the URI could be read"),
                Ok(Some(e)) => {
                    let Ok(plain) = nip44::decrypt(&key, &e.content) else {
                        continue;
                    };
                    if let Ok(v) = serde_json::from_slice::<Value>(&plain) {
                        tasks.iter().for_each(|t| t.abort());
                        return anyhow::Ok(v);
                    }
                }
            }
        }
    })?;
    Ok(match answer.get("error").filter(|e| !e.is_null()) {
        Some(e) => Err(e.clone()),
        None => Ok(answer["result"].clone()),
    })
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

/// An NWC wallet as a Lightning backend (`[settlement.lightning] backend = "nwc"`, `job
/// submit --pay nwc`): `make_invoice` issues, `pay_invoice` pays and returns the preimage.
/// Each request runs on a thread of its own (it drives its own relay connections).
pub struct NwcLightning {
    /// The connection URI (its secret spends from the wallet).
    pub uri: String,
}

impl NwcLightning {
    /// A backend over connection `uri`, checked to parse.
    pub fn new(uri: &str) -> anyhow::Result<NwcLightning> {
        Uri::parse(uri.trim())?;
        Ok(NwcLightning {
            uri: uri.trim().to_owned(),
        })
    }

    fn call(&self, method: &'static str, params: Value) -> fleetmesh_settle::Result<Value> {
        use fleetmesh_settle::SettleError;
        let uri = self.uri.clone();
        let answer = std::thread::spawn(move || request_uri(&uri, 60, method, params))
            .join()
            .map_err(|_| SettleError::Refused("the NWC request panicked".into()))?
            .map_err(|e| SettleError::Unreachable {
                url: "nwc".into(),
                reason: format!("{e:#}"),
            })?;
        answer.map_err(|e| {
            SettleError::Refused(format!(
                "the NWC wallet refused {method}: {} {}",
                e["code"].as_str().unwrap_or("OTHER"),
                e["message"].as_str().unwrap_or_default()
            ))
        })
    }
}

impl fleetmesh_settle::lightning::Lightning for NwcLightning {
    fn describe(&self) -> String {
        let wallet = Uri::parse(&self.uri).map(|u| u.wallet).unwrap_or_default();
        format!("nwc {}", wallet.get(..16).unwrap_or_default())
    }

    fn invoice(
        &self,
        amount_sat: u64,
        memo: &str,
        expiry_secs: u64,
    ) -> fleetmesh_settle::Result<fleetmesh_settle::lightning::Issued> {
        let v = self.call(
            "make_invoice",
            json!({"amount": amount_sat * 1000, "description": memo, "expiry": expiry_secs}),
        )?;
        let bolt11 = v["invoice"].as_str().unwrap_or_default();
        fleetmesh_settle::lightning::checked_invoice(bolt11, amount_sat, None)
    }

    fn pay(&self, bolt11: &str) -> fleetmesh_settle::Result<fleetmesh_settle::lightning::Sent> {
        let v = self.call("pay_invoice", json!({"invoice": bolt11}))?;
        let pre = hex::decode(v["preimage"].as_str().unwrap_or_default()).unwrap_or_default();
        Ok(fleetmesh_settle::lightning::Sent {
            preimage: fleetmesh_settle::lightning::checked_preimage(bolt11, &pre)?,
            fee_msat: v["fees_paid"].as_u64().unwrap_or(0),
        })
    }
}
