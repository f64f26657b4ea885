//! `[api]`: who may call the compute, proof and job APIs, and what they pay.

use serde::{Deserialize, Serialize};

/// `[api]`: who may call the compute, proof and job APIs (see docs/operator-manual.md,
/// "Exposure").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiSection {
    /// Origins (`https://app.example`) whose web pages may call the APIs from a browser;
    /// `"*"` for any. Default: none (browsers may call them only from the node's own
    /// origin).
    pub allowed_origins: Vec<String>,
    /// A bearer token every state-changing API request must carry
    /// (`Authorization: Bearer TOKEN`), and the job API's reads but a buyer's own (signed
    /// by its key, NIP-98). Default: none; required when `[face] listen` is not a loopback
    /// address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Take market jobs by key — gift-wrapped through relays, or by DIDComm — from any
    /// buyer, whatever `token` says: the market is open to buyers who sign their asks.
    /// `false` keeps compute to callers of `POST /v1/jobs` with the token (jobs by key are
    /// then refused with `by_key_off`). Default true.
    pub jobs_by_key: bool,
    /// Routes sold per request by L402 (`[api.prices]`, path = sats): a request without
    /// a paid credential gets `402` with a macaroon and an invoice from `[settlement.
    /// lightning]`; one with `Authorization: L402 <macaroon>:<preimage>` runs (once per
    /// credential). Priceable: [`PRICEABLE_ROUTES`]. The `[api] token` holder pays
    /// nothing. Default none.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub prices: std::collections::BTreeMap<String, u64>,
}

/// The routes `[api.prices]` may price: the POSTs that compute.
pub const PRICEABLE_ROUTES: [&str; 5] = [
    "/v1/jobs",
    "/v1/proofs/prove",
    "/v1/proofs/verify",
    "/v1/completions",
    "/v1/chat/completions",
];

impl ApiSection {
    /// Refuses a price on a route that cannot be priced, or of 0 sats.
    pub fn check(&self) -> Result<(), String> {
        for (route, sat) in &self.prices {
            if !PRICEABLE_ROUTES.contains(&route.as_str()) {
                return Err(format!(
                    "[api.prices] {route:?}: not a priced route (one of {})",
                    PRICEABLE_ROUTES.join(", ")
                ));
            }
            if !(1..=1_000_000).contains(sat) {
                return Err(format!("[api.prices] {route:?} = {sat}: 1 to 1000000 sat"));
            }
        }
        Ok(())
    }
}

impl Default for ApiSection {
    fn default() -> Self {
        ApiSection {
            allowed_origins: Vec::new(),
            token: None,
            jobs_by_key: true,
            prices: Default::default(),
        }
    }
}
