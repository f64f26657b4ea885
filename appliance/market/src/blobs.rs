//! The node's blob store, without its HTTP face: content-addressed blobs (SHA-256) in one
//! folder of the node directory, and an index (`index.sqlite`) of each blob's size, media
//! type, upload time and the keys that claim it. Job inputs are read from it and job
//! outputs written to it; the appliance serves it as Blossom (BUD-01, BUD-02, BUD-06).
//!
//! The index is versioned with `PRAGMA user_version` and migrated forward on open, like
//! the relay store; it is checked with `PRAGMA quick_check`, and a file from a newer build,
//! an empty file or one that is not SQLite is refused, untouched, with its path in the
//! error. A blob reaches its place by a rename from a temporary file ([`Upload`]), so a
//! reader never sees half of one; temporary files an earlier run left are removed on open.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

use crate::{Refusal, refuse};
use fleetmesh_proto::unix_now;

/// The blob directory and its index, in the node directory.
pub const BLOBS_DIR: &str = "blobs";

/// The index's file name, in [`BLOBS_DIR`].
pub const INDEX_FILE: &str = "index.sqlite";

/// Index migrations: step `i` takes `user_version` `i` to `i + 1`.
pub(crate) const MIGRATIONS: &[&str] = &[
    // v1. `IF NOT EXISTS`: builds before versioning created these same tables and left
    // `user_version` at 0; they are adopted as they are.
    "CREATE TABLE IF NOT EXISTS blobs (
         sha256 TEXT PRIMARY KEY, size INTEGER NOT NULL, type TEXT NOT NULL,
         uploaded INTEGER NOT NULL);
     CREATE TABLE IF NOT EXISTS owners (
         sha256 TEXT NOT NULL, pubkey TEXT NOT NULL, PRIMARY KEY (sha256, pubkey));",
    // v2. a key's claims by key: its quota (`over_quota`) and its list, without a scan
    "CREATE INDEX IF NOT EXISTS owners_pubkey ON owners (pubkey);",
];

/// What the index says of a blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobInfo {
    /// Its SHA-256, hex.
    pub sha256: String,
    /// Bytes.
    pub size: u64,
    /// Its media type.
    pub media: String,
    /// When it was first stored, Unix seconds.
    pub uploaded: u64,
}

/// What releasing a claim did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The key did not claim the blob; nothing changed.
    NotClaimed,
    /// The claim is gone; others still claim the blob, so it stays.
    Kept,
    /// The last claim is gone, and with it the blob.
    Removed,
}

/// A temporary file in the blob directory, removed when dropped unless it was placed.
#[derive(Debug)]
pub struct Upload {
    path: PathBuf,
    placed: bool,
}

