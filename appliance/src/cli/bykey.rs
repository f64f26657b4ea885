//! `meshnode job submit --to DID|HEX --via giftwrap|didcomm|iroh`: a job sent to a provider
//! known only by its key — gift-wrapped through relays (NIP-59), by DIDComm v2 to the
//! endpoint its DID document names (directly or through its mediator), or by the same
//! DIDComm messages over a QUIC peer link to its iroh endpoint — and the answer (status,
//! result, receipt) taken back the same way and checked.

use std::path::Path;

use anyhow::{Context as _, bail};
use fleetmesh_proto::didcomm::{self, PeerDoc};
use fleetmesh_proto::{Event, NodeKeys};
use serde_json::{Value, json};

use crate::cli::{ByKey, Outcome};
use fleetmesh_didcomm::{
    ANSWER, Carrier, DELIVERY, DELIVERY_REQUEST, PROBLEM, RECEIVED, STATUS, SUBMIT, request,
};

/// `--via giftwrap`: wraps the submission `body` to `provider` (NIP-59, rumor kind
/// `COMPUTE_RUMOR`), sends it through every `--relay` and waits there for the provider's
/// wrapped answer about `job_id`: prints the job's final status with its checked receipt
/// (and the result's summary, its files in `--out`), or the provider's refusal.
pub(crate) fn by_giftwrap(
    keys: &NodeKeys,
    provider: &str,
    body: &Value,
    job_id: &str,
    by_key: &ByKey,
    relays: &[String],
) -> anyhow::Result<Outcome> {
    use fleetmesh_proto::nip59;
    use fleetmesh_schemas::constants::kind;
    anyhow::ensure!(
        !relays.is_empty(),
        "--via giftwrap needs a --relay the provider reads (its own, or one its descriptor names)"
    );
    for r in relays {
        anyhow::ensure!(
            r.starts_with("ws://") || r.starts_with("wss://"),
            "--relay must be a ws:// or wss:// URL, not {r:?}"
        );
    }
    // a refusal names the submission it answers by the rumor's id
    let (rumor_id, wrap) = fleetmesh_market::mailbox::wrap_compute(keys, provider, body)?;
    let now = fleetmesh_proto::unix_now();
    let me = keys.nostr_pubkey_hex();
    let filter = json!({"kinds": [kind::GIFT_WRAP], "#p": [me],
                        "since": now.saturating_sub(nip59::MAX_TWEAK_SECS + 600)});
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let answer = runtime.block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::channel(64);
        let (out, _) = tokio::sync::broadcast::channel(4);
        for url in relays {
            let (url, filter, tx) = (url.clone(), filter.clone(), tx.clone());
            // the relay may serve the answer only to its recipient, authenticated (NIP-42)
            let key = *keys.nostr();
            let mut outgoing = out.subscribe();
            tokio::spawn(async move {
                if let Err(e) = fleetmesh_relay::sync::subscribe(
                    &url,
                    &filter,
                    (None, Some(key)),
                    &tx,
                    &mut outgoing,
                )
                .await
                {
                    eprintln!("meshnode: {e}");
                }
            });
        }
        drop(tx);
        let _ = out.send(wrap);
        eprintln!(
            "meshnode: job {job_id} gift-wrapped to {provider} through {}; waiting up to {} s",
            relays.join(", "),
            by_key.wait_secs
        );
        let deadline =
            tokio::time::Instant::now() + std::time::Duration::from_secs(by_key.wait_secs);
        loop {
            let next = tokio::time::timeout_at(deadline, rx.recv()).await;
            let event = match next {
                Err(_) => bail!("no answer for job {job_id} within {} s", by_key.wait_secs),
                Ok(None) => bail!("no relay could be read"),
                Ok(Some(e)) => e,
            };
            let Ok(opened) = nip59::unwrap(keys.nostr(), &event) else {
                continue;
            };
            if hex::encode(opened.sender) != provider || opened.rumor.kind != kind::COMPUTE_RUMOR {
                continue;
            }
            let Ok(v) = serde_json::from_str::<Value>(&opened.rumor.content) else {
                continue;
            };
            if v["in_reply_to"] == rumor_id.as_str() || v["job"]["id"] == job_id {
                return Ok(v);
            }
        }
    })?;
    finish(keys, provider, job_id, &answer, by_key.out.as_deref())
}

