//! Command-line interface: every subcommand and its flags.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use fleetmesh_kernels::BackendChoice;
use fleetmesh_proto::{Endpoint, NodeClass};

pub use super::proof_args::ProofCommand;
pub use super::provider_args::{ByKey, JobNode, MarketArgs, MarketCommand, RouteArgs};

/// `meshnode did …`.
#[derive(Debug, Subcommand)]
pub enum DidCommand {
    /// Print the node's DID document (W3C DID Core, did:nostr), built from its current
    /// descriptor: its three keys as Multikeys, its relays and endpoints as services. The
    /// daemon serves the same at /.well-known/did.json.
    Show {
        /// The node directory [default: $MESHNODE_HOME or the platform data directory].
        dir: Option<PathBuf>,
    },
    /// Resolve did:nostr:HEX through relays: the newest node descriptor (kind 11801) that
    /// verifies (signature, DID, Ed25519 proof, schema), refused when a revocation
    /// (kind 11802) by the same key revokes one of its keys; prints its DID document.
    Resolve(DidResolveArgs),
}

/// `meshnode did resolve`.
#[derive(Debug, Args)]
pub struct DidResolveArgs {
    /// The DID: did:nostr: and 64 lowercase hex digits.
    pub did: String,
    /// A relay to ask (ws:// or wss://); repeatable, all are asked.
    #[arg(long = "relay", value_name = "URL", required = true)]
    pub relays: Vec<String>,
    /// For wss:// relays: also trust the CA certificate(s) in this PEM file.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Seconds to wait for each relay's answers.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub timeout_secs: u64,
}

/// `meshnode job …`: each talks to a running node (`--node`).
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once
pub enum JobCommand {
    /// Submit a job file: signs an ask (kind 30810) with the buyer's key, encrypts the
    /// compute/1.0 job to the provider's key (NIP-44), sends both; prints the job id. The
    /// same file again is the same job. A Bacalhau v1 spec (YAML or JSON) with a wasm task
    /// is accepted too; other specs are refused (exit 2) with the reason.
    Submit {
        /// The job file (JSON: engine, mode, module, input, args, limits, bid, expires_in) or
        /// a Bacalhau job spec.
        file: PathBuf,
        /// Make this the ask's address (`d` tag) instead of one derived from the file: a
        /// second submission with the same key is the same job, and one with the same key
        /// but another file is refused as a conflict.
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
        #[command(flatten)]
        to: JobNode,
        #[command(flatten)]
        by_key: ByKey,
        #[command(flatten)]
        pay: crate::cli::wallet::PayArgs,
        #[command(flatten)]
        route: RouteArgs,
    },
    /// Print the job's state as JSON; exit 0 verified, 1 failed or expired, 3 pending.
    Status {
        /// The job id.
        id: String,
        #[command(flatten)]
        to: JobNode,
    },
    /// Fetch and decrypt the result; write stdout, stderr and the output files to DIR.
    Result {
        /// The job id.
        id: String,
        /// Where to write the output.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        #[command(flatten)]
        to: JobNode,
    },
    /// Print the job's receipt event (kind 30811).
    Receipt {
        /// The job id.
        id: String,
        #[command(flatten)]
        to: JobNode,
    },
}

/// `meshnode wasi …`.
#[derive(Debug, Subcommand)]
pub enum WasiCommand {
    /// Run a WASI command module (`.wasm`, or `.wat` text) as a job would: fuel, memory and
    /// wall-clock limits, no environment or network, `--input` read-only at /inputs and
    /// `--output` writable at /outputs, clocks and randomness fixed. Prints one JSON line
    /// (status, exit code, fuel used, stdout, stderr); exit 0 when the module exits 0, 1
    /// when it fails or hits a limit, 2 for a module that is not a WASI command.
    Run(WasiRunArgs),
}

