//! The relay's parsers of client bytes: events, filters, the client messages that carry
//! them (as the relay face dispatches them), NIP-77 negentropy messages, NIP-44 payloads.

use std::sync::OnceLock;

use fleetmesh_proto::ask::Ask;
use fleetmesh_proto::event::canonical;
use fleetmesh_proto::filter::{Filter, FilterLimits};
use fleetmesh_proto::ledger::{Grant, Report};
use fleetmesh_proto::nodes::{Heartbeat, Revocation, Shard};
use fleetmesh_proto::noun::Noun;
use fleetmesh_proto::projection::{Assertion, RelayMonitor};
use fleetmesh_proto::provider::Terms;
use fleetmesh_proto::receipt::Receipt;
use fleetmesh_proto::{Event, UnsignedEvent, nip44};
use fleetmesh_relay::limits::Limits;
use fleetmesh_schemas::SchemaSet;
use negentropy::{Id, Negentropy, NegentropyStorageVector};
use serde_json::Value;

use crate::NOW;

/// The key the harnesses sign with: fixed, so a run replays.
fn keypair() -> &'static secp256k1::Keypair {
    static KEY: OnceLock<secp256k1::Keypair> = OnceLock::new();
    KEY.get_or_init(|| {
        secp256k1::Keypair::from_secret_bytes([7u8; 32]).expect("a valid secret key")
    })
}

/// A signed event for filters to match against.
fn sample_event() -> &'static Event {
    static EVENT: OnceLock<Event> = OnceLock::new();
    EVENT.get_or_init(|| {
        UnsignedEvent {
            created_at: NOW,
            kind: 1,
            tags: vec![
                vec!["e".into(), "ab".repeat(32)],
                vec!["t".into(), "fleetmesh".into()],
                vec!["d".into()],
            ],
            content: "hello".into(),
        }
        .sign_with_aux(keypair(), &[0; 32])
    })
}

/// What the relay does with an event it parsed: its served form must parse back to the
/// same event, then the admission checks run; the same fields signed by our key go through
/// the admission checks again, so the schema checks of fleetmesh kinds see fuzzed content,
/// and so do the typed nouns (an ask, a receipt) read from it.
fn check_event(ev: &Event) {
    let json = ev.to_json();
    let back = Event::from_json(&json).expect("an event's JSON parses back");
    assert_eq!(&back, ev, "the JSON round trip changed the event");
    assert_eq!(
        &Event::from_value(&ev.to_value()).expect("an event's JSON value parses back"),
        ev
    );
    let limits = Limits::default();
    let _ = limits.admit(ev, SchemaSet::embedded(), NOW);
    let _ = (ev.replacement_key(), ev.expiration(), ev.is_ephemeral());
    let signed = UnsignedEvent {
        created_at: ev.created_at,
        kind: ev.kind,
        tags: ev.tags.clone(),
        content: ev.content.clone(),
    }
    .sign_with_aux(keypair(), &[0; 32]);
    assert_eq!(
        signed.id,
        canonical::event_id(
            &signed.pubkey,
            signed.created_at,
            signed.kind,
            &signed.tags,
            &signed.content
        )
    );
    signed.verify().expect("an event we signed verifies");
    let _ = limits.admit(&signed, SchemaSet::embedded(), NOW);
    if let Ok(ask) = Ask::from_event(signed.clone(), NOW) {
        assert_eq!(ask.event, signed);
        assert_eq!(signed.tag_value("mode"), Some(ask.mode.as_str()));
    }
    if let Ok(receipt) = Receipt::from_event(signed.clone()) {
        assert_eq!(signed.tag_value("d"), Some(receipt.job.as_str()));
        assert_eq!(signed.tag_value("mode"), Some(receipt.mode.as_str()));
    }
    nouns_sign_back(&signed);
}

