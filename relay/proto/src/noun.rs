//! What every typed noun shares: the checks made before its fields are read, the [`Noun`]
//! trait the kinds with JSON content implement, and the tag helpers.

use fleetmesh_schemas::SchemaSet;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::event::{Event, UnsignedEvent};
use crate::identity::NodeKeys;
use crate::{Error, Result};

/// Checks `event`'s id and signature, that it is of kind `expected` (`what` names the noun
/// for the error: "an ask"), and the kind's JSON Schema (content included).
pub(crate) fn checked(event: &Event, expected: u16, what: &'static str) -> Result<()> {
    event.verify()?;
    if event.kind != expected {
        return Err(Error::WrongKind {
            what,
            expected,
            found: event.kind,
        });
    }
    SchemaSet::embedded()
        .validate_event(&event.to_value())
        .map_err(|e| Error::Schema(e.to_string()))?;
    Ok(())
}

/// [`checked`], then the content decoded.
pub(crate) fn checked_content(event: &Event, expected: u16, what: &'static str) -> Result<Value> {
    checked(event, expected, what)?;
    serde_json::from_str(&event.content)
        .map_err(|e| Error::Schema(format!("content is not JSON: {e}")))
}

/// The tag `name`, which the content must repeat as its `name` field, as a protocol word.
pub(crate) fn agreeing_tag<T: std::str::FromStr<Err = Error>>(
    event: &Event,
    content: &Value,
    name: &'static str,
) -> Result<T> {
    let tag = event.tag_value(name).unwrap_or_default();
    same(name, tag, &content[name])?;
    tag.parse()
}

/// A tag's value and the content's value it must equal; [`Error::Mismatch`] naming the tag.
pub(crate) fn same(field: &'static str, tag: &str, content: &Value) -> Result<()> {
    if content.as_str() == Some(tag) {
        return Ok(());
    }
    Err(Error::Mismatch {
        field,
        tag: tag.to_owned(),
        content: content.to_string(),
    })
}

/// Every value of the tags named `name`, in order.
pub(crate) fn tag_values<'e>(event: &'e Event, name: &str) -> Vec<&'e str> {
    event
        .tags
        .iter()
        .filter(|t| t.first().map(String::as_str) == Some(name))
        .filter_map(|t| t.get(1).map(String::as_str))
        .collect()
}

/// A tag `[name, value]`.
pub(crate) fn tag(name: &str, value: impl Into<String>) -> Vec<String> {
    vec![name.to_owned(), value.into()]
}

/// A fleetmesh event kind whose content is a JSON object: the noun is its content (serde),
/// plus what its tags say beyond repeating it.
pub trait Noun: Serialize + DeserializeOwned {
    /// The kind.
    const KIND: u16;
    /// The noun in words, for errors ("a budget").
    const WHAT: &'static str;

    /// Checks the tags against the decoded noun and reads what only the tags hold.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming the tag.
    fn with_tags(self, event: &Event) -> Result<Self>;

    /// The tags the signed event carries.
    fn tags(&self) -> Vec<Vec<String>>;

    /// Reads the noun from a signed event: id and signature, kind, the kind's JSON Schema,
    /// then the tags against the content.
    ///
    /// # Errors
    /// [`Error::InvalidEvent`], [`Error::WrongKind`], [`Error::Schema`], [`Error::Mismatch`].
    fn from_event(event: &Event) -> Result<Self> {
        checked(event, Self::KIND, Self::WHAT)?;
        let noun: Self = serde_json::from_str(&event.content)
            .map_err(|e| Error::Schema(format!("content: {e}")))?;
        noun.with_tags(event)
    }

    /// The event of its kind that says it, at `created_at`, to be signed.
    fn unsigned(&self, created_at: u64) -> UnsignedEvent {
        UnsignedEvent {
            created_at,
            kind: Self::KIND,
            tags: self.tags(),
            content: serde_json::to_string(self).expect("a noun serializes"),
        }
    }

    /// Signs the noun as an event of its kind with `keys`, at `created_at`.
    ///
    /// # Errors
    /// [`Error::Random`] if the signing nonce cannot be drawn.
    fn sign(&self, keys: &NodeKeys, created_at: u64) -> Result<Event> {
        keys.sign(self.unsigned(created_at))
    }
}

/// `TryFrom<&Event>` for nouns (a blanket impl would collide with the standard library's).
macro_rules! noun_try_from {
    ($($t:ty),+) => {$(
        impl TryFrom<&$crate::event::Event> for $t {
            type Error = $crate::Error;
            fn try_from(event: &$crate::event::Event) -> $crate::Result<$t> {
                <$t as $crate::noun::Noun>::from_event(event)
            }
        }
    )+};
}
pub(crate) use noun_try_from;
