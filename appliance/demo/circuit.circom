pragma circom 2.0.0;

// Tiny test circuit for the Groth16 fixtures (see gen.sh).
// Public signals, in snarkjs order: [out, a, b]  (outputs first, then public inputs).
// Private input: w.
//   lt  = (a < b)        via circomlib LessThan(8) (which uses Num2Bits(9))
//   out = a * w^2 + b * lt
include "circomlib/circuits/comparators.circom";

template Tiny() {
    signal input a;
    signal input b;
    signal input w;
    signal output out;

    component lt = LessThan(8);
    lt.in[0] <== a;
    lt.in[1] <== b;

    signal w2;
    w2 <== w * w;
    signal aw2;
    aw2 <== a * w2;
    signal blt;
    blt <== b * lt.out;
    out <== aw2 + blt;
}

component main {public [a, b]} = Tiny();