/// Whatever noun an event reads as signs back into an event that reads the same.
fn nouns_sign_back(ev: &Event) {
    fn hold<N: Noun + PartialEq + std::fmt::Debug>(ev: &Event) {
        if let Ok(n) = N::from_event(ev) {
            let again = n.unsigned(ev.created_at).sign_with_aux(keypair(), &[0; 32]);
            assert_eq!(N::from_event(&again).expect("a noun signed back reads"), n);
        }
    }
    hold::<Grant>(ev);
    hold::<Report>(ev);
    hold::<Revocation>(ev);
    hold::<Heartbeat>(ev);
    hold::<Shard>(ev);
    hold::<Terms>(ev);
    // a descriptor needs the node's Ed25519 proof, which a fuzzed event lacks: read only
    let _ = fleetmesh_proto::identity::DescriptorContent::try_from(ev);
    if let Ok(a) = Assertion::from_event(ev) {
        let again = a.unsigned(ev.created_at).sign_with_aux(keypair(), &[0; 32]);
        assert_eq!(
            Assertion::from_event(&again).expect("an assertion signed back reads"),
            a
        );
    }
    if let Ok(m) = RelayMonitor::from_event(ev) {
        let again = m.unsigned(ev.created_at).sign_with_aux(keypair(), &[0; 32]);
        assert_eq!(
            RelayMonitor::from_event(&again).expect("a monitor event signed back reads"),
            m
        );
    }
}

/// An event's JSON text (`Event::from_json`, what `meshnode sync` and Blossom read).
pub fn event(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(ev) = Event::from_json(text) {
        check_event(&ev);
    }
    if let Ok(v) = serde_json::from_str::<Value>(text)
        && let Ok(ev) = Event::from_value(&v)
    {
        check_event(&ev);
    }
}

fn check_filter(f: &Filter) {
    let _ = (f.matches(sample_event()), f.matches_nothing());
}

/// One NIP-01 filter object (`Filter::from_value`).
pub fn filter(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if let Ok(f) = Filter::from_value(&v, FilterLimits::default()) {
        check_filter(&f);
    }
}

/// The items the harness's negentropy sessions reconcile against: six fixed
/// `(created_at, id)`s.
pub fn storage() -> NegentropyStorageVector {
    let mut s = NegentropyStorageVector::with_capacity(6);
    for i in 0..6u8 {
        s.insert(
            NOW - u64::from(i) * 1000,
            Id::from_byte_array([i.wrapping_mul(37); 32]),
        )
        .expect("distinct items");
    }
    s.seal().expect("sealing a new storage");
    s
}

/// A NEG-OPEN's or NEG-MSG's message as the relay (the responder) reconciles it.
fn neg_respond(msg: &[u8]) {
    let mut neg = Negentropy::owned(storage(), 60_000).expect("a sealed storage");
    if let Ok(reply) = neg.reconcile(msg) {
        // the session goes on: the same message again must not break it either
        let _ = neg.reconcile(&reply);
        let _ = neg.reconcile(msg);
    }
}

/// A client message as the relay face dispatches it (`["EVENT", …]`, `["REQ", …]`,
/// `["CLOSE", …]`, `["NEG-OPEN", …]`, `["NEG-MSG", …]`, `["NEG-CLOSE", …]`): the JSON,
/// then the parsers each type hands its parts to.
pub fn client_message(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The one-pass EVENT parser the face tries first must never accept what the general
    // path refuses, nor read an event differently.
    let fast = Event::from_event_message(text);
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        assert!(
            fast.is_none(),
            "the fast path took a message that is not JSON"
        );
        return;
    };
    let Some(arr) = value.as_array() else {
        assert!(
            fast.is_none(),
            "the fast path took a message that is not an array"
        );
        return;
    };
    match arr.first().and_then(Value::as_str) {
        Some("EVENT") => {
            let general = match arr.as_slice() {
                [_, raw] => Event::from_value(raw).ok(),
                _ => None,
            };
            if let Some(fast) = &fast {
                assert_eq!(
                    Some(fast),
                    general.as_ref(),
                    "the two EVENT parsers disagree"
                );
            }
            if let Some(ev) = general {
                check_event(&ev);
            }
        }
        Some("REQ") => {
            for f in arr.iter().skip(2) {
                if let Ok(f) = Filter::from_value(f, FilterLimits::default()) {
                    check_filter(&f);
                }
            }
        }
        Some("NEG-OPEN") => {
            if let Some(f) = arr.get(2)
                && let Ok(f) = Filter::from_value(f, FilterLimits::default())
            {
                check_filter(&f);
            }
            if let Some(Ok(msg)) = arr.get(3).and_then(Value::as_str).map(hex::decode) {
                neg_respond(&msg);
            }
        }
        Some("NEG-MSG") => {
            if let Some(Ok(msg)) = arr.get(2).and_then(Value::as_str).map(hex::decode) {
                neg_respond(&msg);
            }
        }
        _ => assert!(
            fast.is_none(),
            "the fast path took a message that is not an EVENT"
        ),
    }
}

