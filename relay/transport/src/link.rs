//! iroh QUIC peer links: the node's Ed25519 key is its iroh endpoint identity, the ALPN is
//! `fleetmesh/1`, and no address lookup is used: peers are dialled at the addresses their
//! descriptors give, and through the relay servers they name when the operator configured
//! relays of the federation's own ([`Quic::bind_with`]; never a default third-party one).
//!
//! A connection starts with a hello on its first stream: each side sends its signed
//! descriptor (kind 11801), and the other checks it ([`check_peer`]: signature, Ed25519
//! proof of possession, schema, the protocol digest gate) *and* that the descriptor's
//! Ed25519 key is the key the QUIC handshake authenticated. Only then are relay sessions
//! opened: each further stream carries one NIP-01/NIP-77 conversation with the peer's relay
//! face ([`frame`](crate::frame)), served by [`Relay::serve_frames`] under the relay's own
//! limits and what [`Sessions`] says for the peer (the shards agreed with it, its tally),
//! or one message (a DIDComm message: a compute/1.0 job, a forward carrying a hop
//! envelope) answered by the node's [`Messages`] handler ([`PeerLink::message`]). Use
//! [`Quic::bind`] for the endpoint, [`Quic::serve`] to answer, [`Quic::dial`] to connect,
//! [`PeerLink::session`] for a [`Link`] that `fleetmesh_relay::sync` runs over.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetmesh_proto::event::Event;
use fleetmesh_proto::identity::{DescriptorContent, check_peer};
use fleetmesh_relay::face::{PeerSession, Relay};
use fleetmesh_relay::sync::Link;
use fleetmesh_schemas::ProtocolDigest;
use iroh::endpoint::{Connection, QuicTransportConfig, VarInt, presets};
use iroh::{Endpoint, EndpointAddr, RelayMode, SecretKey};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;

use crate::frame::{self, Frame, read_frame, write_frame};
use crate::relays::RelayServers;
use crate::{Error, Result};

/// The ALPN of fleetmesh peer links.
pub const ALPN: &[u8] = b"fleetmesh/1";
const HELLO: u8 = b'H';
const RELAY: u8 = b'R';
const MESSAGE: u8 = b'D';
/// The largest message a message stream carries, and the largest answer.
const MESSAGE_CAP: usize = 8 << 20;
const ANSWER_CAP: usize = 64 << 20;
/// A message must be answered within this.
const MESSAGE_TIMEOUT: Duration = Duration::from_secs(60);
/// A hello must be over within this.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest hello frame (a descriptor).
const HELLO_CAP: usize = 64 * 1024;
/// Relay sessions open at once on one connection.
const SESSIONS_PER_PEER: u32 = 8;
/// Peer connections served at once, and from one IP address; more are refused.
const MAX_INBOUND: usize = 256;
const MAX_PER_IP: usize = 8;
/// A link silent this long is closed.
const IDLE: Duration = Duration::from_secs(10);
/// Close codes.
const REFUSED: u32 = 1;

/// What each relay session a peer opens over its link is held to ([`PeerSession`]: the
/// shard filters agreed with it, its rate, its tally): asked with the peer's checked
/// descriptor at every session it opens, so a changed agreement applies to the next one.
pub type Sessions = Arc<dyn Fn(&Event, &DescriptorContent) -> PeerSession + Send + Sync>;

/// [`Sessions`] that take every event at the relay's own rate, each peer counted in a
/// tally of its own per session.
pub fn open_sessions() -> Sessions {
    Arc::new(|descriptor: &Event, _: &DescriptorContent| PeerSession {
        name: hex::encode(descriptor.pubkey),
        filters: None,
        rate: None,
        tally: Arc::default(),
    })
}

/// Answers one message a peer sends over its link (a DIDComm message: compute/1.0, or a
/// forward carrying a hop envelope), with the peer's checked descriptor: the answer's
/// text. The transport knows nothing of what the text says.
pub type Messages = Arc<
    dyn Fn(String, Arc<Event>) -> futures_util::future::BoxFuture<'static, String> + Send + Sync,
>;

