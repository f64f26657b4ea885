//! `meshnode proof …`: Groth16 verification from snarkjs JSON files.
//!
//! Output is JSON lines on stdout. Exit codes: 0 every proof valid, 1 a proof is invalid
//! (the pairing check failed), 2 a file is malformed (unreadable, not JSON, a value not
//! canonical or not on the curve, the wrong number of public inputs) or the usage is bad.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use fleetmesh_prover::snarkjs::{check_public_count, parse_proof, parse_public, parse_vk};
use fleetmesh_prover::{Bn254, batch_verify_grouped, verify};
use fleetmesh_prover::{PreparedVk, VerifyingKey};
use serde_json::{Value, json};

use crate::Outcome;

fn read_json(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))
}

fn load_vk(path: &Path) -> Result<VerifyingKey<Bn254>, String> {
    parse_vk(&read_json(path)?).map_err(|e| format!("{}: {e}", path.display()))
}

fn load_item(proof: &Path, public: &Path) -> Result<fleetmesh_prover::verify::Item, String> {
    let p = parse_proof(&read_json(proof)?).map_err(|e| format!("{}: {e}", proof.display()))?;
    let x = parse_public(&read_json(public)?).map_err(|e| format!("{}: {e}", public.display()))?;
    Ok((p, x))
}

/// `meshnode proof verify`.
pub fn verify_one(vk: &Path, proof: &Path, public: &Path) -> anyhow::Result<Outcome> {
    let loaded = load_vk(vk).and_then(|vk| {
        let (p, x) = load_item(proof, public)?;
        check_public_count(&vk, &x).map_err(|e| format!("{}: {e}", public.display()))?;
        Ok((vk, p, x))
    });
    let (vk, p, x) = match loaded {
        Ok(v) => v,
        Err(e) => {
            println!("{}", json!({"valid": false, "error": e}));
            eprintln!("meshnode: malformed input: {e}");
            return Ok(Outcome::Malformed);
        }
    };
    let valid = verify(&PreparedVk::new(&vk), &p, &x)?;
    if valid {
        println!("{}", json!({"valid": true}));
        Ok(Outcome::Ok)
    } else {
        println!(
            "{}",
            json!({"valid": false, "reason": "the pairing check failed"})
        );
        Ok(Outcome::Negative)
    }
}

/// One entry of a batch: which key, which files.
struct Entry {
    vk: PathBuf,
    proof: PathBuf,
    public: PathBuf,
}

fn entries_from_manifest(path: &Path) -> anyhow::Result<Vec<Entry>> {
    let doc = read_json(path).map_err(anyhow::Error::msg)?;
    let base = path.parent().unwrap_or(Path::new("."));
    let items = doc
        .get("items")
        .and_then(Value::as_array)
        .with_context(|| format!("{}: needs {{\"items\": [...]}}", path.display()))?;
    items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let field = |k: &str| {
                it.get(k)
                    .and_then(Value::as_str)
                    .map(|p| base.join(p))
                    .with_context(|| format!("{}: items[{i}].{k} must be a path", path.display()))
            };
            Ok(Entry {
                vk: field("vk")?,
                proof: field("proof")?,
                public: field("public")?,
            })
        })
        .collect()
}

/// `meshnode proof batch-verify`.
pub fn batch(
    vk: Option<&Path>,
    dirs: &[PathBuf],
    manifest: Option<&Path>,
) -> anyhow::Result<Outcome> {
    let entries: Vec<Entry> = match (vk, manifest) {
        (Some(vk), None) if !dirs.is_empty() => dirs
            .iter()
            .map(|d| Entry {
                vk: vk.to_path_buf(),
                proof: d.join("proof.json"),
                public: d.join("public.json"),
            })
            .collect(),
        (None, Some(m)) if dirs.is_empty() => entries_from_manifest(m)?,
        _ => anyhow::bail!("give --vk VK.json with proof directories, or --manifest BATCH.json"),
    };
    // Each key is read and prepared once.
    let mut keys: Vec<PreparedVk> = Vec::new();
    let mut key_index: HashMap<PathBuf, Result<usize, String>> = HashMap::new();
    let mut items: Vec<(usize, fleetmesh_prover::verify::Item)> = Vec::new();
    let mut positions: Vec<Option<usize>> = Vec::with_capacity(entries.len());
    let mut errors: HashMap<usize, String> = HashMap::new();
    for (i, e) in entries.iter().enumerate() {
        let k = key_index
            .entry(e.vk.clone())
            .or_insert_with(|| {
                load_vk(&e.vk).map(|vk| {
                    keys.push(PreparedVk::new(&vk));
                    keys.len() - 1
                })
            })
            .clone();
        let loaded = k.and_then(|k| {
            let item = load_item(&e.proof, &e.public)?;
            check_public_count(keys[k].vk(), &item.1)
                .map_err(|err| format!("{}: {err}", e.public.display()))?;
            Ok((k, item))
        });
        match loaded {
            Ok(item) => {
                positions.push(Some(items.len()));
                items.push(item);
            }
            Err(err) => {
                positions.push(None);
                errors.insert(i, err);
            }
        }
    }
    let verdicts = batch_verify_grouped(&keys, &items)?;
    let (mut valid, mut invalid) = (0, 0);
    for (i, pos) in positions.iter().enumerate() {
        let line = match pos {
            Some(p) if verdicts[*p] => {
                valid += 1;
                json!({"index": i, "valid": true, "reason": null})
            }
            Some(_) => {
                invalid += 1;
                json!({"index": i, "valid": false, "reason": "the pairing check failed"})
            }
            None => {
                json!({"index": i, "valid": false, "reason": format!("malformed: {}", errors[&i])})
            }
        };
        println!("{line}");
    }
    let malformed = errors.len();
    println!(
        "{}",
        json!({"total": entries.len(), "valid": valid, "invalid": invalid, "malformed": malformed, "keys": keys.len()})
    );
    Ok(if malformed > 0 {
        Outcome::Malformed
    } else if invalid > 0 {
        Outcome::Negative
    } else {
        Outcome::Ok
    })
}
