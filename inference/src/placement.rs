//! Where a model runs: the device named in config or on the command line (`auto`, `cpu`,
//! `cuda:N`), and how executors and evidence name it. Re-exported from [`crate::model`].

use candle_core::Device;

use crate::error::{Error, Result};

/// The device named by `choice`: `cpu`, `cuda:N`, or `auto` (CUDA device 0 when this build
/// has the `cuda` feature and a GPU answers, else the CPU).
///
/// # Errors
/// [`Error::Request`] for another name, or a CUDA device this build or machine cannot open
/// (saying which).
pub fn device(choice: &str) -> Result<Device> {
    match choice {
        "cpu" => Ok(Device::Cpu),
        "auto" => Ok(Device::cuda_if_available(0).unwrap_or(Device::Cpu)),
        other => {
            let n = other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| {
                    Error::Request(format!("device {other:?} is not auto, cpu or cuda:N"))
                })?;
            if !cfg!(feature = "cuda") {
                return Err(Error::Request(format!(
                    "device cuda:{n}: this build has no CUDA runtime (build fleetmesh-inference \
                     with the `cuda` feature, which needs the CUDA toolkit)"
                )));
            }
            Device::new_cuda(n).map_err(|e| Error::Request(format!("device cuda:{n}: {e}")))
        }
    }
}

/// The engine name executors report for a model on `device`: the runtime and where it runs
/// (`fleetmesh-candle/cpu`, `fleetmesh-candle/cuda`), since a GPU's F32 arithmetic is not
/// the CPU's.
pub fn engine_name(device: &Device) -> String {
    let place = if device.is_cuda() { "cuda" } else { "cpu" };
    format!("{}/{place}", crate::executor::ENGINE)
}

/// The CUDA ordinal of `device` (None on the CPU): which GPU's evidence covers a job.
pub fn gpu_index(device: &Device) -> Option<u32> {
    match device.location() {
        candle_core::DeviceLocation::Cuda { gpu_id } => Some(gpu_id as u32),
        _ => None,
    }
}
