//! `[peering]`: how the node keeps its store in sync with other nodes, and how it finds them.

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};

/// `[peering]`: peers whose stores the node reconciles with its own by NIP-77 on a
/// schedule, both ways; every fetched event is verified before it is stored.
///
/// Two ways to name peers, used together or apart:
/// - `[[peering.peers]]`: relay faces (`ws://`, `wss://`) reconciled over WebSocket;
/// - the federation transports: with `quic_listen` the node answers iroh QUIC peer links
///   (ALPN `fleetmesh/1`, its Ed25519 key as identity); with `gossip_listen` it announces its
///   descriptor and heartbeats on libp2p gossipsub, learns other nodes' from `bootstrap`
///   and whoever they gossip with, and peers over QUIC with each node of its protocol
///   digest that advertises an `iroh` endpoint.
///
/// Not reloadable: restart to change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PeeringSection {
    /// Seconds between two rounds with a peer; after a failed round the wait doubles, up
    /// to ten times this. A peer's heartbeat and new events here also start a round.
    /// 1 to 86 400. Default 30.
    pub interval_secs: u64,
    /// UDP address of the iroh QUIC endpoint, e.g. `0.0.0.0:7778`. Default: none (no QUIC
    /// peer links).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quic_listen: Option<std::net::SocketAddr>,
    /// libp2p address the gossip listens on, e.g. `/ip4/0.0.0.0/tcp/7779`. Default: none
    /// (no gossip discovery).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gossip_listen: Option<String>,
    /// Gossip peers to start from: libp2p addresses ending in `/p2p/<peer id>` (a node's
    /// peer id is printed by `meshnode peers` and derived from its Ed25519 key). Default:
    /// none.
    pub bootstrap: Vec<String>,
    /// The NIP-01 filter (JSON) of the events exchanged with peers found by gossip.
    /// Default `{}`: all.
    pub filter: String,
    /// Seconds between two announcements of the node's descriptor on the gossip. 5 to
    /// 86 400. Default 300.
    pub announce_secs: u64,
    /// Seconds between two heartbeats (kind 21801) on the gossip; a peer's heartbeat
    /// starts a round with it. Leaf nodes send none. 1 to 3 600. Default 30.
    pub heartbeat_secs: u64,
    /// A leaf node's cache: the most events of others it keeps; past it the oldest (by
    /// `created_at`) are deleted every `interval_secs`. Its own events are always kept.
    /// Only for `[node] class = "leaf"`. 10 to 1 000 000 000. Default 100 000.
    pub leaf_cache_events: u64,
    /// The most peers found by gossip that are dialled at once; a peer that cannot be
    /// dialled six times in a row is let go until it is heard again. The peers table
    /// (`meshnode peers`) keeps four times as many. 1 to 65 536. Default 256.
    pub max_peers: u64,
    /// Events per second a peer may push over its QUIC link (its sessions on our relay
    /// face; the burst is twice that), instead of the per-connection `[relay]
    /// events_per_second` anonymous clients get: one link carries a whole shard's sync.
    /// 1 to 1 000 000. Default 5 000.
    pub peer_events_per_second: u64,
    /// iroh relay servers of the federation's own (`https://` URLs) the QUIC endpoint
    /// homes on: peers that cannot reach it directly reach it through them, and iroh
    /// punches a direct path from there where NAT allows. Advertised in the descriptor
    /// (`iroh-relay` endpoints); peers are dialled through the relays theirs name. Never
    /// a default third-party relay. Needs `quic_listen`. Default: none (direct links only).
    pub iroh_relays: Vec<String>,
    /// A PEM file of CA certificates trusted for `iroh_relays` beside the web's roots.
    /// Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iroh_relay_ca: Option<PathBuf>,
    /// Serve an iroh relay server over HTTPS at this address, e.g. `0.0.0.0:3340` (a
    /// backbone node's; each client may send 4 MiB/s through it). Needs
    /// `iroh_relay_cert` and `iroh_relay_key`. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iroh_relay_listen: Option<std::net::SocketAddr>,
    /// The relay server's certificate chain, PEM (the server's certificate first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iroh_relay_cert: Option<PathBuf>,
    /// The relay server's private key, PEM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iroh_relay_key: Option<PathBuf>,
    /// Let any endpoint use the relay server (a public relay). Default false: only the
    /// federation's nodes — this one, those whose descriptors it has heard on the gossip
    /// (its digest) and those that peered with it — may home on it and be reached
    /// through it; others are turned away at the relay handshake.
    pub iroh_relay_open: bool,
    /// The shards of the store a community node (`[node] class = "community"`) holds for
    /// the federation: `[[peering.shards]] id = "notes"`, `kinds = [1]`, optionally
    /// `since`/`until` (Unix times). Each one's count and digest is published as a shard
    /// descriptor (kind 30803) and again whenever it changes. Default: none.
    pub shards: Vec<ShardSection>,
    /// The peers: `[[peering.peers]] url = "wss://…"`, and optionally `filter`, the NIP-01
    /// filter (JSON) of the events exchanged (default: all), and `ca`, a PEM file of
    /// certificates trusted for that peer's `wss://` beside the web's roots. Default: none.
    /// Last, so that `[[peering.peers]]` tables can follow `[peering]` in the file.
    pub peers: Vec<PeerSection>,
}

