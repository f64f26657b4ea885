//! Node identity: the three key pairs of a node, their files, its DID and its self-signed
//! multi-key descriptor (kind 11801).
//!
//! A node has a secp256k1 key (BIP-340; its Nostr identity and `did:nostr`), an Ed25519 key
//! (transports such as iroh and libp2p) and an X25519 key (key agreement). The descriptor,
//! signed by the Nostr key, lists all three; the Ed25519 key proves possession by signing
//! `"fleetmesh-descriptor-v1" || nostr pubkey`, so a descriptor cannot claim someone
//! else's transport key. Key files hold lowercase hex, are created with mode 0600 and are
//! refused when group or others can read them.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use ed25519_dalek::{Signer, Verifier};
use fleetmesh_schemas::constants::kind;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::event::{Event, UnsignedEvent};
use crate::{Error, Result};

/// Domain separation for the Ed25519 proof of possession in a descriptor.
pub const DESCRIPTOR_PROOF_DOMAIN: &[u8] = b"fleetmesh-descriptor-v1";

/// Domain separation for a rotation proof: the old Nostr key's BIP-340 signature over
/// `SHA-256(domain ‖ old key ‖ new key)`, carried in the new key's descriptor as
/// `["predecessor", <old key>, <proof>]`.
pub const ROTATION_PROOF_DOMAIN: &[u8] = b"fleetmesh-rotation-v1";

/// The key a node rotated from, with the old key's proof that it hands over to this one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Predecessor {
    /// The old Nostr key (x-only, hex).
    pub key: String,
    /// Its BIP-340 signature over the rotation (hex).
    pub proof: String,
}

fn rotation_message(old: &[u8; 32], new: &[u8; 32]) -> [u8; 32] {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update(ROTATION_PROOF_DOMAIN);
    h.update(old);
    h.update(new);
    h.finalize().into()
}

/// The old key's proof that it hands over to `new` (x-only).
///
/// # Errors
/// [`Error::Random`] if the random source fails.
pub fn rotation_proof(old: &secp256k1::Keypair, new: &[u8; 32]) -> Result<Predecessor> {
    let key = old.x_only_public_key().0.to_byte_array();
    let aux = random32()?;
    let sig = crate::event::sign_schnorr(old, &rotation_message(&key, new), &aux);
    Ok(Predecessor {
        key: hex::encode(key),
        proof: hex::encode(sig),
    })
}

/// The verified predecessor a descriptor names (`["predecessor", key, proof]`), if any.
///
/// # Errors
/// [`Error::InvalidDescriptor`] when the tag is malformed or its proof does not verify.
pub fn predecessor(event: &Event) -> Result<Option<String>> {
    let Some(tag) = event
        .tags
        .iter()
        .find(|t| t.first().map(String::as_str) == Some("predecessor"))
    else {
        return Ok(None);
    };
    let bad = |why: &str| Error::InvalidDescriptor(format!("predecessor: {why}"));
    let key: [u8; 32] = tag
        .get(1)
        .and_then(|k| hex::decode(k).ok())
        .and_then(|k| k.try_into().ok())
        .ok_or_else(|| bad("not a 32-byte key"))?;
    let sig: [u8; 64] = tag
        .get(2)
        .and_then(|s| hex::decode(s).ok())
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| bad("not a 64-byte signature"))?;
    if !crate::event::verify_schnorr(&key, &rotation_message(&key, &event.pubkey), &sig) {
        return Err(bad("the old key's proof does not verify"));
    }
    Ok(Some(hex::encode(key)))
}

/// Where a node sits in the federation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeClass {
    /// Long-lived, well-connected relay and sync hub.
    Backbone,
    /// Peers directly and holds authoritative shards of the store (kind 30803).
    Community,
    /// A provider or buyer node at the edge (the default).
    #[default]
    Edge,
    /// A node that only consumes: no relaying for others.
    Leaf,
}

impl NodeClass {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeClass::Backbone => "backbone",
            NodeClass::Community => "community",
            NodeClass::Edge => "edge",
            NodeClass::Leaf => "leaf",
        }
    }
}

