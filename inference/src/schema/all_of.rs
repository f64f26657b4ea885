//! `allOf` where it reduces: before compiling, each `allOf` is folded into the schema that
//! holds it — its parts' keywords joined with the holder's (a part that is only a local
//! `$ref` is its target) — when the join means exactly "valid under every part":
//! `required` lists unite, `properties` maps unite (a name in two parts must carry the same
//! schema), `type`s intersect (`integer` within `number`), lower bounds (`minimum`,
//! `exclusiveMinimum`, `minLength`, `minItems`) take the largest and upper bounds the
//! smallest, and any other keyword must be equal wherever it appears. What does not
//! reduce is refused up front, naming the keyword: two parts with different values of one
//! keyword (two `pattern`s), `additionalProperties` in one part beside properties named by
//! another (it judges only its own part's properties), `items` and `prefixItems` from
//! different parts. The independent validity check still runs on the schema as written.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::compile::{ANNOTATIONS, schema_err};
use crate::Result;

/// Whether a part's keyword `k` brings nothing to the join: an annotation or definitions.
fn skipped(k: &str) -> bool {
    ANNOTATIONS.contains(&k) || k == "$defs" || k == "definitions"
}

/// How deep `$ref`s inside `allOf` parts may lead before the schema is refused as cyclic.
const MAX_DEPTH: usize = 32;

/// How many `$ref` parts one schema may resolve in all: a schema whose parts refer twice to
/// a definition that does the same, level after level, would otherwise expand to 2^depth
/// copies.
const MAX_RESOLVED: usize = 1_000;

/// `schema` with every `allOf` folded into its holder; borrowed when it has none.
///
/// # Errors
/// [`crate::Error::Schema`] at the `allOf` that does not reduce, saying why.
pub(super) fn reduce(schema: &Value) -> Result<Cow<'_, Value>> {
    if !mentions_all_of(schema) {
        return Ok(Cow::Borrowed(schema));
    }
    let mut out = schema.clone();
    let mut left = MAX_RESOLVED;
    rewrite(&mut out, "", schema, 0, &mut left)?;
    Ok(Cow::Owned(out))
}

fn mentions_all_of(v: &Value) -> bool {
    match v {
        Value::Object(o) => o.contains_key("allOf") || o.values().any(mentions_all_of),
        Value::Array(a) => a.iter().any(mentions_all_of),
        _ => false,
    }
}

