//! Nutzaps (NIP-61) to the node: tips and small payments as Cashu proofs locked to it
//! (`[settlement] nutzaps = true`, with `[settlement] mints`).
//!
//! The node publishes its kind 10019 — the relays it reads (`[node] relays`), the mints it
//! takes (`[settlement] mints`), and its **nutzap key**, derived from the node's key but
//! not it (NIP-61 forbids locking to a Nostr key) — on its relay and its relays, reads kind
//! 9321 events `p`-tagging it there and in its own store (from the start: one sent while
//! the node was down is taken when it is back), and redeems each it may take
//! ([`Nutzap::check`]: its mint, sats, every proof locked to the
//! nutzap key alone) into its wallet under `nutzap <event id>`, once: an event already
//! redeemed (the wallet's history says) is skipped. Each redemption is recorded as a
//! NIP-60 kind 7376 (`e` the nutzap, marked `redeemed`; `p` the sender; the content, NIP-44
//! to itself, direction, amount and unit) where the nutzap was read. Outcomes are counted
//! in `fleetmesh_nutzaps_total{outcome}`.

use std::path::PathBuf;
use std::sync::Arc;

use fleetmesh_port::inbox::{Inbox, announce_and_read};
use fleetmesh_port::{RelayPort, Tasks};
use fleetmesh_proto::{Event, NodeKeys, UnsignedEvent, nip44};
use serde_json::json;
use tokio::sync::broadcast;

use super::{INFO, Info, NUTZAP, Nutzap, REDEEMED};
use crate::SettleError;
use crate::cashu::{MintClient, Wallet};

fn count(outcome: &'static str) {
    metrics::counter!("fleetmesh_nutzaps_total", "outcome" => outcome).increment(1);
}

/// The node's nutzap key: an HKDF of its Nostr key (so that the two cannot be linked
/// without it, and the wallet can sign for what is locked to it).
///
/// # Errors
/// Never in practice (an HKDF output that is not a valid scalar).
pub fn key(keys: &NodeKeys) -> crate::Result<secp256k1::Keypair> {
    let prk = fleetmesh_proto::hkdf::extract(
        b"fleetmesh/nutzap-key/v1",
        &keys.nostr().secret_key().to_secret_bytes(),
    );
    let bytes = fleetmesh_proto::hkdf::expand(&prk, b"p2pk", 32)
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| SettleError::Crypto("the nutzap key's HKDF failed".into()))?;
    let secret = secp256k1::SecretKey::from_secret_bytes(bytes)
        .map_err(|e| SettleError::Crypto(e.to_string()))?;
    Ok(secp256k1::Keypair::from_secret_key(&secret))
}

/// The node's kind 10019.
fn info(keys: &NodeKeys, relays: &[String], mints: &[String]) -> crate::Result<Event> {
    let info = Info {
        relays: relays.to_vec(),
        mints: mints
            .iter()
            .map(|m| crate::cashu::token::normalize_mint(m))
            .collect(),
        pubkey: hex::encode(key(keys)?.x_only_public_key().0.to_byte_array()),
    };
    keys.sign(UnsignedEvent {
        created_at: fleetmesh_proto::unix_now(),
        kind: INFO,
        tags: info.tags(),
        content: String::new(),
    })
    .map_err(|e| SettleError::Crypto(e.to_string()))
}

/// What redeeming works with.
struct Redeemer {
    keys: NodeKeys,
    nutzap_key: secp256k1::Keypair,
    wallet: PathBuf,
    mints: Vec<String>,
    relay: Arc<dyn RelayPort>,
    out: broadcast::Sender<Event>,
}

