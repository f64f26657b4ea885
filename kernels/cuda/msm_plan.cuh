// The MSM's bucket plan made on the device (kernels/src/device_plan.rs says what it is for
// and lays out its buffer): the signed window digits of every scalar, a counting sort of
// the (bucket, point) entries, the buckets cut into segments, and the halving passes that
// leave each bucket's sum in its first segment and each window's sum in its first chunk.
//
// Every step is a function of one thread, without barriers, so that the host check
// (kernels/cuda/host_check.cpp) runs the same code one thread after the other. The order
// of the entries inside a bucket depends on the order of the scatter's atomics on a GPU;
// the sums do not.
//
// The index buffer `idx` is laid out as the MSM kernels of bn254.cuh read it (entries,
// then segments at `seg_off`, then each bucket's first segment at `bseg_off`), followed by
// this plan's scratch: each segment's bucket (`segb_off`), the buckets' entry counts
// (`count_off`) and entry starts (`start_off`), and the two levels of the scan's partial
// sums (`up1_off`, `up2_off`; an entry count and a segment count each).
#pragma once

#if defined(__CUDACC__)
#define FM_D __device__ __forceinline__
FM_D u32 fm_atomic_add(u32* p, u32 v) { return atomicAdd(p, v); }
#else
#define FM_D inline
inline u32 fm_atomic_add(u32* p, u32 v) {
    u32 old = *p;
    *p = old + v;
    return old;
}
#endif

// Entries per segment and counts per scan thread (kernels/src/plan.rs's SEGMENT).
#define FM_SEGMENT 32u
#define FM_SCAN_FAN 32u

// `c` bits of the 256-bit `s` from bit `at` (zero past the top), as msm.rs's `bits`.
FM_HD u32 plan_bits(const Fe& s, u32 at, u32 c) {
    u32 i = at / 32, sh = at % 32;
    if (i >= 8) return 0;
    u64 w = s.l[i];
    if (i + 1 < 8) w |= (u64)s.l[i + 1] << 32;
    return (u32)(w >> sh) & ((1u << c) - 1u);
}

// Signed digit `w` of `s` in [−2^(c−1), 2^(c−1)) given the carry from the window below;
// updates the carry (msm.rs's `Digits`).
FM_HD int plan_digit(const Fe& s, u32 w, u32 c, u32& carry) {
    u32 v = plan_bits(s, w * c, c) + carry;
    if (v >= (1u << (c - 1))) {
        carry = 1;
        return (int)v - (int)(1u << c);
    }
    carry = 0;
    return (int)v;
}

// Thread i of the count: scalar i out of Montgomery form (in place; zero where point i
// is the point at infinity, which the host packs as zeros), then one count per nonzero
// digit in its bucket `w·buckets + |d| − 1`.
template <class C>
FM_D void plan_count_one(Fe* scalars, const AffineT<C>* points, u32* idx, u32 count_off,
                         u32 c, u32 windows, u32 buckets, u32 i) {
    Fe one = fe_zero();
    one.l[0] = 1;
    Fe s = fe_mul<Fr>(scalars[i], one);
    if (C::is_zero(points[i].x) && C::is_zero(points[i].y)) s = fe_zero();
    scalars[i] = s;
    u32 carry = 0;
    for (u32 w = 0; w < windows; w++) {
        int d = plan_digit(s, w, c, carry);
        if (d != 0) fm_atomic_add(&idx[count_off + w * buckets + (u32)(d < 0 ? -d : d) - 1], 1);
    }
}

// Thread t of the scan's first level: the entries and segments of buckets
// [32t, 32t + 32), into up1[2t], up1[2t + 1].
FM_HD void plan_up1_one(u32* idx, u32 count_off, u32 up1_off, u32 total, u32 t) {
    u32 e = 0, s = 0;
    for (u32 g = t * FM_SCAN_FAN; g < total && g < (t + 1) * FM_SCAN_FAN; g++) {
        u32 n = idx[count_off + g];
        e += n;
        s += (n + FM_SEGMENT - 1) / FM_SEGMENT;
    }
    idx[up1_off + 2 * t] = e;
    idx[up1_off + 2 * t + 1] = s;
}

// Thread u of the second level: the sums of first-level pairs [32u, 32u + 32) of `n1`.
FM_HD void plan_up2_one(u32* idx, u32 up1_off, u32 up2_off, u32 n1, u32 u) {
    u32 e = 0, s = 0;
    for (u32 t = u * FM_SCAN_FAN; t < n1 && t < (u + 1) * FM_SCAN_FAN; t++) {
        e += idx[up1_off + 2 * t];
        s += idx[up1_off + 2 * t + 1];
    }
    idx[up2_off + 2 * u] = e;
    idx[up2_off + 2 * u + 1] = s;
}

// One thread: the `n2` second-level pairs to their exclusive prefix sums, and the total
// segment count into the last bucket-segment slot `bseg_off + total`.
FM_HD void plan_top(u32* idx, u32 up2_off, u32 n2, u32 bseg_off, u32 total) {
    u32 e = 0, s = 0;
    for (u32 u = 0; u < n2; u++) {
        u32 de = idx[up2_off + 2 * u], ds = idx[up2_off + 2 * u + 1];
        idx[up2_off + 2 * u] = e;
        idx[up2_off + 2 * u + 1] = s;
        e += de;
        s += ds;
    }
    idx[bseg_off + total] = s;
}

