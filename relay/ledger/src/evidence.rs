//! The evidence log, `DIR/ledger/evidence.jsonl`: every wire artefact the ledger acted on,
//! exactly as it arrived, one JSON object per line with the time it was recorded. The
//! ledger's state is a fold over these lines ([`crate::Ledger::apply`]), so the same file
//! gives the same decisions on any machine ([`replay`]).
//!
//! A line's id is the SHA-256 of its bytes (without the newline): decisions and reports
//! name their evidence by it.
//!
//! The file is a [`fleetmesh_proto::linelog::LineLog`]: each line goes down in one write,
//! synced, and a torn last line (a crash in the middle of a write, a full disk) is moved
//! aside into `evidence.torn-<unix time>` when the log is opened, never appended onto. The
//! log then says so itself: [`EvidenceLog::open`] appends a [`Line::Repaired`] line naming
//! the offset, the bytes cut and the file they went to, and [`replay`] reports it
//! ([`Replayed::repairs`]).

use std::io::BufRead as _;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use fleetmesh_proto::linelog::{LineLog, Torn};

use crate::{Decision, Ledger, LedgerError, Result};

/// The longest line the log takes or reads (a grant event or a receipt is far smaller).
pub const MAX_LINE: usize = 256 << 10;

/// What the node measured of one peer's traffic in one window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Events received from the peer (pushed by it or fetched from it).
    pub events_in: u64,
    /// Bytes of NIP-01 text received from it.
    pub bytes_in: u64,
    /// Events sent to it.
    pub events_out: u64,
    /// Bytes sent to it.
    pub bytes_out: u64,
    /// Its events outside the shards agreed with it.
    pub out_of_filter: u64,
    /// Its frames that were not NIP-01 messages, or events of the wrong shape.
    pub malformed: u64,
    /// Its events whose id or signature did not hold.
    pub forged: u64,
    /// What it sent, per shard of our grant to it (in the grant's order; absent when the
    /// grant names none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<fleetmesh_proto::ledger::Moved>,
    /// Blossom bytes its key uploaded to us (measured, not judged: its node signs no
    /// receipt for them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub blob_in: u64,
    /// Blossom bytes served to its key.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub blob_out: u64,
}

