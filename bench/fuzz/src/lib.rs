//! # fleetmesh-fuzz
//!
//! One harness per parser that takes bytes from outside the node: each is a plain
//! `fn(&[u8])` that feeds the bytes to the parser (and to what the node does next with a
//! parse that succeeds), checks the invariants that must hold for any input (a round trip
//! gives the same value back, a matcher-accepted document is valid …), and panics only on
//! a bug. [`TARGETS`] lists them by name.
//!
//! Two drivers run the same bodies:
//!
//! - `bench/fuzz.sh` builds the `fuzz` binary (feature `libfuzzer`) with coverage
//!   instrumentation and runs each target under libFuzzer, from its seed corpus in
//!   `bench/fuzz/corpus/<target>/`;
//! - `tests/corpus.rs` (part of `cargo test --workspace`) feeds every committed corpus
//!   file, and a bounded number of seeded mutations of them, through every harness.
//!
//! See `bench/fuzz/README.md` for the targets, what CI runs, and the crashes found.

pub mod appliance;
pub mod inference;
pub mod ledger;
pub mod prover;
pub mod relay;
pub mod tee;

/// A harness: takes any bytes; panics only on a bug.
pub type Harness = fn(&[u8]);

/// Every target: its name (the corpus folder under `bench/fuzz/corpus/`) and its harness.
pub const TARGETS: &[(&str, Harness)] = &[
    ("relay_event", relay::event),
    ("relay_filter", relay::filter),
    ("relay_message", relay::client_message),
    ("relay_negentropy", relay::negentropy),
    ("relay_nip44", relay::nip44),
    ("relay_giftwrap", relay::giftwrap),
    ("relay_didcomm", relay::didcomm),
    ("relay_hop", relay::hop),
    ("ledger_evidence", ledger::evidence),
    ("transport_frame", relay::transport_frame),
    ("transport_gossip", relay::transport_gossip),
    ("prover_snarkjs", prover::snarkjs),
    ("prover_zkey", prover::zkey),
    ("prover_r1cs", prover::r1cs),
    ("prover_wtns", prover::wtns),
    ("tee_snp", tee::snp),
    ("tee_spdm", tee::spdm),
    ("tee_der", tee::der),
    ("tee_x509", tee::x509),
    ("tee_crl", tee::crl),
    ("tee_ocsp", tee::ocsp),
    ("tee_rim", tee::rim),
    ("model_gguf", inference::gguf),
    ("model_safetensors", inference::safetensors),
    ("tokenizer_json", inference::tokenizer),
    ("chat_template", inference::chat_template),
    ("schema_grammar", inference::schema),
    ("bacalhau_spec", appliance::bacalhau_spec),
    ("blossom_auth", appliance::blossom_authorization),
    ("nip98_auth", appliance::nip98_authorization),
    ("settle_bolt11", appliance::bolt11),
    ("settle_cashu_token", appliance::cashu_token),
    ("settle_nwc", appliance::nwc),
    ("settle_l402", appliance::l402),
    ("settle_nutzap", appliance::nutzap),
];

/// The harness named `name`.
pub fn harness(name: &str) -> Option<Harness> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, h)| *h)
}

/// A fixed "now" (2026-06-01T00:00:00Z) for checks that take the time, so a run replays.
pub const NOW: u64 = 1_780_272_000;

/// Splits `data` at its first `sep` byte: `(before, after)`, or `(data, &[])`. Harnesses
/// that take two inputs (a schema and a document) read them this way, which the fuzzer
/// and hand-made seeds both find easy to write.
pub fn split_at_byte(data: &[u8], sep: u8) -> (&[u8], &[u8]) {
    match data.iter().position(|b| *b == sep) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}

/// A small deterministic generator (xorshift64*) for the seeded mutations of the corpus
/// replay.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value; 0 is mapped to a fixed non-zero state).
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value below `n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Values that often sit on a parser's boundaries, written over a mutated input.
const INTERESTING: &[&[u8]] = &[
    &[0],
    &[0xff],
    &[0x7f],
    &[0x80],
    &[0xff, 0xff],
    &[0, 0, 0, 0],
    &[0xff, 0xff, 0xff, 0xff],
    &[0xff, 0xff, 0xff, 0x7f],
    &[0, 0, 0, 0x80],
    &[0xff; 8],
    b"-1",
    b"0",
    b"4294967295",
    b"18446744073709551616",
    b"1e999",
    b"\"",
    b"[",
    b"{",
    b"]]]]",
    b"null",
];

/// One to four libFuzzer-style mutations of `input`, with a splice from `other`.
pub fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(7) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next_u64() as u8;
            }
            2 if !v.is_empty() => {
                let i = rng.below(v.len());
                let n = 1 + rng.below((v.len() - i).min(16));
                v.drain(i..i + n);
            }
            3 => {
                let i = rng.below(v.len() + 1);
                let n = 1 + rng.below(8);
                let b = rng.next_u64() as u8;
                v.splice(i..i, std::iter::repeat_n(b, n));
            }
            4 => {
                let lit = INTERESTING[rng.below(INTERESTING.len())];
                let i = rng.below(v.len() + 1);
                let end = (i + lit.len()).min(v.len());
                v.splice(i..end, lit.iter().copied());
            }
            5 if !other.is_empty() => {
                let a = rng.below(other.len());
                let b = a + rng.below(other.len() - a) + 1;
                let i = rng.below(v.len() + 1);
                v.splice(i..i, other[a..b].iter().copied());
            }
            _ if v.len() > 1 => {
                // duplicate a chunk (repeats: nesting, lists)
                let a = rng.below(v.len());
                let b = a + 1 + rng.below((v.len() - a).min(64));
                let chunk = v[a..b].to_vec();
                v.splice(b..b, chunk);
            }
            _ => v.push(rng.next_u64() as u8),
        }
    }
    v
}
