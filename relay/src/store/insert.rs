//! The store's write path: NIP-01 storage semantics (duplicates, replaceable and addressable
//! versions), NIP-09 deletions, NIP-40 purges, and the tag index kept in step with events.
//!
//! An insert of a regular event costs one B-tree insert per index and nothing else: the
//! duplicate check is the `id` index's own conflict (`ON CONFLICT DO NOTHING`), and the
//! deletion records are only consulted for authors who have deleted something
//! ([`Deleters`], kept in memory). Replaceable and addressable kinds and kind-5 deletions take
//! the longer path with their extra lookups.

use std::collections::HashSet;

use rusqlite::{OptionalExtension, Transaction, params};

use super::{InsertOutcome, sql_time};
use fleetmesh_proto::event::Event;

/// The authors with NIP-09 deletion records: the only ones whose new events need the
/// deletion table looked up. Loaded by a connection's first insert; grows as kind-5 events
/// are stored (a superset after a rolled-back transaction, which only costs lookups).
#[derive(Debug, Default)]
pub(super) struct Deleters(HashSet<[u8; 32]>);

impl Deleters {
    pub(super) fn load(conn: &rusqlite::Connection) -> rusqlite::Result<Deleters> {
        let mut stmt = conn.prepare("SELECT DISTINCT pubkey FROM deletions")?;
        let keys = stmt
            .query_map([], |r| r.get::<_, Vec<u8>>(0))?
            .filter_map(|k| {
                k.map(|k| <[u8; 32]>::try_from(k.as_slice()).ok())
                    .transpose()
            })
            .collect::<rusqlite::Result<HashSet<_>>>()?;
        Ok(Deleters(keys))
    }
}

/// The address of an addressable event: `kind:pubkey:d`.
fn address(kind: u16, pubkey: &[u8; 32], d: &str) -> String {
    format!("{kind}:{}:{d}", hex::encode(pubkey))
}

/// The tags the tag index holds: those with a single-letter name and a value (NIP-01's
/// filterable `#x` tags).
fn indexed_tags(tags: &[Vec<String>]) -> impl Iterator<Item = (&str, &str)> {
    tags.iter().filter_map(|tag| match tag.as_slice() {
        [name, value, ..] if name.len() == 1 && name.as_bytes()[0].is_ascii_alphabetic() => {
            Some((name.as_str(), value.as_str()))
        }
        _ => None,
    })
}

/// What the tag index needs of a stored event's JSON.
#[derive(serde::Deserialize)]
struct Indexed {
    created_at: u64,
    #[serde(default)]
    tags: Vec<Vec<String>>,
}

/// Removes the event stored under `rid` and its tag index entries (found from its JSON).
pub(super) fn delete_rid(tx: &Transaction<'_>, rid: i64) -> rusqlite::Result<()> {
    let raw: Option<String> = tx
        .prepare_cached("SELECT raw FROM events WHERE rid = ?1")?
        .query_row([rid], |r| r.get(0))
        .optional()?;
    let Some(raw) = raw else { return Ok(()) };
    // The JSON was written by this store from a verified event; if it no longer parses the
    // file is damaged, and SQLite's own error is the right report.
    let ev: Indexed = serde_json::from_str(&raw).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
    })?;
    let mut del = tx.prepare_cached(
        "DELETE FROM tags WHERE name = ?1 AND value = ?2 AND created_at = ?3 AND rid = ?4",
    )?;
    for (name, value) in indexed_tags(&ev.tags) {
        del.execute(params![name, value, sql_time(ev.created_at), rid])?;
    }
    tx.prepare_cached("DELETE FROM events WHERE rid = ?1")?
        .execute([rid])?;
    Ok(())
}

fn record_deletion(
    tx: &Transaction<'_>,
    deleters: &mut Deleters,
    target: &str,
    pubkey: &[u8; 32],
    at: u64,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO deletions (target, pubkey, deleted_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (target, pubkey) DO UPDATE SET deleted_at = max(deleted_at, excluded.deleted_at)",
    )?
    .execute(params![target, &pubkey[..], sql_time(at)])?;
    deleters.0.insert(*pubkey);
    Ok(())
}

fn deleted_at(
    tx: &Transaction<'_>,
    deleters: &Deleters,
    target: &str,
    pubkey: &[u8; 32],
) -> rusqlite::Result<Option<u64>> {
    if !deleters.0.contains(pubkey) {
        return Ok(None);
    }
    tx.prepare_cached("SELECT deleted_at FROM deletions WHERE target = ?1 AND pubkey = ?2")?
        .query_row(params![target, &pubkey[..]], |r| r.get::<_, i64>(0))
        .optional()
        .map(|v| v.map(|v| v as u64))
}