impl fmt::Display for NodeClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for NodeClass {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "backbone" => Ok(NodeClass::Backbone),
            "community" => Ok(NodeClass::Community),
            "edge" => Ok(NodeClass::Edge),
            "leaf" => Ok(NodeClass::Leaf),
            _ => Err(format!(
                "unknown node class {s:?} (backbone, community, edge or leaf)"
            )),
        }
    }
}

/// A network endpoint a node is reachable at, such as `wss` → `wss://relay.example/`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    /// Scheme or transport name: `ws`, `wss`, `https`, `iroh`, `libp2p`, …
    pub scheme: String,
    /// Where.
    pub url: String,
}

impl FromStr for Endpoint {
    type Err = String;
    /// Parses `SCHEME=URL`, the CLI form.
    fn from_str(s: &str) -> Result<Self, String> {
        let (scheme, url) = s
            .split_once('=')
            .ok_or_else(|| format!("endpoint {s:?} is not SCHEME=URL"))?;
        let ok_scheme = scheme.starts_with(|c: char| c.is_ascii_lowercase())
            && scheme
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+.-".contains(c));
        if !ok_scheme || url.is_empty() {
            return Err(format!(
                "endpoint {s:?}: the scheme must be lowercase letters, digits, + . - and the URL non-empty"
            ));
        }
        Ok(Endpoint {
            scheme: scheme.into(),
            url: url.into(),
        })
    }
}

/// The key pairs of a node. Secret material is zeroed on drop.
pub struct NodeKeys {
    nostr: secp256k1::Keypair,
    ed25519: ed25519_dalek::SigningKey,
    x25519: x25519_dalek::StaticSecret,
}

impl fmt::Debug for NodeKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeKeys")
            .field("nostr", &self.nostr_pubkey_hex())
            .finish_non_exhaustive()
    }
}

impl Drop for NodeKeys {
    fn drop(&mut self) {
        self.nostr.non_secure_erase();
    }
}

/// File names of the three secret keys inside a node's key directory.
pub const KEY_FILES: [&str; 3] = ["nostr.sec", "ed25519.sec", "x25519.sec"];

fn random32() -> Result<Zeroizing<[u8; 32]>> {
    let mut b = Zeroizing::new([0u8; 32]);
    getrandom::fill(b.as_mut()).map_err(|e| Error::Random(e.to_string()))?;
    Ok(b)
}

impl NodeKeys {
    /// Fresh keys from the operating system's random source.
    ///
    /// # Errors
    /// [`Error::Random`] if the random source fails.
    pub fn generate() -> Result<NodeKeys> {
        let nostr = loop {
            // A random 32-byte string is a valid secp256k1 scalar with overwhelming odds.
            if let Ok(kp) = secp256k1::Keypair::from_secret_bytes(*random32()?) {
                break kp;
            }
        };
        Ok(NodeKeys {
            nostr,
            ed25519: ed25519_dalek::SigningKey::from_bytes(&*random32()?),
            x25519: x25519_dalek::StaticSecret::from(*random32()?),
        })
    }

    /// Keys from their secret bytes (tests, fuzzing and benchmarks that must repeat).
    ///
    /// # Errors
    /// [`Error::Crypto`] if `nostr` is not a valid secp256k1 secret key.
    pub fn from_secret_bytes(
        nostr: [u8; 32],
        ed25519: [u8; 32],
        x25519: [u8; 32],
    ) -> Result<NodeKeys> {
        Ok(NodeKeys {
            nostr: secp256k1::Keypair::from_secret_bytes(nostr)
                .map_err(|_| Error::Crypto("not a valid secp256k1 secret key".into()))?,
            ed25519: ed25519_dalek::SigningKey::from_bytes(&ed25519),
            x25519: x25519_dalek::StaticSecret::from(x25519),
        })
    }

    /// The Nostr (BIP-340) key pair.
    pub fn nostr(&self) -> &secp256k1::Keypair {
        &self.nostr
    }

    /// The x-only Nostr public key.
    pub fn nostr_pubkey(&self) -> [u8; 32] {
        self.nostr.x_only_public_key().0.to_byte_array()
    }

    /// The Nostr public key as lowercase hex.
    pub fn nostr_pubkey_hex(&self) -> String {
        hex::encode(self.nostr_pubkey())
    }

