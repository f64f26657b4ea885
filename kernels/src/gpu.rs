//! What a GPU backend implements ([`GpuKernels`]: its device, the MSMs, the NTT and a batch
//! verification's weights on the GPU, keeping bases in device memory) and the
//! [`crate::MsmNtt`] every such backend gets from it; [`Phases`] times each GPU call. The
//! host half of the work they share is in [`crate::plan`] and, for the weights, in
//! [`ScaleJob`].

use ark_bn254::{Fr, G1Affine, G1Projective, G2Affine, G2Projective, g1, g2};
use ark_ec::{AffineRepr, CurveGroup};
use ark_ff::Zero;

use crate::fixed::{Fixed, Kept};
use crate::ops::QuotientMsm;
use crate::plan::{NttKind, affine_bytes};
use crate::{Error, Result};

/// What a GPU backend implements: its device's name, the MSMs and the NTT on the GPU.
/// Every such backend gets [`crate::MsmNtt`] from it; a backend without G2 kernels
/// leaves the G2 MSM to the CPU backend (the defaults).
pub(crate) trait GpuKernels: Send + Sync {
    /// A buffer of bases in device memory ([`crate::fixed::Kept`] holds one).
    type Points: std::any::Any + Send + Sync;
    /// e.g. `wgpu (NVIDIA H200)`, `cuda:0 (NVIDIA H200 (sm_90))`.
    fn device(&self) -> String;
    /// This backend instance's identity ([`crate::fixed::new_owner`]): only it reads the
    /// copies it kept.
    fn owner(&self) -> u64;
    /// `bytes` ([`affine_bytes`] of some bases) copied into device memory, to stay.
    fn keep(&self, bytes: &[u8]) -> Result<Self::Points>;
    /// `Σ scalars[i] · bases[i]` in G1 on the GPU, reading the bases from `kept` when
    /// given (a copy of exactly these bases), else uploading them.
    fn msm_g1_gpu(
        &self,
        kept: Option<&Self::Points>,
        bases: &[G1Affine],
        scalars: &[Fr],
    ) -> Result<G1Projective>;
    /// From how many points a G2 MSM runs on the GPU ([`GpuKernels::msm_g2_gpu`]);
    /// smaller ones, and all of them where `None` (no G2 kernels), on the CPU backend.
    fn g2_gpu_from(&self) -> Option<usize> {
        None
    }
    /// `Σ scalars[i] · bases[i]` in G2 on the GPU, as [`GpuKernels::msm_g1_gpu`]; called
    /// only where [`GpuKernels::g2_gpu_from`] allows.
    fn msm_g2_gpu(
        &self,
        kept: Option<&Self::Points>,
        bases: &[G2Affine],
        scalars: &[Fr],
    ) -> Result<G2Projective> {
        let _ = kept;
        crate::MsmNtt::msm_g2(&crate::ops::Cpu, bases, scalars)
    }
    /// An NTT of `values` on the GPU (see [`NttJob`]).
    fn transform(&self, values: &mut [Fr], kind: NttKind) -> Result<()>;
    /// [`crate::MsmNtt::quotient_msm`] with the H bases read from `kept` when given. The
    /// default runs it step by step ([`crate::ops::quotient_msm_by_steps`]: each NTT and
    /// the MSM a GPU call of its own).
    fn quotient_msm_gpu(
        &self,
        kept: Option<&Self::Points>,
        job: QuotientMsm<'_>,
    ) -> Result<G1Projective>
    where
        Self: Sized,
    {
        let h = crate::ops::quotient(self, job.a, job.b, job.shift)?;
        self.msm_g1_gpu(kept, job.bases, &h)
    }
    /// `job`'s weights times its points on the GPU: `job.count()` XYZZ points
    /// ([`crate::plan::xyzz_to_projective`]'s bytes), in order.
    fn scale_gpu(&self, job: &ScaleJob) -> Result<Vec<u8>>;
}

