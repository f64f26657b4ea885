//! The CUDA backend (feature `cuda`): `kernels/cuda/bn254.cuh`, `msm_plan.cuh` and
//! `kernels.cu` compiled at run time by NVRTC for the device's compute capability, driven
//! through cudarc with dynamic loading, so building needs no CUDA toolkit.
//!
//! cudarc panics on first use when libcuda or libnvrtc is missing, so [`CudaBackend::new`]
//! first asks the `dlopen` probe (`cuda_probe.rs`) and refuses with a reason before cudarc
//! is touched. On the GPU:
//! - the G1 and G2 MSMs (`cuda_msm.rs`): only the scalars travel; the bucket plan is made
//!   on the device ([`crate::device_plan`]), then accumulation, combining, reduction and
//!   each window's sum, instantiated per group from one template over the coordinate
//!   field; G2 MSMs below [`CudaBackend::set_g2_gpu_from`]'s size run on the CPU backend;
//! - the NTT over Fr, forward, inverse and coset (`cuda_ntt.rs`): the permutation and the
//!   coset's powers on the device too, twiddles and powers kept there;
//! - a batch verification's weights (`scale_g1`).
//!
//! Every copy goes through page-locked host buffers (`cuda_staging.rs`; the points and
//! field elements are packed straight into them). The device code is the same code that
//! the host check (`cuda_host_check.rs`) compiles with the C++ compiler and tests against
//! arkworks, thread by thread; NVRTC's front end checks it in `.ci/test`; the whole backend
//! is checked against the CPU by `bench/gpu/run.sh` on a machine with an NVIDIA GPU.
#![allow(unsafe_code)]

use std::sync::Arc;

use rayon::prelude::*;

use ark_bn254::{Fr, G1Affine, G1Projective, G2Affine, G2Projective};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};

use crate::cuda_staging::Staging;
use crate::gpu::{GpuKernels, Phases, ScaleJob};
use crate::plan::{FE_BYTES, NttKind};
use crate::probe::CudaStatus;
use crate::{Error, Result};
use msm::{MsmKernels, PlanKernels, function};

/// Launches `kernel` on the backend's stream over `threads` threads ([`grid`]) with the
/// arguments in order; a failure is the backend's error for `op`. Unsafe: the arguments
/// must match the kernel's signature in kernels.cu and every index it derives from them
/// must be in bounds (each caller says why).
macro_rules! launch {
    ($backend:expr, $op:expr, $kernel:expr, $threads:expr; $($arg:expr),* $(,)?) => {
        $backend
            .stream
            .launch_builder($kernel)
            $(.arg($arg))*
            .launch(grid($threads))
            .map(|_| ())
            .map_err(|e| $backend.err($op, e))
    };
}

#[path = "cuda_msm.rs"]
mod msm;
#[path = "cuda_ntt.rs"]
mod ntt;

const BN254_CUH: &str = include_str!("../cuda/bn254.cuh");
const MSM_PLAN_CUH: &str = include_str!("../cuda/msm_plan.cuh");
const KERNELS_CU: &str = include_str!("../cuda/kernels.cu");
/// Threads per block.
const BLOCK: u32 = 256;
/// The default for [`CudaBackend::set_g2_gpu_from`]: G2 MSMs of fewer points run on the
/// CPU. On an H200 the GPU's G2 MSM was ×2.1 our 16-thread CPU at 2^14, the smallest size
/// timed (`auto` routes G2 MSMs from 2^14 anyway, `crate::route`). wgpu's default is 4096
/// for the compile times of some Vulkan drivers, which NVRTC does not have.
const G2_GPU_FROM: usize = 1 << 10;

fn cuda_err(ordinal: u32, what: &str, e: impl std::fmt::Display) -> Error {
    Error::Unavailable {
        backend: format!("cuda:{ordinal}"),
        reason: format!("{what}: {e}"),
    }
}

/// A CUDA device with the kernels compiled and loaded.
pub struct CudaBackend {
    ordinal: u32,
    name: String,
    stream: Arc<CudaStream>,
    /// The page-locked buffers every copy goes through.
    staging: Staging,
    g1: MsmKernels,
    g2: MsmKernels,
    /// The bucket plan's kernels both groups use.
    plan: PlanKernels,
    g2_gpu_from: usize,
    /// Identity for the bases this backend keeps ([`crate::fixed::Kept`]).
    owner: u64,
    ntt: NttKernels,
    scale: CudaFunction,
    /// The NTT twiddles and coset powers used so far, kept on the device.
    resident: ntt::Resident,
}