impl Upload {
    /// Where to write the upload's bytes.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if !self.placed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Whether `h` is a blob name: 64 lowercase hex digits.
pub fn is_hash(h: &str) -> bool {
    h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The blob store.
pub struct BlobStore {
    dir: PathBuf,
    db: Mutex<Connection>,
}

impl std::fmt::Debug for BlobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobStore")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl BlobStore {
    /// Opens (or creates) the store under `node_dir`. Temporary files an earlier run left
    /// behind are removed.
    ///
    /// # Errors
    /// `storage`: the directory cannot be created, or the index cannot be opened (an
    /// existing index that is empty, not SQLite, damaged or from a newer build is refused,
    /// untouched).
    pub fn open(node_dir: &Path) -> Result<BlobStore, Refusal> {
        let dir = node_dir.join(BLOBS_DIR);
        std::fs::create_dir_all(&dir)
            .map_err(|e| refuse("storage", format!("creating {}: {e}", dir.display())))?;
        let db = open_index(&dir.join(INDEX_FILE))?;
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().ends_with(".part") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        Ok(BlobStore {
            dir,
            db: Mutex::new(db),
        })
    }

    fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.db
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The file of blob `hash`, if `hash` is a blob name (it may not exist).
    pub fn path_of(&self, hash: &str) -> Option<PathBuf> {
        is_hash(hash).then(|| self.dir.join(hash))
    }

    /// What the index says of blob `hash`.
    pub fn info(&self, hash: &str) -> Option<BlobInfo> {
        self.db()
            .query_row(
                "SELECT size, type, uploaded FROM blobs WHERE sha256 = ?1",
                params![hash],
                |r| {
                    Ok(BlobInfo {
                        sha256: hash.to_owned(),
                        size: r.get::<_, i64>(0)? as u64,
                        media: r.get(1)?,
                        uploaded: r.get::<_, i64>(2)? as u64,
                    })
                },
            )
            .optional()
            .ok()
            .flatten()
    }

    /// Records blob `hash` (already in place on disk) as claimed by `owner`.
    fn claim(
        db: &Connection,
        hash: &str,
        size: u64,
        media: &str,
        owner: &str,
    ) -> rusqlite::Result<()> {
        db.execute(
            "INSERT OR IGNORE INTO blobs (sha256, size, type, uploaded) VALUES (?1, ?2, ?3, ?4)",
            params![hash, size as i64, media, unix_now() as i64],
        )?;
        db.execute(
            "INSERT OR IGNORE INTO owners (sha256, pubkey) VALUES (?1, ?2)",
            params![hash, owner],
        )?;
        Ok(())
    }

    /// A fresh temporary file (`.upload-<random>.part`) to receive an upload into.
    ///
    /// # Errors
    /// No randomness for its name.
    pub fn new_upload(&self) -> std::io::Result<Upload> {
        let mut r = [0u8; 12];
        getrandom::fill(&mut r).map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Upload {
            path: self.dir.join(format!(".upload-{}.part", hex::encode(r))),
            placed: false,
        })
    }

    /// Why `owner` may not store `size` more bytes under a `quota` of bytes of blobs (its
    /// blobs each counted whole, whoever else claims them too): `None` when it may, or
    /// when it claims blob `hash` already.
    ///
    /// # Errors
    /// `storage`: the index cannot be read.
    pub fn over_quota(
        &self,
        owner: &str,
        hash: Option<&str>,
        size: u64,
        quota: u64,
    ) -> Result<Option<String>, Refusal> {
        Self::quota_check(&self.db(), owner, hash, size, quota)
            .map_err(|e| refuse("storage", e.to_string()))
    }

    fn quota_check(
        db: &Connection,
        owner: &str,
        hash: Option<&str>,
        size: u64,
        quota: u64,
    ) -> rusqlite::Result<Option<String>> {
        if let Some(h) = hash
            && Self::holds(db, h, owner)?
        {
            return Ok(None);
        }
        let claimed = Self::claimed_in(db, owner)?;
        Ok((claimed.saturating_add(size) > quota).then(|| {
            format!(
                "{owner} holds {claimed} bytes of blobs; {size} more passes its quota of \
                 {quota} ([blobs] per_key_bytes)"
            )
        }))
    }

