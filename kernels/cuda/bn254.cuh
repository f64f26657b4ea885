// BN254 field and G1 arithmetic for the CUDA backend, in __host__ __device__ functions so
// the same code runs on the GPU (compiled at run time by NVRTC, see
// kernels/src/cuda_backend.rs) and on the host (kernels/tests/cuda_host.rs compiles
// kernels/cuda/host_check.cpp with the system C++ compiler and checks every operation
// against arkworks).
//
// Field elements are in Montgomery form with R = 2^256, as eight little-endian u32 limbs:
// the same bytes as arkworks' four u64 limbs, so elements travel without conversion.
// Products use 64-bit accumulators (one mad.wide per limb product on the GPU).
//
// G1 points (y² = x³ + 3) are XYZZ: x = X/ZZ, y = Y/ZZZ, ZZ³ = ZZZ², ZZ = 0 at infinity.
// Formulas from the Explicit-Formulas Database (madd-2008-s, add-2008-s, dbl-2008-s-1,
// mdbl-2008-s-1), with a = 0.
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

struct Affine {
    Fe x, y;
};

struct Xyzz {
    Fe x, y, zz, zzz;
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

FM_HD Xyzz g1_infinity() {
    Xyzz r;
    r.x = fe_zero();
    r.y = fe_zero();
    r.zz = fe_zero();
    r.zzz = fe_zero();
    return r;
}

FM_HD Xyzz g1_from_affine(const Affine& a) {
    Xyzz r;
    r.x = a.x;
    r.y = a.y;
    r.zz = fq_one();
    r.zzz = fq_one();
    return r;
}

// 2·p (dbl-2008-s-1); infinity doubles to itself.
FM_HD Xyzz g1_double(const Xyzz& p) {
    Fe u = fe_add<Fq>(p.y, p.y);
    Fe v = fe_mul<Fq>(u, u);
    Fe w = fe_mul<Fq>(u, v);
    Fe s = fe_mul<Fq>(p.x, v);
    Fe xx = fe_mul<Fq>(p.x, p.x);
    Fe m = fe_add<Fq>(fe_add<Fq>(xx, xx), xx);
    Xyzz r;
    r.x = fe_sub<Fq>(fe_sub<Fq>(fe_mul<Fq>(m, m), s), s);
    r.y = fe_sub<Fq>(fe_mul<Fq>(m, fe_sub<Fq>(s, r.x)), fe_mul<Fq>(w, p.y));
    r.zz = fe_mul<Fq>(v, p.zz);
    r.zzz = fe_mul<Fq>(w, p.zzz);
    return r;
}

// p + q for an affine q that is not the point at infinity (madd-2008-s).
FM_HD Xyzz g1_add_affine(const Xyzz& p, const Affine& q) {
    if (fe_is_zero(p.zz)) return g1_from_affine(q);
    Fe u2 = fe_mul<Fq>(q.x, p.zz);
    Fe s2 = fe_mul<Fq>(q.y, p.zzz);
    Fe pp_ = fe_sub<Fq>(u2, p.x);
    Fe r = fe_sub<Fq>(s2, p.y);
    if (fe_is_zero(pp_)) {
        return fe_is_zero(r) ? g1_double(g1_from_affine(q)) : g1_infinity();
    }
    Fe pp = fe_mul<Fq>(pp_, pp_);
    Fe ppp = fe_mul<Fq>(pp_, pp);
    Fe q2 = fe_mul<Fq>(p.x, pp);
    Xyzz o;
    o.x = fe_sub<Fq>(fe_sub<Fq>(fe_sub<Fq>(fe_mul<Fq>(r, r), ppp), q2), q2);
    o.y = fe_sub<Fq>(fe_mul<Fq>(r, fe_sub<Fq>(q2, o.x)), fe_mul<Fq>(p.y, ppp));
    o.zz = fe_mul<Fq>(p.zz, pp);
    o.zzz = fe_mul<Fq>(p.zzz, ppp);
    return o;
}

// p + q for XYZZ points, either possibly at infinity (add-2008-s).
FM_HD Xyzz g1_add(const Xyzz& p, const Xyzz& q) {
    if (fe_is_zero(p.zz)) return q;
    if (fe_is_zero(q.zz)) return p;
    Fe u1 = fe_mul<Fq>(p.x, q.zz);
    Fe u2 = fe_mul<Fq>(q.x, p.zz);
    Fe s1 = fe_mul<Fq>(p.y, q.zzz);
    Fe s2 = fe_mul<Fq>(q.y, p.zzz);
    Fe pp_ = fe_sub<Fq>(u2, u1);
    Fe r = fe_sub<Fq>(s2, s1);
    if (fe_is_zero(pp_)) {
        return fe_is_zero(r) ? g1_double(p) : g1_infinity();
    }
    Fe pp = fe_mul<Fq>(pp_, pp_);
    Fe ppp = fe_mul<Fq>(pp_, pp);
    Fe q2 = fe_mul<Fq>(u1, pp);
    Xyzz o;
    o.x = fe_sub<Fq>(fe_sub<Fq>(fe_sub<Fq>(fe_mul<Fq>(r, r), ppp), q2), q2);
    o.y = fe_sub<Fq>(fe_mul<Fq>(r, fe_sub<Fq>(q2, o.x)), fe_mul<Fq>(s1, ppp));
    o.zz = fe_mul<Fq>(fe_mul<Fq>(p.zz, q.zz), pp);
    o.zzz = fe_mul<Fq>(fe_mul<Fq>(p.zzz, q.zzz), ppp);
    return o;
}

// k·p for a small k (the bits below `bits`), by double-and-add.
FM_HD Xyzz g1_mul_small(const Xyzz& p, u32 k, int bits) {
    Xyzz m = g1_infinity();
    for (int b = bits - 1; b >= 0; b--) {
        m = g1_double(m);
        if ((k >> b) & 1u) m = g1_add(m, p);
    }
    return m;
}

// The two GPU steps of the G1 MSM (kernels/src/plan.rs), as functions of one thread so the
// host check runs them too.

// Thread s of the accumulation: Σ ±points over segment s.
FM_HD Xyzz msm_accumulate_one(const Affine* points, const u32* idx, u32 seg_off, u32 s) {
    u32 start = idx[seg_off + 2 * s];
    u32 len = idx[seg_off + 2 * s + 1];
    Xyzz acc = g1_infinity();
    for (u32 i = 0; i < len; i++) {
        u32 e = idx[start + i];
        Affine q = points[e >> 1];
        if (e & 1u) q.y = fe_sub<Fq>(fe_zero(), q.y);
        acc = g1_add_affine(acc, q);
    }
    return acc;
}

// Thread t of a combining pass: partials[a] += partials[b] for its pair (a, b).
FM_HD void msm_combine_one(Xyzz* partials, const u32* idx, u32 pair_off, u32 t) {
    u32 a = idx[pair_off + 2 * t];
    u32 b = idx[pair_off + 2 * t + 1];
    partials[a] = g1_add(partials[a], partials[b]);
}

// Thread t of the reduction: Σ (b + 1)·bucket_b over buckets [lo, hi) of its window.
FM_HD Xyzz msm_reduce_one(const Xyzz* partials, const u32* idx, u32 bseg_off, u32 chunks,
                          u32 chunk, u32 buckets, u32 t) {
    u32 w = t / chunks;
    u32 lo = (t % chunks) * chunk;
    u32 hi = lo + chunk < buckets ? lo + chunk : buckets;
    Xyzz running = g1_infinity();
    Xyzz acc = g1_infinity();
    for (u32 b = hi; b > lo; b--) {
        u32 g = bseg_off + w * buckets + b - 1;
        // the combining passes left the bucket's sum in its first segment's slot
        if (idx[g] < idx[g + 1]) running = g1_add(running, partials[idx[g]]);
        acc = g1_add(acc, running);
    }
    // lo < 2^15: at most 2^15 buckets per window
    return g1_add(acc, g1_mul_small(running, lo, 16));
}
