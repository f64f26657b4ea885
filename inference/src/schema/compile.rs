//! JSON Schema → [`Grammar`]: the subset of keywords constrained decoding understands,
//! checked up front, and the shortest document each sub-schema allows.

use std::collections::HashMap;

use serde_json::Value;

use super::alts::{AltSite, FirstBytes};
use super::check::{SchemaCheck, Validation, validator};
use super::limits::CompileLimits;
use super::numbers::{NumSpec, exact_value, num_bounds};
use super::pattern::Pattern;
use crate::{Error, Result};

/// Type bits of [`Node::kinds`].
pub(crate) const OBJECT: u8 = 1;
pub(crate) const ARRAY: u8 = 2;
pub(crate) const STRING: u8 = 4;
pub(crate) const NUMBER: u8 = 8;
pub(crate) const INTEGER: u8 = 16;
pub(crate) const BOOLEAN: u8 = 32;
pub(crate) const NULL: u8 = 64;
const ALL: u8 = 127;

/// "Cannot be finished": larger than any budget, small enough to add to.
pub(crate) const NEVER: usize = usize::MAX / 4;

/// Keywords that shape the documents generated.
const STRUCTURAL: &[&str] = &[
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "anyOf",
    "oneOf",
    "allOf",
    "pattern",
    "format",
    "$ref",
    "$defs",
    "definitions",
];

/// Keywords that say nothing about validity (annotations), accepted and ignored.
pub(super) const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$id",
    "$comment",
    "title",
    "description",
    "default",
    "examples",
    // OpenAPI's (and Pydantic's) tag of a `oneOf`: the branches' `const`s enforce it
    "discriminator",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// The whitespace a generated document may hold where JSON allows it (between tokens).
/// Whatever the choice, the schema's verdict is the same: whitespace is insignificant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Whitespace {
    /// At most one space in a row, no tabs or line breaks: a small model otherwise fills
    /// documents with runs of `\r`/`\t` that spend its token budget (the default).
    #[default]
    Compact,
    /// Any JSON whitespace, at most 16 bytes in a row (`"any_whitespace": true`).
    Any,
    /// None at all (vLLM's `"disable_any_whitespace": true`).
    None,
}

/// One declared property of an object schema.
#[derive(Debug, Clone)]
pub(crate) struct Prop {
    /// The name as it appears between the quotes of a JSON key (escaped).
    pub key: Vec<u8>,
    /// The value's node.
    pub node: usize,
    /// Whether `required` lists it.
    pub required: bool,
}

/// One compiled (sub-)schema.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    /// The JSON types allowed (bits above).
    pub kinds: u8,
    /// `enum` / `const`: the allowed values, serialized; the value must be one of them.
    pub literals: Option<Vec<Vec<u8>>>,
    /// Declared properties (at most [`MAX_PROPS`]), then required names that are not
    /// declared (valued by `extra`). Generation writes them in any order.
    pub props: Vec<Prop>,
    /// The schema of other properties; None when `additionalProperties` is false.
    pub extra: Option<usize>,
    /// The schemas of the first array items, in order (`prefixItems`, at most
    /// [`MAX_PREFIX`]); `items` is the schema of the items after them.
    pub prefix: Vec<usize>,
    /// The schema of array items.
    pub items: usize,
    /// `minItems`, `maxItems`.
    pub min_items: usize,
    pub max_items: Option<usize>,
    /// `uniqueItems` over literal items: the item node's literals in sets of equal ones.
    pub unique: Option<super::unique::Unique>,
    /// `minLength`, `maxLength` in code points.
    pub min_len: usize,
    pub max_len: Option<usize>,
    /// The fewest bytes of any document valid under this node ([`NEVER`] if none).
    pub min_bytes: usize,
    /// `anyOf`/`oneOf`: the branches and the bytes each may start with (which picks it);
    /// the node has no other keywords then ([`super::alts`]).
    pub alts: Vec<(usize, FirstBytes)>,
    /// `pattern` or `format`: the index of its [`Pattern`] in [`Grammar`]'s list, and the
    /// fewest bytes of a string it takes (without the quotes).
    pub pattern: Option<(u32, usize)>,
    /// `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` and `multipleOf` as the
    /// numbers they allow within the matcher's digits ([`super::numbers`]): integers, or
    /// decimals where the node takes numbers that are not whole; generated exactly.
    pub num_range: Option<NumSpec>,
}

