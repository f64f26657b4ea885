//! Append-only line logs: files of records, one per line, that a node only ever appends to
//! (the ledger's evidence log is one). Shared here, below every crate that keeps one, so
//! that each keeps it the same way:
//!
//! - **One write per record.** [`LineLog::append`] builds the whole line, its `\n`
//!   included, in one buffer and hands it to the file in one `write_all`, then
//!   `fdatasync`s it: a record is on disk whole before the call returns. A write or sync
//!   that fails cuts the file back to the end of its last whole line, so the next append
//!   never lands on a torn one (when even that cut fails, the log takes no more appends
//!   until it is opened again, which repairs it).
//! - **A torn tail is moved aside, never appended onto.** A crash in the middle of a
//!   write, or a full disk, can leave the last line incomplete. [`LineLog::open`] looks at
//!   the last line: one without its `\n`, or one that the caller's check says is not a
//!   record, is *torn*. Its bytes are copied into a new file beside the log,
//!   `<stem>.torn-<unix time>` (`evidence.torn-1800000000` for `evidence.jsonl`; a name
//!   already taken moves on a second: nothing is overwritten), which is synced before the
//!   log is truncated back to the end of its last whole line. A `WARN` names the offset,
//!   the byte count and the file, and [`LineLog::open`] returns them ([`Torn`]) so that the
//!   caller records the repair in the log itself. Nothing is ever deleted, and a damaged
//!   log is never recreated: only its tail moves.
//!
//! Only the last line is looked at: a damaged line in the middle of a log is the reader's
//! to refuse (it is whole, and a line after it says the log went on).
//!
//! One writer at a time: the caller holds whatever lock keeps a second process off the
//! file while a [`LineLog`] is open.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// How much is read at a time while looking back for the last line.
const CHUNK: u64 = 64 << 10;

/// A torn tail that [`LineLog::open`] moved aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Torn {
    /// Where the log was cut: the end of its last whole line, in bytes from the start.
    pub offset: u64,
    /// How many bytes were cut (and moved).
    pub bytes: u64,
    /// The file they were moved to, beside the log.
    pub moved_to: PathBuf,
}

/// An append-only log of lines, open for appending.
#[derive(Debug)]
pub struct LineLog {
    path: PathBuf,
    file: File,
    /// Its length in bytes: always the end of a whole line.
    len: u64,
    /// A failed append could not be cut back: no more appends until it is reopened.
    poisoned: bool,
}

impl LineLog {
    /// Opens (creating) the log at `path` for appending, and its directory if need be.
    /// A torn last line is moved aside first (see the module's docs): one without its
    /// `\n`, or a whole one longer than `max_line` bytes, or one that `whole` says is not
    /// a record (a blank line is never torn). `now` (Unix seconds) names the file the tail
    /// goes to. Returns the log, and what was cut when something was.
    ///
    /// # Errors
    /// [`Error::Io`]: the file cannot be opened, read or cut, or the tail cannot be
    /// written aside (then the log is left as it was).
    pub fn open(
        path: &Path,
        now: u64,
        max_line: usize,
        whole: impl Fn(&[u8]) -> bool,
    ) -> Result<(LineLog, Option<Torn>)> {
        let io = |op| move |source| io_err(op, path, source);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io("creating the directory of"))?;
        }
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(io("opening"))?;
        let len = file.metadata().map_err(io("reading"))?.len();
        let cut = torn_from(&mut file, len, max_line, &whole).map_err(io("reading"))?;
        let torn = match cut {
            Some(offset) => Some(move_aside(path, &mut file, offset, len, now)?),
            None => None,
        };
        let len = torn.as_ref().map_or(len, |t| t.offset);
        Ok((
            LineLog {
                path: path.to_owned(),
                file,
                len,
                poisoned: false,
            },
            torn,
        ))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `line` and its `\n` in one write, synced (`fdatasync`) before it returns.
    /// Returns the offset the line begins at. On failure the file is cut back to where it
    /// was, so that nothing of the line stays.
    ///
    /// # Errors
    /// [`Error::Io`]: `line` holds a `\n` (nothing written), the write or the sync failed,
    /// or an earlier append failed and could not be undone (reopen the log: that repairs
    /// it).
    pub fn append(&mut self, line: &[u8]) -> Result<u64> {
        let io = |source| io_err("appending to", &self.path, source);
        if self.poisoned {
            return Err(io(std::io::Error::other(
                "an earlier append could not be cut back: reopen the log",
            )));
        }
        if line.contains(&b'\n') {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a record holding a newline",
            )));
        }
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line);
        buf.push(b'\n');
        let at = self.len;
        if let Err(e) = self
            .file
            .write_all(&buf)
            .and_then(|()| self.file.sync_data())
        {
            if let Err(cut) = self.file.set_len(at) {
                tracing::warn!(
                    path = %self.path.display(), offset = at, error = %cut,
                    "a failed append could not be cut back: the log takes no more until reopened"
                );
                self.poisoned = true;
            }
            return Err(io(e));
        }
        self.len += buf.len() as u64;
        Ok(at)
    }
}

