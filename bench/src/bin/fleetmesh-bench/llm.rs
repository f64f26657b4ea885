//! `fleetmesh-bench llm [ROUNDS]`: our Llama runtime against candle-transformers' stock
//! llama on the same weights (F32, CPU), in the same run — prefill tokens/s (128-token
//! prompt, which is also the time to first token) and greedy decode tokens/s (32 tokens
//! after the prompt, KV cache on both sides), on the tiny model and on a generated
//! ~100M-parameter one. Both must produce the same greedy ids before anything is timed.
//! Then batch 8 (eight different 128-token prompts decoded together: our
//! `forward_batch` against the stock model's batched forward), and the quasi-deterministic
//! quorum's wall time against one generation (three local executors, two run side by
//! side on the same cores), and schema-bounds decoding against free decoding (per token,
//! and the mask alone).

use std::time::{Duration, Instant};

use candle_core::{DType, Device, Tensor};
use candle_transformers::models::llama as stock;
use fleetmesh_bench::median;
use fleetmesh_inference::model::argmax;
use fleetmesh_inference::tiny::{make_model, tiny_config};
use fleetmesh_inference::{Llama, LlamaConfig};

pub(crate) const PROMPT: usize = 128;
pub(crate) const DECODE: usize = 32;

/// (prefill time, decode time for DECODE tokens, ids) with our runtime: the batched path
/// with one sequence (what `Llama::forward` runs).
pub(crate) fn ours(m: &Llama, prompt: &[u32]) -> (Duration, Duration, Vec<u32>) {
    let (p, d, mut ids) = ours_batch(m, &[prompt.to_vec()]);
    (p, d, ids.remove(0))
}

/// The same with candle-transformers' llama (a batch of one).
fn theirs(m: &stock::Llama, cfg: &stock::Config, prompt: &[u32]) -> (Duration, Duration, Vec<u32>) {
    let (p, d, mut ids) = theirs_batch(m, cfg, &[prompt.to_vec()]);
    (p, d, ids.remove(0))
}

pub(crate) const BATCH: usize = 8;

/// (prefill time, decode time, ids per sequence) for BATCH prompts run together by our
/// runtime: DECODE decode steps, as the stock model runs them.
pub(crate) fn ours_batch(m: &Llama, prompts: &[Vec<u32>]) -> (Duration, Duration, Vec<Vec<u32>>) {
    let mut run = crate::llm_gpu::greedy(m, prompts, DECODE + 1, false);
    for ids in &mut run.ids {
        ids.truncate(DECODE);
    }
    (run.prefill, run.decode, run.ids)
}

/// The same with candle-transformers' llama, the prompts (all one length) as one tensor.
fn theirs_batch(
    m: &stock::Llama,
    cfg: &stock::Config,
    prompts: &[Vec<u32>],
) -> (Duration, Duration, Vec<Vec<u32>>) {
    let dev = Device::Cpu;
    let mut cache = stock::Cache::new(true, DType::F32, cfg, &dev).expect("cache");
    let run = |rows: &[Vec<u32>], pos: usize, cache: &mut stock::Cache| -> Vec<Vec<f32>> {
        let x = Tensor::new(rows.to_vec(), &dev).expect("input");
        m.forward(&x, pos, cache)
            .and_then(|l| l.to_vec2::<f32>())
            .expect("forward")
    };
    let t = Instant::now();
    let mut logits = run(prompts, 0, &mut cache);
    let prefill = t.elapsed();
    let mut ids: Vec<Vec<u32>> = prompts.iter().map(|_| Vec::new()).collect();
    let t = Instant::now();
    for i in 0..DECODE {
        let next: Vec<Vec<u32>> = logits.iter().map(|l| vec![argmax(l)]).collect();
        for (v, n) in ids.iter_mut().zip(&next) {
            v.push(n[0]);
        }
        logits = run(&next, prompts[0].len() + i, &mut cache);
    }
    (prefill, t.elapsed(), ids)
}

