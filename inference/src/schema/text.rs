//! The matcher's string values: plain text, escapes and multi-byte characters within
//! `minLength`/`maxLength`, or text under a `pattern`/`format` automaton
//! ([`super::pattern`]), where no escapes are written.

use super::compile::{Grammar, Node};
use super::utf8::Utf8;

/// What a string does with a byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Refused.
    No,
    /// Taken; the string goes on.
    Take,
    /// The closing quote.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Esc {
    None,
    Backslash,
    Hex(u8),
}

/// A string value being written (after its opening quote).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Text {
    /// `minLength`, `maxLength` in code points, and the code points so far.
    min: usize,
    max: usize,
    count: usize,
    esc: Esc,
    utf8: Utf8,
    /// Under a `pattern` or `format`: which ([`Grammar`]'s index), and its state.
    pat: Option<(u32, u32)>,
}

impl Text {
    /// An empty string under `n`.
    pub fn new(n: &Node) -> Text {
        Text {
            min: n.min_len,
            max: n.max_len.unwrap_or(usize::MAX),
            count: 0,
            esc: Esc::None,
            utf8: Utf8::Ready,
            pat: n.pattern.map(|(id, _)| (id, 0)),
        }
    }

    /// What the string does with byte `b`; a refused byte leaves it as it was.
    pub fn step(&mut self, g: &Grammar, b: u8) -> Step {
        match self.esc {
            // under a pattern its automaton takes the byte first (no escapes there)
            Esc::None if let Some((id, state)) = self.pat => {
                let p = &g.patterns[id as usize];
                if b == b'"' {
                    return if p.left(state) == 0 && self.count >= self.min {
                        Step::Done
                    } else {
                        Step::No
                    };
                }
                let Some(next) = p.step(state, b) else {
                    return Step::No;
                };
                let step = self.plain_byte(b);
                if step != Step::No {
                    self.pat = Some((id, next));
                }
                step
            }
            Esc::None => self.plain_byte(b),
            Esc::Backslash => match b {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                    self.esc = Esc::None;
                    Step::Take
                }
                b'u' => {
                    self.esc = Esc::Hex(0);
                    Step::Take
                }
                _ => Step::No,
            },
            Esc::Hex(k) => {
                if !b.is_ascii_hexdigit() || (k == 0 && (b == b'd' || b == b'D')) {
                    return Step::No;
                }
                self.esc = if k == 3 { Esc::None } else { Esc::Hex(k + 1) };
                Step::Take
            }
        }
    }

    /// A byte outside an escape: the closing quote, an escape's backslash, or a
    /// character's byte.
    fn plain_byte(&mut self, b: u8) -> Step {
        if self.utf8 != Utf8::Ready {
            return match self.utf8.step(b) {
                Some(u) => {
                    self.utf8 = u;
                    Step::Take
                }
                None => Step::No,
            };
        }
        match b {
            b'"' if self.count >= self.min => Step::Done,
            b'"' | 0x00..=0x1F => Step::No,
            _ if self.count >= self.max => Step::No,
            b'\\' => {
                self.count += 1;
                self.esc = Esc::Backslash;
                Step::Take
            }
            _ => match self.utf8.step(b) {
                Some(u) => {
                    self.count += 1;
                    self.utf8 = u;
                    Step::Take
                }
                None => Step::No,
            },
        }
    }

    /// Where plain text may come next (no escape, character or pattern under way): the
    /// characters that still fit and those still owed.
    pub fn plain(&self) -> Option<(usize, usize)> {
        (self.esc == Esc::None && self.utf8 == Utf8::Ready && self.pat.is_none())
            .then(|| (self.max - self.count, self.min.saturating_sub(self.count)))
    }

    /// The fewest bytes that finish the string, closing quote included.
    pub fn remaining(&self, g: &Grammar) -> usize {
        if let Some((id, state)) = self.pat {
            return g.patterns[id as usize].left(state).saturating_add(1);
        }
        let esc = match self.esc {
            Esc::None => 0,
            Esc::Backslash => 1,
            Esc::Hex(k) => usize::from(4 - k),
        };
        esc + self.utf8.owed() + self.min.saturating_sub(self.count) + 1
    }
}
