//! `meshnode init` and `meshnode up`: a node directory made from the flags — turned into a
//! MeshNode manifest and checked by the same schema as `--manifest`, with errors naming the
//! flag — or, for `up`, from defaults on first run, then run.

use fleetmesh_schemas::constants::{API_VERSION, manifest};
use serde_json::json;

use crate::cli::{InitArgs, NodeRun, Outcome, UpArgs};
use crate::manifest::{NodeSettings, mesh_node_settings, read_document};
use crate::{config, demo, node};

/// `meshnode init`: creates the node and says what it is.
pub fn init(args: &InitArgs) -> anyhow::Result<Outcome> {
    let settings = settings(args)?;
    let created = node::init(&args.dir, &settings)?;
    println!("created node in {}", args.dir.display());
    println!("pubkey:     {}", created.pubkey);
    println!("did:        {}", created.did);
    println!("descriptor: {}", created.descriptor.id_hex());
    println!("listen:     127.0.0.1:{}", settings.face_port);
    Ok(Outcome::Ok)
}

/// `meshnode up`: the node to run — created with defaults when there is none (a token
/// generated when it listens beyond loopback, or with `--token`), the demo prepared with
/// `--demo` — and what to print once it listens.
pub fn up(args: UpArgs) -> anyhow::Result<NodeRun> {
    let dir = node::dir_or_home(args.dir)?;
    if !node::exists(&dir) {
        create_for_up(&dir, args.listen, args.token)?;
    }
    let models = if args.demo {
        vec![demo::prepare(&dir)?]
    } else {
        Vec::new()
    };
    let hints = dir.clone();
    Ok(NodeRun {
        dir,
        listen: args.listen,
        models,
        listening: Box::new(move |addr| {
            eprint!("{}", demo::next_steps(addr, &hints, args.demo));
        }),
    })
}

/// A node with defaults in `dir`, for `up`; the generated token printed this once.
fn create_for_up(
    dir: &std::path::Path,
    listen: Option<std::net::SocketAddr>,
    token: bool,
) -> anyhow::Result<()> {
    let open = listen.is_some_and(|a| !a.ip().is_loopback());
    let settings = NodeSettings {
        listen,
        token: token || open,
        ..NodeSettings::default()
    };
    let created = node::init(dir, &settings)?;
    eprintln!(
        "meshnode: created a node with defaults in {} (pubkey {})",
        dir.display(),
        created.pubkey
    );
    if settings.token {
        let why = if open {
            format!(
                "{} is reachable from other hosts",
                listen.map(|a| a.to_string()).unwrap_or_default()
            )
        } else {
            "--token".to_owned()
        };
        // printed this once; kept in the owner-only config
        eprintln!(
            "meshnode: {why}, so the APIs need a token: one was generated into [api] token \
             of {} (owner-only): {}",
            dir.join(config::FILE).display(),
            config::Config::load(dir)?.api.token.unwrap_or_default()
        );
    }
    Ok(())
}

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
