//! # fleetmesh-kernels
//!
//! Accelerated arithmetic for the prover, and the choice of where it runs.
//!
//! - [`BackendChoice`]: `auto | cpu | wgpu | cuda:N`, as taken from config and `--backend`;
//! - [`probe`]: what this machine offers — wgpu adapters (Vulkan/Metal/DX12, including the
//!   lavapipe software driver), and whether the CUDA driver and NVRTC can be loaded — found
//!   without ever touching a library that is absent, so a node without a GPU never panics;
//! - [`resolve`]: turns a choice and an [`Inventory`] into the backend to use and says why;
//! - [`ops`]: the [`MsmNtt`] trait the Groth16 prover runs its MSMs and NTTs through, with
//!   the CPU reference ([`ops::Reference`], arkworks) as every method's default, our CPU
//!   backend ([`ops::Cpu`]);
//! - [`route`]: [`route::select`], which turns a choice into a backend, and which
//!   operations a chosen GPU runs, by size (`auto`: only where it was measured to beat the
//!   CPU);
//! - [`msm`]: that CPU MSM (batch-affine Pippenger), and [`msm::Shifted`], the precomputed
//!   copies of a proving key's bases that make its MSMs cheaper, at a memory cost;
//! - [`fixed`]: what a backend prepares once per fixed base vector — those copies on the
//!   CPU, a copy kept in device memory on a GPU ([`fixed::Kept`]);
//! - [`ifma`] (x86-64): the MSM's batch-affine additions eight at a time in AVX-512
//!   IFMA lanes, chosen at run time where the CPU has them;
//! - `ntt` (x86-64): the CPU backend's Fr NTT in the same lanes;
//! - [`miller`] and [`scalar`] (x86-64): the BN254 multi-Miller loop and G1 points
//!   times 128-bit weights in the same lanes, for batch verification;
//! - [`WgpuBackend`] (feature `wgpu`): NTT and the G1 and G2 MSMs in WGSL compute shaders;
//! - [`CudaBackend`] (feature `cuda`): NTT and the G1 and G2 MSMs in CUDA C compiled at
//!   run time by NVRTC.
//!
//! Both GPU backends share the host half of their work (bucket sorting, NTT preparation)
//! and equal the CPU reference bit for bit. Without a feature its backend is a stub of the
//! same API whose constructor names the feature, so callers carry no `#[cfg]`.

mod backend;
#[cfg(feature = "cuda")]
mod cuda_backend;
#[cfg(not(feature = "cuda"))]
#[path = "cuda_backend_disabled.rs"]
mod cuda_backend;
#[cfg(test)]
mod cuda_host_check;
mod cuda_probe;
#[cfg(feature = "cuda")]
mod cuda_staging;
#[cfg(any(feature = "cuda", test))]
mod device_plan;
mod error;
pub mod fixed;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod gpu;
#[cfg(target_arch = "x86_64")]
pub mod ifma;
#[cfg(target_arch = "x86_64")]
pub mod miller;
pub mod msm;
#[cfg(target_arch = "x86_64")]
mod ntt;
pub mod ops;
#[cfg(any(feature = "wgpu", feature = "cuda", test))]
mod plan;
pub mod probe;
pub mod route;
#[cfg(target_arch = "x86_64")]
pub mod scalar;
#[cfg(feature = "wgpu")]
mod wgpu_backend;
#[cfg(not(feature = "wgpu"))]
#[path = "wgpu_backend_disabled.rs"]
mod wgpu_backend;
#[cfg(feature = "wgpu")]
mod wgpu_probe;
#[cfg(not(feature = "wgpu"))]
#[path = "wgpu_probe_disabled.rs"]
mod wgpu_probe;

pub use backend::{BackendChoice, Resolved, ResolvedBackend, resolve};
pub use cuda_backend::CudaBackend;
pub use error::{Error, Result};
pub use ops::{MsmNtt, NttDirection};
pub use probe::{CudaStatus, GpuAdapter, Inventory};
pub use wgpu_backend::WgpuBackend;
