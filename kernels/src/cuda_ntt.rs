//! The CUDA backend's NTT over Fr: the values uploaded as they are, permuted (bit-reversed,
//! times the coset's powers) by `ntt_permute`, the butterfly stages, the inverse's scaling,
//! and the values downloaded: the host only packs and unpacks them. The twiddles and coset
//! powers of each length stay on the device ([`Resident`]).
//!
//! A proof's quotient term ([`crate::MsmNtt::quotient_msm`]) runs here whole: `a` and `b`
//! uploaded, `c = a∘b`, the six transforms, `h = a·b − c` and the MSM over the H bases
//! from `h` where it lies, so nothing returns to the host but the MSM's window sums.

use std::sync::{Arc, Mutex, PoisonError};

use ark_bn254::{Fr, G1Projective, g1};
use ark_ff::Field;
use cudarc::driver::{CudaSlice, PushKernelArg};

use super::{CudaBackend, grid};
use crate::Result;
use crate::gpu::Phases;
use crate::ops::QuotientMsm;
use crate::plan::{FE_BYTES, NttJob, NttKind, put_fr, read_fr};

/// Field-element tables kept on the device, by what they are, their length and the element
/// they are powers of: a prover's transforms have one or two lengths, one root each way and
/// one coset shift, so after the first proof its NTTs upload only their values (at 2^20 the
/// twiddles are 16 MiB and the coset's powers 32 MiB, ~5 and ~10 ms of host powers). At
/// most [`Resident::MAX_BYTES`] are kept; past that the table starts over.
#[derive(Default)]
pub(super) struct Resident {
    kept: Mutex<Vec<(TableKey, Table)>>,
}

/// A table kept on the device.
type Table = Arc<CudaSlice<u8>>;

/// Which table (0: twiddles, 1: coset powers), its length in elements and the Montgomery
/// limbs of the element it holds the powers of.
type TableKey = (u8, u32, [u64; 4]);

impl Resident {
    /// 2^22-element transforms: twiddles both ways (2 × 64 MiB) and the coset's powers
    /// (128 MiB).
    const MAX_BYTES: usize = 256 << 20;

    /// The table `key` on the device, made with `make` and uploaded by `upload` the first
    /// time.
    fn get(
        &self,
        key: TableKey,
        make: impl FnOnce() -> Vec<Fr>,
        upload: impl FnOnce(&[Fr]) -> Result<CudaSlice<u8>>,
    ) -> Result<Table> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, t)) = kept.iter().find(|(k, _)| *k == key) {
            return Ok(t.clone());
        }
        let t = Arc::new(upload(&make())?);
        let bytes = |k: &TableKey| k.1 as usize * FE_BYTES;
        if kept.iter().map(|(k, _)| bytes(k)).sum::<usize>() + bytes(&key) > Self::MAX_BYTES {
            kept.clear();
        }
        kept.push((key, t.clone()));
        Ok(t)
    }
}

impl CudaBackend {
    /// The twiddles of `job` (and its coset's powers, if it has a shift) on the device.
    fn tables(&self, job: &NttJob) -> Result<(Table, Option<Table>)> {
        let table = |key: TableKey, make: &dyn Fn() -> Vec<Fr>| {
            self.resident.get(key, make, |t| {
                self.upload_with(t.len() * FE_BYTES, |out| put_fr(t, out))
            })
        };
        let twiddles = table((0, job.n / 2, job.omega.0.0), &|| job.twiddles())?;
        let powers = match job.shift {
            Some(s) => Some(table((1, job.n, s.0.0), &|| job.coset_powers())?),
            None => None,
        };
        Ok((twiddles, powers))
    }

