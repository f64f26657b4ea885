// BN254 field, G1 and G2 arithmetic for the CUDA backend, in __host__ __device__ functions
// so the same code runs on the GPU (compiled at run time by NVRTC, see
// kernels/src/cuda_backend.rs) and on the host (kernels/src/cuda_host_check.rs compiles
// kernels/cuda/host_check.cpp with the system C++ compiler and checks every operation
// against arkworks).
//
// Field elements are in Montgomery form with R = 2^256, as eight little-endian u32 limbs:
// the same bytes as arkworks' four u64 limbs, so elements travel without conversion.
// Products use 64-bit accumulators (one mad.wide per limb product on the GPU). Fq2 =
// Fq[u]/(u² + 1) is a pair (c0, c1), as arkworks lays it out.
//
// The curve code is written once over a coordinate field C (CoordG1: Fq, for G1:
// y² = x³ + 3; CoordG2: Fq2, for the twist G2: y² = x³ + 3/(9 + u)); neither formula uses
// b. Points are XYZZ: x = X/ZZ, y = Y/ZZZ, ZZ³ = ZZZ², ZZ = 0 at infinity. Formulas from
// the Explicit-Formulas Database (madd-2008-s, add-2008-s, dbl-2008-s-1), with a = 0.
#pragma once

#if defined(__CUDACC__)
#define FM_HD __host__ __device__ __forceinline__
#define FM_UNROLL _Pragma("unroll")
#else
#define FM_HD inline
#define FM_UNROLL
#endif

typedef unsigned int u32;
typedef unsigned long long u64;

struct Fe {
    u32 l[8];
};

struct Fe2 {
    Fe c0, c1;
};

// The base field Fq: modulus limbs and −p⁻¹ mod 2^32.
struct Fq {
    static FM_HD u32 p(int i) {
        return i == 0   ? 0xd87cfd47u
               : i == 1 ? 0x3c208c16u
               : i == 2 ? 0x6871ca8du
               : i == 3 ? 0x97816a91u
               : i == 4 ? 0x8181585du
               : i == 5 ? 0xb85045b6u
               : i == 6 ? 0xe131a029u
                        : 0x30644e72u;
    }
    static FM_HD u32 inv() { return 0xe4866389u; }
};

// The scalar field Fr.
struct Fr {
    static FM_HD u32 p(int i) {
        return i == 0   ? 0xf0000001u
               : i == 1 ? 0x43e1f593u
               : i == 2 ? 0x79b97091u
               : i == 3 ? 0x2833e848u
               : i == 4 ? 0x8181585du
               : i == 5 ? 0xb85045b6u
               : i == 6 ? 0xe131a029u
                        : 0x30644e72u;
    }
    static FM_HD u32 inv() { return 0xefffffffu; }
};

FM_HD Fe fe_zero() {
    Fe r;
FM_UNROLL
    for (int i = 0; i < 8; i++) r.l[i] = 0;
    return r;
}

FM_HD bool fe_is_zero(const Fe& a) {
    u32 acc = 0;
FM_UNROLL
    for (int i = 0; i < 8; i++) acc |= a.l[i];
    return acc == 0;
}

FM_HD bool fe_eq(const Fe& a, const Fe& b) {
    u32 acc = 0;
FM_UNROLL
    for (int i = 0; i < 8; i++) acc |= a.l[i] ^ b.l[i];
    return acc == 0;
}

template <class F>
FM_HD bool fe_geq_p(const Fe& a) {
FM_UNROLL
    for (int i = 7; i >= 0; i--) {
        if (a.l[i] != F::p(i)) return a.l[i] > F::p(i);
    }
    return true;
}

template <class F>
FM_HD Fe fe_sub_p(const Fe& a) {
    Fe r;
    u64 borrow = 0;
FM_UNROLL
    for (int i = 0; i < 8; i++) {
        u64 d = (u64)a.l[i] - F::p(i) - borrow;
        r.l[i] = (u32)d;
        borrow = (d >> 32) & 1;
    }
    return r;
}

// a + b mod p for a, b < p (p < 2^254, so the sum never leaves 256 bits).
template <class F>
FM_HD Fe fe_add(const Fe& a, const Fe& b) {
    Fe r;
    u64 carry = 0;
FM_UNROLL
    for (int i = 0; i < 8; i++) {
        u64 s = (u64)a.l[i] + b.l[i] + carry;
        r.l[i] = (u32)s;
        carry = s >> 32;
    }
    return fe_geq_p<F>(r) ? fe_sub_p<F>(r) : r;
}