#[allow(clippy::trivially_copy_pass_by_ref)]
pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl From<fleetmesh_relay::face::TallyCounts> for Counts {
    /// A peer's tally for a window: what the ledger measures it by (the refusals for a
    /// limit or a rate are the relay's business, not evidence against the peer).
    fn from(c: fleetmesh_relay::face::TallyCounts) -> Counts {
        Counts {
            events_in: c.events_in,
            bytes_in: c.bytes_in,
            events_out: c.events_out,
            bytes_out: c.bytes_out,
            out_of_filter: c.out_of_filter,
            malformed: c.malformed,
            forged: c.forged,
            shards: Vec::new(),
            blob_in: c.blob_in,
            blob_out: c.blob_out,
        }
    }
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Line {
    /// The log's owner: the first line.
    Node {
        /// Recorded at (Unix seconds).
        at: u64,
        /// The node's Nostr key (x-only, hex).
        pubkey: String,
    },
    /// A grant (kind 30801) between the node and `peer`: one the node issued, or one the
    /// peer sent it.
    Grant {
        /// Recorded at.
        at: u64,
        /// The other side of the pair.
        peer: String,
        /// The signed event, as received.
        event: Value,
    },
    /// A budget/1.0 receipt the peer sent, as received.
    Receipt {
        /// Recorded at.
        at: u64,
        /// The peer it came from (the link's authenticated key).
        peer: String,
        /// The receipt.
        receipt: Value,
    },
    /// A receipt the node sent the peer: its own chain.
    Sent {
        /// Recorded at.
        at: u64,
        /// The peer it went to.
        peer: String,
        /// The receipt.
        receipt: Value,
    },
    /// The node's own measurement of a window, written once the window is over (and its
    /// receipts had time to arrive): the line that has the window judged.
    Measure {
        /// Recorded at.
        at: u64,
        /// The peer.
        peer: String,
        /// The window number (Unix time / window_secs).
        window: u64,
        /// The window length.
        window_secs: u64,
        /// What was measured.
        counts: Counts,
    },
    /// A payment between the node and `peer` ([`crate::settlement`]): measured, never
    /// judged.
    Settled {
        /// Recorded at.
        at: u64,
        /// The other side.
        peer: String,
        /// The payment.
        settlement: crate::settlement::Settlement,
    },
    /// The operator revoked the node's grant to `peer`.
    Revoke {
        /// Recorded at.
        at: u64,
        /// The peer.
        peer: String,
    },
    /// A torn last line was cut from the log when it was opened ([`EvidenceLog::open`]):
    /// the bytes from `offset` to the end of the file then (`bytes` of them) were moved to
    /// `moved_to`, beside the log, and the log went on from `offset`. Changes no state: a
    /// torn line was never a record.
    Repaired {
        /// Recorded at.
        at: u64,
        /// Where the log was cut: the end of its last whole line, in bytes from the start
        /// of the file (of this segment).
        offset: u64,
        /// How many bytes were cut.
        bytes: u64,
        /// The file's name they were moved to, in the log's directory
        /// (`evidence.torn-<unix time>`).
        moved_to: String,
    },
    /// The ledger's state where a new segment of the log begins (after its `node` line):
    /// a segment replays alone from it ([`Books::rotate`](crate::Books::rotate)).
    Checkpoint {
        /// Recorded at.
        at: u64,
        /// SHA-256 (hex) of the segment before, whose fold this state is.
        previous: String,
        /// [`crate::ladder::Snapshot`] of the state.
        state: Value,
    },
}

impl Line {
    /// The peer the line is about (`None` for the node and checkpoint lines).
    pub fn peer(&self) -> Option<&str> {
        match self {
            Line::Node { .. } | Line::Checkpoint { .. } | Line::Repaired { .. } => None,
            Line::Grant { peer, .. }
            | Line::Receipt { peer, .. }
            | Line::Sent { peer, .. }
            | Line::Measure { peer, .. }
            | Line::Settled { peer, .. }
            | Line::Revoke { peer, .. } => Some(peer),
        }
    }
}

/// A line's id: SHA-256 of its bytes, hex.
pub fn line_id(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The append-only log file.
#[derive(Debug)]
pub struct EvidenceLog {
    log: LineLog,
    /// The torn tail moved aside when it was opened.
    repaired: Option<Torn>,
}

fn log_err(e: fleetmesh_proto::Error) -> LedgerError {
    match e {
        fleetmesh_proto::Error::Io { path, source, .. } => LedgerError::Log {
            path: path.display().to_string(),
            source,
        },
        other => LedgerError::Log {
            path: String::new(),
            source: std::io::Error::other(other.to_string()),
        },
    }
}

/// Whether `bytes` are a line of the log (they parse as one).
fn is_line(bytes: &[u8]) -> bool {
    serde_json::from_slice::<Line>(bytes).is_ok()
}

impl EvidenceLog {
    /// Opens (creating) the log at `path` for appending. A torn last line — no newline, or
    /// not a [`Line`] — is moved aside first ([`fleetmesh_proto::linelog`]), and a
    /// [`Line::Repaired`] line recorded at `now` says so.
    ///
    /// # Errors
    /// [`LedgerError::Log`].
    pub fn open(path: &Path, now: u64) -> Result<EvidenceLog> {
        let (log, torn) = LineLog::open(path, now, MAX_LINE, is_line).map_err(log_err)?;
        let mut log = EvidenceLog {
            log,
            repaired: None,
        };
        if let Some(torn) = torn {
            log.append(&Line::Repaired {
                at: now,
                offset: torn.offset,
                bytes: torn.bytes,
                moved_to: torn
                    .moved_to
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            })?;
            log.repaired = Some(torn);
        }
        Ok(log)
    }

    /// The torn tail moved aside when it was opened, if there was one.
    pub fn repaired(&self) -> Option<&Torn> {
        self.repaired.as_ref()
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.log.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.log.is_empty()
    }

    /// Appends `line` (one write of the whole line, synced) and returns its text and id.
    ///
    /// # Errors
    /// [`LedgerError::Log`]; nothing of the line stays in the file then.
    pub fn append(&mut self, line: &Line) -> Result<(String, String)> {
        let text = serde_json::to_string(line).expect("a line serializes");
        self.log.append(text.as_bytes()).map_err(log_err)?;
        let id = line_id(&text);
        Ok((text, id))
    }
}

/// A line of a log that was not taken: its number (from 1) and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refused {
    /// The line number.
    pub line: usize,
    /// Why.
    pub reason: String,
}

/// A torn tail the node cut from the log (a [`Line::Repaired`] line), as a replay reports
/// it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Repair {
    /// The `repaired` line's number (from 1, on across the files replayed).
    pub line: usize,
    /// The segment it is in (the file as given), whose bytes `offset` counts.
    pub log: String,
    /// When the node cut it.
    pub at: u64,
    /// Where the log was cut.
    pub offset: u64,
    /// How many bytes were cut.
    pub bytes: u64,
    /// The file they were moved to, in the log's directory.
    pub moved_to: String,
}

/// What a replay found.
#[derive(Debug, Default)]
pub struct Replayed {
    /// The ledger after the last line.
    pub ledger: Ledger,
    /// Every decision, in the order taken.
    pub decisions: Vec<Decision>,
    /// Lines not taken.
    pub refused: Vec<Refused>,
    /// The torn tails the node cut from the log, in order.
    pub repairs: Vec<Repair>,
}

