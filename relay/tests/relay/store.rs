//! The store's NIP-01 semantics — replaceable and addressable versions, NIP-09 deletion,
//! NIP-40 expiration, every filter field — run against each `EventStore`: a real SQLite
//! file and the in-memory store; then what only the SQLite store has (its tag index,
//! migrations, damaged files, the writer's checkpoints).

use fleetmesh_proto::NodeKeys;
use fleetmesh_proto::filter::{Filter, FilterLimits};
use fleetmesh_relay::store::{EventStore, InsertOutcome, MemoryStore, Store};
use serde_json::json;

fn store() -> (tempfile::TempDir, Store) {
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::create(&tmp.path().join("s.db")).unwrap();
    (tmp, s)
}

use super::signed as ev;

/// Runs `body` on a new SQLite store and on a new in-memory store.
fn each_store(body: impl Fn(&mut dyn EventStore)) {
    let (_t, mut sqlite) = store();
    body(&mut sqlite);
    body(&mut MemoryStore::new());
}

fn ids(s: &dyn EventStore, filter: serde_json::Value) -> Vec<[u8; 32]> {
    let f = Filter::from_value(&filter, FilterLimits::default()).unwrap();
    s.query(&[f], 500, 1_000_000)
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect()
}

#[test]
fn negentropy_items_name_each_event_once_across_filters_and_stop_past_the_maximum() {
    each_store(|s| {
        let k = NodeKeys::generate().unwrap();
        let events: Vec<_> = (0..5).map(|i| ev(&k, 1, 100 + i, &[], "x")).collect();
        for e in &events {
            assert_eq!(s.insert_event(e).unwrap(), InsertOutcome::Stored);
        }
        let filter =
            |v: serde_json::Value| Filter::from_value(&v, FilterLimits::default()).unwrap();
        // two overlapping filters and one that matches nothing: each event once
        let filters = [
            filter(json!({"kinds": [1]})),
            filter(json!({"authors": [k.nostr_pubkey_hex()]})),
            filter(json!({"kinds": [1], "limit": 0})),
        ];
        let mut items = s.negentropy_items(&filters, 5, 1_000_000).unwrap().unwrap();
        items.sort();
        let mut want: Vec<_> = events.iter().map(|e| (e.created_at, e.id)).collect();
        want.sort();
        assert_eq!(items, want);
        // one more than the maximum: none
        assert_eq!(s.negentropy_items(&filters, 4, 1_000_000).unwrap(), None);
    });
}

#[test]
fn replaceable_keeps_the_newest_and_ties_go_to_the_lowest_id() {
    each_store(|s| {
        let k = NodeKeys::generate().unwrap();
        let v1 = ev(&k, 0, 100, &[], "v1");
        let v2 = ev(&k, 0, 200, &[], "v2");
        assert_eq!(s.insert_event(&v1).unwrap(), InsertOutcome::Stored);
        assert_eq!(s.insert_event(&v2).unwrap(), InsertOutcome::Stored);
        assert_eq!(
            s.insert_event(&v1).unwrap(),
            InsertOutcome::Superseded,
            "older than the stored one"
        );
        assert_eq!(ids(s, json!({"kinds": [0]})), vec![v2.id]);
        // 10000–19999 behave the same; kind 3 too.
        for kind in [3, 10002, 19999] {
            let a = ev(&k, kind, 100, &[], "a");
            let b = ev(&k, kind, 101, &[], "b");
            s.insert_event(&a).unwrap();
            s.insert_event(&b).unwrap();
            assert_eq!(ids(s, json!({"kinds": [kind]})), vec![b.id], "kind {kind}");
        }
        // Same created_at: the lowest id stays, whatever the order of arrival.
        let x = ev(&k, 10001, 500, &[], "x");
        let y = ev(&k, 10001, 500, &[], "y");
        let (low, high) = if x.id < y.id { (x, y) } else { (y, x) };
        s.insert_event(&high).unwrap();
        assert_eq!(s.insert_event(&low).unwrap(), InsertOutcome::Stored);
        assert_eq!(s.insert_event(&high).unwrap(), InsertOutcome::Superseded);
        assert_eq!(ids(s, json!({"kinds": [10001]})), vec![low.id]);
        // Another author's version is separate.
        let other = NodeKeys::generate().unwrap();
        let o = ev(&other, 0, 50, &[], "other");
        assert_eq!(s.insert_event(&o).unwrap(), InsertOutcome::Stored);
        assert_eq!(ids(s, json!({"kinds": [0]})).len(), 2);
    });
}

