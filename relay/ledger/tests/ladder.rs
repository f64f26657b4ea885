//! The ladder on real keys, real signed grants and receipts, and real log files: each row
//! of the S0–S4 table from its wire evidence, the AIMD arithmetic, bad input mapped to a
//! row or a refusal, and a replay of the log (also moved elsewhere) taking exactly the
//! decisions the books took live.

use fleetmesh_ledger::evidence::{Counts, Line, replay, replay_all, settlements};
use fleetmesh_ledger::settlement::{Role, State};
use fleetmesh_ledger::{Books, Decision, Settled, Settlement};
use fleetmesh_proto::ledger::{Aimd, BudgetReceipt, Grant, Moved, ZERO, pair_id};
use fleetmesh_proto::noun::Noun as _;
use fleetmesh_proto::{NodeKeys, Remedy, Rung};
use serde_json::Value;

const T0: u64 = 1_800_000_000;
const W: u64 = 10;

fn grant(from: &NodeKeys, to: &NodeKeys, events: u64, min: u64) -> Value {
    let g = Grant {
        events,
        bytes: events * 1000,
        window_secs: W,
        aimd: Aimd {
            initial: events,
            min,
            increase: events / 10,
        },
        shards: None,
        starts_at: None,
        pair: pair_id(&from.nostr().secret_key(), &to.nostr_pubkey_hex()).unwrap(),
        expires_at: None,
    };
    g.sign(from, T0).unwrap().to_value()
}

/// The chain a peer signs, receipt by receipt.
struct Chain<'k> {
    keys: &'k NodeKeys,
    next: u64,
    prev: String,
}

impl<'k> Chain<'k> {
    fn new(keys: &'k NodeKeys) -> Chain<'k> {
        Chain {
            keys,
            next: 0,
            prev: ZERO.into(),
        }
    }

    fn receipt(&mut self, window: u64, sent: (u64, u64)) -> BudgetReceipt {
        self.spending(window, sent, ZERO, None)
    }

    /// A receipt spending against grant `grant`, with what was sent per shard of it.
    fn spending(
        &mut self,
        window: u64,
        sent: (u64, u64),
        grant: &str,
        shards: Option<Vec<Moved>>,
    ) -> BudgetReceipt {
        let r = BudgetReceipt::new(
            self.keys.nostr_pubkey_hex(),
            grant.into(),
            window,
            W,
            self.next,
            self.prev.clone(),
            Moved {
                events: sent.0,
                bytes: sent.1,
            },
            Moved::default(),
            T0,
        )
        .with_shards(shards)
        .sign(self.keys)
        .unwrap();
        self.next += 1;
        self.prev = r.hash();
        r
    }
}

fn counts(events: u64, bytes: u64) -> Counts {
    Counts {
        events_in: events,
        bytes_in: bytes,
        ..Counts::default()
    }
}

/// Makes the next receipt of a chain a bad one (the third key at hand).
type Breaker<'a> = Box<dyn Fn(&mut Chain<'_>, &NodeKeys) -> BudgetReceipt + 'a>;

struct Node {
    books: Books,
    dir: tempfile::TempDir,
    peer: String,
    decided: Vec<Decision>,
}

impl Node {
    fn new(us: &NodeKeys, peer: &NodeKeys, events: u64, min: u64) -> Node {
        Node::granting(us, peer, grant(us, peer, events, min))
    }