/// The end of a job sent by key: `answer` (`{"job", "result", "receipt"}`, or
/// `{"error"}`) checked — the receipt signed by `provider` and naming `job_id` blinded
/// for the pair — and printed with the result's summary (its files in `out`).
fn finish(
    keys: &NodeKeys,
    provider: &str,
    job_id: &str,
    answer: &Value,
    out: Option<&Path>,
) -> anyhow::Result<Outcome> {
    if answer.get("error").is_some() {
        println!("{answer}");
        return Ok(Outcome::Malformed);
    }
    let receipt = Event::from_value(&answer["receipt"])
        .and_then(|e| e.verify().map(|()| e))
        .context("the answer's receipt does not verify")?;
    anyhow::ensure!(
        hex::encode(receipt.pubkey) == provider,
        "the receipt is signed by {}, not by the provider",
        hex::encode(receipt.pubkey)
    );
    // the receipt names the job blinded for the pair (the same file submitted again is the
    // same job under a newer ask)
    let receipted: Value = serde_json::from_str(&receipt.content).unwrap_or_default();
    let blinded =
        fleetmesh_proto::receipt::blinded_job_id(&keys.nostr().secret_key(), provider, job_id)?;
    anyhow::ensure!(
        receipted["job"] == blinded.as_str(),
        "the receipt is for another job ({}), not {job_id}",
        receipted["job"]
    );
    let state = answer["job"]["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let result = match answer["result"].as_str() {
        Some(payload) => crate::cli::job::open_result(keys, provider, payload, job_id, out)?,
        None => Value::Null,
    };
    println!(
        "{}",
        json!({"job": answer["job"], "receipt": receipt.to_value(), "result": result})
    );
    Ok(match state.as_str() {
        "verified" => Outcome::Ok,
        _ => Outcome::Negative,
    })
}

/// Where a DIDComm message to a provider goes: the URL to POST to, and the mediator that
/// takes it for the provider, if any.
struct Route {
    url: String,
    mediator: Option<(PeerDoc, String)>,
}

/// The provider's DIDComm route, from its DID document's first DIDCommMessaging service:
/// a URL, or a mediator's DID (resolved through the same relays for its URL).
fn route(provider: &PeerDoc, relays: &[String]) -> anyhow::Result<Route> {
    let service = provider.services.first().with_context(|| {
        format!(
            "{} names no DIDComm endpoint (a didcomm endpoint in its descriptor); try --via giftwrap",
            provider.did
        )
    })?;
    if !service.uri.starts_with("did:") {
        return Ok(Route {
            url: service.uri.clone(),
            mediator: None,
        });
    }
    let doc = crate::cli::did::resolve_document(&service.uri, relays, None, 10)
        .with_context(|| format!("{}'s mediator {}", provider.did, service.uri))?;
    let mediator = PeerDoc::parse(&doc)?;
    let url = mediator
        .services
        .iter()
        .map(|s| s.uri.clone())
        .find(|u| u.starts_with("http://") || u.starts_with("https://"))
        .with_context(|| format!("the mediator {} names no DIDComm URL", mediator.did))?;
    let key = service.routing_keys.first().cloned().with_context(|| {
        format!(
            "{} routes through {} without a routing key",
            provider.did, mediator.did
        )
    })?;
    Ok(Route {
        url,
        mediator: Some((mediator, key)),
    })
}

/// `--via didcomm`: resolves the provider's DID through `--relay`, sends the submission
/// `body` to the endpoint its document names (signed with the buyer's key, anoncrypted,
/// carrying the buyer's descriptor so the answer can be encrypted back), then asks for the
/// job's status until it is final: directly (the answer is the HTTP response), or through
/// the provider's mediator (the answer is picked up there).
pub(crate) fn by_didcomm(
    keys: &NodeKeys,
    provider: &str,
    body: &Value,
    job_id: &str,
    by_key: &ByKey,
) -> anyhow::Result<Outcome> {
    let value = provider_document(provider, &by_key.relays, "--via didcomm")?;
    let doc = PeerDoc::parse(&value)?;
    didcomm_with(keys, provider, body, job_id, by_key, &doc)
}

