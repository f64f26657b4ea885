// G2's coordinates for curve.wgsl: Fq2 (fe2.wgsl), two Fe each in storage (c0, c1).

alias Co = Fe2;
const CO_FE: u32 = 2u;

fn co_add(a: Co, b: Co) -> Co {
    return fe2_add(a, b);
}

fn co_sub(a: Co, b: Co) -> Co {
    return fe2_sub(a, b);
}

fn co_mul(a: Co, b: Co) -> Co {
    return fe2_mul(a, b);
}

fn co_is_zero(a: Co) -> bool {
    return fe2_is_zero(a);
}

fn co_zero() -> Co {
    return fe2_zero();
}

fn co_one() -> Co {
    return fe2_one();
}

// A coordinate from its CO_FE elements in storage (first, last), and back.
fn co_of(first: Fe, last: Fe) -> Co {
    return Fe2(first, last);
}

fn co_first(a: Co) -> Fe {
    return a.c0;
}

fn co_last(a: Co) -> Fe {
    return a.c1;
}
