//! The daemon: start-up and shutdown of every subsystem of a running node, in one place.
//!
//! [`Daemon::start`] opens, in order: the relay over the node's store (its expiry purge,
//! shedder, leaf eviction and rejection summaries), the peers' table, the control socket
//! ([`control`]: one daemon per node directory, said before anything else is held), the
//! books, the [`Services`] requests are answered with, the TCP listener, the control
//! socket's commands ([`commands`]), and the [`background`] work (mailbox, offers, wallet
//! services, peering, the federation and its ledger, shards, projections, DIDComm pickup,
//! the manifest watcher).
//!
//! The HTTP face only routes: `main.rs` joins the two as `Daemon::start` →
//! `http::router(daemon.services())` → [`Daemon::listening`] → `http::listener::serve` →
//! [`Daemon::stop`]. The stop runs the start backwards and ends with the store's writer
//! committing what is queued, whatever connection is still open.

mod background;
mod commands;
pub mod control;
mod services;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use fleetmesh_relay::face::{Relay, RelayConfig};
use tokio::net::TcpListener;
use tracing::info;

pub use services::Services;

use crate::config::InferenceSection;
use crate::node::Node;

/// A running node: its services, its listener until it is handed to the face, the
/// control socket, the background work and the store's writer.
pub struct Daemon {
    services: Services,
    listener: Option<TcpListener>,
    local: SocketAddr,
    control: Option<(tokio::task::JoinHandle<()>, control::Control)>,
    background: background::Background,
    writer: std::thread::JoinHandle<()>,
}

impl Daemon {
    /// Starts every subsystem of `node`, listening on `listen` (`inference`: the models to
    /// serve, resolved; `extra_models`: `meshnode run --model`). Call inside the runtime.
    ///
    /// # Errors
    /// A non-loopback `listen` without `[api] token`; another daemon on this node
    /// directory; a store, model, backend or port that cannot be opened or bound.
    pub async fn start(
        node: Node,
        listen: SocketAddr,
        inference: &InferenceSection,
        extra_models: &[PathBuf],
    ) -> anyhow::Result<Daemon> {
        if !listen.ip().is_loopback() && node.config.api.token.is_none() {
            anyhow::bail!(
                "listening on {listen}, which is not a loopback address, needs [api] token in \
                 {}: without it anyone who reaches the port could run compute and proofs here",
                crate::config::FILE
            );
        }
        let (relay, writer) = start_relay(&node)?;
        let peers = Arc::new(crate::peers::Peers::new(
            node.config.peering.max_peers as usize * 4,
        ));
        // one daemon per node directory: its control socket says so before anything is held
        let control_socket = control::bind(&node.dir)?;
        // the books: the accountability ledger's and the settlement records'
        let books = crate::settlement::open_books(&node.dir, &node.keys.nostr_pubkey_hex())?;
        let services = Services::open(node, relay, peers, books, (inference, extra_models))?;
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        let local = listener.local_addr().context("reading the bound address")?;
        #[cfg(feature = "federation")]
        let accounts = background::Accounts::default();
        let control = control_socket.map(|(socket, control)| {
            let handler = commands::handler(
                &services,
                local,
                #[cfg(feature = "federation")]
                accounts.clone(),
            );
            (tokio::spawn(control::serve(socket, handler)), control)
        });
        let background = background::Background::start(
            &services,
            local,
            #[cfg(feature = "federation")]
            &accounts,
        )
        .await?;
        Ok(Daemon {
            services,
            listener: Some(listener),
            local,
            control,
            background,
            writer,
        })
    }

    /// The running services, for the faces to route to.
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// Says where the node listens — a log event, one line on stdout for scripts and
    /// humans, and `listening` — and hands over the listener, with a future that resolves
    /// when the node is told to stop (SIGINT or SIGTERM, registered before the line is
    /// printed): schema compilations then stop at their next check and WebSockets are told
    /// to close (1001).
    ///
    /// # Errors
    /// The signal handlers cannot be registered, or the listener was handed over already.
    pub fn listening<F: FnOnce(SocketAddr)>(
        &mut self,
        listening: F,
    ) -> anyhow::Result<(TcpListener, impl Future<Output = ()> + use<F>)> {
        let listener = self.listener.take().context("the listener is in use")?;
        let signals = shutdown_signal()?;
        let (local, node) = (self.local, &self.services.node);
        info!(
            address = %local,
            pubkey = %node.keys.nostr_pubkey_hex(),
            dir = %node.dir.display(),
            "listening"
        );
        println!(
            "meshnode listening on http://{local} (node {})",
            node.keys.nostr_pubkey_hex()
        );
        listening(local);
        let closer = self.services.relay.clone();
        Ok((listener, async move {
            signals.await;
            info!("stopping");
            fleetmesh_inference::schema::stop_compiles();
            closer.close_all();
        }))
    }

    /// Stops the node once its face has: the control socket, the background work, then
    /// the store's writer, which commits what is queued.
    ///
    /// # Errors
    /// The writer panicked, or could not be waited for.
    pub async fn stop(self) -> anyhow::Result<()> {
        if let Some((task, socket)) = self.control {
            task.abort();
            drop(socket);
        }
        self.background.stop().await;
        let relay = self.services.relay.clone();
        drop(self.services.didcomm);
        tokio::task::spawn_blocking(move || {
            relay.stop_writer();
            self.writer.join()
        })
        .await
        .context("waiting for the store writer")?
        .map_err(|_| anyhow::anyhow!("the store writer panicked"))?;
        info!("stopped");
        Ok(())
    }
}

/// The relay over the node's store, with its housekeeping: the expiry purge, the shedder
/// (`[relay] shedding = "auto"`), a leaf's cache eviction and the rejection summaries.
fn start_relay(node: &Node) -> anyhow::Result<(Arc<Relay>, std::thread::JoinHandle<()>)> {
    let (relay, writer) = Relay::start(
        &node.dir.join(crate::node::DB_FILE),
        RelayConfig {
            limits: node.config.relay.clone(),
            durability: node.config.store.durability,
        },
    )?;
    relay.spawn_expiry_purge(std::time::Duration::from_secs(60));
    // the rung follows the pressure (ends with the relay)
    let _ = relay.spawn_shedder();
    if node.config.node.class == fleetmesh_proto::NodeClass::Leaf {
        // a leaf keeps a bounded cache of others' events, its own always
        relay.spawn_eviction(
            node.config.peering.leaf_cache_events as usize,
            node.keys.nostr_pubkey(),
            std::time::Duration::from_secs(node.config.peering.interval_secs),
        );
    }
    relay.spawn_rejection_summary(std::time::Duration::from_secs(60));
    Ok((relay, writer))
}

/// Registers the SIGINT and SIGTERM handlers now; the returned future resolves on the
/// first of them.
fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
        let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
        Ok(async move {
            tokio::select! {
                _ = int.recv() => info!("SIGINT: shutting down"),
                _ = term.recv() => info!("SIGTERM: shutting down"),
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            if tokio::signal::ctrl_c().await.is_ok() {
                info!("Ctrl-C: shutting down");
            }
        })
    }
}