fn io_err(op: &'static str, path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// Where the torn tail of the `len` bytes of `file` begins, if it has one.
fn torn_from(
    file: &mut File,
    len: u64,
    max_line: usize,
    whole: &impl Fn(&[u8]) -> bool,
) -> std::io::Result<Option<u64>> {
    if len == 0 {
        return Ok(None);
    }
    let mut last = [0u8];
    file.seek(SeekFrom::Start(len - 1))?;
    file.read_exact(&mut last)?;
    if last[0] != b'\n' {
        // no `\n`: the line after the last one is torn
        return Ok(Some(line_start(file, len)?));
    }
    let start = line_start(file, len - 1)?;
    let size = len - 1 - start;
    if size > max_line as u64 {
        return Ok(Some(start));
    }
    let mut text = vec![0u8; usize::try_from(size).unwrap_or(usize::MAX)];
    file.seek(SeekFrom::Start(start))?;
    file.read_exact(&mut text)?;
    Ok((!text.trim_ascii().is_empty() && !whole(&text)).then_some(start))
}

/// Where the line that ends at `end` begins: just after the last `\n` before `end`, or 0.
fn line_start(file: &mut File, end: u64) -> std::io::Result<u64> {
    let mut buf = vec![0u8; CHUNK as usize];
    let mut hi = end;
    while hi > 0 {
        let lo = hi.saturating_sub(CHUNK);
        let n = (hi - lo) as usize;
        file.seek(SeekFrom::Start(lo))?;
        file.read_exact(&mut buf[..n])?;
        if let Some(i) = buf[..n].iter().rposition(|&b| b == b'\n') {
            return Ok(lo + i as u64 + 1);
        }
        hi = lo;
    }
    Ok(0)
}

/// Copies `file`'s bytes from `offset` to `len` into a new file beside `path`, syncs it,
/// then cuts `file` back to `offset`.
fn move_aside(path: &Path, file: &mut File, offset: u64, len: u64, now: u64) -> Result<Torn> {
    let stem = path
        .file_stem()
        .map_or_else(|| "log".into(), |s| s.to_string_lossy().into_owned());
    let dir = path.parent().unwrap_or(Path::new(""));
    let mut t = now;
    let (aside, mut out) = loop {
        let aside = dir.join(format!("{stem}.torn-{t}"));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&aside)
        {
            Ok(out) => break (aside, out),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => t += 1,
            Err(e) => return Err(io_err("moving a torn tail aside to", &aside, e)),
        }
    };
    match copy_tail(file, offset, len, &mut out) {
        Ok(n) if n == len - offset => {}
        Ok(n) => {
            return Err(io_err(
                "moving a torn tail aside to",
                &aside,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("{n} of {} bytes copied", len - offset),
                ),
            ));
        }
        Err(e) => return Err(io_err("moving a torn tail aside to", &aside, e)),
    }
    // the new name is durable before the log loses the bytes it holds
    if let Ok(d) = File::open(if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    }) {
        let _ = d.sync_all();
    }
    file.set_len(offset)
        .and_then(|()| file.sync_all())
        .map_err(|e| io_err("cutting the torn tail of", path, e))?;
    let bytes = len - offset;
    tracing::warn!(
        path = %path.display(), offset, bytes, moved_to = %aside.display(),
        "a torn last line of an append-only log was moved aside; the log goes on from its last whole line"
    );
    Ok(Torn {
        offset,
        bytes,
        moved_to: aside,
    })
}

