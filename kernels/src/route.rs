//! Where each of the prover's operations runs when a GPU backend was chosen: [`GpuFrom`]
//! says from how many points (MSM) or elements (NTT) an operation goes to the GPU, and
//! [`Routed`] sends every call below that to our CPU backend instead.
//!
//! An explicit choice (`wgpu`, `cuda:N`) puts everything on the GPU ([`GpuFrom::ALL`]; a
//! backend's own G2 threshold still applies). `auto` uses [`GpuFrom::measured`]: the GPU
//! only where `bench/gpu/run.sh` measured it beating our CPU backend on the same machine
//! (bench/RESULTS.md, "On an NVIDIA H200"). Re-measure and change these numbers together
//! with that table. [`select`] is where a choice becomes the backend the prover runs on.

use ark_bn254::{Fr, G1Affine, G1Projective, G2Affine, G2Projective, g1, g2};

use crate::fixed::{Fixed, Kept};
use crate::ops::{Cpu, MsmNtt, NttDirection, QuotientMsm};
use crate::{BackendChoice, Inventory, ResolvedBackend, Result, resolve};

/// An operation that never goes to the GPU.
pub const NEVER: usize = usize::MAX;

/// From how many points (MSMs) or elements (NTTs) each operation runs on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuFrom {
    /// G1 MSMs.
    pub msm_g1: usize,
    /// G2 MSMs.
    pub msm_g2: usize,
    /// NTTs (forward, inverse and coset).
    pub ntt: usize,
    /// A batch verification's weights ([`MsmNtt::scale_g1`]), counted in points (two per
    /// proof).
    pub verify: usize,
}

impl GpuFrom {
    /// Everything on the GPU: what an explicit GPU choice means.
    pub const ALL: GpuFrom = GpuFrom {
        msm_g1: 0,
        msm_g2: 0,
        ntt: 0,
        verify: 0,
    };

    /// Nothing on the GPU.
    pub const NONE: GpuFrom = GpuFrom {
        msm_g1: NEVER,
        msm_g2: NEVER,
        ntt: NEVER,
        verify: NEVER,
    };

    /// What `auto` uses on `backend`, from the recorded runs on an H200 (16 host threads;
    /// bench/RESULTS.md, the second run, after the host half of the GPU paths was reworked
    /// and with a loaded key's bases kept on the device):
    /// - CUDA: G1 MSMs ×1.7 our CPU at 2^14 (the smallest size timed), ×2.8–4.3 from 2^16
    ///   to 2^20; G2 MSMs ×2.1 at 2^14, ×2.9–4.8 above; the NTT ×0.65 at 2^14, ×1.14 at
    ///   2^16, ×1.85 at 2^18, ×1.14 at 2^20 (its time is in the copies, not the kernels):
    ///   MSMs from 2^14 points, NTTs from 2^17 elements. A batch verification's weights
    ///   (two points per proof) ×0.81 at 256 proofs, ×2.44 at 4 096 against the CPU batch
    ///   verifier: from 2^13 points (the kernel's ~5 ms is one scalar multiplication's
    ///   latency, whatever the batch).
    /// - wgpu (NVIDIA's Vulkan driver): slower than our CPU at nearly every size and
    ///   operation (MSMs ×0.2–0.7), so nothing; `auto` does not pick it
    ///   ([`crate::resolve`]).
    #[must_use]
    pub fn measured(backend: &ResolvedBackend) -> GpuFrom {
        match backend {
            ResolvedBackend::Cuda(_) => GpuFrom {
                msm_g1: 1 << 14,
                msm_g2: 1 << 14,
                ntt: 1 << 17,
                verify: 1 << 13,
            },
            ResolvedBackend::Wgpu(_) | ResolvedBackend::Cpu => GpuFrom::NONE,
        }
    }

    /// The routing for `backend` when the operator chose `choice`.
    #[must_use]
    pub fn for_choice(choice: BackendChoice, backend: &ResolvedBackend) -> GpuFrom {
        match (choice, backend) {
            (_, ResolvedBackend::Cpu) => GpuFrom::NONE,
            (BackendChoice::Auto, b) => GpuFrom::measured(b),
            _ => GpuFrom::ALL,
        }
    }

