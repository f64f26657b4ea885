//! `meshnode wrap` and `meshnode unwrap`: NIP-59 gift wraps ([`fleetmesh_proto::nip59`])
//! from and to a node's key, on the command line — the private channel through any Nostr
//! relay that jobs and the ledger use, for an operator to try and to script.

use anyhow::Context as _;
use fleetmesh_proto::{Event, UnsignedEvent, nip59};
use serde_json::json;

use std::path::PathBuf;

use clap::Args;

use crate::cli::Outcome;

/// `meshnode wrap`.
#[derive(Debug, Args)]
pub struct WrapArgs {
    /// The recipient: a public key (64 hex digits) or did:nostr:HEX.
    #[arg(long, value_name = "HEX")]
    pub to: String,
    /// The sender's key directory (a node directory will do).
    #[arg(long, value_name = "DIR")]
    pub key_dir: PathBuf,
    /// 1059 (stored and forwarded by relays) or 21059 (passed on, never stored).
    #[arg(long, value_name = "1059|21059", default_value_t = 1059)]
    pub kind: u16,
    /// The rumor's kind (14: a NIP-17 chat message).
    #[arg(long, value_name = "K", default_value_t = 14)]
    pub rumor_kind: u16,
    /// The rumor's content.
    #[arg(long, value_name = "TEXT")]
    pub content: String,
}

/// `meshnode unwrap`.
#[derive(Debug, Args)]
pub struct UnwrapArgs {
    /// The recipient's key directory (a node directory will do).
    #[arg(long, value_name = "DIR")]
    pub key_dir: PathBuf,
    /// The wrap event, JSON (`-`: standard input).
    pub event: PathBuf,
}

/// Most bytes of a wrap `unwrap` reads.
const MAX_WRAP: u64 = 16 << 20;

/// The recipient's key, hex, from `HEX` or `did:nostr:HEX`.
pub(crate) fn recipient(to: &str) -> anyhow::Result<String> {
    let hex = to.strip_prefix("did:nostr:").unwrap_or(to);
    let ok = hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit());
    anyhow::ensure!(
        ok,
        "--to {to:?}: a public key is 64 hex digits, or did:nostr: and them"
    );
    Ok(hex.to_ascii_lowercase())
}

/// `meshnode wrap`: prints the wrap event, one JSON line.
pub fn wrap(args: &WrapArgs) -> anyhow::Result<Outcome> {
    let to = recipient(&args.to)?;
    let (_, keys) = crate::cli::job::keys_in(&args.key_dir, "the sender's keys")?;
    let now = fleetmesh_proto::unix_now();
    let wrap = nip59::wrap(
        keys.nostr(),
        &to,
        UnsignedEvent {
            created_at: now,
            kind: args.rumor_kind,
            tags: Vec::new(),
            content: args.content.clone(),
        },
        args.kind,
        now,
    )
    .context("wrapping")?;
    println!("{}", wrap.to_json());
    Ok(Outcome::Ok)
}

/// `meshnode unwrap`: prints `{"sender", "sender_did", "rumor"}`, one JSON line; a wrap
/// that does not open is refused (exit 2) with the layer and the check that failed.
pub fn unwrap(args: &UnwrapArgs) -> anyhow::Result<Outcome> {
    let (_, keys) = crate::cli::job::keys_in(&args.key_dir, "the recipient's keys")?;
    let text = crate::cli::read_input(&args.event, MAX_WRAP, "a wrap")?;
    let event = Event::from_json(text.trim())
        .with_context(|| format!("{}: not a Nostr event", args.event.display()))?;
    let opened = nip59::unwrap(keys.nostr(), &event).context("the wrap does not open")?;
    println!(
        "{}",
        json!({
            "sender": hex::encode(opened.sender),
            "sender_did": fleetmesh_proto::identity::did_for(&opened.sender),
            "rumor": opened.rumor.to_value(),
        })
    );
    Ok(Outcome::Ok)
}
