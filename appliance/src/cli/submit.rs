//! `meshnode job submit`: a job file (or a Bacalhau spec) read into an ask and a compute/1.0
//! job, the ask signed with the buyer's key, the job encrypted to the provider (NIP-44) and
//! paid as `--pay` says, then sent to the provider — to a node's `/v1/jobs` over HTTP, by
//! key (gift wrap, DIDComm, iroh), or through the market (`--route auto`). The job file's
//! format is in [`super::job`].

use std::path::Path;

use anyhow::{Context as _, bail};
use base64::Engine as _;
use fleetmesh_market::service::offers::Offer;
use fleetmesh_proto::ask::AskBody;
use fleetmesh_proto::{Engine, Event, Mode, NodeKeys, hkdf, nip44};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::cli::RouteArgs;
use crate::cli::job_node::{buyer_keys, client, nip11, node_key, node_url, signed};
use crate::cli::wallet::PayArgs;
use crate::cli::{ByKey, JobNode, Outcome};

/// Submits the job in `file` to the provider `to` and `by_key` name (or the market's
/// best offer, with `market`), paid as `pay` says.
pub(super) fn submit(
    file: &Path,
    idempotency_key: Option<&str>,
    to: &JobNode,
    by_key: &ByKey,
    pay: &PayArgs,
    market: Option<&RouteArgs>,
) -> anyhow::Result<Outcome> {
    let via = via(to, by_key, pay, market)?;
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let what = match read_job(&bytes, file.parent().unwrap_or(Path::new(".")))? {
        Ok(what) => what,
        Err(refused) => return Ok(refused),
    };
    let digest = Sha256::digest(&bytes);
    let name = ask_address(idempotency_key, &what, &digest)?;
    let keys = buyer_keys(to)?;
    let provider = match market {
        Some(_) => String::new(),
        None => provider_key(to, by_key, via)?,
    };
    let job_id = job_id(&keys, &digest, &name)?;
    let now = fleetmesh_proto::unix_now();
    let expires = now + expires_in(&what.spec["expires_in"])?;
    let terms = Terms::of(&what);
    let ask = AskBody {
        d: name,
        engine: what.engine,
        mode: what.mode,
        content: terms.content(&what),
        expires_at: expires,
        // an ask for the market names no provider: any may offer
        provider: market.is_none().then(|| provider.clone()),
    }
    .sign(&keys, now)?;
    let job = job_message(&job_id, &ask, &what, &terms.limits);
    let wallet_dir = match &to.key_dir {
        Some(d) => d.clone(),
        None => crate::node::default_home()?.join(crate::node::BUYER_DIR),
    };
    let sealer = Sealer {
        job,
        ask: &ask,
        keys: &keys,
        job_id: &job_id,
        terms: &terms,
        engine: what.engine,
        expires,
        pay,
        wallet_dir: &wallet_dir,
    };
    let seal =
        |provider: &str, offer: Option<&Value>, price_sat: Option<u64>, htlc: Option<&str>| {
            sealer.seal(provider, offer, price_sat, htlc)
        };
    if let Some(route) = market {
        let relays = crate::cli::route::market_relays(to.given_node.as_deref(), &by_key.relays)?;
        let seal = |provider: &str, terms: &fleetmesh_proto::provider::Terms, offer: &Offer| {
            let shape = crate::cli::route::as_offer(terms);
            seal(
                provider,
                Some(&shape),
                Some(offer.price_sat),
                offer.htlc.as_deref(),
            )
        };
        return crate::cli::route::by_market(
            &keys,
            &ask,
            &seal,
            &job_id,
            by_key,
            &relays,
            (route, pay.pay.is_some()),
        );
    }
    // over HTTP the node's offer (NIP-11) says its prices and mints: checked before any
    // money is locked to it
    let l402 = matches!(pay.pay.as_deref(), Some("l402" | "nwc"));
    anyhow::ensure!(
        !l402 || via == "http",
        "--pay l402|nwc pays the node's HTTP API: send with --node URL (--via http)"
    );
    let offer = match (pay.pay.as_deref(), via) {
        (Some("cashu"), "http") => Some(nip11(to)?["fleetmesh"].clone()),
        _ => None,
    };
    let body = seal(&provider, offer.as_ref(), None, None)?;
    match via {
        "giftwrap" => {
            let relays = &by_key.relays;
            crate::cli::bykey::by_giftwrap(&keys, &provider, &body, &job_id, by_key, relays)
        }
        "auto" => crate::cli::bykey::by_auto(&keys, &provider, &body, &job_id, by_key),
        "didcomm" => crate::cli::bykey::by_didcomm(&keys, &provider, &body, &job_id, by_key),
        "iroh" => crate::cli::bykey::by_iroh(&keys, &provider, &body, &job_id, by_key),
        _ => post(to, &keys, &body, &terms.bid, (pay, l402, &wallet_dir)),
    }
}

