// Points of a short Weierstrass curve with a = 0 (BN254 G1 over Fq, G2 over Fq2) in XYZZ
// coordinates: x = X/ZZ, y = Y/ZZZ, ZZ³ = ZZZ²; ZZ = 0 is the point at infinity. The
// bucket accumulation of the MSM adds affine points into XYZZ buckets (mixed addition,
// 8M + 2S). The coordinate field is `Co` with `co_*` operations, which the host prepends
// for the group in use (coords_g1.wgsl, coords_g2.wgsl); b never enters the formulas.

struct Xyzz {
    x: Co,
    y: Co,
    zz: Co,
    zzz: Co,
}

// 2·(x, y) for an affine point (mdbl-2008-s-1, a = 0).
fn pt_double_affine(x: Co, y: Co, one: Co) -> Xyzz {
    let u = co_add(y, y);
    let v = co_mul(u, u);
    let w = co_mul(u, v);
    let s = co_mul(x, v);
    let xx = co_mul(x, x);
    let m = co_add(co_add(xx, xx), xx);
    let x3 = co_sub(co_sub(co_mul(m, m), s), s);
    let y3 = co_sub(co_mul(m, co_sub(s, x3)), co_mul(w, y));
    return Xyzz(x3, y3, v, w);
}

// p + (x, y) with (x, y) affine and not infinity (madd-2008-s); `one` is 1 in Montgomery
// form.
fn pt_add_affine(p: Xyzz, x: Co, y: Co, one: Co) -> Xyzz {
    if (co_is_zero(p.zz)) {
        return Xyzz(x, y, one, one);
    }
    let u2 = co_mul(x, p.zz);
    let s2 = co_mul(y, p.zzz);
    let pp_ = co_sub(u2, p.x);
    let r = co_sub(s2, p.y);
    if (co_is_zero(pp_)) {
        if (co_is_zero(r)) {
            return pt_double_affine(x, y, one);
        }
        return Xyzz(co_zero(), co_zero(), co_zero(), co_zero());
    }
    let pp = co_mul(pp_, pp_);
    let ppp = co_mul(pp_, pp);
    let q = co_mul(p.x, pp);
    let x3 = co_sub(co_sub(co_sub(co_mul(r, r), ppp), q), q);
    let y3 = co_sub(co_mul(r, co_sub(q, x3)), co_mul(p.y, ppp));
    return Xyzz(x3, y3, co_mul(p.zz, pp), co_mul(p.zzz, ppp));
}

fn pt_infinity() -> Xyzz {
    return Xyzz(co_zero(), co_zero(), co_zero(), co_zero());
}

// 2·p (dbl-2008-s-1, a = 0); the point at infinity doubles to itself (ZZ stays 0).
fn pt_double(p: Xyzz) -> Xyzz {
    let u = co_add(p.y, p.y);
    let v = co_mul(u, u);
    let w = co_mul(u, v);
    let s = co_mul(p.x, v);
    let xx = co_mul(p.x, p.x);
    let m = co_add(co_add(xx, xx), xx);
    let x3 = co_sub(co_sub(co_mul(m, m), s), s);
    let y3 = co_sub(co_mul(m, co_sub(s, x3)), co_mul(w, p.y));
    return Xyzz(x3, y3, co_mul(v, p.zz), co_mul(w, p.zzz));
}

// p + q for two XYZZ points (add-2008-s), either of which may be the point at infinity.
fn pt_add(p: Xyzz, q: Xyzz) -> Xyzz {
    if (co_is_zero(p.zz)) {
        return q;
    }
    if (co_is_zero(q.zz)) {
        return p;
    }
    let u1 = co_mul(p.x, q.zz);
    let u2 = co_mul(q.x, p.zz);
    let s1 = co_mul(p.y, q.zzz);
    let s2 = co_mul(q.y, p.zzz);
    let pp_ = co_sub(u2, u1);
    let r = co_sub(s2, s1);
    if (co_is_zero(pp_)) {
        if (co_is_zero(r)) {
            return pt_double(p);
        }
        return pt_infinity();
    }
    let pp = co_mul(pp_, pp_);
    let ppp = co_mul(pp_, pp);
    let q2 = co_mul(u1, pp);
    let x3 = co_sub(co_sub(co_sub(co_mul(r, r), ppp), q2), q2);
    let y3 = co_sub(co_mul(r, co_sub(q2, x3)), co_mul(s1, ppp));
    return Xyzz(x3, y3, co_mul(co_mul(p.zz, q.zz), pp), co_mul(co_mul(p.zzz, q.zzz), ppp));
}