/// `meshnode wasi run`.
#[derive(Debug, Args)]
pub struct WasiRunArgs {
    /// The module.
    pub module: PathBuf,
    /// A directory the module reads at /inputs.
    #[arg(long, value_name = "DIR")]
    pub input: Option<PathBuf>,
    /// A directory the module writes at /outputs.
    #[arg(long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Fuel (about one unit per instruction).
    #[arg(long, default_value_t = 1_000_000_000)]
    pub fuel: u64,
    /// Linear memory limit, MiB.
    #[arg(long, default_value_t = 64)]
    pub memory_mib: usize,
    /// Wall-clock limit, seconds.
    #[arg(long, default_value_t = 10)]
    pub timeout: u64,
    /// A file whose bytes are the module's stdin.
    #[arg(long, value_name = "FILE")]
    pub stdin: Option<PathBuf>,
    /// Arguments for the module (after `--`).
    #[arg(last = true)]
    pub args: Vec<String>,
}

/// `meshnode attest …`.
#[derive(Debug, Subcommand)]
pub enum AttestCommand {
    /// Verify an AMD SEV-SNP attestation report (`--snp`: its signature by the VCEK or
    /// VLEK, the chain to AMD's root, the VCEK's TCB and chip ID, the policy given, and
    /// each `--crl`) or an NVIDIA Hopper GPU's SPDM measurements (`--nvidia`: the
    /// signature, the device chain to NVIDIA's root, the nonce, each `--rim`'s golden
    /// measurements and each `--ocsp` response). Chains are validated as certification
    /// paths (CA flags, key usage, path lengths, critical extensions). Prints one JSON line
    /// with `"revocation": "checked"` (and what was checked) or `"unchecked"`; exit 0
    /// valid, 1 invalid (with the reason, a revoked certificate included), 2 malformed
    /// input.
    Verify(Box<AttestVerifyArgs>),
    /// Print the values that bind evidence to a job: the SEV-SNP REPORT_DATA (SHA-512) and
    /// the NVIDIA SPDM nonce (SHA-256) over the model digest, prompt ids, output ids and
    /// job id.
    Binding {
        /// The model digest (64 hex digits).
        #[arg(long, value_name = "HEX")]
        model_digest: String,
        /// The prompt's token ids, comma-separated.
        #[arg(long, value_name = "IDS", value_delimiter = ',')]
        prompt_ids: Vec<u32>,
        /// The output's token ids, comma-separated.
        #[arg(long, value_name = "IDS", value_delimiter = ',')]
        output_ids: Vec<u32>,
        /// The job id.
        #[arg(long, value_name = "ID")]
        job_id: String,
    },
    /// Ask this host's TEE for an SEV-SNP report over REPORT_DATA through Linux
    /// configfs-tsm (`--report-data`), or an NVIDIA GPU in confidential-computing mode for
    /// its SPDM evidence over NONCE through the driver (`--nonce`), and write it to a file
    /// (certificates beside it); says so (exit 2) where the host has none.
    Collect {
        /// REPORT_DATA, 64 bytes of hex (SEV-SNP).
        #[arg(
            long,
            value_name = "HEX",
            required_unless_present = "nonce",
            conflicts_with = "nonce"
        )]
        report_data: Option<String>,
        /// The SPDM nonce, 32 bytes of hex (NVIDIA GPU).
        #[arg(long, value_name = "HEX")]
        nonce: Option<String>,
        /// Which GPU, with --nonce.
        #[arg(long, default_value_t = 0)]
        gpu: u32,
        /// Where to write the report.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
}

