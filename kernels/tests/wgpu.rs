//! The wgpu backend against the CPU reference, bit for bit, on whatever adapter wgpu finds
//! (lavapipe in CI). Skipped with a message only when there is no adapter and `CI` is not
//! `true`.
#![cfg(feature = "wgpu")]

use ark_bn254::Fr;
use ark_ff::{One, UniformRand, Zero};
use ark_std::rand::SeedableRng;
use fleetmesh_kernels::ops::{MsmNtt, NttDirection, Reference};
use fleetmesh_kernels::{WgpuBackend, probe};

fn backend() -> Option<WgpuBackend> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let adapters = probe::probe().wgpu.unwrap_or_default();
    if adapters.is_empty() {
        assert!(
            !ci,
            "CI=true but wgpu finds no adapter (is mesa-vulkan-drivers installed?)"
        );
        eprintln!("SKIPPED wgpu tests: no wgpu adapter");
        return None;
    }
    Some(WgpuBackend::new(0).expect("open adapter 0"))
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
    let Some(gpu) = backend() else { return };
    eprintln!("{}", gpu.describe());
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
    let Some(gpu) = backend() else { return };
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
