//! Which `oneOf` the decoder takes: one whose branches exclude each other, so a document
//! written under one branch matches no other and `oneOf` means what `anyOf` means.
//! Deciding that in general is as hard as the schemas are; what schema generators write
//! is shown cheaply:
//! - branches of different types (an integer or a string, an object or null);
//! - `enum`/`const` values none of which the other branch takes (asked of the `jsonschema`
//!   crate, against the other branch as written);
//! - objects told apart by a property: one branch requires it and the other forbids it
//!   (not declared, `additionalProperties: false`), or both require it with values that
//!   exclude each other — a discriminator, as Pydantic writes tagged unions
//!   (`{"oneOf": [{"$ref": "#/$defs/Cat"}, …], "discriminator": …}` with a `const` tag
//!   in each model).
//!
//! Anything else is refused up front naming both branches (`anyOf` takes them). The
//! search is bounded ([`MAX_STEPS`]); past that a pair is refused too, never assumed.

use std::collections::HashMap;

use serde_json::Value;

use super::compile::{Compiler, INTEGER, NUMBER, Node, OBJECT, schema_err};
use super::unique::json_equal;
use crate::Result;

/// How deep the search follows properties and nested unions.
const MAX_DEPTH: u8 = 8;
/// Most comparisons one schema's `oneOf` checks may make (node pairs, and values checked
/// against a branch; a validator built counts a hundred).
pub(crate) const MAX_STEPS: usize = 20_000;

impl Compiler<'_> {
    /// Checks that the branches of every `oneOf` exclude each other (see the module doc).
    ///
    /// # Errors
    /// [`crate::Error::Schema`] naming the first two branches that are not shown to.
    pub(super) fn check_one_of(&self) -> Result<()> {
        let mut probe = Probe {
            c: self,
            validators: HashMap::new(),
            steps: 0,
            late: None,
        };
        let sites: Vec<_> = self.alt_sites.iter().filter(|s| s.one_of).collect();
        for (k, a) in sites.iter().enumerate() {
            for b in sites[k + 1..].iter().filter(|b| b.node == a.node) {
                let (x, y) = (
                    self.nodes[a.node].alts[a.index].0,
                    self.nodes[b.node].alts[b.index].0,
                );
                if !probe.exclusive(x, y, 0) {
                    if let Some(e) = probe.late.take() {
                        return Err(e);
                    }
                    let gave_up = match probe.steps > MAX_STEPS {
                        true => format!(" (the check gave up after {MAX_STEPS} comparisons)"),
                        false => String::new(),
                    };
                    return Err(schema_err(
                        "",
                        format!(
                            "#{} and #{} may both match one document{gave_up}: constrained \
                             decoding takes `oneOf` only where the branches exclude each \
                             other — different types, `enum`/`const` values the other branch \
                             does not take, or objects told apart by a required property (a \
                             discriminator `const` in each, or one the other forbids); \
                             `anyOf` takes branches that overlap",
                            a.at, b.at
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// One check's state: the compiler's nodes and locations, validators built so far (per
/// node), and the comparisons made.
struct Probe<'c, 'a> {
    c: &'c Compiler<'a>,
    validators: HashMap<usize, Option<jsonschema::Validator>>,
    steps: usize,
    /// Why the compilation must stop (its deadline passed, or it was cancelled).
    late: Option<crate::Error>,
}

impl Probe<'_, '_> {
    /// The schema object node `n` was compiled from (None for `true`).
    fn schema(&self, n: usize) -> Option<&serde_json::Map<String, Value>> {
        let at = self.c.locations.get(n)?.as_deref()?;
        self.c.doc.pointer(at)?.as_object()
    }

    /// Whether no document valid under node `x` is valid under node `y` (false when that
    /// is not shown).
    fn exclusive(&mut self, x: usize, y: usize, depth: u8) -> bool {
        self.steps += 1;
        if self.late.is_none()
            && let Err(e) = self.c.limits.check("", "`oneOf`")
        {
            self.late = Some(e);
        }
        if depth > MAX_DEPTH || self.steps > MAX_STEPS || x == y || self.late.is_some() {
            return false;
        }
        let nodes = &self.c.nodes;
        let (nx, ny) = (&nodes[x], &nodes[y]);
        if !nx.alts.is_empty() {
            let branches: Vec<usize> = nx.alts.iter().map(|(b, _)| *b).collect();
            return branches
                .into_iter()
                .all(|b| self.exclusive(b, y, depth + 1));
        }
        if !ny.alts.is_empty() {
            let branches: Vec<usize> = ny.alts.iter().map(|(b, _)| *b).collect();
            return branches
                .into_iter()
                .all(|b| self.exclusive(x, b, depth + 1));
        }
        for (a, b) in [(x, y), (y, x)] {
            if nodes[a].literals.is_some() {
                return match self.listed(a) {
                    Some(values) => values.iter().all(|v| !self.admits(b, v)),
                    None => false,
                };
            }
        }
        let shared = types(nx) & types(ny);
        if shared & !OBJECT != 0 {
            return false;
        }
        shared == 0 || self.objects_exclusive(nx, ny, depth)
    }

    /// Objects valid under `x` and under `y` have no member in common: a property one
    /// requires the other forbids, or both require it with values that exclude each other.
    fn objects_exclusive(&mut self, x: &Node, y: &Node, depth: u8) -> bool {
        let forbids =
            |n: &Node, key: &[u8]| n.extra.is_none() && !n.props.iter().any(|p| p.key == key);
        let required = |n: &Node| {
            n.props
                .iter()
                .filter(|p| p.required)
                .cloned()
                .collect::<Vec<_>>()
        };
        let (rx, ry) = (required(x), required(y));
        if rx.iter().any(|p| forbids(y, &p.key)) || ry.iter().any(|p| forbids(x, &p.key)) {
            return true;
        }
        for p in &rx {
            if let Some(q) = ry.iter().find(|q| q.key == p.key)
                && self.exclusive(p.node, q.node, depth + 1)
            {
                return true;
            }
        }
        false
    }

    /// The values `enum`/`const` at node `n` list (every value valid there is one).
    fn listed(&self, n: usize) -> Option<Vec<Value>> {
        let obj = self.schema(n)?;
        let mut values = match obj.get("enum") {
            Some(Value::Array(e)) => e.clone(),
            Some(_) => return None,
            None => vec![obj.get("const")?.clone()],
        };
        if let Some(c) = obj.get("const") {
            values.retain(|v| json_equal(v, c));
        }
        Some(values)
    }

    /// Whether the `jsonschema` crate takes `v` under node `n`'s schema (true when no
    /// validator of it alone builds).
    fn admits(&mut self, n: usize, v: &Value) -> bool {
        // each value checked counts, a validator built a hundred: past the bound, assumed
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return true;
        }
        if !self.validators.contains_key(&n) {
            self.steps += 100;
            let built = self.schema(n).and_then(|o| self.c.sub_validator(o));
            self.validators.insert(n, built);
        }
        // `true`, or a schema whose refs do not resolve alone: assumed to take `v`
        self.validators[&n].as_ref().is_none_or(|s| s.is_valid(v))
    }
}

/// The JSON types node `n` may take (an integer and a number counted as one: `1` is
/// both). A bounded number's type counts even where no number within the decoder's digits
/// meets its bounds: the `jsonschema` crate may take a longer one.
fn types(n: &Node) -> u8 {
    let mut k = n.kinds;
    if n.num_range.is_some() {
        k |= NUMBER;
    }
    if k & (NUMBER | INTEGER) != 0 {
        k |= NUMBER | INTEGER;
    }
    k
}
