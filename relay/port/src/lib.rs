//! The relay port: how the node's services reach relays without depending on the relay's
//! WebSocket face.
//!
//! The ledger, settlement, federation, DIDComm and market services publish what they sign
//! (receipts, grants, announcements, gift-wrapped answers), read events addressed to them
//! as they arrive, and follow remote relays. They do all of it through [`RelayPort`], a
//! trait the relay crate implements for its `Relay` (the node's own relay, its store and
//! its NIP-01 client for remote relays) and the daemon hands out as `Arc<dyn RelayPort>`.
//! A test can implement it in memory.
//!
//! [`inbox`] builds the common reading pattern on the port: a service's announcement
//! published, then every event of one kind `p`-tagging the node handed once to the
//! service, from the store's backlog, the node's live fan-out and each remote relay.
//! [`subscribe_all`] holds one subscription open on each of several remote relays.
//! [`Tasks`] holds the background tasks a service starts so the daemon can end them.

mod error;
pub mod inbox;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use fleetmesh_proto::Event;
use fleetmesh_proto::filter::Filter;
use tokio::sync::{broadcast, mpsc};

pub use error::{PortError, Result};

/// A boxed future, as the port's async methods return (the trait is used as a `dyn`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An event the node's relay accepted, on its way to live subscribers.
#[derive(Debug)]
pub struct LiveEvent {
    /// The event.
    pub event: Arc<Event>,
    /// Its JSON as served.
    pub json: Arc<str>,
}

/// What happened to an event handed to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertOutcome {
    /// Stored (replacing older versions where the kind is replaceable or addressable).
    Stored,
    /// An event with this id is already stored.
    Duplicate,
    /// A newer version of this replaceable or addressable event is stored.
    Superseded,
    /// Its author deleted it (NIP-09); it is not taken back.
    Deleted,
    /// Not stored: it waited in the store writer's queue past what a shedding relay
    /// allows; the client may try again.
    Shed,
}

/// What a remote relay answered to one published event: its id, whether it was accepted,
/// and the relay's message (NIP-01 `OK`).
pub type Acceptance = (String, bool, String);

/// Remote relays, reached as a NIP-01 client. The node's relay is one
/// ([`RelayPort`] extends it); a command line with no node uses the relay crate's plain
/// client.
pub trait Remotes: Send + Sync + 'static {
    /// Publishes `events` on the remote relay at `url`, waiting at most `timeout` for its
    /// answers.
    ///
    /// # Errors
    /// [`PortError::Remote`] when the relay cannot be reached or does not answer in time.
    fn publish_to(
        &self,
        url: &str,
        events: Vec<Event>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<Vec<Acceptance>>>;

    /// Subscribes on the remote relay at `url` with `filter` (authenticating as `auth`
    /// when the relay asks, NIP-42), sending what matches to `incoming` and publishing on
    /// the same connection what `outgoing` carries, until the connection ends.
    ///
    /// # Errors
    /// [`PortError::Remote`] with why the connection ended.
    fn subscribe_to(
        &self,
        url: &str,
        filter: serde_json::Value,
        auth: Option<secp256k1::Keypair>,
        incoming: mpsc::Sender<Event>,
        outgoing: broadcast::Receiver<Event>,
    ) -> BoxFuture<'static, Result<()>>;
}

/// The node's relay and its reach to remote relays, as the node's services see them.
///
/// Every event offered through the port passes the same admission checks a client's
/// `EVENT` would (signature, schema of fleetmesh kinds, revocations).
pub trait RelayPort: Remotes {
    /// Stores `event` (one this node made and signed) on the node's relay and hands it to
    /// live subscribers; resolves with the store's outcome.
    ///
    /// # Errors
    /// [`PortError::Refused`] with the relay's NIP-01 message.
    fn publish(&self, event: Event) -> BoxFuture<'_, Result<InsertOutcome>>;

    /// Hands an ephemeral `event` to the node's live subscribers without storing it.
    ///
    /// # Errors
    /// [`PortError::Refused`] with the relay's NIP-01 message (`invalid:` for a kind that
    /// is not ephemeral).
    fn broadcast(&self, event: Event) -> Result<()>;

    /// When the owner of `key` (x-only) revoked it (kind 11802), if the node's relay knows
    /// it was revoked at or before `now` (unix seconds).
    fn revoked_at(&self, key: &[u8; 32], now: u64) -> Option<u64>;

    /// Every event the node's relay accepts from now on (a receiver that falls behind
    /// loses the oldest).
    fn live(&self) -> broadcast::Receiver<Arc<LiveEvent>>;

    /// The stored events matching `filter`, at most `limit`, newest first.
    ///
    /// # Errors
    /// [`PortError::Store`] when the store cannot be read.
    fn stored(&self, filter: Filter, limit: u64) -> BoxFuture<'_, Result<Vec<Event>>>;
}

/// A group of background tasks a service started; [`Tasks::stop`] ends them.
#[derive(Default)]
pub struct Tasks(pub Vec<tokio::task::JoinHandle<()>>);

impl Tasks {
    /// Ends every task and waits for each (so each has let go of what it used: the store's
    /// last connection must close for its WAL to checkpoint).
    pub async fn stop(self) {
        for task in &self.0 {
            task.abort();
        }
        for task in self.0 {
            let _ = task.await;
        }
    }
}

/// Holds a subscription with `filter` open on each of `relays` through `remotes`, as `key`
/// (NIP-42 when asked; a relay that cannot be read is given to `on_error`): what matches
/// comes out of the receiver, what the sender carries is published on each; the tasks, to
/// abort when done. Call from within a runtime.
pub fn subscribe_all(
    remotes: &Arc<dyn Remotes>,
    relays: &[String],
    filter: &serde_json::Value,
    key: secp256k1::Keypair,
    on_error: impl Fn(PortError) + Clone + Send + 'static,
) -> (
    mpsc::Receiver<Event>,
    broadcast::Sender<Event>,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let (tx, rx) = mpsc::channel(256);
    let (out, _) = broadcast::channel(4);
    let mut tasks = Vec::new();
    for url in relays {
        let got = remotes.subscribe_to(url, filter.clone(), Some(key), tx.clone(), out.subscribe());
        let on_error = on_error.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(e) = got.await {
                on_error(e);
            }
        }));
    }
    (rx, out, tasks)
}
