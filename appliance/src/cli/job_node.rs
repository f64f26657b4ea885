//! Which node a `meshnode job` command talks to and as whom: the node's URL and NIP-11
//! document, the buyer's keys (or the operator's token, given or read from the node home
//! when the URL is that node's own listener), and requests to the job API signed
//! accordingly (NIP-98, or `Authorization: Bearer`); and a result message opened and
//! checked ([`open_result`]), however it came back.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use base64::Engine as _;
use fleetmesh_proto::{NodeKeys, nip44};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::cli::JobNode;

pub(super) fn client() -> anyhow::Result<reqwest::blocking::Client> {
    Ok(reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()?)
}

/// Who a request to the node's job API is from: with `--token`, the operator (who sees
/// every job); else the buyer `keys`, by a NIP-98 signature over the method, the URL and
/// the body (the node shows a key only its own jobs).
pub(super) fn signed(
    req: reqwest::blocking::RequestBuilder,
    to: &JobNode,
    keys: Option<&NodeKeys>,
    (method, url, body): (&str, &str, Option<&[u8]>),
) -> anyhow::Result<reqwest::blocking::RequestBuilder> {
    Ok(match (&to.token, keys) {
        (Some(t), _) => req.bearer_auth(t),
        (None, None) => req,
        (None, Some(keys)) => {
            let now = fleetmesh_proto::unix_now();
            let auth = fleetmesh_proto::nip98::sign(keys, method, url, body, now)?;
            req.header("authorization", auth)
        }
    })
}

/// GETs `url` of the job API as [`signed`] says; the JSON body and the status.
pub(super) fn get(
    url: &str,
    to: &JobNode,
    keys: Option<&NodeKeys>,
) -> anyhow::Result<(u16, Value)> {
    let req = client()?.get(url).header("accept", "application/json");
    let r = signed(req, to, keys, ("GET", url, None))?
        .send()
        .with_context(|| format!("GET {url}"))?;
    let status = r.status().as_u16();
    let body: Value = r
        .json()
        .with_context(|| format!("GET {url}: the answer is not JSON"))?;
    Ok((status, body))
}

/// The buyer's keys: `--key-dir` itself or its `keys/` (a node directory); without
/// `--key-dir`, the buyer identity under the node home, created on first use. Says on
/// stderr which key it is.
pub(crate) fn buyer_keys(to: &JobNode) -> anyhow::Result<NodeKeys> {
    let (dir, keys) = match &to.key_dir {
        Some(given) => keys_in(given, "the buyer's keys")?,
        None => {
            let dir = crate::node::default_home()?.join(crate::node::BUYER_DIR);
            let keys = crate::node::buyer_identity(&dir)?;
            (dir, keys)
        }
    };
    eprintln!(
        "meshnode: buyer {} (keys in {})",
        keys.nostr_pubkey_hex(),
        dir.display()
    );
    Ok(keys)
}

/// The keys a job read is signed with: none with `--token` (the operator's view), else
/// the buyer's ([`buyer_keys`]).
pub(super) fn reader_keys(to: &JobNode) -> anyhow::Result<Option<NodeKeys>> {
    to.token.is_none().then(|| buyer_keys(to)).transpose()
}

/// The keys in `given` (a key directory, or a node directory with its `keys/`); `what`
/// names them in errors.
pub(crate) fn keys_in(given: &Path, what: &str) -> anyhow::Result<(PathBuf, NodeKeys)> {
    let nested = given.join(crate::node::KEYS_DIR);
    let dir = if nested.is_dir() {
        nested
    } else {
        given.to_path_buf()
    };
    let keys = NodeKeys::load(&dir).with_context(|| format!("{what} in {}", dir.display()))?;
    Ok((dir, keys))
}

/// The node's (the executor's) public key, from its NIP-11 document.
pub(super) fn node_key(to: &JobNode) -> anyhow::Result<String> {
    let info = nip11(to)?;
    Ok(info["self"]
        .as_str()
        .context("the node's NIP-11 document has no `self` key")?
        .to_string())
}

