//! The CUDA backend's MSM (G1 and G2): the scalars uploaded, the bucket plan made on the
//! device ([`crate::device_plan`], `kernels/cuda/msm_plan.cuh`), then accumulation,
//! combining passes, reduction and the window passes, all on one stream with no copy back
//! until each window's sum; the host doubles its way through the windows.

use std::sync::Arc;

use ark_bn254::Fr;
use ark_ec::short_weierstrass::{Affine, Projective};
use ark_ff::Zero;
use cudarc::driver::{CudaFunction, CudaModule, CudaSlice, PushKernelArg};

use super::{CudaBackend, grid};
use crate::Result;
use crate::device_plan::DevicePlan;
use crate::gpu::Phases;
use crate::plan::{FE_BYTES, GpuCurve, put_affine, put_fr, xyzz_to_projective};

/// The kernels of one group's MSM (kernels.cu's `FM_MSM_KERNELS`).
pub(super) struct MsmKernels {
    count: CudaFunction,
    accumulate: CudaFunction,
    combine: CudaFunction,
    reduce: CudaFunction,
    window: CudaFunction,
}

/// The bucket plan's kernels that do not depend on the group.
pub(super) struct PlanKernels {
    up1: CudaFunction,
    up2: CudaFunction,
    top: CudaFunction,
    down2: CudaFunction,
    down1: CudaFunction,
    segments: CudaFunction,
    scatter: CudaFunction,
}

type Load<'a> = &'a dyn Fn(&str) -> Result<CudaFunction>;

impl MsmKernels {
    /// The group's kernels from the module: `suffix` is `""` for G1, `"_g2"` for G2.
    pub(super) fn load(f: Load<'_>, suffix: &str) -> Result<MsmKernels> {
        Ok(MsmKernels {
            count: f(&format!("msm_plan_count{suffix}"))?,
            accumulate: f(&format!("msm_accumulate{suffix}"))?,
            combine: f(&format!("msm_combine_pass{suffix}"))?,
            reduce: f(&format!("msm_reduce{suffix}"))?,
            window: f(&format!("msm_window_pass{suffix}"))?,
        })
    }
}

impl PlanKernels {
    pub(super) fn load(f: Load<'_>) -> Result<PlanKernels> {
        Ok(PlanKernels {
            up1: f("msm_plan_up1")?,
            up2: f("msm_plan_up2")?,
            top: f("msm_plan_top")?,
            down2: f("msm_plan_down2")?,
            down1: f("msm_plan_down1")?,
            segments: f("msm_plan_segments")?,
            scatter: f("msm_plan_scatter")?,
        })
    }
}

/// A function of `module` by name, as the backend's error.
pub(super) fn function(ordinal: u32, module: &Arc<CudaModule>, name: &str) -> Result<CudaFunction> {
    module
        .load_function(name)
        .map_err(|e| super::cuda_err(ordinal, name, e))
}

impl CudaBackend {
    /// `Σ scalars[i] · bases[i]` in G1 or G2 with that group's `kernels`. The bases are
    /// read from `kept` (a copy of exactly these bases) when given, else uploaded
    /// ([`CudaBackend::points`]).
    pub(super) fn msm<P: GpuCurve>(
        &self,
        kernels: &MsmKernels,
        kept: Option<&CudaSlice<u8>>,
        bases: &[Affine<P>],
        scalars: &[Fr],
    ) -> Result<Projective<P>> {
        crate::ops::same_len(P::OP, bases.len(), scalars.len())?;
        if bases.is_empty() {
            return Ok(Projective::<P>::zero());
        }
        let mut phases = Phases::new("cuda", P::OP, bases.len());
        let uploaded;
        let points = match kept {
            Some(points) => points,
            None => {
                uploaded = self.points(bases)?;
                &uploaded
            }
        };
        let mut scalars = self.upload_with(scalars.len() * FE_BYTES, |out| put_fr(scalars, out))?;
        phases.mark(if kept.is_some() {
            "upload (bases kept)"
        } else {
            "upload"
        });
        self.msm_on_device::<P>(kernels, points, bases.len(), &mut scalars, &mut phases)
    }

    /// `Σ scalars[i] · points[i]` over `n` points and scalars already on the device (Fr in
    /// Montgomery form, as [`put_fr`] packs them; used up: the plan takes them out of
    /// Montgomery form in place), marking `phases` as it goes.
    pub(super) fn msm_on_device<P: GpuCurve>(
        &self,
        kernels: &MsmKernels,
        points: &CudaSlice<u8>,
        n: usize,
        scalars: &mut CudaSlice<u8>,
        phases: &mut Phases,
    ) -> Result<Projective<P>> {
        let xyzz_bytes = 4 * P::COORD_FE * FE_BYTES;
        let d = DevicePlan::new(P::OP, n)?;
        let mut idx = self.zeros(4 * d.words)?;
        self.plan::<P>(kernels, &d, scalars, points, &mut idx)?;
        let out = self.sums::<P>(kernels, &d, points, &idx)?;
        self.stream.synchronize().map_err(|e| self.err(P::OP, e))?;
        phases.mark("kernels");
        let s = d.shape;
        let windows: Vec<Projective<P>> =
            self.download(&out, s.reduce_count() * xyzz_bytes, |b| {
                b.chunks_exact(xyzz_bytes)
                    .step_by(s.chunks as usize)
                    .map(xyzz_to_projective)
                    .collect()
            })?;
        phases.mark("download");
        let sum = s.horner(&windows);
        phases.mark("combine");
        Ok(sum)
    }