template <class F>
FM_HD Fe fe_sub(const Fe& a, const Fe& b) {
    Fe r;
    u64 borrow = 0;
FM_UNROLL
    for (int i = 0; i < 8; i++) {
        u64 d = (u64)a.l[i] - b.l[i] - borrow;
        r.l[i] = (u32)d;
        borrow = (d >> 32) & 1;
    }
    if (borrow) {
        u64 carry = 0;
FM_UNROLL
        for (int i = 0; i < 8; i++) {
            u64 s = (u64)r.l[i] + F::p(i) + carry;
            r.l[i] = (u32)s;
            carry = s >> 32;
        }
    }
    return r;
}

// Montgomery product a·b·2^−256 mod p (CIOS).
template <class F>
FM_HD Fe fe_mul(const Fe& a, const Fe& b) {
    u32 t[10];
FM_UNROLL
    for (int i = 0; i < 10; i++) t[i] = 0;
FM_UNROLL
    for (int i = 0; i < 8; i++) {
        u64 c = 0;
FM_UNROLL
        for (int j = 0; j < 8; j++) {
            u64 s = (u64)a.l[j] * b.l[i] + t[j] + c;
            t[j] = (u32)s;
            c = s >> 32;
        }
        u64 s8 = (u64)t[8] + c;
        t[8] = (u32)s8;
        t[9] = (u32)(s8 >> 32);
        u32 m = t[0] * F::inv();
        c = ((u64)m * F::p(0) + t[0]) >> 32;
FM_UNROLL
        for (int j = 1; j < 8; j++) {
            u64 s = (u64)m * F::p(j) + t[j] + c;
            t[j - 1] = (u32)s;
            c = s >> 32;
        }
        u64 s7 = (u64)t[8] + c;
        t[7] = (u32)s7;
        t[8] = t[9] + (u32)(s7 >> 32);
    }
    Fe r;
FM_UNROLL
    for (int i = 0; i < 8; i++) r.l[i] = t[i];
    return (t[8] != 0 || fe_geq_p<F>(r)) ? fe_sub_p<F>(r) : r;
}

// 1 in Montgomery form over Fq: 2^256 mod p.
FM_HD Fe fq_one() {
    Fe r;
    r.l[0] = 0xc58f0d9du;
    r.l[1] = 0xd35d438du;
    r.l[2] = 0xf5c70b3du;
    r.l[3] = 0x0a78eb28u;
    r.l[4] = 0x7879462cu;
    r.l[5] = 0x666ea36fu;
    r.l[6] = 0x9a07df2fu;
    r.l[7] = 0x0e0a77c1u;
    return r;
}

// The coordinate field of G1.
struct CoordG1 {
    typedef Fe E;
    static FM_HD E zero() { return fe_zero(); }
    static FM_HD E one() { return fq_one(); }
    static FM_HD bool is_zero(const E& a) { return fe_is_zero(a); }
    static FM_HD E add(const E& a, const E& b) { return fe_add<Fq>(a, b); }
    static FM_HD E sub(const E& a, const E& b) { return fe_sub<Fq>(a, b); }
    static FM_HD E mul(const E& a, const E& b) { return fe_mul<Fq>(a, b); }
};

// The coordinate field of G2: Fq2, products by Karatsuba (three Fq products).
struct CoordG2 {
    typedef Fe2 E;
    static FM_HD E zero() {
        E r;
        r.c0 = fe_zero();
        r.c1 = fe_zero();
        return r;
    }
    static FM_HD E one() {
        E r;
        r.c0 = fq_one();
        r.c1 = fe_zero();
        return r;
    }
    static FM_HD bool is_zero(const E& a) { return fe_is_zero(a.c0) && fe_is_zero(a.c1); }
    static FM_HD E add(const E& a, const E& b) {
        E r;
        r.c0 = fe_add<Fq>(a.c0, b.c0);
        r.c1 = fe_add<Fq>(a.c1, b.c1);
        return r;
    }
    static FM_HD E sub(const E& a, const E& b) {
        E r;
        r.c0 = fe_sub<Fq>(a.c0, b.c0);
        r.c1 = fe_sub<Fq>(a.c1, b.c1);
        return r;
    }
    static FM_HD E mul(const E& a, const E& b) {
        Fe v0 = fe_mul<Fq>(a.c0, b.c0);
        Fe v1 = fe_mul<Fq>(a.c1, b.c1);
        Fe cross = fe_mul<Fq>(fe_add<Fq>(a.c0, a.c1), fe_add<Fq>(b.c0, b.c1));
        E r;
        r.c0 = fe_sub<Fq>(v0, v1);
        r.c1 = fe_sub<Fq>(fe_sub<Fq>(cross, v0), v1);
        return r;
    }
};