impl Node {
    pub(super) fn any() -> Node {
        Node {
            kinds: ALL,
            literals: None,
            props: Vec::new(),
            extra: Some(ANY),
            prefix: Vec::new(),
            items: ANY,
            min_items: 0,
            max_items: None,
            unique: None,
            min_len: 0,
            max_len: None,
            min_bytes: NEVER,
            alts: Vec::new(),
            pattern: None,
            num_range: None,
        }
    }

    /// The node of array item `i` (from 0).
    pub fn item(&self, i: usize) -> usize {
        self.prefix.get(i).copied().unwrap_or(self.items)
    }

    /// Bytes of items `from..to` of an array, each with one byte beside it (a comma, or
    /// the closing bracket).
    pub fn items_cost(&self, nodes: &[Node], from: usize, to: usize) -> usize {
        if from >= to {
            return 0;
        }
        let each = |i: usize| nodes[self.item(i)].min_bytes.saturating_add(1);
        let in_prefix = to.min(self.prefix.len());
        let head: usize = (from..in_prefix).map(each).fold(0, usize::saturating_add);
        let rest = to.saturating_sub(from.max(self.prefix.len()));
        head.saturating_add(each(usize::MAX).saturating_mul(rest))
            .min(NEVER)
    }

    /// Bytes of one member `"key":value` for property `j` (no comma).
    pub fn member(&self, nodes: &[Node], j: usize) -> usize {
        let p = &self.props[j];
        (p.key.len() + 3).saturating_add(nodes[p.node].min_bytes)
    }

    /// Bytes of the members still owed when the properties in `written` (bit j =
    /// property j) are written: every other required one, each after a comma unless it is
    /// the first and `comma_first` is false; when none is owed and `need_one`, the cheapest
    /// single member (a comma was just written). `extra_key` is the shortest free key for
    /// another property (0 or 1 bytes).
    pub fn members_cost(
        &self,
        nodes: &[Node],
        written: u128,
        comma_first: bool,
        need_one: bool,
        extra_key: usize,
    ) -> usize {
        let mut cost = 0usize;
        let mut n = 0;
        for j in self.unwritten(written) {
            if self.props[j].required {
                cost = cost.saturating_add(self.member(nodes, j).saturating_add(1));
                n += 1;
            }
        }
        if n == 0 {
            if !need_one {
                return 0;
            }
            let mut best = NEVER;
            for j in self.unwritten(written) {
                best = best.min(self.member(nodes, j));
            }
            if let Some(e) = self.extra {
                best = best.min((extra_key + 3).saturating_add(nodes[e].min_bytes));
            }
            return best.saturating_add(usize::from(comma_first));
        }
        if comma_first { cost } else { cost - 1 }
    }

    /// The properties not yet written.
    pub fn unwritten(&self, written: u128) -> impl Iterator<Item = usize> + Clone + '_ {
        (0..self.props.len()).filter(move |j| written & (1u128 << j) == 0)
    }

    /// Whether a required property is not yet written.
    pub fn owes(&self, written: u128) -> bool {
        self.unwritten(written).any(|j| self.props[j].required)
    }
}

/// Most properties one object schema may declare (the matcher keeps a 128-bit set of
/// those written).
pub(crate) const MAX_PROPS: usize = 128;
/// The most `prefixItems` one array schema may list.
pub(crate) const MAX_PREFIX: usize = 64;

/// Index of the node that accepts any JSON value.
pub(crate) const ANY: usize = 0;

/// A compiled schema: what [`super::Matcher`] walks.
#[derive(Debug)]
pub struct Grammar {
    pub(crate) nodes: Vec<Node>,
    /// The whitespace documents may hold between their tokens.
    pub(crate) whitespace: Whitespace,
    /// The string patterns the nodes refer to ([`Node::pattern`]).
    pub(crate) patterns: Vec<Pattern>,
    pub(crate) root: usize,
    schema: Value,
    check: SchemaCheck,
}

impl Grammar {
    /// Compiles `schema`.
    ///
    /// # Errors
    /// [`Error::Schema`] naming the place and the reason: a keyword outside the supported
    /// subset (never silently ignored), a `$ref` outside the document, bounds no value
    /// meets, a schema that is not valid JSON Schema, or one no finite document satisfies.
    pub fn compile(schema: &Value) -> Result<Grammar> {
        Grammar::compile_within(schema, &CompileLimits::default())
    }

