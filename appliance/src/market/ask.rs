//! Asks: a buyer's signed kind 30810 event, checked — signature and id, the protocol's
//! JSON Schema for the kind, tags that agree with the content, not expired.

use fleetmesh_relay::Event;
use fleetmesh_schemas::SchemaSet;
use serde_json::Value;

use super::{Refusal, refuse};

/// The kind of an ask.
pub const KIND_ASK: u16 = 30810;

/// A checked ask.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// The signed event.
    pub event: Event,
    /// Its `d` tag: the buyer's name for the ask.
    pub d: String,
    /// The engine (`wasm`, `groth16-prove`, `groth16-verify`, `llm`, `data`).
    pub engine: String,
    /// The verification mode the buyer requires.
    pub mode: String,
    /// The parsed content (limits, bid, engine-specific fields).
    pub content: Value,
    /// NIP-40 expiration, Unix seconds.
    pub expires_at: u64,
}

impl Ask {
    /// Checks an ask event (JSON) at time `now`.
    ///
    /// # Errors
    /// A [`Refusal`]: `invalid_event` (not an event, bad id or signature, not kind
    /// 30810), `schema` (every violation of the kind's schema), `mismatch` (a tag that
    /// disagrees with the content), `expired`.
    pub fn parse(json: &str, schemas: &SchemaSet, now: u64) -> Result<Ask, Refusal> {
        let event = Event::from_json(json).map_err(|e| refuse("invalid_event", e.to_string()))?;
        event
            .verify()
            .map_err(|e| refuse("invalid_event", e.to_string()))?;
        if event.kind != KIND_ASK {
            return Err(refuse(
                "invalid_event",
                format!("kind {} is not an ask (kind {KIND_ASK})", event.kind),
            ));
        }
        schemas
            .validate_event(&event.to_value())
            .map_err(|e| refuse("schema", e.to_string()))?;
        let content: Value = serde_json::from_str(&event.content)
            .map_err(|e| refuse("schema", format!("content is not JSON: {e}")))?;
        let tag = |name: &str| event.tag_value(name).unwrap_or_default().to_string();
        let (engine, mode) = (tag("engine"), tag("mode"));
        for (name, value) in [("engine", &engine), ("mode", &mode)] {
            if content[name].as_str() != Some(value.as_str()) {
                return Err(refuse(
                    "mismatch",
                    format!(
                        "the {name} tag says {value:?}, the content says {}",
                        content[name]
                    ),
                ));
            }
        }
        let expires_at = event
            .expiration()
            .ok_or_else(|| refuse("schema", "no expiration tag"))?;
        if expires_at <= now {
            return Err(refuse(
                "expired",
                format!("the ask expired at {expires_at} (now {now})"),
            ));
        }
        Ok(Ask {
            d: tag("d"),
            engine,
            mode,
            content,
            expires_at,
            event,
        })
    }

    /// The buyer's public key, hex.
    pub fn buyer(&self) -> String {
        hex::encode(self.event.pubkey)
    }

    /// The ask's address `30810:<buyer>:<d>` (an addressable event: a later ask with the
    /// same address replaces it).
    pub fn address(&self) -> String {
        format!("{KIND_ASK}:{}:{}", self.buyer(), self.d)
    }
}
