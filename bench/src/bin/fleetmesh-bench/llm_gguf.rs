//! `fleetmesh-bench llm-gguf [ROUNDS]`: our runtime against llama.cpp on the same GGUF
//! files — the generated 88M model written at F32, Q8_0 and Q4_K_M — batch 1, greedy, the
//! bench's 128-id prompt: prefill and decode tokens/s on both sides in the same run, the
//! weights' memory, and the ids compared (the first divergence reported where they differ);
//! and our batch-8 decode (eight prompts decoded together) against our batch 1.
//! llama.cpp runs through PyPI llama-cpp-python (`bench/llm_llamacpp.py`) with as many
//! threads as ours; `bench/llm.sh` builds it and sets `FLEETMESH_LLAMA_CPP_PYTHON`.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use fleetmesh_bench::median;
use fleetmesh_inference::Llama;
use fleetmesh_inference::gguf::{FileType, convert_dir};
use fleetmesh_inference::quant;
use fleetmesh_inference::tiny::make_model;

use super::llm::{BATCH, DECODE, PROMPT, batch_prompts, big, ours, ours_batch, prompt};

/// llama.cpp's figures on one file: (median prefill, median decode, ids, version).
fn llama_cpp(
    python: &str,
    path: &std::path::Path,
    prompt: &[u32],
    rounds: usize,
) -> (Duration, Duration, Vec<u32>, String) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/llm_llamacpp.py");
    let mut child = Command::new(python)
        .args([
            script,
            path.to_str().expect("utf-8 path"),
            &rayon::current_num_threads().to_string(),
            &rounds.to_string(),
            &DECODE.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start llama.cpp's script");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(serde_json::to_string(prompt).expect("ids").as_bytes())
        .expect("send the prompt");
    let out = child.wait_with_output().expect("llama.cpp's script");
    assert!(
        out.status.success(),
        "llama.cpp's script failed on {}",
        path.display()
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("its JSON");
    let times = |k: &str| -> Duration {
        median(
            v[k].as_array()
                .expect("times")
                .iter()
                .map(|s| Duration::from_secs_f64(s.as_f64().expect("seconds")))
                .collect(),
        )
    };
    let ids = v["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|i| i.as_u64().expect("id") as u32)
        .collect();
    (
        times("prefill_s"),
        times("decode_s"),
        ids,
        v["llama_cpp_python"].as_str().unwrap_or("?").to_owned(),
    )
}

/// Runs the comparison; `--ours-only TYPE` times our runtime alone on one file type, many
/// rounds (for a profiler), with our quantized kernels and with candle's in alternate
/// rounds where both can run, or with one of them (`ours`, `candle`).
pub fn run(args: &[String]) {
    if let [flag, ty, rest @ ..] = args
        && flag == "--ours-only"
    {
        let ft = FileType::parse(ty).unwrap_or_else(|| super::usage());
        let rounds = rest
            .first()
            .map_or(20, |s| s.parse().unwrap_or_else(|_| super::usage()));
        let sides: &[bool] = match rest.get(1).map(String::as_str) {
            None if quant::active() => &[true, false],
            None | Some("candle") => &[false],
            Some("ours") => &[true],
            Some(_) => super::usage(),
        };
        return ours_only(ft, rounds, sides);
    }
    let rounds = args
        .first()
        .map_or(3, |s| s.parse().unwrap_or_else(|_| super::usage()));
    let Ok(python) = std::env::var("FLEETMESH_LLAMA_CPP_PYTHON") else {
        eprintln!(
            "llm-gguf needs llama.cpp: run bench/llm.sh, or set FLEETMESH_LLAMA_CPP_PYTHON to a \
             Python with llama-cpp-python"
        );
        std::process::exit(2);
    };
    let dir = tempfile::tempdir().expect("tempdir");
    make_model(dir.path(), &big(), 7).expect("make model");
    let prompt = prompt();
    let tps = |n: usize, d: Duration| n as f64 / d.as_secs_f64();
    for ft in [FileType::F32, FileType::Q8_0, FileType::Q4KM] {
        let path = dir.path().join(format!("model-{}.gguf", ft.name()));
        convert_dir(dir.path(), ft, &path).expect("write the GGUF");
        let m = Llama::load_gguf(&path).expect("load ours");
        let (lp, ld, theirs, version) = llama_cpp(&python, &path, &prompt, rounds);
        let (_, _, mine) = ours(&m, &prompt);
        let prompts = batch_prompts();
        let (mut op, mut od, mut bd) = (vec![], vec![], vec![]);
        for _ in 0..rounds {
            let (p, d, _) = ours(&m, &prompt);
            op.push(p);
            od.push(d);
            bd.push(ours_batch(&m, &prompts).1);
        }
        let (op, od, bd) = (median(op), median(od), median(bd));
        let name = ft.name();
        println!(
            "llm-gguf 88M {name:<6} weights {:>6.1} MiB; llama.cpp (llama-cpp-python {version}), {} threads",
            m.weight_bytes() as f64 / (1 << 20) as f64,
            rayon::current_num_threads()
        );
        println!(
            "llm-gguf 88M {name:<6} prefill   ours {:>8.1} tok/s   llama.cpp {:>8.1} tok/s   x{:.2}",
            tps(PROMPT, op),
            tps(PROMPT, lp),
            lp.as_secs_f64() / op.as_secs_f64()
        );
        println!(
            "llm-gguf 88M {name:<6} decode    ours {:>8.1} tok/s   llama.cpp {:>8.1} tok/s   x{:.2}",
            tps(DECODE, od),
            tps(DECODE, ld),
            ld.as_secs_f64() / od.as_secs_f64()
        );
        println!(
            "llm-gguf 88M {name:<6} batch {BATCH} decode ours {:>8.1} tok/s   x{:.2} of batch 1",
            tps(BATCH * DECODE, bd),
            tps(BATCH * DECODE, bd) / tps(DECODE, od)
        );
        match mine.iter().zip(&theirs).position(|(a, b)| a != b) {
            None => println!("llm-gguf 88M {name:<6} ids       equal ({DECODE} of {DECODE})"),
            Some(i) => println!(
                "llm-gguf 88M {name:<6} ids       first divergence at output {i}: ours {} llama.cpp {}",
                mine[i], theirs[i]
            ),
        }
    }
}

fn ours_only(ft: FileType, rounds: usize, sides: &[bool]) {
    let dir = tempfile::tempdir().expect("tempdir");
    make_model(dir.path(), &big(), 7).expect("make model");
    let path = dir.path().join("m.gguf");
    convert_dir(dir.path(), ft, &path).expect("write the GGUF");
    let m = Llama::load_gguf(&path).expect("load ours");
    let prompt = prompt();
    let mut times = vec![(vec![], vec![], vec![]); sides.len()];
    let prompts = batch_prompts();
    for _ in 0..rounds {
        for (side, t) in sides.iter().zip(&mut times) {
            quant::set_enabled(*side);
            let (p, d, _) = ours(&m, &prompt);
            t.0.push(p);
            t.1.push(d);
            t.2.push(ours_batch(&m, &prompts).1);
        }
    }
    quant::set_enabled(true);
    for (side, (op, od, bd)) in sides.iter().zip(times) {
        let (od, bd) = (median(od), median(bd));
        println!(
            "llm-gguf 88M {} ours ({} kernels): prefill {:.1} tok/s, decode {:.1} tok/s, batch {BATCH} decode {:.1} tok/s (x{:.2})",
            ft.name(),
            if *side { "our" } else { "candle's" },
            PROMPT as f64 / median(op).as_secs_f64(),
            DECODE as f64 / od.as_secs_f64(),
            (BATCH * DECODE) as f64 / bd.as_secs_f64(),
            od.as_secs_f64() * BATCH as f64 / bd.as_secs_f64()
        );
    }
}
