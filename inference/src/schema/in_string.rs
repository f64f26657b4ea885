//! Which tokens may come next inside a plain string (no `pattern`, no escape or character
//! under way), without walking the vocabulary token by token.
//!
//! Inside such a string only the number of characters written matters to the matcher: a
//! plain character and a simple escape (`\n`, `\"` …) each count one, so any `k` of them
//! leave it in the same state. [`StringIndex`] sorts the vocabulary by that:
//!
//! - tokens that are string text through and through (most of a large vocabulary) are
//!   allowed by their character count alone: a cumulative bitset per count gives all of
//!   `lo..=hi` characters in one pass over the mask's words (a sorted list, for the few
//!   tokens below one trie node);
//! - tokens that close the string after `k` characters are walked once, as a trie of what
//!   follows their quote, from the one state every such close leaves (the string's frame
//!   is gone), each id then kept when its `k` fits;
//! - the few others (a `\u` escape, a character cut at the token's end, an over-long run)
//!   are walked as tries of their tails, one per `k`, from the state `k` characters leave;
//! - tokens that can never continue a string (a control byte, an unknown escape after
//!   their text) are left out.
//!
//! [`super::TokenVocab::allowed`] checks this against the token-by-token definition in the
//! tests.

use super::mask::TokenMask;
use super::matcher::{InString, Matcher};
use super::vocab::{TrieNode, build_trie, walk};

/// Tokens of more characters than this are walked like the others (it bounds the
/// cumulative table: one bitset per character count).
const MAX_CHARS: usize = 256;

/// The vocabulary sorted for the inside of plain strings (see the module docs).
#[derive(Debug, Clone)]
pub(super) struct StringIndex {
    /// The tokens of string text.
    plain: Plain,
    /// The tokens that end with the quote closing the string, by their characters before it.
    close_end: Plain,
    /// What follows the quote of each token that closes the string and goes on.
    close: Vec<TrieNode>,
    /// Each of those tokens' characters before its quote, by id (ascending).
    close_chars: Vec<(u32, u16)>,
    /// The other tokens' tails after `k` characters, a trie per `k`, ascending.
    rest: Vec<(usize, Vec<TrieNode>)>,
}

/// The tokens that are string text through and through, by character count.
#[derive(Debug, Clone)]
pub(super) enum Plain {
    /// Entry `c`: those of at most `c` characters, as bitset words over every id (for a
    /// whole vocabulary).
    Upto(Vec<Vec<u64>>),
    /// (characters, id), ascending (for the few tokens under one trie node).
    Sorted(Vec<(usize, u32)>),
}

impl Plain {
    pub(super) fn new(len: usize, plain: Vec<(usize, u32)>) -> Plain {
        // a table of bitsets pays where the tokens are a good part of the vocabulary
        if plain.len() * 16 < len {
            let mut plain = plain;
            plain.sort_unstable();
            return Plain::Sorted(plain);
        }
        let top = plain.iter().map(|(c, _)| *c).max().unwrap_or(0);
        let mut upto = vec![vec![0u64; len.div_ceil(64)]; top + 1];
        for (chars, id) in plain {
            upto[chars][id as usize / 64] |= 1 << (id % 64);
        }
        for c in 1..upto.len() {
            let (below, at) = upto.split_at_mut(c);
            for (w, b) in at[0].iter_mut().zip(&below[c - 1]) {
                *w |= b;
            }
        }
        Plain::Upto(upto)
    }

    /// Adds those of `lo..=hi` characters but `except` (ascending ids).
    pub(super) fn add_except(&self, lo: usize, hi: usize, allowed: &mut TokenMask, except: &[u32]) {
        // what the set held of them before stays; nothing else of them is added
        let held: Vec<bool> = except.iter().map(|id| allowed.contains(*id)).collect();
        self.add(lo, hi, allowed);
        for (id, held) in except.iter().zip(held) {
            if !held {
                allowed.remove(*id);
            }
        }
    }

    /// Adds those of `lo..=hi` characters.
    pub(super) fn add(&self, lo: usize, hi: usize, allowed: &mut TokenMask) {
        match self {
            Plain::Upto(upto) => {
                let hi = hi.min(upto.len().saturating_sub(1));
                if lo <= hi && !upto.is_empty() {
                    allowed.add_band(&upto[hi], lo.checked_sub(1).map(|b| &upto[b][..]));
                }
            }
            Plain::Sorted(sorted) => {
                let from = sorted.partition_point(|(c, _)| *c < lo);
                for (c, id) in &sorted[from..] {
                    if *c > hi {
                        break;
                    }
                    allowed.insert(*id);
                }
            }
        }
    }
}

