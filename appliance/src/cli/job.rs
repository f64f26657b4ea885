//! `meshnode job …`: a buyer's side of the market against a running node — submit a job
//! file ([`super::submit`]), follow its state, fetch and decrypt its result, print its
//! receipt.
//!
//! A job file (JSON) says what to run; paths are relative to the file:
//!
//! ```json
//! {"engine": "wasm", "mode": "delivery", "module": "upper.wat", "input": "in.txt",
//!  "args": [], "limits": {"fuel": 10000000}, "bid": {"amount": 1000, "unit": "msat"},
//!  "expires_in": 600, "name": "upper-1"}
//! ```
//!
//! A proof job: `{"engine": "groth16-prove", "zkey": "circuit.zkey", "input":
//! "input.json", "limits": {"proofs": 1}}` — the node must have that circuit installed
//! (the ask names it by the zkey's SHA-256; `circuit` may give the digest instead); the
//! result holds `proof.json`, `public.json` and `verification_key.json`.
//!
//! A verify job: `{"engine": "groth16-verify", "vkey": "vk.json", "proof": "proof.json",
//! "public": "public.json"}` (the ask names the key by the SHA-256 of its compact JSON).
//!
//! An llm job: `{"engine": "llm", "model": "tiny", "prompt": "hello", "max_tokens": 8,
//! "limits": {"tokens": 8}}` (or `messages`) runs under the 2-of-3 quorum
//! (`quasi-deterministic`, `quorum` default `{"n": 3, "k": 2}`); with `"output_schema"` (a
//! file or an inline schema) it is decoded under that schema (`schema-bounds`). The result
//! holds the API's answer as `response.json`.
//!
//! Instead of `input`, `input_blobs` (`[{"sha256", "size"}]`) names blobs already on the
//! node's Blossom store; the job reads them, concatenated, as its input.
//!
//! The ask's `d` tag is `name` (default: `job-` and 16 hex digits of the file's SHA-256),
//! or `--idempotency-key`; the job id is derived from the buyer's key, the file and the
//! `d` tag, so submitting one file twice is one job. A Bacalhau v1 job spec (YAML or JSON with
//! `Tasks`) is read by [`fleetmesh_market::bacalhau`] into the same kind of wasm job, or
//! refused (exit 2) before anything is sent; its `d` tag is its `Name` and the file's
//! digest, so an edited spec under the same name is a new job.
//!
//! The buyer is `--key-dir`, else the buyer identity under the node home
//! (`$MESHNODE_HOME/buyer`), made on first use.

use std::path::Path;

use anyhow::Context as _;

use crate::cli::Outcome;
pub(crate) use crate::cli::job_node::{buyer_keys, keys_in, open_result};
use crate::cli::job_node::{get, node_key, node_url, reader_keys, with_local_token};
use crate::cli::{JobCommand, JobNode};

/// Runs a `meshnode job` command.
pub fn run(c: JobCommand) -> anyhow::Result<Outcome> {
    match c {
        JobCommand::Submit {
            file,
            idempotency_key,
            mut to,
            mut by_key,
            pay,
            route,
        } => {
            to = with_local_token(to)?;
            // --route names the provider as --node or --to would, or leaves it to the market
            let mut market = None;
            anyhow::ensure!(
                route.regions.is_empty() || route.route.as_deref() == Some("auto"),
                "--region picks among the market's providers: give --route auto"
            );
            match route.route.as_deref() {
                None => {}
                Some("auto") => market = Some(&route),
                Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                    to.given_node = Some(url.to_owned());
                }
                Some(did) => by_key.provider = Some(did.to_owned()),
            }
            super::submit::submit(
                &file,
                idempotency_key.as_deref(),
                &to,
                &by_key,
                &pay,
                market,
            )
        }
        JobCommand::Status { id, to } => {
            let to = with_local_token(to)?;
            let keys = reader_keys(&to)?;
            let url = node_url(&to, &format!("/v1/jobs/{id}"));
            let (code, v) = get(&url, &to, keys.as_ref())?;
            println!("{v}");
            if code != 200 {
                return Ok(Outcome::Malformed);
            }
            Ok(match v["state"].as_str() {
                Some("verified") => Outcome::Ok,
                Some("failed" | "expired") => Outcome::Negative,
                _ => Outcome::Pending,
            })
        }
        JobCommand::Result { id, out, to } => result(&id, &out, &with_local_token(to)?),
        JobCommand::Receipt { id, to } => {
            let to = with_local_token(to)?;
            let keys = reader_keys(&to)?;
            let url = node_url(&to, &format!("/v1/jobs/{id}/receipt"));
            let (code, v) = get(&url, &to, keys.as_ref())?;
            println!("{v}");
            Ok(match code {
                200 => Outcome::Ok,
                409 => Outcome::Pending,
                _ => Outcome::Malformed,
            })
        }
    }
}

fn result(id: &str, out: &Path, to: &JobNode) -> anyhow::Result<Outcome> {
    let keys = buyer_keys(to)?;
    let (code, v) = get(
        &node_url(to, &format!("/v1/jobs/{id}/result")),
        to,
        Some(&keys),
    )?;
    match code {
        200 => {}
        409 => {
            println!("{v}");
            return Ok(Outcome::Pending);
        }
        _ => {
            println!("{v}");
            return Ok(Outcome::Malformed);
        }
    }
    let provider = node_key(to)?;
    let summary = open_result(
        &keys,
        &provider,
        v["payload"].as_str().context("no payload")?,
        id,
        Some(out),
    )?;
    println!("{summary}");
    Ok(Outcome::Ok)
}