/// The provider's key (hex): `--to`'s (over HTTP, checked to be `--node`'s own), else the
/// key of the node at `--node`.
fn provider_key(to: &JobNode, by_key: &ByKey, via: &str) -> anyhow::Result<String> {
    let Some(given) = &by_key.provider else {
        return node_key(to);
    };
    let key = crate::cli::giftwrap::recipient(given)?;
    if via == "http" {
        let node = node_key(to)?;
        anyhow::ensure!(
            node == key,
            "the node at {} is {node}, not --to {given}",
            to.node()
        );
    }
    Ok(key)
}

/// The job's id: one job per (buyer, file, address), so the same submission again is the
/// same job.
fn job_id(keys: &NodeKeys, file_digest: &[u8], address: &str) -> anyhow::Result<String> {
    let secret = keys.nostr().secret_key();
    Ok(hex::encode(hkdf::expand(
        &hkdf::extract(b"fleetmesh/job-id/v1", &secret.to_secret_bytes()),
        &[file_digest, address.as_bytes()].concat(),
        32,
    )?))
}

/// What seals the job for a provider: the job message, paid as the provider allows and
/// encrypted to it, beside the signed ask.
struct Sealer<'a> {
    job: Value,
    ask: &'a Event,
    keys: &'a NodeKeys,
    job_id: &'a str,
    terms: &'a Terms,
    engine: Engine,
    expires: u64,
    pay: &'a PayArgs,
    wallet_dir: &'a Path,
}

impl Sealer<'_> {
    /// The submission for `provider`, paid as `offer` (its prices and mints) allows: the
    /// bid, or the price it offered (`price_sat`; nothing when it is free), locked to
    /// `htlc` when the offer asks for one.
    fn seal(
        &self,
        provider: &str,
        offer: Option<&Value>,
        price_sat: Option<u64>,
        htlc: Option<&str>,
    ) -> anyhow::Result<Value> {
        let mut job = self.job.clone();
        let pays = match price_sat {
            Some(0) => None,
            Some(p) => Some(json!({"amount": p, "unit": "sat"})),
            None => Some(self.terms.bid.clone()),
        };
        let payment = match pays {
            Some(amount) => crate::cli::wallet::pay_job(
                self.pay,
                self.wallet_dir,
                self.keys.nostr(),
                provider,
                self.job_id,
                (&amount, &self.terms.limits, self.engine),
                self.expires,
                (offer, htlc),
            )?,
            None => None,
        };
        if let Some(p) = payment {
            job["payment"] = p;
        }
        let key = nip44::conversation_key(&self.keys.nostr().secret_key(), provider)?;
        let payload = nip44::encrypt(&key, job.to_string().as_bytes())?;
        Ok(json!({"ask": self.ask.to_value(), "payload": payload}))
    }
}

