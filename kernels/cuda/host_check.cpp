// Runs the arithmetic of bn254.cuh on the host, for kernels/src/cuda_host_check.rs, which
// compiles this file with the system C++ compiler and compares every answer with arkworks.
//
// Reads one request per line on stdin and answers one line on stdout. Field elements are
// 64 hex digits: the 32 little-endian bytes of the Montgomery form. Requests:
// An Fq2 element (and a G2 coordinate) is two such elements, c0 then c1. Requests:
//   fq_add A B | fq_sub A B | fq_mul A B | fr_add A B | fr_sub A B | fr_mul A B  -> C
//   fq2_add A B | fq2_sub A B | fq2_mul A B                                     -> C
//   g1_add_affine X Y ZZ ZZZ QX QY                                              -> X Y ZZ ZZZ
//   g1_add X1 Y1 ZZ1 ZZZ1 X2 Y2 ZZ2 ZZZ2                                        -> X Y ZZ ZZZ
//   g1_double X Y ZZ ZZZ                                                        -> X Y ZZ ZZZ
//   g2_add_affine, g2_add, g2_double: the same over G2
//   msm N QX1 QY1 … QXN QYN S1 … SN  WORDS C WINDOWS BUCKETS CHUNKS CHUNK TOTAL SLOTS UP1 UP2
//       SEG_OFF BSEG_OFF SEGB_OFF COUNT_OFF START_OFF UP1_OFF UP2_OFF PASSES
//       -> each window's sum (XYZZ), as the GPU computes them (the device plan of
//          msm_plan.cuh, accumulation, combining passes, reduction, window passes) one
//          thread after the other, then `|` and the plan's first SEGB_OFF words
//   msm_g2 …: the same over G2
//   ntt N COSET HAS_POST [POST] X1 … XN [P1 … PN when COSET] T1 … T(N/2)
//       -> the transform as the CUDA kernels compute it (ntt_permute, ntt_stage, ntt_mul)
//   quotient N INV_N A1 … AN B1 … BN P1 … PN TI1 … TI(N/2) TF1 … TF(N/2)
//       -> h = a·b − c on the coset (P: the shift's powers; TI, TF: inverse and forward
//          twiddles), as the CUDA backend's quotient computes it
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bn254.cuh"
#include "msm_plan.cuh"

static Fe read_fe(std::istream& in) {
    std::string h;
    in >> h;
    Fe r = fe_zero();
    if (h.size() != 64) {
        std::fprintf(stderr, "bad element %s\n", h.c_str());
        std::exit(2);
    }
    for (int b = 0; b < 32; b++) {
        u32 byte = (u32)std::stoul(h.substr(2 * b, 2), nullptr, 16);
        r.l[b / 4] |= byte << (8 * (b % 4));
    }
    return r;
}

static void write_fe(const Fe& a) {
    for (int b = 0; b < 32; b++) std::printf("%02x", (a.l[b / 4] >> (8 * (b % 4))) & 0xff);
}

// A coordinate of C: one element for G1, two (c0, c1) for G2.
static void read_coord(std::istream& in, Fe& a) { a = read_fe(in); }
static void read_coord(std::istream& in, Fe2& a) {
    a.c0 = read_fe(in);
    a.c1 = read_fe(in);
}
static void write_coord(const Fe& a) { write_fe(a); }
static void write_coord(const Fe2& a) {
    write_fe(a.c0);
    std::printf(" ");
    write_fe(a.c1);
}

template <class C>
static XyzzT<C> read_xyzz(std::istream& in) {
    XyzzT<C> p;
    read_coord(in, p.x);
    read_coord(in, p.y);
    read_coord(in, p.zz);
    read_coord(in, p.zzz);
    return p;
}

template <class C>
static AffineT<C> read_affine(std::istream& in) {
    AffineT<C> q;
    read_coord(in, q.x);
    read_coord(in, q.y);
    return q;
}

template <class C>
static void write_xyzz(const XyzzT<C>& p) {
    write_coord(p.x);
    std::printf(" ");
    write_coord(p.y);
    std::printf(" ");
    write_coord(p.zz);
    std::printf(" ");
    write_coord(p.zzz);
}

