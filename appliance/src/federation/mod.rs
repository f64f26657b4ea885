//! The federation transports in the daemon: the iroh QUIC endpoint (`[peering]
//! quic_listen`), the libp2p gossip (`[peering] gossip_listen`, `bootstrap`) and the peer
//! manager between them.
//!
//! - The gossip announces the node's descriptor (every `announce_secs`, and again when new
//!   peers subscribe) and its heartbeats (every `heartbeat_secs`; leaf nodes send none).
//! - Each descriptor heard that speaks our protocol digest and advertises an `iroh`
//!   endpoint gets a peer task: it dials the node over QUIC (the hello checks both
//!   descriptors against the keys the handshake authenticated), then runs a NIP-77 round
//!   over the link every `interval_secs`, when the peer's heartbeat arrives and when new
//!   events reach this node; a broken link is dialled again with backoff. Leaf peers are
//!   not dialled (they connect outbound only); a leaf node answers no peer connections.
//! - With `[peering] iroh_relays` the QUIC endpoint homes on those relay servers (the
//!   federation's own, never a default third-party one) and advertises them (`iroh-relay`
//!   endpoints); a peer is dialled at its `iroh` addresses and through its relays, and iroh
//!   punches a direct path from there. `iroh_relay_listen` serves such a relay.
//! - A node of another digest is listed in [`Peers`] as such and never dialled; refused
//!   gossip messages and hellos are counted per peer.
//!
//! - Peers (and buyers) may send DIDComm messages over a link's message streams: they are
//!   answered as `POST /didcomm` answers them (`fleetmesh_didcomm::exchange_over` is the sending side).
//!
//! - While the relay sheds load, rounds with peers the node grants nothing pause
//!   ([`policy::paused`]); at rung 2 a granted peer's are held to its grant
//!   ([`policy::pull_allowance`]).
//!
//! What it sees goes to the [`Peers`] table (`GET /v1/peers`, `meshnode peers`) and the
//! metrics `fleetmesh_gossip_messages_total{outcome}` and `fleetmesh_quic_hellos_total{outcome}`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use fleetmesh_proto::event::Event;
use fleetmesh_proto::identity::DescriptorContent;
use fleetmesh_proto::nodes::Heartbeat;
use fleetmesh_proto::noun::Noun as _;
use fleetmesh_proto::{NodeClass, NodeKeys};
use fleetmesh_relay::face::Relay;
use fleetmesh_transport::Multiaddr;
use fleetmesh_transport::gossip::{Gossip, Heard, peer_id_of};
use fleetmesh_transport::link::{Links, Quic, Seen};
use fleetmesh_transport::relays::{
    Admission, CLIENT_BYTES_PER_SECOND, Members, RelayServer, RelayServers,
};
use serde_json::json;
use tokio::sync::{Notify, mpsc};

use crate::config::{Config, PeeringSection};
use crate::peers::Peers;
use fleetmesh_didcomm::{DidComm, Outcome};
use fleetmesh_port::Tasks;
use fleetmesh_proto::unix_now;

mod policy;
use policy::{Policy, paused, policy};

/// The running transports: stop them with [`Federation::stop`].
pub struct Federation {
    tasks: Tasks,
    quic: Option<Quic>,
    relay_server: Option<RelayServer>,
    links: Links,
}

impl Federation {
    /// The links up now.
    pub fn links(&self) -> Links {
        self.links.clone()
    }

    /// Ends the tasks, closes the QUIC endpoint and stops the relay server.
    pub async fn stop(self) {
        self.tasks.stop().await;
        if let Some(q) = self.quic {
            q.close().await;
        }
        if let Some(r) = self.relay_server {
            r.stop().await;
        }
    }
}

/// Where a peer's QUIC endpoint is reached: the `iroh` addresses and the `iroh-relay`
/// servers its descriptor advertises; and its relay faces (`wss`, then `ws` endpoints),
/// where rounds go when QUIC is blocked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct At {
    ips: Vec<SocketAddr>,
    relays: Vec<String>,
    faces: Vec<String>,
}

impl At {
    fn of(content: &DescriptorContent) -> At {
        let of =
            |scheme: &'static str| content.endpoints.iter().filter(move |e| e.scheme == scheme);
        At {
            ips: of("iroh").filter_map(|e| e.url.parse().ok()).collect(),
            relays: of(crate::node::IROH_RELAY).map(|e| e.url.clone()).collect(),
            faces: of("wss").chain(of("ws")).map(|e| e.url.clone()).collect(),
        }
    }