/// NIP-09: a kind 5 event by `e.pubkey` deletes that author's events named by `e` tags and
/// the versions of addresses named by `a` tags up to its `created_at`. Deletion events
/// themselves cannot be deleted.
fn apply_deletion(
    tx: &Transaction<'_>,
    deleters: &mut Deleters,
    e: &Event,
) -> rusqlite::Result<()> {
    for tag in &e.tags {
        match (tag.first().map(String::as_str), tag.get(1)) {
            (Some("e"), Some(id_hex)) => {
                let mut id = [0u8; 32];
                if hex::decode_to_slice(id_hex, &mut id).is_err() {
                    continue;
                }
                let rid: Option<i64> = tx
                    .prepare_cached(
                        "SELECT rid FROM events WHERE id = ?1 AND pubkey = ?2 AND kind != 5",
                    )?
                    .query_row(params![&id[..], &e.pubkey[..]], |r| r.get(0))
                    .optional()?;
                if let Some(rid) = rid {
                    delete_rid(tx, rid)?;
                }
                // Recorded in the canonical (lowercase) form the insert check looks up.
                record_deletion(tx, deleters, &hex::encode(id), &e.pubkey, e.created_at)?;
            }
            (Some("a"), Some(addr)) => {
                let mut parts = addr.splitn(3, ':');
                let (Some(kind), Some(pk), Some(d)) = (parts.next(), parts.next(), parts.next())
                else {
                    continue;
                };
                let (Ok(kind), Ok(pk)) = (kind.parse::<u16>(), hex::decode(pk)) else {
                    continue;
                };
                if pk != e.pubkey {
                    continue; // only the author may delete an address
                }
                let rids: Vec<i64> = tx
                    .prepare_cached(
                        "SELECT rid FROM events WHERE pubkey = ?1 AND kind = ?2 AND dtag = ?3 AND created_at <= ?4",
                    )?
                    .query_map(params![&e.pubkey[..], kind, d, sql_time(e.created_at)], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?;
                for rid in rids {
                    delete_rid(tx, rid)?;
                }
                let target = address(kind, &e.pubkey, d);
                record_deletion(tx, deleters, &target, &e.pubkey, e.created_at)?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn exists(tx: &Transaction<'_>, id: &[u8; 32]) -> rusqlite::Result<bool> {
    tx.prepare_cached("SELECT 1 FROM events WHERE id = ?1")?
        .exists([&id[..]])
}

/// Stores one verified event in the open transaction and says what became of it.
pub(super) fn insert_in(
    tx: &Transaction<'_>,
    deleters: &mut Deleters,
    e: &Event,
    json: &str,
) -> rusqlite::Result<InsertOutcome> {
    if deleters.0.contains(&e.pubkey)
        && deleted_at(tx, deleters, &hex::encode(e.id), &e.pubkey)?.is_some()
    {
        // (a stored kind-5 event named by a later deletion stays, and stays a duplicate)
        return Ok(if exists(tx, &e.id)? {
            InsertOutcome::Duplicate
        } else {
            InsertOutcome::Deleted
        });
    }
    let dtag = e.replacement_key();
    if let Some(d) = dtag {
        if exists(tx, &e.id)? {
            return Ok(InsertOutcome::Duplicate);
        }
        // NIP-09 `a` deletions cover replaceable events (`kind:pubkey:`) too.
        if deleted_at(tx, deleters, &address(e.kind, &e.pubkey, d), &e.pubkey)?
            .is_some_and(|at| at >= e.created_at)
        {
            return Ok(InsertOutcome::Deleted);
        }
        let older: Vec<(i64, i64, Vec<u8>)> = tx
            .prepare_cached("SELECT rid, created_at, id FROM events WHERE pubkey = ?1 AND kind = ?2 AND dtag = ?3")?
            .query_map(params![&e.pubkey[..], e.kind, d], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        for (rid, created_at, id) in older {
            let created_at = created_at as u64;
            // NIP-01: the newest wins; on equal created_at, the lowest id.
            if created_at > e.created_at
                || (created_at == e.created_at && id.as_slice() < &e.id[..])
            {
                return Ok(InsertOutcome::Superseded);
            }
            delete_rid(tx, rid)?;
        }
    }
    if e.kind == 5 {
        if exists(tx, &e.id)? {
            return Ok(InsertOutcome::Duplicate);
        }
        apply_deletion(tx, deleters, e)?;
    }
    // A regular event's duplicate check is the id index's own conflict.
    let inserted = tx
        .prepare_cached(
            "INSERT INTO events (id, pubkey, created_at, kind, dtag, expires_at, raw)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (id) DO NOTHING",
        )?
        .execute(params![
            &e.id[..],
            &e.pubkey[..],
            sql_time(e.created_at),
            e.kind,
            dtag,
            e.expiration().map(sql_time),
            json
        ])?;
    if inserted == 0 {
        return Ok(InsertOutcome::Duplicate);
    }
    let rid = tx.last_insert_rowid();
    let mut tag_stmt = tx.prepare_cached(
        "INSERT INTO tags (name, value, created_at, rid) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT DO NOTHING",
    )?;
    for (name, value) in indexed_tags(&e.tags) {
        tag_stmt.execute(params![name, value, sql_time(e.created_at), rid])?;
    }
    Ok(InsertOutcome::Stored)
}

/// Deletes every event whose NIP-40 expiration is at or before `now`; how many.
pub(super) fn purge_expired(tx: &Transaction<'_>, now: u64) -> rusqlite::Result<usize> {
    let rids: Vec<i64> = tx
        .prepare_cached("SELECT rid FROM events WHERE expires_at <= ?1")?
        .query_map([sql_time(now)], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for &rid in &rids {
        delete_rid(tx, rid)?;
    }
    Ok(rids.len())
}

/// Deletes the oldest events beyond `keep`, not counting nor touching `spare`'s; how many.
pub(super) fn evict_oldest(
    tx: &Transaction<'_>,
    keep: usize,
    spare: &[u8; 32],
) -> rusqlite::Result<usize> {
    let held: i64 = tx
        .prepare_cached("SELECT count(*) FROM events WHERE pubkey != ?1")?
        .query_row([&spare[..]], |r| r.get(0))?;
    let over = usize::try_from(held).unwrap_or(0).saturating_sub(keep);
    if over == 0 {
        return Ok(0);
    }
    let rids: Vec<i64> = tx
        .prepare_cached(
            "SELECT rid FROM events WHERE pubkey != ?1 ORDER BY created_at, rid LIMIT ?2",
        )?
        .query_map(params![&spare[..], over as i64], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for &rid in &rids {
        delete_rid(tx, rid)?;
    }
    Ok(rids.len())
}
