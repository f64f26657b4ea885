//! What this machine offers: CPU threads, wgpu adapters, the CUDA driver and NVRTC.
//!
//! Probing never panics and never loads a library that is absent: CUDA is probed by
//! `dlopen` of `libcuda.so.1` and `libnvrtc.so*` before anything calls into them.

use serde::{Deserialize, Serialize};

use crate::Error;

/// A GPU adapter as wgpu reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuAdapter {
    /// Adapter name, e.g. `NVIDIA H200` or `llvmpipe (LLVM 15.0.6, 256 bits)`.
    pub name: String,
    /// Graphics API: `vulkan`, `metal`, `dx12`, `gl`.
    pub backend: String,
    /// `DiscreteGpu`, `IntegratedGpu`, `VirtualGpu`, `Cpu` or `Other`.
    pub device_type: String,
    /// Driver name.
    pub driver: String,
    /// Driver version and details.
    pub driver_info: String,
    /// PCI vendor id.
    pub vendor: u32,
    /// PCI device id.
    pub device: u32,
}

impl GpuAdapter {
    /// Whether this adapter is a software rasterizer (lavapipe, SwiftShader, WARP).
    pub fn is_software(&self) -> bool {
        self.device_type == "Cpu"
    }
}

/// Whether CUDA can be used on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum CudaStatus {
    /// The driver loaded and initialised.
    Available {
        /// `cuDriverGetVersion`, e.g. 12040 for 12.4.
        driver_version: i32,
        /// Device names, by ordinal.
        devices: Vec<String>,
        /// NVRTC's version, if the library loads (needed to compile kernels).
        nvrtc_version: Option<(i32, i32)>,
    },
    /// Not usable, and why.
    Unavailable {
        /// Why not, in one line.
        reason: String,
    },
}

/// Everything [`probe`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Inventory {
    /// Hardware threads available to this process.
    pub cpu_threads: usize,
    /// wgpu adapters, or why wgpu could not be asked.
    #[serde(serialize_with = "ser_wgpu")]
    pub wgpu: Result<Vec<GpuAdapter>, Error>,
    /// The CUDA driver's status.
    pub cuda: CudaStatus,
}

fn ser_wgpu<S: serde::Serializer>(
    v: &Result<Vec<GpuAdapter>, Error>,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(1))?;
    match v {
        Ok(adapters) => m.serialize_entry("adapters", adapters)?,
        Err(e) => m.serialize_entry("error", &e.to_string())?,
    }
    m.end()
}

/// Probes the machine. Takes from milliseconds (nothing installed) to about a second (a
/// Vulkan driver initialising); call it once at start-up.
pub fn probe() -> Inventory {
    let cuda = crate::cuda_probe::probe();
    Inventory {
        cpu_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        wgpu: crate::wgpu_probe::adapters(),
        cuda,
    }
}
