//! Model families beside Llama: a generated Qwen2 (biased query/key/value projections,
//! tied embeddings, Qwen's rope base) run by our runtime gives candle-transformers' Qwen2
//! greedy ids on the same safetensors, and candle's quantized Qwen2 ids on the GGUF we
//! write (llama.cpp's `qwen2` layout: no query/key interleave, biases as tensors); a
//! Phi-3 (fused projections) gives candle's Phi-3 and quantized Phi-3 ids; a Mistral
//! attends within its sliding window as transformers masks it (candle's Mistral,
//! recomputed whole each step, as the reference); Llama 3's `rope_scaling` gives candle's
//! Llama ids; an architecture or option the runtime does not run is refused, never run as
//! a Llama.

use std::path::Path;

use candle_core::quantized::gguf_file::Value;
use candle_core::{DType, Device, Tensor};
use fleetmesh_inference::gguf::{FileType, convert_dir};
use fleetmesh_inference::tiny::{TINY_WINDOW, make_model, tiny_config_for};
use fleetmesh_inference::{Error, Llama};

use crate::{greedy, greedy_candle, sample_prompts as prompts};

/// A candle-transformers model's forward step (new ids as (1, n), first position).
type Forward = Box<dyn FnMut(&Tensor, usize) -> candle_core::Result<Tensor>>;

/// The tiny model of `arch` (seed `seed`) gives candle-transformers' greedy ids: `theirs`
/// builds their model from the directory, `theirs_q` their quantized one from our Q8_0
/// GGUF (against ours on the same file); our F32 GGUF gives the directory's ids.
fn same_ids_as_candle(
    arch: &str,
    seed: u64,
    theirs: impl Fn(&Path) -> Forward,
    theirs_q: impl Fn(&Path) -> Forward,
) {
    let dir = tempfile::tempdir().unwrap();
    make_model(dir.path(), &tiny_config_for(arch).unwrap(), seed).unwrap();
    let ours = Llama::load_dir(dir.path()).unwrap();
    assert_eq!(ours.config().model_type, arch);
    let gguf = dir.path().join("model-q8_0.gguf");
    convert_dir(dir.path(), FileType::Q8_0, &gguf).unwrap();
    let ours_q = Llama::load_gguf(&gguf).unwrap();
    assert_eq!(
        (ours_q.config().model_type.as_str(), ours_q.dtype()),
        (arch, "q8_0")
    );
    let f32_gguf = dir.path().join("model-f32.gguf");
    convert_dir(dir.path(), FileType::F32, &f32_gguf).unwrap();
    let g = Llama::load_gguf(&f32_gguf).unwrap();
    for prompt in prompts() {
        let (want, _) = greedy(&ours, &prompt, 10);
        let got = greedy_candle(theirs(dir.path()), &prompt, 10);
        assert_eq!(got, want, "candle-transformers' {arch} on {prompt:?}");
        let got = greedy_candle(theirs_q(&gguf), &prompt, 10);
        let (want_q, _) = greedy(&ours_q, &prompt, 10);
        assert_eq!(got, want_q, "candle's quantized {arch} on {prompt:?}");
        assert_eq!(greedy(&g, &prompt, 10).0, want, "our F32 GGUF of {arch}");
    }
}

/// candle-transformers' GGUF header of `path`, the file open after it.
fn gguf_content(path: &Path) -> (std::fs::File, candle_core::quantized::gguf_file::Content) {
    let mut f = std::fs::File::open(path).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut f).unwrap();
    (f, content)
}

#[test]
fn a_qwen2_runs_as_candle_transformers_qwen2_runs_it() {
    use candle_transformers::models::{quantized_qwen2, qwen2};
    same_ids_as_candle(
        "qwen2",
        21,
        |dir| {
            // their config: ours plus the Qwen2 fields the file leaves at their defaults
            let c = tiny_config_for("qwen2").unwrap();
            let cfg: qwen2::Config = their_config(
                dir,
                serde_json::json!({"sliding_window": c.max_position_embeddings,
                    "max_window_layers": c.num_hidden_layers, "use_sliding_window": false}),
            );
            let mut m = qwen2::ModelForCausalLM::new(&cfg, var_builder(dir)).unwrap();
            Box::new(move |x, pos| m.forward(x, pos))
        },
        |gguf| {
            let (mut f, content) = gguf_content(gguf);
            let mut m =
                quantized_qwen2::ModelWeights::from_gguf(content, &mut f, &Device::Cpu).unwrap();
            Box::new(move |x, pos| m.forward(x, pos))
        },
    );
}

