//! The protocol's closed vocabularies as enums: the verification [`Mode`] a buyer requires
//! and the [`Engine`] that runs a job (every ask and receipt carries both), the remedy
//! [`Rung`], accounting [`Unit`]s, [`KeyType`]s and [`RevocationReason`]s. Their spellings
//! are `common.json`'s (and the kinds' schemas'); everywhere else in the code they are these
//! enums, never strings compared.

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

words! {
    /// A severity on the remedy ladder (docs/protocol.md).
    Rung, "rung" {
        /// Drift: traffic within 110 % of the capacity, receipts matching; a clean window.
        S0 = "S0",
        /// Overrun: more than the grant allows, reported accurately; capacity halved.
        S1 = "S1",
        /// Misreport: the peer's receipt diverges from what was measured; probation.
        S2 = "S2",
        /// Abuse: traffic outside the granted shards, malformed frames; suspended 24 h.
        S3 = "S3",
        /// Malice: invalid signatures, a corrupted receipt chain; peering revoked.
        S4 = "S4",
    }
}

words! {
    /// The remedy a ladder decision carries out.
    Remedy, "remedy" {
        /// S0: the capacity grows along the grant's AIMD schedule.
        Increase = "increase",
        /// S1: the capacity halved, a private notice sent.
        Halve = "halve",
        /// S2: the peer on probation, a public report published.
        Probation = "probation",
        /// S3: the grant suspended for 24 hours, an adverse report published.
        Suspend = "suspend",
        /// S4: peering revoked, grants deleted, a permanent adverse report.
        Revoke = "revoke",
    }
}

words! {
    /// An accounting unit.
    Unit, "unit" {
        /// Millisatoshi.
        Msat = "msat",
        /// Satoshi.
        Sat = "sat",
        /// WASM fuel.
        Fuel = "fuel",
        /// LLM tokens.
        Tokens = "tokens",
        /// Micro-US-dollars.
        UsdMicro = "usd-micro",
    }
}

words! {
    /// A key algorithm of a node's identity.
    KeyType, "key type" {
        /// The Nostr identity key (BIP-340).
        Secp256k1 = "secp256k1-bip340",
        /// Signing for DIDComm and the transports.
        Ed25519 = "ed25519",
        /// Key agreement.
        X25519 = "x25519",
    }
}

words! {
    /// Why a key was revoked.
    RevocationReason, "revocation reason" {
        /// A newer key replaces it.
        Superseded = "superseded",
        /// It leaked.
        Compromised = "compromised",
        /// No longer used.
        Retired = "retired",
        /// Not said.
        Unspecified = "unspecified",
    }
}
