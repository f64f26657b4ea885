//! `fleetmesh-bench llm-gpu [--device cuda:N] [--bandwidth TB/s] [--skip-cpu]`: LLM
//! inference on a CUDA GPU against the CPU, for the device script (bench/gpu/run.sh,
//! section 6). Needs a build with `cuda-inference`.
//!
//! 1. Greedy ids on the GPU equal to the CPU's, F32: the tiny model, then a random-weight
//!    model of Llama-3.2-1B's shape (16 prompts × 64 tokens each, decoded as one batch);
//!    every sequence is compared, and the first divergence is printed with the CPU's top-two
//!    logit gap there (a near tie that F32 summation order can flip, or a real bug).
//! 2. On the GPU, for the 1B shape in F32, BF16 (the same weights rounded) and Q4_K_M (the
//!    same weights quantized as `meshnode model quantize` does): decode tokens/s at batch 1,
//!    8 and 32 and the time to first token of a 512-token prompt; batch 1 also as a share of
//!    the bound the GPU's memory bandwidth sets (weight bytes read per token ÷ bandwidth;
//!    --bandwidth, default from the GPU's name: H200 4.8, H100 3.35 TB/s).
//!
//! Nothing here is a test threshold: it prints what it measures, and exits 1 only when ids
//! differ (the check the device run exists for).

use std::path::Path;
use std::time::{Duration, Instant};

use candle_core::{DType, Device};
use fleetmesh_inference::gguf::{FileType, convert_dir};
use fleetmesh_inference::model::{argmax, place};
use fleetmesh_inference::tiny::{make_model, make_tiny};
use fleetmesh_inference::{KvCache, Llama, LlamaConfig};

const PROMPTS: usize = 16;
const TOKENS: usize = 64;
const TTFT_PROMPT: usize = 512;

/// Llama-3.2-1B's shape (its config.json), random weights.
fn llama32_1b() -> LlamaConfig {
    LlamaConfig {
        hidden_size: 2048,
        intermediate_size: 8192,
        vocab_size: 128_256,
        num_hidden_layers: 16,
        num_attention_heads: 32,
        num_key_value_heads: Some(8),
        rope_theta: 500_000.0,
        max_position_embeddings: 4096,
        tie_word_embeddings: true,
        ..fleetmesh_inference::tiny::tiny_config()
    }
}

/// PROMPTS different prompts of `len` ids below `vocab`.
fn prompts(n: usize, len: usize, vocab: usize) -> Vec<Vec<u32>> {
    (0..n as u64)
        .map(|b| {
            (0..len as u64)
                .map(|i| ((i * 2_654_435_761 + b * 40_503 + 17) % vocab as u64) as u32)
                .collect()
        })
        .collect()
}

/// Greedy ids for each prompt, decoded together, with the logits of every step kept for
/// the CPU (to explain a divergence); and the prefill and decode times.
pub(crate) struct Run {
    pub(crate) ids: Vec<Vec<u32>>,
    logits: Vec<Vec<Vec<f32>>>,
    pub(crate) prefill: Duration,
    pub(crate) decode: Duration,
}

/// `tokens` greedy ids per prompt (the prompts prefilled together, then `tokens − 1`
/// batched decode steps); `keep_logits` keeps every step's logits.
pub(crate) fn greedy(m: &Llama, prompts: &[Vec<u32>], tokens: usize, keep_logits: bool) -> Run {
    let mut caches: Vec<KvCache> = prompts.iter().map(|_| KvCache::default()).collect();
    let t = Instant::now();
    let mut batch: Vec<(&[u32], &mut KvCache)> = prompts
        .iter()
        .map(Vec::as_slice)
        .zip(caches.iter_mut())
        .collect();
    let mut logits = m.forward_batch(&mut batch).expect("prefill");
    let prefill = t.elapsed();
    let mut run = Run {
        ids: vec![Vec::new(); prompts.len()],
        logits: vec![Vec::new(); prompts.len()],
        prefill,
        decode: Duration::ZERO,
    };
    let t = Instant::now();
    for step in 0..tokens {
        let next: Vec<[u32; 1]> = logits.iter().map(|l| [argmax(l)]).collect();
        for (i, n) in next.iter().enumerate() {
            run.ids[i].push(n[0]);
            if keep_logits {
                run.logits[i].push(std::mem::take(&mut logits[i]));
            }
        }
        if step + 1 == tokens {
            break;
        }
        let mut batch: Vec<(&[u32], &mut KvCache)> = next
            .iter()
            .map(|n| n.as_slice())
            .zip(caches.iter_mut())
            .collect();
        logits = m.forward_batch(&mut batch).expect("decode");
    }
    run.decode = t.elapsed();
    run
}

/// The gap between the two largest logits.
fn top_gap(l: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &x in l {
        if x > a {
            b = a;
            a = x;
        } else if x > b {
            b = x;
        }
    }
    a - b
}

/// Compares the GPU's ids with the CPU's; prints the count and the first divergence.
fn compare(name: &str, cpu: &Run, gpu: &Run) -> bool {
    let equal = cpu.ids.iter().zip(&gpu.ids).filter(|(a, b)| a == b).count();
    println!(
        "{name}: greedy ids on the GPU equal to the CPU's in {equal}/{} sequences of {} tokens",
        cpu.ids.len(),
        cpu.ids[0].len()
    );
    for (s, (a, b)) in cpu.ids.iter().zip(&gpu.ids).enumerate() {
        if let Some(at) = a.iter().zip(b).position(|(x, y)| x != y) {
            println!(
                "  first divergence: sequence {s}, token {at}: CPU {} GPU {} (CPU top-two gap {:.3e})",
                a[at],
                b[at],
                top_gap(&cpu.logits[s][at])
            );
            break;
        }
    }
    equal == cpu.ids.len()
}