    fn is_empty(&self) -> bool {
        self.ips.is_empty() && self.relays.is_empty() && self.faces.is_empty()
    }

    fn names(&self) -> Vec<String> {
        let ips = self.ips.iter().map(ToString::to_string);
        ips.chain(self.relays.iter().map(|r| format!("via {r}")))
            .chain(self.faces.iter().cloned())
            .collect()
    }
}

/// Lets a node of the federation (its descriptor checked, its digest ours) use our iroh
/// relay server, when it serves members only.
fn admit(admitted: Option<&Members>, content: &DescriptorContent) {
    if let (Some(m), Some(ed)) = (admitted, ed25519_of(content))
        && !m.admit(ed)
    {
        tracing::debug!(did = %content.did, "iroh relay server: its members are at their bound");
    }
}

fn ed25519_of(content: &DescriptorContent) -> Option<[u8; 32]> {
    let k = content.keys.iter().find(|k| k.key_type == "ed25519")?;
    hex::decode(&k.public).ok()?.try_into().ok()
}

/// What a peer task needs from the node.
#[derive(Clone)]
struct Ctx {
    /// The node directory (its stored Peering manifests).
    dir: PathBuf,
    db: PathBuf,
    durability: fleetmesh_relay::store::Durability,
    table: Arc<Peers>,
    filter: String,
    every: Duration,
    links: Links,
    /// The most peers dialled at once (`[peering] max_peers`).
    max_dialled: usize,
    /// The ids our rounds with all peers are fetching: each missing event is fetched once.
    in_flight: Arc<fleetmesh_relay::sync::InFlight>,
    /// Events per second a peer may push over its link (`[peering] peer_events_per_second`).
    peer_rate: f64,
    /// Who may use our iroh relay server, when it serves the federation's nodes only:
    /// every node whose descriptor is heard or that peers with us is added.
    admitted: Option<Members>,
    /// The node's relay: its shedding rung and whom the ledger grants to.
    relay: Arc<Relay>,
}

/// Dials in a row that fail before a peer is let go (until it is heard again).
const DIAL_ATTEMPTS: u32 = 6;

/// Starts what `[peering]` asks for (nothing when neither `quic_listen` nor
/// `gossip_listen` is set).
///
/// # Errors
/// An address that cannot be bound.
pub async fn start(
    config: &Config,
    keys: NodeKeys,
    descriptor: &Event,
    relay: Arc<Relay>,
    dir: &std::path::Path,
    table: Arc<Peers>,
    didcomm: Arc<DidComm>,
) -> anyhow::Result<Option<Federation>> {
    let p: &PeeringSection = &config.peering;
    if p.quic_listen.is_none() && p.gossip_listen.is_none() && p.iroh_relay_listen.is_none() {
        return Ok(None);
    }
    let admitted = (p.iroh_relay_listen.is_some() && !p.iroh_relay_open)
        .then(|| Members::new(p.max_peers as usize * 4));
    if let Some(m) = &admitted {
        m.admit(keys.ed25519_public());
    }
    let relay_server = match (p.iroh_relay_listen, p.relay_identity()) {
        (Some(addr), Ok(Some((chain, key)))) => {
            let admission = admitted
                .clone()
                .map_or(Admission::Anyone, Admission::Members);
            let r = RelayServer::spawn(addr, chain, key, CLIENT_BYTES_PER_SECOND, admission)
                .await
                .with_context(|| format!("[peering] iroh_relay_listen = \"{addr}\""))?;
            tracing::info!(addr = ?r.addr(), "iroh relay server");
            Some(r)
        }
        (_, Err(e)) => anyhow::bail!(e),
        _ => None,
    };
    let digest = fleetmesh_schemas::SchemaSet::embedded().digest();
    let secret = keys.ed25519_secret();
    let leaf = config.node.class == NodeClass::Leaf;
    let mut tasks = Vec::new();
    let ctx = Ctx {
        dir: dir.to_path_buf(),
        db: dir.join(crate::node::DB_FILE),
        durability: config.store.durability,
        table: table.clone(),
        filter: p.filter.clone(),
        every: Duration::from_secs(p.interval_secs),
        links: Links::default(),
        max_dialled: p.max_peers as usize,
        in_flight: Arc::default(),
        peer_rate: p.peer_events_per_second as f64,
        admitted,
        relay: relay.clone(),
    };
    let quic = match p.quic_listen {
        Some(addr) => {
            let relays = RelayServers {
                urls: p.iroh_relays.clone(),
                roots: p.relay_roots().map_err(anyhow::Error::msg)?,
            };
            let q = Quic::bind_with(&secret, addr, descriptor, digest, &relays)
                .await
                .with_context(|| format!("[peering] quic_listen = \"{addr}\""))?
                .with_limits(256, 8, config.face.per_ip_exempt.clone())
                .with_messages(messages(didcomm, table.clone()));
            tracing::info!(addrs = ?q.local_addrs(), "QUIC peer links");
            if !leaf {
                let (tx, rx) = mpsc::unbounded_channel();
                tasks.push(q.serve(relay.clone(), tx, sessions(ctx.clone())));
                tasks.push(tokio::spawn(seen(rx, table.clone(), ctx.admitted.clone())));
            }
            Some(q)
        }
        None => None,
    };
    if let Some(listen) = &p.gossip_listen {
        let listen: Multiaddr = listen.parse().context("[peering] gossip_listen")?;
        let bootstrap = p
            .bootstrap
            .iter()
            .map(|b| b.parse())
            .collect::<Result<Vec<Multiaddr>, _>>()
            .context("[peering] bootstrap")?;
        let (tx, rx) = mpsc::channel(fleetmesh_transport::gossip::HEARD_QUEUE);
        let (gossip, task) = Gossip::start(&secret, &listen, bootstrap, digest, tx)
            .await
            .with_context(|| format!("[peering] gossip_listen = \"{listen}\""))?;
        tracing::info!(peer_id = %gossip.peer_id(), "gossip discovery on {}", fleetmesh_transport::gossip::TOPIC);
        tasks.push(task);
        tasks.push(tokio::spawn(announce(
            gossip.clone(),
            descriptor.clone(),
            keys,
            (!leaf).then(|| Duration::from_secs(p.heartbeat_secs)),
            Duration::from_secs(p.announce_secs),
            digest.to_hex(),
            config.node.class,
        )));
        let ours = descriptor.pubkey;
        tasks.push(tokio::spawn(heard(
            rx,
            ctx.clone(),
            quic.clone(),
            ours,
            gossip,
        )));
    }
    Ok(Some(Federation {
        tasks: Tasks(tasks),
        quic,
        relay_server,
        links: ctx.links,
    }))
}