    /// Books of `us` that grant `peer` the signed grant `event`.
    fn granting(us: &NodeKeys, peer: &NodeKeys, event: Value) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let (mut books, refused) = Books::open(dir.path(), &us.nostr_pubkey_hex(), T0).unwrap();
        assert!(refused.is_empty());
        let peer_hex = peer.nostr_pubkey_hex();
        let d = books
            .record(Line::Grant {
                at: T0,
                peer: peer_hex.clone(),
                event,
            })
            .unwrap();
        assert!(d.is_empty());
        Node {
            books,
            dir,
            peer: peer_hex,
            decided: Vec::new(),
        }
    }

    fn line(&mut self, line: Line) -> Vec<Decision> {
        let d = self.books.record(line).unwrap();
        self.decided.extend(d.clone());
        d
    }

    fn receipt(&mut self, r: &BudgetReceipt) -> Vec<Decision> {
        let receipt = serde_json::to_value(r).unwrap();
        self.line(Line::Receipt {
            at: T0,
            peer: self.peer.clone(),
            receipt,
        })
    }

    fn measure(&mut self, window: u64, c: Counts) -> Decision {
        let at = window * W + W + 2;
        let mut d = self.line(Line::Measure {
            at,
            peer: self.peer.clone(),
            window,
            window_secs: W,
            counts: c,
        });
        assert_eq!(d.len(), 1, "{d:?}");
        d.pop().unwrap()
    }

    /// A replay of the log, and of a copy moved to another directory, takes exactly what
    /// was taken live; so do the books' own records.
    /// The NIP-85 assertion about the peer at `now`, signed and read back under its schema.
    fn assertion(&self, now: u64) -> Option<fleetmesh_proto::projection::Assertion> {
        let s = self.books.ledger().standing(&self.peer)?;
        let a = fleetmesh_ledger::projection::assertion(&self.peer, s, &self.decided, now)?;
        let e = a.sign(&NodeKeys::generate().unwrap(), now).unwrap();
        let back = fleetmesh_proto::projection::Assertion::from_event(&e).unwrap();
        assert_eq!(back, a);
        assert_eq!(back.subject, format!("did:nostr:{}", self.peer));
        Some(back)
    }

    fn replays_the_same(&self) {
        let log = self.dir.path().join("evidence.jsonl");
        let r = replay(&log).unwrap();
        assert!(r.refused.is_empty(), "{:?}", r.refused);
        assert_eq!(r.decisions, self.decided);
        let elsewhere = tempfile::tempdir().unwrap();
        let moved = elsewhere.path().join("copy.jsonl");
        std::fs::copy(&log, &moved).unwrap();
        assert_eq!(replay(&moved).unwrap().decisions, self.decided);
        assert_eq!(self.books.decisions(None).unwrap(), self.decided);
    }
}

#[test]
fn a_flood_is_halved_along_the_schedule_then_suspended_at_the_floor_and_clean_windows_grow_it() {
    let (a, b) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
    let mut n = Node::new(&a, &b, 100, 25);
    let mut chain = Chain::new(&b);
    let w0 = T0 / W;
    // Within 110 %: clean, the capacity stays at the ceiling.
    n.receipt(&chain.receipt(w0, (110, 50_000)));
    let d = n.measure(w0, counts(110, 50_000));
    assert_eq!(
        (d.severity, d.remedy, d.capacity),
        (Rung::S0, Remedy::Increase, 100)
    );
    assert_eq!(d.evidence.len(), 3, "measure, grant, receipt");
    // Over, reported accurately: halved, down to the floor.
    for (w, cap) in [(w0 + 1, 50), (w0 + 2, 25)] {
        n.receipt(&chain.receipt(w, (300, 90_000)));
        let d = n.measure(w, counts(300, 90_000));
        assert_eq!(
            (d.severity, d.remedy, d.capacity),
            (Rung::S1, Remedy::Halve, cap)
        );
    }
    // Bytes count too: 25 events allow 25 000 bytes.
    n.receipt(&chain.receipt(w0 + 3, (20, 20_000)));
    let d = n.measure(w0 + 3, counts(20, 20_000));
    assert_eq!((d.severity, d.capacity), (Rung::S0, 35), "increase by 10");
    n.receipt(&chain.receipt(w0 + 4, (20, 60_000)));
    assert_eq!(n.measure(w0 + 4, counts(20, 60_000)).severity, Rung::S1);
    // Over again at the floor: persistent, suspended 24 h; windows inside it are not judged.
    n.receipt(&chain.receipt(w0 + 5, (300, 90_000)));
    let d = n.measure(w0 + 5, counts(300, 90_000));
    assert_eq!((d.severity, d.remedy), (Rung::S3, Remedy::Suspend));
    let s = n.books.ledger().standing(&n.peer).unwrap().clone();
    assert_eq!(s.suspended_until, Some(d.at + 86_400));
    let quiet = n.line(Line::Measure {
        at: d.at + 10,
        peer: n.peer.clone(),
        window: w0 + 6,
        window_secs: W,
        counts: counts(0, 0),
    });
    assert!(quiet.is_empty());
    // Its NIP-85 projection: 2 clean of 6 judged, 3 complaints; 10 at most while suspended.
    let until = s.suspended_until.unwrap();
    let a = n.assertion(until - 1).unwrap();
    assert_eq!(
        (a.rank, a.rung, a.complaints),
        (Some(10), Some(Rung::S3), Some(3))
    );
    assert_eq!(n.assertion(until).unwrap().rank, Some(33));
    n.replays_the_same();
}