/// The node's NIP-11 document.
pub(super) fn nip11(to: &JobNode) -> anyhow::Result<Value> {
    client()?
        .get(node_url(to, "/"))
        .header("accept", "application/nostr+json")
        .send()
        .with_context(|| format!("reaching {}", to.node()))?
        .json()
        .context("the node's NIP-11 document")
}

/// `to`, with the token of the node in the node home (`$MESHNODE_HOME`, else the platform
/// data directory) when `--token` says nothing and the URL (`--node`, or the default) is
/// that node's own listener on this box (a loopback host, its port): so the operator of a
/// node whose token was generated for it (`meshnode up --token`, the disk and OCI images)
/// runs `meshnode job` there as it is. The token goes to no other address.
pub(super) fn with_local_token(mut to: JobNode) -> anyhow::Result<JobNode> {
    if to.token.is_some() {
        return Ok(to);
    }
    let Ok(home) = crate::node::default_home() else {
        return Ok(to);
    };
    if !crate::node::exists(&home) {
        return Ok(to);
    }
    // a config this user may not read (another's node) leaves the buyer to sign
    let Ok(config) = crate::config::Config::load(&home) else {
        return Ok(to);
    };
    let Ok(url) = reqwest::Url::parse(to.node()) else {
        return Ok(to);
    };
    let host = url.host_str().unwrap_or_default();
    let on_this_box = host == "localhost"
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if on_this_box && url.port_or_known_default() == Some(config.face.listen.port()) {
        to.token = config.api.token;
    }
    Ok(to)
}

pub(super) fn node_url(to: &JobNode, path: &str) -> String {
    format!("{}{path}", to.node().trim_end_matches('/'))
}

/// Opens the result message `payload` (compute/1.0, NIP-44 from `provider`), checks the
/// output against its digest, writes the output's files into `out` when given; a summary.
pub(crate) fn open_result(
    keys: &NodeKeys,
    provider: &str,
    payload: &str,
    id: &str,
    out: Option<&Path>,
) -> anyhow::Result<Value> {
    let key = nip44::conversation_key(&keys.nostr().secret_key(), provider)?;
    let plain = nip44::decrypt(&key, payload)?;
    let msg: Value = serde_json::from_slice(&plain)?;
    fleetmesh_schemas::SchemaSet::embedded()
        .validate(
            &fleetmesh_schemas::SchemaKey::Payload("compute/1.0".into()),
            &msg,
        )
        .context("the result is not a compute/1.0 message")?;
    let doc_bytes = base64::engine::general_purpose::STANDARD
        .decode(msg["output"]["inline"].as_str().context("no output")?)?;
    if hex::encode(Sha256::digest(&doc_bytes)) != msg["output_digest"].as_str().unwrap_or_default()
    {
        bail!("the output does not match its digest");
    }
    let doc: Value = serde_json::from_slice(&doc_bytes)?;
    if let Some(out) = out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let write = |name: &str, b64text: &str| -> anyhow::Result<()> {
            let safe = Path::new(name)
                .file_name()
                .context("an output file without a name")?;
            std::fs::write(
                out.join(safe),
                base64::engine::general_purpose::STANDARD.decode(b64text)?,
            )
            .with_context(|| format!("writing {}", out.join(safe).display()))
        };
        if doc.get("choices").is_some() || doc.get("error").is_some() {
            // an llm job: the API's answer
            std::fs::write(out.join("response.json"), &doc_bytes)
                .with_context(|| format!("writing {}", out.join("response.json").display()))?;
        }
        write("stdout", doc["stdout"].as_str().unwrap_or_default())?;
        write("stderr", doc["stderr"].as_str().unwrap_or_default())?;
        if let Some(files) = doc["files"].as_object() {
            for (name, data) in files {
                write(name, data.as_str().unwrap_or_default())?;
            }
        }
    }
    Ok(json!({
        "job": id,
        "status": doc["status"],
        "exit_code": doc["exit_code"],
        "output_digest": msg["output_digest"],
        "metered": msg["metered"],
        "verdict": msg["verdict"],
        "receipt": msg["receipt"],
        // delivery mode: the key to the escrow, sent with the output
        "preimage": msg["preimage"],
        "out": out.map(|o| o.display().to_string()),
    }))
}