/// Wall time of one greedy generation on a local executor, and of the quorum over three.
fn quorum_overhead(
    m: &std::sync::Arc<Llama>,
    prompt: &[u32],
    rounds: usize,
) -> (Duration, Duration) {
    use fleetmesh_inference::Batcher;
    use fleetmesh_inference::executor::{ExecRequest, Executor, LocalExecutor};
    use fleetmesh_inference::quorum::{Outcome, QuorumConfig, run_quorum};
    use std::sync::Arc;
    let ex: Vec<LocalExecutor> = (0..3)
        .map(|i| {
            LocalExecutor::new(
                format!("local-{i}"),
                Arc::new(Batcher::new(m.clone(), [0; 32], 1)),
            )
        })
        .collect();
    let req = ExecRequest {
        schema: None,
        prompt: prompt.to_vec(),
        max_tokens: DECODE,
        stop_ids: vec![],
    };
    let refs: Vec<&dyn Executor> = ex.iter().map(|e| e as &dyn Executor).collect();
    let cfg = QuorumConfig::default();
    let (mut one, mut q) = (vec![], vec![]);
    for _ in 0..rounds {
        let t = Instant::now();
        let e = ex[0].run(&req).expect("single run");
        one.push(t.elapsed());
        let t = Instant::now();
        let v = run_quorum(&refs, &req, &cfg).expect("quorum");
        q.push(t.elapsed());
        assert_eq!(v.outcome, Outcome::Unanimous);
        assert_eq!(v.output.expect("accepted").ids(), e.ids());
    }
    (median(one), median(q))
}

/// Token bytes for a vocabulary of `size` ids: the 256 single bytes, then (a stand-in for
/// BPE merges) seeded printable-ASCII pieces of 2–8 bytes, some with JSON punctuation.
fn synthetic_vocab(size: usize) -> Vec<Option<Vec<u8>>> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..size)
        .map(|i| {
            if i < 256 {
                return Some(vec![i as u8]);
            }
            let len = 2 + (next() % 7) as usize;
            Some((0..len).map(|_| b' ' + (next() % 95) as u8).collect())
        })
        .collect()
}

/// schema-bounds against free decoding on the same model, prompt and token count, both
/// through the batcher (greedy): per-token wall time of each, and the mask alone (the
/// constrained run's ids replayed through a fresh constraint).
fn schema_cost(
    m: &std::sync::Arc<Llama>,
    prompt: &[u32],
    rounds: usize,
    schema: &serde_json::Value,
) -> String {
    use fleetmesh_inference::batch::Job;
    use fleetmesh_inference::schema::{Constraint, Grammar, TokenVocab};
    use fleetmesh_inference::{Batcher, Sampling};
    use std::sync::Arc;
    let g = Arc::new(Grammar::compile(schema).expect("schema"));
    let size = m.config().vocab_size;
    let vocab = Arc::new(TokenVocab::new(&synthetic_vocab(size)));
    let batcher = Batcher::new(m.clone(), [0; 32], 1);
    let job = |max_tokens: usize, constrained: bool| Job {
        prompt: prompt.to_vec(),
        max_tokens,
        sampling: Sampling::default(),
        top_logprobs: 0,
        on_step: None,
        constraint: constrained.then(|| Constraint::new(g.clone(), vocab.clone(), vec![])),
    };
    let max = 2 * DECODE;
    // a Llama 3-sized vocabulary for the mask alone: its first ids are the same pieces, so
    // the chosen ids replay unchanged
    const LARGE: usize = 128_256;
    let large = Arc::new(TokenVocab::new(&synthetic_vocab(LARGE)));
    // the allowed set as the sampler takes it, or (`write`) also applied to logits as −∞
    let mask_time = |vocab: &Arc<TokenVocab>, ids: &[u32], size: usize, write: bool| {
        let mut cons = Constraint::new(g.clone(), vocab.clone(), vec![]);
        cons.start(max).expect("budget");
        let mut logits = vec![0f32; size];
        let t = Instant::now();
        for id in ids {
            match write {
                true => assert!(cons.mask(&mut logits)),
                false => assert!(cons.allow(size).is_some_and(|a| a.contains(*id))),
            }
            cons.advance(*id);
        }
        t.elapsed()
    };
    let (mut c, mut u, mut k, mut kl, mut kw) = (vec![], vec![], vec![], vec![], vec![]);
    let mut n = 0;
    for _ in 0..rounds {
        let t = Instant::now();
        let out = batcher.run(job(max, true)).expect("constrained");
        c.push(t.elapsed());
        let ids = out.output_ids();
        n = ids.len();
        let t = Instant::now();
        let free = batcher.run(job(n, false)).expect("free");
        u.push(t.elapsed());
        assert_eq!(free.steps.len(), n);
        k.push(mask_time(&vocab, &ids, size, false));
        kl.push(mask_time(&large, &ids, LARGE, false));
        kw.push(mask_time(&large, &ids, LARGE, true));
    }
    let (c, u, k, kl, kw) = (median(c), median(u), median(k), median(kl), median(kw));
    let per = |d: Duration| d.as_secs_f64() * 1e3 / n as f64;
    format!(
        "constrained {:>6.2} ms/token   free {:>6.2} ms/token   x{:.2}   (mask {:>6.1} us/token over {size} ids, {:>6.1} us over {LARGE}, {:>6.1} us with -inf written; {n} tokens incl. prefill of {})",
        per(c),
        per(u),
        c.as_secs_f64() / u.as_secs_f64(),
        k.as_secs_f64() * 1e6 / n as f64,
        kl.as_secs_f64() * 1e6 / n as f64,
        kw.as_secs_f64() * 1e6 / n as f64,
        prompt.len()
    )
}

