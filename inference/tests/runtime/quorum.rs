//! The quasi-deterministic quorum over real local executors: honest, tampered and
//! other-dtype builds.

use super::*;

/// A copy of the model in `src` (config and tokenizer as they are) with `change` applied
/// to every weight tensor.
fn copy_with(
    src: &Path,
    dst: &Path,
    change: impl Fn(&str, candle_core::Tensor) -> candle_core::Tensor,
) {
    std::fs::create_dir_all(dst).unwrap();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(src.join(f), dst.join(f)).unwrap();
    }
    let t: HashMap<String, candle_core::Tensor> =
        candle_core::safetensors::load(src.join("model.safetensors"), &candle_core::Device::Cpu)
            .unwrap()
            .into_iter()
            .map(|(k, v)| {
                let v = change(&k, v);
                (k, v)
            })
            .collect();
    candle_core::safetensors::save(&t, dst.join("model.safetensors")).unwrap();
}

/// Layer 1's MLP output scaled by `1 + strength` — other weights, as a provider serving a
/// fine-tune or a cheaper model under the honest digest.
fn tampered_copy(src: &Path, dst: &Path, strength: f64) {
    copy_with(src, dst, |name, w| {
        if name == "model.layers.1.mlp.down_proj.weight" {
            (w * (1.0 + strength)).unwrap()
        } else {
            w
        }
    });
}

fn quorum_prompts() -> Vec<Vec<u32>> {
    [
        &b"hello"[..],
        b"fleetmesh verifies",
        b"a",
        b"quorum of three",
        b"2 + 2 =",
        b"the weights",
        b"zzzz",
        b"Nostr relays",
        b"greedy decoding",
        b"xyz",
    ]
    .iter()
    .map(|p| p.iter().map(|b| u32::from(*b)).collect())
    .collect()
}

#[test]
fn quorum_picks_the_honest_output_and_names_the_tampered_executor_where_it_diverges() {
    use fleetmesh_inference::executor::{ExecRequest, Executor, LocalExecutor};
    use fleetmesh_inference::model::model_digest;
    use fleetmesh_inference::quorum::{Outcome, QuorumConfig, Status, run_quorum};
    use fleetmesh_inference::{Batcher, Sampling, generate};
    use std::sync::Arc;
    let honest_dir = tempfile::tempdir().unwrap();
    make_tiny(honest_dir.path(), 7).unwrap();
    let bad_dir = tempfile::tempdir().unwrap();
    tampered_copy(honest_dir.path(), bad_dir.path(), 0.1);
    let digest = model_digest(honest_dir.path()).unwrap();
    let load = |d: &Path| Arc::new(Llama::load_dir(d).unwrap());
    let (m1, m2, mt) = (
        load(honest_dir.path()),
        load(honest_dir.path()),
        load(bad_dir.path()),
    );
    // two honest machines and a cheat that claims the honest digest
    let h1 = LocalExecutor::new("honest-1", Arc::new(Batcher::new(m1.clone(), digest, 8)));
    let h2 = LocalExecutor::new("honest-2", Arc::new(Batcher::new(m2, digest, 8)));
    let bad = LocalExecutor::new("tampered", Arc::new(Batcher::new(mt.clone(), digest, 8)));
    assert_eq!(
        h1.build(),
        bad.build(),
        "the cheat looks like the same build"
    );
    let ids_only = QuorumConfig {
        logprob_tolerance: None,
        ..QuorumConfig::default()
    };
    let strict = QuorumConfig::default();
    let (mut diverging, mut same) = (0, 0);
    for prompt in quorum_prompts() {
        let req = ExecRequest {
            schema: None,
            prompt: prompt.clone(),
            max_tokens: 12,
            stop_ids: vec![],
        };
        let gen_ids = |m: &Llama| {
            generate(m, digest, &prompt, 12, &[], &Sampling::default())
                .unwrap()
                .output_ids()
        };
        let (honest_ids, bad_ids) = (gen_ids(&m1), gen_ids(&mt));
        let orders: [[&dyn Executor; 3]; 3] =
            [[&h1, &bad, &h2], [&bad, &h1, &h2], [&h1, &h2, &bad]];
        for order in orders {
            for cfg in [&ids_only, &strict] {
                let v = run_quorum(&order, &req, cfg).unwrap();
                let status = |name: &str| {
                    v.executors
                        .iter()
                        .find(|r| r.executor == name)
                        .unwrap()
                        .status
                };
                // the accepted output is the honest one, and no honest executor is flagged
                assert_eq!(v.output.as_ref().unwrap().ids(), honest_ids, "{prompt:?}");
                assert_eq!(status("honest-1"), Status::Agreed);
                assert!(matches!(
                    status("honest-2"),
                    Status::Agreed | Status::NotRun
                ));
                let bad_first_two = order[2].name() != "tampered";
                if bad_ids != honest_ids {
                    // named on every prompt where it diverges, at the first differing step
                    if bad_first_two {
                        assert_eq!(v.outcome, Outcome::Majority);
                        assert_eq!(status("tampered"), Status::Diverged, "{prompt:?}");
                        assert_eq!(v.flagged(), ["tampered"]);
                        let step = honest_ids
                            .iter()
                            .zip(&bad_ids)
                            .take_while(|(a, b)| a == b)
                            .count();
                        let d = v
                            .divergences
                            .iter()
                            .find(|d| d.executors.0 == "tampered" || d.executors.1 == "tampered")
                            .unwrap();
                        assert_eq!(d.step, step);
                        assert!(d.margins.0.is_some() && d.margins.1.is_some());
                    } else {
                        // the honest pair agreed first; the cheat was never asked
                        assert_eq!(v.outcome, Outcome::Unanimous);
                        assert_eq!(status("tampered"), Status::NotRun);
                    }
                } else if cfg.logprob_tolerance.is_none() || !bad_first_two {
                    // the same ids: accepted as an agreeing executor
                    assert!(v.flagged().is_empty(), "{:?}", v.to_json());
                    assert!(matches!(
                        status("tampered"),
                        Status::Agreed | Status::NotRun
                    ));
                } else {
                    // the same ids with other logprobs: the strict check still names it
                    assert_eq!(status("tampered"), Status::LogprobMismatch);
                    assert_eq!(v.flagged(), ["tampered"]);
                }
                // every digest reported is the transcript of what that executor returned
                for r in &v.executors {
                    assert_eq!(
                        r.transcript_digest.is_some(),
                        !matches!(r.status, Status::NotRun)
                    );
                }
            }
        }
        if bad_ids != honest_ids {
            diverging += 1;
        } else {
            same += 1;
        }
    }
    // the prompts cover both cases, so each branch above was exercised
    assert!(
        diverging >= 2 && same >= 2,
        "diverging {diverging}, same {same}"
    );
    // fewer than three executors is refused
    let err = run_quorum(
        &[&h1, &h2],
        &ExecRequest {
            schema: None,
            prompt: vec![1],
            max_tokens: 1,
            stop_ids: vec![],
        },
        &strict,
    )
    .unwrap_err();
    assert!(err.to_string().contains("three executors"), "{err}");
}

