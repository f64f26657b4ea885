//! `meshnode manifest crds`: the five manifest kinds (fleetmesh.org/v1alpha1) as Kubernetes
//! CustomResourceDefinitions (apiextensions.k8s.io/v1), their `openAPIV3Schema` derived
//! from the protocol's JSON Schemas.
//!
//! Kubernetes takes a structural subset of OpenAPI 3.0, so the derivation resolves every
//! `$ref`, turns `const` into a one-value `enum`, a 2020-12 `exclusiveMinimum: N` into
//! `minimum: N` with `exclusiveMinimum: true`, a `["T", "null"]` type into `T` with
//! `nullable`, a `uniqueItems` list of scalars into `x-kubernetes-list-type: set`; it gives
//! every node a type (or `x-kubernetes-preserve-unknown-fields`), and drops what Kubernetes
//! cannot say: conditionals (`if`/`then`/`else`, `allOf`, `not`), `propertyNames`,
//! `prefixItems`, `additionalProperties` beside `properties` (the API server prunes unknown
//! fields instead), formats it does not know. The CRDs are therefore at most as strict as
//! the schemas; the node validates every manifest against the full schema itself.

use anyhow::Context as _;
use serde_json::{Map, Value, json};

/// The API group.
const GROUP: &str = "fleetmesh.org";
/// The version.
const VERSION: &str = "v1alpha1";
/// The manifest kinds, in the order printed.
pub const KINDS: [&str; 5] = [
    "MeshNode",
    "Peering",
    "GrantPolicy",
    "ComputeProvider",
    "InferenceRouter",
];
/// Formats Kubernetes validates; others are dropped.
const K8S_FORMATS: &[&str] = &[
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "uuid",
    "byte",
    "date",
    "date-time",
    "duration",
    "password",
];

/// The embedded schema file `path` (relative to `schemas/json/`), parsed: `common.json`,
/// which has no key of its own in the set.
fn file(path: &str) -> anyhow::Result<Value> {
    let text = fleetmesh_schemas::SchemaSet::embedded_files()
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, t)| *t)
        .with_context(|| format!("no embedded schema {path}"))?;
    serde_json::from_str(text).with_context(|| format!("schema {path}"))
}

/// Derives Kubernetes' structural form of one JSON Schema node.
struct Deriver {
    common: Value,
    local: Value,
}

impl Deriver {
    /// The schema a `$ref` names: `common.json#/$defs/N` or this file's `#/$defs/N`.
    fn resolve(&self, reference: &str) -> anyhow::Result<&Value> {
        let (doc, pointer) = match reference.split_once('#') {
            Some((uri, p)) if uri.ends_with("/common.json") => (&self.common, p),
            Some(("", p)) => (&self.local, p),
            _ => anyhow::bail!("$ref {reference} is outside the schema set"),
        };
        doc.pointer(pointer)
            .with_context(|| format!("$ref {reference} names nothing"))
    }