/// How the job goes to its provider (`--via`, or what `--to` and `--node` imply), after
/// the checks that `--route`, `--via`, `--to` and `--pay` fit together.
fn via(
    to: &JobNode,
    by_key: &ByKey,
    pay: &PayArgs,
    market: Option<&RouteArgs>,
) -> anyhow::Result<&'static str> {
    anyhow::ensure!(
        market.is_none() || (by_key.provider.is_none() && by_key.via.is_none()),
        "--route auto picks the provider: drop --to and --via"
    );
    anyhow::ensure!(
        market.is_none() || matches!(pay.pay.as_deref(), None | Some("cashu")),
        "--pay l402|nwc pays one node's HTTP API (--node URL); --route auto pays with cashu"
    );
    let via = match by_key.via.as_deref() {
        Some(v) => v,
        None if by_key.provider.is_some() && to.given_node.is_none() => "auto",
        None => "http",
    };
    let Some(via) = ["auto", "http", "giftwrap", "didcomm", "iroh"]
        .into_iter()
        .find(|v| *v == via)
    else {
        bail!("--via {via:?}: one of auto, http, giftwrap, didcomm, iroh");
    };
    anyhow::ensure!(
        via == "http" || by_key.provider.is_some(),
        "--via {via} needs --to, the provider's key or did:nostr"
    );
    Ok(via)
}

/// The job in `bytes` (a job file, or a Bacalhau spec; paths relative to `base`), or the
/// outcome of a spec refused before anything is sent (its reason printed as JSON).
fn read_job(bytes: &[u8], base: &Path) -> anyhow::Result<Result<JobParts, Outcome>> {
    let text = String::from_utf8_lossy(bytes);
    if !fleetmesh_market::bacalhau::is_spec(&text) && !bytes.is_empty() {
        return JobParts::from_job_file(bytes, base).map(Ok);
    }
    let download = |url: &str| -> Result<Vec<u8>, String> {
        let r = client()
            .map_err(|e| e.to_string())?
            .get(url)
            .send()
            .map_err(|e| e.to_string())?;
        if !r.status().is_success() {
            return Err(format!("HTTP {}", r.status()));
        }
        r.bytes().map(|b| b.to_vec()).map_err(|e| e.to_string())
    };
    match fleetmesh_market::bacalhau::parse(&text, base, &download) {
        Ok(spec) => Ok(Ok(JobParts::from_bacalhau(spec))),
        Err(r) => {
            println!(
                "{}",
                json!({"error": {"code": r.code, "message": r.message}})
            );
            Ok(Err(Outcome::Malformed))
        }
    }
}

/// What the ask offers and bounds: its limits (without any, one for the engine's metered
/// unit) and its bid (1 msat when the file names none).
struct Terms {
    limits: Value,
    bid: Value,
}

impl Terms {
    fn of(what: &JobParts) -> Terms {
        let spec = &what.spec;
        let limits = if spec["limits"].as_object().is_some_and(|l| !l.is_empty()) {
            spec["limits"].clone()
        } else {
            match what.engine {
                Engine::Groth16Prove | Engine::Groth16Verify => json!({"proofs": 1}),
                Engine::Llm => {
                    json!({"tokens": what.params["max_tokens"].as_u64().unwrap_or(16)})
                }
                Engine::Wasm | Engine::Data => json!({"fuel": DEFAULT_FUEL}),
            }
        };
        let bid = if spec["bid"].is_null() {
            json!({"amount": 1, "unit": "msat"})
        } else {
            spec["bid"].clone()
        };
        Terms { limits, bid }
    }