    /// Where each operation runs, for `meshnode doctor` and the log: `(operation, place)`
    /// with places like `cpu`, `cuda:0` or `cuda:0 from 16384 points, cpu below`.
    #[must_use]
    pub fn placement(&self, device: &str) -> [(&'static str, String); 4] {
        let place = |from: usize, unit: &str| match from {
            0 => device.to_owned(),
            NEVER => "cpu".to_owned(),
            n => format!("{device} from {n} {unit}, cpu below"),
        };
        [
            ("ntt", place(self.ntt, "elements")),
            ("msm_g1", place(self.msm_g1, "points")),
            ("msm_g2", place(self.msm_g2, "points")),
            ("verify", place(self.verify, "points")),
        ]
    }
}

/// A GPU backend behind [`GpuFrom`]: each call runs on the GPU from its size on, on our
/// CPU backend ([`Cpu`], with a key's tables) below.
pub struct Routed {
    gpu: Box<dyn MsmNtt>,
    from: GpuFrom,
}

impl Routed {
    /// Routes `gpu`'s operations by `from`.
    #[must_use]
    pub fn new(gpu: Box<dyn MsmNtt>, from: GpuFrom) -> Routed {
        Routed { gpu, from }
    }
}

impl MsmNtt for Routed {
    fn describe(&self) -> String {
        let places = self
            .from
            .placement("GPU")
            .iter()
            .map(|(op, place)| format!("{op}: {place}"))
            .collect::<Vec<_>>()
            .join("; ");
        format!("{} routed by size ({places})", self.gpu.describe())
    }

    fn runs_on_cpu(&self) -> bool {
        self.from.msm_g1 == NEVER && self.from.msm_g2 == NEVER
    }

    fn msm_g1(&self, bases: &[G1Affine], scalars: &[Fr]) -> Result<G1Projective> {
        if bases.len() >= self.from.msm_g1 {
            self.gpu.msm_g1(bases, scalars)
        } else {
            Cpu.msm_g1(bases, scalars)
        }
    }

    fn msm_g2(&self, bases: &[G2Affine], scalars: &[Fr]) -> Result<G2Projective> {
        if bases.len() >= self.from.msm_g2 {
            self.gpu.msm_g2(bases, scalars)
        } else {
            Cpu.msm_g2(bases, scalars)
        }
    }

    fn uses_tables(&self, points: usize) -> bool {
        points < self.from.msm_g1 || points < self.from.msm_g2
    }

    fn keep_g1(&self, bases: &[G1Affine]) -> Result<Option<Kept<g1::Config>>> {
        if bases.len() >= self.from.msm_g1 {
            self.gpu.keep_g1(bases)
        } else {
            Ok(None)
        }
    }

    fn keep_g2(&self, bases: &[G2Affine]) -> Result<Option<Kept<g2::Config>>> {
        if bases.len() >= self.from.msm_g2 {
            self.gpu.keep_g2(bases)
        } else {
            Ok(None)
        }
    }

    fn msm_g1_fixed(
        &self,
        bases: &[G1Affine],
        fixed: &Fixed<g1::Config>,
        scalars: &[Fr],
    ) -> Result<G1Projective> {
        if bases.len() >= self.from.msm_g1 {
            self.gpu.msm_g1_fixed(bases, fixed, scalars)
        } else {
            Cpu.msm_g1_fixed(bases, fixed, scalars)
        }
    }

    fn msm_g2_fixed(
        &self,
        bases: &[G2Affine],
        fixed: &Fixed<g2::Config>,
        scalars: &[Fr],
    ) -> Result<G2Projective> {
        if bases.len() >= self.from.msm_g2 {
            self.gpu.msm_g2_fixed(bases, fixed, scalars)
        } else {
            Cpu.msm_g2_fixed(bases, fixed, scalars)
        }
    }

    fn scale_g1(&self, points: &[G1Affine], weights: &[u128]) -> Result<Vec<G1Affine>> {
        if points.len() >= self.from.verify {
            self.gpu.scale_g1(points, weights)
        } else {
            Cpu.scale_g1(points, weights)
        }
    }

    fn scales_on_gpu(&self, points: usize) -> bool {
        points >= self.from.verify && self.gpu.scales_on_gpu(points)
    }

    fn ntt(&self, values: &mut Vec<Fr>, direction: NttDirection) -> Result<()> {
        if values.len() >= self.from.ntt {
            self.gpu.ntt(values, direction)
        } else {
            Cpu.ntt(values, direction)
        }
    }

    fn coset_ntt(&self, values: &mut Vec<Fr>, shift: Fr) -> Result<()> {
        if values.len() >= self.from.ntt {
            self.gpu.coset_ntt(values, shift)
        } else {
            Cpu.coset_ntt(values, shift)
        }
    }

