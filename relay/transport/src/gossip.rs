//! libp2p gossipsub discovery on [`TOPIC`]: each node announces its signed descriptor
//! (kind 11801) and heartbeats (kind 21801); every message is validated *before* gossipsub
//! passes it on, so garbage and forgeries stop at the first honest node.
//!
//! The swarm runs TCP + Noise + Yamux with the node's Ed25519 key as its libp2p identity
//! (so a descriptor's `ed25519` key names the peer that may announce it). A received message:
//! - a descriptor that verifies ([`check_peer`]) and is announced by its own key: accepted,
//!   passed on, [`Heard::Descriptor`];
//! - a heartbeat that verifies, is fresh and speaks our digest: accepted, [`Heard::Heartbeat`];
//! - a descriptor or heartbeat of another protocol digest: not passed on, [`Heard::Foreign`]
//!   (such a node is never peered);
//! - anything else (not JSON, not an event, a bad signature, another kind, a stale
//!   heartbeat, a descriptor relayed under another identity): rejected (gossipsub then
//!   scores the sender down), [`Heard::Invalid`] naming the peer it came from.
//!
//! Start it with [`Gossip::start`]; [`Gossip::announce`] publishes.

use std::time::Duration;

use fleetmesh_proto::event::Event;
use fleetmesh_proto::identity::{DescriptorContent, check_peer};
use fleetmesh_proto::nodes::Heartbeat;
use fleetmesh_proto::noun::Noun as _;
use fleetmesh_schemas::ProtocolDigest;
use fleetmesh_schemas::constants::kind;
use libp2p::futures::StreamExt as _;
use libp2p::gossipsub::{self, IdentTopic, MessageAcceptance, MessageAuthenticity, ValidationMode};
use libp2p::multiaddr::Protocol;
use libp2p::swarm::SwarmEvent;
use libp2p::swarm::dial_opts::DialOpts;
use libp2p::{Multiaddr, PeerId, Swarm, identity, noise, tcp, yamux};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::{Error, Result};

/// The announce topic.
pub const TOPIC: &str = "/fleetmesh/announce/1";
/// Largest gossip message: a descriptor or a heartbeat is a few KiB.
pub const MAX_MESSAGE: usize = 64 * 1024;
/// A heartbeat older (or further ahead) than this is stale.
const HEARTBEAT_SKEW: u64 = 300;
/// How often unreachable bootstrap peers are dialled again: after 250 ms at first (nodes
/// started together come up a moment apart), doubling up to every 5 s.
const REDIAL_FIRST: Duration = Duration::from_millis(250);
const REDIAL: Duration = Duration::from_secs(5);
/// Messages judged and not yet read by the node before more are dropped: a bound on the
/// memory a flood can take (each at most [`MAX_MESSAGE`]).
pub const HEARD_QUEUE: usize = 1024;
/// How long after a new subscription the latest announcement goes out again.
const REPUBLISH_AFTER: Duration = Duration::from_millis(500);

/// What the gossip heard, after validation.
#[derive(Debug, Clone)]
pub enum Heard {
    /// A valid descriptor of our protocol.
    Descriptor {
        /// The event.
        event: Box<Event>,
        /// Its content, checked.
        content: Box<DescriptorContent>,
        /// The libp2p peer it came through.
        via: String,
    },
    /// A valid, fresh heartbeat of our protocol.
    Heartbeat {
        /// The event.
        event: Box<Event>,
        /// Its content.
        heartbeat: Box<Heartbeat>,
    },
    /// A node of another protocol digest: not passed on, not peered.
    Foreign {
        /// Its Nostr key (hex).
        pubkey: String,
        /// The digest it speaks.
        theirs: String,
    },
    /// A message refused: not passed on, its sender scored down.
    Invalid {
        /// The libp2p peer it came through.
        via: String,
        /// Why.
        reason: String,
    },
}

pub(crate) enum Cmd {
    /// Bytes to publish; `again`: published anew when peers subscribe (the descriptor).
    Announce {
        data: Vec<u8>,
        again: bool,
    },
    Republish,
}

