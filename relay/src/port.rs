//! The node's relay as the [`RelayPort`] its services use: publishing and broadcasting
//! through the same admission checks as a client's `EVENT`, the live fan-out, queries on
//! the reader pool, and the NIP-01 client ([`crate::sync`]) for remote relays — which a
//! process without a relay of its own uses as [`Client`].

use std::sync::Arc;
use std::time::Duration;

use fleetmesh_port::{
    Acceptance, BoxFuture, InsertOutcome, LiveEvent, PortError, RelayPort, Remotes,
};
use fleetmesh_proto::Event;
use fleetmesh_proto::filter::Filter;
use tokio::sync::{broadcast, mpsc};

use crate::face::Relay;
use crate::store::EventStore as _;

impl RelayPort for Relay {
    fn publish(&self, event: Event) -> BoxFuture<'_, fleetmesh_port::Result<InsertOutcome>> {
        Box::pin(async move {
            Relay::publish(self, event)
                .await
                .map_err(PortError::Refused)
        })
    }

    fn broadcast(&self, event: Event) -> fleetmesh_port::Result<()> {
        Relay::broadcast(self, event).map_err(PortError::Refused)
    }

    fn revoked_at(&self, key: &[u8; 32], now: u64) -> Option<u64> {
        self.revoked().revoked_by(key, now)
    }

    fn live(&self) -> broadcast::Receiver<Arc<LiveEvent>> {
        Relay::live(self)
    }

    fn stored(
        &self,
        filter: Filter,
        limit: u64,
    ) -> BoxFuture<'_, fleetmesh_port::Result<Vec<Event>>> {
        Box::pin(async move {
            let found = self
                .read(move |store| store.query(&[filter], limit, fleetmesh_proto::unix_now()))
                .await
                .map_err(|e| PortError::Store(e.to_string()))?;
            Ok(found
                .iter()
                .filter_map(|s| Event::from_json(&s.raw).ok())
                .collect())
        })
    }
}

/// Remote relays reached with the NIP-01 client in [`crate::sync`], for a process with no
/// relay of its own (the command line).
#[derive(Debug, Clone, Copy, Default)]
pub struct Client;

/// What failed at the remote relay `url`.
fn remote(url: String, e: &crate::Error) -> PortError {
    PortError::Remote {
        url,
        reason: e.to_string(),
    }
}

impl Remotes for Client {
    fn publish_to(
        &self,
        url: &str,
        events: Vec<Event>,
        timeout: Duration,
    ) -> BoxFuture<'static, fleetmesh_port::Result<Vec<Acceptance>>> {
        let url = url.to_string();
        Box::pin(async move {
            let sent = crate::sync::publish(&url, &events, None, timeout).await;
            sent.map_err(|e| remote(url, &e))
        })
    }

    fn subscribe_to(
        &self,
        url: &str,
        filter: serde_json::Value,
        auth: Option<secp256k1::Keypair>,
        incoming: mpsc::Sender<Event>,
        mut outgoing: broadcast::Receiver<Event>,
    ) -> BoxFuture<'static, fleetmesh_port::Result<()>> {
        let url = url.to_string();
        Box::pin(async move {
            let ended =
                crate::sync::subscribe(&url, &filter, (None, auth), &incoming, &mut outgoing).await;
            ended.map_err(|e| remote(url, &e))
        })
    }
}

impl Remotes for Relay {
    fn publish_to(
        &self,
        url: &str,
        events: Vec<Event>,
        timeout: Duration,
    ) -> BoxFuture<'static, fleetmesh_port::Result<Vec<Acceptance>>> {
        Client.publish_to(url, events, timeout)
    }

    fn subscribe_to(
        &self,
        url: &str,
        filter: serde_json::Value,
        auth: Option<secp256k1::Keypair>,
        incoming: mpsc::Sender<Event>,
        outgoing: broadcast::Receiver<Event>,
    ) -> BoxFuture<'static, fleetmesh_port::Result<()>> {
        Client.subscribe_to(url, filter, auth, incoming, outgoing)
    }
}
