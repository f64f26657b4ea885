// G1's coordinates for curve.wgsl: Fq, one Fe each in storage.

alias Co = Fe;
const CO_FE: u32 = 1u;

fn co_add(a: Co, b: Co) -> Co {
    return fe_add(a, b);
}

fn co_sub(a: Co, b: Co) -> Co {
    return fe_sub(a, b);
}

fn co_mul(a: Co, b: Co) -> Co {
    return fe_mul(a, b);
}

fn co_is_zero(a: Co) -> bool {
    return fe_is_zero(a);
}

fn co_zero() -> Co {
    return fe_zero();
}

fn co_one() -> Co {
    return fe_one();
}

// A coordinate from its CO_FE elements in storage (first, last), and back.
fn co_of(first: Fe, last: Fe) -> Co {
    return first;
}

fn co_first(a: Co) -> Fe {
    return a;
}

fn co_last(a: Co) -> Fe {
    return a;
}
