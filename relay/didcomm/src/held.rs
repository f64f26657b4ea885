//! A mediator's held messages (`[didcomm] mediate`): forwarded messages waiting for the
//! DID they are for to pick them up, in `DIR/mediator.sqlite`, so that a restart keeps
//! them. Bounded by who sent them — each source (a client address or link peer, and the
//! key that signed the forward, if any) may have `source_messages` and `source_bytes`
//! waiting at once — per DID (`hold_per_did`), in bytes for all DIDs together
//! (`hold_bytes`) and in age (`hold_secs`). Past a bound the new message is refused;
//! nothing held is ever dropped to make room, so what a DID was told is waiting stays
//! until it takes it or it expires. An existing file that is empty, not SQLite or damaged
//! is refused and left as it is.

use std::path::Path;
use std::sync::Mutex;

use fleetmesh_relay::store::sqlite;
use rusqlite::{Connection, params};
use serde_json::Value;

use crate::{Config, DidcommError};

/// The file, in the node directory.
pub const FILE: &str = "mediator.sqlite";

const MIGRATIONS: &[&str] = &[
    "CREATE TABLE held (
        seq INTEGER PRIMARY KEY,
        did TEXT NOT NULL,
        id TEXT NOT NULL,
        at INTEGER NOT NULL,
        size INTEGER NOT NULL,
        packed TEXT NOT NULL
     );
     CREATE INDEX held_did ON held (did, seq);
     CREATE INDEX held_at ON held (at);",
    // who sent each message: its source (address or link peer) and signing key, if any;
    // messages held before are nobody's
    "ALTER TABLE held ADD COLUMN src TEXT NOT NULL DEFAULT '';
     ALTER TABLE held ADD COLUMN signer TEXT;
     CREATE INDEX held_src ON held (src);
     CREATE INDEX held_signer ON held (signer);",
];

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
    per_source: usize,
    source_bytes: u64,
    ttl: u64,
}

/// Who sent a message to hold: what its quotas count against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sender<'a> {
    /// Where it came from: `ip:ADDRESS`, `ip6:PREFIX/64`, `key:HEX` (a link peer).
    pub source: &'a str,
    /// `key:HEX` of the key that signed it, if one did.
    pub signer: Option<&'a str>,
}

