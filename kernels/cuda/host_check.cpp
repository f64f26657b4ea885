// Runs the arithmetic of bn254.cuh on the host, for kernels/src/cuda_host_check.rs, which
// compiles this file with the system C++ compiler and compares every answer with arkworks.
//
// Reads one request per line on stdin and answers one line on stdout. Field elements are
// 64 hex digits: the 32 little-endian bytes of the Montgomery form. Requests:
//   fq_add A B | fq_sub A B | fq_mul A B | fr_add A B | fr_sub A B | fr_mul A B  -> C
//   g1_add_affine X Y ZZ ZZZ QX QY                                              -> X Y ZZ ZZZ
//   g1_add X1 Y1 ZZ1 ZZZ1 X2 Y2 ZZ2 ZZZ2                                        -> X Y ZZ ZZZ
//   g1_double X Y ZZ ZZZ                                                        -> X Y ZZ ZZZ
//   msm N QX1 QY1 … QXN QYN  I IDX1 … IDXI  SEG_OFF BSEG_OFF CHUNKS CHUNK BUCKETS SEGMENTS
//       WINDOWS PASSES (PAIR_OFF COUNT)…
//       -> the reduction's outputs (windows·chunks XYZZ points), as the GPU kernels compute
//          them (accumulate, the combining passes, reduce), one thread after the other
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

static Xyzz read_xyzz(std::istream& in) {
    Xyzz p;
    p.x = read_fe(in);
    p.y = read_fe(in);
    p.zz = read_fe(in);
    p.zzz = read_fe(in);
    return p;
}

static void write_xyzz(const Xyzz& p) {
    write_fe(p.x);
    std::printf(" ");
    write_fe(p.y);
    std::printf(" ");
    write_fe(p.zz);
    std::printf(" ");
    write_fe(p.zzz);
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
        } else if (op == "g1_add_affine") {
            Xyzz p = read_xyzz(in);
            Affine q;
            q.x = read_fe(in);
            q.y = read_fe(in);
            write_xyzz(g1_add_affine(p, q));
        } else if (op == "g1_add") {
            Xyzz p = read_xyzz(in);
            Xyzz q = read_xyzz(in);
            write_xyzz(g1_add(p, q));
        } else if (op == "g1_double") {
            write_xyzz(g1_double(read_xyzz(in)));
        } else if (op == "msm") {
            u32 n, count;
            in >> n;
            std::vector<Affine> points(n);
            for (auto& q : points) {
                q.x = read_fe(in);
                q.y = read_fe(in);
            }
            in >> count;
            std::vector<u32> idx(count);
            for (auto& v : idx) in >> v;
            u32 seg_off, bseg_off, chunks, chunk, buckets, segments, windows;
            in >> seg_off >> bseg_off >> chunks >> chunk >> buckets >> segments >> windows;
            std::vector<Xyzz> partials(segments);
            for (u32 s = 0; s < segments; s++)
                partials[s] = msm_accumulate_one(points.data(), idx.data(), seg_off, s);
            u32 passes;
            in >> passes;
            for (u32 p = 0; p < passes; p++) {
                u32 pair_off, count;
                in >> pair_off >> count;
                for (u32 t = 0; t < count; t++)
                    msm_combine_one(partials.data(), idx.data(), pair_off, t);
            }
            for (u32 t = 0; t < windows * chunks; t++) {
                if (t) std::printf(" ");
                write_xyzz(msm_reduce_one(partials.data(), idx.data(), bseg_off, chunks, chunk,
                                          buckets, t));
            }
        } else {
            std::fprintf(stderr, "unknown request %s\n", op.c_str());
            return 2;
        }
        std::printf("\n");
        std::fflush(stdout);
    }
    return 0;
}