    /// The node's DID: `did:nostr:<hex pubkey>`.
    pub fn did(&self) -> String {
        did_for(&self.nostr_pubkey())
    }

    /// The Ed25519 public key.
    pub fn ed25519_public(&self) -> [u8; 32] {
        self.ed25519.verifying_key().to_bytes()
    }

    /// The Ed25519 secret key's bytes: the node's iroh endpoint identity (its QUIC peer
    /// links are authenticated with this key).
    pub fn ed25519_secret(&self) -> Zeroizing<[u8; 32]> {
        Zeroizing::new(self.ed25519.to_bytes())
    }

    /// The Ed25519 signing key (DIDComm's EdDSA signatures).
    pub(crate) fn ed25519(&self) -> &ed25519_dalek::SigningKey {
        &self.ed25519
    }

    /// The X25519 secret (DIDComm's key agreement).
    pub(crate) fn x25519(&self) -> &x25519_dalek::StaticSecret {
        &self.x25519
    }

    /// The X25519 public key.
    pub fn x25519_public(&self) -> [u8; 32] {
        x25519_dalek::PublicKey::from(&self.x25519).to_bytes()
    }

    /// Writes the three secret keys into `dir` (created with mode 0700 if missing), each
    /// file created new with mode 0600.
    ///
    /// # Errors
    /// [`Error::Io`] if a file already exists or cannot be written.
    pub fn save(&self, dir: &Path) -> Result<()> {
        create_private_dir(dir)?;
        let secrets: [Zeroizing<String>; 3] = [
            Zeroizing::new(hex::encode(self.nostr.to_secret_bytes())),
            Zeroizing::new(hex::encode(self.ed25519.to_bytes())),
            Zeroizing::new(hex::encode(self.x25519.to_bytes())),
        ];
        for (name, secret) in KEY_FILES.iter().zip(secrets.iter()) {
            write_private(&dir.join(name), secret.as_bytes())?;
        }
        Ok(())
    }

    /// Reads the keys written by [`NodeKeys::save`].
    ///
    /// # Errors
    /// [`Error::KeyFile`] if a file is missing, malformed, or readable by group or others.
    pub fn load(dir: &Path) -> Result<NodeKeys> {
        let [n, e, x] = KEY_FILES.map(|name| read_secret(&dir.join(name)));
        let nostr_path = dir.join(KEY_FILES[0]);
        let nostr = secp256k1::Keypair::from_secret_bytes(*n?).map_err(|_| Error::KeyFile {
            path: nostr_path,
            reason: "not a valid secp256k1 secret key".into(),
        })?;
        Ok(NodeKeys {
            nostr,
            ed25519: ed25519_dalek::SigningKey::from_bytes(&*e?),
            x25519: x25519_dalek::StaticSecret::from(*x?),
        })
    }

    /// Signs an event with the Nostr key.
    ///
    /// # Errors
    /// [`Error::Random`] if the random source fails.
    pub fn sign(&self, event: UnsignedEvent) -> Result<Event> {
        event.sign(&self.nostr)
    }

    /// Builds and signs this node's descriptor (kind 11801).
    ///
    /// # Errors
    /// [`Error::Random`] if the random source fails.
    pub fn descriptor(&self, info: &DescriptorInfo, created_at: u64) -> Result<Event> {
        let pubkey = self.nostr_pubkey();
        let mut message = DESCRIPTOR_PROOF_DOMAIN.to_vec();
        message.extend_from_slice(&pubkey);
        let proof = self.ed25519.sign(&message).to_bytes();
        let content = DescriptorContent {
            did: did_for(&pubkey),
            software: info.software.clone(),
            class: info.class,
            operator: info.operator.clone(),
            keys: vec![
                DescriptorKey {
                    key_type: "secp256k1-bip340".into(),
                    public: hex::encode(pubkey),
                    proof: None,
                },
                DescriptorKey {
                    key_type: "ed25519".into(),
                    public: hex::encode(self.ed25519_public()),
                    proof: Some(hex::encode(proof)),
                },
                DescriptorKey {
                    key_type: "x25519".into(),
                    public: hex::encode(self.x25519_public()),
                    proof: None,
                },
            ],
            relays: info.relays.clone(),
            endpoints: info.endpoints.clone(),
            protocol_digest: info.protocol_digest.clone(),
        };
        let mut tags = vec![
            vec!["protocol".to_owned(), info.protocol_digest.clone()],
            vec!["class".to_owned(), info.class.to_string()],
        ];
        if let Some(op) = &info.operator {
            tags.push(vec!["operator".into(), op.clone()]);
        }
        tags.extend(info.relays.iter().map(|r| vec!["relay".into(), r.clone()]));
        tags.extend(
            info.endpoints
                .iter()
                .map(|e| vec!["endpoint".into(), e.scheme.clone(), e.url.clone()]),
        );
        if let Some(p) = &info.predecessor {
            tags.push(vec!["predecessor".into(), p.key.clone(), p.proof.clone()]);
        }
        tags.push(vec!["alt".into(), "fleetmesh node descriptor".into()]);
        self.sign(UnsignedEvent {
            created_at,
            kind: kind::NODE_DESCRIPTOR,
            tags,
            content: serde_json::to_string(&content).expect("descriptor serializes"),
        })
    }
}

