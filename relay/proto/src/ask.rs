//! The compute ask (kind 30810): a buyer's signed offer of a job — engine, verification
//! mode, limits, bid — checked whole before anything acts on it.

use fleetmesh_schemas::constants::kind;
use serde_json::Value;

use crate::event::{Event, UnsignedEvent};
use crate::identity::NodeKeys;
use crate::noun::{agreeing_tag, checked_content};
use crate::words::{Engine, Mode};
use crate::{Error, Result};

/// A checked ask.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// The signed event.
    pub event: Event,
    /// Its `d` tag: the buyer's name for the ask.
    pub d: String,
    /// The engine that is to run the job.
    pub engine: Engine,
    /// The verification mode the buyer requires.
    pub mode: Mode,
    /// The parsed content (limits, bid, engine-specific fields).
    pub content: Value,
    /// NIP-40 expiration, Unix seconds.
    pub expires_at: u64,
}

impl Ask {
    /// Checks an ask event at time `now`: its id and signature, its kind, the kind's JSON
    /// Schema, the `engine` and `mode` tags against the content, and its expiration.
    ///
    /// # Errors
    /// [`Error::InvalidEvent`] (id, signature), [`Error::WrongKind`], [`Error::Schema`]
    /// (every violation), [`Error::Mismatch`] (naming the tag), [`Error::Expired`].
    pub fn from_event(event: Event, now: u64) -> Result<Ask> {
        let content = checked_content(&event, kind::COMPUTE_ASK, "an ask")?;
        let engine = agreeing_tag(&event, &content, "engine")?;
        let mode = agreeing_tag(&event, &content, "mode")?;
        let expires_at = event
            .expiration()
            .ok_or_else(|| Error::Schema("no expiration tag".into()))?;
        if expires_at <= now {
            return Err(Error::Expired {
                what: "ask",
                expired_at: expires_at,
                now,
            });
        }
        Ok(Ask {
            d: event.tag_value("d").unwrap_or_default().to_owned(),
            engine,
            mode,
            content,
            expires_at,
            event,
        })
    }

    /// [`Ask::from_event`] of an event's JSON.
    ///
    /// # Errors
    /// As [`Ask::from_event`]; [`Error::InvalidEvent`] for JSON that is not an event.
    pub fn parse(json: &str, now: u64) -> Result<Ask> {
        Ask::from_event(Event::from_json(json)?, now)
    }

    /// The buyer's public key, hex.
    pub fn buyer(&self) -> String {
        hex::encode(self.event.pubkey)
    }

    /// The ask's address `30810:<buyer>:<d>` (an addressable event: a later ask with the
    /// same address replaces it).
    pub fn address(&self) -> String {
        format!("{}:{}:{}", kind::COMPUTE_ASK, self.buyer(), self.d)
    }
}

/// What an ask says, before the buyer signs it.
#[derive(Debug, Clone, PartialEq)]
pub struct AskBody {
    /// The buyer's name for the ask (`d`): a later ask with the same name replaces it.
    pub d: String,
    /// The engine that is to run the job.
    pub engine: Engine,
    /// The verification mode the buyer requires.
    pub mode: Mode,
    /// The rest of the content: `limits`, `bid` and the engine's fields (`model`,
    /// `quorum`, `circuit`, `output_schema`); `engine` and `mode` are set from the above.
    pub content: Value,
    /// NIP-40 expiration, Unix seconds.
    pub expires_at: u64,
    /// The provider it is addressed to (`p`, hex), if any.
    pub provider: Option<String>,
}

impl AskBody {
    /// Signs the ask with the buyer's `keys` at `created_at`.
    ///
    /// # Errors
    /// [`Error::Random`] if the signing nonce cannot be drawn.
    pub fn sign(&self, keys: &NodeKeys, created_at: u64) -> Result<Event> {
        let mut content = self.content.clone();
        content["engine"] = serde_json::json!(self.engine);
        content["mode"] = serde_json::json!(self.mode);
        let mut tags = vec![
            vec!["d".to_owned(), self.d.clone()],
            vec!["engine".to_owned(), self.engine.as_str().to_owned()],
            vec!["mode".to_owned(), self.mode.as_str().to_owned()],
            vec!["expiration".to_owned(), self.expires_at.to_string()],
        ];
        if let Some(p) = &self.provider {
            tags.push(vec!["p".to_owned(), p.clone()]);
        }
        keys.sign(UnsignedEvent {
            created_at,
            kind: kind::COMPUTE_ASK,
            tags,
            content: content.to_string(),
        })
    }
}

impl TryFrom<&Event> for Ask {
    type Error = Error;

    /// [`Ask::from_event`] at the system clock's now.
    fn try_from(event: &Event) -> Result<Ask> {
        Ask::from_event(event.clone(), crate::unix_now())
    }
}