#[test]
fn architectures_the_runtime_does_not_run_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    make_model(dir.path(), &tiny_config_for("llama").unwrap(), 1).unwrap();
    let path = dir.path().join("config.json");
    let base: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    for (edit, says) in [
        (
            serde_json::json!({"model_type": "gemma"}),
            "model_type \"gemma\" is not supported",
        ),
        (
            serde_json::json!({"model_type": "qwen2", "use_sliding_window": true,
                "sliding_window": 64}),
            "sliding-window attention (per max_window_layers) is not supported",
        ),
        (
            serde_json::json!({"model_type": "mistral", "sliding_window": 0}),
            "sliding_window must be positive",
        ),
        (
            serde_json::json!({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}),
            "rope_scaling \"yarn\" is not supported",
        ),
        (
            serde_json::json!({"rope_scaling": {"type": "llama3", "factor": 8.0}}),
            "needs a positive number low_freq_factor",
        ),
        (
            serde_json::json!({"partial_rotary_factor": 0.75}),
            "partial_rotary_factor 0.75",
        ),
        (serde_json::json!({"head_dim": 32}), "head_dim 32 is not"),
        // a Phi-3 config over separate projections: the fused one is named
        (serde_json::json!({"model_type": "phi3"}), "qkv_proj.weight"),
        (
            serde_json::json!({"attention_bias": true}),
            "attention_bias/mlp_bias",
        ),
        (
            serde_json::json!({"mlp_bias": true}),
            "attention_bias/mlp_bias",
        ),
        // a Qwen2 config over weights without its biases: the missing tensor is named
        (serde_json::json!({"model_type": "qwen2"}), "q_proj.bias"),
    ] {
        let mut c = base.clone();
        for (k, v) in edit.as_object().unwrap() {
            c[k] = v.clone();
        }
        std::fs::write(&path, c.to_string()).unwrap();
        let e = Llama::load_dir(dir.path()).unwrap_err();
        assert!(
            matches!(e, Error::Model { .. }) && e.to_string().contains(says),
            "{e}"
        );
    }
    // a Mistral whose window covers the context is a Llama
    let mut c = base.clone();
    c["model_type"] = "mistral".into();
    c["sliding_window"] = 4096.into();
    std::fs::write(&path, c.to_string()).unwrap();
    let m = Llama::load_dir(dir.path()).unwrap();
    std::fs::write(&path, base.to_string()).unwrap();
    let l = Llama::load_dir(dir.path()).unwrap();
    assert_eq!(
        greedy(&m, &prompts()[0], 6).0,
        greedy(&l, &prompts()[0], 6).0
    );
    // a GGUF of another architecture is refused by name
    let gguf = dir.path().join("model.gguf");
    let mut bytes = std::fs::read(&gguf).unwrap();
    let at = bytes.windows(5).position(|w| w == b"llama").unwrap();
    bytes[at..at + 5].copy_from_slice(b"gemma");
    std::fs::write(&gguf, bytes).unwrap();
    let e = Llama::load_gguf(&gguf).unwrap_err();
    assert!(
        e.to_string()
            .contains("\"gemma\" is not one of llama, qwen2, phi3"),
        "{e}"
    );
    // a GGUF whose sliding window, rope scaling or frequency factors are not what the keys
    // allow: refused naming them, never run without them
    let m = tempfile::tempdir().unwrap();
    make_model(m.path(), &tiny_config_for("mistral").unwrap(), 3).unwrap();
    let src = m.path().join("model.gguf");
    let bad = m.path().join("bad.gguf");
    let three = candle_core::Tensor::new(&[1f32, 2.0, 3.0], &Device::Cpu).unwrap();
    for (key, value, extra, says) in [
        (
            "llama.attention.sliding_window",
            Value::String("16".into()),
            None,
            "llama.attention.sliding_window",
        ),
        (
            "llama.rope.scaling.type",
            Value::String("yarn".into()),
            None,
            "llama.rope.scaling.type: \"yarn\" is not supported",
        ),
        (
            "general.name",
            Value::String("short factors".into()),
            Some(("rope_freqs.weight", &three)),
            "rope_freqs.weight: 3 factors, expected 8",
        ),
    ] {
        rewrite_gguf(&src, &bad, &[(key, value)], extra);
        let e = Llama::load_gguf(&bad).unwrap_err();
        assert!(e.to_string().contains(says), "{key}: {e}");
    }
}