/// `did:nostr:<hex>` for a Nostr public key.
pub fn did_for(pubkey: &[u8; 32]) -> String {
    format!("did:nostr:{}", hex::encode(pubkey))
}

/// What a node says about itself in its descriptor, besides its keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorInfo {
    /// Software name and version.
    pub software: Software,
    /// The node's class.
    pub class: NodeClass,
    /// The operator's Nostr public key (hex), if any.
    pub operator: Option<String>,
    /// Relays the node publishes to.
    pub relays: Vec<String>,
    /// Endpoints the node is reachable at.
    pub endpoints: Vec<Endpoint>,
    /// The node's protocol digest (hex).
    pub protocol_digest: String,
    /// The key this node rotated from, with its proof.
    pub predecessor: Option<Predecessor>,
}

/// Software name and version, as carried in a descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Software {
    /// Name, e.g. `fleetmesh`.
    pub name: String,
    /// Version, e.g. `0.1.0`.
    pub version: String,
}

/// One key listed in a descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DescriptorKey {
    /// `secp256k1-bip340`, `ed25519` or `x25519`.
    #[serde(rename = "type")]
    pub key_type: String,
    /// The public key, hex.
    pub public: String,
    /// For `ed25519`: a signature proving possession, hex.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub proof: Option<String>,
}

/// The JSON content of a descriptor event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DescriptorContent {
    /// `did:nostr:<hex>` of the signing key.
    pub did: String,
    /// Software name and version.
    pub software: Software,
    /// Node class.
    pub class: NodeClass,
    /// Operator pubkey, hex.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub operator: Option<String>,
    /// The node's keys.
    pub keys: Vec<DescriptorKey>,
    /// Relays.
    pub relays: Vec<String>,
    /// Endpoints.
    pub endpoints: Vec<Endpoint>,
    /// Protocol digest, hex.
    pub protocol_digest: String,
}

