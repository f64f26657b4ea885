//! The arguments of `meshnode proof …` (verify, batch-verify, prove, setup): the Groth16
//! commands, beside the rest of the command line in `args.rs`.

use std::path::PathBuf;

use clap::Subcommand;
use fleetmesh_kernels::BackendChoice;

/// `meshnode proof …`.
#[derive(Debug, Subcommand)]
pub enum ProofCommand {
    /// Verify one proof: one JSON line; exit 0 valid, 1 invalid, 2 malformed input.
    Verify {
        /// snarkjs verification_key.json.
        #[arg(long, value_name = "VK.json")]
        vk: PathBuf,
        /// snarkjs proof.json.
        #[arg(long, value_name = "PROOF.json")]
        proof: PathBuf,
        /// snarkjs public.json.
        #[arg(long, value_name = "PUBLIC.json")]
        public: PathBuf,
    },
    /// Verify many proofs in batches (random linear combination; bad proofs are named):
    /// one JSON line per item, then a summary; exit 0 all valid, 1 any invalid, 2 any
    /// malformed.
    BatchVerify {
        /// The key for every directory given.
        #[arg(long, value_name = "VK.json", conflicts_with = "manifest")]
        vk: Option<PathBuf>,
        /// A JSON manifest {"items":[{"vk":…,"proof":…,"public":…}]}, paths relative to
        /// its folder; several keys allowed.
        #[arg(long, value_name = "BATCH.json")]
        manifest: Option<PathBuf>,
        /// Directories holding proof.json and public.json (with --vk).
        #[arg(value_name = "PROOF_DIR")]
        dirs: Vec<PathBuf>,
        /// Where the proofs' random weights are multiplied in (a GPU takes all of a batch's
        /// at once; `auto` only from the batch size measured to pay). The pairings run on
        /// the CPU.
        #[arg(long, value_name = "auto|cpu|wgpu|cuda:N", default_value = "auto")]
        backend: BackendChoice,
    },
    /// Prove with a snarkjs .zkey and a witness (.wtns, or computed from circom's witness
    /// .wasm and an input.json); writes snarkjs proof.json and public.json. One JSON line;
    /// exit 0 proved, 1 the input does not satisfy the circuit, 2 malformed input.
    Prove {
        /// The proving key (snarkjs Groth16 .zkey).
        #[arg(long, value_name = "C.zkey")]
        zkey: PathBuf,
        /// A full witness from circom/snarkjs.
        #[arg(long, value_name = "W.wtns", conflicts_with_all = ["wasm", "input"], required_unless_present = "wasm")]
        wtns: Option<PathBuf>,
        /// circom's witness calculator (circuit_js/circuit.wasm), with --input.
        #[arg(long, value_name = "C.wasm", requires = "input")]
        wasm: Option<PathBuf>,
        /// The circuit's input signals as JSON, with --wasm.
        #[arg(long, value_name = "input.json", requires = "wasm")]
        input: Option<PathBuf>,
        /// Where to write proof.json.
        #[arg(long, value_name = "OUT.json")]
        proof: PathBuf,
        /// Where to write public.json.
        #[arg(long, value_name = "OUT.json")]
        public: PathBuf,
        /// Where the MSMs and NTTs run.
        #[arg(long, value_name = "auto|cpu|wgpu|cuda:N", default_value = "auto")]
        backend: BackendChoice,
    },
    /// DEVELOPMENT ONLY, INSECURE: a circuit-specific setup from one party's randomness
    /// (no ceremony). Writes a snarkjs-compatible .zkey and, with --vk, its
    /// verification_key.json. Use a powers-of-tau ceremony for anything real.
    Setup {
        /// circom's constraint system.
        #[arg(long, value_name = "C.r1cs")]
        r1cs: PathBuf,
        /// Where to write the proving key.
        #[arg(long, value_name = "OUT.zkey")]
        zkey: PathBuf,
        /// Where to write verification_key.json.
        #[arg(long, value_name = "VK.json")]
        vk: Option<PathBuf>,
    },
}