#[test]
fn addressable_is_keyed_by_kind_pubkey_and_d() {
    each_store(|s| {
        let k = NodeKeys::generate().unwrap();
        let a1 = ev(&k, 30810, 100, &[&["d", "a"]], "a1");
        let a2 = ev(&k, 30810, 200, &[&["d", "a"]], "a2");
        let b1 = ev(&k, 30810, 150, &[&["d", "b"]], "b1");
        let none = ev(&k, 30810, 120, &[], "no d tag: the empty d");
        let empty = ev(&k, 30810, 130, &[&["d", ""]], "explicit empty d");
        for e in [&a1, &b1, &a2, &none] {
            assert_eq!(s.insert_event(e).unwrap(), InsertOutcome::Stored);
        }
        assert_eq!(
            s.insert_event(&empty).unwrap(),
            InsertOutcome::Stored,
            "replaces the d-less one"
        );
        assert_eq!(
            ids(s, json!({"kinds": [30810]})),
            vec![a2.id, b1.id, empty.id]
        );
        assert_eq!(ids(s, json!({"#d": ["a"]})), vec![a2.id]);
    });
}

#[test]
fn deletion_removes_the_authors_events_and_keeps_them_out() {
    each_store(|s| {
        let k = NodeKeys::generate().unwrap();
        let note = ev(&k, 1, 100, &[], "oops");
        let keep = ev(&k, 1, 101, &[], "keep");
        let addr_v1 = ev(&k, 30000, 100, &[&["d", "x"]], "v1");
        for e in [&note, &keep, &addr_v1] {
            s.insert_event(e).unwrap();
        }
        // Someone else cannot delete it.
        let mallory = NodeKeys::generate().unwrap();
        let forged = ev(&mallory, 5, 110, &[&["e", &note.id_hex()]], "");
        s.insert_event(&forged).unwrap();
        assert_eq!(ids(s, json!({"ids": [note.id_hex()]})), vec![note.id]);
        // The author can, by id and by address.
        let address = format!("30000:{}:x", hex::encode(k.nostr_pubkey()));
        let del = ev(&k, 5, 120, &[&["e", &note.id_hex()], &["a", &address]], "");
        assert_eq!(s.insert_event(&del).unwrap(), InsertOutcome::Stored);
        assert!(ids(s, json!({"ids": [note.id_hex()]})).is_empty());
        assert!(ids(s, json!({"kinds": [30000]})).is_empty());
        assert_eq!(ids(s, json!({"ids": [keep.id_hex()]})), vec![keep.id]);
        // Deleted events do not come back.
        assert_eq!(s.insert_event(&note).unwrap(), InsertOutcome::Deleted);
        assert_eq!(s.insert_event(&addr_v1).unwrap(), InsertOutcome::Deleted);
        // A version of the address newer than the deletion is fine.
        let addr_v2 = ev(&k, 30000, 130, &[&["d", "x"]], "v2");
        assert_eq!(s.insert_event(&addr_v2).unwrap(), InsertOutcome::Stored);
        // The deletion itself is stored and queryable; deleting it has no effect.
        assert_eq!(
            ids(
                s,
                json!({"kinds": [5], "authors": [hex::encode(k.nostr_pubkey())]})
            ),
            vec![del.id]
        );
        let undo = ev(&k, 5, 140, &[&["e", &del.id_hex()]], "");
        s.insert_event(&undo).unwrap();
        assert!(ids(s, json!({"ids": [del.id_hex()]})).contains(&del.id));
    });
}