#[test]
fn a_receipt_that_diverges_from_the_measurement_puts_the_peer_on_probation() {
    let (a, b) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
    let mut n = Node::new(&a, &b, 1000, 100);
    let mut chain = Chain::new(&b);
    let w0 = T0 / W;
    // Off by a few events (a window boundary between the two counts): not a lie.
    n.receipt(&chain.receipt(w0, (500, 200_000)));
    assert_eq!(n.measure(w0, counts(510, 203_000)).severity, Rung::S0);
    // Claims half of what it sent.
    n.receipt(&chain.receipt(w0 + 1, (250, 100_000)));
    let d = n.measure(w0 + 1, counts(500, 200_000));
    assert_eq!((d.severity, d.remedy), (Rung::S2, Remedy::Probation));
    assert!(d.why.contains("250"), "{}", d.why);
    assert!(n.books.ledger().standing(&n.peer).unwrap().probation);
    let a = n.assertion(T0).unwrap();
    assert_eq!(
        (a.rank, a.rung),
        (Some(40), Some(Rung::S2)),
        "50 % clean, capped"
    );
    assert!(
        fleetmesh_ledger::projection::assertion("ab", &Default::default(), &n.decided, T0)
            .is_none(),
        "nothing said about a peer never judged"
    );
    n.replays_the_same();
}

#[test]
fn a_few_large_events_across_a_window_boundary_are_slack_and_bytes_claimed_short_are_not() {
    let (a, b) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
    let mut n = Node::new(&a, &b, 1000, 100);
    let mut chain = Chain::new(&b);
    let w0 = T0 / W;
    // Two ~10 KB events more on our side: 20 KB, over a tenth of the window's bytes and
    // over the least byte slack, but a boundary between the counts, not a lie.
    n.receipt(&chain.receipt(w0, (5, 52_000)));
    let d = n.measure(w0, counts(7, 72_000));
    assert_eq!(d.severity, Rung::S0, "{}", d.why);
    // A claim of a few huge events does not widen the slack: our count sets it.
    n.receipt(&chain.receipt(w0 + 1, (7, 5_000_000)));
    let d = n.measure(w0 + 1, counts(7, 72_000));
    assert_eq!(
        (d.severity, d.remedy),
        (Rung::S2, Remedy::Probation),
        "{}",
        d.why
    );
    // Large events whose count agrees and whose bytes are claimed at half: a lie.
    n.receipt(&chain.receipt(w0 + 2, (100, 500_000)));
    let d = n.measure(w0 + 2, counts(100, 1_000_000));
    assert_eq!(d.severity, Rung::S2, "{}", d.why);
    assert!(d.why.contains("500000"), "{}", d.why);
    n.replays_the_same();
}

