//! A node directory: its layout, its creation (`meshnode init`) and opening it.
//!
//! ```text
//! DIR/                 mode 0700
//!   meshnode.toml      configuration (see config.rs)
//!   keys/              mode 0700
//!     nostr.sec        secp256k1 secret (BIP-340), hex, mode 0600
//!     ed25519.sec      Ed25519 seed, hex, mode 0600
//!     x25519.sec       X25519 secret, hex, mode 0600
//!   fleetmesh.db       SQLite store (WAL), holds the descriptor event
//!   descriptor.json    the signed node descriptor (kind 11801), for publishing
//!   buyer/             mode 0700: the buyer identity `meshnode job` uses by default
//!                      (nostr.sec, ed25519.sec, x25519.sec, 0600), made on first use
//! ```
//!
//! `init` builds everything in a hidden sibling directory and renames it into place, so an
//! interrupted init leaves no half-made node, and an existing node is never overwritten.

use fleetmesh_proto::unix_now;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use fleetmesh_proto::identity::{DescriptorInfo, Software};
use fleetmesh_proto::{Event, NodeKeys};
use fleetmesh_relay::Store;
use fleetmesh_relay::store::EventStore as _;
use fleetmesh_schemas::constants::kind;
use fleetmesh_schemas::{SchemaKey, SchemaSet};

use crate::config::{self, Config};
use crate::manifest::NodeSettings;

/// Key directory inside a node directory.
pub const KEYS_DIR: &str = "keys";
/// Store file inside a node directory.
pub const DB_FILE: &str = "fleetmesh.db";
/// Descriptor file inside a node directory.
pub const DESCRIPTOR_FILE: &str = "descriptor.json";
/// The buyer identity's directory inside the node home (it may come before the node).
pub const BUYER_DIR: &str = "buyer";
/// The books (the accountability ledger and settlement records) in the node directory.
pub const LEDGER_DIR: &str = "ledger";
/// The manifests applied to the node (`meshnode apply`), one folder per kind, in the node
/// directory.
pub const MANIFESTS_DIR: &str = "manifests";
/// Where the prove service finds circuits, in the node directory.
pub const CIRCUITS_DIR: &str = "circuits";
/// NIPs this build serves; 77 is added when negentropy is enabled.
const BASE_NIPS: &[u16] = &[1, 9, 11, 40, 42];
/// Metadata key under which the store records the node's pubkey.
pub(crate) const META_PUBKEY: &str = "node_pubkey";

/// Whether `dir` holds a node (its configuration file exists).
pub fn exists(dir: &Path) -> bool {
    dir.join(config::FILE).exists()
}

/// `dir` when given, else [`default_home`]: what every command taking `[DIR]` reads.
pub fn dir_or_home(dir: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match dir {
        Some(d) => Ok(d),
        None => default_home(),
    }
}

