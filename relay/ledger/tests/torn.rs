//! A torn evidence log on real files: the log cut at every byte of its last line (a crash in
//! the middle of a write, a full disk), then the books opened again and a record appended.
//! The torn tail is moved aside into `evidence.torn-<time>`, never appended onto; the log
//! records the cut (`repaired`), and a replay takes every line, the new one included, and
//! names the cut.

use std::path::{Path, PathBuf};

use fleetmesh_ledger::Books;
use fleetmesh_ledger::evidence::{Counts, Line, replay};
use fleetmesh_proto::NodeKeys;
use fleetmesh_proto::ledger::{Aimd, Grant, pair_id};
use fleetmesh_proto::noun::Noun as _;

const T0: u64 = 1_800_000_000;
const W: u64 = 10;

fn measure(peer: &str, window: u64, events: u64) -> Line {
    Line::Measure {
        at: window * W + W + 2,
        peer: peer.to_owned(),
        window,
        window_secs: W,
        counts: Counts {
            events_in: events,
            bytes_in: events * 100,
            ..Counts::default()
        },
    }
}

/// A log of a few real lines made by the books: the node line, a grant, two measured
/// windows (each judged). Returns its bytes, the peer, the decisions taken.
fn a_log(us: &NodeKeys) -> (Vec<u8>, String, usize) {
    let peer = NodeKeys::generate().unwrap();
    let grant = Grant {
        events: 100,
        bytes: 100_000,
        window_secs: W,
        aimd: Aimd {
            initial: 100,
            min: 10,
            increase: 10,
        },
        shards: None,
        starts_at: None,
        pair: pair_id(&us.nostr().secret_key(), &peer.nostr_pubkey_hex()).unwrap(),
        expires_at: None,
    }
    .sign(us, T0)
    .unwrap()
    .to_value();
    let dir = tempfile::tempdir().unwrap();
    let (mut books, refused) = Books::open(dir.path(), &us.nostr_pubkey_hex(), T0).unwrap();
    assert!(refused.is_empty());
    let peer = peer.nostr_pubkey_hex();
    books
        .record(Line::Grant {
            at: T0,
            peer: peer.clone(),
            event: grant,
        })
        .unwrap();
    let w0 = T0 / W;
    let mut decided = 0;
    decided += books.record(measure(&peer, w0, 5)).unwrap().len();
    decided += books.record(measure(&peer, w0 + 1, 500)).unwrap().len();
    assert_eq!(decided, 2);
    drop(books);
    (
        std::fs::read(dir.path().join("evidence.jsonl")).unwrap(),
        peer,
        decided,
    )
}

/// Where the last line of `log` begins.
fn last_line(log: &[u8]) -> usize {
    log[..log.len() - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1)
}

fn torn_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(".torn-"))
        .collect()
}

/// Opens books in a new directory holding `log`, appends a third measured window, and
/// replays: every line taken, the new one too, the cut named.
fn reopen_append_replay(us: &NodeKeys, peer: &str, log: &[u8], whole: usize, decided: usize) {
    let cut = log.len();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evidence.jsonl");
    std::fs::write(&path, log).unwrap();
    let (mut books, refused) = Books::open(dir.path(), &us.nostr_pubkey_hex(), T0 + 99).unwrap();
    assert!(refused.is_empty(), "cut at {cut}: {refused:?}");
    let new = books.record(measure(peer, T0 / W + 2, 7)).unwrap();
    assert_eq!(new.len(), 1, "cut at {cut}: the new window is judged");
    drop(books);

    // the torn bytes are in the file beside the log, exactly
    let torn = torn_files(dir.path());
    assert_eq!(torn.len(), 1, "cut at {cut}");
    let name = torn[0].file_name().unwrap().to_str().unwrap().to_owned();
    assert_eq!(name, format!("evidence.torn-{}", T0 + 99));
    assert_eq!(std::fs::read(&torn[0]).unwrap(), &log[whole..]);
    // the log: its whole lines, then the `repaired` line, then the new record
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.as_bytes().starts_with(&log[..whole]), "cut at {cut}");
    let after: Vec<Line> = text[whole..]
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        after[0],
        Line::Repaired {
            at: T0 + 99,
            offset: whole as u64,
            bytes: (cut - whole) as u64,
            moved_to: name.clone(),
        }
    );
    assert_eq!(after.last().unwrap(), &measure(peer, T0 / W + 2, 7));

    let r = replay(&path).unwrap();
    assert!(r.refused.is_empty(), "cut at {cut}: {:?}", r.refused);
    // the decisions of the whole lines, and the new one's
    assert_eq!(r.decisions.len(), decided + 1, "cut at {cut}");
    assert_eq!(r.decisions.last(), new.last());
    assert_eq!(r.repairs.len(), 1, "cut at {cut}");
    let repair = &r.repairs[0];
    assert_eq!(
        (repair.offset, repair.bytes, repair.moved_to.as_str()),
        (whole as u64, (cut - whole) as u64, name.as_str())
    );
    assert_eq!(repair.line, log[..whole].split(|&b| b == b'\n').count());
    // opened again: nothing more is cut
    let (books, _) = Books::open(dir.path(), &us.nostr_pubkey_hex(), T0 + 100).unwrap();
    drop(books);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    assert_eq!(torn_files(dir.path()).len(), 1);
}

