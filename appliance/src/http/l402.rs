//! The node's paid routes: `[api.prices]` sold per request by L402
//! ([`fleetmesh_settle::l402`]), with invoices from `[settlement.lightning]`.
//!
//! The API guard ([`crate::http::guard`]) asks the [`Gate`] for a route's price. A
//! request to a priced route without a credential (and without the `[api] token`) gets
//! `402 Payment Required` with `WWW-Authenticate: L402 macaroon="…", invoice="…"`: an
//! invoice for the price and a macaroon bound to it, to the route, to the price and to an
//! hour. `Authorization: L402 <macaroon>:<preimage>` is checked without reading the body
//! (the macaroon's chain under a root key derived from the node's key, the preimage
//! against its payment hash, the caveats), then recorded as used in `l402.sqlite` before
//! the request runs, so that a credential buys one request; when the node refuses the
//! request (a 4xx or 5xx answer) the credential is released for another try. Invoices of
//! the Cashu backend are mint quotes: claimed into the wallet once a paid request ran, and
//! every minute for those a crash left unclaimed.
//!
//! Issuing costs the backend a round trip (and, with the Cashu backend, a quote at the
//! mint), so at most [`ISSUING`] challenges are made at once (more wait, then `503`), and
//! each client address (an IPv6 one by its /64) gets at most [`CHALLENGES_PER_MINUTE`] a
//! minute — a burst of that many, then one every few seconds; past it `429` with
//! `Retry-After`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use fleetmesh_settle::l402::{Challenge, Credential, Minter, Paid, Spent};
use fleetmesh_settle::lightning::{CashuLightning, Lightning};

use crate::http::error::api_error;

/// The file of used credentials, in the node directory.
pub const FILE: &str = "l402.sqlite";
/// How many challenges are issued at once.
pub const ISSUING: usize = 4;
/// Challenges one client address may have issued a minute (a bucket of this many,
/// refilled at this rate).
pub const CHALLENGES_PER_MINUTE: u32 = 30;
/// Client addresses the rate is kept for; past it the fullest buckets are forgotten.
const CLIENTS: usize = 4096;
/// How long an invoice may be paid, and a credential used after it was issued.
pub const VALID_SECS: u64 = 3600;

/// The priced routes and what sells them.
pub struct Gate {
    prices: BTreeMap<String, u64>,
    minter: Minter,
    backend: Arc<dyn Lightning>,
    spent: Arc<Mutex<Spent>>,
    issuing: tokio::sync::Semaphore,
    cashu: Option<Arc<CashuLightning>>,
    /// Held while claiming, so that two claims never race for one quote.
    claiming: Mutex<()>,
    /// Each client's bucket: challenges left (in thousandths) and when it was last filled.
    buckets: Mutex<std::collections::HashMap<std::net::IpAddr, (u64, std::time::Instant)>>,
}

/// The address a client's challenges are counted by: an IPv6 address by its /64 (one
/// host's usual share), an IPv4 one as it is.
fn client_of(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => std::net::IpAddr::V4(v4),
            None => {
                let mut o = v6.octets();
                o[8..].fill(0);
                std::net::IpAddr::V6(o.into())
            }
        },
        v4 => v4,
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("prices", &self.prices)
            .field("backend", &self.backend.describe())
            .finish()
    }
}

impl Gate {
    /// The gate of a node with `[api.prices]`; `None` without prices.
    pub fn open(node: &crate::node::Node) -> anyhow::Result<Option<Arc<Gate>>> {
        let config = &node.config;
        if config.api.prices.is_empty() {
            return Ok(None);
        }
        let wallet = node.dir.join(fleetmesh_settle::cashu::WALLET_FILE);
        let mint = config.settlement.mints.first().map(String::as_str);
        let backend: Arc<dyn Lightning> = Arc::from(
            config
                .settlement
                .lightning
                .open(&wallet, mint)
                .map_err(anyhow::Error::msg)?,
        );
        let cashu =
            (config.settlement.lightning.backend == crate::config::Backend::Cashu).then(|| {
                Arc::new(CashuLightning {
                    wallet,
                    mint: mint.unwrap_or_default().to_owned(),
                })
            });
        let keys = fleetmesh_proto::NodeKeys::load(&node.dir.join(crate::node::KEYS_DIR))?;
        let prk = fleetmesh_proto::hkdf::extract(
            b"fleetmesh/l402-root/v1",
            &keys.nostr().secret_key().to_secret_bytes(),
        );
        let spent = Spent::open(&node.dir.join(FILE))?;
        Ok(Some(Arc::new(Gate {
            prices: config.api.prices.clone(),
            minter: Minter::new(prk),
            backend,
            spent: Arc::new(Mutex::new(spent)),
            issuing: tokio::sync::Semaphore::new(ISSUING),
            cashu,
            claiming: Mutex::new(()),
            buckets: Mutex::default(),
        })))
    }