/// The default node directory: `$MESHNODE_HOME`, else the platform data directory
/// (`~/.local/share/fleetmesh` on Linux).
pub fn default_home() -> anyhow::Result<PathBuf> {
    if let Some(home) = std::env::var_os("MESHNODE_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    dirs::data_dir()
        .map(|d| d.join("fleetmesh"))
        .context("no platform data directory; set MESHNODE_HOME")
}

/// What `init` made.
#[derive(Debug)]
pub struct Created {
    /// The node's Nostr public key, hex.
    pub pubkey: String,
    /// `did:nostr:…`.
    pub did: String,
    /// The signed descriptor.
    pub descriptor: Event,
}

/// Creates a node in `dir` with `settings`. Refuses if `dir` holds a node or anything else.
pub fn init(dir: &Path, settings: &NodeSettings) -> anyhow::Result<Created> {
    if exists(dir) {
        bail!(
            "{} already holds a node ({} exists); refusing to overwrite it",
            dir.display(),
            config::FILE
        );
    }
    // A buyer identity made by `meshnode job` before the node is carried into it.
    let mut buyer = false;
    if dir.exists() {
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
            if entry.file_name() == BUYER_DIR && entry.path().is_dir() {
                buyer = true;
            } else {
                bail!(
                    "{} is not empty; refusing to create a node over its contents",
                    dir.display()
                );
            }
        }
    }
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let name = dir
        .file_name()
        .context("the node directory needs a name")?
        .to_string_lossy();
    let staging = parent.join(format!(".{name}.init-{}", std::process::id()));
    if dir.is_dir() && !writable(&parent) {
        // a directory made for the node under a parent it cannot write (a container's
        // volume under /var/lib): made inside it instead
        return init_inside(dir, settings);
    }
    let result = build(&staging, settings).and_then(|created| {
        let carried = (dir.join(BUYER_DIR), staging.join(BUYER_DIR));
        if buyer {
            std::fs::rename(&carried.0, &carried.1)
                .with_context(|| format!("moving {}", carried.0.display()))?;
        }
        // rename(2) replaces an empty directory atomically and fails on a non-empty one.
        if let Err(e) = std::fs::rename(&staging, dir) {
            if buyer {
                let _ = std::fs::rename(&carried.1, &carried.0);
            }
            return Err(e).with_context(|| format!("moving the new node into {}", dir.display()));
        }
        Ok(created)
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result
}

/// Whether this process may create entries in `dir`.
fn writable(dir: &Path) -> bool {
    rustix::fs::access(
        dir,
        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
    )
    .is_ok()
}

/// [`init`] for an existing, empty (or buyer-only) `dir` whose parent this process cannot
/// write: the node is built in `dir/.init-PID` and its entries moved up, the configuration
/// last (a directory without it is no node); on failure what was moved goes again.
fn init_inside(dir: &Path, settings: &NodeSettings) -> anyhow::Result<Created> {
    let staging = dir.join(format!(".init-{}", std::process::id()));
    let mut moved: Vec<PathBuf> = Vec::new();
    let result = build(&staging, settings).and_then(|created| {
        let mut entries: Vec<_> = std::fs::read_dir(&staging)
            .with_context(|| format!("reading {}", staging.display()))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<std::io::Result<_>>()
            .with_context(|| format!("reading {}", staging.display()))?;
        // the configuration last: `exists` keys on it
        entries.sort_by_key(|n| n == config::FILE);
        for name in entries {
            let to = dir.join(&name);
            std::fs::rename(staging.join(&name), &to)
                .with_context(|| format!("moving the new node into {}", dir.display()))?;
            moved.push(to);
        }
        set_private(dir)?;
        Ok(created)
    });
    if result.is_err() {
        for p in &moved {
            let _ = std::fs::remove_dir_all(p).or_else(|_| std::fs::remove_file(p));
        }
    }
    let _ = std::fs::remove_dir_all(&staging);
    result
}

/// Replaces the file at `path` with `bytes` at once (a sibling temporary file, renamed
/// over it), owner-only (0600) when `private`.
pub(crate) fn replace_file(path: &Path, bytes: &[u8], private: bool) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .with_context(|| format!("{}: not a file path", path.display()))?;
    let temp = path.with_file_name(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&temp);
    let written = if private {
        fleetmesh_proto::identity::write_private(&temp, bytes).map_err(anyhow::Error::from)
    } else {
        std::fs::write(&temp, bytes).map_err(anyhow::Error::from)
    };
    written
        .and_then(|()| std::fs::rename(&temp, path).map_err(anyhow::Error::from))
        .map_err(|e| {
            let _ = std::fs::remove_file(&temp);
            e.context(format!("writing {}", path.display()))
        })
}

/// Sets `dir` to mode 0700.
pub(crate) fn set_private(dir: &Path) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("making {} private (0700)", dir.display()))?;
    }
    Ok(())
}

/// Creates `dir` with mode 0700 (its missing parents too, when `parents`).
pub(crate) fn create_private(dir: &Path, parents: bool) -> anyhow::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(parents);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))
}

fn build(dir: &Path, settings: &NodeSettings) -> anyhow::Result<Created> {
    create_private(dir, false)?;

    let keys = NodeKeys::generate()?;
    keys.save(&dir.join(KEYS_DIR))?;

    let mut config = Config {
        node: config::NodeSection {
            name: None,
            class: settings.class,
            operator: settings.operator.clone(),
            relays: settings.relays.clone(),
            endpoints: settings.endpoints.clone(),
            regions: Vec::new(),
        },
        face: config::FaceSection {
            listen: settings.listen.unwrap_or_else(|| {
                std::net::SocketAddr::from(([127, 0, 0, 1], settings.face_port))
            }),
            ..Default::default()
        },
        ..Config::default()
    };
    if config.face.listen.ip().is_loopback() && !settings.token {
        std::fs::write(dir.join(config::FILE), config.to_toml())
            .with_context(|| format!("writing {}", config::FILE))?;
    } else {
        // reachable from other hosts (or behind a proxy on the box, `settings.token`): the
        // APIs need a token, made here, kept owner-only
        let mut token = [0u8; 32];
        getrandom::fill(&mut token).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
        config.api.token = Some(hex::encode(token));
        fleetmesh_proto::identity::write_private(
            &dir.join(config::FILE),
            config.to_toml().as_bytes(),
        )?;
    }

    let descriptor = descriptor(&keys, &config, dir, unix_now())?;
    let mut store = Store::create(&dir.join(DB_FILE))?;
    store.set_meta(META_PUBKEY, &keys.nostr_pubkey_hex())?;
    store.insert_event(&descriptor)?;
    drop(store);
    fleetmesh_proto::identity::write_private(
        &dir.join(DESCRIPTOR_FILE),
        format!("{}\n", descriptor.to_json()).as_bytes(),
    )?;
    Ok(Created {
        pubkey: keys.nostr_pubkey_hex(),
        did: keys.did(),
        descriptor,
    })
}