impl Replayed {
    /// How many decisions the node had taken before the first line replayed (those of the
    /// segments before a checkpoint it began from).
    pub fn decided_before(&self) -> usize {
        usize::try_from(self.ledger.decided())
            .unwrap_or(usize::MAX)
            .saturating_sub(self.decisions.len())
    }
}

/// Recomputes every decision from the log at `path` alone: each line through
/// [`Ledger::apply`], in order. Lines that do not parse are listed, never fatal. A segment
/// that begins with a checkpoint replays from its state. The torn tails the node cut from
/// the log ([`Line::Repaired`]) are listed in [`Replayed::repairs`].
///
/// # Errors
/// [`LedgerError::Log`] when the file cannot be read.
pub fn replay(path: &Path) -> Result<Replayed> {
    replay_all(&[path])
}

/// [`replay`] of several segments in order, as one log: each checkpoint must match the
/// fold of the segments before it (else it is refused, naming the line). Line numbers
/// count on across the files.
///
/// # Errors
/// [`LedgerError::Log`] when a file cannot be read.
pub fn replay_all(paths: &[&Path]) -> Result<Replayed> {
    let mut out = Replayed::default();
    let mut n = 0;
    for path in paths {
        replay_into(path, &mut out, &mut n)?;
    }
    Ok(out)
}

fn replay_into(path: &Path, out: &mut Replayed, n: &mut usize) -> Result<()> {
    each_line(path, n, |n, text| match text {
        Err(reason) => out.refused.push(Refused { line: n, reason }),
        Ok(text) => match out.ledger.apply(text) {
            Ok(mut d) => {
                out.decisions.append(&mut d);
                if text.contains("\"repaired\"")
                    && let Ok(Line::Repaired {
                        at,
                        offset,
                        bytes,
                        moved_to,
                    }) = serde_json::from_str(text)
                {
                    out.repairs.push(Repair {
                        line: n,
                        log: path.display().to_string(),
                        at,
                        offset,
                        bytes,
                        moved_to,
                    });
                }
            }
            Err(reason) => out.refused.push(Refused { line: n, reason }),
        },
    })
}

/// Calls `f` with each non-blank line of the log at `path` (numbered on from `n`): its
/// text, or why it cannot be read as one (too long, not UTF-8).
fn each_line(
    path: &Path,
    n: &mut usize,
    mut f: impl FnMut(usize, std::result::Result<&str, String>),
) -> Result<()> {
    let err = |source| LedgerError::Log {
        path: path.display().to_string(),
        source,
    };
    let file = std::fs::File::open(path).map_err(err)?;
    let mut reader = std::io::BufReader::new(file);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let got = std::io::Read::take(&mut reader, MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(err)?;
        if got == 0 {
            break;
        }
        *n += 1;
        let n = *n;
        if buf.len() > MAX_LINE && buf.last() != Some(&b'\n') {
            f(n, Err(format!("longer than {MAX_LINE} bytes")));
            // Skip the rest of the long line.
            let mut rest = Vec::new();
            reader.read_until(b'\n', &mut rest).map_err(err)?;
            continue;
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        match std::str::from_utf8(&buf) {
            Ok(text) if text.trim().is_empty() => {}
            Ok(text) => f(n, Ok(text)),
            Err(_) => f(n, Err("not UTF-8".into())),
        }
    }
    Ok(())
}

/// A `settled` line of a log ([`Line::Settled`]), with its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SettledLine {
    /// The line's id.
    pub id: String,
    /// Recorded at.
    pub at: u64,
    /// The other side.
    pub peer: String,
    /// The payment.
    #[serde(flatten)]
    pub settlement: crate::settlement::Settlement,
}

/// The payments recorded in the log segments at `paths`, in order: what
/// `meshnode ledger show --settlements` lists (lines that do not read are left out, as
/// [`replay`] names them).
///
/// # Errors
/// [`LedgerError::Log`] when a file cannot be read.
pub fn settlements(paths: &[&Path]) -> Result<Vec<SettledLine>> {
    let mut out = Vec::new();
    let mut n = 0;
    for path in paths {
        each_line(path, &mut n, |_, text| {
            let Ok(text) = text else { return };
            if let Ok(Line::Settled {
                at,
                peer,
                settlement,
            }) = serde_json::from_str(text)
            {
                out.push(SettledLine {
                    id: line_id(text),
                    at,
                    peer,
                    settlement,
                });
            }
        })?;
    }
    Ok(out)
}

/// SHA-256 (hex) of the file at `path`, read in pieces.
///
/// # Errors
/// [`LedgerError::Log`].
pub fn file_digest(path: &Path) -> Result<String> {
    let err = |source| LedgerError::Log {
        path: path.display().to_string(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(err)?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).map_err(err)?;
    Ok(hex::encode(h.finalize()))
}
