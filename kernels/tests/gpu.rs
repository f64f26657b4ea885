//! Every GPU backend this machine has against the CPU reference, bit for bit: wgpu on
//! whatever adapter it finds (lavapipe in CI), and CUDA where a driver and NVRTC exist
//! (`bench/gpu/run.sh` runs this file on an NVIDIA machine). wgpu is skipped with a message
//! only when there is no adapter and `CI` is not `true`; CUDA is skipped with a message
//! wherever it cannot be loaded, and must then refuse cleanly (never panic).
#![cfg(feature = "wgpu")]

use ark_bn254::Fr;
use ark_ff::{One, UniformRand, Zero};
use ark_std::rand::SeedableRng;
use fleetmesh_kernels::ops::{MsmNtt, NttDirection, Reference};
use std::sync::OnceLock;

use fleetmesh_kernels::{CudaBackend, Error, WgpuBackend, probe};

/// The wgpu backend on adapter 0, opened once for all tests (each opening compiles its
/// pipelines again), or `None` with a visible message where there is no adapter.
fn wgpu_backend() -> Option<&'static WgpuBackend> {
    static GPU: OnceLock<Option<WgpuBackend>> = OnceLock::new();
    GPU.get_or_init(|| {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        let adapters = probe::probe().wgpu.unwrap_or_default();
        if adapters.is_empty() {
            assert!(
                !ci,
                "CI=true but wgpu finds no adapter (is mesa-vulkan-drivers installed?)"
            );
            return None;
        }
        let mut gpu = WgpuBackend::new(0).expect("open adapter 0");
        // every G2 MSM on the GPU here, however small
        gpu.set_g2_gpu_from(0);
        Some(gpu)
    })
    .as_ref()
    .or_else(|| {
        eprintln!("SKIPPED wgpu tests: no wgpu adapter");
        None
    })
}

/// CUDA device 0, opened once for all tests (NVRTC compiles the kernels at each opening),
/// or `None` after checking that the refusal is a clean error naming why.
/// `FLEETMESH_REQUIRE_CUDA=1` (set by bench/gpu/run.sh) makes a refusal a failure.
fn cuda_backend() -> Option<&'static CudaBackend> {
    static GPU: OnceLock<Result<CudaBackend, String>> = OnceLock::new();
    let opened = GPU.get_or_init(|| match CudaBackend::new(0) {
        Ok(mut b) => {
            // every G2 MSM on the GPU here, however small
            b.set_g2_gpu_from(0);
            Ok(b)
        }
        Err(e) => {
            assert!(
                std::env::var("FLEETMESH_REQUIRE_CUDA").as_deref() != Ok("1"),
                "FLEETMESH_REQUIRE_CUDA=1 but CUDA cannot run: {e}"
            );
            match &e {
                Error::Unavailable { reason, .. } => assert!(!reason.is_empty()),
                Error::NotCompiled { feature, .. } => assert_eq!(*feature, "cuda"),
                other => panic!("unexpected refusal {other:?}"),
            }
            Err(e.to_string())
        }
    });
    match opened {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("SKIPPED cuda tests: {e}");
            None
        }
    }
}

/// Runs `check` on every GPU backend available here, printing each one's time (on an
/// NVIDIA machine `bench/gpu/run.sh` shows where the tests' time goes).
fn on_each_backend(test: &str, check: fn(&dyn MsmNtt)) {
    for gpu in backends() {
        let started = std::time::Instant::now();
        check(gpu);
        eprintln!(
            "{test} on {}: {:.1} s",
            gpu.describe(),
            started.elapsed().as_secs_f64()
        );
    }
}

/// Every GPU backend available here; `FLEETMESH_GPU_TESTS=cuda` (or `wgpu`) tests only
/// that one (bench/gpu/run.sh on a device whose Vulkan driver takes minutes to compile
/// the wgpu kernels). CI never sets it.
fn backends() -> Vec<&'static dyn MsmNtt> {
    let only = std::env::var("FLEETMESH_GPU_TESTS")
        .ok()
        .filter(|o| !o.is_empty());
    let wanted = |name: &str| only.as_deref().is_none_or(|o| o == name);
    let mut v: Vec<&'static dyn MsmNtt> = Vec::new();
    if wanted("wgpu")
        && let Some(b) = wgpu_backend()
    {
        v.push(b);
    }
    if wanted("cuda")
        && let Some(b) = cuda_backend()
    {
        v.push(b);
    }
    if only.is_some() {
        eprintln!("FLEETMESH_GPU_TESTS={only:?}: only that backend tested");
    }
    v
}

