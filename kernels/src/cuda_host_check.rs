//! The CUDA arithmetic (`kernels/cuda/bn254.cuh`) compiled for the host with the system
//! C++ compiler and checked against arkworks: field operations over Fq, Fr and Fq2, the
//! XYZZ formulas of G1 and G2, the device bucket plan's and the MSM kernels' per-thread
//! functions for both groups (against arkworks' sums and the host's plan), the NTT's
//! permutation, stages and scaling, the quotient's kernels in the backend's order, and the
//! batch verifier's weights kernel.
//!
//! This runs without a GPU and without the `cuda` feature. Skipped with a message only
//! when no C++ compiler is found and `CI` is not `true` (`.ci/test` installs `g++`).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use ark_bn254::{Fq, Fq2, Fr};
use ark_ec::short_weierstrass::{Affine, Projective};
use ark_ec::{AffineRepr, CurveGroup, VariableBaseMSM};
use ark_ff::{Field, One, UniformRand, Zero};
use ark_std::rand::rngs::StdRng;
use ark_std::rand::{Rng, SeedableRng};

use crate::device_plan::DevicePlan;
use crate::plan::{FE_BYTES, GpuCurve, Plan, fe_bytes, xyzz_to_projective};

type G1 = ark_bn254::g1::Config;
type G2 = ark_bn254::g2::Config;

/// A check of one answer line from `host_check`.
type Expect = Box<dyn Fn(&str)>;

/// Compiles `host_check.cpp`; `None` (after a message) when there is no compiler and this
/// is not CI.
fn compile() -> Option<PathBuf> {
    let dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
            .join("cuda");
    let out = std::env::temp_dir().join(format!("fleetmesh-host-check-{}", std::process::id()));
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let status = Command::new(&cxx)
        .args(["-O1", "-std=c++17", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(dir.join("host_check.cpp"))
        .arg("-I")
        .arg(&dir)
        .status();
    match status {
        Ok(s) => {
            assert!(s.success(), "{cxx} failed on kernels/cuda/host_check.cpp");
            Some(out)
        }
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but no C++ compiler ({cxx}: {e}); .ci/test installs g++"
            );
            eprintln!("SKIPPED CUDA host check: no C++ compiler ({cxx}: {e})");
            None
        }
    }
}

/// The kernels file itself (`kernels.cu` after `bn254.cuh`, as NVRTC gets them) through the
/// host compiler's front end, with the CUDA keywords defined away and `__CUDACC__` set so
/// the device branch of the header's macros is the one checked: a syntax or type error in
/// a kernel fails here, on machines without CUDA, rather than at run time on a GPU.
#[test]
fn the_cuda_kernels_pass_a_host_compiler_front_end() {
    let dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
            .join("cuda");
    let prelude =
        std::env::temp_dir().join(format!("fleetmesh-kernels-{}.cpp", std::process::id()));
    std::fs::write(
        &prelude,
        "#define __CUDACC__ 1\n#define __host__\n#define __device__\n#define __global__\n\
         #define __forceinline__ inline\nstruct fm_dim3 { unsigned x, y, z; };\n\
         static fm_dim3 blockIdx, blockDim, threadIdx;\n\
         unsigned atomicAdd(unsigned*, unsigned);\n\
         #include \"bn254.cuh\"\n#include \"msm_plan.cuh\"\n#include \"kernels.cu\"\n",
    )
    .expect("write prelude");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let status = Command::new(&cxx)
        .args([
            "-fsyntax-only",
            "-std=c++17",
            "-Wall",
            "-Werror",
            "-Wno-unknown-pragmas",
        ])
        .arg("-I")
        .arg(&dir)
        .arg(&prelude)
        .status();
    let _ = std::fs::remove_file(&prelude);
    match status {
        Ok(s) => assert!(s.success(), "{cxx} rejects kernels/cuda/kernels.cu"),
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but no C++ compiler ({cxx}: {e})"
            );
            eprintln!("SKIPPED CUDA kernels front-end check: no C++ compiler ({cxx}: {e})");
        }
    }
}

