//! The CUDA backend (feature `cuda`): `kernels/cuda/bn254.cuh` and `kernels/cuda/kernels.cu`
//! compiled at run time by NVRTC for the device's compute capability, driven through cudarc
//! with dynamic loading, so building needs no CUDA toolkit.
//!
//! cudarc panics on first use when libcuda or libnvrtc is missing, so [`CudaBackend::new`]
//! first asks the `dlopen` probe (`cuda_probe.rs`) and refuses with a reason before cudarc
//! is touched. On the GPU: the G1 and G2 MSMs (the bucket plan of [`crate::plan`], then
//! the accumulation, combining and reduction kernels, instantiated per group from one
//! template over the coordinate field), the NTT over Fr (forward, inverse, coset) and a
//! batch verification's weights (`scale_g1`); G2 MSMs below
//! [`CudaBackend::set_g2_gpu_from`]'s size run on the CPU backend. Every copy goes through
//! page-locked host buffers (`cuda_staging.rs`; the points and field elements are packed
//! straight into them). The arithmetic is the
//! same code that the host check (`cuda_host_check.rs`) compiles with the C++ compiler
//! and tests against arkworks; the whole backend is checked against the CPU by
//! `bench/gpu/run.sh` on a machine with an NVIDIA GPU.
#![allow(unsafe_code)]

use std::sync::Arc;

use rayon::prelude::*;

use ark_bn254::{Fr, G1Affine, G1Projective, G2Affine, G2Projective};
use ark_ec::short_weierstrass::{Affine, Projective};
use ark_ff::Zero;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::CompileOptions;

use crate::cuda_staging::Staging;
use crate::gpu::{GpuKernels, Phases, ScaleJob};
use crate::plan::{
    FE_BYTES, GpuCurve, NttJob, NttKind, Plan, put_affine, put_fr, read_fr, xyzz_to_projective,
};
use crate::probe::CudaStatus;
use crate::{Error, Result};

const BN254_CUH: &str = include_str!("../cuda/bn254.cuh");
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
    g2_gpu_from: usize,
    /// Identity for the bases this backend keeps ([`crate::fixed::Kept`]).
    owner: u64,
    stage: CudaFunction,
    mul: CudaFunction,
    scale: CudaFunction,
    /// The NTT twiddles of each length and root used so far, kept on the device
    /// ([`Twiddles`]).
    twiddles: Twiddles,
}

/// NTT twiddles kept on the device, by transform length and root (forward and inverse
/// differ): a prover's transforms have one or two lengths, so after the first proof its
/// NTTs upload only their values (at 2^20 the twiddles are 16 MiB and took ~5 ms of host
/// powers). At most [`Twiddles::MAX_BYTES`] are kept; past that the table starts over.
#[derive(Default)]
struct Twiddles {
    kept: std::sync::Mutex<Vec<(TwiddleKey, Arc<CudaSlice<u8>>)>>,
}

/// A transform's length and its root's Montgomery limbs.
type TwiddleKey = (u32, [u64; 4]);

impl Twiddles {
    /// 2^22-element transforms both ways: 2 × 64 MiB.
    const MAX_BYTES: usize = 128 << 20;

    /// The twiddles of `job` on the device, made with `upload` the first time.
    fn get(
        &self,
        job: &NttJob,
        upload: impl FnOnce(&[Fr]) -> Result<CudaSlice<u8>>,
    ) -> Result<Arc<CudaSlice<u8>>> {
        let key = (job.n, job.omega.0.0);
        let mut kept = self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, t)) = kept.iter().find(|(k, _)| *k == key) {
            return Ok(t.clone());
        }
        let t = Arc::new(upload(&job.twiddles())?);
        let bytes = |k: &TwiddleKey| k.0 as usize / 2 * FE_BYTES;
        if kept.iter().map(|(k, _)| bytes(k)).sum::<usize>() + bytes(&key) > Self::MAX_BYTES {
            kept.clear();
        }
        kept.push((key, t.clone()));
        Ok(t)
    }
}