/// How a token reads as string text: its longest start of whole characters and simple
/// escapes (at most [`MAX_CHARS`]) — its length in bytes and in characters.
fn text_start(bytes: &[u8]) -> (usize, usize) {
    let (mut at, mut chars) = (0, 0);
    while at < bytes.len() && chars < MAX_CHARS {
        let step = match bytes[at] {
            b'\\' => match bytes.get(at + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => 2,
                _ => break,
            },
            b if b < 0x20 || b == b'"' => break,
            b => {
                let len = match b {
                    0x00..=0x7F => 1,
                    0xC2..=0xDF => 2,
                    0xE0..=0xEF => 3,
                    0xF0..=0xF4 => 4,
                    _ => break,
                };
                match bytes.get(at..at + len).map(std::str::from_utf8) {
                    Some(Ok(_)) => len,
                    _ => break,
                }
            }
        };
        at += step;
        chars += 1;
    }
    (at, chars)
}

/// Whether a tail (what follows a token's text) can never be taken inside a string.
fn never(tail: &[u8]) -> bool {
    match tail {
        [b, ..] if *b < 0x20 => true,
        [b'\\', e, ..] => !matches!(
            e,
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' | b'u'
        ),
        _ => false,
    }
}

impl StringIndex {
    /// The index of `tokens` (id, non-empty bytes) over ids `0..len`.
    pub(super) fn new<'a>(tokens: impl Iterator<Item = (usize, &'a [u8])>, len: usize) -> Self {
        let mut plain: Vec<(usize, u32)> = Vec::new();
        let mut close_end = Vec::new();
        let mut close: Vec<(usize, &[u8])> = Vec::new();
        let mut close_chars = Vec::new();
        let mut rest: std::collections::BTreeMap<usize, Vec<(usize, &[u8])>> =
            std::collections::BTreeMap::new();
        for (id, bytes) in tokens {
            let (at, chars) = text_start(bytes);
            match &bytes[at..] {
                [] => plain.push((chars, id as u32)),
                [b'"'] => close_end.push((chars, id as u32)),
                [b'"', after @ ..] => {
                    close.push((id, after));
                    close_chars.push((id as u32, chars as u16));
                }
                tail if never(tail) => {}
                tail => rest.entry(chars).or_default().push((id, tail)),
            }
        }
        close_chars.sort_unstable();
        StringIndex {
            plain: Plain::new(len, plain),
            close_end: Plain::new(len, close_end),
            close: build_trie(close.into_iter()),
            close_chars,
            rest: rest
                .into_iter()
                .map(|(chars, tails)| (chars, build_trie(tails.into_iter())))
                .collect(),
        }
    }

    /// Adds to `allowed` every token `m` (inside a plain string, `s`) takes whole after
    /// which the document can still be finished in `budget` more bytes.
    pub(super) fn allowed(
        &self,
        m: &Matcher,
        s: InString,
        budget: usize,
        allowed: &mut TokenMask,
        scratch: &mut [Matcher],
    ) {
        // text of c characters: while c fits maxLength (c ≤ room) and the rest still fits
        // the budget: below + 1 + (owed − c)⁺ ≤ budget
        if let Some(slack) = budget.checked_sub(s.below.saturating_add(1)) {
            self.plain
                .add(s.owed.saturating_sub(slack).max(1), s.room, allowed);
        }
        // closing after c characters: c from what is owed (minLength) to the room left; the
        // state after the quote is the same for every such c
        if s.owed <= s.room.min(MAX_CHARS)
            && let Some(closed) = after_chars(m, s.owed).and_then(|mut a| a.feed(b'"').then_some(a))
        {
            let fits = |id: u32| {
                let at = self.close_chars.partition_point(|(i, _)| *i < id);
                self.close_chars
                    .get(at)
                    .is_some_and(|(i, c)| *i == id && (s.owed..=s.room).contains(&usize::from(*c)))
            };
            if closed.remaining() <= budget {
                self.close_end.add(s.owed, s.room, allowed);
            }
            walk(&self.close, 0, &closed, budget, allowed, scratch, &fits);
        }
        // the others, each trie of tails from the state its text leaves
        let mut after = m.clone();
        let mut fed = 0;
        'tails: for (chars, tails) in &self.rest {
            while fed < *chars {
                if !after.feed(b'a') {
                    break 'tails;
                }
                fed += 1;
            }
            walk(tails, 0, &after, budget, allowed, scratch, &|_| true);
        }
    }
}

/// `m` after `n` plain characters (any do), if the string takes them.
fn after_chars(m: &Matcher, n: usize) -> Option<Matcher> {
    let mut a = m.clone();
    (0..n).all(|_| a.feed(b'a')).then_some(a)
}