/// One `[[peering.shards]]`: the events of some kinds, within optional times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardSection {
    /// Its id (`d` tag): lowercase letters, digits, `.`, `_`, `-`; 1 to 64 characters.
    pub id: String,
    /// The kinds it holds (at least one; never 30803, shard descriptors themselves).
    pub kinds: Vec<u16>,
    /// The oldest `created_at` it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// The newest `created_at` it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
}

impl Default for PeeringSection {
    fn default() -> Self {
        PeeringSection {
            interval_secs: 30,
            peers: Vec::new(),
            shards: Vec::new(),
            quic_listen: None,
            gossip_listen: None,
            bootstrap: Vec::new(),
            filter: all_events(),
            announce_secs: 300,
            heartbeat_secs: 30,
            leaf_cache_events: 100_000,
            max_peers: 256,
            peer_events_per_second: 5_000,
            iroh_relays: Vec::new(),
            iroh_relay_ca: None,
            iroh_relay_listen: None,
            iroh_relay_cert: None,
            iroh_relay_key: None,
            iroh_relay_open: false,
        }
    }
}

/// One `[[peering.peers]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerSection {
    /// The peer's relay face, `ws://` or `wss://`.
    pub url: String,
    /// The NIP-01 filter of the events exchanged, JSON. Default `{}`: all.
    #[serde(default = "all_events")]
    pub filter: String,
    /// A PEM file of CA certificates trusted for this peer's `wss://` (a private CA, a
    /// self-signed relay), beside the web's roots. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<std::path::PathBuf>,
    /// How: `nip77` (fleetmesh nodes, NIP-77 relays); `auto` — a standard relay bridged
    /// both ways: NIP-77 where it speaks it, else REQ pages back from now (the whole
    /// history of the filter at the first round, then since the last good round) and
    /// EVENTs; `req` (NIP-01 only). Default nip77.
    #[serde(default = "nip77")]
    pub via: fleetmesh_relay::bridge::Via,
}

fn nip77() -> fleetmesh_relay::bridge::Via {
    fleetmesh_relay::bridge::Via::Nip77
}

fn all_events() -> String {
    "{}".to_owned()
}

fn range(key: &str, v: u64, lo: u64, hi: u64) -> Result<(), String> {
    if v < lo || v > hi {
        return Err(format!("{key} = {v}: must be between {lo} and {hi}"));
    }
    Ok(())
}

fn filter(key: &str, text: &str) -> Result<(), String> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("{key} filter: not JSON: {e}"))?;
    fleetmesh_proto::filter::Filter::from_value(&v, Default::default())
        .map(|_| ())
        .map_err(|e| format!("{key} filter: {e}"))
}

