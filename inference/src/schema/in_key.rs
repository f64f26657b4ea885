//! Which tokens may come next inside the key of an object that takes other properties,
//! without walking the vocabulary token by token.
//!
//! There (no escape or character under way) the matcher takes any bare text — no `"`,
//! backslash or control byte, well-formed UTF-8 — as the start of another property's key.
//! [`KeyIndex`] sorts the vocabulary by what follows a token's bare text:
//!
//! - nothing: allowed at once, by the bytes a character they cut still owes (a bitset
//!   each), where the budget has room for them as a new key's start ([`FreeKey::base`]) —
//!   but for those that start a key the object has (on its way to a declared one, or
//!   spelling one already written), found along the trie and checked one by one;
//! - the quote closing the key at once: one state after it, their tails walked as a trie;
//! - more text, the quote, then a tail with no other quote: every such key is a new
//!   property's — but for the few that spell a key the object declares or has written,
//!   checked one by one — and a tail with no quote compares no key, so all of them leave
//!   the same state: their tails are walked once, from one new key's;
//! - a control byte or malformed UTF-8 (never taken in a key) are left out;
//! - a backslash: walked where a key the object has holds an escape (only a declared key
//!   may), else left out;
//! - the rest (a tail with another quote) are walked.
//!
//! [`super::TokenVocab::allowed`] checks this against the token-by-token definition in the
//! tests.

use std::collections::HashMap;

use super::in_string::Plain;
use super::mask::TokenMask;
use super::matcher::{FreeKey, Matcher};
use super::utf8::Utf8;
use super::vocab::{TrieNode, build_trie, walk};

/// What follows a token's bare key text.
enum Kind<'a> {
    /// Bare text, its last character owing this many bytes.
    Bare(usize),
    /// The quote at once, then this tail.
    CloseNow(&'a [u8]),
    /// This text (not empty), the quote, then a tail with no quote.
    CloseAfter(&'a [u8], &'a [u8]),
    Never,
    /// A backslash before any quote: taken only on a declared key with an escape.
    Escape,
    Walk,
}

fn kind(bytes: &[u8]) -> Kind<'_> {
    let mut utf8 = Utf8::Ready;
    for (i, b) in bytes.iter().enumerate() {
        match *b {
            b'"' if utf8 != Utf8::Ready => return Kind::Never,
            b'"' => {
                let (text, tail) = (&bytes[..i], &bytes[i + 1..]);
                return match (text.is_empty(), tail.contains(&b'"')) {
                    (true, _) => Kind::CloseNow(tail),
                    (false, false) => Kind::CloseAfter(text, tail),
                    (false, true) => Kind::Walk,
                };
            }
            b'\\' => return Kind::Escape,
            c if c < 0x20 => return Kind::Never,
            c => match utf8.step(c) {
                Some(u) => utf8 = u,
                None => return Kind::Never,
            },
        }
    }
    Kind::Bare(utf8.owed())
}

/// The vocabulary sorted for the inside of keys that may be new (see the module docs).
#[derive(Debug, Clone)]
pub(super) struct KeyIndex {
    /// The tokens of bare text, by the bytes their last character owes.
    bare: Plain,
    /// The tokens that are just the quote.
    now_end: Vec<u32>,
    /// What follows the quote of the other tokens that close the key at once.
    now: Vec<TrieNode>,
    /// The tokens of text and the quote, nothing after.
    after_end: Vec<u32>,
    /// What follows the quote of the others of text, the quote and a tail with no quote.
    after: Vec<TrieNode>,
    /// Those tokens by their text: (id, tail).
    by_text: HashMap<Vec<u8>, Vec<(u32, Vec<u8>)>>,
    /// The tokens with a backslash before any quote, walked where a key has one.
    escaped: Vec<TrieNode>,
    /// The other tokens walked.
    rest: Vec<TrieNode>,
}