/// What the endpoint saw: a peer that passed the hello, or one that did not.
#[derive(Debug, Clone)]
pub enum Seen {
    /// A peer link is up.
    /// A peer that dialled us passed the hello.
    Peered {
        /// Its descriptor, checked.
        descriptor: Box<Event>,
        /// Its content.
        content: Box<DescriptorContent>,
    },
    /// A connection was refused at the hello.
    Refused {
        /// The remote's endpoint id (its Ed25519 key, hex).
        remote: String,
        /// Why.
        reason: String,
    },
}

struct Ours {
    descriptor: String,
    digest: ProtocolDigest,
}

/// The node's iroh endpoint.
#[derive(Clone)]
pub struct Quic {
    endpoint: Endpoint,
    ours: Arc<Ours>,
    /// Inbound connections at once: in all, and from one IP address other than those of
    /// `exempt` (a local cluster's nodes all arrive from loopback).
    max_inbound: usize,
    max_per_ip: usize,
    exempt: Arc<Vec<IpAddr>>,
    messages: Option<Messages>,
}

impl std::fmt::Debug for Quic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quic")
            .field("id", &self.endpoint.id().to_string())
            .finish_non_exhaustive()
    }
}

/// One connection's place in the per-IP count, given back when dropped.
struct IpSlot {
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl IpSlot {
    fn take(counts: &Arc<Mutex<HashMap<IpAddr, usize>>>, ip: IpAddr, max: usize) -> Option<IpSlot> {
        let mut c = counts.lock().unwrap_or_else(|p| p.into_inner());
        let n = c.entry(ip).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(IpSlot {
            counts: counts.clone(),
            ip,
        })
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = c.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                c.remove(&self.ip);
            }
        }
    }
}

/// The links a node holds to its peers, by the peer's Nostr key (hex): shared by whoever
/// sends over them (DIDComm, the ledger) with the transport that keeps them.
pub type Links = Arc<Mutex<HashMap<String, PeerLink>>>;

/// A peer link that passed the hello.
#[derive(Debug, Clone)]
pub struct PeerLink {
    conn: Connection,
    /// The peer's descriptor.
    pub descriptor: Event,
    /// Its content.
    pub content: DescriptorContent,
    /// Where the bytes of its message streams are counted ([`PeerLink::counted`]).
    tally: Option<Arc<fleetmesh_relay::face::Tally>>,
}

/// `descriptor` (JSON) checked as a peer's, and its Ed25519 key is `remote`.
fn check_hello(
    json: &str,
    remote: &[u8; 32],
    digest: &ProtocolDigest,
) -> std::result::Result<(Event, DescriptorContent), String> {
    let event = Event::from_json(json).map_err(|e| format!("descriptor: {e}"))?;
    let content = check_peer(&event, digest).map_err(|e| e.to_string())?;
    let ed = content
        .keys
        .iter()
        .find(|k| k.key_type == "ed25519")
        .map(|k| k.public.as_str());
    if ed != Some(hex::encode(remote).as_str()) {
        return Err(
            "the descriptor's ed25519 key is not the key this connection was made with".into(),
        );
    }
    Ok((event, content))
}

impl Quic {
    /// Binds the endpoint at `addr` (UDP) with `secret` (the node's Ed25519 key) as its
    /// identity; `descriptor` is what the hello sends. Direct links only.
    ///
    /// # Errors
    /// [`Error::Bind`] when the address cannot be bound.
    pub async fn bind(
        secret: &[u8; 32],
        addr: SocketAddr,
        descriptor: &Event,
        digest: ProtocolDigest,
    ) -> Result<Quic> {
        Quic::bind_with(secret, addr, descriptor, digest, &RelayServers::default()).await
    }