/// A negentropy message's bytes (after the hex): the first byte picks the side — even,
/// the relay answering a client (NEG-OPEN/NEG-MSG); odd, `meshnode sync` reading a peer
/// relay's NEG-MSG after its own initial message.
pub fn negentropy(data: &[u8]) {
    let Some((&side, msg)) = data.split_first() else {
        return;
    };
    if side & 1 == 0 {
        neg_respond(msg);
        return;
    }
    let mut neg = Negentropy::owned(storage(), 60_000).expect("a sealed storage");
    neg.initiate().expect("the first message");
    let (mut have, mut need) = (Vec::new(), Vec::new());
    if let Ok(Some(next)) = neg.reconcile_with_ids(msg, &mut have, &mut need) {
        let _ = neg.reconcile_with_ids(&next, &mut have, &mut need);
    }
}

/// The conversation key the NIP-44 harness decrypts with.
const KEY: [u8; 32] = [0x2a; 32];

/// A NIP-44 v2 payload. The first byte picks what the rest is: even, the payload text
/// itself (every check up to the MAC); odd, the *padded plaintext*, sealed here with a
/// valid MAC so that decryption reaches the padding checks (what a peer holding the key
/// controls). Whatever decrypts must encrypt back to the same payload.
pub fn nip44(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        if let Ok(text) = std::str::from_utf8(rest)
            && let Ok(plain) = nip44::decrypt(&KEY, text)
        {
            check_plaintext(&plain);
        }
        return;
    }
    use base64::Engine as _;
    use chacha20::cipher::{KeyIvInit, StreamCipher};
    use hmac::Mac as _;
    let nonce = [mode; 32];
    let (key, iv, mac_key) = nip44::message_keys(&KEY, &nonce);
    let mut body = rest.to_vec();
    chacha20::ChaCha20::new(&key.into(), &iv.into()).apply_keystream(&mut body);
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&mac_key).expect("any key length");
    mac.update(&nonce);
    mac.update(&body);
    let mut raw = vec![2];
    raw.extend_from_slice(&nonce);
    raw.extend_from_slice(&body);
    raw.extend_from_slice(&mac.finalize().into_bytes());
    let payload = base64::engine::general_purpose::STANDARD.encode(raw);
    if let Ok(plain) = nip44::decrypt(&KEY, &payload) {
        // NIP-44 reads the length prefix and refuses a wrong total size, but does not
        // look at the padding bytes (the MAC covers them): the plaintext is the prefix's
        // length of bytes after it
        let short = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        let (n, at) = if short > 0 {
            (short, 2)
        } else {
            let long = u32::from_be_bytes([rest[2], rest[3], rest[4], rest[5]]) as usize;
            (long, 6)
        };
        assert_eq!(plain.as_slice(), &rest[at..at + n]);
        assert_eq!(rest.len(), at + nip44::padded_len(n));
        check_plaintext(&plain);
    }
}

fn check_plaintext(plain: &[u8]) {
    let sealed = nip44::encrypt_with_nonce(&KEY, plain, &[1; 32]).expect("encrypting");
    assert_eq!(nip44::decrypt(&KEY, &sealed).expect("decrypting"), plain);
}

/// The recipient of the gift-wrap harness: fixed, so a run replays.
fn recipient() -> &'static secp256k1::Keypair {
    static KEY: OnceLock<secp256k1::Keypair> = OnceLock::new();
    KEY.get_or_init(|| {
        secp256k1::Keypair::from_secret_bytes([9u8; 32]).expect("a valid secret key")
    })
}

/// `inner` encrypted by `from` to [`recipient`] and signed by `from` as kind `kind`
/// (deterministic nonces and signatures).
fn layer(from: &secp256k1::Keypair, kind: u16, tags: Vec<Vec<String>>, inner: &[u8]) -> Event {
    let to = hex::encode(recipient().x_only_public_key().0.to_byte_array());
    let key = nip44::conversation_key(&from.secret_key(), &to).expect("a curve point");
    UnsignedEvent {
        created_at: NOW,
        kind,
        tags,
        content: nip44::encrypt_with_nonce(&key, inner, &[3; 32]).expect("encrypting"),
    }
    .sign_with_aux(from, &[5; 32])
}

