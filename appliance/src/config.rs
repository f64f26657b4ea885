//! The node's configuration file, `meshnode.toml` in the node directory.
//!
//! Every key has a default, so a file with only `[node]` is complete. Unknown keys are
//! refused so that a typo never silently falls back to a default.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context as _;
use fleetmesh_kernels::BackendChoice;
use fleetmesh_proto::{Endpoint, NodeClass};
use serde::{Deserialize, Serialize};

mod api;
mod inference;
mod ledger;
mod peering;
mod settlement;
pub use api::ApiSection;
pub use inference::{ExecutorKind, ExecutorSection, InferenceSection, ModelEntry, Verification};
pub use ledger::{Fault, LedgerSection};
#[cfg(feature = "federation")]
pub(crate) use peering::pem_certs;
pub use peering::{PeerSection, PeeringSection, ShardSection};
pub use settlement::{Backend, SettlementSection};

/// File name of the configuration inside a node directory.
pub const FILE: &str = "meshnode.toml";

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Who this node is in the federation.
    pub node: NodeSection,
    /// The node's one listener.
    pub face: FaceSection,
    /// The relay face's limits and rate limits (advertised in NIP-11).
    pub relay: fleetmesh_relay::limits::Limits,
    /// The store.
    pub store: StoreSection,
    /// Where MSM/NTT run.
    pub compute: ComputeSection,
    /// The models served on the OpenAI-compatible API.
    pub inference: InferenceSection,
    /// Who may call the HTTP APIs.
    pub api: ApiSection,
    /// How the node runs market jobs.
    pub jobs: JobsSection,
    /// The Blossom blob store.
    pub blobs: BlobsSection,
    /// A directory of manifests the daemon applies itself.
    pub manifests: ManifestsSection,
    /// DIDComm Messaging v2 at `POST /didcomm`: mediation, and the node's own mediator.
    pub didcomm: DidcommSection,
    /// Peers whose stores the node keeps reconciled with its own.
    pub peering: PeeringSection,
    /// The accountability ledger: windows, and the grant every linked peer gets.
    pub ledger: LedgerSection,
    /// How the node is paid: the Cashu mints its wallet trusts.
    pub settlement: SettlementSection,
}

/// `[didcomm]`: see [`fleetmesh_didcomm::Config`].
pub use fleetmesh_didcomm::Config as DidcommSection;

/// `[manifests]`: a directory of manifests (YAML or JSON, as `meshnode apply -f` reads
/// them) the daemon applies itself, e.g. one a configuration-management tool or a
/// Kubernetes ConfigMap mount keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ManifestsSection {
    /// Apply every `.yaml`, `.yml` and `.json` file in `dir` when the daemon starts and
    /// whenever one of them changes, as one `meshnode apply`: a bad file changes nothing
    /// and is logged and counted (`fleetmesh_manifest_applies_total{source="watch"}`). A
    /// file taken out of `dir` leaves its manifest applied. Default false.
    pub watch: bool,
    /// The directory; a relative path is taken from the node directory. Default
    /// `manifests.d`.
    pub dir: std::path::PathBuf,
    /// Seconds between looks at `dir`. 1 to 3600. Default 2.
    pub interval_secs: u64,
}

impl Default for ManifestsSection {
    fn default() -> Self {
        ManifestsSection {
            watch: false,
            dir: "manifests.d".into(),
            interval_secs: 2,
        }
    }
}

/// `[blobs]`: the Blossom blob store (`PUT /upload`, `GET /<sha256>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BlobsSection {
    /// Seconds an upload may go without sending a body byte; then it is cut off and its
    /// partial file removed. 1 to 3600. Default 30. Lower frees stalled uploads' disk space
    /// and connections sooner, and cuts off clients on slow links sooner too.
    pub body_timeout_secs: u64,
    /// Most peers `GET /v1/blobs/served` keeps a byte count for; past it the peer with the
    /// fewest bytes is dropped to make room. 1 to 1 000 000. Default 1024.
    pub served_peers: usize,
    /// Most bytes of blobs one key may hold (its uploads, each counted whole whoever else
    /// uploaded it too); an upload past it is refused 413 `quota` before its body is read
    /// when its length is declared, else when it is in. 1 MiB to 1 TiB. Default 1 GiB.
    pub per_key_bytes: u64,
}

impl Default for BlobsSection {
    fn default() -> Self {
        BlobsSection {
            body_timeout_secs: 30,
            served_peers: 1024,
            per_key_bytes: 1 << 30,
        }
    }
}

