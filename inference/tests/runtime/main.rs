//! The runtime against an independent float64 forward pass of the same architecture
//! (Hugging Face transformers' Llama), written here from the weights file alone: same
//! greedy ids, logprobs within 1e-4.

use std::collections::HashMap;
use std::path::Path;

use fleetmesh_inference::tiny::make_tiny;
use fleetmesh_inference::{Error, KvCache, Llama, LlamaConfig};

mod batch;
mod bounds;
mod chat_templates;
mod families;
mod hostile_files;
mod quantized;
mod quorum;
mod schema;
mod special_tokens;
mod strings;
mod tensor_path;
mod unions;
mod unique;

/// Greedy decoding (temperature 0) of `n` tokens: the ids and their logprobs.
fn greedy(model: &Llama, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<f64>) {
    let t = fleetmesh_inference::generate(
        model,
        [0; 32],
        prompt,
        n,
        &[],
        &fleetmesh_inference::Sampling::default(),
    )
    .unwrap();
    (t.output_ids(), t.steps.iter().map(|s| s.logprob).collect())
}

/// Each prompt's greedy ids for `steps` steps and every step's logits, the prompts
/// prefilled together, then decoded together (`forward_batch`).
fn decode_batch(m: &Llama, prompts: &[Vec<u32>], steps: usize) -> (Vec<Vec<u32>>, Vec<Vec<f32>>) {
    let mut caches: Vec<KvCache> = prompts.iter().map(|_| KvCache::default()).collect();
    let mut inputs = prompts.to_vec();
    let (mut ids, mut all) = (vec![Vec::new(); prompts.len()], Vec::new());
    for _ in 0..steps {
        let mut batch: Vec<(&[u32], &mut KvCache)> = inputs
            .iter()
            .map(Vec::as_slice)
            .zip(caches.iter_mut())
            .collect();
        let logits = m.forward_batch(&mut batch).unwrap();
        for (i, l) in logits.iter().enumerate() {
            let id = fleetmesh_inference::model::argmax(l);
            ids[i].push(id);
            inputs[i] = vec![id];
        }
        all.extend(logits);
    }
    (ids, all)
}

/// Prompts of different lengths and kinds, as byte ids.
fn sample_prompts() -> Vec<Vec<u32>> {
    [&b"hello"[..], b"the quick brown fox", b"{\"a\": 1"]
        .iter()
        .map(|p| p.iter().map(|b| u32::from(*b)).collect())
        .collect()
}

/// Greedy ids from a candle-transformers model: `forward` takes the new ids as a (1, n)
/// tensor and the position of the first, and gives logits whose last row is the next
/// token's ((1, vocab) or (1, n, vocab)).
fn greedy_candle(
    mut forward: impl FnMut(&candle_core::Tensor, usize) -> candle_core::Result<candle_core::Tensor>,
    prompt: &[u32],
    n: usize,
) -> Vec<u32> {
    let (mut got, mut pos, mut input) = (Vec::new(), 0, prompt.to_vec());
    for _ in 0..n {
        let x = candle_core::Tensor::new(input.as_slice(), &candle_core::Device::Cpu)
            .and_then(|x| x.unsqueeze(0))
            .unwrap();
        let t = forward(&x, pos).unwrap().squeeze(0).unwrap();
        let t = if t.rank() == 2 {
            t.get(t.dim(0).unwrap() - 1).unwrap()
        } else {
            t
        };
        let id = fleetmesh_inference::model::argmax(&t.to_vec1::<f32>().unwrap());
        pos += input.len();
        got.push(id);
        input = vec![id];
    }
    got
}

/// Every tensor of a safetensors file as f64, read with the `safetensors` crate.
fn weights(path: &Path) -> HashMap<String, (Vec<usize>, Vec<f64>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(name, view)| {
            assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
            let v = view
                .data()
                .chunks_exact(4)
                .map(|b| f64::from(f32::from_le_bytes(b.try_into().unwrap())))
                .collect();
            (name, (view.shape().to_vec(), v))
        })
        .collect()
}

/// y = W x for W (rows × cols) row-major.
fn matvec(w: &[f64], rows: usize, x: &[f64]) -> Vec<f64> {
    let cols = x.len();
    (0..rows)
        .map(|r| (0..cols).map(|k| w[r * cols + k] * x[k]).sum())
        .collect()
}

fn rms_norm(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let r = (ms + eps).sqrt();
    x.iter().zip(w).map(|(a, b)| a / r * b).collect()
}

