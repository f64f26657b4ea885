//! `meshnode proof …`: Groth16 verification from snarkjs JSON files.
//!
//! Output is JSON lines on stdout. Exit codes: 0 every proof valid, 1 a proof is invalid
//! (the pairing check failed), 2 a file is malformed (unreadable, not JSON, a value not
//! canonical or not on the curve, the wrong number of public inputs) or the usage is bad.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use fleetmesh_prover::snarkjs::{check_public_count, parse_proof, parse_public, parse_vk};
use fleetmesh_prover::{Bn254, batch_verify_grouped_on, verify};
use fleetmesh_prover::{PreparedVk, VerifyingKey};
use serde_json::{Value, json};

use crate::cli::{Outcome, ProofCommand};

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

/// `meshnode proof verify|batch-verify|prove|setup`.
pub fn run(cmd: ProofCommand) -> anyhow::Result<Outcome> {
    match cmd {
        ProofCommand::Verify { vk, proof, public } => verify_one(&vk, &proof, &public),
        ProofCommand::BatchVerify {
            vk,
            manifest,
            dirs,
            backend,
        } => batch(vk.as_deref(), &dirs, manifest.as_deref(), backend),
        ProofCommand::Prove {
            zkey,
            wtns,
            wasm,
            input,
            proof,
            public,
            backend,
        } => {
            let witness = match (wtns, wasm, input) {
                (Some(w), _, _) => WitnessSource::Wtns(w),
                (None, Some(wasm), Some(input)) => WitnessSource::Wasm { wasm, input },
                _ => anyhow::bail!("give --wtns W.wtns, or --wasm C.wasm with --input input.json"),
            };
            prove_cmd(&zkey, &witness, &proof, &public, backend)
        }
        ProofCommand::Setup { r1cs, zkey, vk } => setup_cmd(&r1cs, &zkey, vk.as_deref()),
    }
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
    backend: fleetmesh_prover::BackendChoice,
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
    let (backend, why) =
        fleetmesh_kernels::route::select(backend, fleetmesh_kernels::probe::probe)?;
    eprintln!("meshnode: backend {} ({why})", backend.describe());
    let verdicts = batch_verify_grouped_on(backend.as_ref(), &keys, &items)?;
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

/// Where `meshnode proof prove` gets its witness.
pub enum WitnessSource {
    /// A `.wtns` file.
    Wtns(PathBuf),
    /// circom's witness calculator and an input.json.
    Wasm {
        /// The calculator.
        wasm: PathBuf,
        /// The input signals.
        input: PathBuf,
    },
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn malformed(e: String) -> anyhow::Result<Outcome> {
    println!("{}", json!({"ok": false, "error": e}));
    eprintln!("meshnode: malformed input: {e}");
    Ok(Outcome::Malformed)
}

/// Computes a witness from either source, with the prover's errors sorted into "the input
/// does not satisfy the circuit" (Ok(Err)) and "malformed" (Err).
fn load_witness(src: &WitnessSource) -> Result<Result<Vec<fleetmesh_prover::Fr>, String>, String> {
    match src {
        WitnessSource::Wtns(p) => fleetmesh_prover::wtns::from_bytes(&read_bytes(p)?)
            .map(Ok)
            .map_err(|e| format!("{}: {e}", p.display())),
        WitnessSource::Wasm { wasm, input } => {
            let calc = fleetmesh_prover::witness::WitnessCalculator::new(&read_bytes(wasm)?)
                .map_err(|e| format!("{}: {e}", wasm.display()))?;
            let input_json = read_json(input)?;
            match calc.calculate(&input_json) {
                Ok(w) => Ok(Ok(w)),
                // A failed assert is a negative answer about this input, not bad files.
                Err(e @ fleetmesh_prover::Error::Witness(_)) => Ok(Err(e.to_string())),
                Err(e) => Err(format!("{}: {e}", input.display())),
            }
        }
    }
}

/// `meshnode proof prove`.
pub fn prove_cmd(
    zkey: &Path,
    witness: &WitnessSource,
    proof_out: &Path,
    public_out: &Path,
    backend: fleetmesh_prover::BackendChoice,
) -> anyhow::Result<Outcome> {
    use fleetmesh_prover::snarkjs::{proof_to_json, public_to_json};
    let t = std::time::Instant::now();
    let (backend, why) =
        fleetmesh_kernels::route::select(backend, fleetmesh_kernels::probe::probe)?;
    eprintln!("meshnode: backend {} ({why})", backend.describe());
    let progress = crate::cli::progress::Progress::new("meshnode: prove");
    progress.say(&format!("meshnode: reading {}", zkey.display()));
    let pk = match read_bytes(zkey).and_then(|b| {
        fleetmesh_prover::ProvingKey::from_bytes(&b).map_err(|e| format!("{}: {e}", zkey.display()))
    }) {
        Ok(pk) => pk,
        Err(e) => return malformed(e),
    };
    let load_ms = t.elapsed().as_millis();
    progress.say(&format!(
        "meshnode: key read: {} wires, {} public, domain 2^{} ({load_ms} ms); computing the witness",
        pk.n_vars,
        pk.n_public,
        pk.domain_size.trailing_zeros()
    ));
    let t_w = std::time::Instant::now();
    let w = match load_witness(witness) {
        Ok(Ok(w)) => w,
        Ok(Err(e)) => {
            println!("{}", json!({"ok": false, "reason": e}));
            return Ok(Outcome::Negative);
        }
        Err(e) => return malformed(e),
    };
    let witness_ms = t_w.elapsed().as_millis();
    progress.say("meshnode: proving");
    let t_p = std::time::Instant::now();
    let proven = match fleetmesh_prover::prove(&pk, &w, backend.as_ref()) {
        Ok(p) => p,
        Err(e @ fleetmesh_prover::Error::Witness(_)) => {
            println!("{}", json!({"ok": false, "reason": e.to_string()}));
            return Ok(Outcome::Negative);
        }
        Err(e) => return Err(e.into()),
    };
    let prove_ms = t_p.elapsed().as_millis();
    progress.finish(&format!("meshnode: proved in {prove_ms} ms"));
    crate::node::replace_file(
        proof_out,
        &serde_json::to_vec_pretty(&proof_to_json(&proven.proof))?,
        false,
    )?;
    crate::node::replace_file(
        public_out,
        &serde_json::to_vec_pretty(&public_to_json(&proven.public))?,
        false,
    )?;
    println!(
        "{}",
        json!({
            "ok": true,
            "proof": proof_out,
            "public": public_out,
            "backend": backend.describe(),
            "ms": {"key": load_ms, "witness": witness_ms, "prove": prove_ms},
        })
    );
    Ok(Outcome::Ok)
}

/// `meshnode proof setup` (development only).
pub fn setup_cmd(r1cs: &Path, zkey: &Path, vk: Option<&Path>) -> anyhow::Result<Outcome> {
    let parsed = match read_bytes(r1cs).and_then(|b| {
        fleetmesh_prover::R1cs::from_bytes(&b).map_err(|e| format!("{}: {e}", r1cs.display()))
    }) {
        Ok(r) => r,
        Err(e) => return malformed(e),
    };
    eprintln!(
        "meshnode: WARNING: development setup — one party's randomness, no ceremony; \
         whoever learns it can forge proofs. Never use this key in production."
    );
    eprintln!(
        "meshnode: setup for {} constraints, {} wires",
        parsed.constraints.len(),
        parsed.n_wires
    );
    let t = std::time::Instant::now();
    let pk = match fleetmesh_prover::setup::setup(&parsed) {
        Ok(pk) => pk,
        Err(e @ fleetmesh_prover::Error::Setup(_)) => return malformed(e.to_string()),
        Err(e) => return Err(e.into()),
    };
    crate::node::replace_file(zkey, &pk.to_bytes(), false)?;
    if let Some(vk) = vk {
        let doc = fleetmesh_prover::snarkjs::vk_to_json(&pk.vk);
        crate::node::replace_file(vk, &serde_json::to_vec_pretty(&doc)?, false)?;
    }
    println!(
        "{}",
        json!({
            "ok": true,
            "zkey": zkey,
            "vk": vk,
            "constraints": parsed.constraints.len(),
            "wires": pk.n_vars,
            "public": pk.n_public,
            "domain_size": pk.domain_size,
            "ms": t.elapsed().as_millis(),
            "insecure": "development setup: not from a ceremony",
        })
    );
    Ok(Outcome::Ok)
}
