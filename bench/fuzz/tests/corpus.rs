//! The fuzz harnesses as plain tests (no coverage, no libFuzzer): every committed corpus
//! file through its target's harness, then seeded mutations of them, a bounded number per
//! target (`FLEETMESH_FUZZ_MUTATIONS`, default 200; `FLEETMESH_FUZZ_SEED` picks another
//! set). A failure names the target and the input, written under the system's temporary
//! directory for the `replay` test below.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use fleetmesh_fuzz::{Harness, Rng, TARGETS, mutate};

fn corpus_dir(target: &str) -> PathBuf {
    std::path::PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    )
    .join("corpus")
    .join(target)
}

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

/// Runs `h` on `input`; the panic's message when it panics.
fn run(h: Harness, input: &[u8]) -> Option<String> {
    catch_unwind(AssertUnwindSafe(|| h(input))).err().map(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "a panic".into())
    })
}

/// The mutations' seed: `FLEETMESH_FUZZ_SEED`, else a fixed one (so a run repeats).
fn seed() -> u64 {
    std::env::var("FLEETMESH_FUZZ_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0xf1ee_7e5d)
}

fn mutations() -> usize {
    std::env::var("FLEETMESH_FUZZ_MUTATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200)
}

#[test]
fn every_target_has_a_seed_corpus() {
    for (name, _) in TARGETS {
        assert!(
            !corpus(name).is_empty(),
            "bench/fuzz/corpus/{name}/ holds no seed"
        );
    }
    let dirs: Vec<String> = std::fs::read_dir(
        std::path::PathBuf::from(
            std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
        )
        .join("corpus"),
    )
    .unwrap()
    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
    .collect();
    for d in dirs {
        assert!(
            fleetmesh_fuzz::harness(&d).is_some(),
            "bench/fuzz/corpus/{d}/ belongs to no target"
        );
    }
}

#[test]
fn corpora_and_their_mutations_pass_every_harness() {
    let n = mutations();
    let mut failures = Vec::new();
    for (target, h) in TARGETS {
        let seeds = corpus(target);
        for (file, data) in &seeds {
            if let Some(why) = run(*h, data) {
                failures.push(format!("{target}: corpus file {file}: {why}"));
            }
        }
        let mut rng = Rng::new(seed() ^ target.len() as u64);
        for i in 0..n {
            let (_, a) = &seeds[rng.below(seeds.len())];
            let (_, b) = &seeds[rng.below(seeds.len())];
            let input = mutate(&mut rng, a, b);
            if let Some(why) = run(*h, &input) {
                let out = std::env::temp_dir().join(format!("fleetmesh-fuzz-{target}-{i}"));
                std::fs::write(&out, &input).unwrap();
                failures.push(format!(
                    "{target}: mutation {i} of seed {} (written to {}): {why}",
                    seed(),
                    out.display()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Writes the seeds made by Rust code: the micro model's GGUF and safetensors, its
/// tokenizer, and negentropy messages. Run by hand after changing what they come from:
/// `cargo test -p fleetmesh-fuzz --test corpus -- --ignored write_generated_seeds`.
#[test]
#[ignore = "regenerates committed seeds"]
fn write_generated_seeds() {
    use fleetmesh_fuzz::inference::micro_config;
    let dir = tempfile::tempdir().unwrap();
    fleetmesh_inference::tiny::make_model(dir.path(), &micro_config(), 1).unwrap();
    let read = |name: &str| std::fs::read(dir.path().join(name)).unwrap();
    let write = |target: &str, name: &str, data: &[u8]| {
        std::fs::write(corpus_dir(target).join(name), data).unwrap();
    };
    write("model_gguf", "micro.gguf", &read("model.gguf"));
    // mode byte 0: the micro config; 1: config.json, a 0 byte, the weights
    let weights = read("model.safetensors");
    write(
        "model_safetensors",
        "micro",
        &[&[0u8][..], &weights].concat(),
    );
    let config = serde_json::to_vec(&micro_config()).unwrap();
    write(
        "model_safetensors",
        "micro_with_config",
        &[&[1u8][..], &config, &[0], &weights].concat(),
    );
    let tok = [
        read("tokenizer.json"),
        vec![0],
        read("tokenizer_config.json"),
    ]
    .concat();
    write("tokenizer_json", "byte_level", &tok);

    // negentropy: a peer holding some of the harness's items and others
    use negentropy::{Id, Negentropy, NegentropyStorageVector};
    let peer = || {
        let mut s = NegentropyStorageVector::new();
        for i in 2..9u8 {
            let t = fleetmesh_fuzz::NOW - u64::from(i) * 1000;
            s.insert(t, Id::from_byte_array([i.wrapping_mul(37); 32]))
                .unwrap();
        }
        s.seal().unwrap();
        Negentropy::owned(s, 60_000).unwrap()
    };
    // mode 0: the relay answers a client's first message
    let initial = peer().initiate().unwrap();
    write(
        "relay_negentropy",
        "respond_initial",
        &[&[0u8][..], &initial].concat(),
    );
    // mode 1: `meshnode sync` reads the peer relay's answer to its first message
    let mut ours = Negentropy::owned(fleetmesh_fuzz::relay::storage(), 60_000).unwrap();
    let reply = peer().reconcile(&ours.initiate().unwrap()).unwrap();
    write(
        "relay_negentropy",
        "client_reply",
        &[&[1u8][..], &reply].concat(),
    );
    write("relay_negentropy", "bad_version", &[0, 0x62, 0, 0]);
}

/// Writes the hop envelope seeds: a two-hop path to the harness's recipient (dated at the
/// harness's fixed time) and a one-hop one to another node. Run by hand:
/// `cargo test -p fleetmesh-fuzz --test corpus -- --ignored write_hop_seeds`.
#[test]
#[ignore = "regenerates committed seeds"]
fn write_hop_seeds() {
    use fleetmesh_proto::hop::Envelope;
    let key = |s: u8| secp256k1::Keypair::from_secret_bytes([s; 32]).unwrap();
    let hexkey = |k: &secp256k1::Keypair| hex::encode(k.x_only_public_key().0.to_byte_array());
    let (sender, mediator, recipient) = (key(7), key(5), key(9));
    let now = fleetmesh_fuzz::NOW;
    let mut env =
        Envelope::new(&sender, &hexkey(&mediator), br#"{"protected":"e30"}"#, now).unwrap();
    env.extend(&mediator, &hexkey(&recipient), now + 1).unwrap();
    let dir = corpus_dir("relay_hop");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("two_hops.json"), serde_json::to_vec(&env).unwrap()).unwrap();
    let one = Envelope::new(&sender, &hexkey(&mediator), b"x", now).unwrap();
    std::fs::write(
        dir.join("elsewhere.json"),
        serde_json::to_vec(&one).unwrap(),
    )
    .unwrap();
}

/// Writes the Blossom authorization seeds: valid headers for an upload and a delete
/// (signed now, for the harness's fixed time) and a few broken ones. Run by hand:
/// `cargo test -p fleetmesh-fuzz --test corpus -- --ignored write_blossom_seeds`.
#[test]
#[ignore = "regenerates committed seeds"]
fn write_blossom_seeds() {
    use base64::Engine as _;
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let hash = "b1674191a88ec5cdd733e4240a81803105dc412d6c6708d53ab94fc248f4f553";
    let header = |verb: &str, expires: u64| {
        let ev = keys
            .sign(fleetmesh_proto::UnsignedEvent {
                created_at: fleetmesh_fuzz::NOW - 10,
                kind: 24242,
                tags: vec![
                    vec!["t".into(), verb.into()],
                    vec!["x".into(), hash.into()],
                    vec!["expiration".into(), expires.to_string()],
                ],
                content: format!("{verb} a blob"),
            })
            .unwrap();
        format!(
            "Nostr {}",
            base64::engine::general_purpose::STANDARD.encode(ev.to_json())
        )
    };
    let write = |name: &str, data: &str| {
        std::fs::write(corpus_dir("blossom_auth").join(name), data).unwrap();
    };
    std::fs::create_dir_all(corpus_dir("blossom_auth")).unwrap();
    write("upload", &header("upload", fleetmesh_fuzz::NOW + 600));
    write("delete", &header("delete", fleetmesh_fuzz::NOW + 600));
    write("expired", &header("upload", fleetmesh_fuzz::NOW - 1));
    write("not_base64", "Nostr %%%");
    write("other_scheme", "Bearer abc");
}

/// Replays inputs (a crash libFuzzer wrote, a failing mutation) through one harness with
/// a plain backtrace: `FLEETMESH_FUZZ_TARGET=<target> FLEETMESH_FUZZ_INPUT=<file>[:<file>…]
/// cargo test -p fleetmesh-fuzz --test corpus replay -- --nocapture`. Does nothing without
/// them.
#[test]
fn replay() {
    let (Ok(target), Ok(inputs)) = (
        std::env::var("FLEETMESH_FUZZ_TARGET"),
        std::env::var("FLEETMESH_FUZZ_INPUT"),
    ) else {
        return;
    };
    let h = fleetmesh_fuzz::harness(&target).unwrap_or_else(|| panic!("no target {target}"));
    for file in inputs.split(':') {
        eprintln!("{target}: {file}");
        h(&std::fs::read(file).unwrap());
    }
}

/// Writes the NIP-98 authorization seeds: valid headers for a job read and a submission
/// (signed for the harness's host, paths and fixed time) and a few broken ones. Run by hand:
/// `cargo test -p fleetmesh-fuzz --test corpus -- --ignored write_nip98_seeds`.
#[test]
#[ignore = "regenerates committed seeds"]
fn write_nip98_seeds() {
    use fleetmesh_fuzz::appliance::NIP98_HOST;
    use fleetmesh_proto::nip98;
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let now = fleetmesh_fuzz::NOW;
    let url = |path: &str| format!("http://{NIP98_HOST}{path}");
    let write = |name: &str, data: &str| {
        std::fs::write(corpus_dir("nip98_auth").join(name), data).unwrap();
    };
    std::fs::create_dir_all(corpus_dir("nip98_auth")).unwrap();
    let read = nip98::sign(&keys, "GET", &url("/v1/jobs/abc?x=1"), None, now).unwrap();
    write("read", &read);
    let submit = nip98::sign(&keys, "POST", &url("/v1/jobs"), Some(b"{}"), now).unwrap();
    write("submit", &submit);
    let stale = nip98::sign(&keys, "GET", &url("/v1/jobs/abc?x=1"), None, now - 61).unwrap();
    write("stale", &stale);
    write("not_base64", "Nostr %%%");
    write("other_scheme", "Bearer abc");
}