    /// The price of `path` in sats, when it is priced.
    pub fn price(&self, path: &str) -> Option<u64> {
        self.prices.get(path).copied()
    }

    /// Takes one challenge from `client`'s bucket: `Err(seconds until there is one)` when
    /// it is empty.
    fn take(&self, client: std::net::IpAddr) -> Result<(), u64> {
        const FULL: u64 = CHALLENGES_PER_MINUTE as u64 * 1000;
        let (now, client) = (std::time::Instant::now(), client_of(client));
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= CLIENTS && !buckets.contains_key(&client) {
            // those that have refilled since are as good as new
            buckets.retain(|_, (_, at)| now.duration_since(*at).as_secs() < 60);
            if buckets.len() >= CLIENTS {
                return Err(60);
            }
        }
        let (left, at) = buckets.entry(client).or_insert((FULL, now));
        // CHALLENGES_PER_MINUTE tokens a minute, in thousandths: per millisecond, that / 60
        let refill =
            now.duration_since(*at).as_millis() as u64 * u64::from(CHALLENGES_PER_MINUTE) / 60;
        *left = (*left + refill).min(FULL);
        *at = now;
        if *left < 1000 {
            let per_token_ms = 60_000 / u64::from(CHALLENGES_PER_MINUTE);
            return Err(((1000 - *left) * per_token_ms / 1000).div_ceil(1000).max(1));
        }
        *left -= 1000;
        Ok(())
    }

    /// `402` with a fresh invoice and macaroon for one request to `route` at `price`,
    /// asked by `client`; `429` past its rate, `503` when the backend cannot issue one.
    pub async fn challenge(
        self: &Arc<Self>,
        route: &str,
        price: u64,
        client: Option<std::net::IpAddr>,
    ) -> Response {
        if let Some(Err(wait)) = client.map(|c| self.take(c)) {
            crate::http::metrics::l402("limited");
            let mut r = api_error(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!(
                    "{route} is priced: this address asked for {CHALLENGES_PER_MINUTE} invoices in \
                     the last minute; try again in {wait} s"
                ),
            );
            if let Ok(v) = HeaderValue::from_str(&wait.to_string()) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
            return r;
        }
        let unavailable = |why: String| {
            tracing::warn!(route, %why, "L402: no invoice");
            crate::http::metrics::l402("unissued");
            api_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "payment_unavailable",
                format!("{route} is priced but no invoice could be issued: {why}"),
            )
        };
        let Ok(Ok(_permit)) =
            tokio::time::timeout(Duration::from_secs(10), self.issuing.acquire()).await
        else {
            return unavailable("too many invoices being issued; try again".into());
        };
        let (gate, r) = (self.clone(), route.to_owned());
        let issued = tokio::task::spawn_blocking(move || {
            gate.backend
                .invoice(price, &format!("fleetmesh {r}"), VALID_SECS)
        })
        .await;
        let issued = match issued {
            Ok(Ok(i)) => i,
            Ok(Err(e)) => return unavailable(e.to_string()),
            Err(e) => return unavailable(e.to_string()),
        };
        let macaroon = self.minter.mint(
            issued.payment_hash,
            route,
            price,
            fleetmesh_proto::unix_now() + VALID_SECS,
            issued.quote.as_deref(),
        );
        let challenge = Challenge {
            macaroon: macaroon.to_base64(),
            invoice: issued.bolt11,
        };
        crate::http::metrics::l402("challenged");
        let mut r = api_error(
            StatusCode::PAYMENT_REQUIRED,
            "payment_required",
            format!(
                "{route} costs {price} sat per request: pay the invoice, then send \
                 `Authorization: L402 <macaroon>:<preimage hex>` (meshnode settle l402)"
            ),
        );
        if let Ok(v) = HeaderValue::from_str(&challenge.header()) {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        r
    }