/// Copies `file`'s bytes from `offset` to `len` into `out`, synced; returns how many.
fn copy_tail(file: &mut File, offset: u64, len: u64, out: &mut File) -> std::io::Result<u64> {
    file.seek(SeekFrom::Start(offset))?;
    let n = std::io::copy(&mut std::io::Read::take(&mut *file, len - offset), out)?;
    out.sync_all()?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_json(b: &[u8]) -> bool {
        serde_json::from_slice::<serde_json::Value>(b).is_ok()
    }

    fn torn_files(dir: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains(".torn-"))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn whole_lines_are_appended_and_a_whole_log_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("log.jsonl");
        let (mut log, torn) = LineLog::open(&path, 100, 1024, is_json).unwrap();
        assert!(torn.is_none() && log.is_empty());
        assert_eq!(log.append(b"{\"a\":1}").unwrap(), 0);
        assert_eq!(log.append(b"{\"b\":2}").unwrap(), 8);
        assert!(log.append(b"{}\n{}").is_err());
        drop(log);
        let before = std::fs::read(&path).unwrap();
        assert_eq!(before, b"{\"a\":1}\n{\"b\":2}\n");
        let (log, torn) = LineLog::open(&path, 100, 1024, is_json).unwrap();
        assert!(torn.is_none());
        assert_eq!(log.len(), before.len() as u64);
        assert_eq!(std::fs::read(&path).unwrap(), before);
        assert!(torn_files(path.parent().unwrap()).is_empty());
    }

    #[test]
    fn a_torn_tail_is_moved_aside_at_every_cut_and_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let whole = b"{\"a\":1}\n{\"b\":2}\n".to_vec();
        let last = b"{\"c\":\"three\"}\n";
        for cut in 1..last.len() {
            std::fs::write(&path, [&whole[..], &last[..cut]].concat()).unwrap();
            let (mut log, torn) = LineLog::open(&path, 100, 1024, is_json).unwrap();
            let torn = torn.unwrap_or_else(|| panic!("a cut at {cut} is not seen"));
            assert_eq!((torn.offset, torn.bytes), (whole.len() as u64, cut as u64));
            assert_eq!(std::fs::read(&torn.moved_to).unwrap(), &last[..cut]);
            log.append(b"{\"d\":4}").unwrap();
            assert_eq!(
                std::fs::read(&path).unwrap(),
                [&whole[..], b"{\"d\":4}\n"].concat()
            );
        }
        // every tail kept, each in its own file (names taken move on a second)
        let kept = torn_files(dir.path());
        assert_eq!(kept.len(), last.len() - 1);
        assert!(kept[0].ends_with("log.torn-100"));
        // a final line with its newline that is not a record: moved aside, newline and all
        std::fs::write(&path, [&whole[..], b"{\"x\":{\"d\":4}\n"].concat()).unwrap();
        let (_, torn) = LineLog::open(&path, 100, 1024, is_json).unwrap();
        let torn = torn.unwrap();
        assert_eq!((torn.offset, torn.bytes), (whole.len() as u64, 13));
        // a final line longer than the longest taken; a file with no newline at all
        std::fs::write(&path, [&whole[..], &[b' '; 2000][..], b"{}\n"].concat()).unwrap();
        let (_, torn) = LineLog::open(&path, 100, 1024, is_json).unwrap();
        assert_eq!(torn.unwrap().bytes, 2003);
        std::fs::write(&path, vec![b'x'; 200_000]).unwrap();
        let (log, torn) = LineLog::open(&path, 100, 1024, is_json).unwrap();
        assert_eq!((torn.unwrap().offset, log.len()), (0, 0));
        // a blank last line is not torn
        std::fs::write(&path, [&whole[..], b"\n"].concat()).unwrap();
        assert!(
            LineLog::open(&path, 100, 1024, is_json)
                .unwrap()
                .1
                .is_none()
        );
    }
}