/// Refuses a directory whose mode has any of the `forbidden` bits (as key files readable
/// by others are refused): a node directory others can write to, or a key directory others
/// can enter, is not this node's alone.
pub(crate) fn check_private(dir: &Path, forbidden: u32, what: &str) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .permissions()
            .mode()
            & 0o777;
        if mode & forbidden != 0 {
            bail!(
                "{}: mode {mode:04o} is {what}; run chmod 700 on it",
                dir.display()
            );
        }
    }
    #[cfg(not(unix))]
    let _ = (dir, forbidden, what);
    Ok(())
}

/// The buyer identity in `dir`, made there (0700 directories, 0600 key files) when `dir`
/// holds none yet; says so on stderr when it does.
pub fn buyer_identity(dir: &Path) -> anyhow::Result<NodeKeys> {
    if !dir.join("nostr.sec").exists() {
        create_private(dir, true)?;
        let keys = NodeKeys::generate()?;
        keys.save(dir)
            .with_context(|| format!("writing the buyer's keys into {}", dir.display()))?;
        eprintln!(
            "meshnode: made a buyer identity {} in {}",
            keys.nostr_pubkey_hex(),
            dir.display()
        );
    }
    NodeKeys::load(dir).with_context(|| format!("the buyer's keys in {}", dir.display()))
}

/// This build, as a descriptor names it.
fn software() -> Software {
    Software {
        name: "fleetmesh".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    }
}

/// The descriptor of an identity that is not a node (a buyer's): a leaf with no relays
/// and no endpoints, which a DIDComm message carries so that its answer can be encrypted
/// back.
pub fn leaf_descriptor(keys: &NodeKeys, created_at: u64) -> anyhow::Result<Event> {
    let info = DescriptorInfo {
        software: software(),
        class: fleetmesh_proto::NodeClass::Leaf,
        operator: None,
        relays: Vec::new(),
        endpoints: Vec::new(),
        protocol_digest: SchemaSet::embedded().digest().to_hex(),
        predecessor: None,
    };
    Ok(keys.descriptor(&info, created_at)?)
}

/// The file in the key directory that holds the rotation proof of the key the node
/// rotated from (`meshnode keys rotate`), named in its descriptor.
pub const PREDECESSOR_FILE: &str = "predecessor.json";