template <class C>
struct AffineT {
    typename C::E x, y;
};

template <class C>
struct XyzzT {
    typename C::E x, y, zz, zzz;
};

typedef AffineT<CoordG1> Affine;
typedef XyzzT<CoordG1> Xyzz;
typedef AffineT<CoordG2> Affine2;
typedef XyzzT<CoordG2> Xyzz2;

template <class C>
FM_HD XyzzT<C> pt_infinity() {
    XyzzT<C> r;
    r.x = C::zero();
    r.y = C::zero();
    r.zz = C::zero();
    r.zzz = C::zero();
    return r;
}

template <class C>
FM_HD XyzzT<C> pt_from_affine(const AffineT<C>& a) {
    XyzzT<C> r;
    r.x = a.x;
    r.y = a.y;
    r.zz = C::one();
    r.zzz = C::one();
    return r;
}

// 2·p (dbl-2008-s-1); infinity doubles to itself.
template <class C>
FM_HD XyzzT<C> pt_double(const XyzzT<C>& p) {
    typedef typename C::E E;
    E u = C::add(p.y, p.y);
    E v = C::mul(u, u);
    E w = C::mul(u, v);
    E s = C::mul(p.x, v);
    E xx = C::mul(p.x, p.x);
    E m = C::add(C::add(xx, xx), xx);
    XyzzT<C> r;
    r.x = C::sub(C::sub(C::mul(m, m), s), s);
    r.y = C::sub(C::mul(m, C::sub(s, r.x)), C::mul(w, p.y));
    r.zz = C::mul(v, p.zz);
    r.zzz = C::mul(w, p.zzz);
    return r;
}

// p + q for an affine q that is not the point at infinity (madd-2008-s).
template <class C>
FM_HD XyzzT<C> pt_add_affine(const XyzzT<C>& p, const AffineT<C>& q) {
    typedef typename C::E E;
    if (C::is_zero(p.zz)) return pt_from_affine<C>(q);
    E u2 = C::mul(q.x, p.zz);
    E s2 = C::mul(q.y, p.zzz);
    E pp_ = C::sub(u2, p.x);
    E r = C::sub(s2, p.y);
    if (C::is_zero(pp_)) {
        return C::is_zero(r) ? pt_double<C>(pt_from_affine<C>(q)) : pt_infinity<C>();
    }
    E pp = C::mul(pp_, pp_);
    E ppp = C::mul(pp_, pp);
    E q2 = C::mul(p.x, pp);
    XyzzT<C> o;
    o.x = C::sub(C::sub(C::sub(C::mul(r, r), ppp), q2), q2);
    o.y = C::sub(C::mul(r, C::sub(q2, o.x)), C::mul(p.y, ppp));
    o.zz = C::mul(p.zz, pp);
    o.zzz = C::mul(p.zzz, ppp);
    return o;
}

// p + q for XYZZ points, either possibly at infinity (add-2008-s).
template <class C>
FM_HD XyzzT<C> pt_add(const XyzzT<C>& p, const XyzzT<C>& q) {
    typedef typename C::E E;
    if (C::is_zero(p.zz)) return q;
    if (C::is_zero(q.zz)) return p;
    E u1 = C::mul(p.x, q.zz);
    E u2 = C::mul(q.x, p.zz);
    E s1 = C::mul(p.y, q.zzz);
    E s2 = C::mul(q.y, p.zzz);
    E pp_ = C::sub(u2, u1);
    E r = C::sub(s2, s1);
    if (C::is_zero(pp_)) {
        return C::is_zero(r) ? pt_double<C>(p) : pt_infinity<C>();
    }
    E pp = C::mul(pp_, pp_);
    E ppp = C::mul(pp_, pp);
    E q2 = C::mul(u1, pp);
    XyzzT<C> o;
    o.x = C::sub(C::sub(C::sub(C::mul(r, r), ppp), q2), q2);
    o.y = C::sub(C::mul(r, C::sub(q2, o.x)), C::mul(s1, ppp));
    o.zz = C::mul(C::mul(p.zz, q.zz), pp);
    o.zzz = C::mul(C::mul(p.zzz, q.zzz), ppp);
    return o;
}

// k·p for a small k (the bits below `bits`), by double-and-add.
template <class C>
FM_HD XyzzT<C> pt_mul_small(const XyzzT<C>& p, u32 k, int bits) {
    XyzzT<C> m = pt_infinity<C>();
    for (int b = bits - 1; b >= 0; b--) {
        m = pt_double<C>(m);
        if ((k >> b) & 1u) m = pt_add<C>(m, p);
    }
    return m;
}