/// What a peer's sessions on our relay face are held to: the filters our Peering manifest
/// for it (or `[peering] filter`) agrees — read at each session, so an apply holds from the
/// next one; none when the manifest disables the peering — and its tally in the table.
fn sessions(ctx: Ctx) -> fleetmesh_transport::link::Sessions {
    Arc::new(move |descriptor: &Event, _: &DescriptorContent| {
        let key = hex::encode(descriptor.pubkey);
        let pol = policy(&ctx.dir, &key).unwrap_or_else(|| Policy::of(&ctx));
        let filters = if pol.enabled && !ctx.table.barred(&key) {
            pol.filters
                .iter()
                .filter_map(|f| {
                    let v = serde_json::from_str(f).ok()?;
                    let parsed = fleetmesh_proto::filter::Filter::from_value(&v, Default::default());
                    if let Err(e) = &parsed {
                        tracing::warn!(peer = %key, filter = %f, error = %e, "a peering filter does not parse; it admits nothing");
                    }
                    parsed.ok()
                })
                .collect()
        } else {
            Vec::new()
        };
        fleetmesh_relay::face::PeerSession {
            tally: ctx.table.tally(&key),
            name: key,
            filters: Some(Arc::new(filters)),
            rate: Some((ctx.peer_rate, 2.0 * ctx.peer_rate)),
        }
    })
}