fn bench_model(name: &str, config: &LlamaConfig, rounds: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = Instant::now();
    make_model(dir.path(), config, 7).expect("make model");
    let params: usize = {
        let (h, i, v, l) = (
            config.hidden_size,
            config.intermediate_size,
            config.vocab_size,
            config.num_hidden_layers,
        );
        let kvd = config.kv_heads() * config.head_dim();
        2 * v * h + l * (2 * h * h + 2 * kvd * h + 3 * h * i + 2 * h) + h
    };
    let ours_m = Llama::load_dir(dir.path()).expect("load ours");
    let stock_cfg: stock::LlamaConfig =
        serde_json::from_slice(&std::fs::read(dir.path().join("config.json")).expect("config"))
            .expect("stock config");
    let stock_cfg = stock_cfg.into_config(false);
    let vb = candle_nn::VarBuilder::from_buffered_safetensors(
        std::fs::read(dir.path().join("model.safetensors")).expect("weights"),
        DType::F32,
        &Device::Cpu,
    )
    .expect("var builder");
    let stock_m = stock::Llama::load(vb, &stock_cfg).expect("load stock");
    println!(
        "llm {name}: {:.1}M parameters (made in {:.1} s); prompt {PROMPT}, decode {DECODE}, {} threads",
        params as f64 / 1e6,
        t.elapsed().as_secs_f64(),
        rayon::current_num_threads()
    );
    let prompt = prompt();
    let (_, _, a) = ours(&ours_m, &prompt);
    let (_, _, b) = theirs(&stock_m, &stock_cfg, &prompt);
    assert_eq!(
        a, b,
        "{name}: our greedy ids differ from candle-transformers'"
    );
    let (mut op, mut od, mut tp, mut td) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        let (p, d, _) = ours(&ours_m, &prompt);
        op.push(p);
        od.push(d);
        let (p, d, _) = theirs(&stock_m, &stock_cfg, &prompt);
        tp.push(p);
        td.push(d);
    }
    let (op, od, tp, td) = (median(op), median(od), median(tp), median(td));
    let tps = |n: usize, d: Duration| n as f64 / d.as_secs_f64();
    println!(
        "llm {name} prefill (= TTFT)        ours {:>9.1} tok/s ({:>7.1} ms)   candle-transformers {:>9.1} tok/s ({:>7.1} ms)   x{:.2}",
        tps(PROMPT, op),
        op.as_secs_f64() * 1e3,
        tps(PROMPT, tp),
        tp.as_secs_f64() * 1e3,
        tp.as_secs_f64() / op.as_secs_f64()
    );
    println!(
        "llm {name} decode                  ours {:>9.1} tok/s               candle-transformers {:>9.1} tok/s               x{:.2}",
        tps(DECODE, od),
        tps(DECODE, td),
        td.as_secs_f64() / od.as_secs_f64()
    );

    let solo_decode = od;
    // batch 8: different prompts of the same length (the stock model batches only those)
    let prompts = batch_prompts();
    let (_, _, a) = ours_batch(&ours_m, &prompts);
    let (_, _, b) = theirs_batch(&stock_m, &stock_cfg, &prompts);
    assert_eq!(a, b, "{name}: batched greedy ids differ");
    let (mut op, mut od, mut tp, mut td) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        let (p, d, _) = ours_batch(&ours_m, &prompts);
        op.push(p);
        od.push(d);
        let (p, d, _) = theirs_batch(&stock_m, &stock_cfg, &prompts);
        tp.push(p);
        td.push(d);
    }
    let (bp, bd, sp, sd) = (median(op), median(od), median(tp), median(td));
    println!(
        "llm {name} batch {BATCH} prefill (= TTFT) ours {:>9.1} tok/s ({:>7.1} ms)   candle-transformers {:>9.1} tok/s ({:>7.1} ms)   x{:.2}",
        tps(BATCH * PROMPT, bp),
        bp.as_secs_f64() * 1e3,
        tps(BATCH * PROMPT, sp),
        sp.as_secs_f64() * 1e3,
        sp.as_secs_f64() / bp.as_secs_f64()
    );
    println!(
        "llm {name} batch {BATCH} decode         ours {:>9.1} tok/s               candle-transformers {:>9.1} tok/s               x{:.2}   (ours batch {BATCH} / batch 1: decode x{:.2})",
        tps(BATCH * DECODE, bd),
        tps(BATCH * DECODE, sd),
        sd.as_secs_f64() / bd.as_secs_f64(),
        tps(BATCH * DECODE, bd) / tps(DECODE, solo_decode)
    );

    let ours_m = std::sync::Arc::new(ours_m);
    println!(
        "llm {name} schema-bounds   {}",
        schema_cost(&ours_m, &prompt, rounds, &record_schema())
    );
    let (one, q) = quorum_overhead(&ours_m, &prompt, rounds);
    println!(
        "llm {name} quorum (2 executors agree)   single {:>7.1} ms   quorum {:>7.1} ms   overhead x{:.2} (goal <= 2.1)",
        one.as_secs_f64() * 1e3,
        q.as_secs_f64() * 1e3,
        q.as_secs_f64() / one.as_secs_f64()
    );
}