// Thread u going down: first-level pairs [32u, 32u + 32) to their exclusive prefixes.
FM_HD void plan_down2_one(u32* idx, u32 up1_off, u32 up2_off, u32 n1, u32 u) {
    u32 e = idx[up2_off + 2 * u], s = idx[up2_off + 2 * u + 1];
    for (u32 t = u * FM_SCAN_FAN; t < n1 && t < (u + 1) * FM_SCAN_FAN; t++) {
        u32 de = idx[up1_off + 2 * t], ds = idx[up1_off + 2 * t + 1];
        idx[up1_off + 2 * t] = e;
        idx[up1_off + 2 * t + 1] = s;
        e += de;
        s += ds;
    }
}

// Thread t going down: each of buckets [32t, 32t + 32)'s first entry and first segment.
FM_HD void plan_down1_one(u32* idx, u32 count_off, u32 start_off, u32 up1_off, u32 bseg_off,
                          u32 total, u32 t) {
    u32 e = idx[up1_off + 2 * t], s = idx[up1_off + 2 * t + 1];
    for (u32 g = t * FM_SCAN_FAN; g < total && g < (t + 1) * FM_SCAN_FAN; g++) {
        u32 n = idx[count_off + g];
        idx[start_off + g] = e;
        idx[bseg_off + g] = s;
        e += n;
        s += (n + FM_SEGMENT - 1) / FM_SEGMENT;
    }
}

// Thread s of the segments (any s; those past the total return): its bucket by binary
// search of the bucket starts, then its (first entry, length) and its bucket.
FM_HD void plan_segment_one(u32* idx, u32 seg_off, u32 bseg_off, u32 segb_off, u32 count_off,
                            u32 start_off, u32 total, u32 s) {
    if (s >= idx[bseg_off + total]) return;
    // the last bucket g with bseg[g] <= s (bseg is non-decreasing, bseg[0] = 0)
    u32 lo = 0, hi = total;
    while (hi - lo > 1) {
        u32 mid = lo + (hi - lo) / 2;
        if (idx[bseg_off + mid] <= s) lo = mid;
        else hi = mid;
    }
    u32 j = s - idx[bseg_off + lo];
    u32 n = idx[count_off + lo];
    u32 len = n - j * FM_SEGMENT < FM_SEGMENT ? n - j * FM_SEGMENT : FM_SEGMENT;
    idx[seg_off + 2 * s] = idx[start_off + lo] + j * FM_SEGMENT;
    idx[seg_off + 2 * s + 1] = len;
    idx[segb_off + s] = lo;
}

// Thread i of the scatter: point i's entry `i << 1 | negative` into the next free slot of
// each bucket it has a digit in (counting the bucket's count down to zero).
FM_D void plan_scatter_one(const Fe* scalars, u32* idx, u32 count_off, u32 start_off, u32 c,
                           u32 windows, u32 buckets, u32 i) {
    Fe s = scalars[i];
    u32 carry = 0;
    for (u32 w = 0; w < windows; w++) {
        int d = plan_digit(s, w, c, carry);
        if (d == 0) continue;
        u32 g = w * buckets + (u32)(d < 0 ? -d : d) - 1;
        u32 left = fm_atomic_add(&idx[count_off + g], 0xffffffffu);
        idx[idx[start_off + g] + left - 1] = i << 1 | (d < 0 ? 1u : 0u);
    }
}

// Thread s of combining pass k: a bucket of m segments has ⌈m/2^k⌉ = m_k partial sums
// left; slot i < ⌊m_k/2⌋ adds slot i + ⌈m_k/2⌉ (no slot is both read and written in one
// pass), as plan.rs's pairs do.
template <class C>
FM_HD void msm_combine_pass_one(XyzzT<C>* partials, const u32* idx, u32 bseg_off,
                                u32 segb_off, u32 total, u32 k, u32 s) {
    if (s >= idx[bseg_off + total]) return;
    u32 g = idx[segb_off + s];
    u32 s0 = idx[bseg_off + g];
    u64 m = idx[bseg_off + g + 1] - s0;
    u32 mk = (u32)((m + (1ull << k) - 1) >> k);
    u32 i = s - s0;
    if (mk > 1 && i < mk / 2) partials[s] = pt_add<C>(partials[s], partials[s + (mk + 1) / 2]);
}

// Thread t of a window pass over the reduction's outputs (`chunks` per window, `m` of them
// still to add): output i < ⌊m/2⌋ of window t / ⌊m/2⌋ adds output i + ⌈m/2⌉.
template <class C>
FM_HD void msm_window_pass_one(XyzzT<C>* out, u32 chunks, u32 m, u32 t) {
    u32 pairs = m / 2;
    u32 w = t / pairs, i = t % pairs;
    XyzzT<C>* win = out + w * chunks;
    win[i] = pt_add<C>(win[i], win[i + (m + 1) / 2]);
}
