//! `giftwrap`: NIP-59 gift wraps made and opened, fleetmesh-proto against the `nostr`
//! crate (rust-nostr), each opening its own: a wrap is two NIP-44 encryptions, two BIP-340
//! signatures and a one-time key; an opening is two decryptions and two signature checks.

use fleetmesh_bench::{compare, report};
use fleetmesh_proto::{Event, NodeKeys, UnsignedEvent, nip59};
use fleetmesh_schemas::constants::kind;

/// The benchmark's message `i`: a compute/1.0-like JSON of about 300 bytes.
fn text(i: usize) -> String {
    format!(
        "{{\"protocol\":\"compute/1.0\",\"type\":\"job\",\"n\":{i}}}{}",
        "x".repeat(240)
    )
}

/// Ours: message `i` from `sender` to `to`.
fn ours(sender: &NodeKeys, to: &str, i: usize) -> Event {
    let message = UnsignedEvent {
        created_at: 1_767_225_600,
        kind: 14,
        tags: Vec::new(),
        content: text(i),
    };
    nip59::wrap(sender.nostr(), to, message, kind::GIFT_WRAP, 1_767_225_600).unwrap()
}

/// rust-nostr's: messages `0..n` from `sender` to `to`.
fn theirs(
    rt: &tokio::runtime::Runtime,
    sender: &nostr::Keys,
    to: &nostr::PublicKey,
    n: usize,
) -> Vec<nostr::Event> {
    rt.block_on(async {
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let rumor = nostr::EventBuilder::new(nostr::Kind::Custom(14), text(i))
                .build(sender.public_key());
            out.push(
                nostr::EventBuilder::gift_wrap(sender, to, rumor, [])
                    .await
                    .unwrap(),
            );
        }
        out
    })
}

/// Runs the gift-wrap benchmark over `n` messages.
pub fn run(n: usize) {
    let (sender, recipient) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
    let their_sender = nostr::Keys::parse(&hex::encode(sender.nostr().to_secret_bytes())).unwrap();
    let their_recipient =
        nostr::Keys::parse(&hex::encode(recipient.nostr().to_secret_bytes())).unwrap();
    let to = recipient.nostr_pubkey_hex();
    let their_to = their_recipient.public_key();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    println!(
        "giftwrap: {n} messages of {} bytes, kind 1059",
        text(0).len()
    );
    let ops = n as u64;
    let c = compare(
        7,
        ops,
        || (0..n).map(|i| ours(&sender, &to, i).created_at).sum(),
        || {
            theirs(&rt, &their_sender, &their_to, n)
                .iter()
                .map(|w| w.created_at.as_secs())
                .sum()
        },
    );
    report("wrap (rumor, seal, wrap)", "rust-nostr", &c);

    let our_wraps: Vec<Event> = (0..n).map(|i| ours(&sender, &to, i)).collect();
    let their_wraps = theirs(&rt, &their_sender, &their_to, n);
    // `verify_wrap`: check the wrap's own signature too (nip59::unwrap)
    let ours_open = |verify_wrap: bool| -> u64 {
        our_wraps
            .iter()
            .map(|w| {
                let opened = if verify_wrap {
                    nip59::unwrap(recipient.nostr(), w)
                } else {
                    nip59::unwrap_verified(recipient.nostr(), w)
                };
                opened.unwrap().rumor.content.len() as u64
            })
            .sum()
    };
    let theirs_open = || -> u64 {
        rt.block_on(async {
            let mut sum = 0;
            for w in &their_wraps {
                let u = nostr::nips::nip59::extract_rumor(&their_recipient, w)
                    .await
                    .unwrap();
                sum += u.rumor.content.len() as u64;
            }
            sum
        })
    };
    let c = compare(7, ops, || ours_open(true), &theirs_open);
    report("unwrap (every layer checked)", "rust-nostr", &c);
    // as the mailbox opens them: the wrap's signature checked once already (by the relay or
    // the subscription), as `extract_rumor` never checks it
    let c = compare(7, ops, || ours_open(false), &theirs_open);
    report("unwrap, wrap signature checked before", "rust-nostr", &c);
}