// The curve requests of one group (PREFIX_add, PREFIX_double, PREFIX_add_affine); false
// when `op` is none of them.
template <class C>
static bool curve_op(const std::string& op, const std::string& prefix, std::istream& in) {
    if (op == prefix + "_add") {
        XyzzT<C> p = read_xyzz<C>(in);
        XyzzT<C> q = read_xyzz<C>(in);
        write_xyzz<C>(pt_add<C>(p, q));
    } else if (op == prefix + "_double") {
        write_xyzz<C>(pt_double<C>(read_xyzz<C>(in)));
    } else if (op == prefix + "_add_affine") {
        XyzzT<C> p = read_xyzz<C>(in);
        write_xyzz<C>(pt_add_affine<C>(p, read_affine<C>(in)));
    } else {
        return false;
    }
    return true;
}

// An MSM request: the bucket plan's (msm_plan.cuh) and the MSM kernels' per-thread
// functions, one thread after the other, in the order the backend launches them.
template <class C>
static void msm(std::istream& in) {
    u32 n;
    in >> n;
    std::vector<AffineT<C>> points(n);
    for (auto& q : points) q = read_affine<C>(in);
    std::vector<Fe> scalars(n);
    for (auto& s : scalars) s = read_fe(in);
    u32 words, c, windows, buckets, chunks, chunk, total, slots, up1, up2;
    u32 seg_off, bseg_off, segb_off, count_off, start_off, up1_off, up2_off, passes;
    in >> words >> c >> windows >> buckets >> chunks >> chunk >> total >> slots >> up1 >> up2 >>
        seg_off >> bseg_off >> segb_off >> count_off >> start_off >> up1_off >> up2_off >> passes;
    std::vector<u32> idx(words, 0);
    u32* x = idx.data();
    for (u32 i = 0; i < n; i++)
        plan_count_one<C>(scalars.data(), points.data(), x, count_off, c, windows, buckets, i);
    for (u32 t = 0; t < up1; t++) plan_up1_one(x, count_off, up1_off, total, t);
    for (u32 u = 0; u < up2; u++) plan_up2_one(x, up1_off, up2_off, up1, u);
    plan_top(x, up2_off, up2, bseg_off, total);
    for (u32 u = 0; u < up2; u++) plan_down2_one(x, up1_off, up2_off, up1, u);
    for (u32 t = 0; t < up1; t++)
        plan_down1_one(x, count_off, start_off, up1_off, bseg_off, total, t);
    for (u32 s = 0; s < slots; s++)
        plan_segment_one(x, seg_off, bseg_off, segb_off, count_off, start_off, total, s);
    for (u32 i = 0; i < n; i++)
        plan_scatter_one(scalars.data(), x, count_off, start_off, c, windows, buckets, i);
    std::vector<XyzzT<C>> partials(slots);
    for (u32 s = 0; s < slots; s++)
        partials[s] = msm_accumulate_one<C>(points.data(), x, seg_off, s);
    for (u32 k = 0; k < passes; k++)
        for (u32 s = 0; s < slots; s++)
            msm_combine_pass_one<C>(partials.data(), x, bseg_off, segb_off, total, k, s);
    std::vector<XyzzT<C>> out(windows * chunks);
    for (u32 t = 0; t < windows * chunks; t++)
        out[t] = msm_reduce_one<C>(partials.data(), x, bseg_off, chunks, chunk, buckets, t);
    for (u32 m = chunks; m > 1; m = (m + 1) / 2)
        for (u32 t = 0; t < windows * (m / 2); t++) msm_window_pass_one<C>(out.data(), chunks, m, t);
    for (u32 w = 0; w < windows; w++) {
        if (w) std::printf(" ");
        write_xyzz<C>(out[w * chunks]);
    }
    // the plan itself: entries, segments and bucket starts
    std::printf(" |");
    for (u32 i = 0; i < segb_off; i++) std::printf(" %u", idx[i]);
}

// One NTT as the CUDA backend launches it: `in` permuted into `out` (times `powers` for a
// coset), the butterfly stages with `twiddles`, then times `post` when given.
static void run_ntt(std::vector<Fe>& out, const std::vector<Fe>& in, const std::vector<Fe>& powers,
                    u32 coset, const std::vector<Fe>& twiddles, const Fe* post) {
    u32 n = (u32)in.size(), bits = 0;
    while ((1u << bits) < n) bits++;
    for (u32 i = 0; i < n; i++) ntt_permute_one(out.data(), in.data(), powers.data(), coset, bits, i);
    for (u32 half = 1; half < n; half *= 2)
        for (u32 k = 0; k < n / 2; k++)
            ntt_stage_one(out.data(), twiddles.data(), half, n / (2 * half), k);
    if (post)
        for (u32 i = 0; i < n; i++) out[i] = fe_mul<Fr>(out[i], *post);
}