#[test]
fn expired_events_are_never_returned_and_are_purged() {
    each_store(|s| {
        let k = NodeKeys::generate().unwrap();
        let soon = ev(&k, 1, 100, &[&["expiration", "1000"]], "soon");
        let later = ev(&k, 1, 100, &[&["expiration", "5000"]], "later");
        s.insert_event(&soon).unwrap();
        s.insert_event(&later).unwrap();
        let f = Filter::from_value(&json!({"kinds": [1]}), FilterLimits::default()).unwrap();
        assert_eq!(
            s.query(std::slice::from_ref(&f), 500, 999).unwrap().len(),
            2
        );
        let at_2000: Vec<_> = s
            .query(std::slice::from_ref(&f), 500, 2000)
            .unwrap()
            .into_iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(at_2000, vec![later.id]);
        assert_eq!(s.purge_expired(2000).unwrap(), 1);
        assert_eq!(s.event_count().unwrap(), 1);
    });
}

#[test]
fn every_filter_field_and_their_combinations() {
    each_store(|s| {
        let (a, b) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
        let pa = hex::encode(a.nostr_pubkey());
        let pb = hex::encode(b.nostr_pubkey());
        let e1 = ev(&a, 1, 100, &[&["t", "rust"], &["p", &pb]], "1");
        let e2 = ev(&a, 7, 200, &[&["t", "nostr"]], "2");
        let e3 = ev(&b, 1, 300, &[&["t", "rust"], &["e", &e1.id_hex()]], "3");
        let e4 = ev(
            &b,
            1,
            400,
            &[&["T", "upper"], &["title", "not single-letter"]],
            "4",
        );
        for e in [&e1, &e2, &e3, &e4] {
            s.insert_event(e).unwrap();
        }
        // Newest first.
        assert_eq!(ids(s, json!({})), vec![e4.id, e3.id, e2.id, e1.id]);
        assert_eq!(
            ids(s, json!({"ids": [e2.id_hex(), e3.id_hex()]})),
            vec![e3.id, e2.id]
        );
        assert_eq!(ids(s, json!({"authors": [pa]})), vec![e2.id, e1.id]);
        assert_eq!(ids(s, json!({"kinds": [7]})), vec![e2.id]);
        assert_eq!(ids(s, json!({"#t": ["rust"]})), vec![e3.id, e1.id]);
        assert_eq!(
            ids(s, json!({"#t": ["rust", "nostr"]})),
            vec![e3.id, e2.id, e1.id]
        );
        assert_eq!(ids(s, json!({"#p": [pb]})), vec![e1.id]);
        assert_eq!(ids(s, json!({"#e": [e1.id_hex()]})), vec![e3.id]);
        assert_eq!(
            ids(s, json!({"#T": ["upper"]})),
            vec![e4.id],
            "tag names are case-sensitive"
        );
        assert!(ids(s, json!({"#t": ["upper"]})).is_empty());
        assert_eq!(ids(s, json!({"since": 200})), vec![e4.id, e3.id, e2.id]);
        assert_eq!(ids(s, json!({"until": 200})), vec![e2.id, e1.id]);
        assert_eq!(
            ids(s, json!({"since": 200, "until": 300})),
            vec![e3.id, e2.id]
        );
        assert_eq!(ids(s, json!({"limit": 2})), vec![e4.id, e3.id]);
        assert_eq!(
            ids(s, json!({"authors": [pb], "kinds": [1], "#t": ["rust"]})),
            vec![e3.id]
        );
        assert_eq!(
            ids(s, json!({"#t": ["rust"], "#p": [pb]})),
            vec![e1.id],
            "tag keys AND"
        );
        // Explicitly empty lists and impossible ranges match nothing.
        assert!(ids(s, json!({"ids": []})).is_empty());
        assert!(ids(s, json!({"kinds": []})).is_empty());
        assert!(ids(s, json!({"since": 300, "until": 200})).is_empty());
        assert!(ids(s, json!({"limit": 0})).is_empty());
        // Several filters: the union, newest first, no duplicates, each with its own limit.
        let fs: Vec<Filter> = [
            json!({"kinds": [7]}),
            json!({"authors": [pb], "limit": 1}),
            json!({"#t": ["rust"]}),
        ]
        .iter()
        .map(|f| Filter::from_value(f, FilterLimits::default()).unwrap())
        .collect();
        let got: Vec<_> = s
            .query(&fs, 500, 1_000_000)
            .unwrap()
            .into_iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(got, vec![e4.id, e3.id, e2.id, e1.id]);
        // The cap bounds any limit.
        let f = Filter::from_value(&json!({"limit": 100}), FilterLimits::default()).unwrap();
        assert_eq!(s.query(&[f], 3, 1_000_000).unwrap().len(), 3);
        // Filters match live events the way the store does.
        for (filter, expect) in [
            (
                json!({"#t": ["rust"], "authors": [pb]}),
                [false, false, true, false],
            ),
            (
                json!({"kinds": [1], "until": 300}),
                [true, false, true, false],
            ),
            (json!({"#T": ["upper"]}), [false, false, false, true]),
        ] {
            let f = Filter::from_value(&filter, FilterLimits::default()).unwrap();
            let got: Vec<bool> = [&e1, &e2, &e3, &e4].iter().map(|e| f.matches(e)).collect();
            assert_eq!(got, expect, "{filter}");
        }
    });
}