/// `meshnode attest verify`.
#[derive(Debug, Args)]
pub struct AttestVerifyArgs {
    /// An SEV-SNP report: 1184 bytes, or their hex.
    #[arg(
        long,
        value_name = "REPORT",
        required_unless_present = "nvidia",
        conflicts_with = "nvidia"
    )]
    pub snp: Option<PathBuf>,
    /// The VCEK or VLEK certificate (DER or PEM), with `--snp`.
    #[arg(long, value_name = "CERT", requires = "snp")]
    pub vcek: Option<PathBuf>,
    /// NVIDIA evidence: the SPDM GET_MEASUREMENTS request and response, raw or hex.
    #[arg(long, value_name = "REPORT")]
    pub nvidia: Option<PathBuf>,
    /// PEM chain: for `--snp` the ASK (or ASVK) then the ARK; for `--nvidia` the GPU's
    /// certificates, device first, root last.
    #[arg(long, value_name = "CHAIN")]
    pub chain: PathBuf,
    /// A reference integrity manifest to compare the GPU's measurements with (repeatable:
    /// driver and VBIOS); with `--nvidia`.
    // (`requires` is not enforced for these list options: each conflicts with the other
    // evidence instead, one of the two being required)
    #[arg(long, value_name = "RIM", conflicts_with = "snp")]
    pub rim: Vec<PathBuf>,
    /// The SPDM nonce must equal these 32 bytes (hex): the job binding; with `--nvidia`.
    #[arg(long, value_name = "HEX", requires = "nvidia")]
    pub nonce: Option<String>,
    /// An AMD CRL (DER or PEM, as AMD's KDS serves it at
    /// `https://kdsintf.amd.com/vcek/v1/{Milan|Genoa|Turin}/crl`): it must be signed by
    /// the chain's ARK or ASK, be current at `--now`, and list none of the certificates
    /// its signer issued (repeatable); with `--snp`.
    #[arg(long, value_name = "FILE", conflicts_with = "nvidia")]
    pub crl: Vec<PathBuf>,
    /// An OCSP response (DER) about the GPU's chain, as NVIDIA's OCSP service answers: it
    /// must be signed by the issuer of a certificate it covers (or that issuer's delegated
    /// responder), be current at `--now`, and say each certificate of the chain it covers
    /// is good (repeatable); with `--nvidia`.
    #[arg(long, value_name = "FILE", conflicts_with = "snp")]
    pub ocsp: Vec<PathBuf>,
    /// REPORT_DATA must equal these 64 bytes (hex): the job binding.
    #[arg(long, value_name = "HEX")]
    pub report_data: Option<String>,
    /// MEASUREMENT must equal these 48 bytes (hex).
    #[arg(long, value_name = "HEX")]
    pub measurement: Option<String>,
    /// Minimum TCB, `bootloader,tee,snp,microcode` (each at least).
    #[arg(long, value_name = "BL,TEE,SNP,UCODE")]
    pub min_tcb: Option<String>,
    /// Accept a guest whose policy allows debugging.
    #[arg(long)]
    pub allow_debug: bool,
    /// The report must come from this VMPL.
    #[arg(long, value_name = "N")]
    pub vmpl: Option<u32>,
    /// Check certificate validity at this time (RFC 3339, UTC) instead of now.
    #[arg(long, value_name = "RFC3339")]
    pub now: Option<String>,
}