    /// Compiles `schema` within `limits` (its deadline and cancel flag), in one of the
    /// process's compilation slots ([`super::limits`]).
    ///
    /// # Errors
    /// As [`Grammar::compile`], and [`Error::Schema`] naming the keyword where a size
    /// bound or the deadline was passed; [`Error::Abandoned`] when cancelled, when the
    /// process is stopping, or when no slot came free before the deadline.
    pub fn compile_within(schema: &Value, limits: &CompileLimits) -> Result<Grammar> {
        let _slot = limits.slot()?;
        // patterns are checked against their bounds before anything is built from them
        // (also by the independent validator below, which compiles them again)
        super::pattern::check_sources(schema, limits)?;
        // `allOf` folded into its holders; the check below still reads the schema as written
        let reduced = super::all_of::reduce(schema)?;
        limits.check("", "`allOf`")?;
        let mut c = Compiler {
            limits,
            literals: (0, 0),
            doc: &reduced,
            nodes: vec![Node::any()],
            patterns: Vec::new(),
            pattern_ids: HashMap::new(),
            memo: HashMap::new(),
            resolving: Vec::new(),
            alt_sites: Vec::new(),
            locations: vec![None],
        };
        let root = c.node("")?;
        super::alts::settle(&mut c.nodes);
        c.check_one_of()?;
        let (mut nodes, patterns) = (c.nodes, c.patterns);
        // the independent validator must take the schema too (it also checks it against
        // the meta-schema)
        limits.check("", "the schema")?;
        let check = SchemaCheck::new(schema)?;
        limits.check("", "the schema")?;
        settle(&mut nodes);
        if nodes[root].min_bytes >= NEVER {
            return Err(Error::Schema {
                at: "#".into(),
                reason: "no finite document satisfies this schema within what the decoder \
                         writes (integers of up to 18 digits, other bounded numbers of up to \
                         15 significant digits)"
                    .into(),
            });
        }
        Ok(Grammar {
            nodes,
            whitespace: Whitespace::default(),
            patterns,
            root,
            schema: schema.clone(),
            check,
        })
    }

    /// The same grammar with `whitespace` between tokens ([`Whitespace::Compact`] by
    /// default).
    #[must_use]
    pub fn with_whitespace(mut self, whitespace: Whitespace) -> Grammar {
        self.whitespace = whitespace;
        self
    }

    /// The schema it was compiled from.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// Bytes of the shortest valid document.
    pub fn min_bytes(&self) -> usize {
        self.nodes[self.root].min_bytes
    }

    /// Checks `text` against the schema with the `jsonschema` crate (an implementation
    /// independent of the matcher): valid, or the reasons it is not.
    pub fn validate(&self, text: &str) -> Validation {
        self.check.validate(text)
    }
}

pub(super) struct Compiler<'a> {
    /// The compilation's deadline and cancel flag.
    pub(super) limits: &'a CompileLimits,
    /// `enum`/`const` values so far, and their bytes.
    pub(super) literals: (usize, usize),
    pub(super) doc: &'a Value,
    pub(super) nodes: Vec<Node>,
    pub(super) patterns: Vec<Pattern>,
    /// Each pattern's index and shortest string by its source (`pattern` or `format`,
    /// text), so one written many times is built once.
    pub(super) pattern_ids: HashMap<(&'static str, String), (u32, usize)>,
    /// JSON pointer → node, so refs and recursion share nodes.
    memo: HashMap<String, usize>,
    /// Pointers of `$ref`s being followed (a ref cycle with no schema in it is refused).
    resolving: Vec<String>,
    /// Each `anyOf`/`oneOf` branch.
    pub(super) alt_sites: Vec<AltSite>,
    /// Each node's location (None for [`ANY`], which stands for `true` anywhere).
    pub(super) locations: Vec<Option<String>>,
}

pub(crate) fn schema_err(at: &str, reason: impl Into<String>) -> Error {
    Error::Schema {
        at: format!("#{at}"),
        reason: reason.into(),
    }
}

fn escape_token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