fn rewrite(v: &mut Value, at: &str, root: &Value, depth: usize, left: &mut usize) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(schema_err(
            at,
            "`allOf` parts refer to each other without end",
        ));
    }
    match v {
        Value::Array(a) => {
            for (i, x) in a.iter_mut().enumerate() {
                rewrite(x, &format!("{at}/{i}"), root, depth, left)?;
            }
        }
        Value::Object(o) => {
            for (k, x) in o.iter_mut() {
                if k != "allOf" {
                    let key = k.replace('~', "~0").replace('/', "~1");
                    rewrite(x, &format!("{at}/{key}"), root, depth, left)?;
                }
            }
            if let Some(parts) = o.remove("allOf") {
                let here = format!("{at}/allOf");
                let Value::Array(parts) = parts else {
                    return Err(schema_err(&here, "`allOf` must be a non-empty array"));
                };
                if parts.is_empty() {
                    return Err(schema_err(&here, "`allOf` must be a non-empty array"));
                }
                let mut sources = vec![std::mem::take(o)];
                for (i, mut part) in parts.into_iter().enumerate() {
                    let part_at = format!("{here}/{i}");
                    rewrite(&mut part, &part_at, root, depth, left)?;
                    sources.push(resolve(part, &part_at, root, depth, left)?);
                }
                *o = join(sources, &here)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// A part as an object: a lone local `$ref` replaced by its (reduced) target.
fn resolve(
    part: Value,
    at: &str,
    root: &Value,
    depth: usize,
    left: &mut usize,
) -> Result<Map<String, Value>> {
    let mut obj = match part {
        Value::Object(o) => o,
        Value::Bool(true) => Map::new(),
        _ => {
            return Err(schema_err(
                at,
                "an `allOf` part must be a schema object (or `true`)",
            ));
        }
    };
    let only_ref = obj.keys().all(|k| k == "$ref" || skipped(k));
    if let (true, Some(r)) = (only_ref, obj.get("$ref")) {
        *left = left.checked_sub(1).ok_or_else(|| {
            schema_err(
                at,
                format!("`allOf` parts resolve more than {MAX_RESOLVED} `$ref`s"),
            )
        })?;
        let target = r
            .as_str()
            .and_then(|s| s.strip_prefix('#'))
            .and_then(|p| root.pointer(p))
            .ok_or_else(|| schema_err(at, format!("`$ref` {r} points nowhere in this document")))?;
        let mut target = target.clone();
        rewrite(&mut target, at, root, depth + 1, left)?;
        obj = resolve(target, at, root, depth + 1, left)?;
    }
    Ok(obj)
}

/// The join of `sources` (the holder's own keywords first, then each part's).
fn join(sources: Vec<Map<String, Value>>, at: &str) -> Result<Map<String, Value>> {
    for (i, s) in sources.iter().enumerate() {
        let others = || sources.iter().enumerate().filter(move |(j, _)| *j != i);
        if s.contains_key("additionalProperties") {
            let own = s.get("properties").and_then(Value::as_object);
            let foreign = others().any(|(_, o)| {
                o.get("properties")
                    .and_then(Value::as_object)
                    .is_some_and(|p| p.keys().any(|k| own.is_none_or(|own| !own.contains_key(k))))
            });
            if foreign {
                return Err(schema_err(
                    at,
                    "`additionalProperties` in one part beside properties named by another does \
                     not reduce (it judges only its own part's properties); move them into one part",
                ));
            }
        }
        if s.contains_key("items") && others().any(|(_, o)| o.contains_key("prefixItems")) {
            return Err(schema_err(
                at,
                "`items` and `prefixItems` from different parts do not reduce; move them into one part",
            ));
        }
    }
    let mut out = Map::new();
    for s in sources {
        for (k, v) in s {
            if skipped(&k) {
                out.entry(k).or_insert(v);
                continue;
            }
            let Some(have) = out.get_mut(&k) else {
                out.insert(k, v);
                continue;
            };
            match k.as_str() {
                "required" => {
                    let (Value::Array(a), Value::Array(b)) = (&mut *have, v) else {
                        return Err(schema_err(at, "`required` must be an array"));
                    };
                    for name in b {
                        if !a.contains(&name) {
                            a.push(name);
                        }
                    }
                }
                "properties" => {
                    let (Value::Object(a), Value::Object(b)) = (&mut *have, v) else {
                        return Err(schema_err(at, "`properties` must be an object"));
                    };
                    for (name, schema) in b {
                        match a.get(&name) {
                            Some(s) if *s != schema => {
                                return Err(schema_err(
                                    at,
                                    format!(
                                        "property `{name}` has a different schema in two parts; \
                                         constrained decoding supports allOf whose parts combine"
                                    ),
                                ));
                            }
                            Some(_) => {}
                            None => {
                                a.insert(name, schema);
                            }
                        }
                    }
                }
                "type" => *have = both_types(have, &v, at)?,
                "minimum" | "exclusiveMinimum" | "minLength" | "minItems" => {
                    *have = extreme(have, &v, &k, at, true)?;
                }
                "maximum" | "exclusiveMaximum" | "maxLength" | "maxItems" => {
                    *have = extreme(have, &v, &k, at, false)?;
                }
                _ if *have == v => {}
                _ => {
                    return Err(schema_err(
                        at,
                        format!(
                            "`{k}` differs between its parts ({have} and {v}); constrained \
                             decoding supports allOf whose parts combine"
                        ),
                    ));
                }
            }
        }
    }
    Ok(out)
}

/// The types in both `a` and `b` (a name or a list each); `integer` is within `number`.
fn both_types(a: &Value, b: &Value, at: &str) -> Result<Value> {
    let names = |v: &Value| -> Result<Vec<String>> {
        let list: Vec<&Value> = match v {
            Value::Array(a) => a.iter().collect(),
            one => vec![one],
        };
        list.into_iter()
            .map(|n| {
                n.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| schema_err(at, format!("unknown type {n}")))
            })
            .collect()
    };
    let (a, b) = (names(a)?, names(b)?);
    let within = |x: &str, list: &[String]| {
        list.iter().any(|y| y == x) || (x == "integer" && list.iter().any(|y| y == "number"))
    };
    let mut out: Vec<String> = Vec::new();
    for x in a
        .iter()
        .filter(|x| within(x, &b))
        .chain(b.iter().filter(|x| within(x, &a)))
    {
        if !out.contains(x) {
            out.push(x.clone());
        }
    }
    // `number` in one and `integer` in the other: only integers are in both
    if out.iter().any(|x| x == "integer") && !(within("number", &a) && within("number", &b)) {
        out.retain(|x| x != "number");
    }
    match out.len() {
        0 => Err(schema_err(
            at,
            "no type is allowed by every part of `allOf`",
        )),
        1 => Ok(Value::String(out.remove(0))),
        _ => Ok(Value::Array(out.into_iter().map(Value::String).collect())),
    }
}

/// The larger (`lower`) or smaller of two numeric bounds named `k`.
fn extreme(a: &Value, b: &Value, k: &str, at: &str, lower: bool) -> Result<Value> {
    // integers compared exactly (as i128), anything else as f64
    let less = match (
        a.as_i64().map(i128::from).or(a.as_u64().map(i128::from)),
        b.as_i64().map(i128::from).or(b.as_u64().map(i128::from)),
    ) {
        (Some(x), Some(y)) => x < y,
        _ => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => x < y,
            _ => return Err(schema_err(at, format!("`{k}` must be a number"))),
        },
    };
    Ok(if less == lower { b.clone() } else { a.clone() })
}
