//! The work a node does beside answering requests, started once the listener is bound
//! and ended, in order, when the node stops: the mailbox (jobs gift-wrapped to it), offers
//! (its terms, and offers on asks it can fill), the wallet's services (Nostr Wallet Connect,
//! nutzaps), peering rounds and their kicker, the federation's transports with the
//! accountability ledger over their links, shard summaries, the NIP-66/NIP-85 projections,
//! DIDComm pickup from a mediator, and the manifest watcher.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::services::Services;
use fleetmesh_port::Tasks;

/// Where the ledger is put once the federation has started it (the control socket's
/// `grant.*` commands and the projections read it).
#[cfg(feature = "federation")]
pub type Accounts = Arc<std::sync::OnceLock<Arc<crate::ledger::Accounts>>>;

/// The background work of a running node.
pub struct Background {
    watcher: Option<JoinHandle<()>>,
    mailbox: Tasks,
    /// Offers, Nostr Wallet Connect and nutzaps, each when enabled.
    relay_services: Vec<Tasks>,
    kicker: JoinHandle<()>,
    shards: Option<JoinHandle<()>>,
    projections: Option<JoinHandle<()>>,
    peering: Tasks,
    #[cfg(feature = "federation")]
    ledger: Vec<JoinHandle<()>>,
    #[cfg(feature = "federation")]
    federation: Option<crate::federation::Federation>,
    pickup: Option<JoinHandle<()>>,
}

impl Background {
    /// Starts the background work of the node `s` serves, listening on `local`.
    ///
    /// # Errors
    /// A wallet service or a federation transport cannot start (its configuration names
    /// what cannot be opened or bound).
    pub async fn start(
        s: &Services,
        local: SocketAddr,
        #[cfg(feature = "federation")] accounts: &Accounts,
    ) -> anyhow::Result<Background> {
        let (node, relay, peers) = (&s.node, &s.relay, &s.peers);
        let relays = &node.config.node.relays;
        // jobs gift-wrapped to this node, on its relay and on those it names
        let mailbox = fleetmesh_market::mailbox::start(
            relays.clone(),
            s.keys()?,
            s.live.jobs(),
            relay.clone(),
            node.config.api.jobs_by_key,
        );
        let relay_services = relay_services(s).await?;
        // stores reconciled with the peers of [peering]
        let peering = crate::peering::start(
            node.dir.join(crate::node::DB_FILE),
            &node.config.peering,
            node.config.store.durability,
            peers.clone(),
        );
        #[cfg(feature = "federation")]
        let (federation, ledger) = federation(s, accounts).await?;
        // new events here start peering rounds at once
        let kicker = peers.spawn_kicker(relay);
        // a community node's authoritative shards, summarized and published as they change
        let every = Duration::from_secs(node.config.peering.interval_secs);
        let shards = crate::shards::spawn(
            relay.clone(),
            node.dir.join(crate::node::DB_FILE),
            s.keys()?,
            node.config.peering.shards.clone(),
            every,
        );
        // NIP-66 (this face) and NIP-85 (the ledger's peers) for standard clients
        let projections = crate::projections::Projector {
            keys: s.keys()?,
            relay: relay.clone(),
            nip11: s.live.nip11(),
            face: crate::projections::face_url(&node.config, local),
            relays: relays.clone(),
            #[cfg(feature = "federation")]
            accounts: accounts.clone(),
        }
        .spawn(Duration::from_secs(node.config.ledger.publish_secs));
        // messages held for this node by its mediator ([didcomm] mediator)
        #[cfg(feature = "federation")]
        let pickup = s
            .didcomm
            .spawn_pickup(federation.as_ref().map(|f| f.links()));
        #[cfg(not(feature = "federation"))]
        let pickup = s.didcomm.spawn_pickup();
        let m = &node.config.manifests;
        let watcher = m.watch.then(|| {
            tokio::spawn(crate::apply::watch(
                node.dir.clone(),
                node.dir.join(&m.dir),
                Duration::from_secs(m.interval_secs),
                s.live.clone(),
            ))
        });
        Ok(Background {
            watcher,
            mailbox,
            relay_services,
            kicker,
            shards,
            projections,
            peering,
            #[cfg(feature = "federation")]
            ledger,
            #[cfg(feature = "federation")]
            federation,
            pickup,
        })
    }