/// The node's DIDComm endpoint over peer links: a message a peer sends on a message stream
/// (a compute/1.0 job, a forward carrying a hop envelope for a mediator) is handled as
/// `POST /didcomm` handles it, and answered `{"status": 200, "message": PACKED}`,
/// `{"status": 202}` (taken, no reply) or `{"status": N, "error": {"code", "message"}}`
/// (with `"retry_after": SECS` where there will be room later). A mediator counts what it
/// holds from the link against the peer's key.
fn messages(dc: Arc<DidComm>, table: Arc<Peers>) -> fleetmesh_transport::link::Messages {
    Arc::new(move |text: String, from: Arc<Event>| {
        let dc = dc.clone();
        // counted as the sender counts them ([`fleetmesh_transport::link::PeerLink::counted`])
        let tally = table.tally_known(&hex::encode(from.pubkey));
        if let Some(t) = &tally {
            t.received_bytes(text.len() as u64);
        }
        Box::pin(async move {
            let source = fleetmesh_didcomm::Source::Peer(hex::encode(from.pubkey));
            let outcome =
                tokio::task::spawn_blocking(move || dc.handle(text.as_bytes(), &source)).await;
            let answer = match outcome {
                Ok(Outcome::Reply(_, packed)) => json!({"status": 200, "message": packed}),
                Ok(Outcome::Accepted) => json!({"status": 202}),
                Ok(Outcome::Refused(status, code, why)) => {
                    json!({"status": status, "error": {"code": code, "message": why}})
                }
                Ok(Outcome::Later(status, code, why, retry)) => json!({
                    "status": status,
                    "error": {"code": code, "message": why},
                    "retry_after": retry,
                }),
                Err(_) => {
                    json!({"status": 500, "error": {"code": "internal", "message": "the handler panicked"}})
                }
            }
            .to_string();
            if let Some(t) = &tally {
                t.sent_bytes(answer.len() as u64);
            }
            answer
        })
    })
}

/// Inbound links and refused hellos, into the table.
async fn seen(mut rx: mpsc::UnboundedReceiver<Seen>, table: Arc<Peers>, admitted: Option<Members>) {
    while let Some(s) = rx.recv().await {
        match s {
            Seen::Peered {
                descriptor,
                content,
            } => {
                metrics::counter!("fleetmesh_quic_hellos_total", "outcome" => "accepted")
                    .increment(1);
                admit(admitted.as_ref(), &content);
                table.update(&hex::encode(descriptor.pubkey), |v| {
                    v.digest_match = true;
                    v.transport = Some("iroh".into());
                    if v.link != "up" {
                        v.link = "inbound".into();
                    }
                    v.did = Some(content.did);
                    v.class = Some(content.class.to_string());
                });
            }
            Seen::Refused { remote, .. } => {
                metrics::counter!("fleetmesh_quic_hellos_total", "outcome" => "refused")
                    .increment(1);
                table.hello_refused(&remote);
            }
        }
    }
}

/// Announces the descriptor and heartbeats on the gossip.
#[allow(clippy::too_many_arguments)]
async fn announce(
    gossip: Gossip,
    descriptor: Event,
    keys: NodeKeys,
    heartbeat: Option<Duration>,
    every: Duration,
    digest: String,
    class: NodeClass,
) {
    let started = std::time::Instant::now();
    let mut announce = tokio::time::interval(every);
    let mut beat = tokio::time::interval(heartbeat.unwrap_or(Duration::from_secs(3600)));
    let mut seq = 0u64;
    loop {
        tokio::select! {
            _ = announce.tick() => gossip.announce(&descriptor).await,
            _ = beat.tick(), if heartbeat.is_some() => {
                seq += 1;
                let hb = Heartbeat {
                    uptime_secs: started.elapsed().as_secs(),
                    load: fleetmesh_proto::nodes::Load { cpu: 0.0, mem: 0.0, gpu: None, queue_depth: 0, jobs_running: None },
                    backends: vec![],
                    protocol_digest: digest.clone(),
                    version: Some(env!("CARGO_PKG_VERSION").into()),
                    seq: Some(seq),
                    class: Some(class),
                    to: vec![],
                };
                match hb.sign(&keys, unix_now()) {
                    Ok(e) => gossip.announce(&e).await,
                    Err(e) => tracing::warn!(error = %e, "heartbeat not signed"),
                }
            }
        }
    }
}

