// BN254 G1 (y² = x³ + 3 over Fq) in XYZZ coordinates: x = X/ZZ, y = Y/ZZZ, ZZ³ = ZZZ²;
// ZZ = 0 is the point at infinity. The bucket accumulation of the MSM adds affine points
// into XYZZ buckets (mixed addition, 8M + 2S). Fq elements as in field.wgsl.

struct Xyzz {
    x: Fe,
    y: Fe,
    zz: Fe,
    zzz: Fe,
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

// 2·(x, y) for an affine point (mdbl-2008-s-1, a = 0).
fn g1_double_affine(x: Fe, y: Fe, one: Fe) -> Xyzz {
    let u = fe_add(y, y);
    let v = fe_mul(u, u);
    let w = fe_mul(u, v);
    let s = fe_mul(x, v);
    let xx = fe_mul(x, x);
    let m = fe_add(fe_add(xx, xx), xx);
    let x3 = fe_sub(fe_sub(fe_mul(m, m), s), s);
    let y3 = fe_sub(fe_mul(m, fe_sub(s, x3)), fe_mul(w, y));
    return Xyzz(x3, y3, v, w);
}

// p + (x, y) with (x, y) affine and not infinity (madd-2008-s); `one` is 1 in Montgomery
// form.
fn g1_add_affine(p: Xyzz, x: Fe, y: Fe, one: Fe) -> Xyzz {
    if (fe_is_zero(p.zz)) {
        return Xyzz(x, y, one, one);
    }
    let u2 = fe_mul(x, p.zz);
    let s2 = fe_mul(y, p.zzz);
    let pp_ = fe_sub(u2, p.x);
    let r = fe_sub(s2, p.y);
    if (fe_is_zero(pp_)) {
        if (fe_is_zero(r)) {
            return g1_double_affine(x, y, one);
        }
        return Xyzz(fe_zero(), fe_zero(), fe_zero(), fe_zero());
    }
    let pp = fe_mul(pp_, pp_);
    let ppp = fe_mul(pp_, pp);
    let q = fe_mul(p.x, pp);
    let x3 = fe_sub(fe_sub(fe_sub(fe_mul(r, r), ppp), q), q);
    let y3 = fe_sub(fe_mul(r, fe_sub(q, x3)), fe_mul(p.y, ppp));
    return Xyzz(x3, y3, fe_mul(p.zz, pp), fe_mul(p.zzz, ppp));
}

fn g1_infinity() -> Xyzz {
    return Xyzz(fe_zero(), fe_zero(), fe_zero(), fe_zero());
}

// 2·p (dbl-2008-s-1, a = 0); the point at infinity doubles to itself (ZZ stays 0).
fn g1_double(p: Xyzz) -> Xyzz {
    let u = fe_add(p.y, p.y);
    let v = fe_mul(u, u);
    let w = fe_mul(u, v);
    let s = fe_mul(p.x, v);
    let xx = fe_mul(p.x, p.x);
    let m = fe_add(fe_add(xx, xx), xx);
    let x3 = fe_sub(fe_sub(fe_mul(m, m), s), s);
    let y3 = fe_sub(fe_mul(m, fe_sub(s, x3)), fe_mul(w, p.y));
    return Xyzz(x3, y3, fe_mul(v, p.zz), fe_mul(w, p.zzz));
}

// p + q for two XYZZ points (add-2008-s), either of which may be the point at infinity.
fn g1_add(p: Xyzz, q: Xyzz) -> Xyzz {
    if (fe_is_zero(p.zz)) {
        return q;
    }
    if (fe_is_zero(q.zz)) {
        return p;
    }
    let u1 = fe_mul(p.x, q.zz);
    let u2 = fe_mul(q.x, p.zz);
    let s1 = fe_mul(p.y, q.zzz);
    let s2 = fe_mul(q.y, p.zzz);
    let pp_ = fe_sub(u2, u1);
    let r = fe_sub(s2, s1);
    if (fe_is_zero(pp_)) {
        if (fe_is_zero(r)) {
            return g1_double(p);
        }
        return g1_infinity();
    }
    let pp = fe_mul(pp_, pp_);
    let ppp = fe_mul(pp_, pp);
    let q2 = fe_mul(u1, pp);
    let x3 = fe_sub(fe_sub(fe_sub(fe_mul(r, r), ppp), q2), q2);
    let y3 = fe_sub(fe_mul(r, fe_sub(q2, x3)), fe_mul(s1, ppp));
    return Xyzz(x3, y3, fe_mul(fe_mul(p.zz, q.zz), pp), fe_mul(fe_mul(p.zzz, q.zzz), ppp));
}