#[test]
fn receipts_count_per_shard_of_the_grant_and_a_shard_that_diverges_is_a_misreport() {
    let (a, b) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
    let g = Grant {
        events: 1000,
        bytes: 1_000_000,
        window_secs: W,
        aimd: Aimd {
            initial: 1000,
            min: 100,
            increase: 0,
        },
        shards: Some(vec![
            serde_json::json!({"kinds": [1]}),
            serde_json::json!({"kinds": [7]}),
        ]),
        starts_at: None,
        pair: pair_id(&a.nostr().secret_key(), &b.nostr_pubkey_hex()).unwrap(),
        expires_at: None,
    };
    let event = g.sign(&a, T0).unwrap();
    let gid = event.id_hex();
    let mut n = Node::granting(&a, &b, event.to_value());
    let mut chain = Chain::new(&b);
    let w0 = T0 / W;
    let m = |e: u64, b: u64| Moved {
        events: e,
        bytes: b,
    };
    let sharded = |total: (u64, u64), shards: Vec<Moved>| Counts {
        shards,
        ..counts(total.0, total.1)
    };
    // The shards agree (within a window boundary's slack): clean.
    let theirs = vec![m(300, 30_000), m(200, 20_000)];
    n.receipt(&chain.spending(w0, (500, 50_000), &gid, Some(theirs)));
    let ours = vec![m(305, 30_500), m(200, 20_000)];
    let d = n.measure(w0, sharded((505, 50_500), ours));
    assert_eq!(d.severity, Rung::S0, "{}", d.why);
    // Totals agree, the split does not: 400 + 100 claimed, 200 + 300 measured.
    let theirs = vec![m(400, 40_000), m(100, 10_000)];
    n.receipt(&chain.spending(w0 + 1, (500, 50_000), &gid, Some(theirs)));
    let ours = vec![m(200, 20_000), m(300, 30_000)];
    let d = n.measure(w0 + 1, sharded((500, 50_000), ours.clone()));
    assert_eq!((d.severity, d.remedy), (Rung::S2, Remedy::Probation));
    assert!(d.why.contains("shard 0"), "{}", d.why);
    // A receipt for our grant that counts no shards of it: a misreport too.
    n.receipt(&chain.spending(w0 + 2, (500, 50_000), &gid, None));
    let d = n.measure(w0 + 2, sharded((500, 50_000), ours.clone()));
    assert_eq!(d.severity, Rung::S2);
    assert!(d.why.contains("counts 0 shards"), "{}", d.why);
    // One spending against no grant it knows (ours had not reached it): totals only.
    n.receipt(&chain.spending(w0 + 3, (500, 50_000), ZERO, None));
    assert_eq!(
        n.measure(w0 + 3, sharded((500, 50_000), ours)).severity,
        Rung::S0
    );
    // The shards are on the wire and in the log as the schema says.
    let r = chain.spending(w0 + 4, (1, 100), &gid, Some(vec![m(1, 100), m(0, 0)]));
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["shards"][0]["events"], 1);
    assert_eq!(BudgetReceipt::from_value(&v).unwrap(), r);
    assert!(r.verify());
    n.replays_the_same();
}

