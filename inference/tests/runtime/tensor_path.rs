//! The GPU's code path — attention, its KV cache and the MLP's activation as candle tensor
//! operations (`Llama::with_tensor_path`) — run on the CPU against the host path: the same
//! greedy ids and nearly the same logits, for every family the runtime runs (grouped-query
//! heads, Qwen2's biases, Phi-3's fused projections, Mistral's sliding window past its
//! length), F32 and Q8_0, with prompts of different lengths prefilled and decoded in one
//! batch. A device run (bench/gpu/run.sh) then checks the same path with CUDA's kernels.

use fleetmesh_inference::Llama;
use fleetmesh_inference::gguf::{FileType, convert_dir};
use fleetmesh_inference::tiny::{ARCHS, TINY_WINDOW, make_model, tiny_config_for};

use crate::{decode_batch as decode, sample_prompts};

#[test]
fn the_gpu_tensor_path_on_the_cpu_gives_the_host_paths_ids_for_every_family() {
    // the sample prompts, and one longer than Mistral's window
    let mut prompts = sample_prompts();
    prompts.push(
        (0..TINY_WINDOW as u32 + 9)
            .map(|i| (i * 7 + 3) % 256)
            .collect(),
    );
    for arch in ARCHS {
        let dir = tempfile::tempdir().unwrap();
        make_model(dir.path(), &tiny_config_for(arch).unwrap(), 5).unwrap();
        let gguf = dir.path().join("model-q8_0.gguf");
        convert_dir(dir.path(), FileType::Q8_0, &gguf).unwrap();
        for (what, load) in [
            (
                "f32",
                Box::new(|| Llama::load_dir(dir.path())) as Box<dyn Fn() -> _>,
            ),
            ("q8_0", Box::new(|| Llama::load_gguf(&gguf))),
        ] {
            let (host_ids, host) = decode(&load().unwrap(), &prompts, 12);
            let (ids, logits) = decode(&load().unwrap().with_tensor_path(), &prompts, 12);
            assert_eq!(ids, host_ids, "{arch} {what}");
            let worst = host
                .iter()
                .flatten()
                .zip(logits.iter().flatten())
                .map(|(a, b)| (a - b).abs() / a.abs().max(1.0))
                .fold(0f32, f32::max);
            assert!(worst < 1e-4, "{arch} {what}: logits differ by {worst}");
        }
    }
}