/// `src` written again to `out` with the metadata `edits` (set or replaced) and `extra`
/// as one more F32 tensor.
fn rewrite_gguf(
    src: &Path,
    out: &Path,
    edits: &[(&str, Value)],
    extra: Option<(&str, &candle_core::Tensor)>,
) {
    use candle_core::quantized::QTensor;
    use candle_core::quantized::gguf_file::{Content, write};
    let mut f = std::fs::File::open(src).unwrap();
    let content = Content::read(&mut f).unwrap();
    let mut meta: Vec<(String, Value)> = content
        .metadata
        .iter()
        .filter(|(k, _)| !edits.iter().any(|(e, _)| e == k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    meta.extend(edits.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
    let mut tensors: Vec<(String, QTensor)> = content
        .tensor_infos
        .keys()
        .map(|n| (n.clone(), content.tensor(&mut f, n, &Device::Cpu).unwrap()))
        .collect();
    if let Some((name, t)) = extra {
        let q = QTensor::quantize(t, candle_core::quantized::GgmlDType::F32).unwrap();
        tensors.push((name.to_owned(), q));
    }
    let meta: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tens: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
    write(&mut std::fs::File::create(out).unwrap(), &meta, &tens).unwrap();
}

#[test]
fn a_gguf_stating_linear_rope_scaling_runs_as_the_config_stating_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = tiny_config_for("llama").unwrap();
    make_model(dir.path(), &c, 25).unwrap();
    let scaled = dir.path().join("scaled.gguf");
    rewrite_gguf(
        &dir.path().join("model.gguf"),
        &scaled,
        &[
            ("llama.rope.scaling.type", Value::String("linear".into())),
            ("llama.rope.scaling.factor", Value::F32(4.0)),
        ],
        None,
    );
    let g = Llama::load_gguf(&scaled).unwrap();
    let weights = std::fs::read(dir.path().join("model.safetensors")).unwrap();
    let plain = Llama::from_safetensors_bytes(c.clone(), &weights, dir.path()).unwrap();
    c.rope_scaling = Some(serde_json::json!({"type": "linear", "factor": 4.0}));
    let linear = Llama::from_safetensors_bytes(c, &weights, dir.path()).unwrap();
    let mut scaling_matters = false;
    for prompt in prompts() {
        let (want, _) = greedy(&linear, &prompt, 12);
        assert_eq!(greedy(&g, &prompt, 12).0, want, "{prompt:?}");
        scaling_matters |= greedy(&plain, &prompt, 12).0 != want;
    }
    assert!(
        scaling_matters,
        "the scaling changed no output: the test is blind"
    );
}

/// candle-transformers' config for our `config.json`, plus `extra`.
fn their_config<T: serde::de::DeserializeOwned>(
    dir: &std::path::Path,
    extra: serde_json::Value,
) -> T {
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    cfg["hidden_act"] = "silu".into();
    for (k, v) in extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    serde_json::from_value(cfg).unwrap()
}

fn var_builder(dir: &Path) -> candle_nn::VarBuilder<'static> {
    let weights = std::fs::read(dir.join("model.safetensors")).unwrap();
    candle_nn::VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu).unwrap()
}

#[test]
fn a_phi3_runs_as_candle_transformers_phi3_runs_it() {
    use candle_transformers::models::{phi3, quantized_phi3};
    // the F32 GGUF is llama.cpp's `phi3`: attn_qkv and a fused ffn_up
    same_ids_as_candle(
        "phi3",
        23,
        |dir| {
            let cfg: phi3::Config = their_config(dir, serde_json::json!({}));
            let mut m = phi3::Model::new(&cfg, var_builder(dir)).unwrap();
            Box::new(move |x, pos| m.forward(x, pos))
        },
        |gguf| {
            let (mut f, content) = gguf_content(gguf);
            let mut m =
                quantized_phi3::ModelWeights::from_gguf(false, content, &mut f, &Device::Cpu)
                    .unwrap();
            Box::new(move |x, pos| m.forward(x, pos))
        },
    );
}

/// Greedy ids from candle-transformers' Mistral, the whole sequence recomputed at every
/// step: candle masks key j from query i when j + window < i (i − window … i, one more
/// than transformers' i − window + 1 … i) and applies no window to a cached decoding
/// step, so it is built with `window − 1` and never given a cache.
fn greedy_mistral_recomputed(dir: &Path, window: usize, prompt: &[u32], n: usize) -> Vec<u32> {
    use candle_transformers::models::mistral;
    let cfg: mistral::Config = their_config(
        dir,
        serde_json::json!({"sliding_window": window - 1, "head_dim": null}),
    );
    let vb = var_builder(dir);
    let mut seq = prompt.to_vec();
    for _ in 0..n {
        let mut m = mistral::Model::new(&cfg, vb.clone()).unwrap();
        let x = candle_core::Tensor::new(seq.as_slice(), &Device::Cpu)
            .and_then(|x| x.unsqueeze(0))
            .unwrap();
        let logits = m.forward(&x, 0).unwrap().flatten_all().unwrap();
        seq.push(fleetmesh_inference::model::argmax(
            &logits.to_vec1::<f32>().unwrap(),
        ));
    }
    seq[prompt.len()..].to_vec()
}