#[test]
fn a_rotated_log_replays_alone_from_its_checkpoint_and_as_one_log_with_the_kept_segments() {
    let (a, b) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
    let mut n = Node::new(&a, &b, 100, 25);
    let mut chain = Chain::new(&b);
    let w0 = T0 / W;
    n.receipt(&chain.receipt(w0, (50, 5_000)));
    assert_eq!(n.measure(w0, counts(50, 5_000)).severity, Rung::S0);
    n.receipt(&chain.receipt(w0 + 1, (300, 9_000)));
    assert_eq!(n.measure(w0 + 1, counts(300, 9_000)).capacity, 50);
    // a receipt waits for its window's measurement across the rotation
    n.receipt(&chain.receipt(w0 + 2, (300, 9_000)));
    let before = n.decided.len();
    assert!(
        n.books.rotate(T0 + 30, u64::MAX, 0).unwrap().is_none(),
        "small enough"
    );
    let kept = n.books.rotate(T0 + 30, 0, 0).unwrap().expect("rotated");
    assert!(n.books.log_len() > 0);
    let d = n.measure(w0 + 2, counts(300, 9_000));
    assert_eq!((d.severity, d.capacity), (Rung::S1, 25));
    assert_eq!(
        d.evidence.len(),
        3,
        "the receipt from before the rotation still counts"
    );
    n.receipt(&chain.receipt(w0 + 3, (10, 1_000)));
    assert_eq!(n.measure(w0 + 3, counts(10, 1_000)).capacity, 35);
    // the new segment alone: the decisions since the rotation, and the same standing
    let seg = n.dir.path().join("evidence.jsonl");
    let alone = replay(&seg).unwrap();
    assert!(alone.refused.is_empty(), "{:?}", alone.refused);
    assert_eq!(alone.decisions, n.decided[before..]);
    assert_eq!(alone.decided_before(), before);
    assert_eq!(alone.ledger.standings(), n.books.ledger().standings());
    // the kept segment, then the new one: every decision, the checkpoint matching
    let all = replay_all(&[&kept, &seg]).unwrap();
    assert!(all.refused.is_empty(), "{:?}", all.refused);
    assert_eq!(all.decisions, n.decided);
    assert_eq!(
        fleetmesh_ledger::store::segments(n.dir.path()).unwrap(),
        vec![kept.clone(), seg.clone()]
    );
    // reopened books (once the first are closed) hold the standing and store no decision
    // twice
    let standings = n.books.ledger().standings();
    let elsewhere = tempfile::tempdir().unwrap();
    let (stand_in, _) = Books::open(elsewhere.path(), &a.nostr_pubkey_hex(), T0).unwrap();
    drop(std::mem::replace(&mut n.books, stand_in));
    let (books, refused) = Books::open(n.dir.path(), &a.nostr_pubkey_hex(), T0 + 99).unwrap();
    assert!(refused.is_empty());
    assert_eq!(books.decisions(None).unwrap(), n.decided);
    assert_eq!(books.ledger().standings(), standings);
    n.books = books;
    // a checkpoint that is not the fold of the segment before it is refused, by line
    let text = std::fs::read_to_string(&seg).unwrap();
    let forged = text.replacen("\"capacity\":50", "\"capacity\":100", 1);
    assert_ne!(forged, text);
    let moved = n.dir.path().join("forged.jsonl");
    std::fs::write(&moved, forged).unwrap();
    let r = replay_all(&[&kept, &moved]).unwrap();
    assert!(
        r.refused.iter().any(|x| x.reason.contains("not the fold")),
        "{:?}",
        r.refused
    );
    // older segments beyond those kept are removed
    std::fs::remove_file(&moved).unwrap();
    n.receipt(&chain.receipt(w0 + 4, (10, 1_000)));
    let newer = n.books.rotate(T0 + 60, 0, 1).unwrap().unwrap();
    assert_eq!(
        fleetmesh_ledger::store::segments(n.dir.path()).unwrap(),
        vec![newer.clone(), seg.clone()]
    );
    assert!(!kept.exists());
    assert_eq!(n.measure(w0 + 4, counts(10, 1_000)).severity, Rung::S0);
    let r = replay_all(&[&newer, &seg]).unwrap();
    assert_eq!(r.decisions, n.decided[before..]);
    // a second rotation in the same second is named after the first, so names keep order
    let again = n.books.rotate(T0 + 60, 0, 0).unwrap().unwrap();
    assert!(again > newer, "{again:?} after {newer:?}");
    let r = replay_all(&[&newer, &again, &seg]).unwrap();
    assert!(r.refused.is_empty(), "{:?}", r.refused);
    assert_eq!(r.decisions, n.decided[before..]);
}