#[test]
fn malformed_filters_are_refused_with_the_field_named() {
    let l = FilterLimits { max_values: 3 };
    for (bad, field) in [
        (json!([]), "object"),
        (json!({"ids": ["ABC"]}), "ids"),
        (json!({"ids": ["ab".repeat(32).to_uppercase()]}), "ids"),
        (json!({"authors": "x"}), "authors"),
        (json!({"kinds": [70000]}), "kinds"),
        (json!({"kinds": [1, 2, 3, 4]}), "kinds"),
        (json!({"since": -1}), "since"),
        (json!({"limit": "10"}), "limit"),
        (json!({"#tt": ["x"]}), "#tt"),
        (json!({"#1": ["x"]}), "#1"),
        (json!({"#t": [1]}), "#t"),
        (json!({"search": "hello"}), "search"),
    ] {
        let err = Filter::from_value(&bad, l).unwrap_err().to_string();
        assert!(err.contains(field), "{bad}: {err}");
    }
}

#[test]
fn times_beyond_i64_saturate_instead_of_wrapping() {
    each_store(|s| {
        let k = NodeKeys::generate().unwrap();
        // An expiration past i64::MAX must not wrap negative (which would hide the event as
        // already expired); a peer can send anything.
        let far = ev(&k, 1, 100, &[&["expiration", &u64::MAX.to_string()]], "far");
        assert_eq!(s.insert_event(&far).unwrap(), InsertOutcome::Stored);
        assert_eq!(ids(s, json!({"kinds": [1]})), vec![far.id]);
        assert_eq!(s.purge_expired(1_000_000).unwrap(), 0);
        assert_eq!(ids(s, json!({"since": u64::MAX})), Vec::<[u8; 32]>::new());
    });
}

#[test]
fn deletions_by_address_cover_replaceable_kinds_and_any_hex_case() {
    each_store(|s| {
        let k = NodeKeys::generate().unwrap();
        let pk = hex::encode(k.nostr_pubkey());
        let v1 = ev(&k, 0, 100, &[], "v1");
        s.insert_event(&v1).unwrap();
        let del = ev(&k, 5, 150, &[&["a", &format!("0:{pk}:")]], "");
        s.insert_event(&del).unwrap();
        assert!(ids(s, json!({"kinds": [0]})).is_empty());
        assert_eq!(
            s.insert_event(&v1).unwrap(),
            InsertOutcome::Deleted,
            "the old version stays out"
        );
        let v2 = ev(&k, 0, 200, &[], "v2");
        assert_eq!(
            s.insert_event(&v2).unwrap(),
            InsertOutcome::Stored,
            "a newer one is fine"
        );
        // A deletion naming an id in upper case, before the event arrives.
        let later = ev(&k, 1, 300, &[], "deleted before it arrived");
        let del = ev(&k, 5, 310, &[&["e", &later.id_hex().to_uppercase()]], "");
        s.insert_event(&del).unwrap();
        assert_eq!(s.insert_event(&later).unwrap(), InsertOutcome::Deleted);
    });
}

