//! Model families beside Llama: a generated Qwen2 (biased query/key/value projections,
//! tied embeddings, Qwen's rope base) run by our runtime gives candle-transformers' Qwen2
//! greedy ids on the same safetensors, and candle's quantized Qwen2 ids on the GGUF we
//! write (llama.cpp's `qwen2` layout: no query/key interleave, biases as tensors); an
//! architecture the runtime does not run is refused, never run as a Llama.

use candle_core::{DType, Device};
use fleetmesh_inference::gguf::{FileType, convert_dir};
use fleetmesh_inference::tiny::{make_model, tiny_config_for};
use fleetmesh_inference::{Error, Llama};

use crate::{greedy, greedy_candle, sample_prompts as prompts};

#[test]
fn a_qwen2_runs_as_candle_transformers_qwen2_runs_it() {
    use candle_transformers::models::{quantized_qwen2, qwen2};
    let dir = tempfile::tempdir().unwrap();
    let c = tiny_config_for("qwen2").unwrap();
    make_model(dir.path(), &c, 21).unwrap();
    let ours = Llama::load_dir(dir.path()).unwrap();
    assert_eq!(ours.config().model_type, "qwen2");
    // their config: ours plus the Qwen2 fields the file leaves at their defaults
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("config.json")).unwrap()).unwrap();
    cfg["sliding_window"] = c.max_position_embeddings.into();
    cfg["max_window_layers"] = c.num_hidden_layers.into();
    cfg["use_sliding_window"] = false.into();
    cfg["hidden_act"] = "silu".into();
    let cfg: qwen2::Config = serde_json::from_value(cfg).unwrap();
    let weights = std::fs::read(dir.path().join("model.safetensors")).unwrap();
    let vb = candle_nn::VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
        .unwrap();
    let gguf = dir.path().join("model-q8_0.gguf");
    convert_dir(dir.path(), FileType::Q8_0, &gguf).unwrap();
    let ours_q = Llama::load_gguf(&gguf).unwrap();
    assert_eq!(
        (ours_q.config().model_type.as_str(), ours_q.dtype()),
        ("qwen2", "q8_0")
    );
    for prompt in prompts() {
        let (want, _) = greedy(&ours, &prompt, 10);
        let mut theirs = qwen2::ModelForCausalLM::new(&cfg, vb.clone()).unwrap();
        let got = greedy_candle(|x, pos| theirs.forward(x, pos), &prompt, 10);
        assert_eq!(got, want, "candle-transformers' qwen2 on {prompt:?}");
        // the GGUF in candle's quantized qwen2, against ours on the same file
        let mut f = std::fs::File::open(&gguf).unwrap();
        let content = candle_core::quantized::gguf_file::Content::read(&mut f).unwrap();
        let mut theirs_q =
            quantized_qwen2::ModelWeights::from_gguf(content, &mut f, &Device::Cpu).unwrap();
        let got = greedy_candle(|x, pos| theirs_q.forward(x, pos), &prompt, 10);
        assert_eq!(
            got,
            greedy(&ours_q, &prompt, 10).0,
            "quantized qwen2 on {prompt:?}"
        );
    }
    // the F32 GGUF of a Qwen2 gives the safetensors' ids (no interleave to undo)
    let f32_gguf = dir.path().join("model-f32.gguf");
    convert_dir(dir.path(), FileType::F32, &f32_gguf).unwrap();
    let g = Llama::load_gguf(&f32_gguf).unwrap();
    for prompt in prompts() {
        assert_eq!(greedy(&g, &prompt, 10).0, greedy(&ours, &prompt, 10).0);
    }
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
            serde_json::json!({"model_type": "mistral", "sliding_window": 128}),
            "sliding_window 128 is shorter",
        ),
        (
            serde_json::json!({"model_type": "qwen2", "use_sliding_window": true,
                "sliding_window": 64}),
            "sliding-window attention is not supported",
        ),
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
    assert!(e.to_string().contains("is not llama or qwen2"), "{e}");
}
