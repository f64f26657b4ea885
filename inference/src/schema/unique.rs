//! `uniqueItems` where the items are literals (an `enum` or `const`: tags, categories,
//! flags): each value written is ruled out of the rest of the array, with every value equal
//! to it as JSON Schema compares values (`1` and `1.0`). The matcher keeps the set of
//! values written per array ([`MAX_UNIQUE`] bits); [`Unique::cost`] and
//! [`Unique::cost_after`] are what the shortest way to finish counts for the items still
//! owed, from the sets of equal values sorted by length once, at compile time (the matcher
//! asks at every step of the mask walk). Over any other items the keyword is refused when
//! the schema compiles.

use serde_json::Value;

use super::compile::{ARRAY, NEVER, Node, schema_err};
use crate::Result;

/// The most values the items of a `uniqueItems` array may take.
pub(crate) const MAX_UNIQUE: usize = 128;

/// A `uniqueItems` array's item values (the item node's literals), in sets of equal ones.
#[derive(Debug, Clone)]
pub(crate) struct Unique {
    /// For each literal, the literals equal to it, itself included: what writing it uses.
    pub same: Vec<u128>,
    /// Each set of equal values with the bytes of its shortest member plus the comma or
    /// bracket beside it, cheapest first.
    sets: Vec<(u128, usize)>,
    /// For each literal, the bytes its set counts in `sets`.
    cost_of: Vec<usize>,
}

impl Unique {
    /// Bytes of `k` more items, each with the byte beside it, none from a set in `used`:
    /// the `k` cheapest sets left ([`NEVER`] when fewer are left).
    pub fn cost(&self, used: u128, k: usize) -> usize {
        if k == 0 {
            return 0;
        }
        let mut sum = 0usize;
        let mut n = 0;
        for (_, cost) in self.sets.iter().filter(|(m, _)| m & used == 0) {
            sum = sum.saturating_add(*cost);
            n += 1;
            if n == k {
                return sum.min(NEVER);
            }
        }
        NEVER
    }

    /// [`Unique::cost`] while an item is being written that becomes one of `cands`, with
    /// `left(c)` bytes to go for candidate `c`: the least over them of those bytes plus the
    /// `k` owed items from the other sets.
    pub fn cost_after(
        &self,
        used: u128,
        k: usize,
        cands: &[u32],
        left: impl Fn(u32) -> usize,
    ) -> usize {
        // the k cheapest sets left, and the next one (what replaces a candidate's own set
        // when that set is among the k)
        let (mut sum, mut n, mut among, mut next) = (0usize, 0, 0u128, NEVER);
        for (members, cost) in self.sets.iter().filter(|(m, _)| m & used == 0) {
            if n == k {
                next = *cost;
                break;
            }
            sum = sum.saturating_add(*cost);
            among |= members;
            n += 1;
        }
        if n < k {
            return NEVER;
        }
        cands
            .iter()
            .map(|c| {
                let rest = if self.same[*c as usize] & among != 0 {
                    sum.saturating_sub(self.cost_of[*c as usize])
                        .saturating_add(next)
                } else {
                    sum
                };
                left(*c).saturating_add(rest)
            })
            .min()
            .unwrap_or(NEVER)
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
) -> Result<Option<Unique>> {
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
    let same: Vec<u128> = values
        .iter()
        .map(|a| {
            values
                .iter()
                .enumerate()
                .filter(|(_, b)| json_equal(a, b))
                .fold(0u128, |set, (j, _)| set | (1u128 << j))
        })
        .collect();
    // one entry per set, named by its lowest member
    let mut sets: Vec<(u128, usize)> = (0..same.len())
        .filter(|i| same[*i].trailing_zeros() as usize == *i)
        .map(|i| {
            let shortest = (0..same.len())
                .filter(|j| same[i] & (1u128 << j) != 0)
                .map(|j| lits[j].len())
                .min()
                .unwrap_or(NEVER);
            (same[i], shortest.saturating_add(1))
        })
        .collect();
    sets.sort_by_key(|(_, cost)| *cost);
    let cost_of = same
        .iter()
        .map(|s| sets.iter().find(|(m, _)| m == s).map_or(NEVER, |(_, c)| *c))
        .collect();
    Ok(Some(Unique {
        same,
        sets,
        cost_of,
    }))
}

/// Whether `a` and `b` are equal as JSON Schema compares values (`enum`, `uniqueItems`):
/// numbers by value (`1` equals `1.0`), arrays item by item, objects member by member.
pub(super) fn json_equal(a: &Value, b: &Value) -> bool {
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