impl KeyIndex {
    /// The index of `tokens` (id, non-empty bytes) over ids `0..len`.
    pub(super) fn new<'a>(tokens: impl Iterator<Item = (usize, &'a [u8])>, len: usize) -> Self {
        let (mut bare, mut now_end, mut after_end) = (Vec::new(), Vec::new(), Vec::new());
        let (mut now, mut after, mut rest) = (Vec::new(), Vec::new(), Vec::new());
        let mut escaped = Vec::new();
        let mut by_text: HashMap<Vec<u8>, Vec<(u32, Vec<u8>)>> = HashMap::new();
        for (id, bytes) in tokens {
            match kind(bytes) {
                Kind::Bare(owed) => bare.push((owed, id as u32)),
                Kind::CloseNow([]) => now_end.push(id as u32),
                Kind::CloseNow(tail) => now.push((id, tail)),
                Kind::CloseAfter(text, tail) => {
                    by_text
                        .entry(text.to_vec())
                        .or_default()
                        .push((id as u32, tail.to_vec()));
                    match tail {
                        [] => after_end.push(id as u32),
                        _ => after.push((id, tail)),
                    }
                }
                Kind::Never => {}
                Kind::Escape => escaped.push((id, bytes)),
                Kind::Walk => rest.push((id, bytes)),
            }
        }
        KeyIndex {
            bare: Plain::new(len, bare),
            now_end,
            now: build_trie(now.into_iter()),
            after_end,
            after: build_trie(after.into_iter()),
            by_text,
            escaped: build_trie(escaped.into_iter()),
            rest: build_trie(rest.into_iter()),
        }
    }

    /// Adds to `allowed` every token `m` (inside a key that may be new, `k`) takes whole
    /// after which the document can still be finished in `budget` more bytes; `texts` is
    /// the trie (and the node in it) of the tokens' bytes from the key's text on.
    pub(super) fn allowed(
        &self,
        m: &Matcher,
        k: &FreeKey<'_>,
        budget: usize,
        allowed: &mut TokenMask,
        scratch: &mut [Matcher],
        texts: (&[TrieNode], usize),
    ) {
        // text that starts a key the object has: one by one
        let mut starts: Vec<u32> = Vec::new();
        let (trie, root) = texts;
        for key in &k.keys {
            let Some(rest) = key.strip_prefix(k.raw) else {
                continue;
            };
            let mut at = root;
            for (l, b) in rest.iter().enumerate() {
                let children = &trie[at].children;
                let Ok(i) = children.binary_search_by_key(b, |c| c.0) else {
                    break;
                };
                at = children[i].1 as usize;
                for id in &trie[at].ids {
                    starts.push(*id);
                    let mut t = m.clone();
                    if t.feed_all(&rest[..=l]) && t.remaining() <= budget {
                        allowed.insert(*id);
                    }
                }
            }
        }
        starts.sort_unstable();
        // any other bare text: a new key's start, owing what its last character cuts
        if let Some(slack) = budget.checked_sub(k.base) {
            self.bare.add_except(0, slack, allowed, &starts);
        }
        // the quote at once: the key as it is
        let mut closed = m.clone();
        if closed.feed(b'"') {
            if closed.remaining() <= budget {
                self.now_end.iter().for_each(|id| _ = allowed.insert(*id));
            }
            walk(&self.now, 0, &closed, budget, allowed, scratch, &|_| true);
        }
        // text, then the quote: the keys the object has, one by one
        let mut own: Vec<u32> = Vec::new();
        for key in &k.keys {
            let Some(text) = key.strip_prefix(k.raw).filter(|t| !t.is_empty()) else {
                continue;
            };
            for (id, tail) in self.by_text.get(text).into_iter().flatten() {
                own.push(*id);
                let mut t = m.clone();
                if t.feed_all(text) && t.feed(b'"') && t.feed_all(tail) && t.remaining() <= budget {
                    allowed.insert(*id);
                }
            }
        }
        own.sort_unstable();
        // any other: a new property's, as after a key no one has
        let taken = |extra: &[u8]| {
            k.keys
                .iter()
                .any(|key| key.strip_prefix(k.raw) == Some(extra))
        };
        let fresh = (1..=k.keys.len() + 1)
            .map(|n| vec![b'a'; n])
            .find(|x| !taken(x))
            .expect("more candidates than keys");
        let mut new = m.clone();
        if new.feed_all(&fresh) && new.feed(b'"') {
            let keep = |id: u32| own.binary_search(&id).is_err();
            if new.remaining() <= budget {
                for id in self.after_end.iter().filter(|id| keep(**id)) {
                    allowed.insert(*id);
                }
            }
            walk(&self.after, 0, &new, budget, allowed, scratch, &keep);
        }
        walk(&self.rest, 0, m, budget, allowed, scratch, &|_| true);
        // a backslash goes on a key only where a declared one has an escape there
        if k.keys.iter().any(|key| key.contains(&b'\\')) {
            walk(&self.escaped, 0, m, budget, allowed, scratch, &|_| true);
        }
    }
}
