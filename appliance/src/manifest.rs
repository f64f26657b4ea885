//! `fleetmesh.org/v1alpha1` manifests, read from YAML or JSON and checked against the
//! schema registry before anything is taken from them.

use std::path::Path;

use anyhow::Context as _;
use fleetmesh_proto::{Endpoint, NodeClass};
use fleetmesh_schemas::constants::manifest;
use fleetmesh_schemas::{SchemaKey, SchemaSet};
use serde::Deserialize;
use serde_json::Value;

/// The default face port.
pub const DEFAULT_FACE_PORT: u16 = 7777;

/// The settings of a new node, from a MeshNode manifest or from `init`'s flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSettings {
    /// Node class.
    pub class: NodeClass,
    /// Operator pubkey, hex.
    pub operator: Option<String>,
    /// Relays.
    pub relays: Vec<String>,
    /// Endpoints.
    pub endpoints: Vec<Endpoint>,
    /// Listener port on 127.0.0.1.
    pub face_port: u16,
    /// Listen here instead (`meshnode up --listen` on a node it creates); an address that
    /// is not loopback gets a generated `[api] token`.
    pub listen: Option<std::net::SocketAddr>,
    /// Generate an `[api] token` even on loopback (`meshnode up --token`: a reverse proxy
    /// on the box passes strangers on).
    pub token: bool,
}

impl Default for NodeSettings {
    fn default() -> Self {
        NodeSettings {
            class: NodeClass::Edge,
            operator: None,
            relays: Vec::new(),
            endpoints: Vec::new(),
            face_port: DEFAULT_FACE_PORT,
            listen: None,
            token: false,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MeshNodeSpec {
    #[serde(default)]
    class: NodeClass,
    operator: Option<String>,
    #[serde(default)]
    relays: Vec<String>,
    #[serde(default)]
    endpoints: Vec<Endpoint>,
    face_port: Option<u16>,
}

/// Reads a document that may be YAML or JSON (JSON is YAML, but its errors read better
/// from the JSON parser).
pub fn read_document(path: &Path) -> anyhow::Result<Value> {
    let text = read_text(path)?;
    if text.trim_start().starts_with(['{', '[']) {
        serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))
    } else {
        serde_yaml_ng::from_str(&text)
            .with_context(|| format!("{}: not valid YAML", path.display()))
    }
}

/// A file's text (`-`: standard input).
fn read_text(path: &Path) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading standard input")
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    }
}

/// Reads every document of a file (`-`: stdin): a YAML stream (`---` between documents) or
/// JSON (one object, or an array of them).
pub fn read_documents(path: &Path) -> anyhow::Result<Vec<Value>> {
    parse_documents(&read_text(path)?, path)
}

/// The documents of `text`, read from `path` (named in errors): as [`read_documents`].
pub fn parse_documents(text: &str, path: &Path) -> anyhow::Result<Vec<Value>> {
    if text.trim_start().starts_with(['{', '[']) {
        let v: Value = serde_json::from_str(text)
            .with_context(|| format!("{}: not valid JSON", path.display()))?;
        return Ok(match v {
            Value::Array(items) => items,
            one => vec![one],
        });
    }
    let mut docs = Vec::new();
    for d in serde_yaml_ng::Deserializer::from_str(text) {
        let v =
            Value::deserialize(d).with_context(|| format!("{}: not valid YAML", path.display()))?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

/// Validates a MeshNode manifest and takes the node's settings from it.
pub fn mesh_node_settings(doc: &Value) -> anyhow::Result<NodeSettings> {
    SchemaSet::embedded()
        .validate(&SchemaKey::Manifest(manifest::MESH_NODE.into()), doc)
        .context("the MeshNode manifest is invalid")?;
    let spec: MeshNodeSpec =
        serde_json::from_value(doc["spec"].clone()).context("the MeshNode manifest's spec")?;
    Ok(NodeSettings {
        class: spec.class,
        operator: spec.operator,
        relays: spec.relays,
        endpoints: spec.endpoints,
        face_port: spec.face_port.unwrap_or(DEFAULT_FACE_PORT),
        listen: None,
        token: false,
    })
}
