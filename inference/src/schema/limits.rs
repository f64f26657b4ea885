//! What compiling one schema may spend, and how many compile at once.
//!
//! A schema arrives from a stranger (a completions request's `response_format`, a job's
//! `output_schema`, a remote executor's request), so its compilation is bounded like any
//! other work a request causes:
//!
//! - **in size** — each bound is refused up front with [`crate::Error::Schema`] naming the
//!   keyword: a `pattern`'s source ([`MAX_PATTERN_BYTES`]), its counted repetitions
//!   ([`MAX_REPEAT`]), its NFA and DFA in bytes (`pattern.rs`), the compiled schema's nodes
//!   ([`MAX_NODES`]) and its `enum`/`const` values ([`MAX_LITERALS`], [`MAX_LITERAL_BYTES`]);
//! - **in time** — [`CompileLimits`] carries a deadline and a cancel flag, checked between
//!   the steps of a compilation (each schema node, each pattern and every few hundred of
//!   its states, each `oneOf` comparison, each state of the vocabulary walk): past the
//!   deadline the compilation is refused naming where it was; a cancelled one (the client
//!   went away, or [`stop_compiles`] at shutdown) is [`crate::Error::Abandoned`];
//! - **node-wide** — at most [`MAX_COMPILES`] compilations run at once in the process
//!   (each holds a slot until it returns); a compilation that cannot get a slot before its
//!   deadline is [`crate::Error::Abandoned`] too. Together these bound a node's memory for
//!   schema compilation to [`MAX_COMPILES`] × one compilation's bytes, whatever the
//!   requests.
//!
//! Run a compilation where it can be abandoned (a blocking thread whose caller may go
//! away): [`super::Grammar::compile_within`] with the request's cancel flag.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// Most bytes of one `pattern`'s source.
pub const MAX_PATTERN_BYTES: usize = 4096;
/// Most repetitions a counted repetition (`{n}`, `{n,m}`, `{n,}`) of a `pattern` may
/// name.
pub const MAX_REPEAT: u32 = 1000;
/// Most nodes of one compiled schema (each schema object is one, plus one per `anyOf`/
/// `oneOf` branch).
pub const MAX_NODES: usize = 16_384;
/// Most `enum`/`const` values in one schema, all nodes together.
pub const MAX_LITERALS: usize = 65_536;
/// Most bytes of `enum`/`const` values (serialized) in one schema, all nodes together.
pub const MAX_LITERAL_BYTES: usize = 1 << 20;
/// Most compilations running at once in the process.
pub const MAX_COMPILES: usize = 2;
/// How long a compilation may take by default (waiting for a slot included).
pub const DEFAULT_COMPILE_TIME: Duration = Duration::from_secs(5);

/// Set by [`stop_compiles`]: every compilation stops at its next check.
static STOPPING: AtomicBool = AtomicBool::new(false);
/// Compilations running now.
static RUNNING: Mutex<usize> = Mutex::new(0);
static FREED: Condvar = Condvar::new();

/// Stops every schema compilation in the process at its next check, and refuses new ones
/// (the node is shutting down).
pub fn stop_compiles() {
    STOPPING.store(true, Ordering::Relaxed);
    FREED.notify_all();
}

/// A compilation's deadline and cancel flag.
#[derive(Debug, Clone)]
pub struct CompileLimits {
    deadline: Instant,
    time: Duration,
    cancel: Option<Arc<AtomicBool>>,
}

impl Default for CompileLimits {
    fn default() -> CompileLimits {
        CompileLimits::new(DEFAULT_COMPILE_TIME)
    }
}

impl CompileLimits {
    /// A compilation that may take `time` from now.
    pub fn new(time: Duration) -> CompileLimits {
        CompileLimits {
            deadline: Instant::now() + time,
            time,
            cancel: None,
        }
    }

    /// The same, stopping once `cancel` is set (by whoever gave up waiting for it).
    #[must_use]
    pub fn with_cancel(mut self, cancel: Arc<AtomicBool>) -> CompileLimits {
        self.cancel = Some(cancel);
        self
    }

