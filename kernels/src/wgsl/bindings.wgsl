// The one binding layout every kernel here uses: the vector worked on, a read-only
// second operand, and the dispatch parameters.

struct Params {
    half: u32,    // butterfly span of this stage
    stride: u32,  // n / (2·half): twiddle index step
    count: u32,   // threads that do work
    row: u32,     // threads per dispatch row (2-D dispatch for large n)
}

@group(0) @binding(0) var<storage, read_write> data: array<Fe>;
@group(0) @binding(1) var<storage, read> aux: array<Fe>;
@group(0) @binding(2) var<uniform> params: Params;