/// `--via iroh`: resolves the provider's DID through `--relay`, dials the iroh endpoint
/// its document names with the buyer's keys (a leaf's descriptor in the hello), and sends
/// the DIDComm messages of `--via didcomm` over the link's message streams.
#[cfg(feature = "federation")]
pub(crate) fn by_iroh(
    keys: &NodeKeys,
    provider: &str,
    body: &Value,
    job_id: &str,
    by_key: &ByKey,
) -> anyhow::Result<Outcome> {
    use fleetmesh_proto::didcomm::VerifyKey;
    let value = provider_document(provider, &by_key.relays, "--via iroh")?;
    let doc = PeerDoc::parse(&value)?;
    let services = |kind: &'static str| {
        value["service"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(move |s| s["type"] == kind)
            .filter_map(|s| s["serviceEndpoint"].as_str())
    };
    let addrs: Vec<std::net::SocketAddr> =
        services("iroh").filter_map(|a| a.parse().ok()).collect();
    // the iroh relay servers it homes on: reached through them where no address answers
    let relays = fleetmesh_transport::relays::RelayServers {
        urls: services(crate::node::IROH_RELAY)
            .map(str::to_owned)
            .collect(),
        roots: match &by_key.iroh_relay_ca {
            Some(ca) => crate::config::pem_certs(ca)
                .map_err(|e| anyhow::anyhow!("--iroh-relay-ca {}: {e}", ca.display()))?,
            None => Vec::new(),
        },
    };
    anyhow::ensure!(
        !addrs.is_empty() || !relays.urls.is_empty(),
        "{} names no iroh endpoint (its [peering] quic_listen); try --via didcomm or giftwrap",
        doc.did
    );
    let ed25519 = doc
        .authentication
        .iter()
        .find_map(|(_, k)| match k {
            VerifyKey::Ed25519(k) => Some(*k),
            VerifyKey::Secp256k1(_) => None,
        })
        .with_context(|| format!("{} has no Ed25519 key to dial", doc.did))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let descriptor = crate::node::leaf_descriptor(keys, fleetmesh_proto::unix_now())?;
    let bind: std::net::SocketAddr = if addrs.first().is_none_or(std::net::SocketAddr::is_ipv4) {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let digest = fleetmesh_schemas::SchemaSet::embedded().digest();
    let (quic, link) = runtime.block_on(async {
        let quic = fleetmesh_transport::link::Quic::bind_with(
            &keys.ed25519_secret(),
            bind,
            &descriptor,
            digest,
            &relays,
        )
        .await?;
        match quic.dial_at(&ed25519, &addrs, &relays.urls).await {
            Ok(link) => anyhow::Ok((quic, link)),
            Err(e) => {
                quic.close().await;
                let through = if relays.urls.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (reached through {}: a relay for its federation's nodes turns away \
                         keys it does not know — peer with one of them first)",
                        relays.urls.join(", ")
                    )
                };
                Err(anyhow::Error::new(e).context(format!("dialling {provider}{through}")))
            }
        }
    })?;
    let route = Route {
        url: match addrs.first() {
            Some(a) => format!("iroh://{a}"),
            None => format!("iroh via {}", relays.urls.join(", ")),
        },
        mediator: None,
    };
    let carrier = Carrier::Link(runtime.handle().clone(), Box::new(link.clone()));
    let outcome = didcomm_over(keys, provider, body, job_id, by_key, &doc, &route, &carrier);
    link.close();
    runtime.block_on(quic.close());
    outcome
}

/// `--via iroh` in a build without the federation transports.
#[cfg(not(feature = "federation"))]
pub(crate) fn by_iroh(
    _: &NodeKeys,
    _: &str,
    _: &Value,
    _: &str,
    _: &ByKey,
) -> anyhow::Result<Outcome> {
    bail!("--via iroh needs a meshnode built with the `federation` feature")
}

/// The provider's DID document, resolved through `relays` (which `what`, the option that
/// asked for it, needs).
fn provider_document(provider: &str, relays: &[String], what: &str) -> anyhow::Result<Value> {
    anyhow::ensure!(
        !relays.is_empty(),
        "{what} needs a --relay that holds the provider's descriptor"
    );
    let key = <[u8; 32]>::try_from(hex::decode(provider)?.as_slice()).context("a 32-byte key")?;
    crate::cli::did::resolve_document(&fleetmesh_proto::identity::did_for(&key), relays, None, 10)
}

/// `--via auto` (the default with `--to` and no `--node`): DIDComm when the provider's
/// DID document names a DIDComm endpoint, else a gift wrap through the relays it names
/// and `--relay`.
pub(crate) fn by_auto(
    keys: &NodeKeys,
    provider: &str,
    body: &Value,
    job_id: &str,
    by_key: &ByKey,
) -> anyhow::Result<Outcome> {
    let value = provider_document(provider, &by_key.relays, "--to without --node")?;
    let doc = PeerDoc::parse(&value)?;
    if !doc.services.is_empty() {
        return didcomm_with(keys, provider, body, job_id, by_key, &doc);
    }
    let mut relays = by_key.relays.clone();
    for s in value["service"].as_array().into_iter().flatten() {
        if s["type"] == "Relay"
            && let Some(url) = s["serviceEndpoint"].as_str()
            && !relays.iter().any(|r| r == url)
        {
            relays.push(url.to_owned());
        }
    }
    eprintln!(
        "meshnode: {} names no DIDComm endpoint: by gift wrap",
        doc.did
    );
    by_giftwrap(keys, provider, body, job_id, by_key, &relays)
}