#[test]
fn repeated_tags_do_not_eat_into_the_limit() {
    each_store(|s| {
        let k = NodeKeys::generate().unwrap();
        let a = ev(&k, 1, 100, &[&["t", "x"], &["t", "x"]], "a");
        let b = ev(&k, 1, 200, &[&["t", "x"], &["t", "x"], &["t", "x"]], "b");
        let c = ev(&k, 1, 50, &[&["t", "x"]], "c");
        for e in [&a, &b, &c] {
            s.insert_event(e).unwrap();
        }
        assert_eq!(ids(s, json!({"#t": ["x"], "limit": 2})), vec![b.id, a.id]);
        assert_eq!(
            ids(s, json!({"#t": ["x", "y"], "limit": 3})),
            vec![b.id, a.id, c.id]
        );
    });
}

/// Rows of the tag index, read with SQLite directly.
fn tag_rows(path: &std::path::Path) -> i64 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row("SELECT count(*) FROM tags", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn the_tag_index_follows_replacement_deletion_and_expiry() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("s.db");
    let mut s = Store::create(&path).unwrap();
    let k = NodeKeys::generate().unwrap();
    let v1 = ev(
        &k,
        30000,
        100,
        &[&["d", "x"], &["t", "a"], &["t", "a"]],
        "v1",
    );
    let v2 = ev(&k, 30000, 200, &[&["d", "x"], &["t", "b"]], "v2");
    let note = ev(&k, 1, 100, &[&["t", "a"], &["p", &"ab".repeat(32)]], "note");
    let brief = ev(&k, 1, 100, &[&["t", "a"], &["expiration", "1000"]], "brief");
    for e in [&v1, &v2, &note, &brief] {
        assert_eq!(s.insert_event(e).unwrap(), InsertOutcome::Stored);
    }
    // v2 replaced v1 (d, t=b); note (t, p); brief (t); a repeated tag is one entry
    assert_eq!(tag_rows(&path), 5);
    assert_eq!(ids(&s, json!({"#t": ["b"]})), vec![v2.id]);
    assert!(ids(&s, json!({"#d": ["x"], "#t": ["a"]})).is_empty());
    let del = ev(&k, 5, 300, &[&["e", &note.id_hex()]], "");
    s.insert_event(&del).unwrap();
    // the note's two entries went with it; the deletion's own `e` tag came in
    assert_eq!(tag_rows(&path), 4);
    assert_eq!(s.purge_expired(2000).unwrap(), 1);
    assert_eq!(tag_rows(&path), 3, "the expired event's entry went with it");
    assert!(ids(&s, json!({"#t": ["a"]})).is_empty());
    // deletion records are read again by a new connection: the note stays out
    drop(s);
    let mut s = Store::open(&path).unwrap();
    assert_eq!(s.insert_event(&note).unwrap(), InsertOutcome::Deleted);
    assert_eq!(s.insert_event(&del).unwrap(), InsertOutcome::Duplicate);
}

