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
    /// Take nutzaps (NIP-61): publish the node's kind 10019 (`[node] relays`, `mints`, a
    /// nutzap key derived from the node's key) and redeem the kind 9321 sent to it into
    /// the wallet. Default false.
    pub nutzaps: bool,
    /// What issues the node's Lightning invoices (L402 for `[api.prices]`) and pays
    /// others' (`meshnode job submit --pay l402`, `meshnode settle l402`).
    pub lightning: LightningSection,
}

/// Which Lightning backend: see [`LightningSection`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The first of `[settlement] mints`: its bolt11 quotes, claimed into the wallet once
    /// paid; paying by melt (the mint must return the preimage).
    #[default]
    Cashu,
    /// An LND node's REST API.
    Lnd,
    /// A Core Lightning node's REST API (`clnrest`).
    Cln,
    /// A Nostr Wallet Connect wallet (its connection URI in `credential_file`).
    Nwc,
}

/// `[settlement.lightning]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LightningSection {
    /// `cashu` (default), `lnd`, `cln` or `nwc`.
    pub backend: Backend,
    /// The node's REST API (lnd, cln): https, or http on a loopback address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The file with its credential: LND's macaroon (e.g. `invoice.macaroon`, binary or
    /// hex; `admin.macaroon` to pay), CLN's rune (text), an NWC connection URI.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential_file: Option<std::path::PathBuf>,
    /// A PEM certificate to trust for `url` (LND's self-signed `tls.cert`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert_file: Option<std::path::PathBuf>,
}

impl LightningSection {
    /// The backend this section names: the Cashu wallet at `wallet` paying at `mint`
    /// (the first of `[settlement] mints`, or the one given), or the node's REST API with
    /// its credential read now.
    pub fn open(
        &self,
        wallet: &std::path::Path,
        mint: Option<&str>,
    ) -> Result<Box<dyn fleetmesh_settle::lightning::Lightning>, String> {
        use fleetmesh_settle::lightning::{CashuLightning, Flavor, Rest};
        let flavor = match self.backend {
            Backend::Cashu => {
                let mint = mint.ok_or(
                    "[settlement.lightning] backend = \"cashu\" needs a mint ([settlement] \
                     mints)",
                )?;
                return Ok(Box::new(CashuLightning {
                    wallet: wallet.to_owned(),
                    mint: mint.to_owned(),
                }));
            }
            Backend::Lnd => Flavor::Lnd,
            Backend::Cln => Flavor::Cln,
            Backend::Nwc => {
                let file = self.credential_file.as_deref().ok_or(
                    "[settlement.lightning] backend = \"nwc\" needs credential_file (the \
                     connection URI)",
                )?;
                let uri = std::fs::read_to_string(file).map_err(|e| {
                    format!(
                        "[settlement.lightning] credential_file {}: {e}",
                        file.display()
                    )
                })?;
                let remotes = std::sync::Arc::new(fleetmesh_relay::Client);
                return fleetmesh_settle::nwc::NwcLightning::new(&uri, remotes)
                    .map(|n| Box::new(n) as Box<dyn fleetmesh_settle::lightning::Lightning>)
                    .map_err(|e| format!("[settlement.lightning] {e:#}"));
            }
        };
        let (Some(url), Some(file)) = (&self.url, &self.credential_file) else {
            return Err(format!(
                "[settlement.lightning] backend = {} needs url and credential_file",
                serde_json::to_string(&self.backend).unwrap_or_default()
            ));
        };
        let read = |f: &std::path::Path, what: &str| {
            std::fs::read(f)
                .map_err(|e| format!("[settlement.lightning] {what} {}: {e}", f.display()))
        };
        let credential = read(file, "credential_file")?;
        let cert = self
            .tls_cert_file
            .as_deref()
            .map(|f| read(f, "tls_cert_file"))
            .transpose()?;
        Rest::new(flavor, url, &credential, cert.as_deref())
            .map(|r| Box::new(r) as Box<dyn fleetmesh_settle::lightning::Lightning>)
            .map_err(|e| format!("[settlement.lightning] {e}"))
    }
}

impl SettlementSection {
    /// Refuses a mint that is not an http(s) URL with a host, NWC without a mint, and a
    /// Lightning node's API that is not there or cannot be read.
    pub fn check(&self) -> Result<(), String> {
        if self.lightning.backend != Backend::Cashu {
            self.lightning.open(std::path::Path::new(""), None)?;
        }
        if self.nutzaps && self.mints.is_empty() {
            return Err(
                "[settlement] nutzaps = true needs a mint in [settlement] mints to take them at"
                    .into(),
            );
        }
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

/// The connections' file in the node directory.
pub const NWC_FILE: &str = "nwc.sqlite";

impl SettlementSection {
    /// The NWC grants of the node in `dir`, its wallet invoicing at the first of
    /// `[settlement] mints` and paying there — or through `[settlement.lightning]` when
    /// that is a Lightning node (LND, CLN), whose payments give real preimages.
    ///
    /// # Errors
    /// When `nwc.sqlite` cannot be opened (a damaged file is refused, never recreated), or
    /// the Lightning node's credential cannot be read.
    pub fn nwc_grants(
        &self,
        dir: &std::path::Path,
    ) -> anyhow::Result<fleetmesh_settle::nwc::Grants> {
        use anyhow::Context as _;
        let keys = fleetmesh_proto::NodeKeys::load(&dir.join(crate::node::KEYS_DIR))?;
        let wallet = dir.join(fleetmesh_settle::cashu::WALLET_FILE);
        let mint = self.mints.first().map(String::as_str);
        let file = dir.join(NWC_FILE);
        let mut g = fleetmesh_settle::nwc::Grants::open(&file, &wallet, mint)
            .with_context(|| format!("opening {}", file.display()))?;
        g.set_key(*keys.nostr());
        if matches!(self.lightning.backend, Backend::Lnd | Backend::Cln) {
            g.set_payer(
                self.lightning
                    .open(&wallet, mint)
                    .map_err(anyhow::Error::msg)?,
            );
        }
        Ok(g)
    }
}