#[test]
fn a_mistral_attends_within_its_sliding_window_as_transformers_masks_it() {
    let dir = tempfile::tempdir().unwrap();
    let c = tiny_config_for("mistral").unwrap();
    make_model(dir.path(), &c, 22).unwrap();
    let ours = Llama::load_dir(dir.path()).unwrap();
    assert_eq!(ours.config().window(), Some(TINY_WINDOW));
    // prompts shorter and longer than the window, outputs that run past it
    let n = 2 * TINY_WINDOW;
    let mut as_llama_differs = false;
    let gguf = dir.path().join("model-f32.gguf");
    convert_dir(dir.path(), FileType::F32, &gguf).unwrap();
    let g = Llama::load_gguf(&gguf).unwrap();
    assert_eq!(
        (g.config().model_type.as_str(), g.config().window()),
        ("mistral", Some(TINY_WINDOW))
    );
    let mut plain = c.clone();
    plain.model_type = "llama".into();
    let weights = std::fs::read(dir.path().join("model.safetensors")).unwrap();
    let unwindowed = Llama::from_safetensors_bytes(plain, &weights, dir.path()).unwrap();
    for prompt in prompts() {
        let (want, _) = greedy(&ours, &prompt, n);
        assert_eq!(
            greedy_mistral_recomputed(dir.path(), TINY_WINDOW, &prompt, n),
            want,
            "candle's mistral on {prompt:?}"
        );
        assert_eq!(greedy(&g, &prompt, n).0, want, "our GGUF on {prompt:?}");
        as_llama_differs |= greedy(&unwindowed, &prompt, n).0 != want;
    }
    assert!(
        as_llama_differs,
        "the window changed no output: the test is blind"
    );
    // a batch (prompts prefilled together, then decoded together) gives the same ids
    let ps = prompts();
    let (got, _) = crate::decode_batch(&ours, &ps, n);
    for (p, g) in ps.iter().zip(&got) {
        assert_eq!(*g, greedy(&ours, p, n).0, "batched {p:?}");
    }
}

#[test]
fn llama3_rope_scaling_runs_as_candle_transformers_llama_runs_it() {
    use candle_transformers::models::llama;
    let dir = tempfile::tempdir().unwrap();
    let mut c = tiny_config_for("llama").unwrap();
    // an original context short enough that the tiny heads' frequencies fall in all three
    // of Llama 3's bands (kept, smoothed, divided)
    c.rope_scaling = Some(serde_json::json!({"rope_type": "llama3", "factor": 8.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}));
    make_model(dir.path(), &c, 24).unwrap();
    let ours = Llama::load_dir(dir.path()).unwrap();
    let cfg: llama::LlamaConfig = their_config(dir.path(), serde_json::json!({}));
    let cfg = cfg.into_config(false);
    assert!(cfg.rope_scaling.is_some());
    let vb = var_builder(dir.path());
    let theirs = llama::Llama::load(vb, &cfg).unwrap();
    // the GGUF carries the scaling as llama.cpp's `rope_freqs` divisors
    let gguf = dir.path().join("model.gguf");
    let g = Llama::load_gguf(&gguf).unwrap();
    let mut unscaled = c.clone();
    unscaled.rope_scaling = None;
    let weights = std::fs::read(dir.path().join("model.safetensors")).unwrap();
    let plain = Llama::from_safetensors_bytes(unscaled, &weights, dir.path()).unwrap();
    let mut scaling_matters = false;
    for prompt in prompts() {
        let (want, _) = greedy(&ours, &prompt, 12);
        let mut cache = llama::Cache::new(true, DType::F32, &cfg, &Device::Cpu).unwrap();
        let got = greedy_candle(|x, pos| theirs.forward(x, pos, &mut cache), &prompt, 12);
        assert_eq!(got, want, "candle-transformers' llama on {prompt:?}");
        assert_eq!(greedy(&g, &prompt, 12).0, want, "our GGUF on {prompt:?}");
        scaling_matters |= greedy(&plain, &prompt, 12).0 != want;
    }
    assert!(
        scaling_matters,
        "the scaling changed no output: the test is blind"
    );
}