/// `meshnode infer`.
#[derive(Debug, Args)]
pub struct InferArgs {
    /// A model directory (config.json, model.safetensors, tokenizer.json) or a .gguf file
    /// with tokenizer.json beside it.
    #[arg(long, value_name = "PATH")]
    pub model: PathBuf,
    /// The prompt.
    #[arg(long, value_name = "TEXT")]
    pub prompt: String,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 16)]
    pub max_tokens: usize,
    /// 0 is greedy decoding (the default); above 0, seeded sampling.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    /// Nucleus sampling: keep the most likely tokens up to this probability mass.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f64,
    /// Keep at most this many most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Seed of the sampling draw.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Verification mode: `none` (default), `quasi-deterministic` (greedy decoding here
    /// and on two `--executor`s; the output two agree on, with the verdict; exit 1 when no
    /// two agree) or `schema-bounds` (implied by `--schema`).
    #[arg(long, value_name = "MODE", default_value = "none")]
    pub verify: String,
    /// A JSON Schema file: decoding is constrained to documents valid under it (here, or by
    /// the one `--executor` given its `response_format`), and the output is validated
    /// against it; exit 1 when it is not valid.
    #[arg(long, value_name = "FILE")]
    pub schema: Option<std::path::PathBuf>,
    /// Whitespace a constrained document holds between tokens on the local model (not
    /// with `--executor`):
    /// `compact` (at most one space in a row), `any` (any JSON whitespace, up to 16 bytes in
    /// a row) or `none` (vLLM's `disable_any_whitespace`).
    #[arg(long, value_name = "WS", default_value = "compact",
          value_parser = ["compact", "any", "none"])]
    pub whitespace: String,
    /// A remote OpenAI-compatible executor's base URL (repeatable; the quorum asks them in
    /// order after the local runtime).
    #[arg(long, value_name = "URL")]
    pub executor: Vec<String>,
    /// The model's id on the remote executors. Default: this model's directory or file
    /// name.
    #[arg(long, value_name = "ID")]
    pub remote_model: Option<String>,
    /// Seconds a remote executor may take.
    #[arg(long, default_value_t = 120)]
    pub executor_timeout: u64,
    /// The model this file was converted from, as the hex `model_digest` of the original
    /// weights: the quorum's model (executors stating it as their base get the near-tie
    /// allowance, others are `wrong-model`). Default: this file's own digest.
    #[arg(long, value_name = "HEX")]
    pub base_model_digest: Option<String>,
    /// Where the model runs: auto (a CUDA GPU when this build has candle's CUDA backend,
    /// else the CPU), cpu, cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: String,
}

/// `meshnode ctl …`.
#[derive(Debug, Subcommand)]
pub enum CtlCommand {
    /// The daemon's status: identity, address, uptime, protocol digest, relay counters.
    Status {
        /// The node directory [default: $MESHNODE_HOME or the platform data directory].
        dir: Option<PathBuf>,
    },
    /// The settings the daemon runs with: meshnode.toml with the applied manifests on top
    /// (the API token shown only as set or not).
    Config {
        /// The node directory [default: $MESHNODE_HOME or the platform data directory].
        dir: Option<PathBuf>,
    },
    /// Read meshnode.toml and the applied manifests again: apply what can change while the
    /// node runs ([jobs] limits, engines, modes and prices; [inference] models, executors,
    /// quorum and verification) and name what waits for a restart. Exit 2, nothing
    /// changed, when they do not hold.
    Reload {
        /// The node directory [default: $MESHNODE_HOME or the platform data directory].
        dir: Option<PathBuf>,
    },
}

