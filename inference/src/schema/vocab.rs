//! The vocabulary as bytes, in a trie: which tokens may come next is found by walking the
//! trie with the matcher, so a refused first byte rules out every token that starts with
//! it at once.

use std::sync::Arc;

use super::Grammar;
use super::matcher::Matcher;
use crate::{Error, Result};

#[derive(Debug, Default, Clone)]
struct TrieNode {
    children: Vec<(u8, u32)>,
    ids: Vec<u32>,
}

/// Every token's bytes, for masking. Special tokens (no bytes) are never allowed by the
/// matcher; end-of-sequence ids are handled by [`super::Constraint`].
#[derive(Debug, Clone)]
pub struct TokenVocab {
    tokens: Vec<Option<Vec<u8>>>,
    /// Every token.
    trie: Vec<TrieNode>,
    /// Tokens that are plain string text (no quote, backslash or control byte; whole UTF-8
    /// characters), by character count: inside a string each is allowed or not by its
    /// length alone.
    plain: Vec<(usize, u32)>,
    /// The other tokens, walked inside strings.
    rest: Vec<TrieNode>,
    /// Whether every byte a document may hold (0x20–0xFF) is a token of its own, so any
    /// document can be written byte by byte.
    every_byte: bool,
}

fn plain_chars(bytes: &[u8]) -> Option<usize> {
    if bytes.iter().any(|b| *b < 0x20 || *b == b'"' || *b == b'\\') {
        return None;
    }
    std::str::from_utf8(bytes).ok().map(|s| s.chars().count())
}

fn build_trie<'a>(tokens: impl Iterator<Item = (usize, &'a [u8])>) -> Vec<TrieNode> {
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
        let mut plain: Vec<(usize, u32)> = with_bytes()
            .filter_map(|(id, b)| Some((plain_chars(b)?, id as u32)))
            .collect();
        plain.sort_unstable();
        let mut single = [false; 256];
        for (_, b) in with_bytes().filter(|(_, b)| b.len() == 1) {
            single[usize::from(b[0])] = true;
        }
        TokenVocab {
            every_byte: single[0x20..].iter().all(|s| *s),
            tokens: tokens.to_vec(),
            trie: build_trie(with_bytes()),
            rest: build_trie(with_bytes().filter(|(_, b)| plain_chars(b).is_none())),
            plain,
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
    /// generating: following the shortest document token by token, each token bringing
    /// its end strictly closer (at once where every byte is a token of its own).
    ///
    /// # Errors
    /// [`Error::Schema`] naming the first character no token writes, and where.
    pub fn writes(&self, grammar: &Arc<Grammar>) -> Result<()> {
        if self.every_byte {
            return Ok(());
        }
        let mut m = Matcher::new(grammar.clone());
        let mut written = Vec::new();
        let mut mask = vec![false; self.len()];
        while !m.complete() {
            let left = m.remaining();
            mask.fill(false);
            if self.allowed(&m, left - 1, &mut mask) == 0 {
                let next = (0..=255u8).find(|b| {
                    let mut t = m.clone();
                    t.feed(*b) && t.remaining() < left
                });
                let show = |b: u8| match b {
                    0x21..=0x7e => format!("`{}`", char::from(b)),
                    _ => format!("byte 0x{b:02x}"),
                };
                return Err(Error::Schema {
                    at: "#".into(),
                    reason: format!(
                        "the model's vocabulary cannot write this schema's shortest document: \
                         no token writes {} after {:?}",
                        next.map_or_else(|| "its next character".into(), show),
                        String::from_utf8_lossy(&written)
                    ),
                });
            }
            let id = mask.iter().position(|a| *a).expect("one allowed") as u32;
            let bytes = self.bytes(id).expect("an allowed token has bytes");
            assert!(m.feed_all(bytes), "an allowed token is taken");
            written.extend_from_slice(bytes);
        }
        Ok(())
    }

    /// Marks in `allowed` every token the matcher takes whole after which the document can
    /// still be finished in `budget` more bytes; returns how many.
    pub fn allowed(&self, m: &Matcher, budget: usize, allowed: &mut [bool]) -> usize {
        let mut count = 0;
        let mut scratch = vec![m.clone(); self.depth()];
        let trie = match m.in_string() {
            Some(s) => {
                // plain text: allowed while it fits maxLength and the budget
                for (chars, id) in &self.plain {
                    if *chars > s.room {
                        break;
                    }
                    let after = s.below.saturating_add(1 + s.owed.saturating_sub(*chars));
                    if after <= budget
                        && let Some(slot) = allowed.get_mut(*id as usize)
                    {
                        *slot = true;
                        count += 1;
                    }
                }
                &self.rest
            }
            None => &self.trie,
        };
        walk(trie, 0, m, budget, allowed, &mut count, &mut scratch);
        count
    }

    /// The longest token's length.
    fn depth(&self) -> usize {
        self.tokens
            .iter()
            .map(|t| t.as_ref().map_or(0, Vec::len))
            .max()
            .unwrap_or(0)
    }
}

/// Visits `trie` below `at` with the matcher state `m` there; `scratch` holds one matcher
/// per level below, reused across siblings.
fn walk(
    trie: &[TrieNode],
    at: usize,
    m: &Matcher,
    budget: usize,
    allowed: &mut [bool],
    count: &mut usize,
    scratch: &mut [Matcher],
) {
    let Some((next, deeper)) = scratch.split_first_mut() else {
        return;
    };
    for (b, child) in &trie[at].children {
        next.clone_from(m);
        if !next.feed(*b) {
            continue;
        }
        let node = &trie[*child as usize];
        if !node.ids.is_empty() && next.remaining() <= budget {
            for id in &node.ids {
                if let Some(slot) = allowed.get_mut(*id as usize) {
                    *slot = true;
                    *count += 1;
                }
            }
        }
        if !node.children.is_empty() {
            walk(trie, *child as usize, next, budget, allowed, count, deeper);
        }
    }
}
