// The GPU steps of the MSM in G1 or G2 (kernels/src/plan.rs describes the whole
// algorithm), over curve.wgsl's points.
//
// accumulate: thread s adds the points of segment s — entries idx[start .. start + len],
//   each `point << 1 | negate`, points affine (x, y) in `src` — into an XYZZ partial sum,
//   written to out[s].
// combine (the reduce entry point with mp.combine = 1, sharing its one pt_add): thread t
//   adds partial idx[pair_off + 2t + 1] into partial idx[pair_off + 2t] (`out` holds the
//   partials then); a few passes leave each bucket's sum in its first slot.
// reduce: thread t = window·chunks + j walks buckets [lo, hi) of its window from the top,
//   adding each bucket's sum (its first segment's partial, now in `src`) into a running
//   sum, and writes Σ (b − lo + 1)·bucket_b + lo·Σ bucket_b = Σ (b + 1)·bucket_b over its
//   buckets.
// scale (G1 only): thread k multiplies the affine point k of `src` (not the point at
//   infinity) by its 128-bit weight, idx[4k .. 4k + 4] (little-endian words), by
//   double-and-add from the top bit, and writes the XYZZ product to out[k]: a batch
//   verification's random weights.
// Points are XYZZ, four coordinates of CO_FE elements each; affine points two
// coordinates; the host prepends fe_one() (1 in Montgomery form) and the coordinates.

struct MsmParams {
    count: u32,     // threads that do work
    row: u32,       // threads per dispatch row
    chunks: u32,    // reducing threads per window
    chunk: u32,     // buckets per reducing thread
    buckets: u32,   // buckets per window
    seg_off: u32,   // where the segments (start, len) begin in idx
    bseg_off: u32,  // where each bucket's first segment index begins in idx
    pair_off: u32,  // where this combining pass's pairs begin in idx
    combine: u32,   // 1: the reduce entry point runs one combining pass instead
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<Fe>;
@group(0) @binding(1) var<storage, read> src: array<Fe>;
@group(0) @binding(2) var<storage, read> idx: array<u32>;
@group(0) @binding(3) var<uniform> mp: MsmParams;

fn out_co(i: u32) -> Co {
    return co_of(out[CO_FE * i], out[CO_FE * i + CO_FE - 1u]);
}

fn src_co(i: u32) -> Co {
    return co_of(src[CO_FE * i], src[CO_FE * i + CO_FE - 1u]);
}

fn store(k: u32, p: Xyzz) {
    let coords = array<Co, 4>(p.x, p.y, p.zz, p.zzz);
    for (var c = 0u; c < 4u; c = c + 1u) {
        let i = CO_FE * (4u * k + c);
        out[i] = co_first(coords[c]);
        out[i + CO_FE - 1u] = co_last(coords[c]);
    }
}

fn load(k: u32) -> Xyzz {
    return Xyzz(out_co(4u * k), out_co(4u * k + 1u), out_co(4u * k + 2u), out_co(4u * k + 3u));
}

@compute @workgroup_size(64)
fn accumulate(@builtin(global_invocation_id) gid: vec3<u32>) {
    let s = gid.x + gid.y * mp.row;
    if (s >= mp.count) {
        return;
    }
    let start = idx[mp.seg_off + 2u * s];
    let len = idx[mp.seg_off + 2u * s + 1u];
    let one = co_one();
    var acc = pt_infinity();
    for (var i = 0u; i < len; i = i + 1u) {
        let e = idx[start + i];
        let k = e >> 1u;
        var y = src_co(2u * k + 1u);
        if ((e & 1u) == 1u) {
            y = co_sub(co_zero(), y);
        }
        acc = pt_add_affine(acc, src_co(2u * k), y, one);
    }
    store(s, acc);
}

// One pt_add call site drives the whole reduction (shader compilers inline every call, and
// on lavapipe each inlined addition costs seconds of compilation): a small state machine
// picks the operands of each step.
//   phase 0: move to the next bucket down (or to phase 2 past the chunk's last bucket)
//   phase 1: running += the bucket's sum (if it has one), then acc += running
//   phase 2: m = 2·m, then m += running when bit `bit` of lo is set (16 bits, top down)
//   phase 3: acc += m, done
//   phase 4: (combining pass) out[a] += out[b], done
@compute @workgroup_size(64)
fn reduce(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.x + gid.y * mp.row;
    if (t >= mp.count) {
        return;
    }
    let w = t / mp.chunks;
    let lo = (t % mp.chunks) * mp.chunk;
    let hi = min(lo + mp.chunk, mp.buckets);
    var running = pt_infinity();
    var acc = pt_infinity();
    var m = pt_infinity();
    var b = hi;
    var s = 0u;
    var s_end = 0u;
    var phase = select(0u, 4u, mp.combine == 1u);
    var pa = 0u;
    var pb = 0u;
    if (mp.combine == 1u) {
        pa = idx[mp.pair_off + 2u * t];
        pb = idx[mp.pair_off + 2u * t + 1u];
    }
    var bit = 16u;
    var add_running = false;
    loop {
        var x: Xyzz;
        var y: Xyzz;
        var into = 0u; // 0: running, 1: acc, 2: m, 3: out[pa]
        if (phase == 0u) {
            if (b == lo) {
                phase = 2u;
            } else {
                b = b - 1u;
                let g = mp.bseg_off + w * mp.buckets + b;
                s = idx[g];
                s_end = min(idx[g + 1u], s + 1u);
                phase = 1u;
            }
            continue;
        }
        if (phase == 1u) {
            if (s < s_end) {
                x = running;
                y = Xyzz(src_co(4u * s), src_co(4u * s + 1u), src_co(4u * s + 2u), src_co(4u * s + 3u));
                s = s + 1u;
            } else {
                x = acc;
                y = running;
                into = 1u;
                phase = 0u;
            }
        } else if (phase == 2u) {
            if (add_running) {
                x = m;
                y = running;
                add_running = false;
            } else if (bit > 0u) {
                bit = bit - 1u;
                x = m;
                y = m;
                add_running = ((lo >> bit) & 1u) == 1u;
            } else {
                x = acc;
                y = m;
                into = 1u;
                phase = 3u;
            }
            if (into == 0u) {
                into = 2u;
            }
        } else if (phase == 4u) {
            x = load(pa);
            y = load(pb);
            into = 3u;
            phase = 3u;
        } else {
            break;
        }
        let r = pt_add(x, y);
        if (into == 0u) {
            running = r;
        } else if (into == 1u) {
            acc = r;
        } else if (into == 2u) {
            m = r;
        } else {
            store(pa, r);
            return;
        }
    }
    store(t, acc);
}

// One pt_add call site here too: a doubling is pt_add(m, m), which takes its doubling
// branch.
@compute @workgroup_size(64)
fn scale(@builtin(global_invocation_id) gid: vec3<u32>) {
    let k = gid.x + gid.y * mp.row;
    if (k >= mp.count) {
        return;
    }
    let one = co_one();
    let p = Xyzz(src_co(2u * k), src_co(2u * k + 1u), one, one);
    var m = pt_infinity();
    var bit = 128u;
    var add = false;
    loop {
        var y: Xyzz;
        if (add) {
            y = p;
            add = false;
        } else if (bit > 0u) {
            bit = bit - 1u;
            y = m;
            add = ((idx[4u * k + bit / 32u] >> (bit % 32u)) & 1u) == 1u;
        } else {
            break;
        }
        m = pt_add(m, y);
    }
    store(k, m);
}
