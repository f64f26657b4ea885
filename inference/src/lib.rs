//! # fleetmesh-inference
//!
//! LLM inference for fleetmesh: a Llama-family decoder on candle ([`Llama`]: F32, F16,
//! BF16 or GGML-quantized weights — Q8_0, Q4_0, Q4_K and Q6_K through our AVX2 kernels,
//! [`quant`] — KV cache) loaded from a Hugging Face model directory or a GGUF file; greedy
//! and seeded sampling with a per-step [`Transcript`] ([`generate`]); continuous batching of
//! concurrent generations ([`Batcher`]); chat templates ([`chat`]); executors — the local
//! runtime and, with the `remote` feature, OpenAI-compatible endpoints ([`executor`],
//! `remote`) — and the `quasi-deterministic` 2-of-3 quorum over them ([`quorum`]); and a
//! deterministic tiny model ([`tiny::make_tiny`]) so a fresh machine runs inference with no
//! download. The OpenAI-compatible HTTP API itself lives in the appliance.
//!
//! ```no_run
//! use fleetmesh_inference::{Llama, Sampling, generate, model::model_digest, tiny::make_tiny};
//! let dir = std::path::Path::new("/tmp/tiny");
//! make_tiny(dir, 7).unwrap();
//! let model = Llama::load_dir(dir).unwrap();
//! let greedy = Sampling::default();
//! let t = generate(&model, model_digest(dir).unwrap(), &[104, 105], 8, &[], &greedy).unwrap();
//! assert_eq!(t.output_ids().len(), 8);
//! ```

mod attention;
pub mod batch;
pub mod chat;
mod config;
mod error;
pub mod executor;
pub mod generate;
pub mod gguf;
pub mod model;
mod placement;
mod pool;
pub mod quant;
pub mod quorum;
#[cfg(feature = "remote")]
pub mod remote;
pub mod schema;
pub mod tiny;
pub mod tokenizer;
mod weight;

pub use batch::{Batcher, Job};
pub use config::LlamaConfig;
pub use error::{Error, Result};
pub use generate::{Decoding, Sampling, Step, Transcript, generate, generate_with};
pub use model::{KvCache, Llama};
pub use tokenizer::TextTokenizer;
