//! iroh relay servers of the federation's own: where a node behind NAT homes its QUIC
//! endpoint, is reached through, and from where iroh punches a direct path between two
//! peers. Nodes use only the relays their operator names ([`RelayServers`]: never a
//! default third-party one); a backbone node can serve one ([`RelayServer`]) over HTTPS
//! with the operator's certificate, each client's bytes per second bounded, open to
//! anyone or only to the federation's nodes ([`Admission`]).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, RwLock};

use iroh_relay::server::{
    Access, AccessControl, CertConfig, ClientRateLimit, ClientRequest, Limits, RelayConfig, Server,
    ServerConfig, TlsConfig,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::{Error, Result};

/// The relay servers an endpoint homes on and dials peers through, and the CA
/// certificates (DER) trusted for them beside the web's roots. Empty: direct links only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayServers {
    /// `https://` URLs.
    pub urls: Vec<String>,
    /// Extra trusted CA certificates, DER.
    pub roots: Vec<Vec<u8>>,
}

impl RelayServers {
    /// The relay map and TLS roots for iroh.
    pub(crate) fn iroh(
        &self,
    ) -> std::result::Result<Option<(iroh::RelayMode, iroh::tls::CaTlsConfig)>, String> {
        if self.urls.is_empty() {
            return Ok(None);
        }
        let urls = self
            .urls
            .iter()
            .map(|u| {
                u.parse::<iroh::RelayUrl>()
                    .map_err(|e| format!("relay server {u:?}: {e}"))
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let roots = self.roots.iter().map(|d| CertificateDer::from(d.clone()));
        Ok(Some((
            iroh::RelayMode::custom(urls),
            iroh::tls::CaTlsConfig::default().with_extra_roots(roots),
        )))
    }
}

/// Who may home on a relay server and be reached through it.
#[derive(Debug, Clone, Default)]
pub enum Admission {
    /// Every endpoint: a public relay.
    #[default]
    Anyone,
    /// Only the endpoints whose ids (Ed25519 keys) are in the set: the nodes of the
    /// federation the serving node knows of, kept current by it. Others are turned away
    /// at the relay handshake and use none of its bandwidth.
    Members(Members),
}

/// A shared set of admitted endpoint ids, bounded: past its capacity no key is added.
#[derive(Debug, Clone)]
pub struct Members {
    keys: Arc<RwLock<HashSet<[u8; 32]>>>,
    cap: usize,
}

impl Members {
    /// An empty set that holds at most `cap` keys.
    pub fn new(cap: usize) -> Members {
        Members {
            keys: Arc::default(),
            cap,
        }
    }

    /// Admits `key`; `false` when the set is full and it was not in it.
    pub fn admit(&self, key: [u8; 32]) -> bool {
        let mut keys = self.keys.write().unwrap_or_else(|p| p.into_inner());
        if keys.len() >= self.cap && !keys.contains(&key) {
            return false;
        }
        keys.insert(key);
        true
    }

    /// Whether `key` is admitted.
    pub fn contains(&self, key: &[u8; 32]) -> bool {
        self.keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(key)
    }
}

/// The relay server's access hook.
#[derive(Debug)]
struct Gate(Admission);

impl AccessControl for Gate {
    async fn on_connect(&self, request: &ClientRequest) -> Access {
        let Admission::Members(members) = &self.0 else {
            return Access::Allow;
        };
        let id = request.endpoint_id();
        if members.contains(id.as_bytes()) {
            Access::Allow
        } else {
            tracing::debug!(endpoint = %id, "relay server: not a node of this federation");
            Access::Deny {
                reason: Some("not a node of this federation".into()),
            }
        }
    }
}

/// A running iroh relay server; stopped when [`RelayServer::stop`] is called or it drops.
#[derive(Debug)]
pub struct RelayServer {
    server: Server,
}

/// Bytes per second one client may send through the relay by default.
pub const CLIENT_BYTES_PER_SECOND: u32 = 4 << 20;

impl RelayServer {
    /// Serves a relay on HTTPS at `addr` with `chain` (DER certificates, the server's
    /// first) and `key` (PKCS #8 DER) to the endpoints `admission` lets in; each client
    /// may send `bytes_per_second`.
    ///
    /// # Errors
    /// [`Error::Bind`]: the certificate and key do not go together, or the address
    /// cannot be bound.
    pub async fn spawn(
        addr: SocketAddr,
        chain: Vec<Vec<u8>>,
        key: Vec<u8>,
        bytes_per_second: u32,
        admission: Admission,
    ) -> Result<RelayServer> {
        let bind = |reason: String| Error::Bind {
            addr: addr.to_string(),
            reason,
        };
        let chain: Vec<CertificateDer<'static>> =
            chain.into_iter().map(CertificateDer::from).collect();
        let key = PrivateKeyDer::try_from(key).map_err(|e| bind(format!("the key: {e}")))?;
        let tls = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| bind(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| bind(format!("the certificate and key: {e}")))?;
        // the plain-HTTP side (captive-portal probes) on a port of the system's choosing
        let mut relay = RelayConfig::new(SocketAddr::new(addr.ip(), 0));
        relay.tls = Some(TlsConfig::new(
            addr,
            CertConfig::Manual { server_config: tls },
        ));
        let rate = NonZeroU32::new(bytes_per_second.max(1)).unwrap_or(NonZeroU32::MIN);
        let mut limits = Limits::default();
        limits.client_rx = Some(ClientRateLimit::new(rate));
        relay.limits = limits;
        relay.key_cache_capacity = Some(4096);
        relay.access = Arc::new(Gate(admission));
        let mut config = ServerConfig::default();
        config.relay = Some(relay);
        let server = Server::spawn(config)
            .await
            .map_err(|e| bind(e.to_string()))?;
        Ok(RelayServer { server })
    }

    /// Where it serves HTTPS.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.server.https_addr()
    }

    /// Stops it.
    pub async fn stop(self) {
        let _ = self.server.shutdown().await;
    }
}
