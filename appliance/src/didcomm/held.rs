//! A mediator's held messages (`[didcomm] mediate`): forwarded messages waiting for the
//! DID they are for to pick them up, in `DIR/mediator.sqlite`, so that a restart keeps
//! them. Bounded per DID (the oldest dropped past `hold_per_did`), in bytes for all DIDs
//! together (a new message refused past `hold_bytes`) and in age (`hold_secs`). An
//! existing file that is empty, not SQLite or damaged is refused and left as it is.

use std::path::Path;
use std::sync::Mutex;

use anyhow::Context as _;
use fleetmesh_relay::store::sqlite;
use rusqlite::{Connection, params};
use serde_json::Value;

use crate::config::DidcommSection;

/// The file, in the node directory.
pub const FILE: &str = "mediator.sqlite";

const MIGRATIONS: &[&str] = &["CREATE TABLE held (
        seq INTEGER PRIMARY KEY,
        did TEXT NOT NULL,
        id TEXT NOT NULL,
        at INTEGER NOT NULL,
        size INTEGER NOT NULL,
        packed TEXT NOT NULL
     );
     CREATE INDEX held_did ON held (did, seq);
     CREATE INDEX held_at ON held (at);"];

struct State {
    conn: Connection,
    /// Bytes held, all DIDs together.
    bytes: u64,
}

/// The held messages.
pub struct Held {
    state: Mutex<State>,
    per_did: usize,
    max_bytes: u64,
    ttl: u64,
}

/// Why a message is not held.
#[derive(Debug)]
pub enum Refused {
    /// `hold_bytes` would be passed.
    Full(u64),
    /// The store failed.
    Store(String),
}

fn sql<T>(r: rusqlite::Result<T>) -> Result<T, Refused> {
    r.map_err(|e| Refused::Store(e.to_string()))
}