#[test]
fn forks_gaps_broken_links_forged_signatures_and_foreign_signers_revoke() {
    let w0 = T0 / W;
    let cases: Vec<(&str, Breaker<'_>)> = vec![
        (
            "fork",
            Box::new(|c: &mut Chain<'_>, _: &NodeKeys| {
                c.next -= 1;
                let mut r = c.receipt(w0 + 1, (7, 700));
                r.sent.events = 8;
                r.sign(c.keys).unwrap()
            }),
        ),
        (
            "gap",
            Box::new(|c: &mut Chain<'_>, _: &NodeKeys| {
                c.next += 1;
                c.receipt(w0 + 1, (1, 100))
            }),
        ),
        (
            "does not link",
            Box::new(|c: &mut Chain<'_>, _: &NodeKeys| {
                c.prev = "ab".repeat(32);
                c.receipt(w0 + 1, (1, 100))
            }),
        ),
        (
            "signature",
            Box::new(|c: &mut Chain<'_>, _: &NodeKeys| {
                let mut r = c.receipt(w0 + 1, (1, 100));
                r.sent.events = 0;
                r
            }),
        ),
        (
            "signed for",
            Box::new(|c: &mut Chain<'_>, other: &NodeKeys| {
                let mut third = Chain::new(other);
                third.next = c.next;
                third.prev = c.prev.clone();
                third.receipt(w0 + 1, (1, 100))
            }),
        ),
    ];
    for (what, bad) in cases {
        let (a, b, c) = (
            NodeKeys::generate().unwrap(),
            NodeKeys::generate().unwrap(),
            NodeKeys::generate().unwrap(),
        );
        let mut n = Node::new(&a, &b, 100, 10);
        let mut chain = Chain::new(&b);
        assert!(n.receipt(&chain.receipt(w0, (5, 500))).is_empty());
        let r = bad(&mut chain, &c);
        let d = n.receipt(&r);
        assert_eq!(d.len(), 1, "{what}");
        assert_eq!(
            (d[0].severity, d[0].remedy),
            (Rung::S4, Remedy::Revoke),
            "{what}"
        );
        assert!(d[0].why.contains(what), "{what}: {}", d[0].why);
        let s = n.books.ledger().standing(&n.peer).unwrap();
        assert!(
            s.revoked && s.grant_out.is_none() && s.capacity == 0,
            "{what}"
        );
        // Nothing more is judged of a revoked peer.
        assert!(n.receipt(&chain.receipt(w0 + 2, (1, 1))).is_empty());
        n.replays_the_same();
    }
}

#[test]
fn forged_events_revoke_out_of_filter_and_malformed_suspend_and_bad_lines_are_refused() {
    let (a, b) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
    let w0 = T0 / W;
    let mut n = Node::new(&a, &b, 100, 10);
    let c = Counts {
        out_of_filter: 2,
        ..counts(5, 500)
    };
    assert_eq!(n.measure(w0, c).severity, Rung::S3);
    let mut n = Node::new(&a, &b, 100, 10);
    let c = Counts {
        forged: 1,
        ..counts(5, 500)
    };
    assert_eq!(n.measure(w0, c).remedy, Remedy::Revoke);
    // The same receipt twice is a retry, not a fork.
    let mut n = Node::new(&a, &b, 100, 10);
    let r = Chain::new(&b).receipt(w0, (5, 500));
    assert!(n.receipt(&r).is_empty());
    assert!(n.receipt(&r).is_empty());
    assert_eq!(n.measure(w0, counts(5, 500)).severity, Rung::S0);
    // A malformed receipt is S3; a grant signed by a third key says nothing of the pair;
    // the peer's grant with a broken signature is S4.
    let mut n = Node::new(&a, &b, 100, 10);
    let d = n.line(Line::Receipt {
        at: T0,
        peer: n.peer.clone(),
        receipt: serde_json::json!({"protocol": "budget/1.0", "type": "receipt"}),
    });
    assert_eq!(d[0].severity, Rung::S3);
    let third = NodeKeys::generate().unwrap();
    let foreign = grant(&third, &a, 5, 1);
    assert!(
        n.line(Line::Grant {
            at: T0,
            peer: n.peer.clone(),
            event: foreign
        })
        .is_empty()
    );
    let mut theirs = grant(&b, &a, 50, 5);
    theirs["content"] = Value::String(theirs["content"].as_str().unwrap().replace("50", "99"));
    let d = n.line(Line::Grant {
        at: T0,
        peer: n.peer.clone(),
        event: theirs,
    });
    assert_eq!(d[0].severity, Rung::S4);
    n.replays_the_same();
    // Lines that do not parse are listed with their number, and the rest still replays.
    let log = n.dir.path().join("evidence.jsonl");
    let mut text = std::fs::read_to_string(&log).unwrap();
    text.push_str("{not json\n{\"type\":\"measure\"}\n\u{0}\n");
    std::fs::write(&log, text).unwrap();
    let r = replay(&log).unwrap();
    assert_eq!(r.decisions, n.decided);
    assert_eq!(r.refused.len(), 3, "{:?}", r.refused);
    // One writer: the books are refused while they are open (a second process, a node
    // already running on the directory).
    let err = Books::open(n.dir.path(), &a.nostr_pubkey_hex(), T0).unwrap_err();
    assert!(
        matches!(err, fleetmesh_ledger::LedgerError::Busy { .. }),
        "{err}"
    );
    let Node { books, dir, .. } = n;
    drop(books);
    // A log is one node's: the books refuse another's.
    let other = NodeKeys::generate().unwrap();
    let err = Books::open(dir.path(), &other.nostr_pubkey_hex(), T0).unwrap_err();
    assert!(err.to_string().contains("evidence log"), "{err}");
}

