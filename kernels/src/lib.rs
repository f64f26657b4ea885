//! # fleetmesh-kernels
//!
//! Accelerated arithmetic for the prover, and the choice of where it runs.
//!
//! Today this crate holds the device side that everything else builds on:
//!
//! - [`BackendChoice`]: `auto | cpu | wgpu | cuda:N`, as taken from config and `--backend`;
//! - [`probe`]: what this machine offers — wgpu adapters (Vulkan/Metal/DX12, including the
//!   lavapipe software driver), and whether the CUDA driver and NVRTC can be loaded — found
//!   without ever touching a library that is absent, so a node without a GPU never panics;
//! - [`resolve`]: turns a choice and an [`Inventory`] into the backend to use and says why.
//!
//! - [`ops`]: the [`MsmNtt`] trait the Groth16 prover runs its MSMs and NTTs through, with
//!   the CPU reference ([`ops::Cpu`], arkworks on all cores) as every method's default.
//!
//! The wgpu and CUDA MSM/NTT kernels land here with the GPU issue; the `wgpu` feature compiles the wgpu probe (without it, the probe reports
//! "built without wgpu" and the rest works unchanged).

mod backend;
#[cfg(test)]
mod cuda_host_check;
mod cuda_probe;
mod error;
mod msm;
pub mod ops;
#[cfg(any(feature = "wgpu", test))]
mod plan;
pub mod probe;
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
pub use error::{Error, Result};
pub use ops::{MsmNtt, NttDirection};
pub use probe::{CudaStatus, GpuAdapter, Inventory};
pub use wgpu_backend::WgpuBackend;