/// Publishes the kind 10019 of the node of `keys` and starts redeeming the nutzaps to it
/// into the wallet at `wallet`.
///
/// # Errors
/// When the announcement cannot be signed.
pub async fn start(
    keys: NodeKeys,
    wallet: PathBuf,
    relays: Vec<String>,
    relay: Arc<dyn RelayPort>,
    mints: &[String],
) -> crate::Result<Tasks> {
    let announce = info(&keys, &relays, mints)?;
    let (out, _) = broadcast::channel(256);
    let inbox = Inbox {
        kind: NUTZAP,
        me: (keys.nostr_pubkey_hex(), *keys.nostr()),
        // nutzaps wait on relays: every one is looked at (those redeemed are skipped)
        since: || 0,
        // and those the node's relay took while it was down
        backlog: true,
        who: "nutzaps",
    };
    let r = Arc::new(Redeemer {
        nutzap_key: key(&keys)?,
        keys,
        wallet,
        mints: mints
            .iter()
            .map(|m| crate::cashu::token::normalize_mint(m))
            .collect(),
        relay: relay.clone(),
        out: out.clone(),
    });
    let tasks = announce_and_read(&relay, &relays, announce, inbox, &out, move |e| {
        r.redeem(&e)
    })
    .await;
    Ok(Tasks(tasks))
}

impl Redeemer {
    /// Redeems one nutzap, or says (in a count and a log line) why not.
    fn redeem(&self, e: &Event) {
        let id = e.id_hex();
        let detail = format!("nutzap {id}");
        let mut wallet = match Wallet::open(&self.wallet) {
            Ok(w) => w,
            Err(err) => {
                tracing::warn!(error = %err, "nutzaps: the wallet");
                return;
            }
        };
        if wallet.received(&detail).ok().flatten().is_some() {
            count("again");
            return;
        }
        let me = self.keys.nostr_pubkey_hex();
        let ours = hex::encode(self.nutzap_key.x_only_public_key().0.to_byte_array());
        let zap = match Nutzap::read(&e.tags, &e.content)
            .and_then(|z| z.check(&me, &self.mints, &ours).map(|()| z))
        {
            Ok(z) => z,
            Err(err) => {
                count("refused");
                tracing::info!(nutzap = %id, error = %err, "a nutzap not taken");
                return;
            }
        };
        wallet.set_key(self.nutzap_key);
        let taken = MintClient::new(&zap.token.mint)
            .and_then(|mint| wallet.receive_for(&mint, &zap.token, None, &detail));
        match taken {
            Ok((amount, fee)) => {
                count("redeemed");
                tracing::info!(nutzap = %id, amount, fee, "a nutzap redeemed");
                self.record(e, amount);
            }
            Err(err) => {
                count("failed");
                tracing::info!(nutzap = %id, error = %err, "a nutzap could not be redeemed");
            }
        }
    }

    /// Publishes the kind 7376 of a redemption of `amount` sats.
    fn record(&self, zap: &Event, amount: u64) {
        let body = json!([
            ["direction", "in"],
            ["amount", amount.to_string()],
            ["unit", "sat"]
        ]);
        let me = self.keys.nostr_pubkey_hex();
        let sealed = nip44::conversation_key(&self.keys.nostr().secret_key(), &me)
            .and_then(|k| nip44::encrypt(&k, body.to_string().as_bytes()));
        let signed = sealed.and_then(|content| {
            self.keys.sign(UnsignedEvent {
                created_at: fleetmesh_proto::unix_now(),
                kind: REDEEMED,
                tags: vec![
                    vec!["e".into(), zap.id_hex(), String::new(), "redeemed".into()],
                    vec!["p".into(), hex::encode(zap.pubkey)],
                ],
                content,
            })
        });
        match signed {
            Ok(ev) => {
                let _ = self.out.send(ev.clone());
                let relay = self.relay.clone();
                tokio::runtime::Handle::current().spawn(async move {
                    if let Err(e) = relay.publish(ev).await {
                        tracing::warn!(error = %e, "nutzaps: the redemption record was not stored");
                    }
                });
            }
            Err(e) => tracing::warn!(error = %e, "nutzaps: signing a redemption record"),
        }
    }
}