fn hex(bytes: impl Iterator<Item = u8>) -> String {
    bytes.map(|b| format!("{b:02x}")).collect()
}

/// An Fq element's GPU bytes in hex (`.0` is arkworks' Montgomery form, kept by the GPU).
fn fe(x: Fq) -> String {
    hex(fe_bytes(x.0))
}

fn fe_r(x: Fr) -> String {
    hex(fe_bytes(x.0))
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex from host_check"))
        .collect()
}

/// A coordinate of `P` in hex, one token per Fq element (as `host_check` reads it).
fn coord<P: GpuCurve>(c: &P::BaseField) -> String {
    let mut b = vec![0u8; P::COORD_FE * FE_BYTES];
    P::put(c, &mut b);
    b.chunks(FE_BYTES)
        .map(|e| hex(e.iter().copied()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `p` in XYZZ coordinates scaled by `lambda` (not only ZZ = 1).
fn xyzz<P: GpuCurve>(p: &Affine<P>, lambda: P::BaseField) -> String {
    let (x, y, l2, l3) = match p.xy() {
        Some((x, y)) => {
            let (l2, l3) = (lambda.square(), lambda.square() * lambda);
            (x * l2, y * l3, l2, l3)
        }
        None => Default::default(),
    };
    [x, y, l2, l3].map(|c| coord::<P>(&c)).join(" ")
}

fn points_of<P: GpuCurve>(line: &str) -> Vec<Projective<P>> {
    let bytes: Vec<u8> = line.split_whitespace().flat_map(unhex).collect();
    bytes
        .chunks_exact(4 * P::COORD_FE * FE_BYTES)
        .map(xyzz_to_projective)
        .collect()
}

fn random_point<P: GpuCurve>(rng: &mut StdRng) -> Affine<P> {
    (Affine::<P>::generator() * Fr::rand(rng)).into_affine()
}

/// Requests for the curve formulas of `P` (`group`: `g1` or `g2`): XYZZ points with random
/// Z, incl. doubling, cancellation and infinity on either side.
fn curve_cases<P: GpuCurve>(
    group: &'static str,
    rng: &mut StdRng,
    requests: &mut String,
    expect: &mut Vec<Expect>,
) where
    P::BaseField: UniformRand,
{
    for i in 0..40 {
        let p = if i == 3 {
            Affine::<P>::identity()
        } else {
            random_point::<P>(rng)
        };
        let q = match i {
            0 => p,
            1 => -p,
            2 => Affine::<P>::identity(),
            _ => random_point::<P>(rng),
        };
        let (l1, l2) = (P::BaseField::rand(rng), P::BaseField::rand(rng));
        let sum: Projective<P> = p + q;
        *requests += &format!("{group}_add {} {}\n", xyzz(&p, l1), xyzz(&q, l2));
        expect.push(Box::new(move |got| {
            assert_eq!(points_of::<P>(got), vec![sum], "{group}_add case {i}")
        }));
        let twice: Projective<P> = p + p;
        *requests += &format!("{group}_double {}\n", xyzz(&p, l1));
        expect.push(Box::new(move |got| {
            assert_eq!(points_of::<P>(got), vec![twice], "{group}_double case {i}")
        }));
        if let Some((x, y)) = q.xy() {
            *requests += &format!(
                "{group}_add_affine {} {} {}\n",
                xyzz(&p, l1),
                coord::<P>(&x),
                coord::<P>(&y)
            );
            expect.push(Box::new(move |got| {
                assert_eq!(
                    points_of::<P>(got),
                    vec![sum],
                    "{group}_add_affine case {i}"
                )
            }));
        }
    }
}

/// Requests for the device plan's and the MSM kernels' per-thread functions of `P` (`op`:
/// `msm` or `msm_g2`), combined as the backend does: the sum must equal arkworks', and the
/// plan the host plan ([`Plan`]): the same bucket starts and segment lengths, the same
/// entries in each bucket (their order inside a bucket is the atomics' on a GPU).
fn msm_cases<P: GpuCurve>(
    op: &'static str,
    sizes: &[usize],
    rng: &mut StdRng,
    requests: &mut String,
    expect: &mut Vec<Expect>,
) {
    for &n in sizes {
        let mut bases: Vec<Affine<P>> = (0..n).map(|_| random_point::<P>(rng)).collect();
        let mut scalars: Vec<Fr> = (0..n).map(|_| Fr::rand(rng)).collect();
        if n >= 200 {
            bases[1] = bases[0];
            scalars[1] = scalars[0];
            bases[2] = -bases[0];
            scalars[2] = scalars[0];
            bases[3] = Affine::<P>::identity();
            scalars[4] = Fr::zero();
            scalars[5] = -Fr::one();
            // equal scalars: many segments in one bucket, several combining passes
            for s in scalars.iter_mut().skip(10).take(n / 2) {
                *s = Fr::from(77u64);
            }
        }
        let d = DevicePlan::new(P::OP, n).expect("device plan");
        let s = d.shape;
        let mut line = format!("{op} {n}");
        for p in &bases {
            let (x, y) = p.xy().unwrap_or_default();
            line += &format!(" {} {}", coord::<P>(&x), coord::<P>(&y));
        }
        for v in &scalars {
            line += &format!(" {}", fe_r(*v));
        }
        for v in [
            d.words as u32,
            s.c,
            s.windows,
            s.buckets,
            s.chunks,
            s.chunk,
            d.total,
            d.segment_slots,
            d.up1_count,
            d.up2_count,
            d.seg_off,
            d.bseg_off,
            d.segb_off,
            d.count_off,
            d.start_off,
            d.up1_off,
            d.up2_off,
            d.combine_passes(),
        ] {
            line += &format!(" {v}");
        }
        *requests += &(line + "\n");
        let want = Projective::<P>::msm_unchecked(&bases, &scalars);
        let host = Plan::new(&bases, &scalars).expect("host plan");
        expect.push(Box::new(move |got| {
            let (sums, plan) = got.split_once(" |").expect("sums | plan");
            let sums = points_of::<P>(sums);
            assert_eq!(s.horner(&sums), want, "{op} n = {n}");
            let idx: Vec<u32> = plan
                .split_whitespace()
                .map(|v| v.parse().expect("u32"))
                .collect();
            let bseg = &idx[d.bseg_off as usize..=(d.bseg_off + d.total) as usize];
            assert_eq!(bseg, host.bucket_segments(), "{op} n = {n}: bucket starts");
            let segments = &idx[d.seg_off as usize..][..2 * bseg[d.total as usize] as usize];
            let lens = |segs: &[u32]| segs.chunks(2).map(|s| s[1]).collect::<Vec<_>>();
            assert_eq!(
                lens(segments),
                lens(host.segments()),
                "{op} n = {n}: segments"
            );
            let bucket = |entries: &[u32], segs: &[u32], g: usize| {
                let mut e: Vec<u32> = (bseg[g]..bseg[g + 1])
                    .flat_map(|k| {
                        let (at, len) = (segs[2 * k as usize], segs[2 * k as usize + 1]);
                        entries[at as usize..(at + len) as usize].iter().copied()
                    })
                    .collect();
                e.sort_unstable();
                e
            };
            for g in 0..d.total as usize {
                assert_eq!(
                    bucket(&idx, segments, g),
                    bucket(host.entries(), host.segments(), g),
                    "{op} n = {n}: bucket {g}"
                );
            }
        }));
    }
}

/// Requests for the weights kernel's per-thread function (`scale`): random points and
/// 128-bit weights, with the edge weights 0, 1 and 2^128 − 1 and a point twice.
fn scale_cases(rng: &mut StdRng, requests: &mut String, expect: &mut Vec<Expect>) {
    let n = 40;
    let mut points: Vec<Affine<G1>> = (0..n).map(|_| random_point::<G1>(rng)).collect();
    let mut weights: Vec<u128> = (0..n).map(|_| rng.r#gen::<u128>()).collect();
    weights[0] = 0;
    weights[1] = 1;
    weights[2] = u128::MAX;
    points[3] = points[4];
    let mut line = format!("scale {n}");
    for p in &points {
        let (x, y) = p.xy().expect("not infinity");
        line += &format!(" {} {}", coord::<G1>(&x), coord::<G1>(&y));
    }
    for w in &weights {
        for k in 0..4 {
            line += &format!(" {}", (w >> (32 * k)) as u32);
        }
    }
    *requests += &(line + "\n");
    let want: Vec<Projective<G1>> = points
        .iter()
        .zip(&weights)
        .map(|(p, w)| *p * Fr::from(*w))
        .collect();
    expect.push(Box::new(move |got| {
        assert_eq!(points_of::<G1>(got), want, "scale")
    }));
}

/// Requests for the NTT kernels' per-thread functions (`ntt`): forward, inverse and coset
/// transforms of random values against arkworks, with the job's twiddles, coset powers and
/// scaling as the CUDA backend uploads them.
fn ntt_cases(rng: &mut StdRng, requests: &mut String, expect: &mut Vec<Expect>) {
    use crate::ops::{MsmNtt, NttDirection, Reference};
    use crate::plan::{NttJob, NttKind};
    let shift = Fr::from(5u64);
    for n in [2usize, 8, 256] {
        let x: Vec<Fr> = (0..n).map(|_| Fr::rand(rng)).collect();
        for kind in [NttKind::Forward, NttKind::Inverse, NttKind::Coset(shift)] {
            let job = NttJob::for_len(n, kind).expect("job").expect("n > 1");
            let mut line = format!(
                "ntt {n} {} {}",
                u8::from(job.shift.is_some()),
                u8::from(job.post.is_some())
            );
            if let Some(p) = job.post {
                line += &format!(" {}", fe_r(p));
            }
            let mut values = x.clone();
            if job.shift.is_some() {
                values.extend(job.coset_powers());
            }
            values.extend(job.twiddles());
            for v in &values {
                line += &format!(" {}", fe_r(*v));
            }
            *requests += &(line + "\n");
            let mut want = x.clone();
            match kind {
                NttKind::Forward => Reference.ntt(&mut want, NttDirection::Forward),
                NttKind::Inverse => Reference.ntt(&mut want, NttDirection::Inverse),
                NttKind::Coset(s) => Reference.coset_ntt(&mut want, s),
            }
            .expect("arkworks");
            let want: Vec<String> = want.iter().map(|v| fe_r(*v)).collect();
            expect.push(Box::new(move |got| {
                let got: Vec<&str> = got.split(' ').collect();
                assert_eq!(got, want, "ntt n = {n}, {kind:?}");
            }));
        }
    }
}

/// Requests for the quotient's kernels in the CUDA backend's order (`quotient`), against
/// [`crate::ops::quotient`] on the reference backend.
fn quotient_cases(rng: &mut StdRng, requests: &mut String, expect: &mut Vec<Expect>) {
    use crate::plan::{NttJob, NttKind};
    let shift = Fr::from(7u64);
    for n in [2usize, 64] {
        let a: Vec<Fr> = (0..n).map(|_| Fr::rand(rng)).collect();
        let b: Vec<Fr> = (0..n).map(|_| Fr::rand(rng)).collect();
        let inv = NttJob::for_len(n, NttKind::Inverse)
            .expect("job")
            .expect("n > 1");
        let fwd = NttJob::for_len(n, NttKind::Coset(shift))
            .expect("job")
            .expect("n > 1");
        let mut line = format!("quotient {n} {}", fe_r(inv.post.expect("1/n")));
        let tables = [fwd.coset_powers(), inv.twiddles(), fwd.twiddles()];
        for v in a.iter().chain(&b).chain(tables.iter().flatten()) {
            line += &format!(" {}", fe_r(*v));
        }
        *requests += &(line + "\n");
        let want = crate::ops::quotient(&crate::ops::Reference, a, b, shift).expect("arkworks");
        let want: Vec<String> = want.iter().map(|v| fe_r(*v)).collect();
        expect.push(Box::new(move |got| {
            let got: Vec<&str> = got.split(' ').collect();
            assert_eq!(got, want, "quotient n = {n}");
        }));
    }
}

/// Requests for `{name}_add`, `_sub` and `_mul`: every pair of `edges`, then random pairs,
/// `count` in all; `show` writes an element as `host_check` reads it.
fn field_cases<F: Field + UniformRand + 'static>(
    name: &'static str,
    edges: &[F],
    count: usize,
    show: fn(&F) -> String,
    rng: &mut StdRng,
    requests: &mut String,
    expect: &mut Vec<Expect>,
) {
    let e = edges.len();
    for i in 0..count {
        let (a, b) = if i < e * e {
            (edges[i / e], edges[i % e])
        } else {
            (F::rand(rng), F::rand(rng))
        };
        for (op, want) in [("add", a + b), ("sub", a - b), ("mul", a * b)] {
            *requests += &format!("{name}_{op} {} {}\n", show(&a), show(&b));
            let want = show(&want);
            expect.push(Box::new(move |got| assert_eq!(got, want, "{name}_{op}")));
        }
    }
}

#[test]
fn cuda_arithmetic_compiled_for_the_host_equals_arkworks() {
    let Some(exe) = compile() else { return };
    let mut rng = StdRng::seed_from_u64(42);
    let mut requests = String::new();
    let mut expect: Vec<Expect> = Vec::new();

    // Fields: every pair of edge values, then random pairs.
    let fq_edges = [Fq::zero(), Fq::one(), -Fq::one()];
    let fr_edges = [Fr::zero(), Fr::one(), -Fr::one()];
    let u = Fq2::new(Fq::zero(), Fq::one());
    let fq2_edges = [Fq2::zero(), Fq2::one(), u, -Fq2::one()];
    let (r, q) = (&mut requests, &mut expect);
    field_cases("fq", &fq_edges, 60, |x| fe(*x), &mut rng, r, q);
    field_cases("fr", &fr_edges, 60, |x| fe_r(*x), &mut rng, r, q);
    field_cases("fq2", &fq2_edges, 40, coord::<G2>, &mut rng, r, q);

    curve_cases::<G1>("g1", &mut rng, &mut requests, &mut expect);
    curve_cases::<G2>("g2", &mut rng, &mut requests, &mut expect);
    msm_cases::<G1>(
        "msm",
        &[1, 5, 200, 2000],
        &mut rng,
        &mut requests,
        &mut expect,
    );
    msm_cases::<G2>("msm_g2", &[1, 5, 300], &mut rng, &mut requests, &mut expect);
    scale_cases(&mut rng, &mut requests, &mut expect);
    ntt_cases(&mut rng, &mut requests, &mut expect);
    quotient_cases(&mut rng, &mut requests, &mut expect);

    let mut child = Command::new(&exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run host_check");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || stdin.write_all(requests.as_bytes()));
    let out = child.wait_with_output().expect("host_check output");
    writer.join().expect("writer").expect("write requests");
    let _ = std::fs::remove_file(&exe);
    assert!(
        out.status.success(),
        "host_check exited with {}",
        out.status
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), expect.len(), "one answer per request");
    for (line, check) in lines.iter().zip(&expect) {
        check(line);
    }
}