    /// The ask's content: limits, bid, and what the engine needs named in public (the
    /// circuit, the model and quorum, the output schema's digest).
    fn content(&self, what: &JobParts) -> Value {
        let spec = &what.spec;
        let mut content = json!({"limits": self.limits, "bid": self.bid});
        if let Some(circuit) = &what.circuit {
            content["circuit"] = json!(circuit);
        }
        for k in ["model", "quorum"] {
            if !spec[k].is_null() {
                content[k] = spec[k].clone();
            }
        }
        if what.engine == Engine::Llm
            && what.mode == Mode::QuasiDeterministic
            && spec["quorum"].is_null()
        {
            // the protocol's default quorum
            content["quorum"] = json!({"n": 3, "k": 2});
        }
        if let Some(schema) = &what.output_schema {
            content["output_schema"] =
                json!(hex::encode(Sha256::digest(schema.to_string().as_bytes())));
        }
        content
    }
}

/// The compute/1.0 job message for `ask`, before payment and encryption.
fn job_message(job_id: &str, ask: &Event, what: &JobParts, limits: &Value) -> Value {
    let mut job = json!({
        "protocol": "compute/1.0",
        "type": "job",
        "job_id": job_id,
        "ask": ask.id_hex(),
        "engine": what.engine,
        "mode": what.mode,
        "input": match what.spec["input_blobs"].as_array() {
            // blobs already uploaded to the node (PUT /upload), by hash and size
            Some(refs) if !refs.is_empty() => json!({"blobs": refs}),
            _ => json!({"inline": base64::engine::general_purpose::STANDARD.encode(&what.input)}),
        },
        "limits": limits,
        "params": what.params,
    });
    if let Some(schema) = &what.output_schema {
        job["output_schema"] = schema.clone();
    }
    job
}

/// Posts the sealed job `body` to the node's `/v1/jobs` (signed NIP-98 as the buyer); a
/// node that sells the route by L402 (`l402`: `--pay l402|nwc`) has its invoice paid,
/// within `bid`, and the job sent again with the credential.
fn post(
    to: &JobNode,
    keys: &NodeKeys,
    body: &Value,
    bid: &Value,
    (pay, l402, wallet_dir): (&PayArgs, bool, &Path),
) -> anyhow::Result<Outcome> {
    let url = node_url(to, "/v1/jobs");
    let body = body.to_string();
    let post = client()?
        .post(&url)
        .header("content-type", "application/json");
    let mut r = signed(post, to, Some(keys), ("POST", &url, Some(body.as_bytes())))?
        .body(body.clone())
        .send()
        .with_context(|| format!("submitting to {}", to.node()))?;
    if let Some(challenge) = crate::cli::l402::challenge_of(&r).filter(|_| l402) {
        let max_sat = match bid["unit"].as_str() {
            Some("msat") => bid["amount"].as_u64().unwrap_or(0).div_ceil(1000),
            _ => bid["amount"].as_u64().unwrap_or(0),
        };
        let payer: Box<dyn fleetmesh_settle::lightning::Lightning> = match &pay.nwc_uri {
            Some(uri) if pay.pay.as_deref() == Some("nwc") => {
                let remotes = std::sync::Arc::new(fleetmesh_relay::Client);
                Box::new(fleetmesh_settle::nwc::NwcLightning::new(uri, remotes)?)
            }
            None if pay.pay.as_deref() == Some("nwc") => {
                bail!("--pay nwc needs --nwc-uri (or MESHNODE_NWC_URI)")
            }
            _ => crate::cli::l402::payer(wallet_dir, pay.mint.as_deref())?,
        };
        let auth = crate::cli::l402::pay(&challenge, max_sat, payer.as_ref())?;
        r = client()?
            .post(&url)
            .header("content-type", "application/json")
            .header("authorization", auth)
            .body(body)
            .send()
            .with_context(|| format!("submitting to {}", to.node()))?;
    }
    let status = r.status().as_u16();
    let v: Value = r.json().context("the node's answer is not JSON")?;
    println!("{v}");
    Ok(if status == 202 {
        Outcome::Ok
    } else if status >= 500 {
        Outcome::Negative
    } else {
        Outcome::Malformed
    })
}