/// `fleetmesh-bench llm-mask [ROUNDS]`: schema-bounds decoding on the tiny model only —
/// constrained against free decoding and the mask alone at its vocabulary and at a
/// Llama 3-sized one (the figure issue 26 sets a goal for), without the model comparisons.
pub fn mask_only(args: &[String]) {
    let rounds = args
        .first()
        .map_or(5, |s| s.parse().unwrap_or_else(|_| super::usage()));
    let dir = tempfile::tempdir().expect("tempdir");
    make_model(dir.path(), &tiny_config(), 7).expect("tiny model");
    let m = std::sync::Arc::new(Llama::load_dir(dir.path()).expect("load"));
    let prompt = prompt();
    println!(
        "llm tiny schema-bounds   {}",
        schema_cost(&m, &prompt, rounds, &record_schema())
    );
    println!(
        "llm tiny tagged union    {}",
        schema_cost(&m, &prompt, rounds, &union_schema())
    );
}

/// The schema-bounds bench's object: a string, an integer, an enum array, a string array.
fn record_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 24},
            "age": {"type": "integer"},
            "tags": {"type": "array", "items": {"enum": ["admin", "ops", "dev"]}, "maxItems": 4},
            "notes": {"type": "array", "items": {"type": "string", "maxLength": 12}}
        },
        "required": ["name", "age", "tags", "notes"],
        "additionalProperties": false
    })
}

/// A list of Pydantic-style tagged unions (three models, a `kind` tag each) and an untagged
/// union of two objects: readings the matcher carries side by side until a tag or key
/// tells them apart.
fn union_schema() -> serde_json::Value {
    let model = |tag: &str, field: &str, ty: serde_json::Value| {
        serde_json::json!({"type": "object", "additionalProperties": false,
            "properties": {"kind": {"const": tag}, "name": {"type": "string", "maxLength": 16},
                field: ty},
            "required": ["kind", "name", field]})
    };
    serde_json::json!({
        "type": "object", "additionalProperties": false, "required": ["items", "owner"],
        "properties": {
            "items": {"type": "array", "maxItems": 3, "items": {"oneOf": [
                model("cat", "lives", serde_json::json!({"type": "integer"})),
                model("dog", "breed", serde_json::json!({"type": "string", "maxLength": 12})),
                model("fish", "fresh", serde_json::json!({"type": "boolean"}))]}},
            "owner": {"anyOf": [
                {"type": "object", "properties": {"name": {"type": "string"},
                    "age": {"type": "integer"}}, "required": ["name"]},
                {"type": "object", "properties": {"name": {"type": "string"},
                    "email": {"type": "string", "format": "email"}}, "required": ["email"]}]}
        }
    })
}

/// Runs the benchmark.
pub fn run(args: &[String]) {
    let rounds = args
        .first()
        .map_or(3, |s| s.parse().unwrap_or_else(|_| super::usage()));
    bench_model("tiny", &tiny_config(), rounds);
    bench_model("100M", &big(), rounds);
}

/// The generated ~88M-parameter model (768 wide, 12 layers, 12 query and 4 key/value
/// heads, 8 192 ids).
pub(crate) fn big() -> LlamaConfig {
    LlamaConfig {
        hidden_size: 768,
        intermediate_size: 2048,
        vocab_size: 8192,
        num_hidden_layers: 12,
        num_attention_heads: 12,
        num_key_value_heads: Some(4),
        max_position_embeddings: 1024,
        ..tiny_config()
    }
}

/// BATCH different prompts of PROMPT byte ids each.
pub(crate) fn batch_prompts() -> Vec<Vec<u32>> {
    (0..BATCH as u32)
        .map(|b| {
            (0..PROMPT as u32)
                .map(|i| (i * 37 + 11 + b * 101) % 256)
                .collect()
        })
        .collect()
}

/// The bench's prompt: PROMPT byte ids.
pub(crate) fn prompt() -> Vec<u32> {
    (0..PROMPT as u32).map(|i| (i * 37 + 11) % 256).collect()
}