/// Why a message is not held; `retry` is the seconds until the oldest message in the way
/// expires (it may be picked up sooner).
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// `source` has `source_messages` or `source_bytes` waiting already.
    Source {
        /// The source's quota key.
        source: String,
        /// Messages it has waiting.
        waiting: usize,
        /// Bytes it has waiting.
        bytes: u64,
        /// Seconds until room may come.
        retry: u64,
    },
    /// The DID has `hold_per_did` messages waiting.
    Queue {
        /// Messages waiting for the DID.
        waiting: usize,
        /// Seconds until room may come.
        retry: u64,
    },
    /// `hold_bytes` would be passed (bytes held).
    Full {
        /// Bytes held for all DIDs.
        held: u64,
        /// Seconds until room may come.
        retry: u64,
    },
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
    pub fn open(path: &Path, config: &Config) -> crate::Result<Held> {
        let fail = |reason: String| DidcommError::Store {
            path: path.display().to_string(),
            reason,
        };
        let mut conn = sqlite::open(path, sqlite::Mode::CreateIfAbsent, true)
            .map_err(|e| fail(e.to_string()))?;
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")
            .map_err(|e| fail(format!("opening: {e}")))?;
        sqlite::migrate(&mut conn, path, MIGRATIONS).map_err(|e| fail(e.to_string()))?;
        let bytes: i64 = conn
            .query_row("SELECT COALESCE(SUM(size), 0) FROM held", [], |r| r.get(0))
            .map_err(|e| fail(format!("reading: {e}")))?;
        Ok(Held {
            state: Mutex::new(State {
                conn,
                bytes: bytes as u64,
            }),
            per_did: config.hold_per_did,
            max_bytes: config.hold_bytes,
            per_source: config.source_messages,
            source_bytes: config.source_bytes,
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

    /// Seconds from `now` until a message held at `at` expires (at least 1).
    fn retry(&self, at: Option<i64>, now: u64) -> u64 {
        at.map_or(1, |at| {
            (at.max(0) as u64 + self.ttl).saturating_sub(now).max(1)
        })
    }

    /// Holds `packed` (message `id`) for `did`, sent by `from`: refused when one of
    /// `from`'s sources, the DID's queue or the node's budget has no room for it. Nothing
    /// held is dropped to make room.
    ///
    /// # Errors
    /// [`Refused::Source`], [`Refused::Queue`], [`Refused::Full`] (in that order);
    /// [`Refused::Store`] when SQLite fails.
    pub fn hold(
        &self,
        did: &str,
        id: &str,
        packed: &str,
        from: Sender<'_>,
        now: u64,
    ) -> Result<(), Refused> {
        let size = packed.len() as u64;
        let mut s = self.state();
        sql(self.expire(&mut s, now))?;
        let sources = std::iter::once(from.source).chain(from.signer.filter(|k| *k != from.source));
        for source in sources {
            let (waiting, bytes, oldest): (i64, i64, Option<i64>) = sql(s.conn.query_row(
                "SELECT COUNT(*), COALESCE(SUM(size), 0), MIN(at) FROM held \
                 WHERE src = ?1 OR signer = ?1",
                params![source],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            ))?;
            let (waiting, bytes) = (waiting as usize, bytes as u64);
            if waiting >= self.per_source || bytes + size > self.source_bytes {
                return Err(Refused::Source {
                    source: source.to_owned(),
                    waiting,
                    bytes,
                    retry: self.retry(oldest, now),
                });
            }
        }
        let (waiting, oldest): (i64, Option<i64>) = sql(s.conn.query_row(
            "SELECT COUNT(*), MIN(at) FROM held WHERE did = ?1",
            params![did],
            |r| Ok((r.get(0)?, r.get(1)?)),
        ))?;
        if waiting as usize >= self.per_did {
            return Err(Refused::Queue {
                waiting: waiting as usize,
                retry: self.retry(oldest, now),
            });
        }
        if s.bytes + size > self.max_bytes {
            let oldest: Option<i64> = sql(s
                .conn
                .query_row("SELECT MIN(at) FROM held", [], |r| r.get(0)))?;
            return Err(Refused::Full {
                held: s.bytes,
                retry: self.retry(oldest, now),
            });
        }
        sql(s.conn.execute(
            "INSERT INTO held (did, id, at, size, packed, src, signer) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                did,
                id,
                now as i64,
                size as i64,
                packed,
                from.source,
                from.signer
            ],
        ))?;
        s.bytes += size;
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

    fn from(source: &str) -> Sender<'_> {
        Sender {
            source,
            signer: None,
        }
    }

    #[test]
    fn held_messages_are_bounded_by_sender_did_and_bytes_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let config = Config {
            mediate: true,
            hold_per_did: 3,
            hold_bytes: 1 << 20,
            source_messages: 2,
            source_bytes: 100,
            hold_secs: 100,
            ..Config::default()
        };
        let held = Held::open(&path, &config).unwrap();
        let m = |n: u64| format!("{{\"n\":{n}}}"); // 7 bytes
        // one source: two messages, then refused; what it holds stays
        held.hold("did:a", "m0", &m(0), from("ip:10.0.0.1"), 1_000)
            .unwrap();
        held.hold("did:a", "m1", &m(1), from("ip:10.0.0.1"), 1_001)
            .unwrap();
        assert_eq!(
            held.hold("did:a", "m2", &m(2), from("ip:10.0.0.1"), 1_010),
            Err(Refused::Source {
                source: "ip:10.0.0.1".into(),
                waiting: 2,
                bytes: 14,
                retry: 90
            })
        );
        // another source fills the DID's queue; the newcomer is refused, nothing dropped
        held.hold("did:a", "m3", &m(3), from("ip:10.0.0.2"), 1_020)
            .unwrap();
        assert_eq!(
            held.hold("did:a", "m4", &m(4), from("ip:10.0.0.3"), 1_030),
            Err(Refused::Queue {
                waiting: 3,
                retry: 70
            })
        );
        let ids = |got: Vec<(String, Value)>| got.into_iter().map(|(id, _)| id).collect::<Vec<_>>();
        assert_eq!(
            ids(held.deliver("did:a", 32, 1 << 20, 1_030)),
            ["m0", "m1", "m3"]
        );
        // a signing key is counted wherever it sends from
        let signed = |source| Sender {
            source,
            signer: Some("key:k"),
        };
        held.hold("did:b", "s0", &m(5), signed("ip:10.0.0.4"), 1_030)
            .unwrap();
        held.hold("did:b", "s1", &m(6), signed("ip:10.0.0.5"), 1_030)
            .unwrap();
        let e = held.hold("did:b", "s2", &m(7), signed("ip:10.0.0.6"), 1_030);
        assert!(matches!(e, Err(Refused::Source { source, .. }) if source == "key:k"));
        // bytes per source
        let big = format!("\"{}\"", "x".repeat(95));
        held.hold("did:c", "b0", &big, from("ip:10.0.0.7"), 1_030)
            .unwrap();
        let e = held.hold("did:c", "b1", &m(8), from("ip:10.0.0.7"), 1_030);
        assert!(matches!(e, Err(Refused::Source { bytes: 97, .. })), "{e:?}");
        // taken by its DID, a source's messages no longer count against it
        held.received("did:a", &["m0"]);
        held.hold("did:a", "m2", &m(2), from("ip:10.0.0.1"), 1_040)
            .unwrap();
        // a reopened store still holds them, their senders and its byte count
        drop(held);
        let held = Held::open(&path, &config).unwrap();
        assert_eq!(held.waiting("did:a"), (3, 6));
        let e = held.hold("did:a", "m5", &m(5), from("ip:10.0.0.1"), 1_050);
        assert!(
            matches!(e, Err(Refused::Source { waiting: 2, .. })),
            "{e:?}"
        );
        let roomy = Held::open(
            &path,
            &Config {
                hold_bytes: 150,
                ..config.clone()
            },
        )
        .unwrap();
        let e = roomy.hold("did:d", "d0", &big, from("ip:10.0.0.9"), 1_050);
        assert_eq!(
            e,
            Err(Refused::Full {
                held: 7 * 5 + 97,
                retry: 51
            })
        );
        drop(roomy);
        // past hold_secs nothing is left, and every quota is free again
        assert!(held.deliver("did:a", 32, 1 << 20, 1_200).is_empty());
        assert_eq!(held.waiting("did:a"), (0, 0));
        held.hold("did:a", "m6", &m(6), from("ip:10.0.0.1"), 1_200)
            .unwrap();
        // a file that is not SQLite is refused and left as it is
        let bad = dir.path().join("bad.sqlite");
        std::fs::write(&bad, b"not a database at all").unwrap();
        let e = Held::open(&bad, &config).err().unwrap().to_string();
        assert!(e.contains("not a SQLite database"), "{e}");
        assert_eq!(std::fs::read(&bad).unwrap(), b"not a database at all");
    }

    #[test]
    fn a_store_of_the_first_version_is_migrated_with_its_messages_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        {
            let mut conn = sqlite::open(&path, sqlite::Mode::CreateIfAbsent, true).unwrap();
            sqlite::migrate(&mut conn, &path, &MIGRATIONS[..1]).unwrap();
            conn.execute(
                "INSERT INTO held (did, id, at, size, packed) VALUES ('did:a', 'old', 1000, 2, '{}')",
                [],
            )
            .unwrap();
        }
        let held = Held::open(&path, &Config::default()).unwrap();
        let got = held.deliver("did:a", 32, 1 << 20, 1_001);
        assert_eq!(got, [("old".to_owned(), serde_json::json!({}))]);
        // held before senders were recorded, it counts against nobody's quota
        held.hold("did:a", "new", "{}", from("ip:10.0.0.1"), 1_001)
            .unwrap();
        assert_eq!(held.waiting("did:a"), (2, 2));
    }
}
