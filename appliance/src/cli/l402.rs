//! Paying for HTTP requests with L402 ([`fleetmesh_settle::l402`]), the client's side:
//! `meshnode settle l402 URL` (any priced route: inference, proofs) and `meshnode job
//! submit --pay l402|nwc` (`nwc`: paid through the NWC wallet of `--nwc-uri`).
//!
//! A `402` answer's challenge is read, its invoice decoded and checked (the macaroon
//! commits to it, not expired, an amount, at most `--max-sat`), paid through the payer's Lightning backend — the
//! `[settlement.lightning]` of the payer's directory (`--key-dir`), else its Cashu wallet
//! at `--mint` or its one mint — and the request sent again with `Authorization: L402
//! <macaroon>:<preimage>`. What was paid goes to stderr.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use fleetmesh_settle::l402::{Challenge, Credential};
use fleetmesh_settle::lightning::Lightning;

use crate::cli::Outcome;

/// The payer of `dir`: its `[settlement.lightning]` backend, the Cashu wallet of `dir`
/// at `mint` (or its configured or only mint) by default.
pub fn payer(dir: &Path, mint: Option<&str>) -> anyhow::Result<Box<dyn Lightning>> {
    let config = if dir.join(crate::config::FILE).is_file() {
        crate::config::Config::load(dir)?
    } else {
        crate::config::Config::default()
    };
    let wallet = dir.join(fleetmesh_settle::cashu::WALLET_FILE);
    let mint = match config.settlement.lightning.backend {
        crate::config::Backend::Cashu => Some(crate::cli::wallet::mint_of(dir, mint)?),
        _ => None,
    };
    config
        .settlement
        .lightning
        .open(&wallet, mint.as_deref())
        .map_err(anyhow::Error::msg)
}

/// Pays the challenge in `www_authenticate` with `payer`, refusing an invoice over
/// `max_sat`; the `Authorization` value that proves it.
pub fn pay(www_authenticate: &str, max_sat: u64, payer: &dyn Lightning) -> anyhow::Result<String> {
    let challenge = Challenge::parse(www_authenticate)?;
    let inv = fleetmesh_settle::bolt11::decode(&challenge.invoice)?;
    let msat = inv
        .amount_msat
        .context("the challenge's invoice names no amount")?;
    // the macaroon must commit to this invoice: else paying it buys nothing
    let id = fleetmesh_settle::l402::Macaroon::from_base64(&challenge.macaroon)
        .and_then(|m| fleetmesh_settle::l402::Identifier::from_bytes(&m.identifier))?;
    anyhow::ensure!(
        hex::encode(id.payment_hash) == inv.payment_hash,
        "the challenge's macaroon is for another payment than its invoice: not paid"
    );
    let sat = msat.div_ceil(1000);
    anyhow::ensure!(
        sat <= max_sat,
        "the node asks {sat} sat; at most {max_sat} sat may be paid (--max-sat, or the job's bid)"
    );
    anyhow::ensure!(
        inv.expires_at > fleetmesh_proto::unix_now(),
        "the challenge's invoice expired at {}",
        inv.expires_at
    );
    let sent = payer.pay(&challenge.invoice)?;
    eprintln!(
        "meshnode: paid {sat} sat (fee {} msat) through {} for an L402 credential",
        sent.fee_msat,
        payer.describe()
    );
    Ok(Credential::header(&challenge.macaroon, &sent.preimage))
}

/// The `WWW-Authenticate` of a `402` answer, when it carries an L402 challenge.
pub fn challenge_of(r: &reqwest::blocking::Response) -> Option<String> {
    if r.status() != reqwest::StatusCode::PAYMENT_REQUIRED {
        return None;
    }
    r.headers()
        .get_all(reqwest::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| fleetmesh_settle::l402::is_l402(v))
        .map(str::to_owned)
}