/// The three MSM kernels of one group (kernels.cu's `FM_MSM_KERNELS`).
struct MsmKernels {
    accumulate: CudaFunction,
    combine: CudaFunction,
    reduce: CudaFunction,
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
        let source = format!("{}\n{KERNELS_CU}", BN254_CUH.replace("#pragma once", ""));
        let started = std::time::Instant::now();
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(
            source,
            CompileOptions {
                options: vec![
                    format!("--gpu-architecture=compute_{major}{minor}"),
                    "--std=c++17".into(),
                ],
                name: Some("fleetmesh_bn254.cu".into()),
                ..Default::default()
            },
        )
        .map_err(|e| cuda_err(ordinal, "NVRTC", e))?;
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
        let f = |n: &str| module.load_function(n).map_err(|e| cuda_err(ordinal, n, e));
        let msm = |suffix: &str| -> Result<MsmKernels> {
            Ok(MsmKernels {
                accumulate: f(&format!("msm_accumulate{suffix}"))?,
                combine: f(&format!("msm_combine{suffix}"))?,
                reduce: f(&format!("msm_reduce{suffix}"))?,
            })
        };
        Ok(CudaBackend {
            ordinal,
            name: format!("{name} (sm_{major}{minor})"),
            stream: ctx.default_stream(),
            staging: Staging::new(ctx.clone()),
            g1: msm("")?,
            g2: msm("_g2")?,
            g2_gpu_from: G2_GPU_FROM,
            owner: crate::fixed::new_owner(),
            stage: f("ntt_stage")?,
            mul: f("ntt_mul")?,
            scale: f("scale_g1")?,
            twiddles: Twiddles::default(),
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

    /// `Σ scalars[i] · bases[i]` in G1 or G2 with that group's `kernels`: the host's bucket
    /// plan, then accumulation, the combining passes and the reduction on the GPU. The
    /// bases are read from `kept` (a copy of exactly these bases) when given, else
    /// uploaded.
    fn msm<P: GpuCurve>(
        &self,
        kernels: &MsmKernels,
        kept: Option<&CudaSlice<u8>>,
        bases: &[Affine<P>],
        scalars: &[Fr],
    ) -> Result<Projective<P>> {
        let xyzz_bytes = 4 * P::COORD_FE * FE_BYTES;
        let mut phases = Phases::new("cuda", P::OP, bases.len());
        let plan = Plan::new(bases, scalars)?;
        if plan.segment_count() == 0 {
            return Ok(Projective::<P>::zero());
        }
        phases.mark("plan");
        let uploaded;
        let points = match kept {
            Some(points) => points,
            None => {
                let len = bases.len() * 2 * P::COORD_FE * FE_BYTES;
                uploaded = self.upload_with(len, |out| put_affine(bases, out))?;
                &uploaded
            }
        };
        let (idx, off) = plan.indices();
        let idx = self.upload_words(idx)?;
        let segments = plan.segment_count() as u32;
        let reducers = plan.reduce_count() as u32;
        let mut partial = self.zeros(segments as usize * xyzz_bytes)?;
        let mut out = self.zeros(reducers as usize * xyzz_bytes)?;
        phases.mark(if kept.is_some() {
            "upload (bases kept)"
        } else {
            "upload"
        });
        // SAFETY: the kernels' signatures in kernels.cu take exactly these arguments in this
        // order; every index they read was built by `Plan::new` within the uploaded lengths.
        unsafe {
            self.stream
                .launch_builder(&kernels.accumulate)
                .arg(&mut partial)
                .arg(points)
                .arg(&idx)
                .arg(&off.segments)
                .arg(&segments)
                .launch(grid(segments))
                .map_err(|e| self.err(P::OP, e))?;
            for &(first, count) in &plan.passes {
                let pairs = off.pairs + 2 * first;
                self.stream
                    .launch_builder(&kernels.combine)
                    .arg(&mut partial)
                    .arg(&idx)
                    .arg(&pairs)
                    .arg(&count)
                    .launch(grid(count))
                    .map_err(|e| self.err(P::OP, e))?;
            }
            self.stream
                .launch_builder(&kernels.reduce)
                .arg(&mut out)
                .arg(&partial)
                .arg(&idx)
                .arg(&off.bucket_segments)
                .arg(&plan.chunks)
                .arg(&plan.chunk)
                .arg(&plan.buckets)
                .arg(&reducers)
                .launch(grid(reducers))
                .map_err(|e| self.err(P::OP, e))?;
        }
        self.stream.synchronize().map_err(|e| self.err(P::OP, e))?;
        phases.mark("kernels");
        let sums: Vec<Projective<P>> =
            self.download(&out, reducers as usize * xyzz_bytes, |b| {
                b.chunks_exact(xyzz_bytes).map(xyzz_to_projective).collect()
            })?;
        phases.mark("download");
        let sum = plan.combine(&sums);
        phases.mark("combine");
        Ok(sum)
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
            self.stream
                .launch_builder(&self.scale)
                .arg(&mut out)
                .arg(&points)
                .arg(&weights)
                .arg(&count)
                .launch(grid(count))
        }
        .map_err(|e| self.err("scale_g1", e))?;
        self.stream
            .synchronize()
            .map_err(|e| self.err("scale_g1", e))?;
        phases.mark("kernel");
        let bytes = self.download(&out, count as usize * xyzz_bytes, <[u8]>::to_vec)?;
        phases.mark("download");
        Ok(bytes)
    }

    fn transform(&self, values: &mut [Fr], kind: NttKind) -> Result<()> {
        let mut phases = Phases::new("cuda", "ntt", values.len());
        let Some(job) = NttJob::new(values, kind)? else {
            return Ok(());
        };
        phases.mark("prepare");
        let n = job.n;
        let mut data = self.upload_with(values.len() * FE_BYTES, |out| put_fr(values, out))?;
        let kept = self.twiddles.get(&job, |t| {
            self.upload_with(t.len() * FE_BYTES, |out| put_fr(t, out))
        })?;
        let twiddles: &CudaSlice<u8> = &kept;
        phases.mark("upload");
        let half_n = n / 2;
        for (half, stride) in job.stages() {
            // SAFETY: ntt_stage(Fe*, const Fe*, u32, u32, u32); threads < n/2 touch indices
            // < n and twiddles < n/2.
            unsafe {
                self.stream
                    .launch_builder(&self.stage)
                    .arg(&mut data)
                    .arg(twiddles)
                    .arg(&half)
                    .arg(&stride)
                    .arg(&half_n)
                    .launch(grid(half_n))
            }
            .map_err(|e| self.err("ntt_stage", e))?;
        }
        if let Some(post) = job.post {
            let factor = self.upload_with(FE_BYTES, |out| put_fr(&[post], out))?;
            let broadcast = 1u32;
            // SAFETY: ntt_mul(Fe*, const Fe*, u32, u32); broadcast, it reads factors[0] only.
            unsafe {
                self.stream
                    .launch_builder(&self.mul)
                    .arg(&mut data)
                    .arg(&factor)
                    .arg(&broadcast)
                    .arg(&n)
                    .launch(grid(n))
            }
            .map_err(|e| self.err("ntt_mul", e))?;
        }
        self.stream.synchronize().map_err(|e| self.err("ntt", e))?;
        phases.mark("kernels");
        self.download(&data, values.len() * FE_BYTES, |b| read_fr(b, values))?;
        phases.mark("download");
        Ok(())
    }
}