/// Every weight rounded to f16 (stored back as F32): an honest build in another dtype.
fn f16_copy(src: &Path, dst: &Path) {
    copy_with(src, dst, |_, w| {
        w.to_dtype(candle_core::DType::F16)
            .and_then(|h| h.to_dtype(candle_core::DType::F32))
            .unwrap()
    });
}

#[test]
fn near_ties_between_different_builds_are_not_fraud_and_the_same_divergence_in_one_build_is() {
    use fleetmesh_inference::executor::{Build, ExecRequest, Execution, Executor, LocalExecutor};
    use fleetmesh_inference::gguf::{FileType, convert_dir};
    use fleetmesh_inference::model::model_digest;
    use fleetmesh_inference::quorum::{
        Comparison, DivergenceKind, QuorumConfig, Status, compare, run_quorum,
    };
    use fleetmesh_inference::{Batcher, Step};
    use std::sync::Arc;
    // the rule on hand-made executions: ids part at step 1 with margins 0.02 and 0.03
    let step = |id, margin| Step {
        id,
        logprob: -0.7,
        margin,
        top: vec![],
    };
    let exec = |name: &str, dtype: &str, second: Step| Execution {
        executor: name.into(),
        build: Build {
            model_digest: Some([1; 32]),
            base_digest: Some([1; 32]),
            engine: "fleetmesh-candle".into(),
            dtype: dtype.into(),
        },
        steps: vec![step(5, 3.0), second, step(9, 2.0)],
    };
    let cfg = QuorumConfig::default();
    let a = exec("a", "f32", step(7, 0.02));
    let kind = |x: &Execution, y: &Execution| match compare(x, y, &cfg) {
        Comparison::Diverge(d) => Some((d.kind, d.step, d.margins)),
        Comparison::Agree => None,
    };
    let other_build = exec("b", "bf16", step(8, 0.03));
    assert_eq!(
        kind(&a, &other_build),
        Some((DivergenceKind::NearTie, 1, (Some(0.02), Some(0.03))))
    );
    // the same divergence between executors of one build is a fault
    let same_build = exec("c", "f32", step(8, 0.03));
    assert_eq!(kind(&a, &same_build).unwrap().0, DivergenceKind::Token);
    // and between builds of another model, or of a model nobody stated
    let mut other_model = other_build.clone();
    other_model.build.base_digest = Some([2; 32]);
    assert_eq!(kind(&a, &other_model).unwrap().0, DivergenceKind::Token);
    other_model.build.base_digest = None;
    assert_eq!(kind(&a, &other_model).unwrap().0, DivergenceKind::Token);
    assert_eq!(kind(&other_model, &other_model.clone()), None);
    // a sure executor overturned is a fault across builds too
    let sure = exec("d", "bf16", step(8, 1.5));
    assert_eq!(kind(&a, &sure).unwrap().0, DivergenceKind::Token);
    // the logprob tolerance applies to the same dtype only
    let mut drift = exec("e", "f32", step(7, 0.02));
    drift.steps[2].logprob = -0.69;
    assert_eq!(
        kind(&a, &drift).map(|k| (k.0, k.1)),
        Some((DivergenceKind::Logprob, 2))
    );
    drift.build.dtype = "bf16".into();
    assert_eq!(kind(&a, &drift), None);
    // nor to executors whose dtype nobody stated
    let mut unknown_a = a.clone();
    unknown_a.build.dtype = "unknown".into();
    drift.build.dtype = "unknown".into();
    assert_eq!(kind(&unknown_a, &drift), None);
    // one output stopping early is a length divergence (not a fault), no margin on its side
    let mut short = exec("f", "f32", step(7, 0.02));
    short.steps.pop();
    assert_eq!(
        kind(&a, &short),
        Some((DivergenceKind::Length, 2, (Some(2.0), None)))
    );

    // real executors: an honest provider whose weights are rounded to f16 is another build;
    // on every prompt it is never flagged
    let dir = tempfile::tempdir().unwrap();
    make_tiny(dir.path(), 7).unwrap();
    let f16_dir = tempfile::tempdir().unwrap();
    f16_copy(dir.path(), f16_dir.path());
    let digest = model_digest(dir.path()).unwrap();
    let local = |d: &Path, name: &str| {
        let m = Arc::new(Llama::load_dir(d).unwrap());
        LocalExecutor::new(name, Arc::new(Batcher::new(m, model_digest(d).unwrap(), 4)))
    };
    let h1 = local(dir.path(), "f32-1");
    let h2 = local(dir.path(), "f32-2");
    // its file has its own digest; it states the f32 original as its base
    let half = local(f16_dir.path(), "f16")
        .with_dtype("f16")
        .with_base_digest(digest);
    assert_ne!(half.build().model_digest, h1.build().model_digest);
    assert!(half.build().same_model(&h1.build()));
    // and one that serves a Q8_0 GGUF quantized from it (the file's dtype, its own digest)
    let gguf = dir.path().join("model-q8_0.gguf");
    convert_dir(dir.path(), FileType::Q8_0, &gguf).unwrap();
    let q8 = Arc::new(Llama::load_gguf(&gguf).unwrap());
    let q8_digest = model_digest(&gguf).unwrap();
    let q8 = LocalExecutor::new("q8_0", Arc::new(Batcher::new(q8, q8_digest, 4)))
        .with_base_digest(digest);
    assert_eq!(q8.build().dtype, "q8_0");
    assert!(q8.build().same_model(&h1.build()));
    let (mut near, mut agreed) = (0, 0);
    for prompt in quorum_prompts() {
        let req = ExecRequest {
            prompt,
            schema: None,
            max_tokens: 24,
            stop_ids: vec![],
        };
        for other in [&half, &q8] {
            let v = run_quorum(&[other, &h1, &h2], &req, &cfg).unwrap();
            assert!(v.flagged().is_empty(), "{}", v.to_json());
            let s = v.executors[0].status;
            assert!(matches!(s, Status::Agreed | Status::NearTie), "{s:?}");
            near += usize::from(s == Status::NearTie);
            agreed += usize::from(s == Status::Agreed);
        }
    }
    assert!(agreed > 0, "{near} near-ties");
}