    /// `bases` uploaded as the MSM kernels read them.
    pub(super) fn points<P: GpuCurve>(&self, bases: &[Affine<P>]) -> Result<CudaSlice<u8>> {
        let len = bases.len() * 2 * P::COORD_FE * FE_BYTES;
        self.upload_with(len, |out| put_affine(bases, out))
    }

    /// Steps 1–4 of [`crate::device_plan`]: counts, scan, segments, scatter into `idx`
    /// (zeroed, `d.words` words); `scalars` leave Montgomery form.
    fn plan<P: GpuCurve>(
        &self,
        kernels: &MsmKernels,
        d: &DevicePlan,
        scalars: &mut CudaSlice<u8>,
        points: &CudaSlice<u8>,
        idx: &mut CudaSlice<u8>,
    ) -> Result<()> {
        let k = &self.plan;
        let s = d.shape;
        // SAFETY: each kernel's signature in kernels.cu takes exactly these arguments in this
        // order; every offset and count comes from `DevicePlan::new`, whose parts fit in
        // `idx` (`d.words` words), and thread counts are the kernels' `count`/`n` bounds.
        unsafe {
            launch!(self, P::OP, &kernels.count, d.n;
                &mut *scalars, points, &mut *idx, &d.count_off, &s.c, &s.windows, &s.buckets, &d.n
            )?;
            launch!(self, P::OP, &k.up1, d.up1_count;
                &mut *idx, &d.count_off, &d.up1_off, &d.total, &d.up1_count
            )?;
            launch!(self, P::OP, &k.up2, d.up2_count;
                &mut *idx, &d.up1_off, &d.up2_off, &d.up1_count, &d.up2_count
            )?;
            launch!(self, P::OP, &k.top, 1;
                &mut *idx, &d.up2_off, &d.up2_count, &d.bseg_off, &d.total
            )?;
            launch!(self, P::OP, &k.down2, d.up2_count;
                &mut *idx, &d.up1_off, &d.up2_off, &d.up1_count, &d.up2_count
            )?;
            launch!(self, P::OP, &k.down1, d.up1_count;
                &mut *idx, &d.count_off, &d.start_off, &d.up1_off, &d.bseg_off, &d.total,
                &d.up1_count
            )?;
            launch!(self, P::OP, &k.segments, d.segment_slots;
                &mut *idx, &d.seg_off, &d.bseg_off, &d.segb_off, &d.count_off, &d.start_off,
                &d.total, &d.segment_slots
            )?;
            launch!(self, P::OP, &k.scatter, d.n;
                &*scalars, &mut *idx, &d.count_off, &d.start_off, &s.c, &s.windows, &s.buckets,
                &d.n
            )?;
        }
        Ok(())
    }

    /// Steps 5–6 of [`crate::device_plan`] over the plan in `idx`: the reduction's outputs,
    /// each window's sum at its first chunk's place.
    fn sums<P: GpuCurve>(
        &self,
        kernels: &MsmKernels,
        d: &DevicePlan,
        points: &CudaSlice<u8>,
        idx: &CudaSlice<u8>,
    ) -> Result<CudaSlice<u8>> {
        let xyzz_bytes = 4 * P::COORD_FE * FE_BYTES;
        let s = d.shape;
        let reducers = s.reduce_count() as u32;
        let mut partial = self.zeros(d.segment_slots as usize * xyzz_bytes)?;
        let mut out = self.zeros(reducers as usize * xyzz_bytes)?;
        // SAFETY: as in `plan`: the signatures match, `partial` has a slot per segment slot
        // and `out` one per reducing thread; window pass threads < windows·⌊m/2⌋ read and
        // write outputs < windows·chunks.
        unsafe {
            launch!(self, P::OP, &kernels.accumulate, d.segment_slots;
                &mut partial, points, idx, &d.seg_off, &d.segment_slots
            )?;
            for k in 0..d.combine_passes() {
                launch!(self, P::OP, &kernels.combine, d.segment_slots;
                    &mut partial, idx, &d.bseg_off, &d.segb_off, &d.total, &k, &d.segment_slots
                )?;
            }
            launch!(self, P::OP, &kernels.reduce, reducers;
                &mut out, &partial, idx, &d.bseg_off, &s.chunks, &s.chunk, &s.buckets, &reducers
            )?;
            for m in d.window_passes() {
                let count = s.windows * (m / 2);
                launch!(self, P::OP, &kernels.window, count; &mut out, &s.chunks, &m, &count)?;
            }
        }
        Ok(out)
    }
}