/// `[jobs]`: how many market jobs run at once and the most any may use
/// (`fleetmesh_market::service::JobLimits`). A job's limits are cut to these (never refused
/// for asking more); NIP-11 advertises them under `fleetmesh.jobs`, so buyers know.
pub use fleetmesh_market::service::JobLimits as JobsSection;

/// `[store]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSection {
    /// `process` (default): a committed event survives the process being killed, and the
    /// last commits may be lost on power failure (SQLite WAL, synchronous=NORMAL).
    /// `power`: every commit is fsynced (synchronous=FULL); slower ingest.
    pub durability: fleetmesh_relay::store::Durability,
}

/// `[node]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct NodeSection {
    /// A human-readable name, served in NIP-11. Default: `fleetmesh node <pubkey prefix>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// backbone, community (holds `[[peering.shards]]`), edge or leaf. Default: edge.
    pub class: NodeClass,
    /// The operator's Nostr public key (hex). Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// Relays this node publishes to. Default: none.
    pub relays: Vec<String>,
    /// Endpoints this node is reachable at. Default: none.
    pub endpoints: Vec<Endpoint>,
    /// Where the node runs, as labels buyers filter providers by (`job submit --region`,
    /// `market providers --region`), published in its terms: each 1 to 64 of `a-z 0-9 -`
    /// (`eu-west`, `us-east-1`), at most 16. Default: none (the node names no region, and
    /// a buyer who asks for one passes it by).
    pub regions: Vec<String>,
}

impl NodeSection {
    /// `[node] regions` as [`Self::regions`] says they must be.
    fn check_regions(&self) -> Result<(), String> {
        if self.regions.len() > 16 {
            return Err(format!(
                "[node] regions: {} of them; at most 16",
                self.regions.len()
            ));
        }
        for r in &self.regions {
            let label = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
            if r.is_empty() || r.len() > 64 || !r.chars().all(label) {
                return Err(format!(
                    "[node] regions: {r:?}: 1 to 64 of lowercase letters, digits and '-'"
                ));
            }
        }
        Ok(())
    }
}

/// `[face]`: the one listener. None of it is reloadable: restart to change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaceSection {
    /// Address of the one listener (the relay WebSocket, NIP-11, the HTTP APIs, health
    /// and metrics). Default: 127.0.0.1:7777.
    pub listen: SocketAddr,
    /// Seconds a connection may take to send a complete request head; also how long an
    /// idle keep-alive connection is kept. 1 to 300. Default 10.
    pub header_timeout_secs: u64,
    /// Most connections open at once (WebSockets included); more are closed on accept.
    /// Keep it under the process's file limit (`ulimit -n`). 1 to 1 000 000. Default 512.
    pub max_connections: usize,
    /// Most connections open at once from one IP address. 1 to `max_connections`.
    /// Default 64.
    pub max_connections_per_ip: usize,
    /// Addresses `max_connections_per_ip` does not apply to (they still count under
    /// `max_connections`): a reverse proxy on the box, whose clients all arrive from its
    /// address (Caddy on the disk image). Default `["127.0.0.1", "::1"]`; add a container
    /// bridge's gateway when a published port's clients arrive from it, or set `[]` to cap
    /// loopback clients too.
    pub per_ip_exempt: Vec<std::net::IpAddr>,
    /// Seconds requests in flight may take to finish once a stop is asked for; then the
    /// rest are closed (queued events are committed either way). 0 to 3600. Default 10.
    pub shutdown_secs: u64,
    /// Bytes of request bodies the HTTP APIs (DIDComm, jobs, proofs, completions) hold in
    /// memory at once, all requests together: a request past it waits up to 2 s, then gets
    /// 503 with `Retry-After`; one client address (but those of `per_ip_exempt`) holds at
    /// most a quarter of it (at least 4 MiB). Blob uploads stream to disk and do not
    /// count. 4 MiB (the largest body a route takes) to 1 TiB. Default 64 MiB.
    pub body_bytes_total: usize,
    /// Seconds a body the HTTP APIs read whole may take to arrive once the budget admits
    /// it; a body that stalls is answered 408 and gives its bytes back. 1 to 3600. Default
    /// 30.
    pub body_timeout_secs: u64,
    /// Origins whose web pages may open the relay's WebSocket (browser Nostr clients);
    /// `"*"` for any. Clients that send no `Origin` (not browsers) are always served.
    /// Default `["*"]`.
    pub websocket_origins: Vec<String>,
}

/// The default listener address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7777";

