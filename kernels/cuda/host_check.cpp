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
//   msm N QX1 QY1 … QXN QYN  I IDX1 … IDXI  SEG_OFF BSEG_OFF CHUNKS CHUNK BUCKETS SEGMENTS
//       WINDOWS PASSES (PAIR_OFF COUNT)…
//       -> the reduction's outputs (windows·chunks XYZZ points), as the GPU kernels compute
//          them (accumulate, the combining passes, reduce), one thread after the other
//   msm_g2 …: the same over G2
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bn254.cuh"

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

// An MSM request: the three kernels' per-thread functions, one thread after the other.
template <class C>
static void msm(std::istream& in) {
    u32 n, count;
    in >> n;
    std::vector<AffineT<C>> points(n);
    for (auto& q : points) q = read_affine<C>(in);
    in >> count;
    std::vector<u32> idx(count);
    for (auto& v : idx) in >> v;
    u32 seg_off, bseg_off, chunks, chunk, buckets, segments, windows;
    in >> seg_off >> bseg_off >> chunks >> chunk >> buckets >> segments >> windows;
    std::vector<XyzzT<C>> partials(segments);
    for (u32 s = 0; s < segments; s++)
        partials[s] = msm_accumulate_one<C>(points.data(), idx.data(), seg_off, s);
    u32 passes;
    in >> passes;
    for (u32 p = 0; p < passes; p++) {
        u32 pair_off, count;
        in >> pair_off >> count;
        for (u32 t = 0; t < count; t++)
            msm_combine_one<C>(partials.data(), idx.data(), pair_off, t);
    }
    for (u32 t = 0; t < windows * chunks; t++) {
        if (t) std::printf(" ");
        write_xyzz<C>(
            msm_reduce_one<C>(partials.data(), idx.data(), bseg_off, chunks, chunk, buckets, t));
    }
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
