use candle_core::quantized::{QMatMul, QStorage, QTensor};
use candle_core::{Device, Module, Tensor};

use super::reference::{q4k_scales, q6k_values, q8_values};
use super::*;

fn lcg(seed: &mut u64) -> u64 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *seed >> 33
}

const KINDS: [(Kind, GgmlDType); 4] = [
    (Kind::Q8_0, GgmlDType::Q8_0),
    (Kind::Q4_0, GgmlDType::Q4_0),
    (Kind::Q4K, GgmlDType::Q4K),
    (Kind::Q6K, GgmlDType::Q6K),
];

fn small_f16(seed: &mut u64) -> [u8; 2] {
    f16::from_f32((lcg(seed) % 1000) as f32 / 50_000.0 + 1e-4)
        .to_bits()
        .to_le_bytes()
}

/// A block's values as f64, read by the layout the module documents.
fn dequantize(kind: Kind, block: &[u8]) -> Vec<f64> {
    let h = |b: &[u8]| f64::from(f16_at(b));
    match kind {
        Kind::Q8_0 | Kind::Q4_0 => q8_values(kind, block)
            .iter()
            .map(|v| f64::from(*v) * h(block))
            .collect(),
        Kind::Q4K => {
            let (sc, mn) = q4k_scales(&block[4..16]);
            (0..QK_K)
                .map(|i| {
                    let (pair, o) = (i / 64, i % 64);
                    let byte = block[16 + 32 * pair + o % 32];
                    let q = if o < 32 { byte & 15 } else { byte >> 4 };
                    let sub = i / 32;
                    h(block) * f64::from(sc[sub]) * f64::from(q)
                        - h(&block[2..]) * f64::from(mn[sub])
                })
                .collect()
        }
        Kind::Q6K => {
            let v = q6k_values(block);
            (0..QK_K)
                .map(|i| {
                    let sc = f64::from(block[192 + i / 16] as i8);
                    h(&block[208..]) * sc * (f64::from(v[i]) - 32.0)
                })
                .collect()
        }
    }
}

/// `n` rows of `k` random weights as blocks of `kind`, and their values as f64.
fn weights(kind: Kind, n: usize, k: usize, seed: &mut u64) -> (Vec<u8>, Vec<f64>) {
    let mut bytes = Vec::new();
    let mut deq = Vec::new();
    for _ in 0..n * k / kind.block_len() {
        let start = bytes.len();
        // random bytes (−128 among the Q8_0 values and Q6_K scales: its magnitude does not
        // fit an i8 lane), then sane f16 scales over theirs
        bytes.extend((0..kind.block_bytes()).map(|_| (lcg(seed) % 256) as u8));
        let block = &mut bytes[start..];
        match kind {
            Kind::Q8_0 | Kind::Q4_0 => block[..2].copy_from_slice(&small_f16(seed)),
            Kind::Q4K => {
                block[..2].copy_from_slice(&small_f16(seed));
                block[2..4].copy_from_slice(&small_f16(seed));
            }
            Kind::Q6K => block[208..].copy_from_slice(&small_f16(seed)),
        }
        deq.extend(dequantize(kind, &bytes[start..]));
    }
    (bytes, deq)
}

fn acts(m: usize, k: usize, seed: &mut u64) -> Vec<f32> {
    (0..m * k)
        .map(|i| match i % 97 {
            // some zeros and repeated values among the random ones
            0 => 0.0,
            1 => -2.5,
            _ => (lcg(seed) % 20_001) as f32 / 1000.0 - 10.0,
        })
        .collect()
}

fn qtensor(dtype: GgmlDType, w: &[u8], n: usize, k: usize) -> QTensor {
    let storage = QStorage::from_data(std::borrow::Cow::Borrowed(w), &Device::Cpu, dtype).unwrap();
    QTensor::new(storage, (n, k)).unwrap()
}