impl Compiler<'_> {
    /// A node for the schema at `at`, set once its parts are compiled (they may refer
    /// back to it).
    pub(super) fn placeholder(&mut self, at: &str) -> Result<usize> {
        self.room_for_a_node(at)?;
        let id = self.nodes.len();
        self.nodes.push(Node::any());
        self.locations.push(Some(at.to_string()));
        self.memo.insert(at.to_string(), id);
        Ok(id)
    }

    /// The node for the schema at JSON pointer `at`.
    pub(super) fn node(&mut self, at: &str) -> Result<usize> {
        if let Some(id) = self.memo.get(at) {
            return Ok(*id);
        }
        let value = self
            .doc
            .pointer(at)
            .ok_or_else(|| schema_err(at, "nothing at this location"))?;
        let obj = match value {
            Value::Bool(true) => return Ok(ANY),
            Value::Bool(false) => {
                return Err(schema_err(
                    at,
                    "the schema `false` (no value allowed) is only supported as additionalProperties",
                ));
            }
            Value::Object(o) => o,
            _ => return Err(schema_err(at, "a schema must be an object or a boolean")),
        };
        for k in obj.keys() {
            if !STRUCTURAL.contains(&k.as_str()) && !ANNOTATIONS.contains(&k.as_str()) {
                return Err(schema_err(
                    at,
                    format!(
                        "unsupported keyword `{k}` (constrained decoding supports: {})",
                        STRUCTURAL.join(", ")
                    ),
                ));
            }
        }
        if let Some(r) = obj.get("$ref") {
            let others: Vec<&String> = obj
                .keys()
                .filter(|k| {
                    !ANNOTATIONS.contains(&k.as_str())
                        && !["$ref", "$defs", "definitions"].contains(&k.as_str())
                })
                .collect();
            if !others.is_empty() {
                return Err(schema_err(
                    at,
                    format!(
                        "`$ref` beside {others:?} is not supported; move them into the referenced schema"
                    ),
                ));
            }
            let target = r
                .as_str()
                .and_then(|s| s.strip_prefix('#'))
                .ok_or_else(|| {
                    schema_err(
                        at,
                        format!("`$ref` {r} must point inside this document (start with `#`)"),
                    )
                })?;
            let target = percent_decode(target);
            if self.resolving.contains(&target) || target == at {
                return Err(schema_err(at, "a `$ref` cycle that never reaches a schema"));
            }
            self.resolving.push(at.to_string());
            let id = self.node(&target);
            self.resolving.pop();
            let id = id?;
            self.memo.insert(at.to_string(), id);
            return Ok(id);
        }
        if let Some(id) = self.alternatives(obj, at, ANNOTATIONS)? {
            return Ok(id);
        }
        let id = self.placeholder(at)?;
        let mut n = Node::any();

        if let Some(t) = obj.get("type") {
            let names: Vec<&Value> = match t {
                Value::Array(a) => a.iter().collect(),
                one => vec![one],
            };
            n.kinds = 0;
            for name in names {
                n.kinds |= match name.as_str() {
                    Some("object") => OBJECT,
                    Some("array") => ARRAY,
                    Some("string") => STRING,
                    Some("number") => NUMBER,
                    Some("integer") => INTEGER,
                    Some("boolean") => BOOLEAN,
                    Some("null") => NULL,
                    _ => return Err(schema_err(at, format!("unknown type {name}"))),
                };
            }
        }
        let count = |key: &str| -> Result<Option<usize>> {
            match obj.get(key) {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    // past NEVER a count means "cannot be met": clamped there, so the
                    // byte arithmetic below never overflows
                    .map(|v| Some(usize::try_from(v).unwrap_or(NEVER).min(NEVER)))
                    .ok_or_else(|| schema_err(at, format!("`{key}` must be a whole number ≥ 0"))),
            }
        };
        n.min_items = count("minItems")?.unwrap_or(0);
        n.max_items = count("maxItems")?;
        n.min_len = count("minLength")?.unwrap_or(0);
        n.max_len = count("maxLength")?;
        if n.max_items.is_some_and(|m| m < n.min_items) {
            n.kinds &= !ARRAY;
        }
        if n.max_len.is_some_and(|m| m < n.min_len) {
            n.kinds &= !STRING;
        }
        n.pattern = self.pattern(obj, at, n.kinds)?;
        n.num_range = num_bounds(obj, at, n.kinds & NUMBER != 0)?;

        // properties, in the order the schema lists them
        let required: Vec<String> = match obj.get("required") {
            None => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| schema_err(at, "`required` must list strings"))
                })
                .collect::<Result<_>>()?,
            Some(_) => return Err(schema_err(at, "`required` must be an array")),
        };
        n.extra = match obj.get("additionalProperties") {
            None | Some(Value::Bool(true)) => Some(ANY),
            Some(Value::Bool(false)) => None,
            Some(_) => Some(self.node(&format!("{at}/additionalProperties"))?),
        };
        if let Some(p) = obj.get("properties") {
            let p = p
                .as_object()
                .ok_or_else(|| schema_err(at, "`properties` must be an object"))?;
            for name in p.keys() {
                let node = self.node(&format!("{at}/properties/{}", escape_token(name)))?;
                n.props.push(Prop {
                    key: key_bytes(name),
                    node,
                    required: required.contains(name),
                });
            }
        }
        for name in &required {
            let declared = obj
                .get("properties")
                .and_then(|p| p.get(name.as_str()))
                .is_some();
            if !declared {
                match n.extra {
                    Some(e) => n.props.push(Prop {
                        key: key_bytes(name),
                        node: e,
                        required: true,
                    }),
                    // an object is impossible; other types stay allowed
                    None => n.kinds &= !OBJECT,
                }
            }
        }
        if n.props.len() > MAX_PROPS {
            return Err(schema_err(
                at,
                format!(
                    "{} properties; constrained decoding supports at most {MAX_PROPS} per object",
                    n.props.len()
                ),
            ));
        }
        if let Some(p) = obj.get("prefixItems") {
            let p = p
                .as_array()
                .ok_or_else(|| schema_err(at, "`prefixItems` must be an array of schemas"))?;
            if p.len() > MAX_PREFIX {
                return Err(schema_err(
                    at,
                    format!(
                        "{} prefixItems; constrained decoding supports at most {MAX_PREFIX}",
                        p.len()
                    ),
                ));
            }
            for i in 0..p.len() {
                n.prefix.push(self.node(&format!("{at}/prefixItems/{i}"))?);
            }
        }
        n.items = match obj.get("items") {
            None => ANY,
            Some(Value::Array(_)) => {
                return Err(schema_err(
                    at,
                    "`items` as an array (draft 2019 tuples) is not supported; use `prefixItems`",
                ));
            }
            // no items past the prefix
            Some(Value::Bool(false)) => {
                let most = n.prefix.len();
                n.max_items = Some(n.max_items.map_or(most, |m| m.min(most)));
                if most < n.min_items {
                    n.kinds &= !ARRAY;
                }
                ANY
            }
            Some(_) => self.node(&format!("{at}/items"))?,
        };
        n.unique = super::unique::unique_items(obj, at, &n, &self.nodes)?;
        if let Some(c) = obj.get("const") {
            n.literals = Some(vec![c.clone()].into_iter().map(literal).collect());
        }
        if let Some(e) = obj.get("enum") {
            let e = e
                .as_array()
                .ok_or_else(|| schema_err(at, "`enum` must be an array"))?;
            let mut lits: Vec<Vec<u8>> = e.iter().cloned().map(literal).collect();
            if let Some(c) = &n.literals {
                lits.retain(|l| c.contains(l));
            }
            n.literals = Some(lits);
        }
        if let Some(lits) = &n.literals {
            self.count_literals(lits, at)?;
        }
        if let Some(lits) = n.literals.take() {
            // keep the values the other keywords allow: type, string lengths and numeric
            // bounds here, and everything (array and object keywords too) by the
            // jsonschema crate against this sub-schema where its refs resolve alone
            let whole = self.sub_validator(obj);
            let kept = lits
                .into_iter()
                .filter(|l| {
                    let v: Value = serde_json::from_slice(l).expect("serialized above");
                    literal_fits(&n, &v) && whole.as_ref().is_none_or(|w| w.is_valid(&v))
                })
                .collect();
            n.literals = Some(kept);
        }
        if let Some(spec) = n.num_range {
            // under a whole `multipleOf`, numbers are written as the integers allowed
            if spec.frac == 0 && n.kinds & NUMBER != 0 {
                n.kinds = (n.kinds & !NUMBER) | INTEGER;
            }
            if spec.shortest() >= NEVER {
                n.kinds &= !(NUMBER | INTEGER);
            }
        }
        self.nodes[id] = n;
        Ok(id)
    }
}