    /// As [`Quic::bind`], homed on `relays` (when it names any): peers that cannot reach
    /// the endpoint directly reach it through them, and iroh punches a direct path from
    /// there where NAT allows.
    ///
    /// # Errors
    /// [`Error::Bind`] when the address cannot be bound or a relay URL does not parse.
    pub async fn bind_with(
        secret: &[u8; 32],
        addr: SocketAddr,
        descriptor: &Event,
        digest: ProtocolDigest,
        relays: &RelayServers,
    ) -> Result<Quic> {
        let bind = |e: String| Error::Bind {
            addr: addr.to_string(),
            reason: e,
        };
        // a peer that vanished (killed, cut off) is noticed within IDLE: keep-alives every
        // 2 s keep a quiet link open
        let idle = IDLE.try_into().map_err(|_| bind("idle timeout".into()))?;
        let transport = QuicTransportConfig::builder()
            .keep_alive_interval(Duration::from_secs(2))
            .max_idle_timeout(Some(idle))
            .max_concurrent_bidi_streams(VarInt::from_u32(SESSIONS_PER_PEER + 1))
            .build();
        let mut builder = Endpoint::builder(presets::Minimal)
            .secret_key(SecretKey::from_bytes(secret))
            .relay_mode(RelayMode::Disabled);
        if let Some((mode, roots)) = relays.iroh().map_err(bind)? {
            builder = builder.relay_mode(mode).ca_tls_config(roots);
        }
        let endpoint = builder
            .clear_address_lookup()
            .clear_ip_transports()
            .bind_addr(addr)
            .map_err(|e| bind(e.to_string()))?
            .alpns(vec![ALPN.to_vec()])
            .transport_config(transport)
            .bind()
            .await
            .map_err(|e| bind(e.to_string()))?;
        Ok(Quic {
            endpoint,
            ours: Arc::new(Ours {
                descriptor: descriptor.to_json(),
                digest,
            }),
            max_inbound: MAX_INBOUND,
            max_per_ip: MAX_PER_IP,
            exempt: Arc::new(vec![
                IpAddr::from([127, 0, 0, 1]),
                IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
            ]),
            messages: None,
        })
    }

    /// Answers message streams ([`PeerLink::message`]) with `handler`; without one they
    /// are refused (the stream is reset).
    #[must_use]
    pub fn with_messages(mut self, handler: Messages) -> Quic {
        self.messages = Some(handler);
        self
    }

    /// Other caps on inbound connections than 256 in all and 8 from one IP address, and
    /// other addresses the per-IP cap does not apply to than loopback's (the node passes
    /// `[face] per_ip_exempt`).
    #[must_use]
    pub fn with_limits(
        mut self,
        max_inbound: usize,
        max_per_ip: usize,
        exempt: Vec<IpAddr>,
    ) -> Quic {
        self.max_inbound = max_inbound.max(1);
        self.max_per_ip = max_per_ip.max(1);
        self.exempt = Arc::new(exempt);
        self
    }

    fn descriptor(&self) -> String {
        self.ours.descriptor.clone()
    }