/// `meshnode model …`.
#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Write the deterministic tiny Llama (config.json + model.safetensors + the same
    /// weights as model.gguf, byte-level vocabulary of 256 ids) into DIR, for demos and tests without a download; prints one
    /// JSON line with the model digest.
    MakeTiny {
        /// Where to write it (created if missing).
        dir: PathBuf,
        /// Seed of the weights: the same seed gives the same bytes.
        #[arg(long, default_value_t = 7)]
        seed: u64,
        /// The architecture: llama; qwen2 (biased query/key/value projections, tied
        /// embeddings); mistral (a 16-position sliding window); phi3 (fused `qkv_proj`
        /// and `gate_up_proj`). Hugging Face's layouts and llama.cpp's GGUF ones.
        #[arg(long, default_value = "llama", value_parser = fleetmesh_inference::tiny::ARCHS)]
        arch: String,
    },
    /// Convert a Llama model directory (config.json + model.safetensors) into a GGUF file
    /// of one of llama.cpp's file types, which `meshnode infer` and `[inference] models`
    /// serve without expanding it (quantized weights stay in their blocks); prints one
    /// JSON line with the file's digest and the source's (its `base_model_digest`).
    Quantize {
        /// The model directory.
        dir: PathBuf,
        /// The file type: f32, f16, q8_0, q4_0, q4_k_m (Q4_K with Q6_K where llama.cpp
        /// puts it) or q6_k.
        #[arg(long = "type", value_name = "TYPE", value_parser = parse_file_type)]
        file_type: fleetmesh_inference::gguf::FileType,
        /// Where to write it [default: DIR/model-TYPE.gguf]. A tokenizer.json beside it
        /// is needed to serve it (the directory's is used when the file is written there).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

fn parse_file_type(s: &str) -> Result<fleetmesh_inference::gguf::FileType, String> {
    fleetmesh_inference::gguf::FileType::parse(s).ok_or_else(|| {
        let names: Vec<&str> = fleetmesh_inference::gguf::FileType::ALL
            .iter()
            .map(|t| t.name())
            .collect();
        format!("{s:?} is not one of {}", names.join(", "))
    })
}

/// `meshnode init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// The node directory to create (must not hold a node already).
    pub dir: PathBuf,
    /// The operator's Nostr public key (64 lowercase hex characters).
    #[arg(long, value_name = "HEX_PUBKEY", conflicts_with = "manifest")]
    pub operator: Option<String>,
    /// The node's class in the federation.
    #[arg(long, value_name = "CLASS", conflicts_with = "manifest", value_parser = parse_class)]
    pub class: Option<NodeClass>,
    /// A relay this node publishes to (ws:// or wss://); repeatable.
    #[arg(long = "relay", value_name = "URL", conflicts_with = "manifest")]
    pub relays: Vec<String>,
    /// An endpoint the node is reachable at, as SCHEME=URL (e.g. wss=wss://n.example/);
    /// repeatable.
    #[arg(
        long = "endpoint",
        value_name = "SCHEME=URL",
        conflicts_with = "manifest"
    )]
    pub endpoints: Vec<Endpoint>,
    /// The port of the node's listener on 127.0.0.1 [default: 7777].
    #[arg(long, value_name = "N", conflicts_with = "manifest")]
    pub face_port: Option<u32>,
    /// Take the settings from a MeshNode manifest (YAML or JSON, fleetmesh.org/v1alpha1)
    /// instead of flags.
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
}

fn parse_class(s: &str) -> Result<NodeClass, String> {
    s.parse()
}

/// `meshnode run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The node directory.
    pub dir: PathBuf,
    /// Listen on this address instead of the configured one.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Serve this model on the OpenAI-compatible API (`/v1/models`, `/v1/completions`): a
    /// model directory or a .gguf file with tokenizer.json beside it; its model id is the
    /// directory or file name. Repeatable.
    #[arg(long, value_name = "PATH")]
    pub model: Vec<PathBuf>,
}

/// `meshnode up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// The node directory [default: $MESHNODE_HOME, else the platform data directory,
    /// e.g. ~/.local/share/fleetmesh].
    pub dir: Option<PathBuf>,
    /// Listen on this address instead of the configured one.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Also serve the tiny model (id `tiny`, generated into DIR/models/tiny) and a demo
    /// circuit (`demo`, in DIR/circuits/demo), and put a job to submit in DIR/demo, so every
    /// API answers with no download. Kept files are not overwritten.
    #[arg(long)]
    pub demo: bool,
    /// On a node it creates, generate an `[api] token` even when it listens on loopback
    /// (behind a reverse proxy on the box, as on the disk image: its clients are strangers).
    /// The token is printed once on stderr and kept in DIR/meshnode.toml (owner-only);
    /// `meshnode job` on the box reads it from there.
    #[arg(long)]
    pub token: bool,
}