    fn holds(db: &Connection, hash: &str, owner: &str) -> rusqlite::Result<bool> {
        Ok(db
            .query_row(
                "SELECT 1 FROM owners WHERE sha256 = ?1 AND pubkey = ?2",
                params![hash, owner],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    fn claimed_in(db: &Connection, owner: &str) -> rusqlite::Result<u64> {
        db.query_row(
            "SELECT COALESCE(SUM(b.size), 0) FROM owners o JOIN blobs b ON b.sha256 = o.sha256 \
             WHERE o.pubkey = ?1",
            params![owner],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n.max(0) as u64)
    }

    /// Moves a received upload into place as blob `hash` claimed by `owner`, under the
    /// index lock (so that a release of the same blob cannot interleave), when `owner`
    /// claims it already or its blobs and this one come to at most `quota` bytes.
    ///
    /// # Errors
    /// [`std::io::ErrorKind::QuotaExceeded`] past the quota; the rename or the index write
    /// failed. The temporary file is then removed.
    pub fn place(
        &self,
        mut upload: Upload,
        hash: &str,
        size: u64,
        media: &str,
        (owner, quota): (&str, u64),
    ) -> std::io::Result<()> {
        let db = self.db();
        if let Some(why) =
            Self::quota_check(&db, owner, Some(hash), size, quota).map_err(std::io::Error::other)?
        {
            return Err(std::io::Error::new(std::io::ErrorKind::QuotaExceeded, why));
        }
        std::fs::rename(&upload.path, self.dir.join(hash))?;
        upload.placed = true;
        Self::claim(&db, hash, size, media, owner).map_err(std::io::Error::other)
    }

    /// Stores `bytes` as a blob claimed by `owner` (the node's own outputs); its hash.
    ///
    /// # Errors
    /// The file or the index cannot be written.
    pub fn put(&self, bytes: &[u8], media: &str, owner: &str) -> std::io::Result<String> {
        let hash = hex::encode(Sha256::digest(bytes));
        let path = self.dir.join(&hash);
        // under the index lock: a release of the same blob cannot remove the file between
        // the check and the claim
        let db = self.db();
        if !path.exists() {
            let mut upload = self.new_upload()?;
            std::fs::write(upload.path(), bytes)?;
            std::fs::rename(upload.path(), &path)?;
            upload.placed = true;
        }
        Self::claim(&db, &hash, bytes.len() as u64, media, owner).map_err(std::io::Error::other)?;
        Ok(hash)
    }

    /// Bytes of blob `hash`, if stored (`hash`: 64 lowercase hex digits, else `None`).
    pub fn get(&self, hash: &str) -> Option<Vec<u8>> {
        std::fs::read(self.path_of(hash)?).ok()
    }

    /// Drops `owner`'s claim on blob `hash`; the blob goes with its last claim.
    ///
    /// # Errors
    /// `storage` when the index fails.
    pub fn release(&self, hash: &str, owner: &str) -> Result<Released, Refusal> {
        let storage = |e: rusqlite::Error| refuse("storage", e.to_string());
        let db = self.db();
        let removed = db
            .execute(
                "DELETE FROM owners WHERE sha256 = ?1 AND pubkey = ?2",
                params![hash, owner],
            )
            .map_err(storage)?;
        if removed == 0 {
            return Ok(Released::NotClaimed);
        }
        let left: i64 = db
            .query_row(
                "SELECT COUNT(*) FROM owners WHERE sha256 = ?1",
                params![hash],
                |r| r.get(0),
            )
            .map_err(storage)?;
        if left > 0 {
            return Ok(Released::Kept);
        }
        db.execute("DELETE FROM blobs WHERE sha256 = ?1", params![hash])
            .map_err(storage)?;
        let _ = std::fs::remove_file(self.dir.join(hash));
        Ok(Released::Removed)
    }

    /// The blobs `owner` claims, by hash.
    ///
    /// # Errors
    /// `storage` when the index fails.
    pub fn claimed_by(&self, owner: &str) -> Result<Vec<String>, Refusal> {
        let storage = |e: rusqlite::Error| refuse("storage", e.to_string());
        let db = self.db();
        let mut q = db
            .prepare("SELECT sha256 FROM owners WHERE pubkey = ?1 ORDER BY sha256")
            .map_err(storage)?;
        let rows = q.query_map(params![owner], |r| r.get(0)).map_err(storage)?;
        rows.collect::<rusqlite::Result<Vec<String>>>()
            .map_err(storage)
    }
}

/// Opens the blob index at `path` as every store of the node is opened
/// (`fleetmesh_relay::store::sqlite`): an existing file that is empty, not SQLite or
/// damaged is refused before SQLite changes it, one from a newer build too; then it is
/// migrated to the newest version of `MIGRATIONS`.
fn open_index(path: &Path) -> Result<Connection, Refusal> {
    use fleetmesh_relay::store::sqlite;
    let fail = |e: fleetmesh_relay::Error| {
        refuse("storage", format!("the blob index {}: {e}", path.display()))
    };
    let mut db = sqlite::open(path, sqlite::Mode::CreateIfAbsent, true).map_err(fail)?;
    sqlite::migrate(&mut db, path, MIGRATIONS).map_err(fail)?;
    db.execute_batch("PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 5000;")
        .map_err(|e| refuse("storage", format!("the blob index {}: {e}", path.display())))?;
    Ok(db)
}
