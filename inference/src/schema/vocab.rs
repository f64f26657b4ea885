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
    trie: Vec<TrieNode>,
}

impl TokenVocab {
    /// From each id's bytes (`None` for special tokens and ids without text).
    pub fn new(tokens: &[Option<Vec<u8>>]) -> TokenVocab {
        let mut trie = vec![TrieNode::default()];
        for (id, bytes) in tokens.iter().enumerate() {
            let Some(bytes) = bytes.as_ref().filter(|b| !b.is_empty()) else {
                continue;
            };
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
        TokenVocab {
            tokens: tokens.to_vec(),
            trie,
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
        self.walk(0, m, budget, allowed, &mut count);
        count
    }

    fn walk(&self, at: usize, m: &Matcher, budget: usize, allowed: &mut [bool], count: &mut usize) {
        for (b, child) in &self.trie[at].children {
            let mut next = m.clone();
            if !next.feed(*b) {
                continue;
            }
            let node = &self.trie[*child as usize];
            if !node.ids.is_empty() && next.remaining() <= budget {
                for id in &node.ids {
                    if let Some(slot) = allowed.get_mut(*id as usize) {
                        *slot = true;
                        *count += 1;
                    }
                }
            }
            if !node.children.is_empty() {
                self.walk(*child as usize, &next, budget, allowed, count);
            }
        }
    }
}
