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