    /// The addresses the endpoint is bound to (the real port when bound to port 0).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.endpoint.bound_sockets()
    }

    /// Dials the peer whose Ed25519 key is `key` at `addrs` and runs the hello.
    ///
    /// # Errors
    /// [`Error::Connect`] when no address answers, [`Error::Hello`] when either side
    /// refuses the other's descriptor.
    pub async fn dial(&self, key: &[u8; 32], addrs: &[SocketAddr]) -> Result<PeerLink> {
        self.dial_at(key, addrs, &[]).await
    }

    /// As [`Quic::dial`], also through the relay servers (`https://` URLs) the peer is
    /// homed on, as its descriptor says (this endpoint must be bound with relays).
    ///
    /// # Errors
    /// As [`Quic::dial`]; a relay URL that does not parse.
    pub async fn dial_at(
        &self,
        key: &[u8; 32],
        addrs: &[SocketAddr],
        relays: &[String],
    ) -> Result<PeerLink> {
        let peer = hex::encode(key);
        let fail = |reason: String| Error::Connect {
            peer: peer.clone(),
            reason,
        };
        let id = iroh::PublicKey::from_bytes(key).map_err(|e| fail(e.to_string()))?;
        let mut at = EndpointAddr::new(id);
        for a in addrs {
            at = at.with_ip_addr(*a);
        }
        for r in relays {
            let url: iroh::RelayUrl = r
                .parse()
                .map_err(|e| fail(format!("relay server {r:?}: {e}")))?;
            at = at.with_relay_url(url);
        }
        let conn = tokio::time::timeout(HELLO_TIMEOUT, self.endpoint.connect(at, ALPN))
            .await
            .map_err(|_| fail(format!("no answer within {HELLO_TIMEOUT:?}")))?
            .map_err(|e| fail(e.to_string()))?;
        let hello = async {
            let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
            send.write_all(&[HELLO]).await.map_err(|e| e.to_string())?;
            write_frame(&mut send, &Frame::Text(self.descriptor()))
                .await
                .map_err(|e| e.to_string())?;
            let Some(Frame::Text(reply)) = read_frame(&mut recv, HELLO_CAP).await? else {
                return Err("the peer closed the hello".to_owned());
            };
            let v: Value = serde_json::from_str(&reply).map_err(|e| format!("hello: {e}"))?;
            if v["ok"] != true {
                return Err(format!(
                    "the peer refused us: {}",
                    v["reason"].as_str().unwrap_or("")
                ));
            }
            let theirs = v["descriptor"].to_string();
            check_hello(&theirs, key, &self.ours.digest)
        };
        let outcome = tokio::time::timeout(HELLO_TIMEOUT, hello)
            .await
            .unwrap_or_else(|_| Err(format!("no hello within {HELLO_TIMEOUT:?}")));
        match outcome {
            Ok((descriptor, content)) => Ok(PeerLink {
                conn,
                descriptor,
                content,
                tally: None,
            }),
            Err(reason) => {
                conn.close(VarInt::from_u32(REFUSED), b"hello refused");
                Err(Error::Hello { peer, reason })
            }
        }
    }

    /// Answers peer connections until the endpoint closes: the hello, then each relay
    /// session served by `relay` under what `sessions` says for the peer. What happens
    /// goes to `seen`.
    pub fn serve(
        &self,
        relay: Arc<Relay>,
        seen: mpsc::UnboundedSender<Seen>,
        sessions: Sessions,
    ) -> JoinHandle<()> {
        let me = self.clone();
        let slots = Arc::new(Semaphore::new(self.max_inbound));
        let per_ip: Arc<Mutex<HashMap<IpAddr, usize>>> = Arc::default();
        tokio::spawn(async move {
            while let Some(incoming) = me.endpoint.accept().await {
                let ip = match incoming.remote_addr() {
                    iroh::endpoint::IncomingAddr::Ip(a) => Some(a.ip()),
                    _ => None,
                };
                let refused = |reason: String| Seen::Refused {
                    remote: ip.map_or_else(|| "?".into(), |i| i.to_string()),
                    reason,
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    let _ = seen.send(refused(format!(
                        "{} peer connections already open",
                        me.max_inbound
                    )));
                    incoming.refuse();
                    continue;
                };
                let ip_slot = match ip.filter(|ip| !me.exempt.contains(ip)) {
                    Some(ip) => match IpSlot::take(&per_ip, ip, me.max_per_ip) {
                        Some(s) => Some(s),
                        None => {
                            let _ = seen.send(refused(format!(
                                "{} connections from {ip} already open",
                                me.max_per_ip
                            )));
                            incoming.refuse();
                            continue;
                        }
                    },
                    None => None,
                };
                let (me, relay, seen) = (me.clone(), relay.clone(), seen.clone());
                let sessions = sessions.clone();
                tokio::spawn(async move {
                    let _held = (slot, ip_slot);
                    let Ok(conn) = incoming.await else { return };
                    me.answer(conn, relay, seen, sessions).await;
                });
            }
        })
    }

    async fn answer(
        &self,
        conn: Connection,
        relay: Arc<Relay>,
        seen: mpsc::UnboundedSender<Seen>,
        sessions: Sessions,
    ) {
        let remote = *conn.remote_id().as_bytes();
        // the address the relay's per-connection logs name: the direct path's
        let addr = conn
            .paths()
            .iter()
            .find_map(|p| match p.remote_addr() {
                iroh::TransportAddr::Ip(a) => Some(*a),
                _ => None,
            })
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
        let hello = async {
            let (mut send, mut recv) = conn.accept_bi().await.map_err(|e| e.to_string())?;
            let mut kind = [0u8; 1];
            recv.read_exact(&mut kind)
                .await
                .map_err(|e| e.to_string())?;
            if kind[0] != HELLO {
                return Err("the first stream is not a hello".to_owned());
            }
            let Some(Frame::Text(theirs)) = read_frame(&mut recv, HELLO_CAP).await? else {
                return Err("no descriptor in the hello".to_owned());
            };
            match check_hello(&theirs, &remote, &self.ours.digest) {
                Ok(ok) => {
                    let ours: Value =
                        serde_json::from_str(&self.descriptor()).unwrap_or(Value::Null);
                    let reply = json!({"ok": true, "descriptor": ours}).to_string();
                    write_frame(&mut send, &Frame::Text(reply))
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok(ok)
                }
                Err(reason) => {
                    let reply = json!({"ok": false, "reason": reason}).to_string();
                    let _ = write_frame(&mut send, &Frame::Text(reply)).await;
                    let _ = send.shutdown().await;
                    let _ = tokio::time::timeout(Duration::from_secs(1), send.stopped()).await;
                    Err(reason)
                }
            }
        };
        let outcome = tokio::time::timeout(HELLO_TIMEOUT, hello)
            .await
            .unwrap_or_else(|_| Err(format!("no hello within {HELLO_TIMEOUT:?}")));
        let (descriptor, content) = match outcome {
            Ok(checked) => checked,
            Err(reason) => {
                tracing::info!(remote = %hex::encode(remote), %reason, "peer refused at the hello");
                let _ = seen.send(Seen::Refused {
                    remote: hex::encode(remote),
                    reason,
                });
                conn.close(VarInt::from_u32(REFUSED), b"hello refused");
                return;
            }
        };
        let _ = seen.send(Seen::Peered {
            descriptor: Box::new(descriptor.clone()),
            content: Box::new(content.clone()),
        });
        let cap = frame_cap(&relay);
        let descriptor = Arc::new(descriptor);
        while let Ok((send, mut recv)) = conn.accept_bi().await {
            let relay = relay.clone();
            let session = sessions(&descriptor, &content);
            let (messages, from) = (self.messages.clone(), descriptor.clone());
            tokio::spawn(async move {
                let mut kind = [0u8; 1];
                if recv.read_exact(&mut kind).await.is_err() {
                    return;
                }
                if kind[0] == MESSAGE {
                    answer_message(send, recv, messages, from, &session).await;
                    return;
                }
                if kind[0] != RELAY {
                    session
                        .tally
                        .refused(fleetmesh_relay::face::PeerRefusal::Malformed);
                    return;
                }
                let (incoming, outgoing) = frame::server(recv, send, cap);
                relay
                    .serve_frames(incoming, outgoing, addr, Some(session))
                    .await;
            });
        }
    }

    /// Closes every connection and the endpoint.
    pub async fn close(&self) {
        self.endpoint.close().await;
    }
}