/// The host half of a batch verification's weights on a GPU ([`crate::MsmNtt::scale_g1`]):
/// the points that are not the point at infinity, packed for upload, each one's 128-bit
/// weight as four little-endian u32 words, and where each product goes. One GPU thread
/// per point runs double-and-add over its weight's bits (`scale` in `wgsl/msm.wgsl`,
/// `scale_one` in `cuda/bn254.cuh`).
pub(crate) struct ScaleJob {
    /// [`affine_bytes`] of the points not at infinity.
    pub points: Vec<u8>,
    /// Four words per point, least significant first.
    pub weights: Vec<u32>,
    /// The index of each of those points in the caller's list.
    at: Vec<usize>,
    /// The caller's number of points.
    n: usize,
}

impl ScaleJob {
    /// The job for `weights[i] · points[i]`.
    ///
    /// # Errors
    /// [`Error::Arith`] for unequal lengths or more points than a GPU call indexes (u32).
    pub fn new(points: &[G1Affine], weights: &[u128]) -> Result<ScaleJob> {
        crate::ops::same_len("scale_g1", points.len(), weights.len())?;
        let at: Vec<usize> = (0..points.len())
            .filter(|&i| !points[i].is_zero())
            .collect();
        u32::try_from(at.len()).map_err(|_| Error::Arith {
            op: "scale_g1",
            reason: format!("{} points, more than a GPU call indexes", at.len()),
        })?;
        let kept: Vec<G1Affine> = at.iter().map(|&i| points[i]).collect();
        let weights = at
            .iter()
            .flat_map(|&i| (0..4).map(move |w| (weights[i] >> (32 * w)) as u32))
            .collect();
        Ok(ScaleJob {
            points: affine_bytes(&kept),
            weights,
            at,
            n: points.len(),
        })
    }

    /// How many points go to the GPU (one thread each).
    pub fn count(&self) -> u32 {
        self.at.len() as u32
    }

    /// The caller's `n` products in affine form, from the GPU's XYZZ results (the point
    /// at infinity where the caller's point was).
    pub fn results(&self, xyzz: &[u8]) -> Vec<G1Affine> {
        let size = xyzz.len() / self.at.len().max(1);
        let mut out = vec![G1Projective::zero(); self.n];
        for (&i, c) in self.at.iter().zip(xyzz.chunks_exact(size.max(1))) {
            out[i] = crate::plan::xyzz_to_projective::<g1::Config>(c);
        }
        G1Projective::normalize_batch(&out)
    }
}

impl<T: GpuKernels> crate::MsmNtt for T {
    fn describe(&self) -> String {
        if let Some(from) = self.g2_gpu_from() {
            format!(
                "{} (NTT and the G1 MSM on the GPU, the G2 MSM too from {from} points)",
                self.device()
            )
        } else {
            format!(
                "{} (NTT and G1 MSM on the GPU, G2 MSM on the CPU)",
                self.device()
            )
        }
    }

    fn runs_on_cpu(&self) -> bool {
        false
    }

    fn msm_g1(&self, bases: &[G1Affine], scalars: &[Fr]) -> Result<G1Projective> {
        self.msm_g1_gpu(None, bases, scalars)
    }

    fn scale_g1(&self, points: &[G1Affine], weights: &[u128]) -> Result<Vec<G1Affine>> {
        let job = ScaleJob::new(points, weights)?;
        if job.count() == 0 {
            return Ok(vec![G1Affine::zero(); points.len()]);
        }
        Ok(job.results(&self.scale_gpu(&job)?))
    }

    fn scales_on_gpu(&self, _points: usize) -> bool {
        true
    }

    fn msm_g2(&self, bases: &[G2Affine], scalars: &[Fr]) -> Result<G2Projective> {
        match self.g2_gpu_from() {
            Some(from) if bases.len() >= from => self.msm_g2_gpu(None, bases, scalars),
            _ => crate::MsmNtt::msm_g2(&crate::ops::Cpu, bases, scalars),
        }
    }