#[test]
fn another_model_under_the_same_name_is_refused_as_wrong_model_not_forgiven_as_a_near_tie() {
    use fleetmesh_inference::executor::{ExecRequest, Executor, LocalExecutor};
    use fleetmesh_inference::model::model_digest;
    use fleetmesh_inference::quorum::{Outcome, QuorumConfig, Status, run_quorum};
    use fleetmesh_inference::{Batcher, Sampling, generate};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    make_tiny(dir.path(), 7).unwrap();
    let digest = model_digest(dir.path()).unwrap();
    let honest = Arc::new(Llama::load_dir(dir.path()).unwrap());
    let greedy = |m: &Llama, d, prompt: &[u32]| {
        generate(m, d, prompt, 12, &[], &Sampling::default())
            .unwrap()
            .output_ids()
    };
    // another model of the same shape: the lm_head rows of the two ids the honest model
    // writes most swapped, so it parts from it wherever it would write one of them
    let mut counts: HashMap<u32, usize> = HashMap::new();
    for prompt in quorum_prompts() {
        for id in greedy(&honest, digest, &prompt) {
            *counts.entry(id).or_default() += 1;
        }
    }
    let mut by_count: Vec<(u32, usize)> = counts.into_iter().collect();
    by_count.sort_by_key(|(id, n)| (std::cmp::Reverse(*n), *id));
    let (a, b) = (by_count[0].0, by_count[1].0);
    let other_dir = tempfile::tempdir().unwrap();
    copy_with(dir.path(), other_dir.path(), |name, w| {
        if name != "lm_head.weight" {
            return w;
        }
        let rows = w.dim(0).unwrap() as u32;
        let order: Vec<u32> = (0..rows)
            .map(|i| match i {
                i if i == a => b,
                i if i == b => a,
                i => i,
            })
            .collect();
        let order = candle_core::Tensor::new(order, &candle_core::Device::Cpu).unwrap();
        w.index_select(&order, 0).unwrap()
    });
    let other_digest = model_digest(other_dir.path()).unwrap();
    assert_ne!(other_digest, digest);
    let other_model = Arc::new(Llama::load_dir(other_dir.path()).unwrap());
    // it honestly states its own digest, so its own base
    let other = LocalExecutor::new(
        "other-model",
        Arc::new(Batcher::new(other_model.clone(), other_digest, 4)),
    );
    let h1 = LocalExecutor::new(
        "honest-1",
        Arc::new(Batcher::new(honest.clone(), digest, 4)),
    );
    let h2 = LocalExecutor::new(
        "honest-2",
        Arc::new(Batcher::new(honest.clone(), digest, 4)),
    );
    let by_default = QuorumConfig::default();
    let named = QuorumConfig {
        base_digest: Some(digest),
        ..QuorumConfig::default()
    };
    let mut diverging = 0;
    for prompt in quorum_prompts() {
        let honest_ids = greedy(&honest, digest, &prompt);
        if greedy(&other_model, other_digest, &prompt) != honest_ids {
            diverging += 1;
        }
        let req = ExecRequest {
            schema: None,
            prompt,
            max_tokens: 12,
            stop_ids: vec![],
        };
        // the quorum's model: the first executor's (the node's own), or named
        for (order, cfg) in [
            ([&h1 as &dyn Executor, &other, &h2], &by_default),
            ([&other as &dyn Executor, &h1, &h2], &named),
        ] {
            let v = run_quorum(&order, &req, cfg).unwrap();
            // whatever its output, it takes no part: refused, flagged, never compared
            assert_eq!(v.outcome, Outcome::Majority);
            assert_eq!(v.output.as_ref().unwrap().ids(), honest_ids);
            assert_eq!(v.flagged(), ["other-model"]);
            let r = v
                .executors
                .iter()
                .find(|r| r.executor == "other-model")
                .unwrap();
            assert_eq!(r.status, Status::WrongModel);
            assert!(r.transcript_digest.is_none());
            assert!(
                r.error.as_deref().unwrap().contains("base_model_digest"),
                "{:?}",
                r.error
            );
            assert!(
                v.divergences
                    .iter()
                    .all(|d| d.executors.0 != "other-model" && d.executors.1 != "other-model")
            );
            let json = v.to_json();
            let e = &json["executors"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["executor"] == "other-model")
                .unwrap()
                .clone();
            assert_eq!(e["status"], "wrong-model", "{json}");
            assert_eq!(e["flagged"], true);
            assert_eq!(
                e["base_model_digest"],
                other_digest
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            );
        }
        // where the honest pair runs first it is never asked
        let v = run_quorum(&[&h1, &h2, &other], &req, &by_default).unwrap();
        assert_eq!(v.outcome, Outcome::Unanimous);
        assert_eq!(v.executors[2].status, Status::NotRun);
    }
    assert!(diverging >= 2, "only {diverging} prompts part");
}
