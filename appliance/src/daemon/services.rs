//! The services a running node answers requests with — the prover backend (after the
//! hardware probe), the proving queue and the verify gatherer, the inference service, the
//! job service with its payments, the blob store, DIDComm and the live reconciliation —
//! opened once at start-up and shared by every face (`crate::http` routes to them; the
//! mailbox, offers and DIDComm hand them jobs).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use fleetmesh_market::blobs::BlobStore;
use fleetmesh_market::service::JobService;
use fleetmesh_proto::{Event, NodeKeys};
use fleetmesh_prover::gather::Gatherer;
use fleetmesh_prover::queue::ProvingQueue;
use fleetmesh_relay::face::Relay;
use tracing::info;

use crate::config::InferenceSection;
use crate::http::inference::InferenceService;
use crate::node::{CIRCUITS_DIR, KEYS_DIR, Node};

/// The running services, and the node they serve.
pub struct Services {
    /// The relay over the node's store.
    pub relay: Arc<Relay>,
    /// The federation's peers and their tallies.
    pub peers: Arc<crate::peers::Peers>,
    /// The accountability ledger's and the settlement records' books.
    pub books: crate::settlement::Books,
    /// The node's current descriptor (kind 11801).
    pub descriptor: Event,
    /// The prover backend (its description).
    pub backend: String,
    /// Why that backend was chosen.
    pub backend_reason: String,
    /// The devices the hardware probe saw, or why it did not run.
    pub devices: String,
    /// One proving queue for the API and the jobs alike.
    pub prover: Arc<ProvingQueue>,
    /// One verify gatherer for the API and the jobs alike.
    pub verifier: Arc<Gatherer>,
    /// The models served.
    pub inference: Arc<InferenceService>,
    /// The job service.
    pub jobs: Arc<JobService>,
    /// The blob store (Blossom's, the job engines').
    pub blobs: Arc<BlobStore>,
    /// DIDComm: the node's inbox, and the mediator when `[didcomm] mediate`.
    pub didcomm: Arc<fleetmesh_didcomm::DidComm>,
    /// What `reload`, `apply` and the manifest watcher change while the node runs.
    pub live: Arc<crate::reconcile::Live>,
    /// The NIP-11 document, serialized; replaced when `[jobs]` changes live.
    pub nip11: Arc<std::sync::RwLock<String>>,
    /// The node: its directory, configuration (as started), keys and store. Last, so it
    /// is dropped last: its store's read-write connection is then the last to close and
    /// checkpoints the WAL into the store file (a read-only one closing last cannot).
    pub node: Node,
}

impl Services {
    /// Opens the services of `node` over `relay` (`inference`: the models to serve,
    /// resolved; `extra_models`: `meshnode run --model`, kept for reloads).
    ///
    /// # Errors
    /// The configured backend is not available, a model does not load, or a store (jobs,
    /// blobs, held DIDComm messages) cannot be opened.
    pub fn open(
        mut node: Node,
        relay: Arc<Relay>,
        peers: Arc<crate::peers::Peers>,
        books: crate::settlement::Books,
        (inference, extra_models): (&InferenceSection, &[PathBuf]),
    ) -> anyhow::Result<Services> {
        let descriptor = node.current_descriptor()?;
        let (backend, why, devices) = backend(&node)?;
        let described = backend.describe();
        let inference = InferenceService::load(inference)?;
        let blobs = Arc::new(BlobStore::open(&node.dir)?);
        let verifier = Gatherer::start_on(backend.clone());
        let prover = ProvingQueue::with_tables(
            node.dir.join(CIRCUITS_DIR),
            backend,
            (node.config.compute.precompute_mib as usize).saturating_mul(1 << 20),
        );
        let jobs = JobService::start(
            &node.dir,
            fleetmesh_market::service::Parts {
                keys: keys(&node)?,
                relay: relay.clone(),
                blobs: blobs.clone(),
                prover: prover.clone(),
                verifier: verifier.clone(),
                inference: inference.clone(),
                payments: Arc::new(crate::settlement::CashuPayments {
                    wallet: node.dir.join(fleetmesh_settle::cashu::WALLET_FILE),
                    key: *keys(&node)?.nostr(),
                    mints: node
                        .config
                        .settlement
                        .mints
                        .iter()
                        .map(|m| fleetmesh_settle::cashu::token::normalize_mint(m))
                        .collect(),
                    books: books.clone(),
                }),
            },
            &node.config.jobs,
        )?;
        let didcomm = didcomm(&node, &descriptor, &jobs, &relay)?;
        let nip11 = node.nip11_document(&descriptor.id_hex(), &relay);
        let nip11 = Arc::new(std::sync::RwLock::new(nip11.to_string()));
        let live = Arc::new(crate::reconcile::Live::new(
            &node.dir,
            &node.config,
            extra_models,
            crate::reconcile::Services {
                jobs: jobs.clone(),
                inference: inference.clone(),
                nip11: nip11.clone(),
            },
        ));
        Ok(Services {
            node,
            relay,
            peers,
            books,
            descriptor,
            backend: described,
            backend_reason: why,
            devices,
            prover,
            verifier,
            inference,
            jobs,
            blobs,
            didcomm,
            live,
            nip11,
        })
    }