/// A NIP-59 gift wrap opened by [`recipient`]. The first byte picks what the rest is: 0,
/// the wrap event's JSON; 1, the seal's JSON, wrapped here validly; 2, the rumor's JSON,
/// sealed by [`keypair`] and wrapped; 3, a rumor's content, made into a rumor, sealed and
/// wrapped. What opens has the seal's signer as its sender, the rumor's author, and an id
/// that is its hash; a whole honest wrap (3) always opens to its content.
pub fn giftwrap(data: &[u8]) {
    use fleetmesh_proto::nip59;
    use fleetmesh_schemas::constants::kind;
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let one_time = secp256k1::Keypair::from_secret_bytes([11u8; 32]).expect("a valid key");
    let to = hex::encode(recipient().x_only_public_key().0.to_byte_array());
    let wrap_of = |seal: &[u8]| {
        layer(
            &one_time,
            kind::GIFT_WRAP,
            vec![vec!["p".into(), to.clone()]],
            seal,
        )
    };
    let sender = keypair().x_only_public_key().0.to_byte_array();
    let wrap = match mode % 4 {
        0 => match std::str::from_utf8(rest)
            .ok()
            .and_then(|t| Event::from_json(t).ok())
        {
            Some(e) => e,
            None => return,
        },
        // NIP-44 encrypts 1 byte and more
        1 | 2 if rest.is_empty() => return,
        1 => wrap_of(rest),
        2 => wrap_of(
            layer(keypair(), kind::SEAL, Vec::new(), rest)
                .to_json()
                .as_bytes(),
        ),
        _ => {
            let content = String::from_utf8_lossy(rest).into_owned();
            let rumor = nip59::Rumor::new(
                sender,
                UnsignedEvent {
                    created_at: NOW,
                    kind: 14,
                    tags: Vec::new(),
                    content: content.clone(),
                },
            );
            let seal = layer(
                keypair(),
                kind::SEAL,
                Vec::new(),
                rumor.to_value().to_string().as_bytes(),
            );
            let opened = nip59::unwrap(recipient(), &wrap_of(seal.to_json().as_bytes()))
                .expect("an honest wrap opens");
            assert_eq!(opened.rumor.content, content);
            assert_eq!(opened.sender, sender);
            return;
        }
    };
    if let Ok(opened) = nip59::unwrap(recipient(), &wrap) {
        assert_eq!(opened.sender, opened.seal.pubkey);
        assert_eq!(opened.rumor.pubkey, opened.sender);
        let again = nip59::Rumor::from_value(&opened.rumor.to_value()).expect("it parses back");
        assert_eq!(again, opened.rumor);
    }
}

/// DIDComm v2 (`fleetmesh_proto::didcomm`). The first byte picks: 0, the rest is a packed
/// message for [`didcomm_keys`]'s recipient, unpacked with the sender's document known;
/// 1, the rest is a body, packed every way from sender to recipient, which always opens
/// to it; 2, an honest authcrypt message with the byte at `rest[0..2]` changed by
/// `rest[2]`, which opens to the same message or not at all.
pub fn didcomm(data: &[u8]) {
    use fleetmesh_proto::didcomm::{self, Message, Pack, PeerDoc, SignWith};
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (sender, recipient) = didcomm_keys();
    let docs = vec![PeerDoc::of(sender)];
    let to = PeerDoc::of(recipient);
    let honest = |body: serde_json::Value, how: Pack| {
        let mut m = Message::new("https://fleetmesh.org/fuzz/1.0/m", body).expect("random");
        m.from = Some(sender.did());
        m.to = vec![recipient.did()];
        let packed = didcomm::pack_encrypted(&m, sender, &to, how).expect("packs");
        (m, packed.to_string().into_bytes())
    };
    match mode % 3 {
        0 => {
            if let Ok(u) = didcomm::unpack(rest, recipient, &docs, NOW)
                && u.meta.authenticated
            {
                assert_eq!(u.message.from.as_deref(), Some(sender.did().as_str()));
            }
        }
        1 => {
            let body = serde_json::Value::String(String::from_utf8_lossy(rest).into_owned());
            for how in [
                Pack::default(),
                Pack {
                    auth: false,
                    sign: Some(SignWith::Secp256k1),
                    ..Pack::default()
                },
            ] {
                let (m, packed) = honest(body.clone(), how);
                let u = didcomm::unpack(&packed, recipient, &docs, NOW)
                    .expect("an honest message opens");
                assert_eq!(u.message, m);
            }
        }
        _ => {
            let [hi, lo, change, ..] = rest else { return };
            let (m, mut packed) = honest(serde_json::json!({"n": 1}), Pack::default());
            let at = usize::from(u16::from_be_bytes([*hi, *lo])) % packed.len();
            packed[at] ^= change.max(&1);
            if let Ok(u) = didcomm::unpack(&packed, recipient, &docs, NOW) {
                assert_eq!(u.message, m, "a changed message opened to another");
            }
        }
    }
}

