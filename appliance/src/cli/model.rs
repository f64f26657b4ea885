//! `meshnode model`: model files made on this machine — a GGUF quantized from a
//! safetensors directory, and the deterministic tiny model the tests and the demo use.

use crate::cli::{ModelCommand, Outcome};

/// `meshnode model quantize|make-tiny`.
pub fn run(cmd: ModelCommand) -> anyhow::Result<Outcome> {
    match cmd {
        ModelCommand::Quantize {
            dir,
            file_type,
            out,
        } => {
            let out = out.unwrap_or_else(|| dir.join(format!("model-{}.gguf", file_type.name())));
            fleetmesh_inference::gguf::convert_dir(&dir, file_type, &out)?;
            let base = fleetmesh_inference::model::model_digest(&dir)?;
            let model = fleetmesh_inference::Llama::load_gguf(&out)?;
            println!(
                "{}",
                serde_json::json!({
                    "out": out.display().to_string(),
                    "type": file_type.name(),
                    "model_digest": hex::encode(fleetmesh_inference::model::model_digest(&out)?),
                    "base_model_digest": hex::encode(base),
                    "weight_bytes": model.weight_bytes(),
                })
            );
            Ok(Outcome::Ok)
        }
        ModelCommand::MakeTiny { dir, seed, arch } => {
            let config = fleetmesh_inference::tiny::tiny_config_for(&arch)?;
            fleetmesh_inference::tiny::make_model(&dir, &config, seed)?;
            let digest = fleetmesh_inference::model::model_digest(&dir)?;
            println!(
                "{}",
                serde_json::json!({
                    "dir": dir.display().to_string(),
                    "seed": seed,
                    "model_digest": hex::encode(digest),
                    "config": config,
                })
            );
            Ok(Outcome::Ok)
        }
    }
}