impl Default for FaceSection {
    fn default() -> Self {
        FaceSection {
            listen: DEFAULT_LISTEN.parse().expect("valid default address"),
            header_timeout_secs: 10,
            max_connections: 512,
            max_connections_per_ip: 64,
            per_ip_exempt: vec![
                std::net::Ipv4Addr::LOCALHOST.into(),
                std::net::Ipv6Addr::LOCALHOST.into(),
            ],
            shutdown_secs: 10,
            body_bytes_total: 64 << 20,
            body_timeout_secs: 30,
            websocket_origins: vec!["*".into()],
        }
    }
}

/// `[compute]`. Read at start: restart to change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ComputeSection {
    /// auto, cpu, wgpu or cuda:N. Default: auto (CUDA, else a hardware GPU, else CPU).
    #[serde(with = "backend_str")]
    pub backend: BackendChoice,
    /// MiB the installed circuits' precomputed MSM tables may take together (CPU backend
    /// only; built in the background when a circuit loads). A 2^16-constraint key uses
    /// ~360 MiB for all the copies its MSMs can use, and each circuit gets what the
    /// others left. 0 turns them off. Default: 1024; at most 1048576.
    pub precompute_mib: u64,
}

impl Default for ComputeSection {
    fn default() -> Self {
        ComputeSection {
            backend: BackendChoice::default(),
            precompute_mib: 1024,
        }
    }
}

mod backend_str {
    use fleetmesh_kernels::BackendChoice;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &BackendChoice, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(b)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BackendChoice, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

const HEADER: &str = "\
# fleetmesh node configuration. Every key is optional; see docs/architecture.md.
# Changes take effect on the next `meshnode run`.
";

impl Config {
    /// Reads, parses and checks `DIR/meshnode.toml`.
    pub fn load(dir: &Path) -> anyhow::Result<Config> {
        let path = dir.join(FILE);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let config: Config =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        config
            .check()
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Ok(config)
    }