    /// Ends the background work, waiting for each task that holds the store or a socket to
    /// let go of it.
    pub async fn stop(self) {
        if let Some(task) = self.watcher {
            task.abort();
        }
        self.mailbox.stop().await;
        for tasks in self.relay_services {
            tasks.stop().await;
        }
        self.kicker.abort();
        for task in [self.shards, self.projections].into_iter().flatten() {
            task.abort();
        }
        self.peering.stop().await;
        #[cfg(feature = "federation")]
        for task in self.ledger {
            task.abort();
        }
        #[cfg(feature = "federation")]
        if let Some(f) = self.federation {
            f.stop().await;
        }
        if let Some(task) = self.pickup {
            task.abort();
            let _ = task.await;
        }
    }
}

/// The node's services on the relays beside the mailbox: its terms published and offers
/// on asks it can fill (with jobs by key), Nostr Wallet Connect (`[settlement] nwc`) and
/// nutzaps (`[settlement] nutzaps`).
async fn relay_services(s: &Services) -> anyhow::Result<Vec<Tasks>> {
    let (node, relay) = (&s.node, &s.relay);
    let relays = &node.config.node.relays;
    let mut started = Vec::new();
    if node.config.api.jobs_by_key {
        let inference = s.live.inference();
        let offers = fleetmesh_market::desk::start(
            relays.clone(),
            s.keys()?,
            s.live.jobs(),
            relay.clone(),
            (
                node.config.settlement.mints.clone(),
                node.config.node.regions.clone(),
            ),
            Arc::new(move || inference.catalog()),
        );
        started.push(offers.await);
    }
    let wallet = &node.config.settlement;
    if wallet.nwc {
        let grants = wallet.nwc_grants(&node.dir)?;
        let nwc = fleetmesh_settle::nwc::start(s.keys()?, grants, relays.clone(), relay.clone());
        started.push(nwc.await?);
    }
    if wallet.nutzaps {
        let nutzaps = fleetmesh_settle::nutzap::start(
            s.keys()?,
            node.dir.join(fleetmesh_settle::cashu::WALLET_FILE),
            relays.clone(),
            relay.clone(),
            &wallet.mints,
        );
        started.push(nutzaps.await?);
    }
    Ok(started)
}

/// The federation transports (`[peering] quic_listen`, `gossip_listen`), and the
/// accountability ledger over their links (`[ledger]`); neither without those keys.
#[cfg(feature = "federation")]
async fn federation(
    s: &Services,
    accounts: &Accounts,
) -> anyhow::Result<(Option<crate::federation::Federation>, Vec<JoinHandle<()>>)> {
    let node = &s.node;
    let federation = crate::federation::start(
        &node.config,
        s.keys()?,
        &s.descriptor,
        s.relay.clone(),
        &node.dir,
        s.peers.clone(),
        s.didcomm.clone(),
    )
    .await?;
    let ledger = match &federation {
        Some(f) => ledger(s, f, accounts)?,
        None => Vec::new(),
    };
    Ok((federation, ledger))
}

/// The accountability ledger over the federation's links: DIDComm hands it the ledger's
/// messages, the relay asks it what each peer is granted, and `accounts` holds it for the
/// control socket and the projections.
#[cfg(feature = "federation")]
fn ledger(
    s: &Services,
    federation: &crate::federation::Federation,
    accounts: &Accounts,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let ledger = crate::ledger::Accounts::open(
        &s.node.dir,
        s.books.clone(),
        s.descriptor.clone(),
        s.relay.clone(),
        s.peers.clone(),
        federation.links(),
        s.node.config.ledger.clone(),
    )?;
    let (tx, rx) = tokio::sync::mpsc::channel(crate::ledger::INBOX);
    let knows = ledger.clone();
    s.didcomm
        .set_ledger(tx, Arc::new(move |peer: &str| knows.knows(peer)));
    let granted = ledger.clone();
    s.relay
        .set_granted(Arc::new(move |peer: &str| granted.allowance(peer)));
    let _ = accounts.set(ledger.clone());
    Ok(ledger.spawn(rx))
}