/// The running gossip: send announcements through it; dropping it stops the swarm.
#[derive(Debug, Clone)]
pub struct Gossip {
    cmds: mpsc::Sender<Cmd>,
    peer_id: PeerId,
    listening: watch::Receiver<Vec<Multiaddr>>,
}

impl std::fmt::Debug for Cmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Cmd::Announce { .. } => "Announce",
            Cmd::Republish => "Republish",
        })
    }
}

/// The libp2p peer id of an Ed25519 public key (a descriptor's `ed25519` key).
///
/// # Errors
/// [`Error::Gossip`] when the bytes are not an Ed25519 point.
pub fn peer_id_of(ed25519: &[u8; 32]) -> Result<PeerId> {
    let key = identity::ed25519::PublicKey::try_from_bytes(ed25519)
        .map_err(|e| Error::Gossip(format!("not an ed25519 key: {e}")))?;
    Ok(identity::PublicKey::from(key).to_peer_id())
}

/// Checks one gossip message `data`, published by `source` and received from `via`, at
/// unix time `now`: the verdict for gossipsub and what to report.
pub fn judge(
    data: &[u8],
    source: Option<&PeerId>,
    via: &PeerId,
    digest: &ProtocolDigest,
    now: u64,
) -> (MessageAcceptance, Heard) {
    let invalid = |reason: String| {
        (
            MessageAcceptance::Reject,
            Heard::Invalid {
                via: via.to_string(),
                reason,
            },
        )
    };
    let Ok(text) = std::str::from_utf8(data) else {
        return invalid("not UTF-8".into());
    };
    let event = match Event::from_json(text) {
        Ok(e) => e,
        Err(e) => return invalid(format!("not an event: {e}")),
    };
    let pubkey = hex::encode(event.pubkey);
    let foreign = |theirs: String| (MessageAcceptance::Ignore, Heard::Foreign { pubkey, theirs });
    match event.kind {
        kind::NODE_DESCRIPTOR => match check_peer(&event, digest) {
            Ok(content) => {
                let announcer = content
                    .keys
                    .iter()
                    .find(|k| k.key_type == "ed25519")
                    .and_then(|k| hex::decode(&k.public).ok())
                    .and_then(|b| <[u8; 32]>::try_from(b).ok())
                    .and_then(|k| peer_id_of(&k).ok());
                if announcer.is_none() || announcer.as_ref() != source {
                    return invalid("a descriptor announced by a peer other than its own".into());
                }
                (
                    MessageAcceptance::Accept,
                    Heard::Descriptor {
                        event: Box::new(event),
                        content: Box::new(content),
                        via: via.to_string(),
                    },
                )
            }
            Err(fleetmesh_proto::Error::ProtocolMismatch { theirs, .. }) => foreign(theirs),
            Err(e) => invalid(format!("descriptor: {e}")),
        },
        kind::HEARTBEAT => match Heartbeat::from_event(&event) {
            Ok(hb) if hb.protocol_digest != digest.to_hex() => foreign(hb.protocol_digest),
            Ok(_) if event.created_at.abs_diff(now) > HEARTBEAT_SKEW => invalid(format!(
                "a heartbeat from {} s away",
                event.created_at.abs_diff(now)
            )),
            Ok(hb) => (
                MessageAcceptance::Accept,
                Heard::Heartbeat {
                    event: Box::new(event),
                    heartbeat: Box::new(hb),
                },
            ),
            Err(e) => invalid(format!("heartbeat: {e}")),
        },
        k => invalid(format!("kind {k} is not announced here")),
    }
}

