//! `meshnode keys rotate` and `meshnode keys revoke`: a node's key revocations (kind
//! 11802) and rotation to new keys. Both sign the revocation with the node's current
//! Nostr key, store it in the node's own store, print the events to publish, and publish
//! them on every `--relay` given (a running daemon learns them from its own relay: name
//! it too). Relays then refuse the revoked key's later events, and `did resolve` follows
//! a rotation to the new key.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use fleetmesh_proto::nodes::{Revocation, RevokedKey};
use fleetmesh_proto::noun::Noun as _;
use fleetmesh_proto::{Event, KeyType, NodeKeys, RevocationReason};
use fleetmesh_relay::store::EventStore as _;
use fleetmesh_schemas::constants::kind;
use serde_json::json;

use crate::cli::Outcome;
use crate::node::{KEYS_DIR, Node, PREDECESSOR_FILE};

/// `meshnode keys …`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Rotate the node's three keys: new keys in DIR/keys (the old ones kept in
    /// DIR/keys.retired/), a revocation of the old ones by the old Nostr key naming the
    /// new one as successor, effective after --grace-secs, and a descriptor by the new key
    /// that the old key's proof names as its predecessor. Restart the daemon to use them.
    Rotate(RotateArgs),
    /// Revoke one of the node's keys from --at (default now) for --reason: relays refuse
    /// a revoked Nostr key's later events, and resolution refuses a descriptor listing a
    /// revoked key. To replace a leaked key, rotate after revoking it.
    Revoke(RevokeArgs),
}

/// Where the events go.
#[derive(Debug, Args)]
pub struct Publish {
    /// A relay to publish the events on (ws:// or wss://); repeatable.
    #[arg(long = "relay", value_name = "URL")]
    pub relays: Vec<String>,
    /// For wss:// relays: also trust the CA certificate(s) in this PEM file.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
}

/// `meshnode keys rotate`.
#[derive(Debug, Args)]
pub struct RotateArgs {
    /// The node directory [default: $MESHNODE_HOME or the platform data directory].
    pub dir: Option<PathBuf>,
    /// Seconds the old keys stay valid, so peers can learn the new ones first.
    #[arg(long, value_name = "SECS", default_value_t = 86_400)]
    pub grace_secs: u64,
    #[command(flatten)]
    pub publish: Publish,
}

/// `meshnode keys revoke`.
#[derive(Debug, Args)]
pub struct RevokeArgs {
    /// The node directory [default: $MESHNODE_HOME or the platform data directory].
    pub dir: Option<PathBuf>,
    /// The key (hex): the node's Nostr, Ed25519 or X25519 public key.
    #[arg(long, value_name = "HEX")]
    pub key: String,
    /// superseded, compromised, retired or unspecified.
    #[arg(long, value_name = "REASON")]
    pub reason: RevocationReason,
    /// From when (Unix seconds) the key is refused [default: now].
    #[arg(long, value_name = "UNIX")]
    pub at: Option<u64>,
    /// The key that replaces it (hex).
    #[arg(long, value_name = "HEX")]
    pub replacement: Option<String>,
    #[command(flatten)]
    pub publish: Publish,
}

/// The node's stored revocation, if any; a new one keeps its entries.
fn stored(node: &Node) -> anyhow::Result<(Vec<RevokedKey>, Option<String>, u64)> {
    let Some(event) = node
        .store
        .latest_event(&node.keys.nostr_pubkey(), kind::KEY_REVOCATION)?
    else {
        return Ok((Vec::new(), None, 0));
    };
    let r = Revocation::try_from(&event).context("the node's stored revocation")?;
    Ok((r.revoked, r.successor, event.created_at))
}

/// Signs and stores the node's revocation with `add` merged in (replacing entries for
/// the same keys).
fn revoke_into(
    node: &mut Node,
    add: Vec<RevokedKey>,
    successor: Option<String>,
) -> anyhow::Result<Event> {
    let (mut revoked, before, last) = stored(node)?;
    revoked.retain(|k| !add.iter().any(|a| a.public == k.public));
    revoked.extend(add);
    let created_at = fleetmesh_proto::unix_now().max(last + 1);
    let event = Revocation {
        revoked,
        successor: successor.or(before),
    }
    .sign(&node.keys, created_at)?;
    let outcome = node.store.insert_event(&event)?;
    anyhow::ensure!(
        outcome == fleetmesh_relay::store::InsertOutcome::Stored,
        "the revocation was not stored ({outcome:?})"
    );
    Ok(event)
}

/// Publishes `events` on every relay; false when one refused or could not be reached.
fn publish(events: &[Event], p: &Publish) -> anyhow::Result<bool> {
    let ca = crate::cli::read_ca(p.ca.as_deref())?;
    Ok(publish_on(&p.relays, ca.as_deref(), events)?
        .into_iter()
        .all(|ok| ok))
}