/// Logits after `tokens`, recomputing every position (no cache), in f64.
fn reference_logits(
    c: &LlamaConfig,
    w: &HashMap<String, (Vec<usize>, Vec<f64>)>,
    tokens: &[u32],
) -> Vec<f64> {
    let t = |n: &str| &w[n].1;
    let (h, nh, kv, hd) = (
        c.hidden_size,
        c.num_attention_heads,
        c.kv_heads(),
        c.head_dim(),
    );
    let rope = |v: &mut [f64], pos: usize| {
        let half = hd / 2;
        for i in 0..half {
            let theta = pos as f64 / c.rope_theta.powf((2 * i) as f64 / hd as f64);
            let (a, b) = (v[i], v[i + half]);
            v[i] = a * theta.cos() - b * theta.sin();
            v[i + half] = b * theta.cos() + a * theta.sin();
        }
    };
    let mut xs: Vec<Vec<f64>> = tokens
        .iter()
        .map(|id| t("model.embed_tokens.weight")[*id as usize * h..(*id as usize + 1) * h].to_vec())
        .collect();
    for l in 0..c.num_hidden_layers {
        let p = format!("model.layers.{l}");
        let g = |n: &str| t(&format!("{p}.{n}"));
        let normed: Vec<Vec<f64>> = xs
            .iter()
            .map(|x| rms_norm(x, g("input_layernorm.weight"), c.rms_norm_eps))
            .collect();
        let mut qs = Vec::new();
        let mut ks = Vec::new();
        let mut vs = Vec::new();
        for (pos, x) in normed.iter().enumerate() {
            let mut q = matvec(g("self_attn.q_proj.weight"), h, x);
            let mut k = matvec(g("self_attn.k_proj.weight"), kv * hd, x);
            for head in 0..nh {
                rope(&mut q[head * hd..(head + 1) * hd], pos);
            }
            for head in 0..kv {
                rope(&mut k[head * hd..(head + 1) * hd], pos);
            }
            qs.push(q);
            ks.push(k);
            vs.push(matvec(g("self_attn.v_proj.weight"), kv * hd, x));
        }
        for i in 0..xs.len() {
            let mut attn = vec![0.0; h];
            for head in 0..nh {
                let kh = head / (nh / kv);
                let q = &qs[i][head * hd..(head + 1) * hd];
                let scores: Vec<f64> = (0..=i)
                    .map(|j| {
                        let k = &ks[j][kh * hd..(kh + 1) * hd];
                        q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for (j, p) in e.iter().enumerate() {
                    for d in 0..hd {
                        attn[head * hd + d] += p / sum * vs[j][kh * hd + d];
                    }
                }
            }
            let o = matvec(g("self_attn.o_proj.weight"), h, &attn);
            xs[i].iter_mut().zip(o).for_each(|(a, b)| *a += b);
            let n = rms_norm(&xs[i], g("post_attention_layernorm.weight"), c.rms_norm_eps);
            let gate = matvec(g("mlp.gate_proj.weight"), c.intermediate_size, &n);
            let up = matvec(g("mlp.up_proj.weight"), c.intermediate_size, &n);
            let act: Vec<f64> = gate
                .iter()
                .zip(&up)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            let down = matvec(g("mlp.down_proj.weight"), h, &act);
            xs[i].iter_mut().zip(down).for_each(|(a, b)| *a += b);
        }
    }
    let last = rms_norm(xs.last().unwrap(), t("model.norm.weight"), c.rms_norm_eps);
    matvec(t("lm_head.weight"), c.vocab_size, &last)
}

fn reference_greedy(
    c: &LlamaConfig,
    w: &HashMap<String, (Vec<usize>, Vec<f64>)>,
    prompt: &[u32],
    n: usize,
) -> (Vec<u32>, Vec<f64>) {
    let mut seq = prompt.to_vec();
    let (mut ids, mut lps) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let logits = reference_logits(c, w, &seq);
        let mut best = 0;
        for (i, v) in logits.iter().enumerate() {
            if *v > logits[best] {
                best = i;
            }
        }
        let max = logits[best];
        let lse = max + logits.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
        ids.push(best as u32);
        lps.push(logits[best] - lse);
        seq.push(best as u32);
    }
    (ids, lps)
}

#[test]
fn greedy_decoding_matches_an_independent_float64_forward_pass() {
    let dir = tempfile::tempdir().unwrap();
    let config = make_tiny(dir.path(), 7).unwrap();
    let model = Llama::load_dir(dir.path()).unwrap();
    let w = weights(&dir.path().join("model.safetensors"));
    for prompt in [&b"hello"[..], b"fleetmesh verifies", b"a"] {
        let prompt: Vec<u32> = prompt.iter().map(|b| u32::from(*b)).collect();
        let (ids, lps) = greedy(&model, &prompt, 12);
        let (want_ids, want_lps) = reference_greedy(&config, &w, &prompt, 12);
        assert_eq!(ids, want_ids, "prompt {prompt:?}");
        for (a, b) in lps.iter().zip(&want_lps) {
            assert!((a - b).abs() < 1e-4, "logprob {a} vs {b}");
        }
        // the output is not trivially constant: the check can fail
        assert!(ids.iter().any(|i| *i != ids[0]), "{ids:?}");
    }
}

#[test]
fn safetensors_and_gguf_give_the_same_ids() {
    let dir = tempfile::tempdir().unwrap();
    make_tiny(dir.path(), 7).unwrap();
    let st = Llama::load_dir(dir.path()).unwrap();
    let gg = Llama::load_gguf(&dir.path().join("model.gguf")).unwrap();
    assert_eq!(st.config().kv_heads(), gg.config().kv_heads());
    for prompt in [&b"hello"[..], b"the quick brown fox"] {
        let prompt: Vec<u32> = prompt.iter().map(|b| u32::from(*b)).collect();
        let (a, la) = greedy(&st, &prompt, 16);
        let (b, lb) = greedy(&gg, &prompt, 16);
        assert_eq!(a, b);
        // eps and θ travel as f32 in GGUF: logprobs agree to rounding, not bit for bit
        for (x, y) in la.iter().zip(&lb) {
            assert!((x - y).abs() < 1e-5, "{x} vs {y}");
        }
    }
    // the GGUF's q/k rows really are in llama.cpp's order: loading them without the
    // inverse permutation would change the output (so the check above can fail)
    let mut f = std::fs::File::open(dir.path().join("model.gguf")).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut f).unwrap();
    let q = content
        .tensor(&mut f, "blk.0.attn_q.weight", &candle_core::Device::Cpu)
        .unwrap()
        .dequantize(&candle_core::Device::Cpu)
        .unwrap();
    let st_q = candle_core::safetensors::load(
        dir.path().join("model.safetensors"),
        &candle_core::Device::Cpu,
    )
    .unwrap()
    .remove("model.layers.0.self_attn.q_proj.weight")
    .unwrap();
    assert_ne!(
        q.to_vec2::<f32>().unwrap(),
        st_q.to_vec2::<f32>().unwrap(),
        "the GGUF q rows are permuted"
    );
    // a GGUF that is not a llama is refused by name
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, b"GGUF not really").unwrap();
    assert!(matches!(Llama::load_gguf(&bad), Err(Error::Model { .. })));
}

