//! The vocabulary as bytes, in a trie: which tokens may come next is found by walking the
//! trie with the matcher, so a refused first byte rules out every token that starts with
//! it at once.

use super::matcher::Matcher;

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
        TokenVocab {
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
