// Radix-2 NTT stages and the final scaling over the field of field.wgsl.
//
// `data` holds the vector (bit-reversed by the host before the first stage); `aux` the
// twiddles ω^t for t < n/2 (stage kernel) or the constant (scale, in aux[0]).

@compute @workgroup_size(64)
fn stage(@builtin(global_invocation_id) gid: vec3<u32>) {
    let k = gid.x + gid.y * params.row;
    if (k >= params.count) {
        return;
    }
    let j = k % params.half;
    let i0 = (k / params.half) * 2u * params.half + j;
    let i1 = i0 + params.half;
    let u = data[i0];
    let v = fe_mul(data[i1], aux[j * params.stride]);
    data[i0] = fe_add(u, v);
    data[i1] = fe_sub(u, v);
}

@compute @workgroup_size(64)
fn scale(@builtin(global_invocation_id) gid: vec3<u32>) {
    let k = gid.x + gid.y * params.row;
    if (k >= params.count) {
        return;
    }
    data[k] = fe_mul(data[k], aux[0]);
}
