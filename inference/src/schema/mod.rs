//! `schema-bounds`: generations constrained to JSON documents valid under a JSON Schema.
//!
//! [`Grammar::compile`] takes a schema in the supported subset — `type` (one or a list),
//! `enum`, `const`, `properties`, `required`, `additionalProperties` (false, true or a
//! schema), `items` (or `false`), `prefixItems`, `minItems`/`maxItems`, `uniqueItems` over
//! `enum`/`const` items (`unique.rs`),
//! `minLength`/`maxLength`, `minimum`/`maximum`/`exclusiveMinimum`/`exclusiveMaximum` and
//! whole `multipleOf` (integers exactly, other numbers as decimals of up to 15
//! significant digits, exactly), `pattern` and `format` (date, time, date-time,
//! uuid, email, ipv4, ipv6, uri) on strings, `anyOf`/`oneOf` (`alts.rs`; a `oneOf` only
//! where its branches exclude each other, `one_of.rs`), `allOf` where its parts combine
//! into one schema (`all_of.rs`), `$ref` within the document (`$defs`,
//! `definitions`, recursion) and annotations (`title`, `description`, …) — and refuses
//! any other keyword up front with [`crate::Error::Schema`], never
//! ignoring one. A [`Matcher`] then follows a generation byte by byte; at each step a
//! [`Constraint`] masks every token whose bytes no valid document continues with, and
//! every token after which the shortest way to close the document no longer fits in the
//! tokens left (so generation always ends with a whole document within `max_tokens`,
//! provided the vocabulary has a token per byte, as byte-level and byte-fallback
//! vocabularies do; [`TokenVocab::writes`] checks any other vocabulary before generating).
//! Between tokens a document holds at most one space in a row unless
//! [`Grammar::with_whitespace`] says otherwise ([`Whitespace`]). The allowed ids are a
//! [`TokenMask`] bitset; inside strings they come from an index by character count
//! (`in_string.rs`) and inside keys that may be new from one by what follows their text
//! (`in_key.rs`), so a step costs tens of microseconds at a 128k vocabulary.
//!
//! Whatever produced a text — the constrained local runtime, a remote executor, an
//! unconstrained run — [`Grammar::validate`] checks it with the `jsonschema` crate, an
//! implementation independent of the matcher, with `format` asserted: that check is the
//! verdict.
//!
//! ```
//! use std::sync::Arc;
//! use fleetmesh_inference::schema::{Grammar, Matcher};
//! let g = Grammar::compile(&serde_json::json!({
//!     "type": "object",
//!     "properties": {"ok": {"type": "boolean"}},
//!     "required": ["ok"],
//!     "additionalProperties": false
//! })).unwrap();
//! let mut m = Matcher::new(Arc::new(g));
//! assert!(m.feed_all(br#"{"ok":"#));
//! assert_eq!(m.remaining(), 5); // `true}`
//! assert!(!m.clone().feed(b'"'));
//! ```

mod all_of;
mod alts;
mod check;
mod compile;
mod in_key;
mod in_string;
mod limits;
mod mask;
mod matcher;
mod numbers;
mod one_of;
mod pattern;
mod text;
mod unique;
mod utf8;
mod vocab;

use std::sync::Arc;

pub use check::{SchemaCheck, Validation};
pub use compile::{Grammar, Whitespace};
pub use limits::{
    CompileLimits, DEFAULT_COMPILE_TIME, MAX_COMPILES, MAX_LITERAL_BYTES, MAX_LITERALS, MAX_NODES,
    MAX_PATTERN_BYTES, MAX_REPEAT, compiles_running, stop_compiles,
};
pub use mask::TokenMask;
pub use matcher::{MAX_READINGS, Matcher};
pub use vocab::TokenVocab;

use crate::{Error, Result};

/// One generation's schema constraint: the matcher's state, the vocabulary's bytes and
/// the tokens left.
#[derive(Debug, Clone)]
pub struct Constraint {
    matcher: Matcher,
    vocab: Arc<TokenVocab>,
    end_ids: Vec<u32>,
    budget: usize,
    state: State,
    /// The last mask, its memory reused.
    allowed: TokenMask,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    /// The document is whole and the generation ends.
    Finished,
    /// No token can continue (a vocabulary without a token for a byte the document
    /// needs); the generation ends short of a document.
    Stuck,
}

impl Constraint {
    /// A constraint to `grammar` over `vocab`; `end_ids` (end of sequence) are allowed
    /// only where the text so far is a whole document.
    pub fn new(grammar: Arc<Grammar>, vocab: Arc<TokenVocab>, end_ids: Vec<u32>) -> Constraint {
        Constraint {
            matcher: Matcher::new(grammar),
            vocab,
            end_ids,
            budget: usize::MAX,
            state: State::Open,
            allowed: TokenMask::new(0),
        }
    }

    /// Sets how many tokens the generation may take (its `max_tokens`, or less where the
    /// context ends first).
    ///
    /// # Errors
    /// [`Error::Request`] when the shortest valid document is longer than that.
    pub fn start(&mut self, budget: usize) -> Result<()> {
        let need = self.matcher.remaining();
        if need > budget {
            return Err(Error::Request(format!(
                "max_tokens {budget} is too few for this schema: its shortest document takes \
                 {need} tokens"
            )));
        }
        self.budget = budget;
        Ok(())
    }

    /// The ids the constraint allows next among `0..len` (a model's logits may be longer
    /// than its vocabulary); None when none is left (the generation then ends: finished
    /// when the document is whole, stuck otherwise). A sampler that draws among these
    /// ids needs no masked copy of the logits.
    pub fn allow(&mut self, len: usize) -> Option<&TokenMask> {
        if self.state != State::Open {
            return None;
        }
        let allowed = &mut self.allowed;
        allowed.reset(len);
        let after = self.budget.saturating_sub(1);
        let mut n = self.vocab.allowed(&self.matcher, after, allowed);
        if self.matcher.complete() {
            for id in &self.end_ids {
                n += usize::from(allowed.insert(*id));
            }
        }
        if n == 0 || self.budget == 0 {
            self.state = if self.matcher.complete() {
                State::Finished
            } else {
                State::Stuck
            };
            return None;
        }
        Some(&self.allowed)
    }

    /// Sets every logit the constraint rules out to −∞ ([`Constraint::allow`] applied);
    /// false when none is left.
    pub fn mask(&mut self, logits: &mut [f32]) -> bool {
        self.allow(logits.len()).map(|a| a.apply(logits)).is_some()
    }

    /// Follows the chosen token (one [`Constraint::mask`] allowed).
    pub fn advance(&mut self, id: u32) {
        self.budget = self.budget.saturating_sub(1);
        if self.end_ids.contains(&id) {
            self.state = State::Finished;
            return;
        }
        let ok = self
            .vocab
            .bytes(id)
            .is_some_and(|b| self.matcher.feed_all(b));
        if !ok {
            self.state = State::Stuck;
        } else if self.matcher.finished() {
            self.state = State::Finished;
        }
    }

    /// Whether the generation must end here (document whole, or no token fits).
    pub fn finished(&self) -> bool {
        self.state != State::Open
    }

    /// Whether it ended without a whole document.
    pub fn stuck(&self) -> bool {
        self.state == State::Stuck
    }
}