/// A job by DIDComm over HTTP to the provider whose document is `doc`.
fn didcomm_with(
    keys: &NodeKeys,
    provider: &str,
    body: &Value,
    job_id: &str,
    by_key: &ByKey,
    doc: &PeerDoc,
) -> anyhow::Result<Outcome> {
    let route = route(doc, &by_key.relays)?;
    let client = reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()?;
    let carrier = Carrier::Http(client, route.url.clone());
    didcomm_over(keys, provider, body, job_id, by_key, doc, &route, &carrier)
}

/// A job by DIDComm to the provider whose document is `doc`, along `route` by `carrier`.
#[allow(clippy::too_many_arguments)]
fn didcomm_over(
    keys: &NodeKeys,
    provider: &str,
    body: &Value,
    job_id: &str,
    by_key: &ByKey,
    doc: &PeerDoc,
    route: &Route,
    carrier: &Carrier,
) -> anyhow::Result<Outcome> {
    let now = fleetmesh_proto::unix_now();
    let descriptor = crate::node::leaf_descriptor(keys, now)?;
    let docs = vec![doc.clone()];
    // one message to the provider, by the route; the provider's answer when direct
    let send = |type_: &str, body: Value| -> anyhow::Result<Option<didcomm::Unpacked>> {
        let mut packed = request(keys, &descriptor, doc, type_, body)?;
        if let Some((mediator, key)) = &route.mediator {
            packed = fleetmesh_didcomm::enveloped_forward(keys, &packed, &doc.did, mediator, key)?;
        }
        Ok(carrier.exchange(&packed, keys, &docs)?)
    };
    // the provider's answers held for the buyer by the mediator
    let pick_up = |mediator: &PeerDoc| -> anyhow::Result<Vec<didcomm::Unpacked>> {
        let mdocs = vec![mediator.clone()];
        let ask = json!({"limit": 32, "recipient_did": keys.did()});
        let req = request(keys, &descriptor, mediator, DELIVERY_REQUEST, ask)?;
        let Some(got) = carrier.exchange(&req, keys, &mdocs)? else {
            return Ok(Vec::new());
        };
        if got.message.type_ != DELIVERY {
            return Ok(Vec::new());
        }
        let mut taken = Vec::new();
        let mut opened = Vec::new();
        for a in &got.message.attachments {
            taken.push(a["id"].clone());
            let now = fleetmesh_proto::unix_now();
            let me = keys.nostr_pubkey_hex();
            // the provider's answers come with their path signed: provider, mediator, us
            let inner = match fleetmesh_didcomm::open_item(&a["data"]["json"], &me, now, 86_400) {
                Ok(Some((payload, origin))) if origin == provider => payload,
                Ok(Some((_, origin))) => {
                    eprintln!(
                        "meshnode: a held message's path begins at {origin}, not the provider"
                    );
                    continue;
                }
                Ok(None) => a["data"]["json"].to_string().into_bytes(),
                Err(why) => {
                    eprintln!("meshnode: a held message is refused: {why}");
                    continue;
                }
            };
            match didcomm::unpack(&inner, keys, &docs, now) {
                Ok(u) if u.message.from.as_deref() == Some(doc.did.as_str()) => opened.push(u),
                Ok(_) => {}
                Err(e) => eprintln!("meshnode: a held message does not open: {e}"),
            }
        }
        let ack = request(
            keys,
            &descriptor,
            mediator,
            RECEIVED,
            json!({"message_id_list": taken}),
        )?;
        carrier.exchange(&ack, keys, &mdocs)?;
        Ok(opened)
    };
    eprintln!(
        "meshnode: job {job_id} by DIDComm to {} at {}{}; waiting up to {} s",
        doc.did,
        route.url,
        route
            .mediator
            .as_ref()
            .map_or(String::new(), |(m, _)| format!(" (mediator {})", m.did)),
        by_key.wait_secs
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(by_key.wait_secs);
    let mut answers = Vec::from_iter(send(SUBMIT, body.clone())?);
    loop {
        if let Some((mediator, _)) = &route.mediator {
            answers.extend(pick_up(mediator)?);
        }
        for u in answers.drain(..) {
            let answer = match u.message.type_.as_str() {
                PROBLEM => {
                    json!({"error": {"code": u.message.body["code"], "message": u.message.body["comment"]}})
                }
                ANSWER => u.message.body.clone(),
                _ => continue,
            };
            let final_state = answer["job"]["state"]
                .as_str()
                .is_some_and(|s| matches!(s, "verified" | "failed" | "expired"));
            if answer.get("error").is_some() || (answer["job"]["id"] == job_id && final_state) {
                return finish(keys, provider, job_id, &answer, by_key.out.as_deref());
            }
        }
        if std::time::Instant::now() >= deadline {
            bail!(
                "no final answer for job {job_id} within {} s",
                by_key.wait_secs
            );
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
        answers.extend(send(STATUS, json!({"job": job_id}))?);
    }
}
