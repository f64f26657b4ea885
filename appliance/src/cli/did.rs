//! `meshnode did show` and `meshnode did resolve`: `did:nostr` DID documents
//! ([`fleetmesh_proto::did`]) — a node's own, from its current descriptor, and another's,
//! from the newest descriptor (kind 11801) relays hold that verifies and whose keys are not
//! revoked (kind 11802).

use anyhow::Context as _;
use fleetmesh_proto::identity::{DescriptorContent, verify_descriptor};
use fleetmesh_proto::nodes::Revocation;
use fleetmesh_proto::{Event, did};
use fleetmesh_schemas::constants::kind;
use serde_json::json;

use crate::cli::{DidResolveArgs, Outcome};

/// Most descriptors and revocations read from one relay.
const MAX_EVENTS: usize = 64;

/// The DID document of the node in `dir`.
pub fn show(dir: &std::path::Path) -> anyhow::Result<Outcome> {
    let mut node = crate::node::Node::open(dir)?;
    let descriptor = node.current_descriptor()?;
    let content = verify_descriptor(&descriptor).context("the node's own descriptor")?;
    println!(
        "{}",
        serde_json::to_string_pretty(&did::document(&content))?
    );
    Ok(Outcome::Ok)
}

/// Why `descriptor` may not stand for its DID: a key it lists that `revocations` revoke
/// at or before `now`.
fn revoked(content: &DescriptorContent, revocations: &[Revocation], now: u64) -> Option<String> {
    revocations.iter().flat_map(|r| &r.revoked).find_map(|k| {
        let listed = content
            .keys
            .iter()
            .any(|d| d.key_type == k.key_type.as_str() && d.public == k.public);
        (listed && k.revoked_at <= now).then(|| {
            format!(
                "its {} key {} was revoked at {} ({}){}",
                k.key_type,
                k.public,
                k.revoked_at,
                k.reason,
                k.replacement
                    .as_deref()
                    .map_or(String::new(), |r| format!("; replaced by {r}"))
            )
        })
    })
}

/// `meshnode did resolve`: prints the document, or exits 2 saying why there is none.
pub fn resolve(args: &DidResolveArgs) -> anyhow::Result<Outcome> {
    let doc = resolve_document(
        &args.did,
        &args.relays,
        args.ca.as_deref(),
        args.timeout_secs,
    )?;
    println!("{}", serde_json::to_string_pretty(&doc)?);
    Ok(Outcome::Ok)
}

/// Most rotations [`resolve_document`] follows from one DID to its current key.
const MAX_ROTATIONS: usize = 4;

/// The DID document of `did` (did:nostr) from the newest valid descriptor the `relays`
/// hold, refused when a revocation revokes one of its keys. A key that revoked itself
/// naming a successor (`meshnode keys rotate`, once its grace period is over) is followed
/// to the successor's document, which must name it as its proven predecessor; the
/// document then lists the DIDs it was known by (`alsoKnownAs`). Relays that do not
/// answer and descriptors that do not verify are named on stderr and passed over.
///
/// # Errors
/// A malformed DID or relay URL, no relay answering, no valid descriptor, a revoked key
/// of the newest valid one, or a rotation its successor does not prove.
pub(crate) fn resolve_document(
    did_text: &str,
    relays: &[String],
    ca: Option<&std::path::Path>,
    timeout_secs: u64,
) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(!relays.is_empty(), "name at least one --relay");
    for relay in relays {
        anyhow::ensure!(
            relay.starts_with("ws://") || relay.starts_with("wss://"),
            "--relay must be a ws:// or wss:// URL, not {relay:?}"
        );
    }
    let ca = crate::cli::read_ca(ca)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let now = fleetmesh_proto::unix_now();
    let mut known_as: Vec<String> = Vec::new();
    let mut current = did_text.to_owned();
    for _ in 0..=MAX_ROTATIONS {
        let key = hex::encode(did::parse_did(&current)?);
        let filter =
            json!({"kinds": [kind::NODE_DESCRIPTOR, kind::KEY_REVOCATION], "authors": [key]});
        let mut events: Vec<Event> = Vec::new();
        let mut reached = 0;
        for relay in relays {
            let found = runtime.block_on(fleetmesh_relay::sync::query(
                relay,
                &filter,
                ca.as_deref(),
                std::time::Duration::from_secs(timeout_secs),
                MAX_EVENTS,
            ));
            match found {
                Ok(found) => {
                    reached += 1;
                    events.extend(found);
                }
                Err(e) => eprintln!("meshnode: did resolve: {e}"),
            }
        }
        anyhow::ensure!(reached > 0, "no relay answered");
        let revocations: Vec<Revocation> = events
            .iter()
            .filter(|e| e.kind == kind::KEY_REVOCATION)
            .filter_map(|e| match Revocation::try_from(e) {
                Ok(r) => Some(r),
                Err(err) => {
                    eprintln!(
                        "meshnode: did resolve: revocation {} refused: {err}",
                        e.id_hex()
                    );
                    None
                }
            })
            .collect();
        if let Some(next) = successor(&revocations, &key, now) {
            eprintln!("meshnode: did resolve: {current} was rotated to did:nostr:{next}");
            known_as.push(std::mem::replace(&mut current, format!("did:nostr:{next}")));
            continue;
        }
        let mut descriptors: Vec<&Event> = events
            .iter()
            .filter(|e| e.kind == kind::NODE_DESCRIPTOR)
            .collect();
        descriptors.sort_by_key(|e| std::cmp::Reverse(e.created_at));
        descriptors.dedup_by_key(|e| e.id);
        for d in descriptors {
            if let Some(x) = d.expiration().filter(|x| *x <= now) {
                eprintln!(
                    "meshnode: did resolve: descriptor {} expired at {x}",
                    d.id_hex()
                );
                continue;
            }
            let content = match verify_descriptor(d) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!(
                        "meshnode: did resolve: descriptor {} refused: {e}",
                        d.id_hex()
                    );
                    continue;
                }
            };
            if let Some(why) = revoked(&content, &revocations, now) {
                anyhow::bail!(
                    "{current}: the newest valid descriptor ({}) is refused: {why}",
                    d.id_hex()
                );
            }
            if let Some(old) = known_as.last() {
                let proven = fleetmesh_proto::identity::predecessor(d)?;
                let old_key = old.strip_prefix("did:nostr:").unwrap_or_default();
                anyhow::ensure!(
                    proven.as_deref() == Some(old_key),
                    "{old} names {current} as its successor, but {current}'s descriptor does not \
                     prove {old} as its predecessor: the rotation is refused"
                );
            }
            let mut doc = did::document(&content);
            if !known_as.is_empty() {
                doc["alsoKnownAs"] = json!(known_as);
            }
            return Ok(doc);
        }
        anyhow::bail!("{current}: no valid node descriptor on {reached} of the relays asked")
    }
    anyhow::bail!("{did_text}: more than {MAX_ROTATIONS} rotations to follow")
}

/// The successor `key` (hex) named when it revoked itself at or before `now`.
fn successor(revocations: &[Revocation], key: &str, now: u64) -> Option<String> {
    revocations.iter().find_map(|r| {
        let itself = r.revoked.iter().any(|k| {
            k.key_type == fleetmesh_proto::KeyType::Secp256k1
                && k.public == key
                && k.revoked_at <= now
        });
        itself.then(|| r.successor.clone()).flatten()
    })
}
