//! What a provider sells (kind 30812, addressable with `d` = `compute`): the engines and
//! verification modes it runs, its unit prices, the most one job may use, the Cashu mints
//! it takes escrow on, and the models, circuits and regions it serves. A node publishes
//! its [`Terms`] on its relays; a buyer reads them before it takes an offer from the node
//! (a compute/1.0 `offer` names the terms event it is made under).

use std::collections::BTreeMap;

use fleetmesh_schemas::constants::kind;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::Event;
use crate::noun::{Noun, noun_try_from, tag, tag_values};
use crate::words::{Engine, Mode};
use crate::{Error, Result};

/// The `d` of every terms event: one per provider key.
pub const TERMS_D: &str = "compute";

/// The descriptor endpoint scheme under which a node says where its terms are: the URL is
/// the `nostr:naddr1…` address (NIP-19, NIP-21) of its terms event, naming relays it is on
/// ([`terms_address`]). A DID document lists it as a `ComputeProvider` service.
pub const TERMS_SCHEME: &str = "compute";

/// The address of the terms of the provider `author` (hex) on `relays`, as a
/// `nostr:naddr1…` URL.
///
/// # Errors
/// [`Error::InvalidEvent`] when `author` is not a key or a relay URL is over 255 bytes.
pub fn terms_address(author: &str, relays: &[String]) -> Result<String> {
    let address = crate::nip19::Address {
        kind: kind::COMPUTE_PROVIDER,
        author: author.to_owned(),
        identifier: TERMS_D.to_owned(),
        relays: relays.to_vec(),
    };
    Ok(format!("nostr:{}", address.to_naddr()?))
}

/// A model the provider serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelTerm {
    /// The name requests use.
    pub id: String,
    /// SHA-256 of the model file, hex.
    pub digest: String,
}

/// A circuit the provider proves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CircuitTerm {
    /// The circuit's name.
    pub id: String,
    /// SHA-256 of its proving key, hex.
    pub zkey: String,
}

/// A provider's terms: the content of its kind 30812 event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Terms {
    /// Engines it runs jobs of.
    pub engines: Vec<Engine>,
    /// Verification modes it offers.
    pub modes: Vec<Mode>,
    /// Unit price per engine (`{"amount", "unit", "per", "quantity"}`); an engine not named
    /// is not charged for.
    pub prices: BTreeMap<String, Value>,
    /// The most one job may use: `fuel`, `tokens`, `wall_secs`, `memory_bytes`,
    /// `output_bytes`, `input_bytes`.
    pub limits: BTreeMap<String, u64>,
    /// Mints whose tokens it takes in escrow.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mints: Vec<String>,
    /// Models served by the `llm` engine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelTerm>,
    /// Circuits loaded for `groth16` jobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub circuits: Vec<CircuitTerm>,
    /// Where it runs (operator-chosen labels).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<String>,
}

impl Terms {
    /// Whether it runs `engine` jobs under `mode`.
    pub fn sells(&self, engine: Engine, mode: Mode) -> bool {
        self.engines.contains(&engine) && self.modes.contains(&mode)
    }

    /// Whether it names one of `regions` (any terms do, when `regions` is empty).
    pub fn in_any_region(&self, regions: &[String]) -> bool {
        regions.is_empty() || self.regions.iter().any(|r| regions.contains(r))
    }
}

/// The tags named `name` must say exactly `want` (as sets).
fn same_set<T: ToString>(event: &Event, name: &'static str, want: &[T]) -> Result<()> {
    let mut tags: Vec<&str> = tag_values(event, name);
    tags.sort_unstable();
    tags.dedup();
    let mut content: Vec<String> = want.iter().map(ToString::to_string).collect();
    content.sort_unstable();
    content.dedup();
    if tags == content {
        return Ok(());
    }
    Err(Error::Mismatch {
        field: name,
        tag: tags.join(","),
        content: content.join(","),
    })
}

impl Noun for Terms {
    const KIND: u16 = kind::COMPUTE_PROVIDER;
    const WHAT: &'static str = "a provider's terms";

    fn with_tags(self, event: &Event) -> Result<Terms> {
        same_set(event, "engine", &self.engines)?;
        same_set(event, "mode", &self.modes)?;
        same_set(event, "region", &self.regions)?;
        Ok(self)
    }

    fn tags(&self) -> Vec<Vec<String>> {
        let mut tags = vec![tag("d", TERMS_D)];
        tags.extend(self.engines.iter().map(|e| tag("engine", e.as_str())));
        tags.extend(self.modes.iter().map(|m| tag("mode", m.as_str())));
        tags.extend(self.regions.iter().map(|r| tag("region", r.clone())));
        tags
    }
}

noun_try_from!(Terms);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::NodeKeys;

    fn terms() -> Terms {
        Terms {
            engines: vec![Engine::Wasm],
            modes: vec![Mode::Delivery],
            prices: BTreeMap::from([(
                "wasm".to_owned(),
                serde_json::json!({"amount": 2, "unit": "sat", "per": "job"}),
            )]),
            limits: BTreeMap::from([("fuel".to_owned(), 1_000_000)]),
            mints: vec!["http://127.0.0.1:3338".into()],
            models: Vec::new(),
            circuits: Vec::new(),
            regions: vec!["eu-west".into()],
        }
    }

    #[test]
    fn terms_round_trip_and_tags_that_disagree_are_refused() {
        let keys = NodeKeys::generate().unwrap();
        let e = terms().sign(&keys, 1_767_225_600).unwrap();
        assert_eq!(e.tag_value("d"), Some(TERMS_D));
        assert_eq!(Terms::from_event(&e).unwrap(), terms());
        // a mode tag the content does not list
        let mut u = terms().unsigned(1_767_225_600);
        u.tags.push(tag("mode", "proof"));
        let e = keys.sign(u).unwrap();
        assert!(matches!(
            Terms::from_event(&e),
            Err(Error::Mismatch { field: "mode", .. })
        ));
        // an unknown field is a schema error, never ignored
        let mut u = terms().unsigned(1_767_225_600);
        u.content = u.content.replacen('{', "{\"gpus\":8,", 1);
        let e = keys.sign(u).unwrap();
        assert!(matches!(Terms::from_event(&e), Err(Error::Schema(_))));
    }
}