/// One message stream: the message in, `handler`'s answer out; counted in the peer's
/// tally (a frame that is not one text message is malformed).
async fn answer_message(
    mut send: iroh::endpoint::SendStream,
    mut recv: iroh::endpoint::RecvStream,
    handler: Option<Messages>,
    from: Arc<Event>,
    session: &PeerSession,
) {
    use fleetmesh_relay::face::PeerRefusal;
    let Some(handler) = handler else {
        let _ = send.reset(VarInt::from_u32(REFUSED));
        return;
    };
    let text = match tokio::time::timeout(HELLO_TIMEOUT, read_frame(&mut recv, MESSAGE_CAP)).await {
        Ok(Ok(Some(Frame::Text(t)))) => t,
        _ => {
            session.tally.refused(PeerRefusal::Malformed);
            let _ = send.reset(VarInt::from_u32(REFUSED));
            return;
        }
    };
    session.tally.received(0, text.len() as u64);
    let Ok(answer) = tokio::time::timeout(MESSAGE_TIMEOUT, handler(text, from)).await else {
        let _ = send.reset(VarInt::from_u32(REFUSED));
        return;
    };
    session.tally.sent(0, answer.len() as u64);
    if write_frame(&mut send, &Frame::Text(answer)).await.is_ok() {
        let _ = send.finish();
        let _ = tokio::time::timeout(Duration::from_secs(5), send.stopped()).await;
    }
}