impl Compiler<'_> {
    /// A validator of the schema object `obj` alone, with the document's `$defs` and
    /// `definitions` beside it; None when one of its refs would point elsewhere (`#`, or
    /// another place of the document), or it does not build.
    pub(super) fn sub_validator(
        &self,
        obj: &serde_json::Map<String, Value>,
    ) -> Option<jsonschema::Validator> {
        fn refs_resolve_alone(v: &Value) -> bool {
            match v {
                Value::Object(o) => o.iter().all(|(k, v)| {
                    if k == "$ref" {
                        v.as_str().is_some_and(|r| {
                            r.starts_with("#/$defs/") || r.starts_with("#/definitions/")
                        })
                    } else {
                        refs_resolve_alone(v)
                    }
                }),
                Value::Array(a) => a.iter().all(refs_resolve_alone),
                _ => true,
            }
        }
        let mut sub = obj.clone();
        for key in ["$defs", "definitions"] {
            if let Some(d) = self.doc.get(key) {
                sub.insert(key.to_string(), d.clone());
            }
        }
        let sub = Value::Object(sub);
        if !refs_resolve_alone(&sub) {
            return None;
        }
        validator(&sub).ok()
    }
}

/// Decodes `%XX` escapes in a `$ref` fragment (its `~` escapes stay for
/// [`Value::pointer`]).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The bytes between a key's quotes.
fn key_bytes(name: &str) -> Vec<u8> {
    let s = serde_json::to_string(name).expect("strings serialize");
    s.as_bytes()[1..s.len() - 1].to_vec()
}