// Thread k of a batch verification's weights: points[k] (not the point at infinity) times
// the 128-bit weight weights[4k .. 4k + 4] (little-endian words), by double-and-add from
// the top bit (doubling the point at infinity leaves ZZ = 0).
template <class C>
FM_HD XyzzT<C> scale_one(const AffineT<C>* points, const u32* weights, u32 k) {
    XyzzT<C> m = pt_infinity<C>();
    for (int b = 127; b >= 0; b--) {
        m = pt_double<C>(m);
        if ((weights[4 * k + b / 32] >> (b % 32)) & 1u) m = pt_add_affine<C>(m, points[k]);
    }
    return m;
}

// Two of the GPU steps of an MSM (kernels/src/plan.rs), as functions of one thread so the
// host check runs them too; the plan they read, and the combining passes between them, are
// made on the device (msm_plan.cuh).

// Thread s of the accumulation: Σ ±points over segment s.
template <class C>
FM_HD XyzzT<C> msm_accumulate_one(const AffineT<C>* points, const u32* idx, u32 seg_off,
                                  u32 s) {
    u32 start = idx[seg_off + 2 * s];
    u32 len = idx[seg_off + 2 * s + 1];
    XyzzT<C> acc = pt_infinity<C>();
    for (u32 i = 0; i < len; i++) {
        u32 e = idx[start + i];
        AffineT<C> q = points[e >> 1];
        if (e & 1u) q.y = C::sub(C::zero(), q.y);
        acc = pt_add_affine<C>(acc, q);
    }
    return acc;
}

// Thread t of the reduction: Σ (b + 1)·bucket_b over buckets [lo, hi) of its window.
template <class C>
FM_HD XyzzT<C> msm_reduce_one(const XyzzT<C>* partials, const u32* idx, u32 bseg_off,
                              u32 chunks, u32 chunk, u32 buckets, u32 t) {
    u32 w = t / chunks;
    u32 lo = (t % chunks) * chunk;
    u32 hi = lo + chunk < buckets ? lo + chunk : buckets;
    XyzzT<C> running = pt_infinity<C>();
    XyzzT<C> acc = pt_infinity<C>();
    for (u32 b = hi; b > lo; b--) {
        u32 g = bseg_off + w * buckets + b - 1;
        // the combining passes left the bucket's sum in its first segment's slot
        if (idx[g] < idx[g + 1]) running = pt_add<C>(running, partials[idx[g]]);
        acc = pt_add<C>(acc, running);
    }
    // lo < 2^15: at most 2^15 buckets per window
    return pt_add<C>(acc, pt_mul_small<C>(running, lo, 16));
}

// The NTT over Fr (kernels/src/plan.rs's NttJob), as functions of one thread.

// The low `bits` bits of i reversed (1 ≤ bits ≤ 32).
FM_HD u32 fm_reverse_bits(u32 i, u32 bits) {
#if defined(__CUDA_ARCH__)
    return __brev(i) >> (32 - bits);
#else
    u32 r = 0;
    for (u32 b = 0; b < bits; b++) r |= ((i >> b) & 1u) << (bits - 1 - b);
    return r;
#endif
}

// Thread i of the permutation: out[reverse(i)] = in[i], times powers[i] for a coset.
FM_HD void ntt_permute_one(Fe* out, const Fe* in, const Fe* powers, u32 coset, u32 bits,
                           u32 i) {
    Fe v = in[i];
    if (coset) v = fe_mul<Fr>(v, powers[i]);
    out[fm_reverse_bits(i, bits)] = v;
}

// Thread k of one radix-2 butterfly stage of half span `half` over the permuted data.
FM_HD void ntt_stage_one(Fe* data, const Fe* twiddles, u32 half, u32 stride, u32 k) {
    u32 j = k % half;
    u32 i0 = (k / half) * 2 * half + j;
    u32 i1 = i0 + half;
    Fe u = data[i0];
    Fe v = fe_mul<Fr>(data[i1], twiddles[j * stride]);
    data[i0] = fe_add<Fr>(u, v);
    data[i1] = fe_sub<Fr>(u, v);
}

// Thread k of the quotient's last step (kernels/src/ops.rs's `quotient`): a[k] = a[k]·b[k] −
// c[k] over Fr, the three already on the coset.
FM_HD void fr_quotient_one(Fe* a, const Fe* b, const Fe* c, u32 k) {
    a[k] = fe_sub<Fr>(fe_mul<Fr>(a[k], b[k]), c[k]);
}
