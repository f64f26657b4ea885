//! Quantized and half-width weights: GGUF files of llama.cpp's file types (written by
//! `gguf::write_gguf`, candle's quantizer) run by our runtime and by candle-transformers'
//! `quantized_llama` on the same file give the same greedy ids; the weights stay in their
//! blocks (memory), and `dtype` says what ran.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use fleetmesh_inference::gguf::{FileType, convert_dir};
use fleetmesh_inference::tiny::make_model;
use fleetmesh_inference::{KvCache, Llama, LlamaConfig};

use crate::{greedy, greedy_candle, sample_prompts as prompts};

/// A small model whose widths are whole K-quant blocks (256), with grouped-query heads.
fn quantizable() -> LlamaConfig {
    LlamaConfig {
        hidden_size: 256,
        intermediate_size: 512,
        num_attention_heads: 4,
        num_key_value_heads: Some(2),
        ..fleetmesh_inference::tiny::tiny_config()
    }
}

/// Greedy ids from candle-transformers' quantized llama on the GGUF at `path`.
fn theirs(path: &Path, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut f = std::fs::File::open(path).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut f).unwrap();
    let mut m = ModelWeights::from_gguf(content, &mut f, &Device::Cpu).unwrap();
    greedy_candle(|x, pos| m.forward(x, pos), prompt, n)
}

#[test]
fn quantized_gguf_gives_candle_quantized_llamas_ids_in_a_fraction_of_the_memory() {
    assert!(
        !fleetmesh_inference::quant::candle_repacks_q8_0(),
        "this CPU has VNNI: candle's Q8_0 products quantize activations to Q8_K here; run \
         with MISTRALRS_FORCE_AVX2=1 (as .ci/test does) to compare with its standard kernels"
    );
    let dir = tempfile::tempdir().unwrap();
    make_model(dir.path(), &quantizable(), 11).unwrap();
    let f32_model = Llama::load_dir(dir.path()).unwrap();
    assert_eq!(f32_model.dtype(), "f32");
    let f32_bytes = f32_model.weight_bytes();
    let mut bytes = Vec::new();
    for ft in [
        FileType::Q8_0,
        FileType::Q4_0,
        FileType::Q4KM,
        FileType::Q6K,
    ] {
        let path = dir.path().join(format!("model-{}.gguf", ft.name()));
        convert_dir(dir.path(), ft, &path).unwrap();
        let ours = Llama::load_gguf(&path).unwrap();
        assert_eq!(ours.dtype(), ft.name());
        for prompt in prompts() {
            let (want, _) = greedy(&ours, &prompt, 12);
            assert_eq!(
                theirs(&path, &prompt, 12),
                want,
                "{}: ids differ from candle's quantized llama",
                ft.name()
            );
        }
        // the logits are the quantized weights', not F32's: the comparison above is of
        // the quantized product
        let mut a = KvCache::default();
        let mut b = KvCache::default();
        let p = &prompts()[0];
        assert_ne!(
            ours.forward(p, &mut a).unwrap(),
            f32_model.forward(p, &mut b).unwrap(),
            "{}",
            ft.name()
        );
        bytes.push((ft, ours.weight_bytes()));
    }
    // bytes per weight: Q8_0 34/32, Q4_0 18/32, Q4_K 144/256 (Q6_K 210/256 for some), Q6_K
    // 210/256 — against F32's 4 (norms stay F32, a sliver)
    for (ft, b) in &bytes {
        let per_weight = match ft {
            FileType::Q8_0 => 34.0 / 32.0,
            FileType::Q4_0 => 18.0 / 32.0,
            FileType::Q4KM => 210.0 / 256.0,
            _ => 210.0 / 256.0,
        };
        let ratio = *b as f64 / f32_bytes as f64;
        assert!(
            ratio <= per_weight / 4.0 + 0.01,
            "{}: {b} bytes against F32's {f32_bytes} (x{ratio:.3})",
            ft.name()
        );
    }
}