#[test]
fn the_block_layouts_read_as_candle_dequantizes_them() {
    let mut seed = 17;
    for (kind, dtype) in KINDS {
        let (n, k) = (3, 512);
        let (w, deq) = weights(kind, n, k, &mut seed);
        let theirs: Vec<f32> = qtensor(dtype, &w, n, k)
            .dequantize(&Device::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        for (i, (a, b)) in deq.iter().zip(&theirs).enumerate() {
            // candle's f32 arithmetic: a few roundings of the value's size
            assert!(
                (a - f64::from(*b)).abs() <= 1e-6 * a.abs().max(1e-3),
                "{kind:?} value {i}: ours {a}, candle {b}"
            );
        }
    }
}

#[test]
fn activations_quantize_as_candle_does_on_both_paths() {
    let mut seed = 3;
    let (m, k) = (4, 512);
    let mut x = acts(m, k, &mut seed);
    x[40] = f32::NAN;
    x[70..102].fill(0.0);
    x[130] = 1e30;
    // a Q8_0 block whose scale is exactly 1: every x.5 is a tie, rounded away from zero
    for (j, v) in x[160..192].iter_mut().enumerate() {
        *v = if j == 0 { 127.0 } else { j as f32 - 15.5 };
    }
    // a Q8_K block whose largest magnitude comes with both signs (the first one counts),
    // with ties at scale 1, and one all zero
    for (j, v) in x[512..768].iter_mut().enumerate() {
        *v = match j {
            5 => 127.0,
            9 => -127.0,
            _ => (j % 64) as f32 - 31.5,
        };
    }
    x[768..1024].fill(0.0);
    x[1030] = f32::INFINITY;
    x[1500] = f32::NAN;
    let t = Tensor::from_vec(x.clone(), (m, k), &Device::Cpu).unwrap();
    for simd in [false, true] {
        if simd && !cpu_has_avx2() {
            eprintln!("SKIPPED: the AVX2 quantizers (this CPU has no AVX2/FMA/F16C)");
            continue;
        }
        let ours = Acts::new(&x, Kind::Q8_0, simd);
        let theirs = QTensor::quantize(&t, GgmlDType::Q8_0).unwrap();
        for (i, block) in theirs.data().unwrap().chunks_exact(34).enumerate() {
            assert_eq!(ours.d[i], f16_at(block), "scale of block {i}, simd {simd}");
            let q: Vec<i8> = block[2..].iter().map(|b| *b as i8).collect();
            assert_eq!(
                &ours.qs[i * QK..(i + 1) * QK],
                &q[..],
                "block {i}, simd {simd}"
            );
        }
        let ours = Acts::new(&x, Kind::Q4K, simd);
        let theirs = QTensor::quantize(&t, GgmlDType::Q8K).unwrap();
        for (i, block) in theirs
            .data()
            .unwrap()
            .chunks_exact(4 + QK_K + 32)
            .enumerate()
        {
            let d = f32::from_le_bytes(block[..4].try_into().unwrap());
            assert_eq!(
                ours.d[i].to_bits(),
                d.to_bits(),
                "Q8_K scale {i}, simd {simd}"
            );
            let q: Vec<i8> = block[4..4 + QK_K].iter().map(|b| *b as i8).collect();
            assert_eq!(
                &ours.qs[i * QK_K..(i + 1) * QK_K],
                &q[..],
                "Q8_K block {i}, simd {simd}"
            );
            let sums: Vec<i16> = block[4 + QK_K..]
                .chunks_exact(2)
                .map(|b| i16::from_le_bytes([b[0], b[1]]))
                .collect();
            assert_eq!(
                &ours.bsums[i * 16..(i + 1) * 16],
                &sums[..],
                "Q8_K sums {i}, simd {simd}"
            );
        }
    }
}

#[test]
fn products_equal_the_reference_and_approach_float64() {
    let mut seed = 11;
    for (kind, _) in KINDS {
        let unit = kind.block_len();
        for (m, n, k) in [(1, 37, 2), (3, 8, 3), (4, 5, 1), (9, 17, 4), (128, 6, 2)] {
            let k = k * unit;
            let (w, deq) = weights(kind, n, k, &mut seed);
            let x = acts(m, k, &mut seed);
            let blocks = Blocks::new(kind, &w, n, k).unwrap();
            let reference = matmul_reference(&blocks, &x, m).unwrap();
            let fast = matmul(&blocks, &x, m).unwrap();
            assert_eq!(
                fast.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                reference.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{kind:?} {m}×{k} · {n}×{k}: SIMD and reference differ"
            );
            for r in 0..m {
                let xr = &x[r * k..(r + 1) * k];
                let amax = xr.iter().fold(0f64, |a, v| a.max(f64::from(v.abs())));
                for c in 0..n {
                    let terms = (0..k).map(|j| deq[c * k + j] * f64::from(xr[j]));
                    let exact: f64 = terms.clone().sum();
                    let size: f64 = terms.map(f64::abs).sum();
                    // the activations' rounding (half a step of amax/127 per value), and
                    // f32 roundings of the partial sums
                    let bound: f64 = (0..k)
                        .map(|j| deq[c * k + j].abs() * amax / 254.0)
                        .sum::<f64>()
                        * 1.01
                        + 1e-5 * size
                        + 1e-3;
                    let got = f64::from(reference[r * n + c]);
                    assert!(
                        (got - exact).abs() <= bound,
                        "{kind:?} ({r}, {c}): {got} against {exact} (bound {bound})"
                    );
                }
            }
        }
    }
}

#[test]
fn products_equal_candles_kernels() {
    assert!(
        !candle_repacks_q8_0(),
        "this CPU has VNNI: candle's Q8_0 products quantize activations to Q8_K here; run \
         with MISTRALRS_FORCE_AVX2=1 (as .ci/test does) to compare with its standard kernels"
    );
    let mut seed = 5;
    for (kind, dtype) in KINDS {
        // one row (candle's vector dot) and several (its tiled kernels where it has them)
        for (m, n, k) in [(1, 32, 512), (3, 24, 256), (5, 16, 768)] {
            let (w, deq) = weights(kind, n, k, &mut seed);
            let x = acts(m, k, &mut seed);
            let q = QMatMul::from_qtensor(qtensor(dtype, &w, n, k)).unwrap();
            let xt = Tensor::from_vec(x.clone(), (m, k), &Device::Cpu).unwrap();
            let theirs: Vec<f32> = q
                .forward(&xt)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let ours = matmul(&Blocks::new(kind, &w, n, k).unwrap(), &x, m).unwrap();
            for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
                // the same integer products; the float sums in another order
                let (r, c) = (i / n, i % n);
                let size: f64 = (0..k)
                    .map(|j| (deq[c * k + j] * f64::from(x[r * k + j])).abs())
                    .sum();
                assert!(
                    f64::from((a - b).abs()) <= 1e-5 * size.max(1.0),
                    "{kind:?} {m}×{n}×{k} element {i}: ours {a}, candle {b}"
                );
            }
        }
    }
}

#[test]
fn mismatched_sizes_are_refused() {
    let w = vec![0u8; 34 * 2];
    let blocks = Blocks::new(Kind::Q8_0, &w, 2, 32).unwrap();
    assert!(matmul(&blocks, &[0.0; 32], 1).is_ok());
    assert!(matmul(&blocks, &[0.0; 31], 1).is_err());
    assert!(matmul(&blocks, &[0.0; 32], 2).is_err());
    assert!(Blocks::new(Kind::Q8_0, &w, 3, 32).is_err());
    assert!(Blocks::new(Kind::Q4_0, &w, 2, 48).is_err());
    let w = vec![0u8; 144 * 2];
    assert!(Blocks::new(Kind::Q4K, &w, 2, 256).is_ok());
    assert!(Blocks::new(Kind::Q4K, &w, 16, 32).is_err());
    assert!(Blocks::new(Kind::Q6K, &w, 2, 256).is_err());
}