fn paid(role: Role, state: State, sats: u64, job: Option<&str>) -> Settlement {
    Settlement {
        role,
        state,
        method: "cashu".into(),
        at: "http://127.0.0.1:3338".into(),
        amount_sat: sats,
        job: job.map(str::to_owned),
        receipt: job.map(|j| format!("receipt of {j}")),
    }
}

#[test]
fn payments_are_summed_per_peer_never_judged_listed_with_their_jobs_and_kept_across_a_rotation() {
    let (a, b) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
    let mut n = Node::new(&a, &b, 100, 10);
    let peer = n.peer.clone();
    let settle = |n: &mut Node, s: Settlement| {
        n.line(Line::Settled {
            at: T0,
            peer: peer.clone(),
            settlement: s,
        })
    };
    let lines = [
        paid(Role::Payee, State::Redeemed, 5, Some("j1")),
        paid(Role::Payee, State::Released, 7, Some("j2")),
        paid(Role::Payee, State::Unredeemed, 3, Some("j3")),
        paid(Role::Payer, State::Escrowed, 11, Some("j4")),
        paid(Role::Payer, State::Refunded, 11, None),
    ];
    for s in lines.clone() {
        assert!(settle(&mut n, s).is_empty(), "payments are not judged");
    }
    // the same payment recorded again (a retry after a crash) counts once
    settle(&mut n, lines[0].clone());
    let want = Settled {
        jobs: 4,
        received_sat: 5,
        unredeemed_sat: 3,
        released_sat: 7,
        paid_sat: 11,
        refunded_sat: 11,
    };
    let standing = n.books.ledger().standing(&peer).unwrap().clone();
    assert_eq!(standing.settled, want);
    // the books' file holds the standing each line touched, for queries
    let conn = fleetmesh_relay::store::sqlite::open(
        &n.dir.path().join("ledger.sqlite"),
        fleetmesh_relay::store::sqlite::Mode::Existing,
        false,
    )
    .unwrap();
    let stored: String = conn
        .query_row("SELECT json FROM standing WHERE peer = ?1", [&peer], |r| {
            r.get(0)
        })
        .unwrap();
    let stored: fleetmesh_ledger::Standing = serde_json::from_str(&stored).unwrap();
    assert_eq!(stored, standing);
    assert_eq!((standing.severity, standing.capacity), (None, 100));
    // a state that does not fit the side is refused, nothing added
    let log = n.dir.path().join("evidence.jsonl");
    for s in [
        paid(Role::Payer, State::Redeemed, 1, Some("x")),
        paid(Role::Payee, State::Escrowed, 1, Some("x")),
        paid(Role::Payee, State::Refunded, 1, None),
    ] {
        settle(&mut n, s);
    }
    assert_eq!(n.books.ledger().standing(&peer).unwrap().settled, want);
    let r = replay(&log).unwrap();
    assert_eq!(r.refused.len(), 3, "{:?}", r.refused);
    assert!(r.refused[0].reason.contains("cannot be"), "{:?}", r.refused);
    assert_eq!(r.ledger.standing(&peer).unwrap().settled, want);
    // listed with their ids, in order: the job each names and its receipt
    let listed = settlements(&[&log]).unwrap();
    assert_eq!(listed.len(), 9);
    assert_eq!(listed[5].settlement, lines[0]);
    assert_eq!(
        listed[..5]
            .iter()
            .map(|l| l.settlement.clone())
            .collect::<Vec<_>>(),
        lines
    );
    assert!(listed.iter().all(|l| l.peer == peer && l.id.len() == 64));
    let j1 = serde_json::to_value(&listed[0]).unwrap();
    assert_eq!(
        (&j1["job"], &j1["receipt"], &j1["state"], &j1["role"]),
        (
            &serde_json::json!("j1"),
            &serde_json::json!("receipt of j1"),
            &serde_json::json!("redeemed"),
            &serde_json::json!("payee")
        )
    );
    // a peer without payments has none in its standing, also as JSON
    let quiet = NodeKeys::generate().unwrap().nostr_pubkey_hex();
    n.line(Line::Revoke {
        at: T0,
        peer: quiet.clone(),
    });
    let s = n.books.ledger().standing(&quiet).unwrap();
    assert!(s.settled.is_empty());
    assert!(serde_json::to_value(s).unwrap().get("settled").is_none());
    // a rotation's checkpoint carries the sums: the new segment alone says the same
    n.books.rotate(T0 + 10, 0, 0).unwrap().unwrap();
    let r = replay(&log).unwrap();
    assert!(r.refused.is_empty(), "{:?}", r.refused);
    assert_eq!(r.ledger.standing(&peer).unwrap().settled, want);
    assert!(settlements(&[&log]).unwrap().is_empty());
    settle(&mut n, paid(Role::Payee, State::Redeemed, 2, Some("j5")));
    settle(&mut n, lines[0].clone());
    let r = replay(&log).unwrap();
    assert_eq!(r.ledger.standing(&peer).unwrap().settled.received_sat, 7);
    assert_eq!(r.ledger.standing(&peer).unwrap().settled.jobs, 5);
}