impl Held {
    /// Opens (or creates) the store at `path` with `config`'s bounds.
    ///
    /// # Errors
    /// When the file cannot be opened or is not a mediator's store.
    pub fn open(path: &Path, config: &DidcommSection) -> anyhow::Result<Held> {
        let mut conn = sqlite::open(path, sqlite::Mode::CreateIfAbsent, true)?;
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")
            .with_context(|| format!("opening {}", path.display()))?;
        sqlite::migrate(&mut conn, path, MIGRATIONS)?;
        let bytes: i64 = conn
            .query_row("SELECT COALESCE(SUM(size), 0) FROM held", [], |r| r.get(0))
            .with_context(|| format!("reading {}", path.display()))?;
        Ok(Held {
            state: Mutex::new(State {
                conn,
                bytes: bytes as u64,
            }),
            per_did: config.hold_per_did,
            max_bytes: config.hold_bytes,
            ttl: config.hold_secs,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Drops what waited longer than `hold_secs`.
    fn expire(&self, s: &mut State, now: u64) -> rusqlite::Result<()> {
        let cutoff = now.saturating_sub(self.ttl) as i64;
        let freed: i64 = s.conn.query_row(
            "SELECT COALESCE(SUM(size), 0) FROM held WHERE at <= ?1",
            params![cutoff],
            |r| r.get(0),
        )?;
        if freed > 0 {
            s.conn
                .execute("DELETE FROM held WHERE at <= ?1", params![cutoff])?;
            s.bytes = s.bytes.saturating_sub(freed as u64);
        }
        Ok(())
    }

    /// Holds `packed` (`size` bytes, message `id`) for `did`.
    ///
    /// # Errors
    /// [`Refused::Full`] past `hold_bytes`; [`Refused::Store`] when SQLite fails.
    pub fn hold(
        &self,
        did: &str,
        id: &str,
        packed: &Value,
        size: u64,
        now: u64,
    ) -> Result<(), Refused> {
        let mut s = self.state();
        sql(self.expire(&mut s, now))?;
        if s.bytes + size > self.max_bytes {
            return Err(Refused::Full(s.bytes));
        }
        let tx = sql(s.conn.transaction())?;
        sql(tx.execute(
            "INSERT INTO held (did, id, at, size, packed) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![did, id, now as i64, size as i64, packed.to_string()],
        ))?;
        // past the cap for this DID, its oldest go
        let over = "SELECT seq FROM held WHERE did = ?1 ORDER BY seq DESC LIMIT -1 OFFSET ?2";
        let freed: i64 = sql(tx.query_row(
            &format!("SELECT COALESCE(SUM(size), 0) FROM held WHERE seq IN ({over})"),
            params![did, self.per_did as i64],
            |r| r.get(0),
        ))?;
        sql(tx.execute(
            &format!("DELETE FROM held WHERE seq IN ({over})"),
            params![did, self.per_did as i64],
        ))?;
        sql(tx.commit())?;
        s.bytes = (s.bytes + size).saturating_sub(freed as u64);
        Ok(())
    }

    /// The oldest messages for `did`, at most `limit` of them and `max_bytes` together (at
    /// least one): `(id, message)`; they stay until [`Held::received`].
    pub fn deliver(
        &self,
        did: &str,
        limit: usize,
        max_bytes: u64,
        now: u64,
    ) -> Vec<(String, Value)> {
        let mut s = self.state();
        let mut read = || -> rusqlite::Result<Vec<(String, i64, String)>> {
            self.expire(&mut s, now)?;
            let mut stmt = s.conn.prepare(
                "SELECT id, size, packed FROM held WHERE did = ?1 ORDER BY seq LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![did, limit as i64], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
            rows.collect()
        };
        let rows = read().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "reading held messages");
            Vec::new()
        });
        let mut bytes = 0;
        rows.into_iter()
            .take_while(|(_, size, _)| {
                bytes += *size as u64;
                bytes <= max_bytes || bytes == *size as u64
            })
            .filter_map(|(id, _, packed)| serde_json::from_str(&packed).ok().map(|v| (id, v)))
            .collect()
    }

    /// Drops `did`'s messages `ids` (taken by their owner).
    pub fn received(&self, did: &str, ids: &[&str]) {
        let mut s = self.state();
        let mut freed = 0u64;
        for id in ids {
            let r = s.conn.query_row(
                "DELETE FROM held WHERE did = ?1 AND id = ?2 RETURNING size",
                params![did, id],
                |r| r.get::<_, i64>(0),
            );
            if let Ok(size) = r {
                freed += size as u64;
            }
        }
        s.bytes = s.bytes.saturating_sub(freed);
    }

    /// How many messages wait for `did`, and for all DIDs.
    pub fn waiting(&self, did: &str) -> (usize, usize) {
        let s = self.state();
        let count = |q: &str, p: &[&dyn rusqlite::ToSql]| -> usize {
            s.conn
                .query_row(q, p, |r| r.get::<_, i64>(0))
                .map_or(0, |n| n as usize)
        };
        (
            count("SELECT COUNT(*) FROM held WHERE did = ?1", &[&did]),
            count("SELECT COUNT(*) FROM held", &[]),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_messages_are_bounded_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let config = DidcommSection {
            mediate: true,
            hold_per_did: 2,
            hold_bytes: 1 << 20,
            hold_secs: 100,
            ..DidcommSection::default()
        };
        let held = Held::open(&path, &config).unwrap();
        let v = |n: u64| serde_json::json!({ "n": n });
        for n in 0..3 {
            held.hold("did:a", &format!("m{n}"), &v(n), 10, 1_000 + n)
                .unwrap();
        }
        // the oldest went past two per DID
        let got = held.deliver("did:a", 32, 1 << 20, 1_005);
        assert_eq!(
            got.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(),
            ["m1", "m2"]
        );
        assert_eq!(held.waiting("did:b"), (0, 2));
        // a reopened store still holds them, and its byte count
        drop(held);
        let held = Held::open(&path, &config).unwrap();
        assert_eq!(held.waiting("did:a"), (2, 2));
        assert!(matches!(
            held.hold("did:b", "big", &v(9), (1 << 20) - 10, 1_005),
            Err(Refused::Full(20))
        ));
        held.received("did:a", &["m1"]);
        assert_eq!(held.deliver("did:a", 32, 1 << 20, 1_005).len(), 1);
        // past hold_secs nothing is left
        assert!(held.deliver("did:a", 32, 1 << 20, 1_200).is_empty());
        assert_eq!(held.waiting("did:a"), (0, 0));
        // a file that is not SQLite is refused and left as it is
        let bad = dir.path().join("bad.sqlite");
        std::fs::write(&bad, b"not a database at all").unwrap();
        let e = Held::open(&bad, &config).err().unwrap().to_string();
        assert!(e.contains("not a SQLite database"), "{e}");
        assert_eq!(std::fs::read(&bad).unwrap(), b"not a database at all");
    }
}
