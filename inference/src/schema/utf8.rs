//! UTF-8 inside the matcher's strings and keys: which continuation bytes are still owed,
//! so that only well-formed UTF-8 (no overlongs, surrogates or values past U+10FFFF) is
//! ever written.

/// UTF-8 continuation bytes still owed, with the range the next one must fall in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Utf8 {
    Ready,
    More { left: u8, lo: u8, hi: u8 },
}

impl Utf8 {
    /// The state after `b`, or None if `b` cannot come next.
    pub(crate) fn step(self, b: u8) -> Option<Utf8> {
        match self {
            Utf8::More { left, lo, hi } => {
                if !(lo..=hi).contains(&b) {
                    return None;
                }
                Some(if left == 1 {
                    Utf8::Ready
                } else {
                    Utf8::More {
                        left: left - 1,
                        lo: 0x80,
                        hi: 0xBF,
                    }
                })
            }
            Utf8::Ready => {
                let (left, lo, hi) = match b {
                    0x00..=0x7F => return Some(Utf8::Ready),
                    0xC2..=0xDF => (1, 0x80, 0xBF),
                    0xE0 => (2, 0xA0, 0xBF),
                    0xED => (2, 0x80, 0x9F),
                    0xE1..=0xEF => (2, 0x80, 0xBF),
                    0xF0 => (3, 0x90, 0xBF),
                    0xF1..=0xF3 => (3, 0x80, 0xBF),
                    0xF4 => (3, 0x80, 0x8F),
                    _ => return None,
                };
                Some(Utf8::More { left, lo, hi })
            }
        }
    }

    pub(crate) fn owed(self) -> usize {
        match self {
            Utf8::Ready => 0,
            Utf8::More { left, .. } => usize::from(left),
        }
    }
}
