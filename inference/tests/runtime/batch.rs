//! Continuous batching: a batch gives each sequence its solo transcript.

use super::*;

#[test]
fn a_batch_of_eight_gives_each_sequence_what_it_gets_alone() {
    use fleetmesh_inference::batch::{Job, wait};
    use fleetmesh_inference::{Batcher, Sampling, generate_with};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    make_tiny(dir.path(), 7).unwrap();
    let model = Arc::new(Llama::load_dir(dir.path()).unwrap());
    let prompts: Vec<Vec<u32>> = [
        &b"a"[..],
        b"hello there",
        b"fleetmesh verifies compute",
        b"xy",
        b"the quick brown fox jumps",
        b"0123456789",
        b"zz",
        b"quorum",
        b"one more than the batch",
    ]
    .iter()
    .map(|p| p.iter().map(|b| u32::from(*b)).collect())
    .collect();
    // greedy for some, seeded sampling for others; different lengths so sequences join
    // and leave the batch at different steps
    let sampling = |i: usize| Sampling {
        temperature: if i.is_multiple_of(2) { 0.0 } else { 0.9 },
        seed: i as u64,
        ..Sampling::default()
    };
    let max = |i: usize| 5 + 3 * i;
    let alone: Vec<_> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            generate_with(&model, [9; 32], p, max(i), &sampling(i), 3, &mut |_| false).unwrap()
        })
        .collect();
    let batcher = Batcher::new(model.clone(), [9; 32], 8);
    let tickets: Vec<_> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            batcher
                .submit(Job {
                    prompt: p.clone(),
                    max_tokens: max(i),
                    sampling: sampling(i),
                    top_logprobs: 3,
                    on_step: None,
                    constraint: None,
                })
                .unwrap()
        })
        .collect();
    for (i, (t, want)) in tickets.iter().zip(&alone).enumerate() {
        let got = wait(t).unwrap();
        assert_eq!(got.output_ids(), want.output_ids(), "sequence {i}");
        assert_eq!(got.digest(), want.digest(), "sequence {i}");
        for (a, b) in got.steps.iter().zip(&want.steps) {
            assert!((a.logprob - b.logprob).abs() < 1e-5, "{a:?} vs {b:?}");
            assert_eq!(
                a.top.iter().map(|t| t.0).collect::<Vec<_>>(),
                b.top.iter().map(|t| t.0).collect::<Vec<_>>()
            );
        }
    }
    // a step callback ends its sequence; bad prompts are refused at submission
    let stopped = batcher
        .run(Job {
            prompt: prompts[0].clone(),
            max_tokens: 50,
            sampling: Sampling::default(),
            top_logprobs: 0,
            on_step: Some(Box::new(|ids| ids.len() == 4)),
            constraint: None,
        })
        .unwrap();
    assert_eq!(stopped.output_ids(), alone[0].output_ids()[..4]);
    let err = batcher
        .submit(Job {
            prompt: vec![300],
            max_tokens: 1,
            sampling: Sampling::default(),
            top_logprobs: 0,
            on_step: None,
            constraint: None,
        })
        .unwrap_err();
    assert!(matches!(err, Error::Request(_)), "{err}");
    // a step callback that panics fails its own job; the worker keeps serving
    let err = batcher
        .run(Job {
            prompt: prompts[0].clone(),
            max_tokens: 5,
            sampling: Sampling::default(),
            top_logprobs: 0,
            on_step: Some(Box::new(|_| panic!("a broken stop test"))),
            constraint: None,
        })
        .unwrap_err();
    assert!(err.to_string().contains("panicked"), "{err}");
    // a sequence that fills the context ends there rather than failing
    let long: Vec<u32> = (0..510).map(|i| (i % 200) as u32 + 32).collect();
    let t = batcher
        .run(Job {
            prompt: long,
            max_tokens: 10,
            sampling: Sampling::default(),
            top_logprobs: 0,
            on_step: None,
            constraint: None,
        })
        .unwrap();
    assert_eq!(t.steps.len(), 2, "512 positions: 510 prompt + 2 generated");
}