#[test]
fn a_log_cut_anywhere_in_its_last_line_is_repaired_and_goes_on() {
    let us = NodeKeys::generate().unwrap();
    let (log, peer, decided) = a_log(&us);
    let start = last_line(&log);
    assert!(log.len() - start > 100, "a real last line");
    // every cut that leaves part of the last line: its newline alone missing too
    for cut in start + 1..log.len() {
        reopen_append_replay(&us, &peer, &log[..cut], start, decided - 1);
    }
}

#[test]
fn a_log_cut_in_its_node_line_starts_over_after_the_cut() {
    let us = NodeKeys::generate().unwrap();
    let (log, _, _) = a_log(&us);
    let first = log.iter().position(|&b| b == b'\n').unwrap();
    for cut in [1, first / 2, first] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("evidence.jsonl");
        std::fs::write(&path, &log[..cut]).unwrap();
        let (books, refused) = Books::open(dir.path(), &us.nostr_pubkey_hex(), T0).unwrap();
        assert!(refused.is_empty());
        assert_eq!(books.ledger().us(), Some(us.nostr_pubkey_hex().as_str()));
        drop(books);
        let r = replay(&path).unwrap();
        assert!(r.refused.is_empty(), "cut at {cut}: {:?}", r.refused);
        assert_eq!((r.repairs[0].offset, r.repairs[0].bytes), (0, cut as u64));
        assert_eq!(r.ledger.us(), Some(us.nostr_pubkey_hex().as_str()));
    }
}

#[test]
fn a_record_written_onto_a_torn_line_is_moved_aside_with_it() {
    // what a node without this repair left: its next record appended onto the torn line
    let us = NodeKeys::generate().unwrap();
    let (log, peer, decided) = a_log(&us);
    let start = last_line(&log);
    let mut damaged = log[..start + 40].to_vec();
    damaged.extend_from_slice(
        serde_json::to_string(&measure(&peer, 1, 1))
            .unwrap()
            .as_bytes(),
    );
    damaged.push(b'\n');
    reopen_append_replay(&us, &peer, &damaged, start, decided - 1);
}

#[test]
fn a_whole_log_is_left_as_it_is() {
    let us = NodeKeys::generate().unwrap();
    let (log, _, decided) = a_log(&us);
    for log in [&log[..], &log[..last_line(&log)]] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("evidence.jsonl");
        std::fs::write(&path, log).unwrap();
        let (books, refused) = Books::open(dir.path(), &us.nostr_pubkey_hex(), T0).unwrap();
        assert!(refused.is_empty());
        drop(books);
        assert_eq!(std::fs::read(&path).unwrap(), log);
        assert!(torn_files(dir.path()).is_empty());
        let r = replay(&path).unwrap();
        assert!(r.refused.is_empty() && r.repairs.is_empty());
        assert!(r.decisions.len() <= decided);
    }
}