/// A DIDComm sender and recipient with fixed keys.
pub(crate) fn didcomm_keys() -> &'static (fleetmesh_proto::NodeKeys, fleetmesh_proto::NodeKeys) {
    static KEYS: OnceLock<(fleetmesh_proto::NodeKeys, fleetmesh_proto::NodeKeys)> = OnceLock::new();
    KEYS.get_or_init(|| {
        let k =
            |s: u8| fleetmesh_proto::NodeKeys::from_secret_bytes([s; 32], [s + 1; 32], [s + 2; 32]);
        (k(21).expect("a valid key"), k(31).expect("a valid key"))
    })
}

/// Hop envelopes (`fleetmesh_proto::hop`): the bytes as an envelope, checked as the node
/// [`recipient`]; what passes has a payload matching its digest and a path ending here.
pub fn hop(data: &[u8]) {
    use fleetmesh_proto::hop::Envelope;
    let Ok(env) = serde_json::from_slice::<Envelope>(data) else {
        return;
    };
    let me = hex::encode(recipient().x_only_public_key().0.to_byte_array());
    if let Ok((payload, origin)) = env.check(&me, NOW, 86_400) {
        use sha2::Digest as _;
        assert_eq!(hex::encode(sha2::Sha256::digest(&payload)), env.digest);
        assert_eq!(origin, env.hops[0].from);
        assert_eq!(env.hops.last().map(|h| h.to.as_str()), Some(me.as_str()));
    }
}

/// Peer-link frames (`fleetmesh_transport::frame`): the bytes as a stream of frames under a
/// 4 KiB cap; every frame read is written back and read again unchanged.
pub fn transport_frame(data: &[u8]) {
    use fleetmesh_transport::frame::{read_frame, write_frame};
    static RT: std::sync::LazyLock<tokio::runtime::Runtime> = std::sync::LazyLock::new(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
    });
    RT.block_on(async {
        let mut rest = data;
        while let Ok(Some(frame)) = read_frame(&mut rest, 4096).await {
            let mut buf = Vec::new();
            write_frame(&mut buf, &frame)
                .await
                .expect("writing to memory");
            let again = read_frame(&mut buf.as_slice(), 4096).await;
            assert_eq!(again, Ok(Some(frame)));
        }
    });
}

/// Gossip announcements (`fleetmesh_transport::gossip::judge`): the bytes as a message on
/// the announce topic; only a descriptor announced by its own key, or a fresh heartbeat,
/// of our digest is accepted.
pub fn transport_gossip(data: &[u8]) {
    use fleetmesh_transport::PeerId;
    use fleetmesh_transport::gossip::{Heard, judge};
    let via = PeerId::random();
    let digest = fleetmesh_schemas::SchemaSet::embedded().digest();
    let (_, heard) = judge(data, Some(&via), &via, &digest, NOW);
    if let Heard::Descriptor { content, .. } = &heard {
        assert_eq!(content.protocol_digest, digest.to_hex());
    }
    if let Heard::Heartbeat { heartbeat, event } = &heard {
        assert_eq!(heartbeat.protocol_digest, digest.to_hex());
        assert!(event.created_at.abs_diff(NOW) <= 300);
    }
}
