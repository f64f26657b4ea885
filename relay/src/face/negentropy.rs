//! NIP-77 on the relay face: NEG-OPEN loads a filter's `(created_at, id)` items on a
//! blocking thread and answers the first message; the negentropy session then lives in the
//! connection until NEG-CLOSE, an error, or the end of the connection.

use negentropy::{Id, Negentropy, NegentropyStorageVector};
use serde_json::Value;
use tokio::sync::mpsc;

use super::{Connection, Done};
use crate::message;
use crate::store::{EventStore, Store};
use fleetmesh_proto::filter::{Filter, FilterLimits};
use fleetmesh_proto::unix_now;

/// A NEG-OPEN whose items were loaded and whose first message was answered.
pub(super) struct NegOpened {
    subid: String,
    generation: u64,
    result: Result<(Negentropy<'static, NegentropyStorageVector>, Vec<u8>), String>,
}

/// A negentropy session of one connection.
pub(super) struct NegSession {
    generation: u64,
    /// `None` while the items are still loading.
    state: Option<Negentropy<'static, NegentropyStorageVector>>,
}

/// Loads a filter's items and answers a NEG-OPEN's first message (blocking).
fn open_negentropy(
    store: &Store,
    filter: &Filter,
    max: usize,
    frame: u64,
    initial: &[u8],
) -> Result<(Negentropy<'static, NegentropyStorageVector>, Vec<u8>), String> {
    let items = store
        .negentropy_items(std::slice::from_ref(filter), max, unix_now())
        .map_err(|e| format!("error: {e}"))?
        .ok_or_else(|| format!("blocked: the filter matches more than {max} events; narrow it"))?;
    let mut storage = NegentropyStorageVector::with_capacity(items.len());
    for (created_at, id) in items {
        storage
            .insert(created_at, Id::from_byte_array(id))
            .map_err(|e| format!("error: {e}"))?;
    }
    storage.seal().map_err(|e| format!("error: {e}"))?;
    let mut neg = Negentropy::owned(storage, frame).map_err(|e| format!("error: {e}"))?;
    let reply = neg
        .reconcile(initial)
        .map_err(|e| format!("invalid: {e}"))?;
    Ok((neg, reply))
}

impl Connection {
    /// NIP-77: NEG-OPEN loads the filter's `(created_at, id)` items on a blocking thread
    /// and answers the initial message; NEG-MSG continues; NEG-CLOSE ends the session.
    pub(super) fn on_neg(
        &mut self,
        kind: &str,
        arr: &[Value],
        queries: &mpsc::Sender<Done>,
    ) -> bool {
        let relay = self.relay.clone();
        let limits = &relay.limits;
        let Some(subid) = arr.get(1).and_then(Value::as_str) else {
            return self.notice(&format!("invalid: {kind} needs a subscription id string"));
        };
        let subid = subid.to_owned();
        if subid.is_empty() || subid.chars().count() > limits.max_subid_length {
            return self.notice(&format!(
                "invalid: subscription ids are 1 to {} characters",
                limits.max_subid_length
            ));
        }
        if kind == "NEG-OPEN"
            && let Some(why) = self.shed(super::auth::Ask::Subscribe)
        {
            return !why.is_empty() && self.send(message::neg_err(&subid, &why));
        }
        let msg_hex = |i: usize| -> Result<Vec<u8>, String> {
            let s = arr
                .get(i)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("invalid: {kind} needs a hex message"))?;
            hex::decode(s).map_err(|_| "invalid: the negentropy message is not hex".to_owned())
        };
        match kind {
            "NEG-CLOSE" => {
                self.negs.remove(&subid);
                true
            }
            "NEG-MSG" => {
                let msg = match msg_hex(2) {
                    Ok(m) => m,
                    Err(e) => {
                        self.negs.remove(&subid);
                        return self.send(message::neg_err(&subid, &e));
                    }
                };
                let Some(neg) = self.negs.get_mut(&subid).and_then(|s| s.state.as_mut()) else {
                    return self.send(message::neg_err(
                        &subid,
                        "closed: no such negentropy session; send NEG-OPEN first",
                    ));
                };
                match neg.reconcile(&msg) {
                    Ok(reply) => self.send(message::neg_msg(&subid, &reply)),
                    Err(e) => {
                        self.negs.remove(&subid);
                        self.send(message::neg_err(&subid, &format!("invalid: {e}")))
                    }
                }
            }
            _ => {
                let (Some(filter), Ok(initial)) = (arr.get(2), msg_hex(3)) else {
                    return self.send(message::neg_err(
                        &subid,
                        "invalid: NEG-OPEN takes a filter and a hex message",
                    ));
                };
                let fl = FilterLimits {
                    max_values: limits.max_filter_values,
                };
                let filter = match Filter::from_value(filter, fl)
                    .map_err(|e| format!("invalid: {e}"))
                    .and_then(|f| self.private_view(vec![f]))
                {
                    Ok(mut f) => f.remove(0),
                    Err(why) => {
                        return !why.is_empty() && self.send(message::neg_err(&subid, &why));
                    }
                };
                // NEG-OPEN costs a scan of up to max_neg_items rows: it takes a REQ token,
                // and sessions still loading count against the limit even when reopened.
                if !self.reqs.take() {
                    return self.send(message::neg_err(&subid, "blocked: rate-limited, slow down"));
                }
                let loading = self.negs.values().filter(|s| s.state.is_none()).count();
                if loading >= limits.max_neg_sessions
                    || (!self.negs.contains_key(&subid)
                        && self.negs.len() >= limits.max_neg_sessions)
                {
                    return self.send(message::neg_err(
                        &subid,
                        &format!(
                            "blocked: too many open negentropy sessions (the most is {})",
                            limits.max_neg_sessions
                        ),
                    ));
                }
                if let Some(s) = &self.session {
                    s.tally.reconciling(fleetmesh_proto::unix_now());
                }
                self.generation += 1;
                let generation = self.generation;
                self.negs.insert(
                    subid.clone(),
                    NegSession {
                        generation,
                        state: None,
                    },
                );
                let readers = relay.readers.clone();
                let (max, frame) = (limits.max_neg_items, limits.neg_frame_size);
                let queries = queries.clone();
                let task = tokio::spawn(async move {
                    let result = readers
                        .run(move |s| Ok(open_negentropy(s, &filter, max, frame, &initial)))
                        .await
                        .unwrap_or_else(|e| Err(format!("error: {e}")));
                    let _ = queries
                        .send(Done::NegOpened(NegOpened {
                            subid,
                            generation,
                            result,
                        }))
                        .await;
                });
                self.tasks.push(task.abort_handle());
                true
            }
        }
    }

    pub(super) fn on_neg_opened(&mut self, opened: NegOpened) -> bool {
        let current = self
            .negs
            .get(&opened.subid)
            .is_some_and(|s| s.generation == opened.generation);
        if !current {
            return true; // closed or reopened meanwhile
        }
        match opened.result {
            Ok((neg, reply)) => {
                if let Some(s) = self.negs.get_mut(&opened.subid) {
                    s.state = Some(neg);
                }
                self.send(message::neg_msg(&opened.subid, &reply))
            }
            Err(reason) => {
                self.negs.remove(&opened.subid);
                self.send(message::neg_err(&opened.subid, &reason))
            }
        }
    }
}
