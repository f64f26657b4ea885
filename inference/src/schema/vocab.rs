//! The vocabulary as bytes, in a trie: which tokens may come next is found by walking the
//! trie with the matcher, so a refused first byte rules out every token that starts with
//! it at once. Inside a plain string, and below a `"` that opens one, the tokens are taken
//! from [`super::in_string`]'s index instead, by their character count; inside (and below
//! a `"` that opens) the key of an object that takes other properties, from
//! [`super::in_key`]'s.

use std::sync::Arc;

use super::Grammar;
use super::in_key::KeyIndex;
use super::in_string::StringIndex;
use super::limits::CompileLimits;
use super::mask::TokenMask;
use super::matcher::Matcher;
use super::text::{Step, Text};
use crate::{Error, Result};

/// A node of a byte trie: its children by byte, the tokens that end here, and for a node
/// that opens a string (a `"`) with many tokens below it, their index for the inside of
/// plain strings.
#[derive(Debug, Default, Clone)]
pub(super) struct TrieNode {
    pub(super) children: Vec<(u8, u32)>,
    pub(super) ids: Vec<u32>,
    strings: Option<Box<StringIndex>>,
    /// The same tokens' index for the inside of a key that may be new.
    keys: Option<Box<KeyIndex>>,
}

/// States [`TokenVocab::writes`] visits at most before it refuses.
const SEARCH_STATES: usize = 2048;
/// Tokens [`TokenVocab::writes`] tries from one state at most (lowest ids first).
const TRIED_PER_STATE: usize = 256;
/// Bytes by which a token may move the document's end away in [`TokenVocab::writes`]'
/// second search.
const DETOUR_SLACK: usize = 16;

/// Tokens below a string-opening node from which it gets a [`StringIndex`] of its own.
const OPENS_INDEXED: usize = 64;

/// Gives the nodes of `trie` one or two bytes deep whose byte is `"` and that have at least
/// [`OPENS_INDEXED`] tokens below them the index of those tokens' tails.
fn index_string_opens(trie: &mut [TrieNode], tokens: &[Option<Vec<u8>>]) {
    let mut below: std::collections::HashMap<usize, Vec<(usize, &[u8])>> =
        std::collections::HashMap::new();
    for (id, bytes) in tokens.iter().enumerate() {
        let Some(bytes) = bytes.as_deref() else {
            continue;
        };
        let mut at = 0usize;
        for (depth, b) in bytes.iter().enumerate().take(2) {
            let Some((_, child)) = trie[at].children.iter().find(|(c, _)| c == b) else {
                break;
            };
            at = *child as usize;
            if *b == b'"' && depth + 1 < bytes.len() {
                below.entry(at).or_default().push((id, &bytes[depth + 1..]));
            }
        }
    }
    for (node, tails) in below {
        if tails.len() >= OPENS_INDEXED {
            let keys = KeyIndex::new(tails.iter().copied(), tokens.len());
            trie[node].strings = Some(Box::new(StringIndex::new(tails.into_iter(), tokens.len())));
            trie[node].keys = Some(Box::new(keys));
        }
    }
}

/// Every token's bytes, for masking. Special tokens (no bytes) are never allowed by the
/// matcher; end-of-sequence ids are handled by [`super::Constraint`].
#[derive(Debug, Clone)]
pub struct TokenVocab {
    tokens: Vec<Option<Vec<u8>>>,
    /// Every token.
    trie: Vec<TrieNode>,
    /// The vocabulary sorted for the inside of plain strings.
    strings: StringIndex,
    /// The vocabulary sorted for the inside of keys that may be new.
    keys: KeyIndex,
    /// The longest token's length in bytes.
    depth: usize,
    /// Whether every byte a document may hold (0x20–0xFF) is a token of its own, so any
    /// document can be written byte by byte.
    every_byte: bool,
}