    fn keep_g1(&self, bases: &[G1Affine]) -> Result<Option<Kept<g1::Config>>> {
        let bytes = affine_bytes(bases);
        let points = Box::new(self.keep(&bytes)?);
        Ok(Some(Kept::new(bases, bytes.len(), self.owner(), points)))
    }

    fn keep_g2(&self, bases: &[G2Affine]) -> Result<Option<Kept<g2::Config>>> {
        match self.g2_gpu_from() {
            Some(from) if bases.len() >= from => {
                let bytes = affine_bytes(bases);
                let points = Box::new(self.keep(&bytes)?);
                Ok(Some(Kept::new(bases, bytes.len(), self.owner(), points)))
            }
            _ => Ok(None),
        }
    }

    fn msm_g1_fixed(
        &self,
        bases: &[G1Affine],
        fixed: &Fixed<g1::Config>,
        scalars: &[Fr],
    ) -> Result<G1Projective> {
        let kept = fixed.kept().and_then(|k| k.on(self.owner(), bases));
        self.msm_g1_gpu(kept, bases, scalars)
    }

    fn msm_g2_fixed(
        &self,
        bases: &[G2Affine],
        fixed: &Fixed<g2::Config>,
        scalars: &[Fr],
    ) -> Result<G2Projective> {
        match self.g2_gpu_from() {
            Some(from) if bases.len() >= from => {
                let kept = fixed.kept().and_then(|k| k.on(self.owner(), bases));
                self.msm_g2_gpu(kept, bases, scalars)
            }
            _ => crate::MsmNtt::msm_g2_fixed(&crate::ops::Cpu, bases, fixed, scalars),
        }
    }

    fn ntt(&self, values: &mut Vec<Fr>, direction: crate::NttDirection) -> Result<()> {
        self.transform(values, direction.into())
    }

    fn coset_ntt(&self, values: &mut Vec<Fr>, shift: Fr) -> Result<()> {
        self.transform(values, NttKind::Coset(shift))
    }

    fn quotient_msm(&self, job: QuotientMsm<'_>) -> Result<G1Projective> {
        let kept = job
            .fixed
            .and_then(Fixed::kept)
            .and_then(|k| k.on(self.owner(), job.bases));
        self.quotient_msm_gpu(kept, job)
    }
}

/// The wall-clock phases of one GPU call, reported as one DEBUG event (target
/// `gpu.phase`: backend, operation, size, total and each phase in ms) when it ends — where
/// a GPU MSM's or NTT's time goes (`MESHNODE_LOG=gpu.phase=debug`; the bench:
/// `FLEETMESH_BENCH_LOG=gpu.phase=debug`).
pub(crate) struct Phases {
    backend: &'static str,
    op: &'static str,
    n: usize,
    start: std::time::Instant,
    last: std::time::Instant,
    parts: Vec<(&'static str, f64)>,
}

impl Phases {
    /// Starts timing `op` of `n` elements on `backend`.
    pub fn new(backend: &'static str, op: &'static str, n: usize) -> Phases {
        let now = std::time::Instant::now();
        Phases {
            backend,
            op,
            n,
            start: now,
            last: now,
            parts: Vec::new(),
        }
    }

    /// Ends phase `name` (it began where the last one ended).
    pub fn mark(&mut self, name: &'static str) {
        let now = std::time::Instant::now();
        self.parts
            .push((name, (now - self.last).as_secs_f64() * 1e3));
        self.last = now;
    }
}

impl Drop for Phases {
    fn drop(&mut self) {
        let phases = self
            .parts
            .iter()
            .map(|(name, ms)| format!("{name} {ms:.2}"))
            .collect::<Vec<_>>()
            .join(", ");
        tracing::debug!(
            target: "gpu.phase",
            backend = self.backend,
            op = self.op,
            n = self.n,
            ms = self.start.elapsed().as_secs_f64() * 1e3,
            phases = %phases,
        );
    }
}