/// `meshnode sync`.
#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The node directory whose store is synced (the daemon may be running).
    pub dir: PathBuf,
    /// The peer relay: ws://HOST:PORT or wss://HOST[:PORT] (any NIP-77 relay; TLS checked
    /// against the web's roots and --ca).
    #[arg(long, value_name = "URL")]
    pub peer: String,
    /// The NIP-01 filter of the events to reconcile, as JSON.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    pub filter: String,
    /// pull: fetch what the peer has; push: send what it lacks; both.
    #[arg(long, value_name = "pull|push|both", default_value = "both")]
    pub direction: fleetmesh_relay::sync::Direction,
    /// Reconcile only: say what would move, move nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Only events created since TIME: Unix seconds, or an age such as 30m, 24h, 7d
    /// (added to the filter as `since`).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// nip77: NIP-77 only; req: NIP-01 only (REQ pages back from now in, EVENTs out);
    /// auto: NIP-77, then REQ pages when the relay refuses or ignores NEG-OPEN.
    #[arg(long, value_name = "auto|nip77|req", default_value = "nip77")]
    pub via: fleetmesh_relay::bridge::Via,
    /// For a wss:// peer: also trust the CA certificate(s) in this PEM file (a private CA,
    /// a self-signed relay), beside the web's public roots.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Also write the outcome as Prometheus text to FILE (replaced at once), for
    /// node_exporter's textfile collector (name it `*.prom` in its directory): when it
    /// ran, whether it completed, rounds, bytes and events moved. Written when the sync
    /// fails too.
    #[arg(long, value_name = "FILE")]
    pub metrics_file: Option<PathBuf>,
}

/// `meshnode doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// A node directory to report on [default: $MESHNODE_HOME or the platform data
    /// directory, when a node is there].
    pub dir: Option<PathBuf>,
    /// The backend choice to resolve.
    #[arg(long, value_name = "auto|cpu|wgpu|cuda:N", default_value = "auto")]
    pub backend: BackendChoice,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `meshnode watch`.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// The node directory to audit (its files, and the daemon at its configured address).
    pub dir: Option<PathBuf>,
    /// The daemon to ask, e.g. http://127.0.0.1:7777 [default: the directory's `[face]
    /// listen`].
    #[arg(long, value_name = "URL")]
    pub node: Option<String>,
    /// Print one JSON object (`status`, `findings`) instead of lines.
    #[arg(long)]
    pub json: bool,
    /// Free disk space below which the node is degraded (failing below a sixteenth).
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 30)]
    pub min_free_bytes: u64,
    /// A container health probe's exit codes: 0 healthy, 1 anything else (Docker's
    /// HEALTHCHECK reserves 2). The image's HEALTHCHECK runs `watch --node URL --healthcheck`.
    #[arg(long)]
    pub healthcheck: bool,
}

/// `meshnode apply`.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// The node directory [default: $MESHNODE_HOME, else the platform data directory].
    pub dir: Option<PathBuf>,
    /// A manifest file (`-` for stdin); repeatable. A YAML stream may hold several
    /// documents (`---`), a JSON file one object or an array of them.
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
}

/// `meshnode manifest …`.
#[derive(Debug, Subcommand)]
pub enum ManifestCommand {
    /// Print the five manifest kinds as Kubernetes CustomResourceDefinitions
    /// (apiextensions.k8s.io/v1, group fleetmesh.org, version v1alpha1), one YAML stream:
    /// `meshnode manifest crds | kubectl apply -f -`.
    Crds,
}

/// `meshnode schema …`.
#[derive(Debug, Subcommand)]
pub enum SchemaCommand {
    /// Print the protocol digest: SHA-256 (hex) of the RFC 8785 canonical schema set.
    Digest {
        /// Digest the schemas in this directory instead of the built-in set.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Validate a document: exit 0 valid, 1 invalid (each failing path on stderr), 2 bad
    /// input.
    Validate {
        /// An event kind (30810), a manifest kind (MeshNode) or a payload protocol id
        /// (compute/1.0).
        kind: String,
        /// The document: JSON, or YAML for manifests; `-` reads standard input.
        file: PathBuf,
    },
    /// List every schema: key, $id and file.
    List,
}