/// The rotation proof the key directory `keys` holds, if any.
pub fn predecessor(keys: &Path) -> anyhow::Result<Option<fleetmesh_proto::identity::Predecessor>> {
    let path = keys.join(PREDECESSOR_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some(
            serde_json::from_slice(&bytes)
                .with_context(|| format!("reading {}", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// The endpoints the descriptor lists: `[node] endpoints`, what the federation
/// transports listen on where `[peering]` names a specific address
/// (`transport_endpoints`), and, when the node sells jobs by key
/// (`[api] jobs_by_key`), where its terms are (`compute`, a `nostr:naddr1…`).
pub fn advertised(
    config: &Config,
    keys: &NodeKeys,
) -> anyhow::Result<Vec<fleetmesh_proto::Endpoint>> {
    let all = config.node.endpoints.clone();
    #[cfg(feature = "federation")]
    let all = {
        let mut all = all;
        // what the operator named for a scheme replaces what the transports would say
        for e in transport_endpoints(&config.peering, keys)? {
            if !config.node.endpoints.iter().any(|x| x.scheme == e.scheme) {
                all.push(e);
            }
        }
        all
    };
    // where the node's terms are: its relay face (its ws/wss endpoints) and the relays it
    // publishes them on
    let mut all = all;
    let terms = fleetmesh_proto::provider::TERMS_SCHEME;
    if config.api.jobs_by_key && !all.iter().any(|e| e.scheme == terms) {
        let relays: Vec<String> = all
            .iter()
            .filter(|e| e.scheme == "wss" || e.scheme == "ws")
            .map(|e| e.url.clone())
            .chain(config.node.relays.iter().cloned())
            .collect();
        let url = fleetmesh_proto::provider::terms_address(&keys.nostr_pubkey_hex(), &relays)
            .context("[node] endpoints and relays: the terms' address")?;
        all.push(fleetmesh_proto::Endpoint {
            scheme: terms.to_owned(),
            url,
        });
    }
    Ok(all)
}

/// Builds, signs and schema-checks the node's descriptor, dated `created_at`; `dir` is
/// the node directory (its key directory may name a predecessor).
pub fn descriptor(
    keys: &NodeKeys,
    config: &Config,
    dir: &Path,
    created_at: u64,
) -> anyhow::Result<Event> {
    let schemas = SchemaSet::embedded();
    let info = DescriptorInfo {
        software: software(),
        class: config.node.class,
        operator: config.node.operator.clone(),
        relays: config.node.relays.clone(),
        endpoints: advertised(config, keys)?,
        protocol_digest: schemas.digest().to_hex(),
        predecessor: predecessor(&dir.join(KEYS_DIR))?,
    };
    let event = keys.descriptor(&info, created_at)?;
    schemas
        .validate(&SchemaKey::Event(kind::NODE_DESCRIPTOR), &event.to_value())
        .context("the node descriptor does not satisfy its own schema")?;
    Ok(event)
}

/// An opened node: configuration, keys, store.
#[derive(Debug)]
pub struct Node {
    /// The node directory.
    pub dir: PathBuf,
    /// Its configuration.
    pub config: Config,
    /// Its keys.
    pub keys: NodeKeys,
    /// Its store.
    pub store: Store,
}

impl Node {
    /// Opens the node in `dir`: configuration, keys (refused if readable by others), store.
    pub fn open(dir: &Path) -> anyhow::Result<Node> {
        if !exists(dir) {
            bail!(
                "{} holds no node (no {}); create one with `meshnode init {}`",
                dir.display(),
                config::FILE,
                dir.display()
            );
        }
        check_private(dir, 0o022, "writable by group or others")?;
        check_private(&dir.join(KEYS_DIR), 0o077, "open to group or others")?;
        let config = Config::load(dir)?;
        let keys = NodeKeys::load(&dir.join(KEYS_DIR))?;
        let store = Store::open(&dir.join(DB_FILE))?;
        // a damaged store is found here, not by the queries that would fail later
        store.check()?;
        match store.meta(META_PUBKEY)? {
            Some(pk) if pk == keys.nostr_pubkey_hex() => {}
            Some(pk) => bail!(
                "{}: the store belongs to node {pk}, but the keys are node {}",
                dir.display(),
                keys.nostr_pubkey_hex()
            ),
            None => store.set_meta(META_PUBKEY, &keys.nostr_pubkey_hex())?,
        }
        Ok(Node {
            dir: dir.to_path_buf(),
            config,
            keys,
            store,
        })
    }

    /// `[node] name`, or `fleetmesh node` and the start of its key.
    pub fn name(&self) -> String {
        self.config.node.name.clone().unwrap_or_else(|| {
            let pubkey = self.keys.nostr_pubkey_hex();
            format!("fleetmesh node {}", &pubkey[..12])
        })
    }

    /// The NIP-11 relay information document of this node, whose current descriptor is
    /// `descriptor_id`, served by `relay`.
    pub fn nip11_document(
        &self,
        descriptor_id: &str,
        relay: &fleetmesh_relay::face::Relay,
    ) -> serde_json::Value {
        let pubkey = self.keys.nostr_pubkey_hex();
        let config = &self.config;
        let name = self.name();
        let mut nips = BASE_NIPS.to_vec();
        if relay.limits().negentropy {
            nips.push(77);
        }
        serde_json::json!({
            "name": name,
            "description": "A fleetmesh node: verifiable compute (Groth16 proofs, LLM inference, WASI jobs) on an accountable federation of Nostr relays.",
            // NIP-11: `pubkey` is the administrative contact, `self` the relay's own key.
            "pubkey": config.node.operator.clone().unwrap_or_else(|| pubkey.clone()),
            "self": pubkey,
            "software": env!("CARGO_PKG_REPOSITORY"),
            "version": env!("CARGO_PKG_VERSION"),
            "supported_nips": nips,
            "limitation": relay.limits().nip11(),
            "fleetmesh": {
                "did": self.keys.did(),
                "class": config.node.class,
                "protocol_digest": SchemaSet::embedded().digest().to_hex(),
                "descriptor": descriptor_id,
                // what a job may use here at most (its limits are cut to these)
                "jobs": config.jobs,
                // the mints a priced job's Cashu escrow may be drawn on
                "settlement": {"mints": config.settlement.mints},
                // the API routes sold per request by L402, in sats
                "api": {"prices": config.api.prices},
            },
        })
    }

    /// The node's current descriptor: the stored one if it still matches the configuration
    /// and the protocol digest, else a fresh one (stored, and written to descriptor.json).
    pub fn current_descriptor(&mut self) -> anyhow::Result<Event> {
        let stored = self
            .store
            .latest_event(&self.keys.nostr_pubkey(), kind::NODE_DESCRIPTOR)?;
        let fresh_enough = stored.as_ref().is_some_and(|e| {
            fleetmesh_proto::identity::verify_descriptor(e).is_ok_and(|c| {
                c.protocol_digest == SchemaSet::embedded().digest().to_hex()
                    && c.class == self.config.node.class
                    && c.operator == self.config.node.operator
                    && c.relays == self.config.node.relays
                    && advertised(&self.config, &self.keys).is_ok_and(|a| c.endpoints == a)
            })
        });
        if fresh_enough && let Some(event) = stored {
            return Ok(event);
        }
        // Newer than the stored one even if the clock went back since, so it replaces it
        // (a replaceable event with an older created_at would be refused).
        let created_at = stored
            .as_ref()
            .map_or(unix_now(), |e| unix_now().max(e.created_at + 1));
        let event = descriptor(&self.keys, &self.config, &self.dir, created_at)?;
        let outcome = self.store.insert_event(&event)?;
        if outcome != fleetmesh_relay::store::InsertOutcome::Stored {
            bail!("the new node descriptor was not stored ({outcome:?})");
        }
        let path = self.dir.join(DESCRIPTOR_FILE);
        let tmp = self.dir.join(format!("{DESCRIPTOR_FILE}.tmp"));
        let _ = std::fs::remove_file(&tmp);
        fleetmesh_proto::identity::write_private(
            &tmp,
            format!("{}\n", event.to_json()).as_bytes(),
        )?;
        std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
        Ok(event)
    }
}

/// What the transports listen on where the address is a specific one (an unspecified
/// `0.0.0.0` cannot be advertised: name the public address in `[node] endpoints`
/// yourself; nor can port 0): `iroh` = `IP:PORT`, `libp2p` = the multiaddr with
/// `/p2p/<peer id>`; and `iroh-relay` = each of `iroh_relays`, where the endpoint is homed.
#[cfg(feature = "federation")]
pub fn transport_endpoints(
    p: &crate::config::PeeringSection,
    keys: &NodeKeys,
) -> anyhow::Result<Vec<fleetmesh_proto::Endpoint>> {
    let mut add = Vec::new();
    if let Some(q) = p.quic_listen
        && !q.ip().is_unspecified()
        && q.port() != 0
    {
        add.push(fleetmesh_proto::Endpoint {
            scheme: "iroh".into(),
            url: q.to_string(),
        });
    }
    if p.quic_listen.is_some() {
        add.extend(p.iroh_relays.iter().map(|u| fleetmesh_proto::Endpoint {
            scheme: IROH_RELAY.into(),
            url: u.clone(),
        }));
    }
    if let Some(g) = &p.gossip_listen {
        let addr: fleetmesh_transport::Multiaddr = g.parse().context("[peering] gossip_listen")?;
        let specific = addr.iter().all(|c| match c {
            fleetmesh_transport::multiaddr::Protocol::Ip4(ip) => !ip.is_unspecified(),
            fleetmesh_transport::multiaddr::Protocol::Ip6(ip) => !ip.is_unspecified(),
            fleetmesh_transport::multiaddr::Protocol::Tcp(port) => port != 0,
            _ => true,
        });
        if specific {
            let id = fleetmesh_transport::gossip::peer_id_of(&keys.ed25519_public())?;
            add.push(fleetmesh_proto::Endpoint {
                scheme: "libp2p".into(),
                url: format!("{addr}/p2p/{id}"),
            });
        }
    }
    Ok(add)
}

/// The endpoint scheme of an iroh relay server a node is homed on.
#[cfg(feature = "federation")]
pub const IROH_RELAY: &str = "iroh-relay";
