// Fq2 = Fq[u]/(u² + 1) over field.wgsl's Fq (BN254's quadratic extension): c0 + c1·u,
// the same bytes as arkworks' Fq2 (c0 then c1).

struct Fe2 {
    c0: Fe,
    c1: Fe,
}

fn fe2_add(a: Fe2, b: Fe2) -> Fe2 {
    return Fe2(fe_add(a.c0, b.c0), fe_add(a.c1, b.c1));
}

fn fe2_sub(a: Fe2, b: Fe2) -> Fe2 {
    return Fe2(fe_sub(a.c0, b.c0), fe_sub(a.c1, b.c1));
}

// Karatsuba: (a0·b0 − a1·b1) + ((a0 + a1)(b0 + b1) − a0·b0 − a1·b1)·u, three products.
// The products run in a loop with one fe_mul call site: shader compilers inline every
// call, and lavapipe's compile time grows steeply with the inlined code.
fn fe2_mul(a: Fe2, b: Fe2) -> Fe2 {
    var x = array<Fe, 3>(a.c0, a.c1, fe_add(a.c0, a.c1));
    var y = array<Fe, 3>(b.c0, b.c1, fe_add(b.c0, b.c1));
    var v: array<Fe, 3>;
    for (var i = 0; i < 3; i = i + 1) {
        v[i] = fe_mul(x[i], y[i]);
    }
    return Fe2(fe_sub(v[0], v[1]), fe_sub(fe_sub(v[2], v[0]), v[1]));
}

fn fe2_is_zero(a: Fe2) -> bool {
    return fe_is_zero(a.c0) && fe_is_zero(a.c1);
}

fn fe2_zero() -> Fe2 {
    return Fe2(fe_zero(), fe_zero());
}

fn fe2_one() -> Fe2 {
    return Fe2(fe_one(), fe_zero());
}