/// A trie of `tokens` (id, bytes).
pub(super) fn build_trie<'a>(tokens: impl Iterator<Item = (usize, &'a [u8])>) -> Vec<TrieNode> {
    let mut trie = vec![TrieNode::default()];
    for (id, bytes) in tokens {
        let mut at = 0usize;
        for b in bytes {
            at = match trie[at].children.iter().find(|(c, _)| c == b) {
                Some((_, n)) => *n as usize,
                None => {
                    let n = trie.len();
                    trie.push(TrieNode::default());
                    trie[at].children.push((*b, n as u32));
                    n
                }
            };
        }
        trie[at].ids.push(id as u32);
    }
    for n in &mut trie {
        n.children.sort_unstable_by_key(|c| c.0);
    }
    trie
}

impl TokenVocab {
    /// From each id's bytes (`None` for special tokens and ids without text).
    pub fn new(tokens: &[Option<Vec<u8>>]) -> TokenVocab {
        let with_bytes = || {
            tokens
                .iter()
                .enumerate()
                .filter_map(|(id, b)| Some((id, b.as_deref().filter(|b| !b.is_empty())?)))
        };
        let mut single = [false; 256];
        for (_, b) in with_bytes().filter(|(_, b)| b.len() == 1) {
            single[usize::from(b[0])] = true;
        }
        TokenVocab {
            every_byte: single[0x20..].iter().all(|s| *s),
            tokens: tokens.to_vec(),
            trie: {
                let mut trie = build_trie(with_bytes());
                index_string_opens(&mut trie, tokens);
                trie
            },
            strings: StringIndex::new(with_bytes(), tokens.len()),
            keys: KeyIndex::new(with_bytes(), tokens.len()),
            depth: with_bytes().map(|(_, b)| b.len()).max().unwrap_or(0),
        }
    }

    /// Number of ids.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether there are no ids.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The bytes of token `id` (None for special tokens and unknown ids).
    pub fn bytes(&self, id: u32) -> Option<&[u8]> {
        self.tokens.get(id as usize)?.as_deref()
    }

    /// Whether this vocabulary can write a whole document of `grammar`, checked before
    /// generating (at once where every byte is a token of its own): a depth-first search
    /// over the tokens the matcher takes, first only those that bring the document's end
    /// strictly closer (the shortest documents), then also detours of up to
    /// [`DETOUR_SLACK`] bytes (`null` where a number's digits have no tokens); each state
    /// is visited once, and the search gives up after [`SEARCH_STATES`] states.
    ///
    /// # Errors
    /// [`Error::Schema`] naming the first character no token writes on the way to the
    /// shortest document, and where.
    pub fn writes(&self, grammar: &Arc<Grammar>) -> Result<()> {
        self.writes_within(grammar, &CompileLimits::default())
    }

    /// [`TokenVocab::writes`] within `limits` (its deadline and cancel flag, checked as
    /// the search goes).
    ///
    /// # Errors
    /// As [`TokenVocab::writes`]; also [`Error::Schema`] past the deadline and
    /// [`Error::Abandoned`] when cancelled.
    pub fn writes_within(&self, grammar: &Arc<Grammar>, limits: &CompileLimits) -> Result<()> {
        if self.every_byte {
            return Ok(());
        }
        let start = Matcher::new(grammar.clone());
        let mut visits = 0;
        let mut dead = None;
        for slack in [0, DETOUR_SLACK] {
            if self.search(&start, slack, &mut visits, &mut dead, limits)? {
                return Ok(());
            }
        }
        let Some((m, written)) = dead else {
            return Err(Error::Schema {
                at: "#".into(),
                reason: format!(
                    "the model's vocabulary wrote no whole document of this schema in a \
                     search of {SEARCH_STATES} states"
                ),
            });
        };
        let left = m.remaining();
        let next = (0..=255u8).find(|b| {
            let mut t = m.clone();
            t.feed(*b) && t.remaining() < left
        });
        let show = |b: u8| match b {
            0x21..=0x7e => format!("`{}`", char::from(b)),
            _ => format!("byte 0x{b:02x}"),
        };
        Err(Error::Schema {
            at: "#".into(),
            reason: format!(
                "the model's vocabulary cannot write a document of this schema: no token \
                 writes {} after {:?} (on the way to its shortest document)",
                next.map_or_else(|| "its next character".into(), show),
                String::from_utf8_lossy(&written)
            ),
        })
    }

