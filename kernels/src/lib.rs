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
//! The BN254 MSM and NTT kernels (CPU reference, WGSL, CUDA via NVRTC) land here with the
//! GPU issue; the `wgpu` feature compiles the wgpu probe (without it, the probe reports
//! "built without wgpu" and the rest works unchanged).

mod backend;
mod cuda_probe;
mod error;
pub mod probe;
#[cfg(feature = "wgpu")]
mod wgpu_probe;
#[cfg(not(feature = "wgpu"))]
#[path = "wgpu_probe_disabled.rs"]
mod wgpu_probe;

pub use backend::{BackendChoice, Resolved, ResolvedBackend, resolve};
pub use error::{Error, Result};
pub use probe::{CudaStatus, GpuAdapter, Inventory};