    fn derive(&self, schema: &Value, depth: usize) -> anyhow::Result<Value> {
        anyhow::ensure!(depth < 64, "the schema nests deeper than 64 levels");
        let Some(obj) = schema.as_object() else {
            // `true`: anything
            return Ok(json!({"x-kubernetes-preserve-unknown-fields": true}));
        };
        // a $ref's target, with the siblings (a description) over it
        if let Some(reference) = obj.get("$ref").and_then(Value::as_str) {
            let mut merged = self
                .resolve(reference)?
                .as_object()
                .cloned()
                .unwrap_or_default();
            for (k, v) in obj {
                if k != "$ref" {
                    merged.insert(k.clone(), v.clone());
                }
            }
            return self.derive(&Value::Object(merged), depth + 1);
        }
        let mut out = Map::new();
        for (k, v) in obj {
            match k.as_str() {
                "type" => match v {
                    Value::Array(types) => {
                        let real: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
                        if let [one] = real.as_slice() {
                            out.insert("type".into(), (*one).clone());
                        }
                        if real.len() < types.len() {
                            out.insert("nullable".into(), Value::Bool(true));
                        }
                    }
                    t => {
                        out.insert("type".into(), t.clone());
                    }
                },
                "description" | "enum" | "default" | "minimum" | "maximum" | "minLength"
                | "maxLength" | "pattern" | "minItems" | "maxItems" | "minProperties"
                | "maxProperties" | "required" => {
                    out.insert(k.clone(), v.clone());
                }
                "const" => {
                    out.insert("enum".into(), json!([v]));
                }
                "exclusiveMinimum" | "exclusiveMaximum" if v.is_number() => {
                    let bound = if k == "exclusiveMinimum" {
                        "minimum"
                    } else {
                        "maximum"
                    };
                    out.insert(bound.into(), v.clone());
                    out.insert(k.clone(), Value::Bool(true));
                }
                "format" if v.as_str().is_some_and(|f| K8S_FORMATS.contains(&f)) => {
                    out.insert(k.clone(), v.clone());
                }
                "properties" => {
                    let mut props = Map::new();
                    for (name, s) in v.as_object().into_iter().flatten() {
                        props.insert(name.clone(), self.derive(s, depth + 1)?);
                    }
                    out.insert(k.clone(), Value::Object(props));
                }
                "items" => {
                    out.insert(k.clone(), self.derive(v, depth + 1)?);
                }
                "additionalProperties" if !obj.contains_key("properties") && v != false => {
                    out.insert(k.clone(), self.derive(v, depth + 1)?);
                }
                _ => {} // what Kubernetes cannot say (see the module docs)
            }
        }
        if obj.get("uniqueItems") == Some(&Value::Bool(true))
            && out["items"]["type"]
                .as_str()
                .is_some_and(|t| t != "object" && t != "array")
        {
            out.insert("x-kubernetes-list-type".into(), json!("set"));
        }
        if !out.contains_key("type") {
            let inferred =
                if out.contains_key("properties") || out.contains_key("additionalProperties") {
                    Some("object")
                } else if out.contains_key("items") {
                    Some("array")
                } else {
                    match out.get("enum").and_then(|e| e.get(0)) {
                        Some(Value::String(_)) => Some("string"),
                        Some(Value::Bool(_)) => Some("boolean"),
                        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Some("integer"),
                        Some(Value::Number(_)) => Some("number"),
                        _ => None,
                    }
                };
            match inferred {
                Some(t) => {
                    out.insert("type".into(), json!(t));
                }
                None => {
                    out.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
                }
            }
        }
        Ok(Value::Object(out))
    }
}

/// `kind`'s plural resource name (`grantpolicies`).
fn plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    match lower.strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None => format!("{lower}s"),
    }
}

/// The CustomResourceDefinition of manifest `kind`.
pub fn crd(kind: &str) -> anyhow::Result<Value> {
    let local = fleetmesh_schemas::SchemaSet::embedded()
        .schema(&fleetmesh_schemas::SchemaKey::Manifest(kind.to_owned()))
        .with_context(|| format!("no manifest schema {kind}"))?
        .clone();
    let d = Deriver {
        common: file("common.json")?,
        local: local.clone(),
    };
    let mut properties = Map::new();
    properties.insert("apiVersion".into(), json!({"type": "string"}));
    properties.insert("kind".into(), json!({"type": "string"}));
    // Kubernetes owns metadata's schema
    properties.insert("metadata".into(), json!({"type": "object"}));
    for part in ["spec", "status"] {
        if let Some(s) = local["properties"].get(part) {
            properties.insert(part.into(), d.derive(s, 0)?);
        }
    }
    let mut schema = json!({"type": "object", "properties": properties, "required": ["spec"]});
    if let Some(text) = local["description"].as_str() {
        schema["description"] = json!(text);
    }
    let plural = plural(kind);
    let mut version = json!({
        "name": VERSION, "served": true, "storage": true,
        "schema": {"openAPIV3Schema": schema},
    });
    if local["properties"].get("status").is_some() {
        version["subresources"] = json!({"status": {}});
    }
    Ok(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": kind.to_ascii_lowercase(),
                "categories": ["fleetmesh"],
            },
            "scope": "Namespaced",
            "versions": [version],
        },
    }))
}

/// All five, as one YAML stream (`---` between documents).
pub fn render_all() -> anyhow::Result<String> {
    let mut out = String::new();
    for kind in KINDS {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&crd(kind)?).context("writing YAML")?);
    }
    Ok(out)
}