fn inputs(n: usize, seed: u64) -> Vec<Fr> {
    let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(seed);
    let mut v: Vec<Fr> = (0..n).map(|_| Fr::rand(&mut rng)).collect();
    // edge values: 0, 1, −1 (p − 1 in the limbs' top range)
    for (i, x) in [Fr::zero(), Fr::one(), -Fr::one()].into_iter().enumerate() {
        if i < n {
            v[i] = x;
        }
    }
    v
}

#[test]
fn ntt_forward_inverse_and_coset_equal_the_cpu_reference() {
    on_each_backend("ntt", ntt_on);
}

fn ntt_on(gpu: &dyn MsmNtt) {
    for log in [0u32, 1, 2, 3, 5, 8, 11] {
        let n = 1usize << log;
        let x = inputs(n, u64::from(log));
        for dir in [NttDirection::Forward, NttDirection::Inverse] {
            let (mut a, mut b) = (x.clone(), x.clone());
            gpu.ntt(&mut a, dir).unwrap();
            Reference.ntt(&mut b, dir).unwrap();
            assert!(a == b, "n = {n}, {dir:?}");
        }
        let shift = Fr::from(7u64);
        let (mut a, mut b) = (x.clone(), x.clone());
        gpu.coset_ntt(&mut a, shift).unwrap();
        Reference.coset_ntt(&mut b, shift).unwrap();
        assert!(a == b, "n = {n}, coset");
        // all-zero input stays zero
        let mut z = vec![Fr::zero(); n];
        gpu.ntt(&mut z, NttDirection::Forward).unwrap();
        assert!(z.iter().all(Zero::is_zero));
    }
    // a length that is not a power of two is refused, as by the reference
    assert!(
        gpu.ntt(&mut vec![Fr::one(); 3], NttDirection::Forward)
            .is_err()
    );
}

#[test]
fn g1_mixed_addition_equals_arkworks_including_doubling_and_cancellation() {
    use ark_bn254::{G1Affine, G1Projective};
    use ark_ec::{AffineRepr, CurveGroup, PrimeGroup};
    let Some(gpu) = wgpu_backend() else { return };
    let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(5);
    let point = |rng: &mut ark_std::rand::rngs::StdRng| {
        (G1Projective::generator() * Fr::rand(rng)).into_affine()
    };
    let mut p: Vec<G1Affine> = (0..300).map(|_| point(&mut rng)).collect();
    let mut q: Vec<G1Affine> = (0..300).map(|_| point(&mut rng)).collect();
    q[0] = p[0]; // doubling
    q[1] = -p[1]; // cancellation
    p[2] = G1Affine::identity(); // infinity + q
    q[3] = G1Affine::generator();
    let got = gpu.g1_add_check(&p, &q).unwrap();
    for i in 0..p.len() {
        assert_eq!(got[i], (p[i] + q[i]).into_affine(), "i = {i}");
    }
    assert!(got[1].is_zero());
    assert!(gpu.g1_add_check(&p[..1], &[G1Affine::identity()]).is_err());
}

#[test]
fn msm_equals_the_cpu_reference_on_edge_cases_and_random_inputs() {
    on_each_backend("msm", msm_on);
}

#[test]
fn batch_verification_weights_equal_the_cpu_reference() {
    on_each_backend("scale_g1", scale_on);
}