#[test]
fn the_tiny_model_is_the_same_bytes_every_time_and_seed_dependent() {
    let (a, b, c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    make_tiny(a.path(), 7).unwrap();
    make_tiny(b.path(), 7).unwrap();
    make_tiny(c.path(), 8).unwrap();
    let read = |d: &Path| std::fs::read(d.join("model.safetensors")).unwrap();
    assert_eq!(read(a.path()), read(b.path()));
    assert_ne!(read(a.path()), read(c.path()));
}

#[test]
fn bad_requests_and_bad_files_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    make_tiny(dir.path(), 7).unwrap();
    let model = Llama::load_dir(dir.path()).unwrap();
    let mut cache = KvCache::default();
    assert!(matches!(
        model.forward(&[], &mut cache),
        Err(Error::Request(_))
    ));
    assert!(
        matches!(model.forward(&[256], &mut cache), Err(Error::Request(m)) if m.contains("256"))
    );
    let long = vec![1u32; 513];
    assert!(
        matches!(model.forward(&long, &mut cache), Err(Error::Request(m)) if m.contains("context"))
    );
    assert!(cache.is_empty(), "a refused request leaves the cache alone");
    // a config whose heads do not divide the width
    let mut c: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("config.json")).unwrap()).unwrap();
    c["num_attention_heads"] = 5.into();
    std::fs::write(dir.path().join("config.json"), c.to_string()).unwrap();
    let e = Llama::load_dir(dir.path()).unwrap_err();
    assert!(
        matches!(e, Error::Model { .. }) && e.to_string().contains("num_attention_heads"),
        "{e}"
    );
    // a weights file missing a tensor names it
    let other = tempfile::tempdir().unwrap();
    make_tiny(other.path(), 7).unwrap();
    let bytes = std::fs::read(other.path().join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let kept: Vec<(String, safetensors::tensor::TensorView<'_>)> = st
        .tensors()
        .into_iter()
        .filter(|(n, _)| n != "model.norm.weight")
        .collect();
    safetensors::serialize_to_file(kept, None, &other.path().join("model.safetensors")).unwrap();
    let e = Llama::load_dir(other.path()).unwrap_err();
    assert!(e.to_string().contains("model.norm.weight"), "{e}");
}

/// Our GGUF file in candle-transformers' `quantized_llama` (llama.cpp's conventions,
/// interleaved RoPE): the same greedy ids as our runtime on the safetensors weights, so the
/// file really is laid out as llama.cpp's tools expect.
#[test]
fn our_gguf_runs_in_candle_transformers_quantized_llama_with_the_same_ids() {
    use candle_core::Device;
    use candle_transformers::models::quantized_llama::ModelWeights;
    let dir = tempfile::tempdir().unwrap();
    make_tiny(dir.path(), 7).unwrap();
    let ours = Llama::load_dir(dir.path()).unwrap();
    let path = dir.path().join("model.gguf");
    let mut f = std::fs::File::open(&path).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut f).unwrap();
    let mut theirs = ModelWeights::from_gguf(content, &mut f, &Device::Cpu).unwrap();
    let prompt: Vec<u32> = b"hello".iter().map(|b| u32::from(*b)).collect();
    let (want, _) = greedy(&ours, &prompt, 10);
    let got = greedy_candle(|x, pos| theirs.forward(x, pos), &prompt, 10);
    assert_eq!(got, want);
}