/// `meshnode settle l402`.
#[derive(Debug, Args)]
pub struct FetchArgs {
    /// The URL (a priced route of a node: `[api.prices]`).
    #[arg(value_name = "URL")]
    pub url: String,
    /// POST this JSON (a file, or `-` for stdin); without it, GET.
    #[arg(long, value_name = "FILE")]
    pub data: Option<PathBuf>,
    /// The most to pay, in sats.
    #[arg(long, value_name = "SATS", default_value_t = 100)]
    pub max_sat: u64,
    /// The payer's directory (its `meshnode.toml` `[settlement.lightning]` and
    /// `wallet.sqlite`) [default: $MESHNODE_HOME or the platform data directory].
    #[arg(long, value_name = "DIR")]
    pub key_dir: Option<PathBuf>,
    /// Pay from the Cashu wallet at this mint (the `cashu` backend).
    #[arg(long, value_name = "URL")]
    pub mint: Option<String>,
}

/// `meshnode settle l402`: the request, paid when the node asks; the answer on stdout.
pub fn fetch(args: &FetchArgs) -> anyhow::Result<Outcome> {
    let body = match &args.data {
        None => None,
        Some(p) if p.as_os_str() == "-" => {
            let mut b = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)?;
            Some(b)
        }
        Some(p) => Some(std::fs::read(p).with_context(|| format!("reading {}", p.display()))?),
    };
    let http = reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(300))
        .build()?;
    let send = |auth: Option<&str>| {
        let mut req = match &body {
            Some(b) => http
                .post(&args.url)
                .header("content-type", "application/json")
                .body(b.clone()),
            None => http.get(&args.url),
        };
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        req.send()
            .with_context(|| format!("requesting {}", args.url))
    };
    let mut r = send(None)?;
    if let Some(challenge) = challenge_of(&r) {
        let dir = match &args.key_dir {
            Some(d) => d.clone(),
            None => crate::node::default_home()?,
        };
        let payer = payer(&dir, args.mint.as_deref())?;
        let auth = match pay(&challenge, args.max_sat, payer.as_ref()) {
            Ok(a) => a,
            Err(e) => {
                eprintln!("meshnode settle l402: {e:#}");
                return Ok(Outcome::Malformed);
            }
        };
        r = send(Some(&auth))?;
    }
    let status = r.status();
    print!("{}", r.text()?);
    Ok(if status.is_success() {
        Outcome::Ok
    } else {
        eprintln!("meshnode settle l402: {status}");
        if status.is_server_error() {
            Outcome::Negative
        } else {
            Outcome::Malformed
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetmesh_settle::l402::Minter;
    use fleetmesh_settle::lightning::{Issued, Sent};

    /// A payer that must never be asked to pay.
    struct NeverPays;

    impl Lightning for NeverPays {
        fn describe(&self) -> String {
            "never".into()
        }
        fn invoice(&self, _: u64, _: &str, _: u64) -> fleetmesh_settle::Result<Issued> {
            unreachable!("a payer only pays")
        }
        fn pay(&self, bolt11: &str) -> fleetmesh_settle::Result<Sent> {
            panic!("paid {bolt11}")
        }
    }

    #[test]
    fn a_challenge_whose_macaroon_is_for_another_invoice_is_not_paid() {
        let vectors: serde_json::Value =
            serde_json::from_str(include_str!("../../settle/vectors/bolt11.json")).unwrap();
        let v = &vectors["valid"][1];
        let invoice = v["invoice"].as_str().unwrap().to_owned();
        let other = Minter::new([1; 32]).mint([7; 32], "/v1/jobs", 1, u64::MAX, None);
        let header = Challenge {
            macaroon: other.to_base64(),
            invoice: invoice.clone(),
        }
        .header();
        let err = pay(&header, u64::MAX, &NeverPays).unwrap_err();
        assert!(err.to_string().contains("another payment"), "{err}");
        // committed to the invoice, over the limit: not paid either
        let mut hash = [0u8; 32];
        hex::decode_to_slice(v["payment_hash"].as_str().unwrap(), &mut hash).unwrap();
        let ours = Minter::new([1; 32]).mint(hash, "/v1/jobs", 1, u64::MAX, None);
        let header = Challenge {
            macaroon: ours.to_base64(),
            invoice,
        }
        .header();
        let err = pay(&header, 1, &NeverPays).unwrap_err();
        assert!(err.to_string().contains("at most 1 sat"), "{err}");
    }
}
