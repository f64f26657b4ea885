//! `[settlement]`: how the node is paid and pays (see `fleetmesh_settle`).

use serde::{Deserialize, Serialize};

/// `[settlement]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SettlementSection {
    /// The Cashu mints the node's wallet trusts (http or https URLs): `meshnode wallet
    /// receive` takes tokens of these only (or of the mint named with `--mint`), and the
    /// first is the wallet's default mint. Default none: every wallet command names its
    /// mint.
    pub mints: Vec<String>,
    /// Serve Nostr Wallet Connect (NIP-47) from the wallet, on the node's relay and its
    /// `[node] relays`, to the connections granted with `meshnode settle nwc-connect`
    /// (paying and invoicing at the first of `mints`). Default false.
    pub nwc: bool,
}

impl SettlementSection {
    /// Refuses a mint that is not an http(s) URL with a host, and NWC without a mint.
    pub fn check(&self) -> Result<(), String> {
        if self.nwc && self.mints.is_empty() {
            return Err(
                "[settlement] nwc = true needs a mint in [settlement] mints to pay and \
                 invoice at"
                    .into(),
            );
        }
        for m in &self.mints {
            let rest = m
                .strip_prefix("https://")
                .or_else(|| m.strip_prefix("http://"));
            if rest.is_none_or(|r| {
                r.trim_end_matches('/').is_empty() || r.contains(char::is_whitespace)
            }) {
                return Err(format!(
                    "[settlement] mints: {m:?} is not an http(s) URL of a mint"
                ));
            }
        }
        Ok(())
    }
}
