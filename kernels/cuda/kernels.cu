// The CUDA kernels, compiled at run time by NVRTC after bn254.cuh and msm_plan.cuh (the
// host prepends them; kernels/src/cuda_backend.rs). Each thread's work is a function of those
// headers, which the host check also runs; these wrappers only map threads to indices.
//
// Buffers are u32 arrays: a field element is 8 limbs; a G1 affine point 16, an XYZZ point
// 32; G2's twice those (Fq2 coordinates).

// The MSM kernels of one group: `msm_accumulate`, `msm_reduce`, and the bucket plan's
// group-dependent steps `msm_plan_count`, `msm_combine_pass`, `msm_window_pass`, over G1
// (C = CoordG1) and the same with a `_g2` suffix over G2 (CoordG2).
#define FM_MSM_KERNELS(SUFFIX, C)                                                           \
    extern "C" __global__ void msm_accumulate##SUFFIX(XyzzT<C>* out, const AffineT<C>* points, \
                                                      const u32* idx, u32 seg_off,          \
                                                      u32 count) {                          \
        u32 s = blockIdx.x * blockDim.x + threadIdx.x;                                      \
        if (s < count) out[s] = msm_accumulate_one<C>(points, idx, seg_off, s);             \
    }                                                                                       \
    extern "C" __global__ void msm_reduce##SUFFIX(XyzzT<C>* out, const XyzzT<C>* partials,  \
                                                  const u32* idx, u32 bseg_off, u32 chunks, \
                                                  u32 chunk, u32 buckets, u32 count) {      \
        u32 t = blockIdx.x * blockDim.x + threadIdx.x;                                      \
        if (t < count)                                                                      \
            out[t] = msm_reduce_one<C>(partials, idx, bseg_off, chunks, chunk, buckets, t); \
    }                                                                                       \
    extern "C" __global__ void msm_plan_count##SUFFIX(Fe* scalars, const AffineT<C>* points, \
                                                      u32* idx, u32 count_off, u32 c,       \
                                                      u32 windows, u32 buckets, u32 n) {    \
        u32 i = blockIdx.x * blockDim.x + threadIdx.x;                                      \
        if (i < n)                                                                          \
            plan_count_one<C>(scalars, points, idx, count_off, c, windows, buckets, i);     \
    }                                                                                       \
    extern "C" __global__ void msm_combine_pass##SUFFIX(XyzzT<C>* partials, const u32* idx, \
                                                        u32 bseg_off, u32 segb_off,         \
                                                        u32 total, u32 k, u32 count) {      \
        u32 s = blockIdx.x * blockDim.x + threadIdx.x;                                      \
        if (s < count) msm_combine_pass_one<C>(partials, idx, bseg_off, segb_off, total, k, s); \
    }                                                                                       \
    extern "C" __global__ void msm_window_pass##SUFFIX(XyzzT<C>* out, u32 chunks, u32 m,     \
                                                       u32 count) {                         \
        u32 t = blockIdx.x * blockDim.x + threadIdx.x;                                      \
        if (t < count) msm_window_pass_one<C>(out, chunks, m, t);                           \
    }

FM_MSM_KERNELS(, CoordG1)
FM_MSM_KERNELS(_g2, CoordG2)

// The group-independent steps of the bucket plan (msm_plan.cuh), one thread each.
extern "C" __global__ void msm_plan_up1(u32* idx, u32 count_off, u32 up1_off, u32 total,
                                        u32 count) {
    u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < count) plan_up1_one(idx, count_off, up1_off, total, t);
}

extern "C" __global__ void msm_plan_up2(u32* idx, u32 up1_off, u32 up2_off, u32 n1, u32 count) {
    u32 u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u < count) plan_up2_one(idx, up1_off, up2_off, n1, u);
}

extern "C" __global__ void msm_plan_top(u32* idx, u32 up2_off, u32 n2, u32 bseg_off,
                                        u32 total) {
    if (blockIdx.x == 0 && threadIdx.x == 0) plan_top(idx, up2_off, n2, bseg_off, total);
}

extern "C" __global__ void msm_plan_down2(u32* idx, u32 up1_off, u32 up2_off, u32 n1,
                                          u32 count) {
    u32 u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u < count) plan_down2_one(idx, up1_off, up2_off, n1, u);
}

extern "C" __global__ void msm_plan_down1(u32* idx, u32 count_off, u32 start_off, u32 up1_off,
                                          u32 bseg_off, u32 total, u32 count) {
    u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < count) plan_down1_one(idx, count_off, start_off, up1_off, bseg_off, total, t);
}

extern "C" __global__ void msm_plan_segments(u32* idx, u32 seg_off, u32 bseg_off, u32 segb_off,
                                             u32 count_off, u32 start_off, u32 total,
                                             u32 count) {
    u32 s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s < count)
        plan_segment_one(idx, seg_off, bseg_off, segb_off, count_off, start_off, total, s);
}

extern "C" __global__ void msm_plan_scatter(const Fe* scalars, u32* idx, u32 count_off,
                                            u32 start_off, u32 c, u32 windows, u32 buckets,
                                            u32 n) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) plan_scatter_one(scalars, idx, count_off, start_off, c, windows, buckets, i);
}

// A batch verification's weights times its G1 points (scale_one), one thread each.
extern "C" __global__ void scale_g1(Xyzz* out, const Affine* points, const u32* weights,
                                    u32 count) {
    u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < count) out[k] = scale_one<CoordG1>(points, weights, k);
}

// The NTT's input bit-reversed into `out` (times the coset's powers when `coset` is 1).
extern "C" __global__ void ntt_permute(Fe* out, const Fe* in, const Fe* powers, u32 coset,
                                       u32 bits, u32 count) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) ntt_permute_one(out, in, powers, coset, bits, i);
}

// One radix-2 butterfly stage over Fr, on permuted data.
extern "C" __global__ void ntt_stage(Fe* data, const Fe* twiddles, u32 half, u32 stride,
                                     u32 count) {
    u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < count) ntt_stage_one(data, twiddles, half, stride, k);
}

// data[k] *= factors[k], or data[k] *= factors[0] when `broadcast` is 1.
extern "C" __global__ void ntt_mul(Fe* data, const Fe* factors, u32 broadcast, u32 count) {
    u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < count) data[k] = fe_mul<Fr>(data[k], factors[broadcast ? 0 : k]);
}

// out[k] = a[k]·b[k] over Fr (the quotient's c = a∘b).
extern "C" __global__ void fr_product(Fe* out, const Fe* a, const Fe* b, u32 count) {
    u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < count) out[k] = fe_mul<Fr>(a[k], b[k]);
}

// a[k] = a[k]·b[k] − c[k] over Fr (fr_quotient_one).
extern "C" __global__ void fr_quotient(Fe* a, const Fe* b, const Fe* c, u32 count) {
    u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < count) fr_quotient_one(a, b, c, k);
}