fn load_on(dir: &Path, device: &Device) -> Llama {
    let m = if dir.extension().is_some_and(|e| e == "gguf") {
        Llama::load_gguf(dir).expect("load gguf")
    } else {
        Llama::load_dir(dir).expect("load")
    };
    m.to_device(device).expect("to device")
}

/// Decode tokens/s at batches of 1, 8 and 32 and the time to first token of a 512-token
/// prompt, on `device`.
fn speed(name: &str, m: &Llama, bandwidth: f64) {
    let vocab = m.config().vocab_size;
    // warm-up: the driver's first launches (and PTX JIT) are not the model's speed
    let _ = greedy(m, &prompts(1, 16, vocab), 4, false);
    let ttft = greedy(m, &prompts(1, TTFT_PROMPT, vocab), 1, false).prefill;
    let mut line = format!(
        "{name}: {:.0} MiB of weights; time to first token ({TTFT_PROMPT}-token prompt) {:.1} ms;",
        m.weight_bytes() as f64 / (1 << 20) as f64,
        ttft.as_secs_f64() * 1e3
    );
    let mut one = 0.0;
    for batch in [1, 8, 32] {
        let r = greedy(m, &prompts(batch, 32, vocab), TOKENS, false);
        let tps = (batch * (TOKENS - 1)) as f64 / r.decode.as_secs_f64();
        if batch == 1 {
            one = tps;
        }
        line += &format!(" batch {batch} {tps:.0} tok/s");
        if batch > 1 {
            line += &format!(" (×{:.1})", tps / one);
        }
        line += ";";
    }
    let per_token = 1.0 / one;
    let bound = m.weight_bytes() as f64 / (bandwidth * 1e12);
    line += &format!(
        " batch 1 at {:.0} % of the {bandwidth} TB/s bound ({:.2} ms a token, bound {:.2} ms)",
        100.0 * bound / per_token,
        per_token * 1e3,
        bound * 1e3
    );
    println!("{line}");
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// Runs the section.
pub fn run(args: &[String]) {
    let choice = arg(args, "--device").unwrap_or_else(|| "cuda:0".into());
    let placement = match place(&choice) {
        Ok(p) if p.device.is_cuda() => p,
        Ok(p) => {
            eprintln!("llm-gpu: {choice} is not a CUDA device here ({})", p.reason);
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("llm-gpu: {e}");
            std::process::exit(2);
        }
    };
    println!("llm-gpu: {}", placement.reason);
    let bandwidth: f64 = arg(args, "--bandwidth")
        .and_then(|b| b.parse().ok())
        .unwrap_or(if placement.reason.contains("H100") {
            3.35
        } else {
            4.8
        });
    let gpu = placement.device;
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut same = true;

    let tiny = tmp.path().join("tiny");
    make_tiny(&tiny, 7).expect("tiny model");
    let p = prompts(PROMPTS, 24, 256);
    let cpu = greedy(&load_on(&tiny, &Device::Cpu), &p, TOKENS, true);
    let on = greedy(&load_on(&tiny, &gpu), &p, TOKENS, false);
    same &= compare("tiny f32", &cpu, &on);

    let big = tmp.path().join("1b");
    let t = Instant::now();
    make_model(&big, &llama32_1b(), 11).expect("1B-shape model");
    println!(
        "1B shape: F32 weights written in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let p = prompts(PROMPTS, 32, llama32_1b().vocab_size);
    let gpu_f32 = load_on(&big, &gpu);
    let on = greedy(&gpu_f32, &p, TOKENS, false);
    if args.iter().any(|a| a == "--skip-cpu") {
        println!("1B f32: the CPU comparison skipped (--skip-cpu)");
    } else {
        let t = Instant::now();
        let cpu = greedy(&load_on(&big, &Device::Cpu), &p, TOKENS, true);
        println!(
            "1B f32: the CPU's ids in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        same &= compare("1B f32", &cpu, &on);
    }
    speed("1B f32", &gpu_f32, bandwidth);
    drop(gpu_f32);

    // the same weights rounded to BF16, and quantized to Q4_K_M
    let bf16 = tmp.path().join("1b-bf16");
    std::fs::create_dir_all(&bf16).expect("mkdir");
    std::fs::copy(big.join("config.json"), bf16.join("config.json")).expect("config");
    let tensors = candle_core::safetensors::load(big.join("model.safetensors"), &Device::Cpu)
        .expect("read f32 weights");
    let tensors: std::collections::HashMap<String, candle_core::Tensor> = tensors
        .into_iter()
        .map(|(k, v)| (k, v.to_dtype(DType::BF16).expect("bf16")))
        .collect();
    candle_core::safetensors::save(&tensors, bf16.join("model.safetensors")).expect("write bf16");
    drop(tensors);
    speed("1B bf16", &load_on(&bf16, &gpu), bandwidth);
    let q4 = tmp.path().join("1b-q4_k_m.gguf");
    convert_dir(&big, FileType::Q4KM, &q4).expect("quantize");
    speed("1B q4_k_m", &load_on(&q4, &gpu), bandwidth);
    if !same {
        std::process::exit(1);
    }
}
