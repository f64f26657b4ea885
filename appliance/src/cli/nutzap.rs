//! `meshnode settle nutzap`: a tip or small payment to a Nostr key as a nutzap (NIP-61,
//! [`fleetmesh_settle::nutzap`]).
//!
//! Reads the recipient's kind 10019 on `--relay`s and `--node`'s relay face (its newest),
//! picks a mint it takes that the sender's wallet pays at (`--mint`, else the sender's
//! configured or only mint, which must be one of them), sends a token of `--amount` sats
//! P2PK-locked to the recipient's nutzap key (refundable to the sender after
//! `--refund-after` seconds), and publishes the kind 9321 — signed by the sender's key,
//! `p` the recipient, `e` the zapped event with `--event` — on the recipient's relays and
//! the relays read. Prints the event's id and the sats sent.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use fleetmesh_proto::UnsignedEvent;
use fleetmesh_settle::cashu::nut10::Lock;
use fleetmesh_settle::cashu::{MintClient, Wallet, token::normalize_mint};
use fleetmesh_settle::nutzap::{INFO, Info, NUTZAP, nutzap_tags};
use serde_json::json;

use crate::cli::Outcome;

/// `meshnode settle nutzap`.
#[derive(Debug, Args)]
pub struct NutzapArgs {
    /// The recipient: its Nostr key (hex or npub) or did:nostr.
    #[arg(long, value_name = "KEY")]
    pub to: String,
    /// Sats to send.
    #[arg(long, value_name = "SATS")]
    pub amount: u64,
    /// A comment (the event's content).
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub comment: String,
    /// The event this nutzap is for, by id.
    #[arg(long, value_name = "ID")]
    pub event: Option<String>,
    /// A relay to read the recipient's kind 10019 on and publish the nutzap to (repeat).
    #[arg(long, value_name = "URL")]
    pub relay: Vec<String>,
    /// A node whose relay face is read and written too.
    #[arg(long, value_name = "URL")]
    pub node: Option<String>,
    /// The sender's directory (its keys, `wallet.sqlite`, `meshnode.toml`) [default:
    /// $MESHNODE_HOME or the platform data directory].
    #[arg(long, value_name = "DIR")]
    pub key_dir: Option<PathBuf>,
    /// Pay from the wallet's ecash at this mint (one the recipient takes).
    #[arg(long, value_name = "URL")]
    pub mint: Option<String>,
    /// Seconds after which the sender may take back what the recipient did not redeem.
    #[arg(long, value_name = "SECS", default_value_t = 7 * 86_400)]
    pub refund_after: u64,
}

/// `meshnode settle nutzap`.
pub fn send(args: &NutzapArgs) -> anyhow::Result<Outcome> {
    let dir = crate::node::dir_or_home(args.key_dir.clone())?;
    let (_, keys) = crate::cli::job::keys_in(&dir, "the sender's key")?;
    let to = crate::cli::giftwrap::recipient(&args.to)?;
    let relays = crate::cli::route::market_relays(args.node.as_deref(), &args.relay)?;
    let infos = crate::cli::route::query_all(
        &relays,
        &json!({"kinds": [INFO], "authors": [to], "limit": 4}),
        4,
    )?;
    let newest = infos.iter().max_by_key(|e| e.created_at).with_context(|| {
        format!(
            "{to} publishes no nutzap info (kind 10019) on {}",
            relays.join(", ")
        )
    })?;
    let info = Info::from_tags(&newest.tags)?;
    let mint = match &args.mint {
        // the mint named: the recipient must take it
        Some(given) => Some(normalize_mint(given)).filter(|m| info.mints.contains(m)),
        // else the wallet's own (configured or only) mint, or any it holds that is taken
        None => crate::cli::wallet::mint_of(&dir, None)
            .ok()
            .filter(|m| info.mints.contains(m))
            .or_else(|| {
                let w = Wallet::open(&dir.join(fleetmesh_settle::cashu::WALLET_FILE)).ok()?;
                w.balances()
                    .ok()?
                    .into_iter()
                    .map(|b| b.mint)
                    .find(|m| info.mints.contains(m))
            }),
    };
    let Some(mint) = mint else {
        eprintln!(
            "meshnode settle nutzap: {to} takes nutzaps at {}; pay with --mint one of them",
            info.mints.join(", ")
        );
        return Ok(Outcome::Malformed);
    };
    let refund = hex::encode(keys.nostr().public_key().serialize());
    let lock = Lock::p2pk(
        &info.pubkey,
        Some(fleetmesh_proto::unix_now() + args.refund_after),
        vec![refund],
    )?;
    let mut wallet = Wallet::open(&dir.join(fleetmesh_settle::cashu::WALLET_FILE))?;
    wallet.set_key(*keys.nostr());
    let client = MintClient::new(&normalize_mint(&mint))?;
    let (token, fee) = wallet.send(
        &client,
        args.amount,
        Some(format!("nutzap to {to}")),
        Some(&lock),
    )?;
    let zapped = args.event.as_deref().map(|id| (id, relays[0].as_str()));
    let event = keys.sign(UnsignedEvent {
        created_at: fleetmesh_proto::unix_now(),
        kind: NUTZAP,
        tags: nutzap_tags(&token, &to, zapped)?,
        content: args.comment.clone(),
    })?;
    let mut targets = info.relays.clone();
    targets.extend(relays.iter().filter(|r| !info.relays.contains(r)).cloned());
    let published = crate::cli::keys::publish_on(&targets, None, std::slice::from_ref(&event))?
        .into_iter()
        .filter(|ok| *ok)
        .count();
    if published == 0 {
        anyhow::bail!(
            "no relay took the nutzap ({}); the token is in the wallet's history as sent",
            targets.join(", ")
        );
    }
    eprintln!(
        "meshnode: nutzapped {} sat (fee {fee} sat) at {mint} to {to}, on {published} relay(s)",
        args.amount
    );
    println!(
        "{}",
        json!({"event": event.id_hex(), "amount": args.amount, "mint": mint, "fee": fee})
    );
    Ok(Outcome::Ok)
}