    /// [`crate::MsmNtt::quotient_msm`] on the device, the H bases read from `kept` when
    /// given, else uploaded.
    pub(super) fn quotient_on_device(
        &self,
        kept: Option<&CudaSlice<u8>>,
        job: QuotientMsm<'_>,
    ) -> Result<G1Projective> {
        let QuotientMsm {
            bases, a, b, shift, ..
        } = job;
        crate::ops::same_len("quotient", a.len(), b.len())?;
        crate::ops::same_len("msm_g1", bases.len(), a.len())?;
        let n = a.len();
        let (Some(inv), Some(fwd)) = (
            NttJob::for_len(n, NttKind::Inverse)?,
            NttJob::for_len(n, NttKind::Coset(shift))?,
        ) else {
            // one point: nothing worth a device pipeline
            let job = QuotientMsm {
                bases,
                fixed: None,
                a,
                b,
                shift,
            };
            return crate::ops::quotient_msm_by_steps(&crate::ops::Cpu, job);
        };
        let mut phases = Phases::new("cuda", "quotient_msm", n);
        let uploaded;
        let points = match kept {
            Some(points) => points,
            None => {
                uploaded = self.points::<g1::Config>(bases)?;
                &uploaded
            }
        };
        let bytes = n * FE_BYTES;
        let mut xa = self.upload_with(bytes, |out| put_fr(&a, out))?;
        let mut xb = self.upload_with(bytes, |out| put_fr(&b, out))?;
        let (tw_inv, _) = self.tables(&inv)?;
        let (tw_fwd, powers) = self.tables(&fwd)?;
        let inv_n =
            self.upload_with(FE_BYTES, |out| put_fr(&[inv.post.unwrap_or(Fr::ONE)], out))?;
        phases.mark(if kept.is_some() {
            "upload (bases kept)"
        } else {
            "upload"
        });
        let (mut xc, mut t) = (self.zeros(bytes)?, self.zeros(bytes)?);
        let count = n as u32;
        // SAFETY: fr_product(Fe*, const Fe*, const Fe*, u32) and fr_quotient(Fe*, const
        // Fe*, const Fe*, u32): thread k < n touches element k of buffers of n elements.
        unsafe { launch!(self, "quotient", &self.ntt.product, count; &mut xc, &xa, &xb, &count) }?;
        for x in [&mut xa, &mut xb, &mut xc] {
            self.ntt_kernels(&inv, x, None, &tw_inv, Some(&inv_n), &mut t)?;
            self.ntt_kernels(&fwd, &t, powers.as_deref(), &tw_fwd, None, x)?;
        }
        // SAFETY: as above.
        unsafe { launch!(self, "quotient", &self.ntt.quotient, count; &mut xa, &xb, &xc, &count) }?;
        self.msm_on_device::<g1::Config>(&self.g1, points, n, &mut xa, &mut phases)
    }

    /// `values` transformed on the device ([`NttJob`]).
    pub(super) fn ntt(&self, values: &mut [Fr], kind: NttKind) -> Result<()> {
        let mut phases = Phases::new("cuda", "ntt", values.len());
        let Some(job) = NttJob::for_len(values.len(), kind)? else {
            return Ok(());
        };
        let input = self.upload_with(values.len() * FE_BYTES, |out| put_fr(values, out))?;
        let (twiddles, powers) = self.tables(&job)?;
        let post = match job.post {
            Some(p) => Some(self.upload_with(FE_BYTES, |out| put_fr(&[p], out))?),
            None => None,
        };
        phases.mark("upload");
        let mut data = self.zeros(values.len() * FE_BYTES)?;
        self.ntt_kernels(
            &job,
            &input,
            powers.as_deref(),
            &twiddles,
            post.as_ref(),
            &mut data,
        )?;
        self.stream.synchronize().map_err(|e| self.err("ntt", e))?;
        phases.mark("kernels");
        self.download(&data, values.len() * FE_BYTES, |b| read_fr(b, values))?;
        phases.mark("download");
        Ok(())
    }

    /// The permutation of `input` into `data`, the stages and the scaling by `post`.
    fn ntt_kernels(
        &self,
        job: &NttJob,
        input: &CudaSlice<u8>,
        powers: Option<&CudaSlice<u8>>,
        twiddles: &CudaSlice<u8>,
        post: Option<&CudaSlice<u8>>,
        data: &mut CudaSlice<u8>,
    ) -> Result<()> {
        let n = job.n;
        let bits = n.trailing_zeros();
        let coset = u32::from(powers.is_some());
        let half_n = n / 2;
        // SAFETY: the signatures in kernels.cu: ntt_permute(Fe*, const Fe*, const Fe*, u32,
        // u32, u32) reads powers[i < n] only when `coset` is 1 (else `input` stands in) and
        // writes the permutation of i < n; ntt_stage(Fe*, const Fe*, u32, u32, u32): threads
        // < n/2 touch indices < n and twiddles < n/2; ntt_mul(Fe*, const Fe*, u32, u32),
        // broadcast, reads factors[0] only.
        unsafe {
            launch!(self, "ntt_permute", &self.ntt.permute, n;
                &mut *data, input, powers.unwrap_or(input), &coset, &bits, &n
            )?;
            for (half, stride) in job.stages() {
                launch!(self, "ntt_stage", &self.ntt.stage, half_n;
                    &mut *data, twiddles, &half, &stride, &half_n
                )?;
            }
            if let Some(factor) = post {
                let broadcast = 1u32;
                launch!(self, "ntt_mul", &self.ntt.mul, n; &mut *data, factor, &broadcast, &n)?;
            }
        }
        Ok(())
    }
}