    /// One depth-first search from `start` for a whole document, taking tokens that leave
    /// at most `slack` more bytes to write than there were, lowest id first; the first
    /// state with no such token is kept in `dead` (with what led there).
    fn search(
        &self,
        start: &Matcher,
        slack: usize,
        visits: &mut usize,
        dead: &mut Option<(Matcher, Vec<u8>)>,
        limits: &CompileLimits,
    ) -> Result<bool> {
        // how deep a path may go: the shortest document's tokens, and some detours
        let depth = start.remaining().saturating_add(4 * slack);
        let mut seen = std::collections::HashSet::from([start.key()]);
        let mut mask = TokenMask::new(self.len());
        // each level: its state, the bytes written to reach it, its untried tokens
        let mut path: Vec<(Matcher, usize, std::vec::IntoIter<u32>)> = Vec::new();
        let mut written = Vec::new();
        let mut here = start.clone();
        loop {
            if here.complete() {
                return Ok(true);
            }
            let mut ids = Vec::new();
            if *visits < SEARCH_STATES && path.len() < depth {
                *visits += 1;
                if (*visits).is_multiple_of(64) {
                    limits.check("", "the vocabulary's search for a document")?;
                }
                mask.reset(self.len());
                let after = here.remaining().saturating_sub(1).saturating_add(slack);
                self.allowed(&here, after, &mut mask);
                ids.extend(mask.ids().take(TRIED_PER_STATE));
                if ids.is_empty() && dead.is_none() {
                    *dead = Some((here.clone(), written.clone()));
                }
            }
            path.push((here, written.len(), ids.into_iter()));
            // the next untried token whose state is new, backing up where none is left
            here = loop {
                let Some((m, len, ids)) = path.last_mut() else {
                    return Ok(false);
                };
                let Some(id) = ids.next() else {
                    path.pop();
                    continue;
                };
                let bytes = self.bytes(id).expect("an allowed token has bytes");
                let mut n = m.clone();
                assert!(n.feed_all(bytes), "an allowed token is taken");
                if seen.insert(n.key()) {
                    written.truncate(*len);
                    written.extend_from_slice(bytes);
                    break n;
                }
            };
        }
    }

    /// Adds to `allowed` every token the matcher takes whole after which the document can
    /// still be finished in `budget` more bytes (ids beyond `allowed`'s range are left
    /// out); returns how many ids `allowed` then holds.
    pub fn allowed(&self, m: &Matcher, budget: usize, allowed: &mut TokenMask) -> usize {
        if m.ambiguous() {
            // a token is taken when one reading takes it: each walked alone, with the
            // fast paths a single reading has
            for r in m.split() {
                self.allowed(&r, budget, allowed);
            }
            return allowed.count();
        }
        let mut scratch = vec![m.clone(); self.depth];
        if let Some(k) = m.free_key() {
            self.keys
                .allowed(m, &k, budget, allowed, &mut scratch, (&self.trie, 0));
            return allowed.count();
        }
        match (m.in_string(), m.in_text()) {
            (Some(s), _) => self.strings.allowed(m, s, budget, allowed, &mut scratch),
            (None, Some((t, below))) => {
                let x = InText { m, below, budget };
                walk_text(
                    &self.trie,
                    0,
                    t,
                    &mut Vec::new(),
                    &x,
                    allowed,
                    &mut scratch,
                    &|_| true,
                );
            }
            (None, None) => walk(&self.trie, 0, m, budget, allowed, &mut scratch, &|_| true),
        }
        allowed.count()
    }
}