/// Verifies a descriptor event end to end: its id and signature, that its DID and
/// secp256k1 key are the signer's, the Ed25519 proof of possession, and the kind's JSON
/// Schema.
///
/// # Errors
/// [`Error::InvalidEvent`] for a bad id or signature, [`Error::InvalidDescriptor`] for
/// content that does not hold together, [`Error::Schema`].
pub fn verify_descriptor(event: &Event) -> Result<DescriptorContent> {
    let bad = |s: String| Error::InvalidDescriptor(s);
    if event.kind != kind::NODE_DESCRIPTOR {
        return Err(bad(format!(
            "kind {} is not {}",
            event.kind,
            kind::NODE_DESCRIPTOR
        )));
    }
    event.verify()?;
    let content: DescriptorContent =
        serde_json::from_str(&event.content).map_err(|e| bad(format!("content: {e}")))?;
    if content.did != did_for(&event.pubkey) {
        return Err(bad(format!("did {} is not the signer's", content.did)));
    }
    let key_of = |t: &str| content.keys.iter().find(|k| k.key_type == t);
    let signer = hex::encode(event.pubkey);
    if key_of("secp256k1-bip340").map(|k| &k.public) != Some(&signer) {
        return Err(bad("the secp256k1-bip340 key is not the signer's".into()));
    }
    let ed = key_of("ed25519").ok_or_else(|| bad("no ed25519 key".into()))?;
    let mut public = [0u8; 32];
    hex::decode_to_slice(&ed.public, &mut public)
        .map_err(|_| bad("ed25519 public key is not 32 bytes of hex".into()))?;
    let verifying = ed25519_dalek::VerifyingKey::from_bytes(&public)
        .map_err(|_| bad("ed25519 public key is not a curve point".into()))?;
    let mut sig = [0u8; 64];
    hex::decode_to_slice(ed.proof.as_deref().unwrap_or(""), &mut sig)
        .map_err(|_| bad("ed25519 proof is missing or not 64 bytes of hex".into()))?;
    let mut message = DESCRIPTOR_PROOF_DOMAIN.to_vec();
    message.extend_from_slice(&event.pubkey);
    verifying
        .verify(&message, &ed25519_dalek::Signature::from_bytes(&sig))
        .map_err(|_| bad("ed25519 proof of possession does not verify".into()))?;
    if key_of("x25519").is_none() {
        return Err(bad("no x25519 key".into()));
    }
    predecessor(event)?;
    fleetmesh_schemas::SchemaSet::embedded()
        .validate_event(&event.to_value())
        .map_err(|e| Error::Schema(e.to_string()))?;
    Ok(content)
}

/// A node descriptor read from an event: [`verify_descriptor`], and its `protocol` and
/// `class` tags repeating the content ([`Error::Mismatch`] naming the tag). A peer's is
/// read with [`check_peer`], which says a differing protocol as such.
impl TryFrom<&Event> for DescriptorContent {
    type Error = Error;

    fn try_from(event: &Event) -> Result<DescriptorContent> {
        let content = verify_descriptor(event)?;
        for (field, want) in [
            ("protocol", content.protocol_digest.as_str()),
            ("class", content.class.as_str()),
        ] {
            let tag = event.tag_value(field).unwrap_or_default();
            if tag != want {
                return Err(Error::Mismatch {
                    field,
                    tag: tag.to_owned(),
                    content: format!("{want:?}"),
                });
            }
        }
        Ok(content)
    }
}

/// Verifies a peer's descriptor and checks that it speaks our protocol: direct peering is
/// allowed only between nodes whose protocol digests are equal.
///
/// # Errors
/// Any error of [`verify_descriptor`]; [`Error::ProtocolMismatch`] when the digests differ
/// (in the descriptor's content or its `protocol` tag).
pub fn check_peer(
    event: &Event,
    ours: &fleetmesh_schemas::ProtocolDigest,
) -> Result<DescriptorContent> {
    let content = verify_descriptor(event)?;
    let ours = ours.to_hex();
    let tag = event.tag_value("protocol").unwrap_or_default();
    if content.protocol_digest != ours || tag != ours {
        let theirs = if content.protocol_digest != ours {
            content.protocol_digest
        } else {
            tag.to_owned()
        };
        return Err(Error::ProtocolMismatch {
            peer: hex::encode(event.pubkey),
            ours,
            theirs,
        });
    }
    Ok(content)
}

/// Creates `dir` (and parents) with mode 0700 for the last component.
fn create_private_dir(dir: &Path) -> Result<()> {
    let io = |source| Error::Io {
        op: "creating directory",
        path: dir.to_path_buf(),
        source,
    };
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(io)
}

/// Creates `path` new (never overwriting) with mode 0600 and writes `bytes`, synced.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |source| Error::Io {
        op: "writing",
        path: path.to_path_buf(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)
}

fn read_secret(path: &Path) -> Result<Zeroizing<[u8; 32]>> {
    let bad = |reason: String| Error::KeyFile {
        path: PathBuf::from(path),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(bad(format!(
                "mode {mode:04o} lets group or others read a secret key; run chmod 600 on it"
            )));
        }
    }
    #[cfg(not(unix))]
    let _ = meta;
    let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?);
    let mut key = Zeroizing::new([0u8; 32]);
    hex::decode_to_slice(text.trim(), key.as_mut())
        .map_err(|_| bad("expected 64 hex characters".into()))?;
    Ok(key)
}