/// `scale_g1` (a batch verifier's 128-bit weights times its proofs' points) on the GPU
/// against arkworks: random points and weights, with the weights 0, 1 and 2^128 − 1, the
/// point at infinity, a point twice and a point with its negation.
fn scale_on(gpu: &dyn MsmNtt) {
    use ark_bn254::{G1Affine, G1Projective};
    use ark_ec::{AffineRepr, CurveGroup, PrimeGroup};
    use ark_std::rand::Rng;
    assert!(gpu.scales_on_gpu(1));
    let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(21);
    for n in [1usize, 7, 300] {
        let mut points: Vec<G1Affine> = (0..n)
            .map(|_| (G1Projective::generator() * Fr::rand(&mut rng)).into_affine())
            .collect();
        let mut weights: Vec<u128> = (0..n).map(|_| rng.r#gen()).collect();
        if n >= 7 {
            weights[0] = 0;
            weights[1] = 1;
            weights[2] = u128::MAX;
            points[3] = G1Affine::identity();
            points[4] = points[5];
            points[6] = -points[5];
        }
        let got = gpu.scale_g1(&points, &weights).unwrap();
        assert_eq!(
            got,
            Reference.scale_g1(&points, &weights).unwrap(),
            "n = {n}"
        );
    }
    assert!(gpu.scale_g1(&[], &[]).unwrap().is_empty());
    assert_eq!(
        gpu.scale_g1(&[G1Affine::identity()], &[5]).unwrap(),
        vec![G1Affine::identity()]
    );
    assert!(gpu.scale_g1(&[G1Affine::generator()], &[]).is_err());
}

fn msm_on(gpu: &dyn MsmNtt) {
    use ark_bn254::{G1Affine, G1Projective, G2Affine, G2Projective};
    use ark_ec::{CurveGroup, PrimeGroup};
    let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(11);
    let points = |n: usize, rng: &mut ark_std::rand::rngs::StdRng| -> Vec<G1Affine> {
        let v: Vec<G1Projective> = (0..n)
            .map(|_| G1Projective::generator() * Fr::rand(rng))
            .collect();
        G1Projective::normalize_batch(&v)
    };
    let check = |bases: &[G1Affine], scalars: &[Fr], what: &str| {
        let got = gpu.msm_g1(bases, scalars).unwrap();
        let want = Reference.msm_g1(bases, scalars).unwrap();
        assert!(got == want, "{what}, n = {}", bases.len());
    };
    // sizes: empty, one, non-powers of two, and one large enough for several segments per
    // bucket and several reducing chunks per window
    for n in [0usize, 1, 2, 3, 31, 100, 257, 1000, 4099] {
        let bases = points(n, &mut rng);
        let scalars = inputs(n, n as u64 + 100);
        check(&bases, &scalars, "random");
    }
    let n = 600;
    let mut bases = points(n, &mut rng);
    // all-zero scalars
    check(&bases, &vec![Fr::zero(); n], "all-zero scalars");
    // one scalar repeated everywhere: every point in the same bucket of each window
    check(&bases, &vec![Fr::from(0xdead_beefu64); n], "equal scalars");
    // 18 000 points in one bucket: 563 segments, combined in 10 passes (one thread summing
    // them all gave wrong sums on lavapipe past 556 additions)
    let many = points(18_000, &mut rng);
    check(
        &many,
        &vec![Fr::from(7u64); many.len()],
        "one crowded bucket",
    );
    let mut scalars = inputs(n, 9);
    // repeated points (doubling inside a bucket), opposite points (cancellation), points
    // at infinity, −1 and small scalars
    for i in 0..40 {
        bases[i + 40] = bases[i];
        scalars[i + 40] = scalars[i];
        bases[i + 80] = -bases[i];
        scalars[i + 80] = scalars[i];
    }
    bases[200] = G1Affine::identity();
    bases[201] = G1Affine::identity();
    scalars[202] = -Fr::one();
    scalars[203] = Fr::from(2u64);
    check(&bases, &scalars, "repeated, opposite and infinite points");
    check(
        &vec![G1Affine::identity(); 50],
        &inputs(50, 1),
        "only infinity",
    );
    // a sum that cancels to the point at infinity: s·P + s·(−P)
    let p = bases[0];
    let s = Fr::rand(&mut rng);
    assert!(gpu.msm_g1(&[p, -p], &[s, s]).unwrap().is_zero());
    // unequal lengths are refused, as by the reference
    assert!(gpu.msm_g1(&bases[..2], &scalars[..3]).is_err());
    // G2 on the GPU (both backends), the same cases at smaller sizes
    let g2_points = |n: usize, rng: &mut ark_std::rand::rngs::StdRng| -> Vec<G2Affine> {
        let v: Vec<G2Projective> = (0..n)
            .map(|_| G2Projective::generator() * Fr::rand(rng))
            .collect();
        G2Projective::normalize_batch(&v)
    };
    let check2 = |bases: &[G2Affine], scalars: &[Fr], what: &str| {
        let got = gpu.msm_g2(bases, scalars).unwrap();
        let want = Reference.msm_g2(bases, scalars).unwrap();
        assert!(got == want, "G2 {what}, n = {}", bases.len());
    };
    for n in [0usize, 1, 3, 70, 1000] {
        let bases = g2_points(n, &mut rng);
        check2(&bases, &inputs(n, n as u64 + 200), "random");
    }
    let mut g2 = g2_points(300, &mut rng);
    let mut s2 = inputs(300, 5);
    check2(&g2, &vec![Fr::from(0xdead_beefu64); 300], "equal scalars");
    for i in 0..20 {
        g2[i + 20] = g2[i];
        s2[i + 20] = s2[i];
        g2[i + 40] = -g2[i];
        s2[i + 40] = s2[i];
    }
    g2[100] = G2Affine::identity();
    s2[101] = -Fr::one();
    check2(&g2, &s2, "repeated, opposite and infinite points");
    assert!(gpu.msm_g2(&g2[..2], &s2[..3]).is_err());

    // bases kept in device memory (a proving key's): the same sums, proof after proof,
    // and a copy offered with other bases is not read
    use fleetmesh_kernels::fixed::Fixed;
    let kept = Fixed::Kept(gpu.keep_g1(&bases).unwrap().expect("a GPU keeps bases"));
    assert_eq!(kept.bytes(), bases.len() * 64);
    for seed in [1, 2] {
        let s = inputs(n, seed);
        let want = Reference.msm_g1(&bases, &s).unwrap();
        assert!(
            gpu.msm_g1_fixed(&bases, &kept, &s).unwrap() == want,
            "kept G1"
        );
    }
    let other = points(n, &mut rng);
    let s = inputs(n, 3);
    assert!(
        gpu.msm_g1_fixed(&other, &kept, &s).unwrap() == Reference.msm_g1(&other, &s).unwrap(),
        "a copy of other bases is ignored"
    );
    let kept2 = Fixed::Kept(gpu.keep_g2(&g2).unwrap().expect("G2 kept where it runs"));
    assert!(
        gpu.msm_g2_fixed(&g2, &kept2, &s2).unwrap() == Reference.msm_g2(&g2, &s2).unwrap(),
        "kept G2"
    );
}

#[test]
fn bases_kept_by_one_gpu_backend_are_not_read_by_another() {
    use fleetmesh_kernels::fixed::Fixed;
    let Some(a) = wgpu_backend() else {
        return;
    };
    let b = WgpuBackend::new(0).expect("a second instance on adapter 0");
    use ark_ec::{CurveGroup, PrimeGroup};
    let g = ark_bn254::G1Projective::generator();
    let bases: Vec<_> = (1..=3u64)
        .map(|k| (g * Fr::from(k)).into_affine())
        .collect();
    let kept = Fixed::Kept(a.keep_g1(&bases).unwrap().unwrap());
    let s = inputs(3, 4);
    let want = Reference.msm_g1(&bases, &s).unwrap();
    assert!(a.msm_g1_fixed(&bases, &kept, &s).unwrap() == want);
    assert!(b.msm_g1_fixed(&bases, &kept, &s).unwrap() == want);
}

#[test]
fn the_quotient_msm_equals_the_cpu_reference() {
    on_each_backend("quotient_msm", quotient_on);
}

/// A proof's quotient term on the GPU (on CUDA one device pipeline: six NTTs and the MSM
/// with nothing copied back between them), with the H bases uploaded and kept; unequal
/// lengths refused.
fn quotient_on(gpu: &dyn MsmNtt) {
    use ark_ec::{CurveGroup, PrimeGroup};
    use fleetmesh_kernels::fixed::Fixed;
    use fleetmesh_kernels::ops::QuotientMsm;
    let g = ark_bn254::G1Projective::generator();
    let shift = Fr::from(7u64);
    for log in [0u32, 1, 6] {
        let n = 1usize << log;
        let bases: Vec<_> = inputs(n, 40 + u64::from(log))
            .into_iter()
            .map(|k| (g * k).into_affine())
            .collect();
        let (a, b) = (inputs(n, u64::from(log)), inputs(n, 20 + u64::from(log)));
        let h = fleetmesh_kernels::ops::quotient(&Reference, a.clone(), b.clone(), shift)
            .expect("reference quotient");
        let want = Reference.msm_g1(&bases, &h).unwrap();
        fn job<'a>(
            bases: &'a [ark_bn254::G1Affine],
            fixed: Option<&'a Fixed<ark_bn254::g1::Config>>,
            a: Vec<Fr>,
            b: Vec<Fr>,
            shift: Fr,
        ) -> QuotientMsm<'a> {
            QuotientMsm {
                bases,
                fixed,
                a,
                b,
                shift,
            }
        }
        let got = gpu.quotient_msm(job(&bases, None, a.clone(), b.clone(), shift));
        assert!(got.unwrap() == want, "n = {n}");
        if let Some(kept) = gpu.keep_g1(&bases).unwrap() {
            let kept = Fixed::Kept(kept);
            let got = gpu.quotient_msm(job(&bases, Some(&kept), a.clone(), b.clone(), shift));
            assert!(got.unwrap() == want, "n = {n}, bases kept");
        }
        if n > 1 {
            let short = gpu.quotient_msm(job(&bases[1..], None, a.clone(), b.clone(), shift));
            assert!(short.is_err(), "n = {n}: one base short is refused");
            let uneven = gpu.quotient_msm(job(&bases, None, a, b[1..].to_vec(), shift));
            assert!(
                uneven.is_err(),
                "n = {n}: a and b of unequal lengths are refused"
            );
        }
    }
}
