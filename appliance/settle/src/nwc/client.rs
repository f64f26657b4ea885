//! The client side of NIP-47: [`request`] sends one request to any NWC wallet given its
//! connection URI (`meshnode settle nwc-pay` and the others), and [`NwcLightning`] makes
//! such a wallet the node's Lightning backend (`[settlement.lightning] backend = "nwc"`,
//! `job submit --pay nwc`).

use std::sync::Arc;
use std::time::Duration;

use fleetmesh_port::{PortError, Remotes};
use fleetmesh_proto::{UnsignedEvent, nip44};
use serde_json::{Value, json};

use super::{REQUEST, RESPONSE, Uri};
use crate::SettleError;

/// One request to the wallet of connection URI `uri` (the client side of NIP-47),
/// waiting `wait_secs` for its answer: its result, or the wallet's error (code and
/// message). A relay of the URI that cannot be read is given to `on_error`.
///
/// # Errors
/// A URI that does not parse, no relay that can be read, no answer in time.
pub fn request(
    uri: &str,
    wait_secs: u64,
    method: &str,
    params: Value,
    remotes: &Arc<dyn Remotes>,
    on_error: impl Fn(PortError) + Clone + Send + 'static,
) -> crate::Result<Result<Value, Value>> {
    let uri = Uri::parse(uri)?;
    let secret = hex::decode(&uri.secret)
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .and_then(|b| secp256k1::SecretKey::from_secret_bytes(b).ok())
        .ok_or_else(|| SettleError::Refused("the URI's secret is not a key".into()))?;
    let keypair = secp256k1::Keypair::from_secret_key(&secret);
    let crypto = |e: fleetmesh_proto::Error| SettleError::Crypto(e.to_string());
    let key = nip44::conversation_key(&secret, &uri.wallet).map_err(crypto)?;
    let content = nip44::encrypt(
        &key,
        json!({"method": method, "params": params})
            .to_string()
            .as_bytes(),
    )
    .map_err(crypto)?;
    let now = fleetmesh_proto::unix_now();
    let event = UnsignedEvent {
        created_at: now,
        kind: REQUEST,
        tags: vec![
            vec!["p".into(), uri.wallet.clone()],
            vec!["encryption".into(), "nip44_v2".into()],
            vec!["expiration".into(), (now + wait_secs).to_string()],
        ],
        content,
    }
    .sign(&keypair)
    .map_err(crypto)?;
    let filter = json!({"kinds": [RESPONSE], "authors": [uri.wallet], "#e": [event.id_hex()]});
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| SettleError::Refused(format!("starting the async runtime: {e}")))?;
    let unreachable = |reason: String| SettleError::Unreachable {
        url: uri.wallet.clone(),
        reason,
    };
    let answer = runtime.block_on(async {
        let (mut rx, out, tasks) =
            fleetmesh_port::subscribe_all(remotes, &uri.relays, &filter, keypair, on_error);
        // the subscriptions are open before the request goes out
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = out.send(event);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(wait_secs);
        loop {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Err(_) => return Err(unreachable(format!("no answer within {wait_secs} s"))),
                Ok(None) => return Err(unreachable("no relay of the URI could be read".into())),
                Ok(Some(e)) => {
                    let Ok(plain) = nip44::decrypt(&key, &e.content) else {
                        continue;
                    };
                    if let Ok(v) = serde_json::from_slice::<Value>(&plain) {
                        tasks.iter().for_each(|t| t.abort());
                        return Ok(v);
                    }
                }
            }
        }
    })?;
    Ok(match answer.get("error").filter(|e| !e.is_null()) {
        Some(e) => Err(e.clone()),
        None => Ok(answer["result"].clone()),
    })
}

/// An NWC wallet as a Lightning backend (`[settlement.lightning] backend = "nwc"`, `job
/// submit --pay nwc`): `make_invoice` issues, `pay_invoice` pays and returns the preimage.
/// Each request runs on a thread of its own (it drives its own relay connections).
pub struct NwcLightning {
    /// The connection URI (its secret spends from the wallet).
    pub uri: String,
    /// How its relays are reached.
    remotes: Arc<dyn Remotes>,
}

impl NwcLightning {
    /// A backend over connection `uri`, checked to parse, whose relays are reached
    /// through `remotes`.
    ///
    /// # Errors
    /// A URI that does not parse.
    pub fn new(uri: &str, remotes: Arc<dyn Remotes>) -> crate::Result<NwcLightning> {
        Uri::parse(uri.trim())?;
        Ok(NwcLightning {
            uri: uri.trim().to_owned(),
            remotes,
        })
    }

    fn call(&self, method: &'static str, params: Value) -> crate::Result<Value> {
        let (uri, remotes) = (self.uri.clone(), self.remotes.clone());
        let answer = std::thread::spawn(move || {
            request(&uri, 60, method, params, &remotes, |e| {
                tracing::warn!(error = %e, "an NWC relay could not be read");
            })
        })
        .join()
        .map_err(|_| SettleError::Refused("the NWC request panicked".into()))??;
        answer.map_err(|e| {
            SettleError::Refused(format!(
                "the NWC wallet refused {method}: {} {}",
                e["code"].as_str().unwrap_or("OTHER"),
                e["message"].as_str().unwrap_or_default()
            ))
        })
    }
}

impl crate::lightning::Lightning for NwcLightning {
    fn describe(&self) -> String {
        let wallet = Uri::parse(&self.uri).map(|u| u.wallet).unwrap_or_default();
        format!("nwc {}", wallet.get(..16).unwrap_or_default())
    }

    fn invoice(
        &self,
        amount_sat: u64,
        memo: &str,
        expiry_secs: u64,
    ) -> crate::Result<crate::lightning::Issued> {
        let v = self.call(
            "make_invoice",
            json!({"amount": amount_sat * 1000, "description": memo, "expiry": expiry_secs}),
        )?;
        let bolt11 = v["invoice"].as_str().unwrap_or_default();
        crate::lightning::checked_invoice(bolt11, amount_sat, None)
    }

    fn pay(&self, bolt11: &str) -> crate::Result<crate::lightning::Sent> {
        let v = self.call("pay_invoice", json!({"invoice": bolt11}))?;
        let pre = hex::decode(v["preimage"].as_str().unwrap_or_default()).unwrap_or_default();
        Ok(crate::lightning::Sent {
            preimage: crate::lightning::checked_preimage(bolt11, &pre)?,
            fee_msat: v["fees_paid"].as_u64().unwrap_or(0),
        })
    }
}