/// Publishes `events` on each of `relays` (trusting `ca` for wss), saying on stderr what
/// each relay did with each; per relay, whether it stored them all.
pub(crate) fn publish_on(
    relays: &[String],
    ca: Option<&[u8]>,
    events: &[Event],
) -> anyhow::Result<Vec<bool>> {
    if relays.is_empty() {
        return Ok(Vec::new());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let mut out = Vec::with_capacity(relays.len());
    for relay in relays {
        let sent = runtime.block_on(fleetmesh_relay::sync::publish(
            relay,
            events,
            ca,
            std::time::Duration::from_secs(10),
        ));
        match sent {
            Ok(verdicts) => {
                let mut all = true;
                for (id, ok, why) in verdicts {
                    eprintln!(
                        "meshnode: {relay}: {id} {}",
                        if ok { "stored" } else { &why }
                    );
                    all &= ok;
                }
                out.push(all);
            }
            Err(e) => {
                eprintln!("meshnode: {e}");
                out.push(false);
            }
        }
    }
    Ok(out)
}

fn done(events: &[Event], p: &Publish) -> anyhow::Result<Outcome> {
    for e in events {
        println!("{}", e.to_json());
    }
    Ok(if publish(events, p)? {
        Outcome::Ok
    } else {
        Outcome::Failing
    })
}

/// `meshnode keys revoke`: prints the revocation event.
pub fn revoke(args: &RevokeArgs) -> anyhow::Result<Outcome> {
    let dir = crate::node::dir_or_home(args.dir.clone())?;
    let mut node = Node::open(&dir)?;
    let key = args.key.to_ascii_lowercase();
    let k = &node.keys;
    let key_type = [
        (KeyType::Secp256k1, k.nostr_pubkey_hex()),
        (KeyType::Ed25519, hex::encode(k.ed25519_public())),
        (KeyType::X25519, hex::encode(k.x25519_public())),
    ]
    .into_iter()
    .find_map(|(t, public)| (public == key).then_some(t))
    .with_context(|| {
        format!(
            "--key {key} is not one of this node's keys (Nostr {}, Ed25519 {}, X25519 {})",
            k.nostr_pubkey_hex(),
            hex::encode(k.ed25519_public()),
            hex::encode(k.x25519_public())
        )
    })?;
    if key_type == KeyType::Secp256k1 {
        eprintln!(
            "meshnode: the node's own Nostr key: from then on relays refuse everything it signs; \
             `meshnode keys rotate` hands over to new keys"
        );
    }
    let entry = RevokedKey {
        key_type,
        public: key,
        revoked_at: args.at.unwrap_or_else(fleetmesh_proto::unix_now),
        reason: args.reason,
        replacement: args.replacement.clone(),
    };
    let event = revoke_into(&mut node, vec![entry], None)?;
    done(&[event], &args.publish)
}

/// `meshnode keys rotate`: prints the old key's revocation and the new key's descriptor.
pub fn rotate(args: &RotateArgs) -> anyhow::Result<Outcome> {
    let dir = crate::node::dir_or_home(args.dir.clone())?;
    let mut node = Node::open(&dir)?;
    let new = NodeKeys::generate()?;
    let now = fleetmesh_proto::unix_now();
    let at = now + args.grace_secs;
    let old = &node.keys;
    let pairs = [
        (
            KeyType::Secp256k1,
            old.nostr_pubkey_hex(),
            new.nostr_pubkey_hex(),
        ),
        (
            KeyType::Ed25519,
            hex::encode(old.ed25519_public()),
            hex::encode(new.ed25519_public()),
        ),
        (
            KeyType::X25519,
            hex::encode(old.x25519_public()),
            hex::encode(new.x25519_public()),
        ),
    ];
    let entries = pairs
        .into_iter()
        .map(|(key_type, public, replacement)| RevokedKey {
            key_type,
            public,
            revoked_at: at,
            reason: RevocationReason::Superseded,
            replacement: Some(replacement),
        })
        .collect();
    let proof = fleetmesh_proto::identity::rotation_proof(old.nostr(), &new.nostr_pubkey())?;
    let old_hex = old.nostr_pubkey_hex();
    let revocation = revoke_into(&mut node, entries, Some(new.nostr_pubkey_hex()))?;
    // the new keys beside the old, then swapped in: the key directory is never missing
    // for longer than between two renames
    let keys = dir.join(KEYS_DIR);
    let staged = dir.join("keys.new");
    let _ = std::fs::remove_dir_all(&staged);
    new.save(&staged)?;
    fleetmesh_proto::identity::write_private(
        &staged.join(PREDECESSOR_FILE),
        &serde_json::to_vec(&proof)?,
    )?;
    let retired_dir = dir.join("keys.retired");
    crate::node::create_private(&retired_dir, true)?;
    let retired = retired_dir.join(format!("{}-{now}", &old_hex[..16]));
    std::fs::rename(&keys, &retired).with_context(|| format!("moving {} aside", keys.display()))?;
    std::fs::rename(&staged, &keys)
        .with_context(|| format!("putting the new keys in {}", keys.display()))?;
    node.store
        .set_meta(crate::node::META_PUBKEY, &new.nostr_pubkey_hex())?;
    drop(node);
    let mut node = Node::open(&dir)?;
    let descriptor = node.current_descriptor()?;
    eprintln!(
        "meshnode: rotated {old_hex} → {} (the old keys are in {}, revoked from {at}); \
         restart the daemon to use the new keys",
        new.nostr_pubkey_hex(),
        retired.display()
    );
    let summary = json!({"old": old_hex, "new": new.nostr_pubkey_hex(), "revoked_at": at});
    eprintln!("meshnode: {summary}");
    done(&[revocation, descriptor], &args.publish)
}
