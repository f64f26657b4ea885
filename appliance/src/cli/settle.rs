//! `meshnode settle …`: the settlement rails from the command line. `decode` reads a
//! BOLT11 invoice ([`fleetmesh_settle::bolt11`]): what it asks for, checked as a payer
//! checks it, before anything is paid; `nwc-…` are Nostr Wallet Connect ([`crate::cli::nwc`]);
//! `l402` requests a priced route, paying when asked ([`crate::cli::l402`]); `nutzap` tips
//! a key ([`crate::cli::nutzap`]).

use clap::{Args, Subcommand};

use crate::cli::Outcome;

/// `meshnode settle …`.
#[derive(Debug, Subcommand)]
pub enum SettleCommand {
    /// Decode a BOLT11 invoice and check it (bech32, signature, amount, features): the
    /// amount, payment hash and secret, description or its hash, expiry, payee, route
    /// hints and fallbacks. Exit 2, with the reason, for an invoice a payer must refuse.
    Decode(DecodeArgs),
    /// Grant a Nostr Wallet Connect (NIP-47) connection to the node's wallet: prints its
    /// `nostr+walletconnect://` URI (the daemon serves it with `[settlement] nwc = true`).
    NwcConnect(crate::cli::nwc::ConnectArgs),
    /// The wallet's NWC connections: name, client key, methods, budget, spent.
    NwcConnections(crate::cli::nwc::GrantsArgs),
    /// End an NWC connection (`--name`).
    NwcRevoke(crate::cli::nwc::GrantsArgs),
    /// Pay a BOLT11 invoice through an NWC wallet (`--uri`): prints the preimage and fees.
    NwcPay(crate::cli::nwc::PayArgs),
    /// An NWC wallet's balance (msat).
    NwcBalance(crate::cli::nwc::ClientArgs),
    /// Have an NWC wallet make an invoice (`--amount` sats).
    NwcInvoice(crate::cli::nwc::InvoiceArgs),
    /// Look an invoice up in an NWC wallet (`--payment-hash`): its state.
    NwcLookup(crate::cli::nwc::LookupArgs),
    /// Request a URL, paying with L402 when it answers 402 (a node's `[api.prices]`):
    /// the invoice paid through `[settlement.lightning]` (or the Cashu wallet), then the
    /// request again with the credential; the answer on stdout.
    L402(crate::cli::l402::FetchArgs),
    /// Send a nutzap (NIP-61): sats P2PK-locked to the recipient's nutzap key at a mint
    /// its kind 10019 lists, published as a kind 9321 on its relays.
    Nutzap(crate::cli::nutzap::NutzapArgs),
}

/// `meshnode settle …`.
pub fn run(c: &SettleCommand) -> anyhow::Result<Outcome> {
    use crate::cli::nwc;
    match c {
        SettleCommand::Decode(a) => decode(a),
        SettleCommand::NwcConnect(a) => nwc::connect(a),
        SettleCommand::NwcConnections(a) => nwc::connections(a),
        SettleCommand::NwcRevoke(a) => nwc::revoke(a),
        SettleCommand::NwcPay(a) => nwc::pay(a),
        SettleCommand::NwcBalance(a) => nwc::balance(a),
        SettleCommand::NwcInvoice(a) => nwc::invoice(a),
        SettleCommand::NwcLookup(a) => nwc::lookup(a),
        SettleCommand::L402(a) => crate::cli::l402::fetch(a),
        SettleCommand::Nutzap(a) => crate::cli::nutzap::send(a),
    }
}

/// `meshnode settle decode`.
#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// The invoice (`lnbc…`, `lntb…`, … ; a `lightning:` prefix is taken).
    #[arg(value_name = "BOLT11")]
    pub invoice: String,
    /// One JSON object instead of lines of words.
    #[arg(long)]
    pub json: bool,
}

/// `meshnode settle decode`.
pub fn decode(args: &DecodeArgs) -> anyhow::Result<Outcome> {
    let inv = match fleetmesh_settle::bolt11::decode(&args.invoice) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("meshnode settle decode: {e}");
            return Ok(Outcome::Malformed);
        }
    };
    if args.json {
        println!("{}", serde_json::to_string(&inv)?);
        return Ok(Outcome::Ok);
    }
    let amount = inv
        .amount_msat
        .map_or_else(|| "any amount".to_owned(), |m| format!("{m} msat"));
    println!("{} invoice for {amount} to {}", inv.network, inv.payee);
    println!("payment hash {}", inv.payment_hash);
    if let Some(s) = &inv.payment_secret {
        println!("payment secret {s}");
    }
    match (&inv.description, &inv.description_hash) {
        (Some(d), _) => println!("description {d:?}"),
        (None, Some(h)) => println!("description hash {h}"),
        (None, None) => {}
    }
    println!(
        "made {} · expires {} ({} s) · min final CLTV delta {}",
        inv.timestamp, inv.expires_at, inv.expiry_secs, inv.min_final_cltv_expiry_delta
    );
    for (i, route) in inv.route_hints.iter().enumerate() {
        for h in route {
            println!(
                "route {i}: via {} channel {} (fee {} msat + {} ppm, CLTV delta {})",
                h.pubkey,
                h.short_channel_id,
                h.fee_base_msat,
                h.fee_proportional_millionths,
                h.cltv_expiry_delta
            );
        }
    }
    for f in &inv.fallbacks {
        println!("fallback {f}");
    }
    if !inv.features.is_empty() {
        println!("features {:?}", inv.features);
    }
    for w in &inv.warnings {
        println!("warning: {w}");
    }
    Ok(Outcome::Ok)
}