/// What the gossip heard: the table updated, peer tasks started and kicked.
async fn heard(
    mut rx: mpsc::Receiver<Heard>,
    ctx: Ctx,
    quic: Option<Quic>,
    ours: [u8; 32],
    gossip: Gossip,
) {
    let table = ctx.table.clone();
    // per peer task: its wake-up on new events, on the peer's heartbeats, and its addresses
    type Handle = (Arc<Notify>, Arc<Notify>, tokio::sync::watch::Sender<At>);
    let mut links: HashMap<String, Handle> = HashMap::new();
    while let Some(h) = rx.recv().await {
        match h {
            Heard::Descriptor { event, content, .. } => {
                metrics::counter!("fleetmesh_gossip_messages_total", "outcome" => "descriptor")
                    .increment(1);
                if event.pubkey == ours {
                    continue;
                }
                let key = hex::encode(event.pubkey);
                admit(ctx.admitted.as_ref(), &content);
                if table.get(&key).is_none() {
                    // a node new to us: it may not have heard of us yet
                    gossip.republish().await;
                }
                let addrs = At::of(&content);
                let libp2p = ed25519_of(&content).and_then(|k| peer_id_of(&k).ok());
                let dialable = quic.is_some()
                    && !addrs.is_empty()
                    && content.class != NodeClass::Leaf
                    && !table.barred(&key);
                table.update(&key, |v| {
                    v.did = Some(content.did.clone());
                    v.class = Some(content.class.to_string());
                    v.libp2p = libp2p.map(|p| p.to_string());
                    v.digest_match = true;
                    v.addrs = addrs.names();
                    if !dialable && v.link == "down" {
                        v.link = "not peered".into();
                    }
                });
                // peers let go (their tasks ended) make room
                links.retain(|_, (_, _, at)| !at.is_closed());
                match (links.get(&key), &quic, ed25519_of(&content)) {
                    (Some((_, _, at)), _, _) => {
                        let _ = at.send(addrs);
                    }
                    (None, Some(_), Some(_)) if dialable && links.len() >= ctx.max_dialled => {
                        metrics::counter!("fleetmesh_gossip_messages_total", "outcome" => "over_max_peers")
                            .increment(1);
                        tracing::debug!(peer = %key, max = ctx.max_dialled, "not dialled: [peering] max_peers are dialled already");
                    }
                    (None, Some(q), Some(ed)) if dialable => {
                        let kick = ctx.table.kick();
                        let (at, watch) = tokio::sync::watch::channel(addrs);
                        let beat = Arc::new(Notify::new());
                        links.insert(key.clone(), (kick.clone(), beat.clone(), at));
                        let wake = Wake { kick, beat };
                        tokio::spawn(peer(q.clone(), ctx.clone(), key, ed, watch, wake));
                    }
                    _ => {}
                }
            }
            Heard::Heartbeat { event, .. } => {
                metrics::counter!("fleetmesh_gossip_messages_total", "outcome" => "heartbeat")
                    .increment(1);
                let key = hex::encode(event.pubkey);
                if table.get(&key).is_some() {
                    table.update(&key, |v| v.last_heartbeat = Some(event.created_at));
                }
                if let Some((_, beat, _)) = links.get(&key) {
                    beat.notify_one();
                }
            }
            Heard::Foreign { pubkey, theirs } => {
                metrics::counter!("fleetmesh_gossip_messages_total", "outcome" => "foreign")
                    .increment(1);
                tracing::info!(peer = %pubkey, digest = %theirs, "a node of another protocol digest: not peered");
                table.update(&pubkey, |v| {
                    v.digest_match = false;
                    v.digest = Some(theirs);
                    v.link = "not peered".into();
                });
            }
            Heard::Invalid { via, .. } => {
                metrics::counter!("fleetmesh_gossip_messages_total", "outcome" => "refused")
                    .increment(1);
                table.gossip_refused(&via);
            }
        }
    }
}

/// What wakes a peer task early.
struct Wake {
    /// New events here.
    kick: Arc<Notify>,
    /// The peer's heartbeat: it is alive (dial it now if the link is down).
    beat: Arc<Notify>,
}