/// Visits `trie` below `at` with the matcher state `m` there, adding the tokens it takes
/// (those `keep` keeps); `scratch` holds one matcher per level below, reused across
/// siblings.
pub(super) fn walk(
    trie: &[TrieNode],
    at: usize,
    m: &Matcher,
    budget: usize,
    allowed: &mut TokenMask,
    scratch: &mut [Matcher],
    keep: &dyn Fn(u32) -> bool,
) {
    let Some((next, deeper)) = scratch.split_first_mut() else {
        return;
    };
    next.clone_from(m);
    for (b, child) in &trie[at].children {
        next.reset_to(m);
        if !next.feed(*b) {
            continue;
        }
        let node = &trie[*child as usize];
        if !node.ids.is_empty() && next.remaining() <= budget {
            for id in &node.ids {
                if keep(*id) {
                    allowed.insert(*id);
                }
            }
        }
        if node.children.is_empty() {
            continue;
        }
        // a string opened by this byte: the tokens below by their text, not one by one
        if let Some(index) = &node.strings
            && let Some(s) = next.in_string()
        {
            index.allowed(next, s, budget, allowed, deeper);
            continue;
        }
        // a key opened by this byte, of an object that takes other properties: likewise
        if let Some(index) = &node.keys
            && let Some(k) = next.free_key()
        {
            index.allowed(next, &k, budget, allowed, deeper, (trie, *child as usize));
            continue;
        }
        // inside a string: its bytes followed without copying frames
        if let Some((t, below)) = next.in_text() {
            let x = InText {
                m: next,
                below,
                budget,
            };
            walk_text(
                trie,
                *child as usize,
                t,
                &mut Vec::new(),
                &x,
                allowed,
                deeper,
                keep,
            );
            continue;
        }
        walk(trie, *child as usize, next, budget, allowed, deeper, keep);
    }
}

/// Where a walk inside a string started: the matcher there, the bytes the frames below
/// the string need, the budget.
struct InText<'a> {
    m: &'a Matcher,
    below: usize,
    budget: usize,
}

/// [`walk`] inside a string: below `at`, with the string in state `t` after the bytes
/// `path` from `x.m`; each byte is the string's alone until its closing quote, after which
/// the walk goes on with a matcher.
#[allow(clippy::too_many_arguments)]
fn walk_text(
    trie: &[TrieNode],
    at: usize,
    t: Text,
    path: &mut Vec<u8>,
    x: &InText<'_>,
    allowed: &mut TokenMask,
    scratch: &mut [Matcher],
    keep: &dyn Fn(u32) -> bool,
) {
    let g = x.m.grammar();
    for (b, child) in &trie[at].children {
        let node = &trie[*child as usize];
        let mut u = t;
        match u.step(g, *b) {
            Step::No => {}
            Step::Take => {
                if !node.ids.is_empty() && u.remaining(g).saturating_add(x.below) <= x.budget {
                    node.ids
                        .iter()
                        .filter(|id| keep(**id))
                        .for_each(|id| _ = allowed.insert(*id));
                }
                if !node.children.is_empty() {
                    path.push(*b);
                    walk_text(trie, *child as usize, u, path, x, allowed, scratch, keep);
                    path.pop();
                }
            }
            Step::Done => {
                // the string is closed: the rest of the token goes to the frames below
                let mut closed = x.m.clone();
                path.push(*b);
                let took = closed.feed_all(path);
                path.pop();
                debug_assert!(took, "the matcher takes what its string took");
                if !took {
                    continue;
                }
                if !node.ids.is_empty() && closed.remaining() <= x.budget {
                    node.ids
                        .iter()
                        .filter(|id| keep(**id))
                        .for_each(|id| _ = allowed.insert(*id));
                }
                if !node.children.is_empty() {
                    walk(
                        trie,
                        *child as usize,
                        &closed,
                        x.budget,
                        allowed,
                        scratch,
                        keep,
                    );
                }
            }
        }
    }
}
