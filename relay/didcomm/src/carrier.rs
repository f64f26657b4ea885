//! How messages reach another agent — [`Carrier`]: HTTP `POST`s to its endpoint, or
//! (feature `links`) a QUIC peer link's message streams — and the node's pickup loop from
//! its own mediator ([`DidComm::spawn_pickup`]).

use std::sync::Arc;

use fleetmesh_proto::NodeKeys;
use fleetmesh_proto::didcomm::{self, PeerDoc, Unpacked};
use serde_json::{Value, json};

use crate::{
    DELIVERY, DELIVERY_LIMIT, DELIVERY_REQUEST, DidComm, DidcommError, ENCRYPTED, Outcome,
    RECEIVED, Result, Source, enveloped_forward, request,
};
/// Most bytes of a reply [`exchange`] reads.
const MAX_REPLY: u64 = 64 << 20;

/// POSTs `packed` to `url` and opens the reply addressed to `keys` (`docs`: the authcrypt
/// sender's document); `None` when the endpoint took it without a reply (202).
///
/// # Errors
/// The endpoint's refusal (its status and body), or a reply that does not open.
pub fn exchange(
    client: &reqwest::blocking::Client,
    url: &str,
    packed: &Value,
    keys: &NodeKeys,
    docs: &Vec<PeerDoc>,
) -> Result<Option<Unpacked>> {
    use std::io::Read as _;
    let fail = |reason: String| DidcommError::Peer {
        to: url.to_owned(),
        reason,
    };
    let r = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, ENCRYPTED)
        .body(packed.to_string())
        .send()
        .map_err(|e| fail(e.to_string()))?;
    let status = r.status();
    let mut bytes = Vec::new();
    r.take(MAX_REPLY + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    if bytes.len() as u64 > MAX_REPLY {
        return Err(fail(format!("a reply over {MAX_REPLY} bytes")));
    }
    if status.as_u16() == 202 {
        return Ok(None);
    }
    if !status.is_success() {
        return Err(fail(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(512)])
        )));
    }
    let now = fleetmesh_proto::unix_now();
    Ok(Some(didcomm::unpack(&bytes, keys, docs, now)?))
}

/// What carries DIDComm messages to another agent: HTTP POSTs to its endpoint, or a QUIC
/// peer link's message streams.
pub enum Carrier {
    /// `POST` to this URL.
    Http(reqwest::blocking::Client, String),
    /// Over this link, its async side run on this runtime.
    #[cfg(feature = "links")]
    Link(
        tokio::runtime::Handle,
        Box<fleetmesh_transport::link::PeerLink>,
    ),
}

impl Carrier {
    /// `packed` to the agent, and its reply opened for `keys` (`docs`: the documents it
    /// may be authcrypted by); `None` when it took the message without one. Blocking.
    ///
    /// # Errors
    /// The carrier's, the agent's refusal, or a reply that does not open.
    pub fn exchange(
        &self,
        packed: &Value,
        keys: &NodeKeys,
        docs: &Vec<PeerDoc>,
    ) -> Result<Option<Unpacked>> {
        match self {
            Carrier::Http(client, url) => exchange(client, url, packed, keys, docs),
            #[cfg(feature = "links")]
            Carrier::Link(runtime, link) => {
                runtime.block_on(exchange_over(link, packed, keys, docs))
            }
        }
    }
}

/// The federation's links to other nodes by Nostr key (hex): how a node without
/// `mediator_url` reaches its mediator.
#[cfg(feature = "links")]
pub use fleetmesh_transport::link::Links;

#[cfg(feature = "links")]
/// Sends the DIDComm message `packed` to the peer of `link` and opens its reply for
/// `keys` (`docs`: the sender documents it may be authcrypted by); `None` when the peer
/// took it without one. What `job submit --via iroh` speaks.
///
/// # Errors
/// The link's, the peer's refusal (its status, code and message), or a reply that does
/// not open.
pub async fn exchange_over(
    link: &fleetmesh_transport::link::PeerLink,
    packed: &serde_json::Value,
    keys: &NodeKeys,
    docs: &Vec<fleetmesh_proto::didcomm::PeerDoc>,
) -> Result<Option<fleetmesh_proto::didcomm::Unpacked>> {
    let peer = &link.content.did;
    let fail = |reason: String| DidcommError::Peer {
        to: peer.clone(),
        reason,
    };
    let answer = link
        .message(packed.to_string())
        .await
        .map_err(|e| fail(e.to_string()))?;
    let v: serde_json::Value =
        serde_json::from_str(&answer).map_err(|_| fail("an answer that is not JSON".into()))?;
    match v["status"].as_u64() {
        Some(200) => {
            let message = v["message"].to_string();
            let now = fleetmesh_proto::unix_now();
            Ok(Some(fleetmesh_proto::didcomm::unpack(
                message.as_bytes(),
                keys,
                docs,
                now,
            )?))
        }
        Some(202) => Ok(None),
        _ => Err(fail(format!(
            "{} {}: {}",
            v["status"],
            v["error"]["code"].as_str().unwrap_or("?"),
            v["error"]["message"].as_str().unwrap_or("")
        ))),
    }
}

