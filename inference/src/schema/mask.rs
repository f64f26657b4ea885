//! The set of allowed token ids as a bitset, and applying it to logits.
//!
//! One bit per id: a 128k vocabulary is 2 004 words, so clearing, combining and counting a
//! mask cost a few microseconds. The sampler draws among [`TokenMask::ids`] directly;
//! [`TokenMask::apply`] is for callers that want the logits themselves masked: it writes
//! −∞ a word of 64 logits at a time where none is allowed (most of the vocabulary outside
//! strings) — at 128k ids that alone is 512 KB of stores per token.

/// For each byte of a mask, its eight lanes as all-ones (kept) or zero (refused).
static LANES: [[u32; 8]; 256] = {
    let mut t = [[0u32; 8]; 256];
    let mut b = 0;
    while b < 256 {
        let mut i = 0;
        while i < 8 {
            if b >> i & 1 == 1 {
                t[b][i] = u32::MAX;
            }
            i += 1;
        }
        b += 1;
    }
    t
};

/// A set of token ids, one bit each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenMask {
    words: Vec<u64>,
    len: usize,
}

impl TokenMask {
    /// An empty set over ids `0..len`.
    pub fn new(len: usize) -> TokenMask {
        TokenMask {
            words: vec![0; len.div_ceil(64)],
            len,
        }
    }

    /// The ids it ranges over.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it ranges over no ids.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Empties it, over ids `0..len` (reusing its memory).
    pub fn reset(&mut self, len: usize) {
        self.words.clear();
        self.words.resize(len.div_ceil(64), 0);
        self.len = len;
    }

    /// Adds `id` (ignored outside the range); whether it was new.
    pub fn insert(&mut self, id: u32) -> bool {
        let i = id as usize;
        if i >= self.len {
            return false;
        }
        let (w, b) = (i / 64, 1u64 << (i % 64));
        let new = self.words[w] & b == 0;
        self.words[w] |= b;
        new
    }

    /// Whether `id` is in it.
    pub fn contains(&self, id: u32) -> bool {
        let i = id as usize;
        i < self.len && self.words[i / 64] & (1u64 << (i % 64)) != 0
    }

    /// How many ids it holds.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The lowest id in it.
    pub fn first(&self) -> Option<u32> {
        let (w, word) = self.words.iter().enumerate().find(|(_, w)| **w != 0)?;
        Some((w * 64 + word.trailing_zeros() as usize) as u32)
    }

    /// Its ids, lowest first.
    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(w, word)| {
            let mut rest = *word;
            std::iter::from_fn(move || {
                let b = rest.trailing_zeros();
                rest &= rest.checked_sub(1)?;
                Some((w * 64) as u32 + b)
            })
        })
    }

    /// Takes `id` out of the set.
    pub(crate) fn remove(&mut self, id: u32) {
        if let Some(w) = self.words.get_mut(id as usize / 64) {
            *w &= !(1u64 << (id % 64));
        }
    }

    /// Adds the ids of `upto` that are not in `below` (bitset words over the same ids): a
    /// band of a cumulative table (all of `upto` without `below`).
    pub(crate) fn add_band(&mut self, upto: &[u64], below: Option<&[u64]>) {
        match below {
            Some(below) => {
                for ((w, u), b) in self.words.iter_mut().zip(upto).zip(below) {
                    *w |= u & !b;
                }
            }
            None => {
                for (w, u) in self.words.iter_mut().zip(upto) {
                    *w |= u;
                }
            }
        }
    }

    /// Sets every logit whose id is not in the set to −∞ (ids past its range too).
    pub fn apply(&self, logits: &mut [f32]) {
        for (chunk, word) in logits
            .chunks_mut(64)
            .zip(self.words.iter().copied().chain(std::iter::repeat(0)))
        {
            match word {
                0 => chunk.fill(f32::NEG_INFINITY),
                u64::MAX => {}
                // a few refused: those alone
                kept if kept.count_zeros() <= 16 => {
                    let mut refused = !kept;
                    while refused != 0 {
                        if let Some(l) = chunk.get_mut(refused.trailing_zeros() as usize) {
                            *l = f32::NEG_INFINITY;
                        }
                        refused &= refused - 1;
                    }
                }
                // mixed: eight lanes at a time, each keeping its bits or taking −∞'s
                kept => {
                    let refused = f32::NEG_INFINITY.to_bits();
                    for (g, lanes) in chunk.chunks_mut(8).enumerate() {
                        let keep = &LANES[((kept >> (8 * g)) & 0xFF) as usize];
                        for (l, k) in lanes.iter_mut().zip(keep) {
                            *l = f32::from_bits((l.to_bits() & k) | (refused & !k));
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mask_applies_to_exactly_the_ids_it_lacks() {
        // words with a third of the ids, a seventh, and all but every ninth
        let kinds: [fn(u32) -> bool; 3] = [|i| i % 3 == 0, |i| i % 7 == 0, |i| i % 9 != 0];
        for (len, every) in [0usize, 1, 63, 64, 65, 200]
            .into_iter()
            .flat_map(|l| [(l, 0), (l, 1), (l, 2)])
        {
            let mut m = TokenMask::new(len);
            let ids: Vec<u32> = (0..len as u32)
                .filter(|i| kinds[every](*i) || *i == 64)
                .collect();
            for id in &ids {
                assert!(m.insert(*id));
                assert!(!m.insert(*id));
            }
            assert!(!m.insert(len as u32), "outside the range");
            assert_eq!(m.count(), ids.len());
            assert_eq!(m.first(), ids.first().copied());
            assert_eq!(m.ids().collect::<Vec<_>>(), ids);
            // logits longer than the mask: the extra ids are refused
            let mut logits: Vec<f32> = (0..len + 5).map(|i| i as f32).collect();
            m.apply(&mut logits);
            for (i, l) in logits.iter().enumerate() {
                let want = if ids.contains(&(i as u32)) {
                    i as f32
                } else {
                    f32::NEG_INFINITY
                };
                assert_eq!(*l, want, "len {len}, kind {every}, id {i}");
            }
        }
        // whole words allowed and refused
        let mut m = TokenMask::new(192);
        for id in 64..128 {
            m.insert(id);
        }
        let mut logits = vec![0.5f32; 192];
        m.apply(&mut logits);
        assert!(logits[..64].iter().all(|l| l.is_infinite()));
        assert!(logits[64..128].iter().all(|l| *l == 0.5));
        assert!(logits[128..].iter().all(|l| l.is_infinite()));
        m.reset(10);
        assert_eq!((m.count(), m.len()), (0, 10));
    }
}