/// The ask's `d` tag (its address, so one job per address and buyer): `--idempotency-key`
/// when given; for a Bacalhau spec its name and the file's digest, so re-running a spec
/// file is the same job and an edited one a new job (Bacalhau's names are labels, not
/// identities); for a job file its `name` (default: `job-` and the file's digest).
fn ask_address(
    idempotency_key: Option<&str>,
    what: &JobParts,
    digest: &[u8],
) -> anyhow::Result<String> {
    let alphabet = |n: &str| -> String {
        n.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._:-".contains(c) {
                    c
                } else {
                    '-'
                }
            })
            .collect()
    };
    let short = &hex::encode(digest)[..16];
    if let Some(key) = idempotency_key {
        if key.is_empty() || key.len() > 64 || alphabet(key) != key {
            bail!(
                "--idempotency-key must be 1 to 64 characters of A-Z a-z 0-9 . _ : -, not {key:?}"
            );
        }
        return Ok(key.to_owned());
    }
    let name: String = alphabet(what.spec["name"].as_str().unwrap_or_default())
        .chars()
        .take(if what.bacalhau { 40 } else { 64 })
        .collect();
    Ok(match (name.is_empty(), what.bacalhau) {
        (true, _) => format!("job-{short}"),
        (false, true) => format!("{name}-{short}"),
        (false, false) => name,
    })
}

/// What a job file or a Bacalhau spec asks for.
struct JobParts {
    /// The job file's fields (name, args, limits, bid, expires_in).
    spec: Value,
    engine: Engine,
    mode: Mode,
    /// The job's input bytes (stdin of a wasm job).
    input: Vec<u8>,
    /// The compute/1.0 `params`: a wasm job's module, args and files; a proof job's input.
    params: Value,
    /// The SHA-256 of the circuit's zkey, for proof jobs.
    circuit: Option<String>,
    /// The JSON Schema bounding an llm job's output (schema-bounds).
    output_schema: Option<Value>,
    /// Read from a Bacalhau spec.
    bacalhau: bool,
}

