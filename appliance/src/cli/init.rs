//! `meshnode init`'s flags as a node's settings: turned into a MeshNode manifest and checked
//! by the same schema as `--manifest`, with errors naming the flag.

use fleetmesh_schemas::constants::{API_VERSION, manifest};
use serde_json::json;

use crate::cli::InitArgs;
use crate::manifest::{NodeSettings, mesh_node_settings, read_document};

/// The settings `init` was given: from `--manifest`, else from the flags, which are turned
/// into a MeshNode manifest and checked by the same schema.
pub fn settings(args: &InitArgs) -> anyhow::Result<NodeSettings> {
    if let Some(path) = &args.manifest {
        return mesh_node_settings(&read_document(path)?);
    }
    let mut spec = json!({
        "class": args.class.unwrap_or_default(),
        "relays": args.relays,
        "endpoints": args.endpoints,
    });
    if let Some(op) = &args.operator {
        spec["operator"] = json!(op);
    }
    if let Some(port) = args.face_port {
        spec["facePort"] = json!(port);
    }
    let doc = json!({
        "apiVersion": API_VERSION,
        "kind": manifest::MESH_NODE,
        "metadata": {"name": "cli"},
        "spec": spec,
    });
    mesh_node_settings(&doc).map_err(|e| {
        // Name the flag rather than the manifest path the user never wrote.
        let msg = format!("{:#}", e)
            .replace("the MeshNode manifest is invalid: ", "")
            .replace("/spec/facePort", "--face-port")
            .replace("/spec/operator", "--operator")
            .replace("/spec/relays", "--relay")
            .replace("/spec/endpoints", "--endpoint");
        anyhow::anyhow!("{msg}")
    })
}
