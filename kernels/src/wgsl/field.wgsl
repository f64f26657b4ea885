// 256-bit prime-field arithmetic in Montgomery form (R = 2^256), eight little-endian u32
// limbs: the same bytes as arkworks' in-memory representation, so elements travel
// between CPU and GPU without conversion. The host prepends `P` (the modulus) and `INV`
// (−P⁻¹ mod 2^32) for the field in use. No 64-bit integers: products are assembled from
// 16-bit halves, which every WGSL implementation runs natively.

struct Fe {
    l: array<u32, 8>,
}

// a·b as (low, high) 32-bit words.
fn mul_wide(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    // ≤ (2^16−1)² + 2·(2^16−1) < 2^32: no overflow
    let mid = p01 + (p00 >> 16u) + (p10 & 0xffffu);
    let lo = (mid << 16u) | (p00 & 0xffffu);
    let hi = p11 + (mid >> 16u) + (p10 >> 16u);
    return vec2<u32>(lo, hi);
}

// t + a·b + c as (low, high); cannot overflow 64 bits.
fn mac(t: u32, a: u32, b: u32, c: u32) -> vec2<u32> {
    let p = mul_wide(a, b);
    let lo1 = p.x + t;
    var hi = p.y + select(0u, 1u, lo1 < t);
    let lo2 = lo1 + c;
    hi = hi + select(0u, 1u, lo2 < c);
    return vec2<u32>(lo2, hi);
}

// a − P where that does not borrow or `carry` (a 257th bit of a) is set, else a. Without
// branches: the field code is inlined at every call site, and branches multiply the
// work of shader compilers (lavapipe's above all) as well as diverging on GPUs.
fn fe_reduce_once(a: Fe, carry: u32) -> Fe {
    var d: Fe;
    var borrow = 0u;
    for (var i = 0; i < 8; i = i + 1) {
        let t = a.l[i] - P[i];
        d.l[i] = t - borrow;
        borrow = select(0u, 1u, a.l[i] < P[i]) | select(0u, 1u, t < borrow);
    }
    let keep = borrow == 1u && carry == 0u;
    var r: Fe;
    for (var i = 0; i < 8; i = i + 1) {
        r.l[i] = select(d.l[i], a.l[i], keep);
    }
    return r;
}

fn fe_add(a: Fe, b: Fe) -> Fe {
    var r: Fe;
    var carry = 0u;
    for (var i = 0; i < 8; i = i + 1) {
        let s = a.l[i] + b.l[i];
        let s2 = s + carry;
        carry = select(0u, 1u, s < a.l[i]) | select(0u, 1u, s2 < s);
        r.l[i] = s2;
    }
    // P < 2^254, so a + b < 2^255 never carries out of the top limb.
    return fe_reduce_once(r, 0u);
}

fn fe_sub(a: Fe, b: Fe) -> Fe {
    var r: Fe;
    var borrow = 0u;
    for (var i = 0; i < 8; i = i + 1) {
        let d = a.l[i] - b.l[i];
        let d2 = d - borrow;
        borrow = select(0u, 1u, a.l[i] < b.l[i]) | select(0u, 1u, d < borrow);
        r.l[i] = d2;
    }
    // add P back where a < b (its limbs masked by the borrow)
    let mask = 0u - borrow;
    var carry = 0u;
    for (var i = 0; i < 8; i = i + 1) {
        let s = r.l[i] + (P[i] & mask);
        let s2 = s + carry;
        carry = select(0u, 1u, s < r.l[i]) | select(0u, 1u, s2 < s);
        r.l[i] = s2;
    }
    return r;
}

// Montgomery product a·b·R⁻¹ mod P (CIOS).
fn fe_mul(a: Fe, b: Fe) -> Fe {
    var t: array<u32, 10>;
    for (var i = 0; i < 10; i = i + 1) {
        t[i] = 0u;
    }
    for (var i = 0; i < 8; i = i + 1) {
        var c = 0u;
        for (var j = 0; j < 8; j = j + 1) {
            let r = mac(t[j], a.l[j], b.l[i], c);
            t[j] = r.x;
            c = r.y;
        }
        let s8 = t[8] + c;
        t[9] = select(0u, 1u, s8 < c);
        t[8] = s8;
        let m = t[0] * INV;
        var r0 = mac(t[0], m, P[0], 0u);
        c = r0.y;
        for (var j = 1; j < 8; j = j + 1) {
            let r = mac(t[j], m, P[j], c);
            t[j - 1] = r.x;
            c = r.y;
        }
        let s7 = t[8] + c;
        t[7] = s7;
        t[8] = t[9] + select(0u, 1u, s7 < c);
    }
    var out: Fe;
    for (var i = 0; i < 8; i = i + 1) {
        out.l[i] = t[i];
    }
    return fe_reduce_once(out, t[8]);
}

fn fe_is_zero(a: Fe) -> bool {
    var acc = 0u;
    for (var i = 0; i < 8; i = i + 1) {
        acc = acc | a.l[i];
    }
    return acc == 0u;
}

fn fe_zero() -> Fe {
    var r: Fe;
    for (var i = 0; i < 8; i = i + 1) {
        r.l[i] = 0u;
    }
    return r;
}