/// The NTT's kernels.
struct NttKernels {
    permute: CudaFunction,
    stage: CudaFunction,
    mul: CudaFunction,
    /// The quotient's `c = a∘b` and `h = a·b − c`.
    product: CudaFunction,
    quotient: CudaFunction,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("ordinal", &self.ordinal)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn grid(count: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (count.div_ceil(BLOCK).max(1), 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The kernels (`bn254.cuh`, `msm_plan.cuh`, `kernels.cu`) compiled by NVRTC to PTX for
/// compute capability `major.minor`, with `extra` options. Needs NVRTC only, no driver or
/// device.
fn compile_kernels(
    major: i32,
    minor: i32,
    extra: &[&str],
) -> std::result::Result<Ptx, CompileError> {
    let source = format!(
        "{}\n{}\n{KERNELS_CU}",
        BN254_CUH.replace("#pragma once", ""),
        MSM_PLAN_CUH.replace("#pragma once", "")
    );
    cudarc::nvrtc::compile_ptx_with_opts(
        source,
        CompileOptions {
            options: [
                format!("--gpu-architecture=compute_{major}{minor}"),
                "--std=c++17".into(),
            ]
            .into_iter()
            .chain(extra.iter().map(|o| (*o).to_owned()))
            .collect(),
            name: Some("fleetmesh_bn254.cu".into()),
            ..Default::default()
        },
    )
}

impl CudaBackend {
    /// Opens CUDA device `ordinal` and compiles the kernels with NVRTC for it (a second or
    /// two, once per process).
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the driver or NVRTC cannot be loaded, there is no such
    /// device, or compiling or loading the kernels fails (NVRTC's log is in the reason).
    pub fn new(ordinal: u32) -> Result<CudaBackend> {
        let unavailable = |reason: String| Error::Unavailable {
            backend: format!("cuda:{ordinal}"),
            reason,
        };
        match crate::cuda_probe::probe() {
            CudaStatus::Unavailable { reason } => return Err(unavailable(reason)),
            CudaStatus::Available {
                nvrtc_version: None,
                ..
            } => {
                return Err(unavailable(
                    "the CUDA driver loads but NVRTC (libnvrtc) does not".into(),
                ));
            }
            CudaStatus::Available { devices, .. } if ordinal as usize >= devices.len() => {
                return Err(unavailable(format!(
                    "only {} CUDA device(s)",
                    devices.len()
                )));
            }
            CudaStatus::Available { .. } => {}
        }
        let ctx =
            CudaContext::new(ordinal as usize).map_err(|e| cuda_err(ordinal, "context", e))?;
        let name = ctx
            .name()
            .map_err(|e| cuda_err(ordinal, "device name", e))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| cuda_err(ordinal, "compute capability", e))?;
        let started = std::time::Instant::now();
        let ptx = compile_kernels(major, minor, &[]).map_err(|e| cuda_err(ordinal, "NVRTC", e))?;
        let compiled = started.elapsed();
        let module = ctx
            .load_module(ptx)
            .map_err(|e| cuda_err(ordinal, "loading the kernels", e))?;
        // NVRTC's compile and the driver's load (its own compile of the PTX for this chip)
        // are paid at every start: how long they take, for the device script and the log
        tracing::debug!(
            target: "gpu.phase",
            backend = "cuda",
            op = "compile",
            nvrtc_ms = compiled.as_secs_f64() * 1e3,
            load_ms = (started.elapsed() - compiled).as_secs_f64() * 1e3,
        );
        let f = |n: &str| function(ordinal, &module, n);
        Ok(CudaBackend {
            ordinal,
            name: format!("{name} (sm_{major}{minor})"),
            stream: ctx.default_stream(),
            staging: Staging::new(ctx.clone()),
            g1: MsmKernels::load(&f, "")?,
            g2: MsmKernels::load(&f, "_g2")?,
            plan: PlanKernels::load(&f)?,
            g2_gpu_from: G2_GPU_FROM,
            owner: crate::fixed::new_owner(),
            ntt: NttKernels {
                permute: f("ntt_permute")?,
                stage: f("ntt_stage")?,
                mul: f("ntt_mul")?,
                product: f("fr_product")?,
                quotient: f("fr_quotient")?,
            },
            scale: f("scale_g1")?,
            resident: ntt::Resident::default(),
        })
    }

    fn err(&self, what: &str, e: impl std::fmt::Display) -> Error {
        cuda_err(self.ordinal, what, e)
    }

    /// A device buffer of `len` bytes that `fill` writes (through [`Staging`]).
    fn upload_with(&self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<CudaSlice<u8>> {
        self.staging
            .upload(&self.stream, len, fill)
            .map_err(|e| self.err("copying to the GPU", e))
    }

    fn upload(&self, bytes: &[u8]) -> Result<CudaSlice<u8>> {
        self.upload_with(bytes.len(), |out| out.copy_from_slice(bytes))
    }

    /// `words` as little-endian bytes on the device (the kernels read `u32`).
    fn upload_words(&self, words: &[u32]) -> Result<CudaSlice<u8>> {
        self.upload_with(4 * words.len(), |out| {
            out.par_chunks_mut(4)
                .zip(words.par_iter())
                .for_each(|(o, w)| o.copy_from_slice(&w.to_le_bytes()));
        })
    }

    /// The first `len` bytes of `device`, given to `read` once the stream's kernels are done.
    fn download<R>(
        &self,
        device: &CudaSlice<u8>,
        len: usize,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        self.staging
            .download(&self.stream, device, len, read)
            .map_err(|e| self.err("copying from the GPU", e))
    }

    fn zeros(&self, bytes: usize) -> Result<CudaSlice<u8>> {
        self.stream
            .alloc_zeros::<u8>(bytes.max(1))
            .map_err(|e| self.err("allocating GPU memory", e))
    }

    /// G2 MSMs of at least `points` points run on this GPU, smaller ones on the CPU
    /// (default 1024; 0: all on the GPU).
    pub fn set_g2_gpu_from(&mut self, points: usize) {
        self.g2_gpu_from = points;
    }
}

impl GpuKernels for CudaBackend {
    type Points = CudaSlice<u8>;

    fn device(&self) -> String {
        format!("cuda:{} ({})", self.ordinal, self.name)
    }

    fn owner(&self) -> u64 {
        self.owner
    }

    fn keep(&self, bytes: &[u8]) -> Result<CudaSlice<u8>> {
        self.upload(bytes)
    }

    fn msm_g1_gpu(
        &self,
        kept: Option<&CudaSlice<u8>>,
        bases: &[G1Affine],
        scalars: &[Fr],
    ) -> Result<G1Projective> {
        self.msm(&self.g1, kept, bases, scalars)
    }

    fn g2_gpu_from(&self) -> Option<usize> {
        Some(self.g2_gpu_from)
    }

    fn msm_g2_gpu(
        &self,
        kept: Option<&CudaSlice<u8>>,
        bases: &[G2Affine],
        scalars: &[Fr],
    ) -> Result<G2Projective> {
        self.msm(&self.g2, kept, bases, scalars)
    }

    fn scale_gpu(&self, job: &ScaleJob) -> Result<Vec<u8>> {
        let count = job.count();
        let mut phases = Phases::new("cuda", "scale_g1", count as usize);
        let xyzz_bytes = 4 * FE_BYTES;
        let points = self.upload(&job.points)?;
        let weights = self.upload_words(&job.weights)?;
        let mut out = self.zeros(count as usize * xyzz_bytes)?;
        phases.mark("upload");
        // SAFETY: scale_g1(Xyzz*, const Affine*, const u32*, u32); thread k < count reads
        // point k and weight words 4k..4k+4 and writes out[k], all within the buffers.
        unsafe {
            launch!(self, "scale_g1", &self.scale, count; &mut out, &points, &weights, &count)?;
        }
        self.stream
            .synchronize()
            .map_err(|e| self.err("scale_g1", e))?;
        phases.mark("kernel");
        let bytes = self.download(&out, count as usize * xyzz_bytes, <[u8]>::to_vec)?;
        phases.mark("download");
        Ok(bytes)
    }

    fn transform(&self, values: &mut [Fr], kind: NttKind) -> Result<()> {
        self.ntt(values, kind)
    }

    fn quotient_msm_gpu(
        &self,
        kept: Option<&CudaSlice<u8>>,
        job: crate::ops::QuotientMsm<'_>,
    ) -> Result<G1Projective> {
        self.quotient_on_device(kept, job)
    }
}

#[cfg(test)]
mod tests {
    /// The kernels through NVRTC's own front end (`--fdevice-syntax-only`) for the oldest
    /// and newest capabilities the backend serves: what the host compiler's front end
    /// cannot see (atomics, device-only functions, NVRTC's diagnostics) fails here on a
    /// machine with no GPU, in milliseconds. (The whole compile, NVVM included, takes
    /// minutes on a small CPU: the G2 kernels alone are 21 MB of PTX.) NVRTC comes from
    /// `images/cuda.sh libs` on `LD_LIBRARY_PATH`; `.ci/test` sets `FLEETMESH_NVRTC_CHECK=1`
    /// so that a missing NVRTC fails there.
    #[test]
    fn the_kernels_pass_nvrtc_for_ampere_and_hopper() {
        if !crate::cuda_probe::nvrtc_loads() {
            assert!(
                std::env::var("FLEETMESH_NVRTC_CHECK").as_deref() != Ok("1"),
                "FLEETMESH_NVRTC_CHECK=1 but libnvrtc does not load (LD_LIBRARY_PATH: {:?})",
                std::env::var("LD_LIBRARY_PATH")
            );
            eprintln!("SKIPPED the NVRTC check: libnvrtc does not load here");
            return;
        }
        for (major, minor) in [(8, 0), (9, 0)] {
            super::compile_kernels(major, minor, &["--fdevice-syntax-only"])
                .unwrap_or_else(|e| panic!("NVRTC for compute_{major}{minor}: {e}"));
        }
        // and a kernel NVRTC must refuse, so that the check can fail
        let bad = cudarc::nvrtc::compile_ptx_with_opts(
            "extern \"C\" __global__ void k(unsigned* p) { fm_undeclared(p); }",
            cudarc::nvrtc::CompileOptions {
                options: vec!["--fdevice-syntax-only".into()],
                ..Default::default()
            },
        );
        assert!(
            bad.is_err(),
            "NVRTC accepted a call of an undeclared function"
        );
    }
}