    /// Whether the compilation may go on, at schema location `at` compiling `what`.
    ///
    /// # Errors
    /// [`Error::Abandoned`] when cancelled or the process is stopping; [`Error::Schema`]
    /// naming `what` and `at` past the deadline.
    pub(crate) fn check(&self, at: &str, what: &str) -> Result<()> {
        if STOPPING.load(Ordering::Relaxed) {
            return Err(Error::Abandoned("the node is stopping".into()));
        }
        if self
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            return Err(Error::Abandoned("its requester went away".into()));
        }
        if Instant::now() > self.deadline {
            return Err(super::compile::schema_err(
                at,
                format!(
                    "{what}: compiling the schema took longer than {} ms",
                    self.time.as_millis()
                ),
            ));
        }
        Ok(())
    }

    /// One of the [`MAX_COMPILES`] slots, waited for until the deadline.
    ///
    /// # Errors
    /// [`Error::Abandoned`] when none is free by then, or the wait was cancelled.
    pub(crate) fn slot(&self) -> Result<Slot> {
        let mut running = RUNNING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            if let Err(e) = self.check("", "waiting") {
                return Err(match e {
                    Error::Schema { .. } => Error::Abandoned(format!(
                        "{MAX_COMPILES} schemas were being compiled for longer than {} ms; \
                         retry shortly",
                        self.time.as_millis()
                    )),
                    e => e,
                });
            }
            if *running < MAX_COMPILES {
                *running += 1;
                return Ok(Slot);
            }
            // woken when a slot frees; the timeout re-checks the cancel flag
            running = FREED
                .wait_timeout(running, Duration::from_millis(20))
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}

impl super::compile::Compiler<'_> {
    /// Whether the compilation may add a node at `at`: fewer than [`MAX_NODES`] so far, and
    /// its deadline not passed.
    pub(super) fn room_for_a_node(&self, at: &str) -> Result<()> {
        if self.nodes.len() >= MAX_NODES {
            return Err(super::compile::schema_err(
                at,
                format!("the schema needs more than {MAX_NODES} nodes"),
            ));
        }
        self.limits.check(at, "the schema")
    }

    /// Counts `lits`, the `enum`/`const` values at `at`, toward the schema's bounds.
    pub(super) fn count_literals(&mut self, lits: &[Vec<u8>], at: &str) -> Result<()> {
        self.literals.0 += lits.len();
        self.literals.1 += lits.iter().map(Vec::len).sum::<usize>();
        if self.literals.0 > MAX_LITERALS || self.literals.1 > MAX_LITERAL_BYTES {
            return Err(super::compile::schema_err(
                at,
                format!(
                    "`enum`/`const`: the schema's values pass {MAX_LITERALS} values or \
                     {MAX_LITERAL_BYTES} bytes in all"
                ),
            ));
        }
        Ok(())
    }
}

/// A compilation slot, given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot;

impl Drop for Slot {
    fn drop(&mut self) {
        let mut running = RUNNING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *running -= 1;
        FREED.notify_one();
    }
}

/// Compilations running now (for tests and metrics).
pub fn compiles_running() -> usize {
    *RUNNING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancelled_and_late_compilations_stop_and_slots_are_bounded() {
        let cancel = Arc::new(AtomicBool::new(false));
        let l = CompileLimits::new(Duration::from_secs(60)).with_cancel(cancel.clone());
        assert!(l.check("/a", "x").is_ok());
        cancel.store(true, Ordering::Relaxed);
        assert!(matches!(l.check("/a", "x"), Err(Error::Abandoned(_))));
        let late = CompileLimits::new(Duration::ZERO);
        std::thread::sleep(Duration::from_millis(2));
        let e = late
            .check("/properties/p", "`pattern`")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("#/properties/p") && e.contains("`pattern`"),
            "{e}"
        );
        // every slot taken: the next waits until its deadline, then gives up
        let held: Vec<Slot> = (0..MAX_COMPILES)
            .map(|_| CompileLimits::default().slot().unwrap())
            .collect();
        let e = CompileLimits::new(Duration::from_millis(50))
            .slot()
            .unwrap_err();
        assert!(matches!(e, Error::Abandoned(_)), "{e}");
        drop(held);
        assert!(CompileLimits::default().slot().is_ok());
    }
}