#[test]
fn a_version_1_store_is_migrated_with_its_events_and_tags() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("v1.db");
    let k = NodeKeys::generate().unwrap();
    let tagged = ev(&k, 1, 100, &[&["t", "old"], &["t", "old"]], "stored by v1");
    let meta = ev(&k, 0, 100, &[], "{}");
    {
        // the schema of version 1, as earlier builds wrote it
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "PRAGMA journal_mode = WAL;
             CREATE TABLE events (rid INTEGER PRIMARY KEY, id BLOB NOT NULL UNIQUE,
                pubkey BLOB NOT NULL, created_at INTEGER NOT NULL, kind INTEGER NOT NULL,
                dtag TEXT, expires_at INTEGER, raw TEXT NOT NULL);
             CREATE INDEX events_created ON events (created_at, id);
             CREATE INDEX events_kind ON events (kind, created_at);
             CREATE INDEX events_author ON events (pubkey, created_at);
             CREATE INDEX events_author_kind ON events (pubkey, kind, created_at);
             CREATE INDEX events_replace ON events (pubkey, kind, dtag) WHERE dtag IS NOT NULL;
             CREATE INDEX events_expiry ON events (expires_at) WHERE expires_at IS NOT NULL;
             CREATE TABLE tags (rid INTEGER NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL,
                created_at INTEGER NOT NULL);
             CREATE INDEX tags_value ON tags (name, value, created_at);
             CREATE INDEX tags_rid ON tags (rid);
             CREATE TABLE deletions (target TEXT NOT NULL, pubkey BLOB NOT NULL,
                deleted_at INTEGER NOT NULL, PRIMARY KEY (target, pubkey)) WITHOUT ROWID;
             CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;
             PRAGMA user_version = 1;",
        )
        .unwrap();
        for (rid, e, dtag) in [(1, &tagged, None), (2, &meta, Some(""))] {
            c.execute(
                "INSERT INTO events VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL, ?7)",
                rusqlite::params![
                    rid,
                    &e.id[..],
                    &e.pubkey[..],
                    e.created_at as i64,
                    e.kind,
                    dtag,
                    e.to_json()
                ],
            )
            .unwrap();
        }
        for _ in 0..2 {
            c.execute("INSERT INTO tags VALUES (1, 't', 'old', 100)", [])
                .unwrap();
        }
    }
    let mut s = Store::open(&path).unwrap();
    assert_eq!(
        s.schema_version().unwrap(),
        fleetmesh_relay::store::SCHEMA_VERSION
    );
    assert_eq!(tag_rows(&path), 1, "the repeated tag became one entry");
    assert_eq!(ids(&s, json!({"#t": ["old"]})), vec![tagged.id]);
    let author = hex::encode(k.nostr_pubkey());
    assert_eq!(ids(&s, json!({"authors": [author]})).len(), 2);
    assert_eq!(
        ids(&s, json!({"authors": [author], "kinds": [0]})),
        vec![meta.id]
    );
    // and the migrated store keeps working: a newer version replaces, a deletion deletes
    let meta2 = ev(&k, 0, 200, &[], "{\"name\":\"x\"}");
    assert_eq!(s.insert_event(&meta2).unwrap(), InsertOutcome::Stored);
    let del = ev(&k, 5, 300, &[&["e", &tagged.id_hex()]], "");
    s.insert_event(&del).unwrap();
    assert!(ids(&s, json!({"#t": ["old"]})).is_empty());
    assert_eq!(tag_rows(&path), 1, "only the deletion's own `e` tag");
    assert_eq!(
        ids(&s, json!({"authors": [author]})),
        vec![del.id, meta2.id]
    );
}

#[test]
fn a_damaged_stored_event_fails_its_replacement_with_an_error_not_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("s.db");
    let mut s = Store::create(&path).unwrap();
    let k = NodeKeys::generate().unwrap();
    let v1 = ev(&k, 0, 100, &[&["t", "x"]], "v1");
    s.insert_event(&v1).unwrap();
    // the stored JSON the tag index is found again from is no longer JSON
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("UPDATE events SET raw = 'not json'", [])
        .unwrap();
    let v2 = ev(&k, 0, 200, &[], "v2");
    assert!(s.insert_event(&v2).is_err(), "the replacement fails");
    // nothing of it was applied, and the store goes on taking other events
    assert_eq!(s.event_count().unwrap(), 1);
    assert_eq!(tag_rows(&path), 1);
    let other = ev(&k, 1, 300, &[], "other");
    assert_eq!(s.insert_event(&other).unwrap(), InsertOutcome::Stored);
}

/// Writes `n` events of about 1 KiB through `writer`, each in its own commit, and waits
/// until every one is committed.
fn write_through(writer: &fleetmesh_relay::store::writer::Writer, keys: &NodeKeys, n: u64) {
    let (tx, rx) = std::sync::mpsc::channel();
    let body = "x".repeat(1000);
    for i in 0..n {
        let e = ev(keys, 1, 1_000 + i, &[], &body);
        let json: std::sync::Arc<str> = e.to_json().into();
        let tx = tx.clone();
        writer
            .insert(
                std::sync::Arc::new(e),
                json,
                Box::new(move |r| tx.send(r).unwrap()),
            )
            .unwrap();
        assert_eq!(rx.recv().unwrap(), Ok(InsertOutcome::Stored));
    }
}