/// The largest frame a relay session carries: as a WebSocket's, 4 × the relay's message
/// limit and at least 1 MiB.
fn frame_cap(relay: &Relay) -> usize {
    relay
        .limits()
        .max_message_length
        .saturating_mul(4)
        .max(1 << 20)
}

impl PeerLink {
    /// Opens a relay session with the peer's relay face: a [`Link`] to run
    /// `fleetmesh_relay::sync::sync_over` (or any NIP-01 conversation) over.
    ///
    /// # Errors
    /// [`Error::Connect`] when the connection is gone.
    pub async fn session(&self) -> Result<Link> {
        self.session_counted(None).await
    }

    /// [`PeerLink::session`], every message counted in `tally` as it crosses: the same
    /// counts the peer's face keeps of it, so the two sides' receipts agree.
    ///
    /// # Errors
    /// [`Error::Connect`] when the connection is gone.
    pub async fn session_counted(
        &self,
        tally: Option<Arc<fleetmesh_relay::face::Tally>>,
    ) -> Result<Link> {
        let peer = hex::encode(self.conn.remote_id().as_bytes());
        let fail = |e: String| Error::Connect {
            peer: peer.clone(),
            reason: e,
        };
        let (mut send, recv) = self.conn.open_bi().await.map_err(|e| fail(e.to_string()))?;
        send.write_all(&[RELAY])
            .await
            .map_err(|e| fail(e.to_string()))?;
        Ok(frame::client(recv, send, 16 << 20, tally))
    }

    /// Sends one message (a DIDComm message) to the peer's message handler
    /// ([`Quic::with_messages`]) and returns its answer.
    ///
    /// # Errors
    /// [`Error::Connect`] when the connection is gone, the peer answers no messages, or
    /// no answer comes within a minute.
    pub async fn message(&self, text: String) -> Result<String> {
        let answer = self.exchange(text).await?;
        if let Some(t) = &self.tally {
            t.received_bytes(answer.len() as u64);
        }
        Ok(answer)
    }

    /// The link, with the bytes of the messages it sends and the answers it gets counted in
    /// `tally` (the peer's side counts the same on its message handler).
    #[must_use]
    pub fn counted(mut self, tally: Arc<fleetmesh_relay::face::Tally>) -> PeerLink {
        self.tally = Some(tally);
        self
    }

    async fn exchange(&self, text: String) -> Result<String> {
        if let Some(t) = &self.tally {
            t.sent_bytes(text.len() as u64);
        }
        let peer = hex::encode(self.conn.remote_id().as_bytes());
        let fail = |e: String| Error::Connect {
            peer: peer.clone(),
            reason: e,
        };
        let exchange = async {
            let (mut send, mut recv) = self.conn.open_bi().await.map_err(|e| e.to_string())?;
            send.write_all(&[MESSAGE])
                .await
                .map_err(|e| e.to_string())?;
            write_frame(&mut send, &Frame::Text(text))
                .await
                .map_err(|e| e.to_string())?;
            let _ = send.finish();
            match read_frame(&mut recv, ANSWER_CAP).await? {
                Some(Frame::Text(answer)) => Ok(answer),
                _ => Err("the peer answered no message (it takes none over links)".to_owned()),
            }
        };
        tokio::time::timeout(MESSAGE_TIMEOUT + HELLO_TIMEOUT, exchange)
            .await
            .map_err(|_| fail(format!("no answer within {MESSAGE_TIMEOUT:?}")))?
            .map_err(fail)
    }

    /// The path the link's traffic takes now: `direct` (UDP between the two endpoints,
    /// punched through NAT when it had to be), `relay` (through an iroh relay server), or
    /// `none` (being set up, or gone).
    pub fn route(&self) -> &'static str {
        let paths = self.conn.paths();
        match paths.iter().find(|p| p.is_selected()) {
            Some(p) if p.is_ip() => "direct",
            Some(p) if p.is_relay() => "relay",
            _ => "none",
        }
    }

    /// Closes the link.
    pub fn close(&self) {
        self.conn.close(VarInt::from_u32(0), b"bye");
    }

    /// Whether the connection is closed (then dial again).
    pub fn is_closed(&self) -> bool {
        self.conn.close_reason().is_some()
    }
}
