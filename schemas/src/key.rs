//! What a schema validates: an event kind, a manifest kind or a payload protocol.

use std::fmt;
use std::str::FromStr;

use crate::Error;

/// The key under which a schema is registered and looked up.
///
/// Parsed from text as the CLI takes it: a number is an event kind (`30810`, also
/// `kind-30810` or `kind:30810`), a string with a `/` is a payload protocol id
/// (`compute/1.0`), anything else a manifest kind (`MeshNode`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SchemaKey {
    /// A Nostr event of this kind.
    Event(u16),
    /// A `fleetmesh.org/v1alpha1` manifest of this kind.
    Manifest(String),
    /// A decrypted payload of this protocol id.
    Payload(String),
}

impl fmt::Display for SchemaKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaKey::Event(k) => write!(f, "event kind {k}"),
            SchemaKey::Manifest(k) => write!(f, "manifest {k}"),
            SchemaKey::Payload(p) => write!(f, "payload {p}"),
        }
    }
}

impl FromStr for SchemaKey {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::BadKey(s.to_owned());
        let s = s.trim();
        let number = s
            .strip_prefix("kind-")
            .or_else(|| s.strip_prefix("kind:"))
            .unwrap_or(s);
        if !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) {
            return number.parse().map(SchemaKey::Event).map_err(|_| bad());
        }
        if s.is_empty() || s.chars().any(char::is_whitespace) {
            return Err(bad());
        }
        if s.contains('/') {
            Ok(SchemaKey::Payload(s.to_owned()))
        } else if s.chars().all(|c| c.is_ascii_alphanumeric()) {
            Ok(SchemaKey::Manifest(s.to_owned()))
        } else {
            Err(bad())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_form() {
        assert_eq!(
            "30810".parse::<SchemaKey>().unwrap(),
            SchemaKey::Event(30810)
        );
        assert_eq!(
            "kind-11801".parse::<SchemaKey>().unwrap(),
            SchemaKey::Event(11801)
        );
        assert_eq!(
            "MeshNode".parse::<SchemaKey>().unwrap(),
            SchemaKey::Manifest("MeshNode".into())
        );
        assert_eq!(
            "fleetmesh/hop/1".parse::<SchemaKey>().unwrap(),
            SchemaKey::Payload("fleetmesh/hop/1".into())
        );
        for bad in ["", "70000", "Mesh Node", "kind-", "a.b"] {
            assert!(
                matches!(bad.parse::<SchemaKey>(), Err(Error::BadKey(_))),
                "{bad}"
            );
        }
    }
}
