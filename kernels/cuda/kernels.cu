// The CUDA kernels, compiled at run time by NVRTC after bn254.cuh (the host prepends it;
// kernels/src/cuda_backend.rs). Each thread's work is a function of bn254.cuh, which the
// host check also runs; these wrappers only map threads to indices.
//
// Buffers are u32 arrays: a field element is 8 limbs; a G1 affine point 16, an XYZZ point
// 32; G2's twice those (Fq2 coordinates).

// The MSM kernels of one group: `msm_accumulate`, `msm_combine`, `msm_reduce` over G1 (C =
// CoordG1) and the same with a `_g2` suffix over G2 (CoordG2).
#define FM_MSM_KERNELS(SUFFIX, C)                                                           \
    extern "C" __global__ void msm_accumulate##SUFFIX(XyzzT<C>* out, const AffineT<C>* points, \
                                                      const u32* idx, u32 seg_off,          \
                                                      u32 count) {                          \
        u32 s = blockIdx.x * blockDim.x + threadIdx.x;                                      \
        if (s < count) out[s] = msm_accumulate_one<C>(points, idx, seg_off, s);             \
    }                                                                                       \
    extern "C" __global__ void msm_combine##SUFFIX(XyzzT<C>* partials, const u32* idx,      \
                                                   u32 pair_off, u32 count) {               \
        u32 t = blockIdx.x * blockDim.x + threadIdx.x;                                      \
        if (t < count) msm_combine_one<C>(partials, idx, pair_off, t);                      \
    }                                                                                       \
    extern "C" __global__ void msm_reduce##SUFFIX(XyzzT<C>* out, const XyzzT<C>* partials,  \
                                                  const u32* idx, u32 bseg_off, u32 chunks, \
                                                  u32 chunk, u32 buckets, u32 count) {      \
        u32 t = blockIdx.x * blockDim.x + threadIdx.x;                                      \
        if (t < count)                                                                      \
            out[t] = msm_reduce_one<C>(partials, idx, bseg_off, chunks, chunk, buckets, t); \
    }

FM_MSM_KERNELS(, CoordG1)
FM_MSM_KERNELS(_g2, CoordG2)

// A batch verification's weights times its G1 points (scale_one), one thread each.
extern "C" __global__ void scale_g1(Xyzz* out, const Affine* points, const u32* weights,
                                    u32 count) {
    u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < count) out[k] = scale_one<CoordG1>(points, weights, k);
}

// One radix-2 butterfly stage over Fr; `data` was bit-reversed by the host.
extern "C" __global__ void ntt_stage(Fe* data, const Fe* twiddles, u32 half, u32 stride,
                                     u32 count) {
    u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= count) return;
    u32 j = k % half;
    u32 i0 = (k / half) * 2 * half + j;
    u32 i1 = i0 + half;
    Fe u = data[i0];
    Fe v = fe_mul<Fr>(data[i1], twiddles[j * stride]);
    data[i0] = fe_add<Fr>(u, v);
    data[i1] = fe_sub<Fr>(u, v);
}

// data[k] *= factors[k], or data[k] *= factors[0] when `broadcast` is 1.
extern "C" __global__ void ntt_mul(Fe* data, const Fe* factors, u32 broadcast, u32 count) {
    u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < count) data[k] = fe_mul<Fr>(data[k], factors[broadcast ? 0 : k]);
}