impl DidComm {
    /// With `[didcomm] mediator`: picks the node's messages up from its mediator every
    /// `pickup_secs` — at `mediator_url`, or without one over the node's QUIC link to the
    /// mediator (in `links`, once the federation has it up) — handles each as if POSTed
    /// here, and forwards each reply to the mediator for its recipient to pick up.
    /// Failures are logged and tried again.
    pub fn spawn_pickup(
        self: &Arc<Self>,
        #[cfg(feature = "links")] links: Option<Links>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let mediator = self.config.mediator.clone()?;
        let url = self.config.mediator_url.clone();
        let every = std::time::Duration::from_secs(self.config.pickup_secs);
        let me = self.clone();
        Some(tokio::spawn(async move {
            let mut doc: Option<PeerDoc> = None;
            loop {
                tokio::time::sleep(every).await;
                let (m, who, base, known) = (me.clone(), mediator.clone(), url.clone(), doc.take());
                #[cfg(feature = "links")]
                let link = links.as_ref().and_then(|l| {
                    let key = mediator.strip_prefix("did:nostr:")?;
                    l.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get(key)
                        .cloned()
                });
                #[cfg(not(feature = "links"))]
                let link: Option<()> = None;
                if base.is_none() && link.is_none() {
                    tracing::debug!(%mediator, "no link to the mediator yet");
                    continue;
                }
                let runtime = tokio::runtime::Handle::current();
                let once = move || -> Result<PeerDoc> {
                    let _ = &runtime;
                    let client = reqwest::blocking::Client::builder()
                        .timeout(std::time::Duration::from_secs(30))
                        .build()
                        .map_err(|e| DidcommError::Peer {
                            to: who.clone(),
                            reason: e.to_string(),
                        })?;
                    let (carrier, doc) = match (base, link) {
                        (Some(base), _) => {
                            let doc = match known {
                                Some(d) => d,
                                None => mediator_doc(&client, &base, &who)?,
                            };
                            let url = format!("{}/didcomm", base.trim_end_matches('/'));
                            (Carrier::Http(client, url), doc)
                        }
                        #[cfg(feature = "links")]
                        (None, Some(link)) => {
                            let doc =
                                PeerDoc::parse(&fleetmesh_proto::did::document(&link.content))?;
                            if doc.did != who {
                                return Err(DidcommError::Peer {
                                    reason: format!("the link is to {}", doc.did),
                                    to: who,
                                });
                            }
                            (Carrier::Link(runtime, Box::new(link)), doc)
                        }
                        _ => {
                            return Err(DidcommError::Peer {
                                to: who,
                                reason: "no way to the mediator".into(),
                            });
                        }
                    };
                    m.pickup_once(&carrier, &doc)?;
                    Ok(doc)
                };
                match tokio::task::spawn_blocking(once).await {
                    Ok(Ok(d)) => doc = Some(d),
                    Ok(Err(e)) => {
                        tracing::warn!(%mediator, error = %e, "picking up from the mediator")
                    }
                    Err(_) => return,
                }
            }
        }))
    }

    /// One pickup from the mediator whose document is `doc`, by `carrier`.
    fn pickup_once(&self, carrier: &Carrier, doc: &PeerDoc) -> Result<()> {
        let docs = vec![doc.clone()];
        let routing_key = doc
            .agreement
            .first()
            .map(|(k, _)| k.clone())
            .unwrap_or_default();
        let ask = json!({"limit": DELIVERY_LIMIT, "recipient_did": self.keys.did()});
        let req = request(&self.keys, &self.descriptor, doc, DELIVERY_REQUEST, ask)?;
        let Some(got) = carrier.exchange(&req, &self.keys, &docs)? else {
            return Ok(());
        };
        if got.message.type_ != DELIVERY {
            return Ok(());
        }
        let mut taken = Vec::new();
        let source = Source::Peer(
            doc.did
                .strip_prefix("did:nostr:")
                .unwrap_or(&doc.did)
                .to_owned(),
        );
        for a in &got.message.attachments {
            let (Some(id), Some(inner)) = (a["id"].as_str(), a["data"].get("json")) else {
                continue;
            };
            taken.push(id.to_owned());
            let outcome = match self.opened(inner, fleetmesh_proto::unix_now()) {
                Ok(Some((payload, origin))) => self.handle_from(&payload, &source, Some(&origin)),
                Ok(None) => self.handle(inner.to_string().as_bytes(), &source),
                Err(why) => Outcome::Refused(400, "bad_path", why),
            };
            match outcome {
                Outcome::Reply(to, packed) => {
                    let fwd = enveloped_forward(&self.keys, &packed, &to, doc, &routing_key)?;
                    carrier.exchange(&fwd, &self.keys, &docs)?;
                }
                Outcome::Refused(_, code, why) | Outcome::Later(_, code, why, _) => {
                    tracing::info!(
                        code,
                        why,
                        "a message picked up from the mediator was refused"
                    );
                }
                Outcome::Accepted => {}
            }
        }
        let ack = request(
            &self.keys,
            &self.descriptor,
            doc,
            RECEIVED,
            json!({"message_id_list": taken}),
        )?;
        carrier.exchange(&ack, &self.keys, &docs)?;
        Ok(())
    }
}

/// The mediator's DID document, read from `base`'s `/.well-known/did.json` and checked to
/// be `mediator`'s.
fn mediator_doc(client: &reqwest::blocking::Client, base: &str, mediator: &str) -> Result<PeerDoc> {
    let base = base.trim_end_matches('/');
    let fail = |reason: String| DidcommError::Peer {
        to: base.to_owned(),
        reason,
    };
    let v: Value = client
        .get(format!("{base}/.well-known/did.json"))
        .send()
        .and_then(reqwest::blocking::Response::error_for_status)
        .and_then(reqwest::blocking::Response::json)
        .map_err(|e| fail(e.to_string()))?;
    let d = PeerDoc::parse(&v)?;
    if d.did != mediator {
        return Err(fail(format!(
            "it is {}, not the mediator {mediator}",
            d.did
        )));
    }
    Ok(d)
}