    /// Checks every numeric setting against the bound it really has, so a bad value stops
    /// the node at start-up, naming the key, rather than failing later.
    ///
    /// # Errors
    /// `[section] key = value: why` for the first setting out of range.
    pub fn check(&self) -> Result<(), String> {
        fn range(key: &str, v: u64, lo: u64, hi: u64) -> Result<(), String> {
            if v < lo || v > hi {
                return Err(format!("{key} = {v}: must be between {lo} and {hi}"));
            }
            Ok(())
        }
        self.relay.check().map_err(|e| format!("[relay] {e}"))?;
        self.node.check_regions()?;
        let f = &self.face;
        range("[face] header_timeout_secs", f.header_timeout_secs, 1, 300)?;
        range(
            "[face] max_connections",
            f.max_connections as u64,
            1,
            1_000_000,
        )?;
        range(
            "[face] max_connections_per_ip",
            f.max_connections_per_ip as u64,
            1,
            f.max_connections as u64,
        )?;
        range("[face] shutdown_secs", f.shutdown_secs, 0, 3600)?;
        range("[face] body_timeout_secs", f.body_timeout_secs, 1, 3600)?;
        range(
            "[face] body_bytes_total",
            f.body_bytes_total as u64,
            fleetmesh_proto::didcomm::MAX_MESSAGE_BYTES as u64,
            1 << 40,
        )?;
        range(
            "[compute] precompute_mib",
            self.compute.precompute_mib,
            0,
            1 << 20,
        )?;
        if let Some(t) = &self.api.token
            && (t.len() < 16 || t.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err("[api] token: must be at least 16 characters, without spaces".to_string());
        }
        let j = &self.jobs;
        range("[jobs] workers", j.workers as u64, 1, 64)?;
        range("[jobs] max_fuel", j.max_fuel, 1, 1_000_000_000_000_000)?;
        range("[jobs] max_wall_secs", j.max_wall_secs, 1, 86_400)?;
        range("[jobs] per_buyer", j.per_buyer, 1, 100_000)?;
        range(
            "[jobs] max_memory_bytes",
            j.max_memory_bytes,
            1 << 20,
            4 << 30,
        )?;
        range(
            "[jobs] max_output_bytes",
            j.max_output_bytes,
            1 << 10,
            1 << 30,
        )?;
        range("[jobs] max_tokens", j.max_tokens, 1, 1_000_000)?;
        range(
            "[jobs] max_input_bytes",
            j.max_input_bytes,
            1 << 10,
            1 << 30,
        )?;
        if j.engines.is_empty() || j.modes.is_empty() {
            return Err("[jobs] engines and modes: each names at least one".to_string());
        }
        for (engine, price) in &j.prices {
            if engine.parse::<fleetmesh_proto::Engine>().is_err() {
                return Err(format!(
                    "[jobs.prices] {engine:?}: not an engine (wasm, groth16-prove, \
                     groth16-verify, llm, data)"
                ));
            }
            if !fleetmesh_market::service::MEASURES.contains(&price.per.as_str()) {
                return Err(format!(
                    "[jobs.prices.{engine}] per = {:?}: one of {}",
                    price.per,
                    fleetmesh_market::service::MEASURES.join(", ")
                ));
            }
            if price.quantity == 0 {
                return Err(format!("[jobs.prices.{engine}] quantity: at least 1"));
            }
        }
        range(
            "[manifests] interval_secs",
            self.manifests.interval_secs,
            1,
            3600,
        )?;
        self.peering.check()?;
        self.ledger.check()?;
        self.settlement.check()?;
        self.api.check()?;
        if !self.api.prices.is_empty()
            && self.settlement.lightning.backend == Backend::Cashu
            && self.settlement.mints.is_empty()
        {
            return Err(
                "[api.prices] is set but nothing can issue its invoices: set [settlement] \
                 mints (the Cashu mint's invoices) or [settlement.lightning] backend = \
                 \"lnd\" or \"cln\""
                    .into(),
            );
        }
        if !self.jobs.prices.is_empty() && self.settlement.mints.is_empty() {
            return Err(
                "[jobs.prices] is set but [settlement] mints is empty: a priced job \
                        could never be paid"
                    .into(),
            );
        }
        let d = &self.didcomm;
        range("[didcomm] hold_per_did", d.hold_per_did as u64, 1, 100_000)?;
        range("[didcomm] hold_bytes", d.hold_bytes, 1 << 20, 4 << 30)?;
        range("[didcomm] hold_secs", d.hold_secs, 60, 604_800)?;
        range(
            "[didcomm] source_messages",
            d.source_messages as u64,
            1,
            100_000,
        )?;
        range("[didcomm] source_bytes", d.source_bytes, 64 << 10, 4 << 30)?;
        if d.source_messages >= d.hold_per_did {
            return Err(format!(
                "[didcomm] source_messages = {} must be less than hold_per_did = {}: one \
                 source must not be able to fill a DID's queue",
                d.source_messages, d.hold_per_did
            ));
        }
        if d.source_bytes >= d.hold_bytes {
            return Err(format!(
                "[didcomm] source_bytes = {} must be less than hold_bytes = {}: one source \
                 must not be able to fill what the node holds",
                d.source_bytes, d.hold_bytes
            ));
        }
        range("[didcomm] pickup_secs", d.pickup_secs, 1, 3600)?;
        match (&d.mediator, &d.mediator_url) {
            (None, None) => {}
            (Some(m), Some(url)) => {
                fleetmesh_proto::did::parse_did(m)
                    .map_err(|e| format!("[didcomm] mediator: {e}"))?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!(
                        "[didcomm] mediator_url = {url:?}: an http:// or https:// URL"
                    ));
                }
            }
            (Some(m), None) => {
                fleetmesh_proto::did::parse_did(m)
                    .map_err(|e| format!("[didcomm] mediator: {e}"))?;
                // picked up over the QUIC link to the mediator, found by gossip
                if !cfg!(feature = "federation")
                    || self.peering.quic_listen.is_none()
                    || self.peering.gossip_listen.is_none()
                {
                    return Err(
                        "[didcomm] mediator without mediator_url is reached over a QUIC \
                                link: it needs [peering] quic_listen and gossip_listen (or give \
                                mediator_url)"
                            .to_string(),
                    );
                }
            }
            (None, Some(_)) => {
                return Err("[didcomm] mediator_url needs mediator".to_string());
            }
        }
        if !self.peering.shards.is_empty() && self.node.class != NodeClass::Community {
            return Err(format!(
                "[[peering.shards]]: only a community node holds authoritative shards; this \
                 one is [node] class = \"{}\"",
                self.node.class.as_str()
            ));
        }
        range(
            "[blobs] body_timeout_secs",
            self.blobs.body_timeout_secs,
            1,
            3600,
        )?;
        range(
            "[blobs] served_peers",
            self.blobs.served_peers as u64,
            1,
            1_000_000,
        )?;
        range(
            "[blobs] per_key_bytes",
            self.blobs.per_key_bytes,
            1 << 20,
            1 << 40,
        )?;
        let i = &self.inference;
        range("[inference] max_batch", i.max_batch as u64, 1, 256)?;
        range("[inference] max_queue", i.max_queue as u64, 1, 100_000)?;
        for (key, v) in [
            (
                "[inference.quorum] near_tie_epsilon",
                i.quorum.near_tie_epsilon,
            ),
            (
                "[inference.quorum] logprob_tolerance",
                i.quorum.logprob_tolerance,
            ),
        ] {
            if !v.is_finite() || !(0.0..=100.0).contains(&v) {
                return Err(format!("{key} = {v}: must be a number between 0 and 100"));
            }
        }
        for e in &i.executors {
            range("[[inference.executors]] timeout_s", e.timeout_s, 1, 86_400)?;
            range(
                "[[inference.executors]] connect_timeout_s",
                e.connect_timeout_s,
                1,
                600,
            )?;
        }
        Ok(())
    }

    /// The file's text, with a header comment.
    pub fn to_toml(&self) -> String {
        format!(
            "{HEADER}\n{}",
            toml::to_string_pretty(self).expect("config serializes")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{Config, InferenceSection, Verification};

    #[test]
    fn regions_are_short_labels_and_few() {
        let with = |regions: &str| {
            toml::from_str::<Config>(&format!("[node]\nregions = {regions}"))
                .unwrap()
                .check()
        };
        assert_eq!(with(r#"["eu-west", "us-east-1"]"#), Ok(()));
        for bad in [r#"["EU"]"#, r#"[""]"#, r#"["eu west"]"#] {
            let e = with(bad).unwrap_err();
            assert!(e.starts_with("[node] regions"), "{bad}: {e}");
        }
        let many: Vec<String> = (0..17).map(|i| format!("\"r{i}\"")).collect();
        let e = with(&format!("[{}]", many.join(","))).unwrap_err();
        assert!(e.contains("at most 16"), "{e}");
    }

    #[test]
    fn the_msm_table_budget_is_bounded_and_defaults_to_a_gib() {
        let with = |v: &str| {
            toml::from_str::<Config>(&format!("[compute]\n{v}"))
                .unwrap()
                .check()
        };
        assert_eq!(Config::default().compute.precompute_mib, 1024);
        assert_eq!(with("precompute_mib = 0"), Ok(()));
        let e = with("precompute_mib = 1048577").unwrap_err();
        assert!(
            e.starts_with("[compute] precompute_mib = 1048577: must be"),
            "{e}"
        );
    }

    #[test]
    fn verification_is_none_or_a_protocol_mode_an_answer_can_carry() {
        for v in [
            Verification::None,
            Verification::QuasiDeterministic,
            Verification::TeeAttestation,
            Verification::SchemaBounds,
        ] {
            assert_eq!(v.as_str().parse(), Ok(v));
            let section: InferenceSection =
                toml::from_str(&format!("verification = {:?}", v.as_str())).unwrap();
            assert_eq!(section.verification, v);
            assert_eq!(
                v.mode().map(|m| m.as_str()),
                (v != Verification::None).then(|| v.as_str())
            );
        }
        // Modes of the protocol that no inference answer carries, and misspellings.
        for bad in ["proof", "delivery", "Quasi-Deterministic", ""] {
            assert!(bad.parse::<Verification>().is_err(), "{bad}");
        }
        let e = toml::from_str::<InferenceSection>("verification = \"proof\"").unwrap_err();
        assert!(e.to_string().contains("is not one of none"), "{e}");
    }

    #[test]
    fn a_mediators_source_quotas_are_bounded_and_below_what_it_holds() {
        let with = |v: &str| {
            toml::from_str::<Config>(&format!("[didcomm]\n{v}"))
                .unwrap()
                .check()
        };
        let d = Config::default().didcomm;
        assert_eq!((d.source_messages, d.source_bytes), (64, 8 << 20));
        assert_eq!(with("source_messages = 1\nsource_bytes = 65536"), Ok(()));
        for (bad, says) in [
            ("source_messages = 0", "source_messages = 0: must be"),
            ("source_bytes = 1024", "source_bytes = 1024: must be"),
            ("source_messages = 256", "less than hold_per_did = 256"),
            (
                "hold_per_did = 10\nsource_messages = 10",
                "less than hold_per_did",
            ),
            ("source_bytes = 67108864", "less than hold_bytes = 67108864"),
        ] {
            let e = with(bad).unwrap_err();
            assert!(
                e.starts_with("[didcomm] ") && e.contains(says),
                "{bad}: {e}"
            );
        }
        // a key that is not one is refused, not ignored
        assert!(toml::from_str::<Config>("[didcomm]\nsource_window_secs = 60").is_err());
    }
}
