//! The CUDA arithmetic (`kernels/cuda/bn254.cuh`) compiled for the host with the system
//! C++ compiler and checked against arkworks: field operations over Fq and Fr, the G1
//! XYZZ formulas, and both MSM kernels' per-thread functions on a real bucket plan.
//!
//! This runs without a GPU and without the `cuda` feature. Skipped with a message only
//! when no C++ compiler is found and `CI` is not `true` (`.ci/test` installs `g++`).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use ark_bn254::{Fq, Fr, G1Affine, G1Projective};
use ark_ec::{AffineRepr, CurveGroup, PrimeGroup, VariableBaseMSM};
use ark_ff::{Field, One, UniformRand, Zero};
use ark_std::rand::SeedableRng;
use ark_std::rand::rngs::StdRng;

use crate::plan::{Plan, fe_bytes, xyzz_to_projective};

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
         #include \"bn254.cuh\"\n#include \"kernels.cu\"\n",
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

fn xyzz(p: &G1Affine, lambda: Fq) -> String {
    match p.xy() {
        Some((x, y)) => {
            let (l2, l3) = (lambda.square(), lambda.square() * lambda);
            [x * l2, y * l3, l2, l3].map(fe).join(" ")
        }
        None => [Fq::zero(); 4].map(fe).join(" "),
    }
}

fn points_of(line: &str) -> Vec<G1Projective> {
    let bytes: Vec<u8> = line.split_whitespace().flat_map(unhex).collect();
    bytes.chunks_exact(128).map(xyzz_to_projective).collect()
}

#[test]
fn cuda_arithmetic_compiled_for_the_host_equals_arkworks() {
    let Some(exe) = compile() else { return };
    let mut rng = StdRng::seed_from_u64(42);
    let mut requests = String::new();
    let mut expect: Vec<Expect> = Vec::new();

    // Fields: random pairs and the edge values 0, 1, −1.
    let q_edges = [Fq::zero(), Fq::one(), -Fq::one()];
    let r_edges = [Fr::zero(), Fr::one(), -Fr::one()];
    for i in 0..60 {
        let (a, b) = if i < 9 {
            (q_edges[i / 3], q_edges[i % 3])
        } else {
            (Fq::rand(&mut rng), Fq::rand(&mut rng))
        };
        for (op, want) in [("add", a + b), ("sub", a - b), ("mul", a * b)] {
            requests += &format!("fq_{op} {} {}\n", fe(a), fe(b));
            let want = fe(want);
            expect.push(Box::new(move |got| assert_eq!(got, want, "fq_{op}")));
        }
        let (a, b) = if i < 9 {
            (r_edges[i / 3], r_edges[i % 3])
        } else {
            (Fr::rand(&mut rng), Fr::rand(&mut rng))
        };
        for (op, want) in [("add", a + b), ("sub", a - b), ("mul", a * b)] {
            requests += &format!("fr_{op} {} {}\n", fe_r(a), fe_r(b));
            let want = fe_r(want);
            expect.push(Box::new(move |got| assert_eq!(got, want, "fr_{op}")));
        }
    }

    // G1: points in XYZZ with random Z (not only Z = 1), incl. doubling, cancellation and
    // infinity on either side.
    let point = |rng: &mut StdRng| (G1Projective::generator() * Fr::rand(rng)).into_affine();
    for i in 0..40 {
        let p = if i == 3 {
            G1Affine::identity()
        } else {
            point(&mut rng)
        };
        let q = match i {
            0 => p,
            1 => -p,
            2 => G1Affine::identity(),
            _ => point(&mut rng),
        };
        let (l1, l2) = (Fq::rand(&mut rng), Fq::rand(&mut rng));
        let sum = p + q;
        requests += &format!("g1_add {} {}\n", xyzz(&p, l1), xyzz(&q, l2));
        expect.push(Box::new(move |got| {
            assert_eq!(points_of(got), vec![sum], "g1_add case {i}")
        }));
        let twice = p + p;
        requests += &format!("g1_double {}\n", xyzz(&p, l1));
        expect.push(Box::new(move |got| {
            assert_eq!(points_of(got), vec![twice], "g1_double case {i}")
        }));
        if !q.is_zero() {
            let (x, y) = q.xy().expect("not infinity");
            requests += &format!("g1_add_affine {} {} {}\n", xyzz(&p, l1), fe(x), fe(y));
            expect.push(Box::new(move |got| {
                assert_eq!(points_of(got), vec![sum], "g1_add_affine case {i}")
            }));
        }
    }

    // The MSM kernels' per-thread functions on real plans, combined as the backend does.
    for n in [1usize, 5, 200, 2000] {
        let mut bases: Vec<G1Affine> = (0..n).map(|_| point(&mut rng)).collect();
        let mut scalars: Vec<Fr> = (0..n).map(|_| Fr::rand(&mut rng)).collect();
        if n >= 200 {
            bases[1] = bases[0];
            scalars[1] = scalars[0];
            bases[2] = -bases[0];
            scalars[2] = scalars[0];
            bases[3] = G1Affine::identity();
            scalars[4] = Fr::zero();
            // 100 equal scalars: several segments in one bucket, combining passes
            for s in scalars.iter_mut().skip(10).take(100) {
                *s = Fr::from(77u64);
            }
        }
        let plan = Plan::new(&bases, &scalars).expect("plan");
        let mut line = format!("msm {n}");
        for p in &bases {
            let (x, y) = p.xy().unwrap_or((Fq::zero(), Fq::zero()));
            line += &format!(" {} {}", fe(x), fe(y));
        }
        let (idx, off) = plan.indices();
        line += &format!(" {}", idx.len());
        for v in &idx {
            line += &format!(" {v}");
        }
        line += &format!(
            " {} {} {} {} {} {} {} {}",
            off.segments,
            off.bucket_segments,
            plan.chunks,
            plan.chunk,
            plan.buckets,
            plan.segment_count(),
            plan.windows,
            plan.passes.len()
        );
        for (first, count) in &plan.passes {
            line += &format!(" {} {count}", off.pairs + 2 * first);
        }
        line += "\n";
        requests += &line;
        let want = G1Projective::msm_unchecked(&bases, &scalars);
        expect.push(Box::new(move |got| {
            let sums = points_of(got);
            assert_eq!(sums.len(), plan.reduce_count());
            assert_eq!(plan.combine(&sums), want, "msm n = {n}");
        }));
    }

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