impl Gossip {
    /// Starts the swarm with `secret` (the node's Ed25519 key) as identity, listening on
    /// `listen` and dialling each of `bootstrap` (again after 250 ms, then ever less often
    /// up to every 5 s, while it is not connected). What it hears goes to `heard` (make it
    /// with [`HEARD_QUEUE`] places); messages of another `digest` are not passed on.
    ///
    /// # Errors
    /// [`Error::Gossip`] for a bad address or key, [`Error::Bind`] when `listen` cannot
    /// be bound.
    pub async fn start(
        secret: &[u8; 32],
        listen: &Multiaddr,
        bootstrap: Vec<Multiaddr>,
        digest: ProtocolDigest,
        heard: mpsc::Sender<Heard>,
    ) -> Result<(Gossip, JoinHandle<()>)> {
        let g = |e: String| Error::Gossip(e);
        let key = identity::Keypair::ed25519_from_bytes(*secret).map_err(|e| g(e.to_string()))?;
        let config = gossipsub::ConfigBuilder::default()
            .validate_messages()
            .validation_mode(ValidationMode::Strict)
            .heartbeat_interval(Duration::from_millis(500))
            // the mesh forms at the first heartbeat: announcements pass beyond the first
            // hop only from then on (the default waits 5 s)
            .heartbeat_initial_delay(Duration::from_millis(100))
            .mesh_outbound_min(1)
            .mesh_n_low(2)
            .mesh_n(4)
            .mesh_n_high(8)
            .max_transmit_size(MAX_MESSAGE)
            .build()
            .map_err(|e| g(e.to_string()))?;
        let behaviour = gossipsub::Behaviour::new(MessageAuthenticity::Signed(key.clone()), config)
            .map_err(|e| g(e.to_owned()))?;
        let mut swarm: Swarm<gossipsub::Behaviour> =
            libp2p::SwarmBuilder::with_existing_identity(key)
                .with_tokio()
                .with_tcp(
                    tcp::Config::default(),
                    noise::Config::new,
                    yamux::Config::default,
                )
                .map_err(|e| g(e.to_string()))?
                .with_behaviour(move |_| behaviour)
                .map_err(|e| g(e.to_string()))?
                .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(120)))
                .build();
        let topic = IdentTopic::new(TOPIC);
        swarm
            .behaviour_mut()
            .subscribe(&topic)
            .map_err(|e| g(e.to_string()))?;
        swarm.listen_on(listen.clone()).map_err(|e| Error::Bind {
            addr: listen.to_string(),
            reason: e.to_string(),
        })?;
        let (cmds, mut rx) = mpsc::channel::<Cmd>(16);
        let (addrs_tx, listening) = watch::channel(Vec::new());
        let peer_id = *swarm.local_peer_id();
        let task = tokio::spawn(async move {
            let mut last: Option<Vec<u8>> = None;
            let mut redial_gap = REDIAL_FIRST;
            let mut redial_at = tokio::time::Instant::now();
            // a peer that subscribed learns our descriptor a moment later rather than at
            // the next periodic announcement (one publication for a burst of subscriptions)
            let mut republish_at: Option<tokio::time::Instant> = None;
            loop {
                tokio::select! {
                    cmd = rx.recv() => match cmd {
                        Some(Cmd::Announce { data, again }) => {
                            publish(&mut swarm, &topic, &data);
                            if again {
                                last = Some(data);
                            }
                        }
                        Some(Cmd::Republish) => {
                            republish_at.get_or_insert_with(|| tokio::time::Instant::now() + REPUBLISH_AFTER);
                        }
                        None => break,
                    },
                    _ = tokio::time::sleep_until(redial_at) => {
                        for addr in &bootstrap {
                            dial(&mut swarm, addr);
                        }
                        redial_at = tokio::time::Instant::now() + redial_gap;
                        redial_gap = (redial_gap * 2).min(REDIAL);
                    },
                    _ = tokio::time::sleep_until(republish_at.unwrap_or_else(tokio::time::Instant::now)), if republish_at.is_some() => {
                        republish_at = None;
                        if let Some(data) = &last {
                            publish(&mut swarm, &topic, data);
                        }
                    },
                    ev = swarm.select_next_some() => match ev {
                        SwarmEvent::NewListenAddr { address, .. } => {
                            addrs_tx.send_modify(|a| a.push(address));
                        }
                        SwarmEvent::Behaviour(gossipsub::Event::Subscribed { .. }) => {
                            republish_at.get_or_insert_with(|| tokio::time::Instant::now() + REPUBLISH_AFTER);
                        }
                        SwarmEvent::Behaviour(gossipsub::Event::Message { propagation_source, message_id, message }) => {
                            let (verdict, what) = judge(&message.data, message.source.as_ref(), &propagation_source, &digest, fleetmesh_proto::unix_now());
                            swarm.behaviour_mut().report_message_validation_result(&message_id, &propagation_source, verdict);
                            if let Heard::Invalid { via, reason } = &what {
                                tracing::info!(%via, %reason, "gossip message refused");
                            }
                            // a reader that fell this far behind loses the excess (the
                            // gossip repeats descriptors and heartbeats)
                            match heard.try_send(what) {
                                Ok(()) => {}
                                Err(mpsc::error::TrySendError::Full(_)) => {
                                    tracing::warn!("gossip: {HEARD_QUEUE} messages unread; one dropped");
                                }
                                Err(mpsc::error::TrySendError::Closed(_)) => break,
                            }
                        }
                        _ => {}
                    },
                }
            }
        });
        Ok((
            Gossip {
                cmds,
                peer_id,
                listening,
            },
            task,
        ))
    }

    /// Publishes `event` (the node's descriptor or heartbeat) on the topic; the latest
    /// descriptor is published again when new peers subscribe (a heartbeat never is: a
    /// stale one would only be refused).
    pub async fn announce(&self, event: &Event) {
        let data = event.to_json().into_bytes();
        let again = event.kind == kind::NODE_DESCRIPTOR;
        let _ = self.cmds.send(Cmd::Announce { data, again }).await;
    }

    /// Publishes `data` as it is: what receivers must refuse, for tests of them. A node
    /// announces with [`Gossip::announce`].
    pub async fn publish_bytes(&self, data: &[u8]) {
        let data = data.to_vec();
        let _ = self.cmds.send(Cmd::Announce { data, again: false }).await;
    }

    /// Publishes the latest announcement again shortly (once for a burst of calls): when a
    /// node new to us is heard, so that it learns of us without waiting for the next
    /// periodic announcement.
    pub async fn republish(&self) {
        let _ = self.cmds.send(Cmd::Republish).await;
    }

    /// This node's libp2p peer id.
    pub fn peer_id(&self) -> PeerId {
        self.peer_id
    }

    /// The addresses the swarm listens on, each with `/p2p/<peer id>` (waits for the first).
    pub async fn listen_addrs(&self) -> Vec<Multiaddr> {
        let mut rx = self.listening.clone();
        let _ = rx.wait_for(|a| !a.is_empty()).await;
        let addrs = rx.borrow().clone();
        addrs
            .into_iter()
            .map(|a| a.with(Protocol::P2p(self.peer_id)))
            .collect()
    }
}

fn publish(swarm: &mut Swarm<gossipsub::Behaviour>, topic: &IdentTopic, data: &[u8]) {
    match swarm.behaviour_mut().publish(topic.clone(), data.to_vec()) {
        Ok(_) | Err(gossipsub::PublishError::NoPeersSubscribedToTopic) => {}
        Err(e) => tracing::warn!(error = %e, "gossip: announcement not published"),
    }
}

/// Dials `addr` unless connected to its peer (or dialling it) already.
fn dial(swarm: &mut Swarm<gossipsub::Behaviour>, addr: &Multiaddr) {
    let opts = match addr.iter().last() {
        Some(Protocol::P2p(peer)) => {
            if swarm.is_connected(&peer) {
                return;
            }
            DialOpts::peer_id(peer)
                .addresses(vec![addr.clone()])
                .build()
        }
        _ => DialOpts::unknown_peer_id().address(addr.clone()).build(),
    };
    if let Err(e) = swarm.dial(opts) {
        tracing::debug!(%addr, error = %e, "gossip: dial failed");
    }
}