/// One peer over QUIC: dial, then rounds on schedule, on new events and on the peer's
/// heartbeats; dial again when the link breaks (after a backoff, or at its next heartbeat).
async fn peer(
    quic: Quic,
    ctx: Ctx,
    key: String,
    ed25519: [u8; 32],
    addrs: tokio::sync::watch::Receiver<At>,
    wake: Wake,
) {
    let mut wait = ctx.every;
    let mut first = true;
    let mut failed_dials = 0;
    loop {
        if !first {
            let _ = tokio::time::timeout(wait, wake.beat.notified()).await;
        }
        first = false;
        let at = addrs.borrow().clone();
        let link = match quic.dial_at(&ed25519, &at.ips, &at.relays).await {
            Ok(l) => l,
            Err(e) => {
                // where QUIC is blocked, the same rounds over its relay face
                if let Some(url) = at.faces.first() {
                    tracing::debug!(peer = %key, error = %e, %url, "no QUIC link: rounds over its relay face");
                    let pol = policy(&ctx.dir, &key).unwrap_or_else(|| Policy::of(&ctx));
                    if paused(&ctx, &key) {
                        wait = ctx.every;
                        continue;
                    }
                    let outcome = if pol.enabled {
                        rounds(&ctx, &key, Over::Face(url), &pol).await
                    } else {
                        Err(anyhow::anyhow!("peering disabled by its Peering manifest"))
                    };
                    if outcome.is_ok() {
                        failed_dials = 0;
                        let ws = if url.starts_with("wss://") {
                            "wss"
                        } else {
                            "ws"
                        };
                        ctx.table.update(&key, |v| {
                            v.transport = Some(ws.into());
                            v.path = None;
                        });
                    }
                    wait =
                        crate::peering::record(&ctx.table, &key, outcome, ctx.every, wait, false);
                    continue;
                }
                wait =
                    crate::peering::record(&ctx.table, &key, Err(e.into()), ctx.every, wait, false);
                failed_dials += 1;
                if failed_dials >= DIAL_ATTEMPTS {
                    // its place among the dialled peers goes to the next one heard
                    tracing::info!(peer = %key, dials = failed_dials, "peer let go until it is heard again");
                    return;
                }
                continue;
            }
        };
        failed_dials = 0;
        ctx.table.update(&key, |v| {
            v.link = "up".into();
            v.transport = Some("iroh".into());
        });
        tracing::info!(peer = %key, "QUIC peer link up");
        let link = link.counted(ctx.table.tally(&key));
        lock(&ctx.links).insert(key.clone(), link.clone());
        loop {
            if ctx.table.barred(&key) {
                // suspended or revoked by the ledger: no rounds, and a revoked peer's link
                // is closed for good
                if link.is_closed() {
                    lock(&ctx.links).remove(&key);
                    return;
                }
                tokio::time::sleep(ctx.every).await;
                continue;
            }
            if paused(&ctx, &key) {
                tokio::time::sleep(ctx.every).await;
                continue;
            }
            let pol = policy(&ctx.dir, &key).unwrap_or_else(|| Policy::mutual(&ctx, &key));
            if !pol.enabled {
                ctx.table
                    .update(&key, |v| v.link = "disabled (Peering manifest)".into());
                tokio::time::sleep(pol.every).await;
                continue;
            }
            let outcome = rounds(&ctx, &key, Over::Link(&link), &pol).await;
            ctx.table
                .update(&key, |v| v.path = Some(link.route().to_owned()));
            let fetched = outcome.as_ref().is_ok_and(|r| r.fetched > 0);
            let failed = outcome.is_err();
            wait = crate::peering::record(&ctx.table, &key, outcome, ctx.every, wait, true);
            if fetched {
                ctx.table.kick_all();
            }
            if failed && link.is_closed() {
                lock(&ctx.links).remove(&key);
                break;
            }
            let wait = if wait == ctx.every { pol.every } else { wait };
            if wait > pol.every {
                let _ = tokio::time::timeout(wait, wake.beat.notified()).await;
            } else {
                let _ = tokio::time::timeout(wait, async {
                    tokio::select! {
                        () = wake.kick.notified() => {},
                        () = wake.beat.notified() => {},
                    }
                })
                .await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Where a peer's rounds go: its QUIC link, or — where QUIC is blocked — its relay face
/// (`wss://` with the web's roots, or `ws://`).
#[derive(Clone, Copy)]
enum Over<'a> {
    Link(&'a fleetmesh_transport::link::PeerLink),
    Face(&'a str),
}

/// One round with `key` per filter of its policy, over `over`: on its link in the policy's
/// direction (sharing the ids in flight with the node's other rounds), on its face both
/// ways.
async fn rounds(
    ctx: &Ctx,
    key: &str,
    over: Over<'_>,
    pol: &Policy,
) -> anyhow::Result<fleetmesh_relay::sync::SyncReport> {
    let mut sum = fleetmesh_relay::sync::SyncReport::default();
    for filter in &pol.filters {
        let target = match over {
            Over::Link(link) => crate::peering::Target::Link {
                name: key.to_owned(),
                link: link.session_counted(Some(ctx.table.tally(key))).await?,
                direction: pol.direction,
                in_flight: ctx.in_flight.clone(),
                max_fetch: policy::pull_allowance(ctx, key),
                push_only: ctx.table.tally(key).outbound_shards(),
            },
            Over::Face(url) => crate::peering::Target::Url {
                url: url.to_owned(),
                via: fleetmesh_relay::bridge::Via::Nip77,
                since: None,
            },
        };
        let (c, f) = (ctx.clone(), filter.clone());
        let r = tokio::task::spawn_blocking(move || {
            crate::peering::round(&c.db, c.durability, &f, None, target)
        })
        .await
        .unwrap_or_else(|e| Err(anyhow::anyhow!("the round panicked: {e}")))?;
        sum.absorb(&r);
    }
    Ok(sum)
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