/// Starts a writer over a new store with the given checkpoint thresholds, writes 400
/// events of ~1 KiB (~100 WAL pages' worth and more), and returns the database file's size
/// before and after, read while the writer is still open, and the events read back.
fn file_growth_with(checkpoints: fleetmesh_relay::store::Checkpoints) -> (u64, u64, usize) {
    use fleetmesh_relay::store::writer::Writer;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("s.db");
    drop(Store::create(&path).unwrap());
    let before = std::fs::metadata(&path).unwrap().len();
    let (writer, handle) =
        Writer::start_with(&path, Default::default(), 64, 16, checkpoints).unwrap();
    let keys = NodeKeys::generate().unwrap();
    write_through(&writer, &keys, 400);
    // The checkpointer runs beside the writer: give it until a deadline to show up in the
    // file (a guard against a hang, not a speed target).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut after = std::fs::metadata(&path).unwrap().len();
    while checkpoints.background_pages < u32::MAX
        && after == before
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
        after = std::fs::metadata(&path).unwrap().len();
    }
    let read = Store::open_read_only(&path).unwrap();
    let f = Filter::from_value(&json!({"kinds": [1]}), FilterLimits::default()).unwrap();
    let stored = read.query(&[f], 1_000, 1_000_000).unwrap().len();
    writer.stop();
    drop(writer);
    handle.join().unwrap();
    (before, after, stored)
}

#[test]
fn the_wal_is_copied_back_beside_the_writer_or_in_line_past_the_hard_limit() {
    use fleetmesh_relay::store::Checkpoints;
    // Neither threshold reached: nothing is copied while the writer is open, so the file
    // keeps its size (this is what makes the two checks below mean something).
    let never = Checkpoints {
        background_pages: u32::MAX,
        inline_pages: u32::MAX,
    };
    let (before, after, stored) = file_growth_with(never);
    assert_eq!((after, stored), (before, 400));
    // Past the background threshold the checkpointer thread copies pages into the file.
    let background = Checkpoints {
        background_pages: 32,
        inline_pages: u32::MAX,
    };
    let (before, after, stored) = file_growth_with(background);
    assert!(
        after > before,
        "the checkpointer never ran: {before} -> {after}"
    );
    assert_eq!(stored, 400);
    // Past the hard limit the writer copies them itself, after its commit.
    let inline = Checkpoints {
        background_pages: u32::MAX,
        inline_pages: 32,
    };
    let (before, after, stored) = file_growth_with(inline);
    assert!(after > before, "no in-line checkpoint: {before} -> {after}");
    assert_eq!(stored, 400);
}

#[test]
fn a_bounded_cache_evicts_the_oldest_beyond_its_size_and_never_the_spared_author() {
    each_store(|s| {
        let (me, other) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
        let mine = ev(&me, 1, 10, &[&["t", "mine"]], "mine, oldest of all");
        s.insert_event(&mine).unwrap();
        let theirs: Vec<_> = (0..8)
            .map(|i| ev(&other, 1, 100 + i, &[&["t", "x"]], &format!("theirs {i}")))
            .collect();
        for e in &theirs {
            s.insert_event(e).unwrap();
        }
        assert_eq!(s.evict_oldest(8, &me.nostr_pubkey()).unwrap(), 0);
        assert_eq!(s.evict_oldest(5, &me.nostr_pubkey()).unwrap(), 3);
        let mut left = ids(s, json!({}));
        left.sort_unstable();
        let mut want: Vec<_> = theirs[3..].iter().map(|e| e.id).chain([mine.id]).collect();
        want.sort_unstable();
        assert_eq!(left, want);
        // their tag entries went with them: a tag query finds only what is left
        assert_eq!(ids(s, json!({"#t": ["x"]})).len(), 5);
    });
}

#[test]
fn two_connections_writing_one_file_wait_for_each_other_instead_of_failing() {
    // a node's relay writer and a peering round each hold a connection to the same file;
    // a write transaction that began as a read would fail at once (SQLITE_BUSY_SNAPSHOT)
    // when the other committed in between, which no busy timeout waits out
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("s.db");
    drop(Store::create(&path).unwrap());
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut s = Store::open(&path).unwrap();
                let k = NodeKeys::generate().unwrap();
                for i in 0..300u64 {
                    // a replaceable event: its insert reads the stored version first
                    let e = ev(&k, 0, 1000 + i, &[], &format!("writer {w}, version {i}"));
                    assert_eq!(s.insert_event(&e).unwrap(), InsertOutcome::Stored);
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("no writer failed");
    }
    let s = Store::open(&path).unwrap();
    assert_eq!(
        ids(&s, json!({"kinds": [0]})).len(),
        2,
        "each writer's newest"
    );
}
