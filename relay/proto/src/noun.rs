//! What every typed noun checks first when it is read from an event.

use fleetmesh_schemas::SchemaSet;
use serde_json::Value;

use crate::event::Event;
use crate::{Error, Result};

/// Checks `event`'s id and signature, that it is of kind `expected` (`what` names the noun
/// for the error: "an ask"), and the kind's JSON Schema; returns its decoded content.
pub(crate) fn checked_content(event: &Event, expected: u16, what: &'static str) -> Result<Value> {
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
    if content[name].as_str() != Some(tag) {
        return Err(Error::Mismatch {
            field: name,
            tag: tag.to_owned(),
            content: content[name].to_string(),
        });
    }
    tag.parse()
}
