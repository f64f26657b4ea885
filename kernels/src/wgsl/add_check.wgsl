// Element-wise mixed addition in G1 or G2, for checking the curve arithmetic against the
// CPU: data holds XYZZ points (four coordinates of CO_FE elements each), aux affine ones
// (two coordinates each); the sum replaces data's point.

fn data_co(i: u32) -> Co {
    return co_of(data[CO_FE * i], data[CO_FE * i + CO_FE - 1u]);
}

fn aux_co(i: u32) -> Co {
    return co_of(aux[CO_FE * i], aux[CO_FE * i + CO_FE - 1u]);
}

@compute @workgroup_size(64)
fn add_mixed(@builtin(global_invocation_id) gid: vec3<u32>) {
    let k = gid.x + gid.y * params.row;
    if (k >= params.count) {
        return;
    }
    let p = Xyzz(data_co(4u * k), data_co(4u * k + 1u), data_co(4u * k + 2u), data_co(4u * k + 3u));
    let r = pt_add_affine(p, aux_co(2u * k), aux_co(2u * k + 1u), co_one());
    let coords = array<Co, 4>(r.x, r.y, r.zz, r.zzz);
    for (var c = 0u; c < 4u; c = c + 1u) {
        let i = CO_FE * (4u * k + c);
        data[i] = co_first(coords[c]);
        data[i + CO_FE - 1u] = co_last(coords[c]);
    }
}