#[test]
fn books_reopened_hold_the_standing_and_catch_up_decisions_the_file_missed() {
    let (a, b) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
    let w0 = T0 / W;
    let mut n = Node::new(&a, &b, 100, 10);
    n.measure(w0, counts(500, 1000));
    let dir = n.dir.path().to_owned();
    let (before, peer) = (n.books.ledger().standing(&n.peer).cloned(), n.peer.clone());
    let Node {
        books, dir: keep, ..
    } = n;
    drop(books);
    // The file lost its last decision (a crash between the log and the file).
    drop_last_decision(&dir);
    let (books, _) = Books::open(&dir, &a.nostr_pubkey_hex(), T0).unwrap();
    assert_eq!(books.ledger().standing(&peer).cloned(), before);
    assert_eq!(books.decisions(None).unwrap().len(), 1);
    assert_eq!(books.ledger().standing(&peer).unwrap().capacity, 50);
    drop(keep);
}

/// Deletes the last decision from the books' SQLite file, as a crash before its write.
fn drop_last_decision(dir: &std::path::Path) {
    let db = dir.join("ledger.sqlite");
    let conn = fleetmesh_relay::store::sqlite::open(
        &db,
        fleetmesh_relay::store::sqlite::Mode::Existing,
        false,
    )
    .unwrap();
    conn.execute(
        "DELETE FROM decisions WHERE n = (SELECT max(n) FROM decisions)",
        [],
    )
    .unwrap();
}