    /// Checks an `Authorization: L402 …` value for `route` at `price` (nothing is
    /// recorded yet: see [`Gate::redeem`]).
    pub fn verify(&self, authorization: &str, route: &str, price: u64) -> Result<Paid, String> {
        let checked = Credential::parse(authorization).and_then(|c| {
            self.minter
                .verify(&c, route, price, fleetmesh_proto::unix_now())
        });
        if checked.is_err() {
            crate::http::metrics::l402("refused");
        }
        checked.map_err(|e| e.to_string())
    }

    /// Records `paid` as used by a request to `route`; refused when it was.
    pub async fn redeem(&self, paid: &Paid, route: &str) -> Result<(), String> {
        let (spent, paid, route) = (self.spent.clone(), paid.clone(), route.to_owned());
        let done = tokio::task::spawn_blocking(move || {
            let s = spent
                .lock()
                .map_err(|_| "the credential store's lock".to_string())?;
            s.redeem(&paid, &route, fleetmesh_proto::unix_now())
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())?;
        if done.is_err() {
            crate::http::metrics::l402("replayed");
        }
        done
    }

    /// After the request `paid` bought was answered with `status`: a refusal releases
    /// the credential; a success claims a Cashu invoice's sats.
    pub async fn finish(self: &Arc<Self>, paid: Paid, status: StatusCode) {
        let gate = self.clone();
        let refused = status.is_client_error() || status.is_server_error();
        crate::http::metrics::l402(if refused { "released" } else { "paid" });
        if refused {
            // released before the answer goes out, so that the client may retry at once
            let _ = tokio::task::spawn_blocking(move || {
                if let Ok(s) = gate.spent.lock()
                    && let Err(e) = s.release(&paid.payment_hash)
                {
                    tracing::warn!(error = %e, "L402: releasing a credential");
                }
            })
            .await;
        } else if paid.quote.is_some() {
            // the mint round trips of a claim do not hold the answer back
            tokio::task::spawn_blocking(move || gate.claim_pending());
        }
    }

    /// Claims the paid mint quotes of used credentials into the wallet (the Cashu
    /// backend); how many were claimed.
    pub fn claim_pending(&self) -> usize {
        let Some(cashu) = &self.cashu else {
            return 0;
        };
        // another claim is under way: it takes these too
        let Ok(_claiming) = self.claiming.try_lock() else {
            return 0;
        };
        let pending = match self.spent.lock().map(|s| s.unclaimed()) {
            Ok(Ok(p)) => p,
            _ => return 0,
        };
        let mut n = 0;
        for (hash, quote, sats) in pending {
            match cashu.claim(&quote, sats) {
                Ok(true) => {
                    if let Ok(s) = self.spent.lock() {
                        let _ = s.claimed(&hash);
                    }
                    n += 1;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(%quote, error = %e, "L402: claiming a paid invoice"),
            }
        }
        n
    }

    /// Claims what a crash left unclaimed, every minute, while the node runs.
    pub fn spawn_claims(self: &Arc<Self>) {
        if self.cashu.is_none() {
            return;
        }
        let gate = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(60)).await;
                let g = gate.clone();
                if let Ok(n) = tokio::task::spawn_blocking(move || g.claim_pending()).await
                    && n > 0
                {
                    tracing::info!(invoices = n, "L402: paid invoices claimed into the wallet");
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::client_of;

    #[test]
    fn clients_are_counted_by_ipv4_address_and_ipv6_64_prefix() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert_eq!(client_of(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(client_of(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(
            client_of(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")),
            client_of(ip("2001:db8:1:2::1"))
        );
        assert_ne!(
            client_of(ip("2001:db8:1:2::1")),
            client_of(ip("2001:db8:1:3::1"))
        );
    }
}
