//! `anyOf` and `oneOf`: a value of such a node is a value of one of its branches. The
//! first byte of a value picks the branches that can start with it; where only one can
//! (Pydantic's `Optional[X]`, `anyOf: [X, {"type": "null"}]`; a union of an integer and a
//! string) the matcher goes on deterministically, and where several can (two object
//! schemas, an integer and a number) it carries one reading per branch until the bytes
//! leave one ([`super::Matcher`]). Any branch's document is valid under `anyOf`; under
//! `oneOf` it must match no other branch, so a `oneOf` is taken only where its branches
//! provably exclude each other (`one_of.rs`).

use serde_json::Value;

use super::compile::{
    ARRAY, BOOLEAN, Compiler, INTEGER, NULL, NUMBER, Node, OBJECT, STRING, schema_err,
};
use crate::Result;

/// The bytes a value may start with.
pub(crate) type FirstBytes = Box<[bool; 256]>;

impl Compiler<'_> {
    /// The node of `anyOf`/`oneOf` in the schema object `obj` at `at`, if it has one.
    ///
    /// # Errors
    /// [`crate::Error::Schema`] when it stands beside other keywords, or is not a non-empty
    /// array of schemas.
    pub(super) fn alternatives(
        &mut self,
        obj: &serde_json::Map<String, Value>,
        at: &str,
        annotations: &[&str],
    ) -> Result<Option<usize>> {
        let Some(key) = ["anyOf", "oneOf"]
            .into_iter()
            .find(|k| obj.contains_key(*k))
        else {
            return Ok(None);
        };
        let others: Vec<&String> = obj
            .keys()
            .filter(|k| {
                !annotations.contains(&k.as_str())
                    && !["$defs", "definitions", key].contains(&k.as_str())
            })
            .collect();
        if !others.is_empty() {
            return Err(schema_err(
                at,
                format!("`{key}` beside {others:?} is not supported; move them into each branch"),
            ));
        }
        let n = match &obj[key] {
            Value::Array(a) if !a.is_empty() => a.len(),
            _ => return Err(schema_err(at, format!("`{key}` must be a non-empty array"))),
        };
        let id = self.placeholder(at)?;
        let mut node = Node::any();
        node.kinds = 0;
        for i in 0..n {
            let branch = format!("{at}/{key}/{i}");
            let b = self.node(&branch)?;
            node.alts.push((b, Box::new([false; 256])));
            self.alt_sites.push(AltSite {
                node: id,
                index: i,
                at: branch,
                one_of: key == "oneOf",
            });
        }
        self.nodes[id] = node;
        Ok(Some(id))
    }
}

/// Each `anyOf`/`oneOf` branch: its node, index and location (for messages), and whether
/// it is a `oneOf`'s.
pub(super) struct AltSite {
    pub node: usize,
    pub index: usize,
    pub at: String,
    pub one_of: bool,
}

/// Fills in the bytes each alternative may start with.
pub(super) fn settle(nodes: &mut [Node]) {
    for id in 0..nodes.len() {
        for i in 0..nodes[id].alts.len() {
            let first = first_bytes(nodes, nodes[id].alts[i].0, &mut Vec::new());
            nodes[id].alts[i].1 = first;
        }
    }
}

/// The bytes a value of node `id` may start with (`seen`: alternatives being expanded, so
/// a branch that refers back to its own `anyOf` adds nothing).
fn first_bytes(nodes: &[Node], id: usize, seen: &mut Vec<usize>) -> FirstBytes {
    let mut out = Box::new([false; 256]);
    let n = &nodes[id];
    if !n.alts.is_empty() {
        if seen.contains(&id) {
            return out;
        }
        seen.push(id);
        for (b, _) in &n.alts {
            let f = first_bytes(nodes, *b, seen);
            for k in 0..256 {
                out[k] |= f[k];
            }
        }
        seen.pop();
        return out;
    }
    if let Some(lits) = &n.literals {
        for l in lits {
            if let Some(b) = l.first() {
                out[usize::from(*b)] = true;
            }
        }
        return out;
    }
    let mut mark = |bytes: &[u8]| bytes.iter().for_each(|b| out[usize::from(*b)] = true);
    if n.kinds & OBJECT != 0 {
        mark(b"{");
    }
    if n.kinds & ARRAY != 0 {
        mark(b"[");
    }
    if n.kinds & STRING != 0 {
        mark(b"\"");
    }
    if n.kinds & (NUMBER | INTEGER) != 0 {
        mark(b"-0123456789");
    }
    if n.kinds & BOOLEAN != 0 {
        mark(b"tf");
    }
    if n.kinds & NULL != 0 {
        mark(b"n");
    }
    out
}
