//! NIP-01 filters: parsing with limits, matching an event, and the semantics clients rely
//! on (every field ANDed, values within a field ORed, `#x` on the first value of
//! single-letter tags, `since <= created_at <= until`).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::event::Event;

/// A parsed filter. Empty vectors mean "no constraint" only when the field was absent; a
/// field given as `[]` matches nothing, as in strfry and most relays.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Event ids (exact, 32 bytes).
    pub ids: Option<Vec<[u8; 32]>>,
    /// Author pubkeys (exact, 32 bytes).
    pub authors: Option<Vec<[u8; 32]>>,
    /// Kinds.
    pub kinds: Option<Vec<u16>>,
    /// `#x` constraints: single-letter tag name to accepted values.
    pub tags: BTreeMap<char, Vec<String>>,
    /// Lower bound on `created_at`, inclusive.
    pub since: Option<u64>,
    /// Upper bound on `created_at`, inclusive.
    pub until: Option<u64>,
    /// Most events the initial query returns (newest first).
    pub limit: Option<u64>,
    /// Kinds left out whatever else matches: set by a relay for what a connection may not
    /// read (its private kinds), never read from the wire.
    pub exclude_kinds: Vec<u16>,
}

/// Why a filter was refused; the text follows NIP-01's `invalid:` convention.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FilterError(pub String);

/// Bounds applied while parsing, from the relay's limits.
#[derive(Debug, Clone, Copy)]
pub struct FilterLimits {
    /// Most values in one of `ids`, `authors`, `kinds` or a `#x` list.
    pub max_values: usize,
}

impl Default for FilterLimits {
    fn default() -> Self {
        FilterLimits { max_values: 1000 }
    }
}

/// `v` as an array of at most `limits.max_values` values.
fn bounded_array<'v>(
    field: &str,
    v: &'v Value,
    limits: FilterLimits,
) -> Result<&'v [Value], FilterError> {
    let arr = v
        .as_array()
        .ok_or_else(|| FilterError(format!("{field} must be an array")))?;
    if arr.len() > limits.max_values {
        return Err(FilterError(format!(
            "{field} has {} values, the most allowed is {}",
            arr.len(),
            limits.max_values
        )));
    }
    Ok(arr)
}

fn hex32_list(field: &str, v: &Value, limits: FilterLimits) -> Result<Vec<[u8; 32]>, FilterError> {
    bounded_array(field, v, limits)?
        .iter()
        .map(|x| {
            let s = x
                .as_str()
                .ok_or_else(|| FilterError(format!("{field} values must be strings")))?;
            let mut out = [0u8; 32];
            if s.len() != 64 || s.bytes().any(|b| b.is_ascii_uppercase()) {
                return Err(FilterError(format!(
                    "{field} values must be 64 lowercase hex characters"
                )));
            }
            hex::decode_to_slice(s, &mut out).map_err(|_| {
                FilterError(format!(
                    "{field} values must be 64 lowercase hex characters"
                ))
            })?;
            Ok(out)
        })
        .collect()
}

fn uint(field: &str, v: &Value) -> Result<u64, FilterError> {
    v.as_u64()
        .ok_or_else(|| FilterError(format!("{field} must be a non-negative integer")))
}

impl Filter {
    /// Parses one filter object.
    ///
    /// # Errors
    /// A [`FilterError`] naming the field: wrong types, malformed hex, too many values, or
    /// an unknown field (including NIP-50 `search`, which this relay does not implement:
    /// ignoring it would return wrong results).
    pub fn from_value(v: &Value, limits: FilterLimits) -> Result<Filter, FilterError> {
        let obj = v
            .as_object()
            .ok_or_else(|| FilterError("a filter must be a JSON object".into()))?;
        let mut f = Filter::default();
        for (key, value) in obj {
            match key.as_str() {
                "ids" => f.ids = Some(hex32_list("ids", value, limits)?),
                "authors" => f.authors = Some(hex32_list("authors", value, limits)?),
                "kinds" => {
                    let arr = bounded_array("kinds", value, limits)?;
                    f.kinds = Some(
                        arr.iter()
                            .map(|k| {
                                k.as_u64()
                                    .and_then(|k| u16::try_from(k).ok())
                                    .ok_or_else(|| {
                                        FilterError("kinds must be integers from 0 to 65535".into())
                                    })
                            })
                            .collect::<Result<_, _>>()?,
                    );
                }
                "since" => f.since = Some(uint("since", value)?),
                "until" => f.until = Some(uint("until", value)?),
                "limit" => f.limit = Some(uint("limit", value)?),
                k if k.len() == 2 && k.starts_with('#') => {
                    let name = k.chars().nth(1).expect("two characters");
                    if !name.is_ascii_alphabetic() {
                        return Err(FilterError(format!(
                            "{k}: tag filters take a single letter"
                        )));
                    }
                    let arr = bounded_array(k, value, limits)?;
                    let values = arr
                        .iter()
                        .map(|x| {
                            x.as_str()
                                .map(str::to_owned)
                                .ok_or_else(|| FilterError(format!("{k} values must be strings")))
                        })
                        .collect::<Result<_, _>>()?;
                    f.tags.insert(name, values);
                }
                other => {
                    return Err(FilterError(format!("unsupported filter field {other:?}")));
                }
            }
        }
        Ok(f)
    }

    /// Whether `event` satisfies this filter (ignoring `limit`).
    pub fn matches(&self, event: &Event) -> bool {
        if let Some(ids) = &self.ids
            && !ids.contains(&event.id)
        {
            return false;
        }
        if let Some(authors) = &self.authors
            && !authors.contains(&event.pubkey)
        {
            return false;
        }
        if let Some(kinds) = &self.kinds
            && !kinds.contains(&event.kind)
        {
            return false;
        }
        if self.exclude_kinds.contains(&event.kind) {
            return false;
        }
        if self.since.is_some_and(|s| event.created_at < s)
            || self.until.is_some_and(|u| event.created_at > u)
        {
            return false;
        }
        self.tags.iter().all(|(name, values)| {
            event.tags.iter().any(|t| {
                t.len() >= 2
                    && t[0].len() == name.len_utf8()
                    && t[0].starts_with(*name)
                    && values.iter().any(|v| *v == t[1])
            })
        })
    }

    /// Whether no event can ever match (an explicitly empty list, or `since > until`).
    pub fn matches_nothing(&self) -> bool {
        self.ids.as_ref().is_some_and(Vec::is_empty)
            || self.authors.as_ref().is_some_and(Vec::is_empty)
            || self.kinds.as_ref().is_some_and(Vec::is_empty)
            || self.tags.values().any(Vec::is_empty)
            || matches!((self.since, self.until), (Some(s), Some(u)) if s > u)
    }
}