impl JobParts {
    fn from_job_file(bytes: &[u8], base: &Path) -> anyhow::Result<JobParts> {
        let spec: Value = serde_json::from_slice(bytes).context("the job file is not JSON")?;
        let read = |key: &str| -> anyhow::Result<Option<Vec<u8>>> {
            match spec[key].as_str() {
                None => Ok(None),
                Some(p) => std::fs::read(base.join(p))
                    .map(Some)
                    .with_context(|| format!("{key}: reading {p}")),
            }
        };
        let engine: Engine = spec["engine"]
            .as_str()
            .unwrap_or("wasm")
            .parse()
            .context("the job file's engine")?;
        // the job file's mode, or the engine's usual one
        let mode_or = |usual: Mode| -> anyhow::Result<Mode> {
            match spec["mode"].as_str() {
                Some(m) => m.parse().context("the job file's mode"),
                None => Ok(usual),
            }
        };
        let input = read("input")?.unwrap_or_default();
        if engine == Engine::Llm {
            // an OpenAI completions (or chat) body; the model and mode go in the ask
            let mut params = json!({"max_tokens": spec["max_tokens"].as_u64().unwrap_or(16)});
            for k in ["prompt", "messages", "stop", "stop_token_ids", "logprobs"] {
                if !spec[k].is_null() {
                    params[k] = spec[k].clone();
                }
            }
            let schema = match &spec["output_schema"] {
                Value::String(p) => Some(
                    serde_json::from_slice::<Value>(
                        &std::fs::read(base.join(p))
                            .with_context(|| format!("output_schema: reading {p}"))?,
                    )
                    .context("output_schema: not JSON")?,
                ),
                Value::Null => None,
                inline => Some(inline.clone()),
            };
            let mode = mode_or(if schema.is_some() {
                Mode::SchemaBounds
            } else {
                Mode::QuasiDeterministic
            })?;
            return Ok(JobParts {
                mode,
                engine,
                input: Vec::new(),
                params,
                circuit: None,
                output_schema: schema,
                bacalhau: false,
                spec,
            });
        }
        if engine == Engine::Groth16Verify {
            let json_file = |key: &str| -> anyhow::Result<Value> {
                let p = spec[key]
                    .as_str()
                    .with_context(|| format!("a verify job names its {key} file"))?;
                serde_json::from_slice(
                    &std::fs::read(base.join(p)).with_context(|| format!("{key}: reading {p}"))?,
                )
                .with_context(|| format!("{key}: not JSON"))
            };
            let vkey = json_file("vkey")?;
            let circuit = hex::encode(Sha256::digest(vkey.to_string().as_bytes()));
            let proofs = json!([{"proof": json_file("proof")?, "public": json_file("public")?}]);
            return Ok(JobParts {
                mode: Mode::Proof,
                engine,
                input: Vec::new(),
                params: json!({"vkey": vkey, "proofs": proofs}),
                circuit: Some(circuit),
                output_schema: None,
                bacalhau: false,
                spec,
            });
        }
        let (params, circuit, mode) = if engine == Engine::Groth16Prove {
            // the circuit by its zkey's digest (given, or computed from a local copy)
            let circuit = match (spec["circuit"].as_str(), read("zkey")?) {
                (Some(d), _) => d.to_string(),
                (None, Some(z)) => hex::encode(Sha256::digest(&z)),
                (None, None) => bail!("a groth16-prove job names its circuit (circuit or zkey)"),
            };
            let signals: Value = serde_json::from_slice(&input)
                .context("a groth16-prove job's input is the circuit's input JSON")?;
            (json!({"input": signals}), Some(circuit), Mode::Proof)
        } else {
            let module = read("module")?.context("the job file names no module")?;
            (
                json!({"module": {"inline": base64::engine::general_purpose::STANDARD.encode(&module)}, "args": spec["args"].clone()}),
                None,
                Mode::Delivery,
            )
        };
        Ok(JobParts {
            mode: mode_or(mode)?,
            engine,
            input,
            params,
            circuit,
            output_schema: None,
            bacalhau: false,
            spec,
        })
    }

    fn from_bacalhau(s: fleetmesh_market::bacalhau::WasmSpec) -> JobParts {
        let mut limits = json!({"fuel": DEFAULT_FUEL});
        if let Some(m) = s.memory_bytes {
            limits["memory_bytes"] = json!(m);
        }
        if let Some(t) = s.wall_secs {
            limits["wall_secs"] = json!(t);
        }
        let files: serde_json::Map<String, Value> = s
            .files
            .into_iter()
            .map(|(n, b)| {
                (
                    n,
                    json!(base64::engine::general_purpose::STANDARD.encode(b)),
                )
            })
            .collect();
        JobParts {
            params: json!({"module": {"inline": base64::engine::general_purpose::STANDARD.encode(&s.module)}, "args": s.args,
                           "files": files}),
            spec: json!({"name": s.name, "limits": limits}),
            // compute-over-data: the data engine, run as a wasm task
            engine: Engine::Data,
            mode: Mode::Delivery,
            input: Vec::new(),
            circuit: None,
            output_schema: None,
            bacalhau: true,
        }
    }
}

/// Fuel of a Bacalhau task (its spec has no such limit).
const DEFAULT_FUEL: u64 = 1_000_000_000;

/// The job file's `expires_in`: whole seconds from now, 600 when absent; an ask that would
/// be expired already (0 or less) is refused (`expired`), as anything but an integer is.
fn expires_in(v: &Value) -> anyhow::Result<u64> {
    match v {
        Value::Null => Ok(600),
        v => match v.as_i64() {
            Some(n) if n > 0 => Ok(n.unsigned_abs()),
            Some(n) => anyhow::bail!(
                "expired: expires_in {n} makes an ask that has expired already; give seconds \
                 from now, more than 0"
            ),
            None => anyhow::bail!("expires_in {v}: must be whole seconds from now"),
        },
    }
}