impl PeeringSection {
    /// Checks every value; the error names the key.
    pub(crate) fn check(&self) -> Result<(), String> {
        range("[peering] interval_secs", self.interval_secs, 1, 86_400)?;
        range("[peering] announce_secs", self.announce_secs, 5, 86_400)?;
        range("[peering] heartbeat_secs", self.heartbeat_secs, 1, 3600)?;
        range(
            "[peering] leaf_cache_events",
            self.leaf_cache_events,
            10,
            1_000_000_000,
        )?;
        range("[peering] max_peers", self.max_peers, 1, 65_536)?;
        range(
            "[peering] peer_events_per_second",
            self.peer_events_per_second,
            1,
            1_000_000,
        )?;
        filter("[peering]", &self.filter)?;
        let mut ids = std::collections::HashSet::new();
        for s in &self.shards {
            let at = format!("[[peering.shards]] id = {:?}", s.id);
            let id_ok = (1..=64).contains(&s.id.len())
                && s.id
                    .starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && s.id
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c));
            if !id_ok {
                return Err(format!(
                    "{at}: lowercase letters, digits, . _ - (1 to 64, a letter or digit first)"
                ));
            }
            if !ids.insert(s.id.as_str()) {
                return Err(format!("{at}: named twice"));
            }
            if s.kinds.is_empty() || s.kinds.contains(&fleetmesh_schemas::constants::kind::SHARD) {
                return Err(format!(
                    "{at}: kinds = [...] names at least one kind, and not 30803 (shard \
                     descriptors belong to no shard)"
                ));
            }
            if let (Some(a), Some(b)) = (s.since, s.until)
                && a > b
            {
                return Err(format!("{at}: since = {a} is after until = {b}"));
            }
        }
        for p in &self.peers {
            if !(p.url.starts_with("ws://") || p.url.starts_with("wss://")) {
                return Err(format!(
                    "[[peering.peers]] url = {:?}: a ws:// or wss:// URL",
                    p.url
                ));
            }
            filter(&format!("[[peering.peers]] {}", p.url), &p.filter)?;
            if let Some(ca) = &p.ca {
                let pem = std::fs::read(ca).map_err(|e| {
                    format!("[[peering.peers]] {} ca = {}: {e}", p.url, ca.display())
                })?;
                if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                    return Err(format!(
                        "[[peering.peers]] {} ca = {}: no PEM certificate in it",
                        p.url,
                        ca.display()
                    ));
                }
            }
        }
        #[cfg(not(feature = "federation"))]
        if self.quic_listen.is_some()
            || self.gossip_listen.is_some()
            || self.iroh_relay_listen.is_some()
        {
            return Err(
                "[peering] quic_listen, gossip_listen and iroh_relay_listen: this meshnode \
                 was built without the federation feature"
                    .into(),
            );
        }
        self.check_relays()?;
        #[cfg(feature = "federation")]
        self.check_transports()?;
        if !self.bootstrap.is_empty() && self.gossip_listen.is_none() {
            return Err("[peering] bootstrap needs gossip_listen".into());
        }
        Ok(())
    }

    /// `iroh_relays`, their CA, and the relay server's address, certificate and key.
    fn check_relays(&self) -> Result<(), String> {
        for u in &self.iroh_relays {
            let ok = u.starts_with("https://") && u.parse::<reqwest::Url>().is_ok();
            if !ok {
                return Err(format!(
                    "[peering] iroh_relays {u:?}: an https:// URL of an iroh relay server"
                ));
            }
        }
        if !self.iroh_relays.is_empty() && self.quic_listen.is_none() {
            return Err("[peering] iroh_relays needs quic_listen".into());
        }
        if let Some(ca) = &self.iroh_relay_ca {
            self.relay_roots()
                .map_err(|e| format!("[peering] iroh_relay_ca = {}: {e}", ca.display()))?;
        }
        match (
            &self.iroh_relay_listen,
            &self.iroh_relay_cert,
            &self.iroh_relay_key,
        ) {
            (None, None, None) if self.iroh_relay_open => {
                Err("[peering] iroh_relay_open needs iroh_relay_listen".into())
            }
            (None, None, None) => Ok(()),
            (Some(_), Some(_), Some(_))
                if !self.iroh_relay_open && self.gossip_listen.is_none() =>
            {
                Err(
                    "[peering] iroh_relay_listen: a relay for the federation's nodes learns them \
                     on the gossip, so it needs gossip_listen (or iroh_relay_open = true for a \
                     relay open to anyone)"
                        .into(),
                )
            }
            (Some(_), Some(_), Some(_)) => self.relay_identity().map(|_| ()),
            _ => Err(
                "[peering] iroh_relay_listen, iroh_relay_cert and iroh_relay_key go together"
                    .into(),
            ),
        }
    }

    /// The CA certificates of `iroh_relay_ca` (DER), none without it.
    pub(crate) fn relay_roots(&self) -> Result<Vec<Vec<u8>>, String> {
        let Some(ca) = &self.iroh_relay_ca else {
            return Ok(Vec::new());
        };
        let certs = pem_certs(ca)?;
        if certs.is_empty() {
            return Err("no PEM certificate in it".into());
        }
        Ok(certs)
    }

    /// The relay server's certificate chain and key (DER), read from their PEM files.
    pub(crate) fn relay_identity(&self) -> Result<Option<RelayIdentity>, String> {
        let (Some(cert), Some(key)) = (&self.iroh_relay_cert, &self.iroh_relay_key) else {
            return Ok(None);
        };
        let chain = pem_certs(cert)
            .map_err(|e| format!("[peering] iroh_relay_cert = {}: {e}", cert.display()))?;
        if chain.is_empty() {
            return Err(format!(
                "[peering] iroh_relay_cert = {}: no PEM certificate in it",
                cert.display()
            ));
        }
        let key_der = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| format!("[peering] iroh_relay_key = {}: {e}", key.display()))?;
        Ok(Some((chain, key_der.secret_der().to_vec())))
    }

    #[cfg(feature = "federation")]
    fn check_transports(&self) -> Result<(), String> {
        if let Some(addr) = &self.gossip_listen {
            addr.parse::<fleetmesh_transport::Multiaddr>()
                .map_err(|e| format!("[peering] gossip_listen = {addr:?}: {e}"))?;
        }
        for b in &self.bootstrap {
            let ends_in_peer = b.rsplit('/').nth(1) == Some("p2p");
            b.parse::<fleetmesh_transport::Multiaddr>()
                .ok()
                .filter(|_| ends_in_peer)
                .ok_or_else(|| {
                    format!(
                        "[peering] bootstrap {b:?}: a libp2p address ending in /p2p/<peer id>, \
                         e.g. /ip4/192.0.2.7/tcp/7779/p2p/12D3KooW…"
                    )
                })?;
        }
        Ok(())
    }
}

/// An iroh relay server's certificate chain and private key, DER.
pub(crate) type RelayIdentity = (Vec<Vec<u8>>, Vec<u8>);

/// The certificates of a PEM file, DER.
pub(crate) fn pem_certs(path: &Path) -> Result<Vec<Vec<u8>>, String> {
    CertificateDer::pem_file_iter(path)
        .map_err(|e| e.to_string())?
        .map(|c| c.map(|c| c.to_vec()).map_err(|e| e.to_string()))
        .collect()
}