    /// The node's keys, read again from its key directory (they are not cloned in memory).
    ///
    /// # Errors
    /// The key files cannot be read.
    pub fn keys(&self) -> anyhow::Result<NodeKeys> {
        keys(&self.node)
    }
}

fn keys(node: &Node) -> anyhow::Result<NodeKeys> {
    Ok(NodeKeys::load(&node.dir.join(KEYS_DIR))?)
}

/// The prover backend `[compute] backend` names (probing the hardware only when the choice
/// needs it), why it was chosen, and what the probe saw.
fn backend(node: &Node) -> anyhow::Result<(Arc<dyn fleetmesh_kernels::MsmNtt>, String, String)> {
    let choice = node.config.compute.backend;
    let mut devices = format!("not probed ([compute] backend = \"{choice}\")");
    let (backend, why) = fleetmesh_kernels::route::select(choice, || {
        let found = fleetmesh_kernels::probe::probe();
        let adapters = match &found.wgpu {
            Ok(list) if list.is_empty() => "none".to_owned(),
            Ok(list) => list
                .iter()
                .map(|a| format!("{} ({}, {})", a.name, a.backend, a.device_type))
                .collect::<Vec<_>>()
                .join("; "),
            Err(e) => e.to_string(),
        };
        let cuda = match &found.cuda {
            fleetmesh_kernels::probe::CudaStatus::Available { devices, .. } => devices.join("; "),
            fleetmesh_kernels::probe::CudaStatus::Unavailable { reason } => reason.clone(),
        };
        info!(cpu_threads = found.cpu_threads, wgpu = %adapters, cuda = %cuda, "hardware probe");
        devices = format!(
            "{} CPU threads; wgpu: {adapters}; CUDA: {cuda}",
            found.cpu_threads
        );
        found
    })
    .with_context(|| format!("[compute] backend = \"{choice}\""))?;
    info!(backend = %backend.describe(), reason = %why, "prover backend");
    Ok((Arc::from(backend), why, devices))
}

/// DIDComm over the job service, with the mediator's held messages when `[didcomm]
/// mediate`.
fn didcomm(
    node: &Node,
    descriptor: &Event,
    jobs: &Arc<JobService>,
    relay: &Arc<Relay>,
) -> anyhow::Result<Arc<fleetmesh_didcomm::DidComm>> {
    let held = node
        .config
        .didcomm
        .mediate
        .then(|| {
            let path = node.dir.join(fleetmesh_didcomm::held::FILE);
            fleetmesh_didcomm::held::Held::open(&path, &node.config.didcomm)
        })
        .transpose()?;
    Ok(Arc::new(fleetmesh_didcomm::DidComm::new(
        keys(node)?,
        descriptor.clone(),
        jobs.clone(),
        node.config.didcomm.clone(),
        held,
        relay.clone(),
        node.config.api.jobs_by_key,
    )))
}
