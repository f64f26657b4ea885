//! # fleetmesh-schemas
//!
//! The normative part of the fleetmesh protocol, in one place:
//!
//! - [`constants`]: event kinds, protocol ids, the gossip topic and the manifest API group;
//! - the JSON Schema (Draft 2020-12) files under `schemas/json/`, compiled into the crate:
//!   one per fleetmesh event kind (envelope, required tags and the JSON-encoded content),
//!   per `fleetmesh.org/v1alpha1` manifest kind, and per decrypted payload protocol;
//! - [`SchemaSet`]: validation whose errors name the failing path, and the
//!   [`ProtocolDigest`], SHA-256 over the RFC 8785 canonical form of the whole set.
//!
//! Two nodes peer directly only when their protocol digests are equal, so a change to any
//! schema is a protocol change.
//!
//! ```
//! use fleetmesh_schemas::{SchemaKey, SchemaSet};
//!
//! let set = SchemaSet::embedded();
//! println!("protocol digest {}", set.digest());
//! let manifest = serde_json::json!({
//!     "apiVersion": "fleetmesh.org/v1alpha1",
//!     "kind": "MeshNode",
//!     "metadata": {"name": "edge-1"},
//!     "spec": {"class": "edge", "relays": [], "endpoints": [], "facePort": 70000}
//! });
//! let err = set.validate(&SchemaKey::Manifest("MeshNode".into()), &manifest).unwrap_err();
//! assert!(err.to_string().starts_with("/spec/facePort: "));
//! ```

pub mod constants;
mod error;
mod key;
mod registry;

pub use error::{Error, Result, Violation};
pub use key::SchemaKey;
pub use registry::{DIALECT, ProtocolDigest, SchemaSet};
