// Element-wise G1 mixed addition, for checking the curve arithmetic against the CPU:
// data[4k..4k+4] holds an XYZZ point, aux[2k..2k+2] an affine one, aux[2n] is 1 in
// Montgomery form; the sum replaces data's point.

@compute @workgroup_size(64)
fn g1_add_mixed(@builtin(global_invocation_id) gid: vec3<u32>) {
    let k = gid.x + gid.y * params.row;
    if (k >= params.count) {
        return;
    }
    let one = aux[2u * params.count];
    let p = Xyzz(data[4u * k], data[4u * k + 1u], data[4u * k + 2u], data[4u * k + 3u]);
    let r = g1_add_affine(p, aux[2u * k], aux[2u * k + 1u], one);
    data[4u * k] = r.x;
    data[4u * k + 1u] = r.y;
    data[4u * k + 2u] = r.zz;
    data[4u * k + 3u] = r.zzz;
}