#[test]
fn transcripts_record_each_step_and_digest_what_was_generated() {
    use fleetmesh_inference::model::model_digest;
    use fleetmesh_inference::{Sampling, generate};
    let dir = tempfile::tempdir().unwrap();
    make_tiny(dir.path(), 7).unwrap();
    let model = Llama::load_dir(dir.path()).unwrap();
    let md = model_digest(dir.path()).unwrap();
    // a directory's digest covers its safetensors; a GGUF file's, the file
    use sha2::Digest;
    let st = std::fs::read(dir.path().join("model.safetensors")).unwrap();
    assert_eq!(md, <[u8; 32]>::from(sha2::Sha256::digest(&st)));
    let gg = std::fs::read(dir.path().join("model.gguf")).unwrap();
    assert_eq!(
        model_digest(&dir.path().join("model.gguf")).unwrap(),
        <[u8; 32]>::from(sha2::Sha256::digest(&gg))
    );
    assert!(model_digest(&dir.path().join("absent")).is_err());
    let prompt: Vec<u32> = b"hello".iter().map(|b| u32::from(*b)).collect();
    let t = fleetmesh_inference::generate_with(
        &model,
        md,
        &prompt,
        8,
        &Sampling::default(),
        2,
        &mut |_| false,
    )
    .unwrap();
    let ids = t.output_ids();
    for s in &t.steps {
        // temperature 0 takes the most likely token; the margin is to the runner-up
        assert_eq!((s.id, s.logprob), s.top[0], "{s:?}");
        assert_eq!(s.margin, s.top[0].1 - s.top[1].1);
        assert!(s.margin >= 0.0);
    }
    // the digest commits to the model, the prompt and the output
    let again = generate(&model, md, &prompt, 8, &[], &Sampling::default()).unwrap();
    assert_eq!(t.digest(), again.digest());
    let mut other = t.clone();
    other.steps[3].id ^= 1;
    assert_ne!(other.digest(), t.digest());
    let mut other = t.clone();
    other.model_digest[0] ^= 1;
    assert_ne!(other.digest(), t.digest());
    let mut other = t.clone();
    other.prompt.push(0);
    assert_ne!(other.digest(), t.digest());
    // a stop id ends the generation after it
    let stop = t.steps[2].id;
    let short = generate(&model, md, &prompt, 8, &[stop], &Sampling::default()).unwrap();
    let first = ids.iter().position(|i| *i == stop).unwrap();
    assert_eq!(short.output_ids(), ids[..=first].to_vec());
}