    /// All on the GPU when both its NTTs and its MSM would go there; else step by step,
    /// each routed by its size.
    fn quotient_msm(&self, job: QuotientMsm<'_>) -> Result<G1Projective> {
        if job.a.len() >= self.from.ntt && job.bases.len() >= self.from.msm_g1 {
            self.gpu.quotient_msm(job)
        } else {
            crate::ops::quotient_msm_by_steps(self, job)
        }
    }
}

/// The MSM/NTT backend for a resolved choice.
///
/// # Errors
/// [`crate::Error::Unavailable`] for a GPU that cannot be opened (or whose kernels do not
/// compile); [`crate::Error::NotCompiled`] for a backend whose feature is not in this build.
pub fn for_backend(backend: &ResolvedBackend) -> Result<Box<dyn MsmNtt>> {
    match backend {
        ResolvedBackend::Cpu => Ok(Box::new(Cpu)),
        ResolvedBackend::Wgpu(i) => Ok(Box::new(crate::WgpuBackend::new(*i)?)),
        ResolvedBackend::Cuda(n) => Ok(Box::new(crate::CudaBackend::new(*n)?)),
    }
}

/// The prover's backend for `choice`, with a sentence saying why; the one place that
/// decides it (the daemon, `meshnode proof prove` and `meshnode doctor` all ask here).
///
/// `cpu` needs no probing. `auto` probes (`probe` is called) and takes what [`resolve`]
/// picks, routed by [`GpuFrom::measured`] (each operation on the GPU only from the size
/// at which it was measured to beat the CPU), and when that GPU cannot be opened it falls
/// back to the CPU and says why. An explicit GPU choice runs everything there and is an
/// error when it cannot run, never a quiet fallback.
///
/// # Errors
/// As [`resolve`] and [`for_backend`], for explicit GPU choices.
pub fn select(
    choice: BackendChoice,
    probe: impl FnOnce() -> Inventory,
) -> Result<(Box<dyn MsmNtt>, String)> {
    if choice == BackendChoice::Cpu {
        return Ok((Box::new(Cpu), "cpu was asked for".into()));
    }
    let resolved = resolve(choice, &probe())?;
    match for_backend(&resolved.backend) {
        Ok(b) => match GpuFrom::for_choice(choice, &resolved.backend) {
            GpuFrom::ALL => Ok((b, resolved.reason)),
            GpuFrom::NONE => Ok((Box::new(Cpu), resolved.reason)),
            from => Ok((Box::new(Routed::new(b, from)), resolved.reason)),
        },
        Err(e) if choice == BackendChoice::Auto => Ok((
            Box::new(Cpu),
            format!(
                "{}, but it could not be opened ({e}); using the CPU",
                resolved.reason
            ),
        )),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use ark_ec::{CurveGroup, PrimeGroup};
    use ark_ff::UniformRand;
    use ark_std::rand::SeedableRng;

    use super::*;

    /// Records which calls reached it, and answers with the reference.
    #[derive(Default)]
    struct Witness(Mutex<Vec<&'static str>>);

    impl MsmNtt for &'static Witness {
        fn describe(&self) -> String {
            "witness".into()
        }
        fn msm_g1(&self, bases: &[G1Affine], scalars: &[Fr]) -> Result<G1Projective> {
            self.0.lock().unwrap().push("msm_g1");
            crate::ops::Reference.msm_g1(bases, scalars)
        }
        fn msm_g2(&self, bases: &[G2Affine], scalars: &[Fr]) -> Result<G2Projective> {
            self.0.lock().unwrap().push("msm_g2");
            crate::ops::Reference.msm_g2(bases, scalars)
        }
        fn ntt(&self, values: &mut Vec<Fr>, direction: NttDirection) -> Result<()> {
            self.0.lock().unwrap().push("ntt");
            crate::ops::Reference.ntt(values, direction)
        }
        fn coset_ntt(&self, values: &mut Vec<Fr>, shift: Fr) -> Result<()> {
            self.0.lock().unwrap().push("coset_ntt");
            crate::ops::Reference.coset_ntt(values, shift)
        }
        fn quotient_msm(&self, job: QuotientMsm<'_>) -> Result<G1Projective> {
            self.0.lock().unwrap().push("quotient_msm");
            crate::ops::Reference.quotient_msm(job)
        }
    }

    #[test]
    fn the_quotient_goes_to_the_gpu_whole_only_when_its_ntts_and_msm_both_would() {
        let gpu: &'static Witness = Box::leak(Box::default());
        let from = GpuFrom {
            msm_g1: 8,
            msm_g2: NEVER,
            ntt: 16,
            verify: NEVER,
        };
        let routed = Routed::new(Box::new(gpu), from);
        let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(6);
        let shift = Fr::from(7u64);
        let r = &crate::ops::Reference;
        for n in [8usize, 16] {
            let bases: Vec<G1Affine> = (0..n)
                .map(|_| (G1Projective::generator() * Fr::rand(&mut rng)).into_affine())
                .collect();
            let a: Vec<Fr> = (0..n).map(|_| Fr::rand(&mut rng)).collect();
            let b: Vec<Fr> = (0..n).map(|_| Fr::rand(&mut rng)).collect();
            let h = crate::ops::quotient(r, a.clone(), b.clone(), shift).unwrap();
            assert_eq!(
                routed
                    .quotient_msm(QuotientMsm {
                        bases: &bases,
                        fixed: None,
                        a,
                        b,
                        shift
                    })
                    .unwrap(),
                r.msm_g1(&bases, &h).unwrap(),
                "n = {n}"
            );
        }
        assert_eq!(
            *gpu.0.lock().unwrap(),
            ["msm_g1", "quotient_msm"],
            "8: the NTTs on the CPU and the MSM on the GPU; 16: all on the GPU"
        );
    }

    #[test]
    fn each_call_goes_to_the_gpu_from_its_size_and_to_the_cpu_below_with_equal_results() {
        let gpu: &'static Witness = Box::leak(Box::default());
        let from = GpuFrom {
            msm_g1: 8,
            msm_g2: 4,
            ntt: 16,
            verify: NEVER,
        };
        let routed = Routed::new(Box::new(gpu), from);
        let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(5);
        let g1: Vec<G1Affine> = (0..8)
            .map(|_| (G1Projective::generator() * Fr::rand(&mut rng)).into_affine())
            .collect();
        let g2: Vec<G2Affine> = (0..4)
            .map(|_| (G2Projective::generator() * Fr::rand(&mut rng)).into_affine())
            .collect();
        let s: Vec<Fr> = (0..16).map(|_| Fr::rand(&mut rng)).collect();
        let r = &crate::ops::Reference;
        assert_eq!(
            routed.msm_g1(&g1[..7], &s[..7]).unwrap(),
            r.msm_g1(&g1[..7], &s[..7]).unwrap()
        );
        assert_eq!(
            routed.msm_g1(&g1, &s[..8]).unwrap(),
            r.msm_g1(&g1, &s[..8]).unwrap()
        );
        assert_eq!(
            routed.msm_g2(&g2[..3], &s[..3]).unwrap(),
            r.msm_g2(&g2[..3], &s[..3]).unwrap()
        );
        assert_eq!(
            routed.msm_g2(&g2, &s[..4]).unwrap(),
            r.msm_g2(&g2, &s[..4]).unwrap()
        );
        let tables = Fixed::Shifted(crate::msm::Shifted::new(&g1[..7], 2));
        assert_eq!(
            routed.msm_g1_fixed(&g1[..7], &tables, &s[..7]).unwrap(),
            r.msm_g1(&g1[..7], &s[..7]).unwrap()
        );
        for len in [8, 16] {
            let mut v = s[..len].to_vec();
            let mut want = v.clone();
            routed.ntt(&mut v, NttDirection::Forward).unwrap();
            r.ntt(&mut want, NttDirection::Forward).unwrap();
            assert_eq!(v, want);
            routed.coset_ntt(&mut v, Fr::from(7u64)).unwrap();
            r.coset_ntt(&mut want, Fr::from(7u64)).unwrap();
            assert_eq!(v, want);
        }
        assert_eq!(
            *gpu.0.lock().unwrap(),
            ["msm_g1", "msm_g2", "ntt", "coset_ntt"],
            "only the calls at or above their thresholds reach the GPU"
        );
        assert!(routed.uses_tables(7) && !routed.uses_tables(8));
    }

    #[test]
    fn auto_routes_by_the_measured_figures_and_an_explicit_choice_routes_everything() {
        let cuda = ResolvedBackend::Cuda(0);
        let auto = GpuFrom::for_choice(BackendChoice::Auto, &cuda);
        assert_eq!(auto.ntt, 1 << 17);
        assert_eq!((auto.msm_g1, auto.msm_g2), (1 << 14, 1 << 14));
        assert_eq!(auto.verify, 1 << 13, "a batch's weights from 4096 proofs");
        assert_eq!(
            GpuFrom::for_choice(BackendChoice::Cuda(0), &cuda),
            GpuFrom::ALL
        );
        assert_eq!(
            GpuFrom::for_choice(BackendChoice::Wgpu, &ResolvedBackend::Wgpu(0)),
            GpuFrom::ALL
        );
        assert_eq!(
            GpuFrom::for_choice(BackendChoice::Auto, &ResolvedBackend::Cpu),
            GpuFrom::NONE
        );
        let places = auto.placement("cuda:0");
        assert_eq!(
            places[0],
            ("ntt", "cuda:0 from 131072 elements, cpu below".to_owned())
        );
        assert_eq!(
            places[1],
            ("msm_g1", "cuda:0 from 16384 points, cpu below".to_owned())
        );
        assert_eq!(GpuFrom::ALL.placement("wgpu")[2], ("msm_g2", "wgpu".into()));
    }
}
