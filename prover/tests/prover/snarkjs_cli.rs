//! Interop with snarkjs itself: our proofs checked by `snarkjs groth16 verify`, and
//! snarkjs proving with a `.zkey` our setup wrote. Skipped (with a message) only where
//! `node` is absent and `CI` is not `true`; snarkjs is installed by the fixture script.

use std::path::{Path, PathBuf};
use std::process::Command;

use fleetmesh_kernels::ops::Cpu;
use fleetmesh_prover::setup::setup;
use fleetmesh_prover::snarkjs::{
    parse_proof, parse_public, proof_to_json, public_to_json, vk_to_json,
};
use fleetmesh_prover::{PreparedVk, ProvingKey, R1cs, prove, verify, wtns};

use crate::{fixture, fixture_dir};

/// The snarkjs CLI, installing it with `gen.sh tools` when node is here but snarkjs is not.
fn snarkjs() -> Option<PathBuf> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        assert!(
            !ci,
            "CI=true but node is not installed (.ci/test installs it)"
        );
        eprintln!("SKIPPED snarkjs interop: node is not installed");
        return None;
    }
    let dir = std::env::var_os("FLEETMESH_NPM_DIR")
        .map_or_else(|| dirs_home().join(".cache/fleetmesh/npm"), PathBuf::from);
    let bin = dir.join("node_modules/.bin/snarkjs");
    if !bin.exists() {
        let st = Command::new(fixture_dir().join("gen.sh"))
            .arg("tools")
            .status()
            .expect("run gen.sh tools");
        assert!(st.success(), "gen.sh tools failed to install snarkjs");
    }
    assert!(bin.exists(), "{} missing after gen.sh tools", bin.display());
    Some(bin)
}

fn dirs_home() -> PathBuf {
    PathBuf::from(std::env::var_os("HOME").expect("HOME"))
}

fn write_json(dir: &Path, name: &str, v: &serde_json::Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec_pretty(v).unwrap()).unwrap();
    p
}

/// `snarkjs groth16 verify`; true when it prints OK and exits 0.
fn snarkjs_verify(bin: &Path, vk: &Path, public: &Path, proof: &Path) -> bool {
    let out = Command::new(bin)
        .args(["groth16", "verify"])
        .args([vk, public, proof])
        .output()
        .expect("run snarkjs");
    let text = String::from_utf8_lossy(&out.stdout);
    out.status.success() && text.contains("OK")
}

/// Runs `snarkjs COMMAND… FILES…`, failing the test with snarkjs's stderr if it fails.
fn snarkjs_ok(bin: &Path, command: &[&str], files: &[&Path]) {
    let out = Command::new(bin)
        .args(command)
        .args(files)
        .output()
        .expect("run snarkjs");
    assert!(
        out.status.success(),
        "snarkjs {command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn read(p: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

#[test]
fn snarkjs_accepts_our_proofs_and_proves_with_our_zkey() {
    let Some(bin) = snarkjs() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let vk_path = fixture_dir().join("tiny_vk.json");

    // 1. our prover on snarkjs's zkey
    let pk = ProvingKey::from_bytes(&fixture("tiny.zkey")).unwrap();
    let w = wtns::from_bytes(&fixture("tiny.wtns")).unwrap();
    let p = prove(&pk, &w, &Cpu).unwrap();
    let proof = write_json(d, "proof.json", &proof_to_json(&p.proof));
    let public = write_json(d, "public.json", &public_to_json(&p.public));
    assert!(
        snarkjs_verify(&bin, &vk_path, &public, &proof),
        "snarkjs rejected our proof"
    );
    // snarkjs must reject it with a wrong public value: the check can fail
    let mut wrong = p.public.clone();
    wrong[1] += fleetmesh_prover::Fr::from(1u64);
    let wrong = write_json(d, "wrong.json", &public_to_json(&wrong));
    assert!(!snarkjs_verify(&bin, &vk_path, &wrong, &proof));
    // a fresh proof made on the wgpu backend (GPU NTT and G1 MSM) verifies under snarkjs
    match fleetmesh_kernels::WgpuBackend::new(0) {
        Ok(gpu) => {
            let pg = prove(&pk, &w, &gpu).unwrap();
            let proof = write_json(d, "gpu_proof.json", &proof_to_json(&pg.proof));
            let public = write_json(d, "gpu_public.json", &public_to_json(&pg.public));
            assert!(
                snarkjs_verify(&bin, &vk_path, &public, &proof),
                "snarkjs rejected a proof made on wgpu"
            );
        }
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but the wgpu backend cannot run: {e}"
            );
            eprintln!("SKIPPED snarkjs check of a wgpu proof: {e}");
        }
    }

    // 2. our setup's zkey: our proof verifies under snarkjs with our exported vk, and
    //    snarkjs's prover works with the key we wrote.
    let r1cs = R1cs::from_bytes(&fixture("tiny.r1cs")).unwrap();
    let ours = setup(&r1cs).unwrap();
    let zkey = d.join("ours.zkey");
    std::fs::write(&zkey, ours.to_bytes()).unwrap();
    let our_vk = write_json(d, "our_vk.json", &vk_to_json(&ours.vk));
    let p2 = prove(&ours, &w, &Cpu).unwrap();
    let proof2 = write_json(d, "proof2.json", &proof_to_json(&p2.proof));
    let public2 = write_json(d, "public2.json", &public_to_json(&p2.public));
    assert!(snarkjs_verify(&bin, &our_vk, &public2, &proof2));
    // snarkjs exports the same vk from our zkey
    let exported = d.join("exported_vk.json");
    snarkjs_ok(
        &bin,
        &["zkey", "export", "verificationkey"],
        &[&zkey, &exported],
    );
    assert_eq!(
        fleetmesh_prover::snarkjs::parse_vk(&read(&exported)).unwrap(),
        ours.vk
    );
    // snarkjs proves with our zkey; we verify its proof
    let (sp, spub) = (d.join("sp.json"), d.join("spub.json"));
    let wtns = fixture_dir().join("tiny.wtns");
    snarkjs_ok(&bin, &["groth16", "prove"], &[&zkey, &wtns, &sp, &spub]);
    let their_proof = parse_proof(&read(&sp)).unwrap();
    let their_public = parse_public(&read(&spub)).unwrap();
    assert!(verify(&PreparedVk::new(&ours.vk), &their_proof, &their_public).unwrap());
}
