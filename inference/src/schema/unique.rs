//! `uniqueItems` where the items are literals (an `enum` or `const`: tags, categories,
//! flags): each value written is ruled out of the rest of the array, with every value equal
//! to it as JSON Schema compares values (`1` and `1.0`). The matcher keeps the set of
//! values written per array ([`MAX_UNIQUE`] bits); [`Node::unique_cost`] is what the
//! shortest way to finish counts for the items still owed. Over any other items the
//! keyword is refused when the schema compiles.

use serde_json::Value;

use super::compile::{ARRAY, NEVER, Node, schema_err};
use crate::Result;

/// The most values the items of a `uniqueItems` array may take.
pub(crate) const MAX_UNIQUE: usize = 128;

impl Node {
    /// [`Node::items_cost`] for `k` more items of a `uniqueItems` array ([`Node::unique`])
    /// when the values in `used` are taken: the `k` shortest values left, one per set of
    /// equal ones ([`NEVER`] when fewer are left).
    pub fn unique_cost(&self, nodes: &[Node], used: u128, k: usize) -> usize {
        let (Some(same), Some(lits)) = (&self.unique, &nodes[self.items].literals) else {
            return NEVER;
        };
        if k == 0 {
            return 0;
        }
        // the shortest member of each set of equal values not yet used
        let mut lens: Vec<usize> = (0..same.len())
            .filter(|i| used & (1u128 << i) == 0 && same[*i].trailing_zeros() as usize == *i)
            .map(|i| {
                (0..same.len())
                    .filter(|j| same[i] & (1u128 << j) != 0)
                    .map(|j| lits[j].len())
                    .min()
                    .unwrap_or(NEVER)
            })
            .collect();
        if lens.len() < k {
            return NEVER;
        }
        lens.sort_unstable();
        lens[..k]
            .iter()
            .fold(0usize, |a, l| a.saturating_add(l.saturating_add(1)))
            .min(NEVER)
    }
}

/// `uniqueItems` of the array node `n` at `at` (its items compiled into `nodes`): the sets
/// of equal item values ([`Node::unique`]) when it is true and binds (arrays allowed, more
/// than one item possible); refused unless the items are literals.
///
/// # Errors
/// [`crate::Error::Schema`] for a non-boolean value or items that are not literals.
pub(super) fn unique_items(
    obj: &serde_json::Map<String, Value>,
    at: &str,
    n: &Node,
    nodes: &[Node],
) -> Result<Option<Vec<u128>>> {
    match obj.get("uniqueItems") {
        None | Some(Value::Bool(false)) => return Ok(None),
        Some(Value::Bool(true)) => {}
        Some(_) => return Err(schema_err(at, "`uniqueItems` must be a boolean")),
    }
    if n.kinds & ARRAY == 0 || n.max_items.is_some_and(|m| m <= 1) {
        return Ok(None);
    }
    let items = &nodes[n.items];
    let lits = match &items.literals {
        Some(l) if n.prefix.is_empty() && items.alts.is_empty() && l.len() <= MAX_UNIQUE => l,
        _ => {
            return Err(schema_err(
                at,
                format!(
                    "`uniqueItems` is supported over items that are an `enum` or `const` of \
                     at most {MAX_UNIQUE} values, without `prefixItems`"
                ),
            ));
        }
    };
    let values: Vec<Value> = lits
        .iter()
        .map(|l| serde_json::from_slice(l).expect("serialized at compile"))
        .collect();
    Ok(Some(
        values
            .iter()
            .map(|a| {
                values
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| json_equal(a, b))
                    .fold(0u128, |set, (j, _)| set | (1u128 << j))
            })
            .collect(),
    ))
}

/// Whether `a` and `b` are equal as JSON Schema compares values (`enum`, `uniqueItems`):
/// numbers by value (`1` equals `1.0`), arrays item by item, objects member by member.
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let int = |n: &serde_json::Number| {
                n.as_i64()
                    .map(i128::from)
                    .or_else(|| n.as_u64().map(i128::from))
            };
            match (int(x), int(y)) {
                (Some(i), Some(j)) => i == j,
                _ => x.as_f64() == y.as_f64(),
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}