static std::vector<Fe> read_fes(std::istream& in, u32 n) {
    std::vector<Fe> v(n);
    for (auto& x : v) x = read_fe(in);
    return v;
}

static void write_fes(const std::vector<Fe>& v) {
    for (size_t i = 0; i < v.size(); i++) {
        if (i) std::printf(" ");
        write_fe(v[i]);
    }
}

// An NTT request: the permutation, the butterfly stages and the scaling, one thread after
// the other, as the CUDA backend launches them.
static void ntt(std::istream& in) {
    u32 n, coset, has_post;
    in >> n >> coset >> has_post;
    Fe post = has_post ? read_fe(in) : fe_zero();
    std::vector<Fe> x = read_fes(in, n);
    std::vector<Fe> powers = coset ? read_fes(in, n) : std::vector<Fe>(1);
    std::vector<Fe> twiddles = read_fes(in, n / 2), data(n);
    run_ntt(data, x, powers, coset, twiddles, has_post ? &post : nullptr);
    write_fes(data);
}

// A quotient request: c = a∘b; each of a, b, c inverse-transformed then evaluated on the
// coset; a·b − c, in the order the CUDA backend's quotient launches its kernels.
static void quotient(std::istream& in) {
    u32 n;
    in >> n;
    Fe inv_n = read_fe(in);
    std::vector<Fe> a = read_fes(in, n), b = read_fes(in, n);
    std::vector<Fe> powers = read_fes(in, n);
    std::vector<Fe> tw_inv = read_fes(in, n / 2), tw_fwd = read_fes(in, n / 2);
    std::vector<Fe> c(n), t(n), none(1);
    for (u32 k = 0; k < n; k++) c[k] = fe_mul<Fr>(a[k], b[k]);
    for (std::vector<Fe>* x : {&a, &b, &c}) {
        run_ntt(t, *x, none, 0, tw_inv, &inv_n);
        run_ntt(*x, t, powers, 1, tw_fwd, nullptr);
    }
    for (u32 k = 0; k < n; k++) fr_quotient_one(a.data(), b.data(), c.data(), k);
    write_fes(a);
}

// A weights request: n affine G1 points, then 4n weight words; the n products.
static void scale(std::istream& in) {
    u32 n;
    in >> n;
    std::vector<Affine> points(n);
    for (auto& q : points) q = read_affine<CoordG1>(in);
    std::vector<u32> weights(4 * n);
    for (auto& w : weights) in >> w;
    for (u32 k = 0; k < n; k++) {
        if (k) std::printf(" ");
        write_xyzz<CoordG1>(scale_one<CoordG1>(points.data(), weights.data(), k));
    }
}

int main() {
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string op;
        in >> op;
        if (op.empty()) continue;
        if (op.size() == 6 && op[0] == 'f' && op[2] == '_') {
            Fe a = read_fe(in), b = read_fe(in), c;
            bool fq = op[1] == 'q';
            std::string f = op.substr(3);
            if (f == "add") c = fq ? fe_add<Fq>(a, b) : fe_add<Fr>(a, b);
            else if (f == "sub") c = fq ? fe_sub<Fq>(a, b) : fe_sub<Fr>(a, b);
            else if (f == "mul") c = fq ? fe_mul<Fq>(a, b) : fe_mul<Fr>(a, b);
            else return 2;
            write_fe(c);
        } else if (op == "fq2_add" || op == "fq2_sub" || op == "fq2_mul") {
            Fe2 a, b;
            read_coord(in, a);
            read_coord(in, b);
            write_coord(op == "fq2_add"   ? CoordG2::add(a, b)
                        : op == "fq2_sub" ? CoordG2::sub(a, b)
                                          : CoordG2::mul(a, b));
        } else if (curve_op<CoordG1>(op, "g1", in) || curve_op<CoordG2>(op, "g2", in)) {
        } else if (op == "msm") {
            msm<CoordG1>(in);
        } else if (op == "msm_g2") {
            msm<CoordG2>(in);
        } else if (op == "ntt") {
            ntt(in);
        } else if (op == "quotient") {
            quotient(in);
        } else if (op == "scale") {
            scale(in);
        } else {
            std::fprintf(stderr, "unknown request %s\n", op.c_str());
            return 2;
        }
        std::printf("\n");
        std::fflush(stdout);
    }
    return 0;
}
