//! The two words every compute ask and receipt carries: the verification [`Mode`] a buyer
//! requires and the [`Engine`] that runs the job. Their spellings are the protocol's
//! (`common.json`'s `verificationMode` and `engine`); everywhere else in the code they are
//! these enums, never strings compared.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::Error;

macro_rules! words {
    ($(#[$doc:meta])* $name:ident, $what:literal { $($(#[$vdoc:meta])* $variant:ident = $word:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vdoc])* #[serde(rename = $word)] $variant,)+
        }

        impl $name {
            /// Every value, in the protocol's order.
            pub const ALL: &[$name] = &[$($name::$variant,)+];

            /// The protocol's spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self, Error> {
                match s {
                    $($word => Ok($name::$variant),)+
                    other => Err(Error::UnknownWord {
                        what: $what,
                        found: other.to_owned(),
                        expected: $name::ALL
                            .iter()
                            .map(|w| w.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                    }),
                }
            }
        }
    };
}

words! {
    /// How a job's output is verified.
    Mode, "verification mode" {
        /// A Groth16 proof, checked against the verification key.
        Proof = "proof",
        /// The output constrained to a JSON Schema during decoding and validated against it.
        SchemaBounds = "schema-bounds",
        /// A TEE report bound to the job's output.
        TeeAttestation = "tee-attestation",
        /// k-of-n executors agree on the greedy transcript's digest.
        QuasiDeterministic = "quasi-deterministic",
        /// Hash-locked delivery of the output, nothing more.
        Delivery = "delivery",
    }
}

words! {
    /// What runs a job.
    Engine, "engine" {
        /// A WASI module under wasmtime.
        Wasm = "wasm",
        /// A Groth16 proof of a circuit's witness.
        Groth16Prove = "groth16-prove",
        /// Groth16 proofs checked in a batch.
        Groth16Verify = "groth16-verify",
        /// LLM inference.
        Llm = "llm",
        /// Compute over data (a Bacalhau-style job spec).
        Data = "data",
    }
}