#[test]
fn seeded_sampling_is_reproducible_and_its_filters_work() {
    use fleetmesh_inference::{Sampling, generate};
    let dir = tempfile::tempdir().unwrap();
    make_tiny(dir.path(), 7).unwrap();
    let model = Llama::load_dir(dir.path()).unwrap();
    let prompt: Vec<u32> = b"abc".iter().map(|b| u32::from(*b)).collect();
    let run = |s: Sampling| {
        generate(&model, [0; 32], &prompt, 12, &[], &s)
            .unwrap()
            .output_ids()
    };
    let hot = |seed| Sampling {
        temperature: 1.5,
        seed,
        ..Sampling::default()
    };
    assert_eq!(run(hot(1)), run(hot(1)), "same seed, same ids");
    assert!(
        (2..6).any(|s| run(hot(s)) != run(hot(1))),
        "different seeds differ somewhere"
    );
    let greedy_ids = run(Sampling::default());
    assert_ne!(
        run(hot(1)),
        greedy_ids,
        "temperature 1.5 is not greedy here"
    );
    // top_k = 1 and a tiny top_p both keep only the most likely token: greedy
    assert_eq!(run(Sampling { top_k: 1, ..hot(3) }), greedy_ids);
    assert_eq!(
        run(Sampling {
            top_p: 1e-9,
            ..hot(3)
        }),
        greedy_ids
    );
    // bad parameters are refused by name
    for bad in [
        Sampling {
            temperature: -1.0,
            ..Sampling::default()
        },
        Sampling {
            temperature: f64::NAN,
            ..Sampling::default()
        },
        Sampling {
            top_p: 0.0,
            ..Sampling::default()
        },
        Sampling {
            top_p: 1.5,
            ..Sampling::default()
        },
    ] {
        let e = generate(&model, [0; 32], &prompt, 2, &[], &bad).unwrap_err();
        assert!(matches!(e, Error::Request(_)), "{e}");
    }
}

#[test]
fn the_tiny_tokenizer_maps_each_byte_to_its_value_and_back() {
    use fleetmesh_inference::TextTokenizer;
    let dir = tempfile::tempdir().unwrap();
    make_tiny(dir.path(), 7).unwrap();
    let tok = TextTokenizer::load(&dir.path().join("tokenizer.json")).unwrap();
    for text in ["hello", "a b\n\tc", "ünïcødé ✓", ""] {
        let ids = tok.encode(text).unwrap();
        let bytes: Vec<u32> = text.bytes().map(u32::from).collect();
        assert_eq!(ids, bytes, "{text:?}");
        assert_eq!(tok.decode(&ids).unwrap(), text);
    }
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{}").unwrap();
    assert!(matches!(
        TextTokenizer::load(&bad),
        Err(Error::Model { .. })
    ));
}

#[test]
fn devices_are_chosen_by_name_and_a_missing_cuda_runtime_is_named() {
    use fleetmesh_inference::model::{device, engine_name, place};
    assert!(device("cpu").unwrap().is_cpu());
    let err = device("tpu:0").unwrap_err().to_string();
    assert!(err.contains("auto, cpu or cuda:N"), "{err}");
    if cfg!(feature = "cuda") {
        // a CUDA build: auto is the GPU where one answers, else the CPU saying why; an
        // ordinal past the machine's devices (or any, without the driver) is named
        let auto = place("auto").unwrap();
        if auto.device.is_cuda() {
            assert!(auto.reason.starts_with("cuda:0: "), "{}", auto.reason);
        } else {
            assert!(auto.reason.contains("no CUDA device"), "{}", auto.reason);
        }
        let err = device("cuda:999").unwrap_err();
        assert!(matches!(err, Error::Device(_)), "{err}");
        let err = err.to_string();
        assert!(
            err.contains("cuda:999")
                && (err.contains("cannot be loaded") || err.contains("CUDA device")),
            "{err}"
        );
        return;
    }
    // this build has no CUDA runtime: auto is the CPU, cuda:N says what is missing
    assert!(device("auto").unwrap().is_cpu());
    let err = device("cuda:0").unwrap_err().to_string();
    assert!(err.contains("`cuda` feature"), "{err}");
    assert_eq!(engine_name(&device("cpu").unwrap()), "fleetmesh-candle/cpu");
    // a model moved to the device it is on is the same model
    let dir = tempfile::tempdir().unwrap();
    make_tiny(dir.path(), 7).unwrap();
    let m = Llama::load_dir(dir.path()).unwrap();
    let before = greedy(&m, &[104, 105], 4);
    let m = m.to_device(&device("auto").unwrap()).unwrap();
    assert_eq!(greedy(&m, &[104, 105], 4), before);
}