fn literal(v: Value) -> Vec<u8> {
    serde_json::to_vec(&v).expect("values serialize")
}

fn literal_fits(n: &Node, v: &Value) -> bool {
    let kind = match v {
        Value::Null => NULL,
        Value::Bool(_) => BOOLEAN,
        Value::Number(x) => {
            let whole = x.is_i64() || x.is_u64() || x.as_f64().is_some_and(|f| f.fract() == 0.0);
            if let Some(spec) = n.num_range {
                // exact: a value with more fraction digits than the matcher writes is left out
                if !exact_value(x, spec).is_some_and(|v| spec.meets(v, v)) {
                    return false;
                }
            }
            if whole { NUMBER | INTEGER } else { NUMBER }
        }
        Value::String(s) => {
            let c = s.chars().count();
            if c < n.min_len || n.max_len.is_some_and(|m| c > m) {
                return false;
            }
            STRING
        }
        Value::Array(_) => ARRAY,
        Value::Object(_) => OBJECT,
    };
    n.kinds & kind != 0
}

/// Computes every node's shortest document: start from "none", then relax until nothing
/// changes (recursive schemas settle because lengths only shrink).
fn settle(nodes: &mut [Node]) {
    loop {
        let mut changed = false;
        for i in 0..nodes.len() {
            let m = shortest(nodes, i);
            if m < nodes[i].min_bytes {
                nodes[i].min_bytes = m;
                changed = true;
            }
        }
        if !changed {
            return;
        }
    }
}

fn shortest(nodes: &[Node], i: usize) -> usize {
    let n = &nodes[i];
    if !n.alts.is_empty() {
        return n
            .alts
            .iter()
            .map(|(b, _)| nodes[*b].min_bytes)
            .min()
            .unwrap_or(NEVER);
    }
    if let Some(l) = &n.literals {
        return l.iter().map(Vec::len).min().unwrap_or(NEVER);
    }
    let mut best = NEVER;
    if n.kinds & OBJECT != 0 {
        best = best.min(2usize.saturating_add(n.members_cost(nodes, 0, false, false, 0)));
    }
    if n.kinds & ARRAY != 0 {
        // the items the array must hold, with a comma between them
        let items = match &n.unique {
            Some(u) => u.cost(0, n.min_items),
            None => n.items_cost(nodes, 0, n.min_items),
        }
        .saturating_sub(1);
        best = best.min(items.saturating_add(2).min(NEVER));
    }
    if n.kinds & STRING != 0 {
        let body = n.pattern.map_or(n.min_len, |(_, shortest)| shortest);
        best = best.min(body.saturating_add(2));
    }
    if n.kinds & (NUMBER | INTEGER) != 0 {
        best = best.min(n.num_range.map_or(1, |spec| spec.shortest()));
    }
    if n.kinds & (BOOLEAN | NULL) != 0 {
        best = best.min(4);
    }
    best.min(NEVER)
}