#[test]
fn q4_k_m_mixes_block_types_as_llama_cpp_does() {
    let dir = tempfile::tempdir().unwrap();
    let c = LlamaConfig {
        num_hidden_layers: 8,
        ..quantizable()
    };
    make_model(dir.path(), &c, 3).unwrap();
    let path = dir.path().join("m.gguf");
    convert_dir(dir.path(), FileType::Q4KM, &path).unwrap();
    let mut f = std::fs::File::open(&path).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut f).unwrap();
    let ty = |name: &str| format!("{:?}", content.tensor_infos[name].ggml_dtype);
    assert_eq!(ty("output.weight"), "Q6K");
    assert_eq!(ty("token_embd.weight"), "Q4K");
    assert_eq!(ty("blk.0.attn_q.weight"), "Q4K");
    assert_eq!(ty("blk.0.attn_norm.weight"), "F32");
    // use_more_bits over 8 layers: 0 (first eighth), 3 and 6 (every third after), 7 (last)
    for l in 0..8 {
        let want = if [0, 3, 6, 7].contains(&l) {
            "Q6K"
        } else {
            "Q4K"
        };
        assert_eq!(ty(&format!("blk.{l}.attn_v.weight")), want, "layer {l}");
        assert_eq!(ty(&format!("blk.{l}.ffn_down.weight")), want, "layer {l}");
        assert_eq!(ty(&format!("blk.{l}.ffn_up.weight")), "Q4K", "layer {l}");
    }
    // the mixed file still runs as candle's quantized llama runs it
    let ours = Llama::load_gguf(&path).unwrap();
    let p = &prompts()[1];
    assert_eq!(theirs(&path, p, 8), greedy(&ours, p, 8).0);
    // widths that are not whole 256-blocks fall back to Q8_0, as llama.cpp does
    let tiny = tempfile::tempdir().unwrap();
    fleetmesh_inference::tiny::make_tiny(tiny.path(), 7).unwrap();
    let path = tiny.path().join("m.gguf");
    convert_dir(tiny.path(), FileType::Q4KM, &path).unwrap();
    let ours = Llama::load_gguf(&path).unwrap();
    assert_eq!(ours.dtype(), "q4_k_m", "the file type names the file");
    let mut f = std::fs::File::open(&path).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut f).unwrap();
    assert_eq!(
        format!(
            "{:?}",
            content.tensor_infos["blk.0.attn_q.weight"].ggml_dtype
        ),
        "Q8_0"
    );
    assert_eq!(theirs(&path, p, 8), greedy(&ours, p, 8).0);
}

/// F16 and BF16 safetensors stay half width: half the bytes, `dtype` says so, and the
/// logprobs stay near the F32 model's (the products round the activations to the weights'
/// dtype, so not bit for bit).
#[test]
fn half_width_safetensors_are_kept_as_such() {
    let dir = tempfile::tempdir().unwrap();
    make_model(dir.path(), &quantizable(), 5).unwrap();
    let f32_model = Llama::load_dir(dir.path()).unwrap();
    let tensors =
        candle_core::safetensors::load(dir.path().join("model.safetensors"), &Device::Cpu).unwrap();
    for (dtype, name, tol) in [(DType::F16, "f16", 0.05), (DType::BF16, "bf16", 0.3)] {
        let half = tempfile::tempdir().unwrap();
        for f in ["config.json", "tokenizer.json"] {
            std::fs::copy(dir.path().join(f), half.path().join(f)).unwrap();
        }
        let converted: std::collections::HashMap<String, Tensor> = tensors
            .iter()
            .map(|(k, t)| (k.clone(), t.to_dtype(dtype).unwrap()))
            .collect();
        candle_core::safetensors::save(&converted, half.path().join("model.safetensors")).unwrap();
        let m = Llama::load_dir(half.path()).unwrap();
        assert_eq!(m.dtype(), name);
        let ratio = m.weight_bytes() as f64 / f32_model.weight_bytes() as f64;
        assert!(ratio < 0.51, "{name}: x{ratio:.3} of F32's bytes");
        for p in prompts() {
            let (_, want) = greedy(&f32_model, &p, 6);
            let (_, got) = greedy(&m, &p, 6);
            // the first step has the same history on both sides
            assert!(
                (want[0] - got[0]).abs() < tol,
                "{name}: logprob {} vs F32's {}",
                got[0],
                want[0]
            );
        }
        // and it is really computed at half width (not widened at load)
        let (mut a, mut b) = (KvCache::default(), KvCache::default());
        assert_ne!(
            m.forward(&prompts()[0], &mut a).unwrap(),
            f32_model.forward(&prompts()[0], &mut b).unwrap(),
            "{name}"
        );
    }
}
