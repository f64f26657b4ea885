//! The matcher: a pushdown automaton over bytes that accepts exactly the prefixes of the
//! JSON documents a [`Grammar`] generates, and knows how many bytes the shortest way to
//! finish from any state takes. Where `anyOf`/`oneOf` branches start alike it runs one
//! stack per branch side by side (readings), merging equal ones.
//!
//! The documents it accepts are a subset of those the schema allows: no key twice, keys
//! other than the declared ones carry no escapes, numbers have at most 18 integer digits,
//! 20 fraction digits and a two-digit exponent, a bounded number (`minimum`,
//! `multipleOf`…) is an integer it allows or, for a `number` without `multipleOf`, a
//! decimal of up to 15 significant digits it allows (no exponent), `\u` escapes do not
//! start with `d` (no surrogate halves), strings under a pattern or format carry no
//! escapes, and whitespace is as the grammar's [`super::Whitespace`] allows (by default
//! at most one space in a row; at most 16 bytes with `Any`). Every document it accepts
//! is valid.

use std::sync::Arc;

use super::compile::{Grammar, NEVER, Whitespace};
use super::numbers::{NumSpec, Part};
use super::text::Text;
use super::utf8::Utf8;

mod remaining;
mod step;
use remaining::{frame_remaining, num_complete};
use step::{Go, open_escape, step};

const WS_MAX: u8 = 16;

const BOOL_LITS: [&[u8]; 2] = [b"true", b"false"];
const NULL_LITS: [&[u8]; 1] = [b"null"];

/// Where a generation stands in its document.
///
/// Usually one reading of the bytes so far (a stack of frames); where an `anyOf`/`oneOf`
/// value starts with a byte several branches take, one reading per branch, until the
/// bytes leave one (at most [`MAX_READINGS`] at once: past that the first ones go on, so
/// every document taken is still valid and can still be finished).
#[derive(Debug)]
pub struct Matcher {
    g: Arc<Grammar>,
    stack: Vec<Frame>,
    ws: u8,
    /// The lowest frame bytes fed since the last copy may have changed (those below are
    /// as they were): what [`Matcher::reset_to`] copies back.
    low: usize,
    /// The other readings, none equal to another or to the first.
    others: Vec<Reading>,
}

/// Most readings a matcher carries at once.
pub const MAX_READINGS: usize = 32;

/// One reading of the bytes beside the first: its frames and the whitespace run it ends
/// with.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reading {
    stack: Vec<Frame>,
    ws: u8,
}

impl Clone for Matcher {
    fn clone(&self) -> Matcher {
        Matcher {
            g: self.g.clone(),
            stack: self.stack.clone(),
            ws: self.ws,
            low: self.stack.len(),
            others: self.others.clone(),
        }
    }

    /// Reuses `self`'s allocations (the mask walk clones at every trie edge).
    fn clone_from(&mut self, source: &Matcher) {
        if !Arc::ptr_eq(&self.g, &source.g) {
            self.g = source.g.clone();
        }
        self.stack.clone_from(&source.stack);
        self.ws = source.ws;
        self.low = self.stack.len();
        self.others.clone_from(&source.others);
    }
}

/// Inside the key of an object that takes other properties ([`Matcher::free_key`]).
#[derive(Debug)]
pub(crate) struct FreeKey<'m> {
    /// The bytes bare text leaves to write as a new property's key (ending on a whole
    /// character, not spelling a key the object has).
    pub base: usize,
    /// The key so far.
    pub raw: &'m [u8],
    /// The keys the object declares and the other keys it has (a key equal to one of
    /// these is not a new property's).
    pub keys: Vec<&'m [u8]>,
}

/// Inside a string's plain text: how many more characters fit, how many are still owed
/// (`minLength`), and the bytes every frame below the string needs to finish.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InString {
    pub room: usize,
    pub owed: usize,
    pub below: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Num {
    Minus,
    Zero,
    Int(u8),
    Dot,
    Frac(u8),
    Exp,
    ExpSign,
    ExpDigits(u8),
}

impl Num {
    /// Where a bounded number stands ([`Part`]); None in an exponent, which
    /// bounded numbers do not write.
    fn part(self) -> Option<Part> {
        match self {
            Num::Minus => Some(Part::Sign),
            Num::Zero => Some(Part::Zero),
            Num::Int(_) => Some(Part::Int),
            Num::Dot => Some(Part::Frac(0)),
            Num::Frac(j) => Some(Part::Frac(j)),
            _ => None,
        }
    }

    fn accepting(self) -> bool {
        matches!(
            self,
            Num::Zero | Num::Int(_) | Num::Frac(_) | Num::ExpDigits(_)
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lits {
    Node(usize),
    Bool,
    Null,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Declared(usize),
    Extra,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ObjStage {
    Open,
    Key { raw: Vec<u8>, utf8: Utf8 },
    Colon(Target),
    Value(Target),
    AfterValue,
    AfterComma,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArrStage {
    Open,
    Item,
    AfterItem,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Frame {
    /// A value of this node, not started.
    Value(usize),
    Object {
        node: usize,
        /// Bit j: declared property j is written.
        written: u128,
        extras: Vec<Vec<u8>>,
        stage: ObjStage,
    },
    Array {
        node: usize,
        count: usize,
        stage: ArrStage,
        /// Under `uniqueItems`: bit i, the items' literal i (or one equal to it) is written.
        used: u128,
    },
    Str(Text),
    Num {
        int_only: bool,
        st: Num,
        /// An integer read so far: its sign and magnitude (while `st` is in its integer
        /// part), and the range it must end in (`minimum`…), if any.
        neg: bool,
        mag: u64,
        range: Option<NumSpec>,
    },
    Lit {
        src: Lits,
        cands: Vec<u32>,
        pos: usize,
    },
}

/// `*to = from.clone()`, keeping the vectors of a frame of the same kind (a key's bytes,
/// a literal's candidates): the mask walk copies the top frame back at every trie edge.
fn copy_frame(to: &mut Frame, from: &Frame) {
    match (to, from) {
        (
            Frame::Object {
                node,
                written,
                extras,
                stage,
            },
            Frame::Object {
                node: n,
                written: w,
                extras: e,
                stage: s,
            },
        ) => {
            (*node, *written) = (*n, *w);
            extras.clone_from(e);
            match (stage, s) {
                (ObjStage::Key { raw, utf8 }, ObjStage::Key { raw: r, utf8: u }) => {
                    raw.clone_from(r);
                    *utf8 = *u;
                }
                (stage, s) => *stage = s.clone(),
            }
        }
        (
            Frame::Lit { src, cands, pos },
            Frame::Lit {
                src: s,
                cands: c,
                pos: p,
            },
        ) => {
            (*src, *pos) = (*s, *p);
            cands.clone_from(c);
        }
        (to, from) => *to = from.clone(),
    }
}

fn lit(g: &Grammar, src: Lits, i: u32) -> &[u8] {
    match src {
        Lits::Node(n) => &g.nodes[n].literals.as_ref().expect("a literal node")[i as usize],
        Lits::Bool => BOOL_LITS[i as usize],
        Lits::Null => NULL_LITS[i as usize],
    }
}

impl Matcher {
    /// At the start of a document under `g`.
    pub fn new(g: Arc<Grammar>) -> Matcher {
        let root = g.root;
        Matcher {
            g,
            stack: vec![Frame::Value(root)],
            ws: 0,
            low: 1,
            others: Vec::new(),
        }
    }

    /// Makes `self` equal to `source` again, copying only the frames feeding changed:
    /// `self` must have been made equal to `source` (by `clone_from` or this) and only
    /// fed since, and `source` not changed meanwhile. The mask walk's sibling edges.
    pub(crate) fn reset_to(&mut self, source: &Matcher) {
        if !self.others.is_empty() || !source.others.is_empty() {
            self.clone_from(source);
            return;
        }
        let n = source.stack.len();
        self.stack.truncate(n);
        for (i, f) in source.stack.iter().enumerate().skip(self.low) {
            match self.stack.get_mut(i) {
                Some(d) => copy_frame(d, f),
                None => self.stack.push(f.clone()),
            }
        }
        self.ws = source.ws;
        self.low = n;
        debug_assert!(self.stack == source.stack && Arc::ptr_eq(&self.g, &source.g));
    }

    /// The state as text, telling states apart (a search's visited set).
    pub(crate) fn key(&self) -> String {
        format!("{:?}{}{:?}", self.stack, self.ws, self.others)
    }

    /// Whether more than one reading of the bytes so far is open (see [`Matcher`]).
    pub(crate) fn ambiguous(&self) -> bool {
        !self.others.is_empty()
    }

    /// How many readings of the bytes so far are open (see [`Matcher`]): 1 but where
    /// union branches that start alike have not yet parted.
    pub fn readings(&self) -> usize {
        1 + self.others.len()
    }

    /// One matcher per reading, each with that reading alone: the tokens a matcher takes
    /// are those one of its readings takes.
    pub(crate) fn split(&self) -> Vec<Matcher> {
        let first = Reading {
            stack: self.stack.clone(),
            ws: self.ws,
        };
        std::iter::once(first)
            .chain(self.others.iter().cloned())
            .map(|r| Matcher {
                g: self.g.clone(),
                low: r.stack.len(),
                stack: r.stack,
                ws: r.ws,
                others: Vec::new(),
            })
            .collect()
    }

    /// Every reading's frames, the first first.
    fn stacks(&self) -> impl Iterator<Item = &[Frame]> {
        std::iter::once(self.stack.as_slice()).chain(self.others.iter().map(|r| &r.stack[..]))
    }

    /// Takes byte `b` if some generated document continues with it. After a refused byte
    /// the state is unusable: probe on a clone.
    pub fn feed(&mut self, b: u8) -> bool {
        let mut spawned = Vec::new();
        let ok = feed_reading(
            &self.g,
            &mut self.stack,
            &mut self.ws,
            &mut self.low,
            b,
            &mut spawned,
        );
        if spawned.is_empty() && self.others.is_empty() {
            return ok;
        }
        self.feed_others(ok, b, spawned)
    }

    /// [`Matcher::feed`] where there are several readings (or now are): the other readings
    /// take `b` too, those refusing it end, equal ones merge, the first that lives leads.
    #[cold]
    fn feed_others(&mut self, first_took: bool, b: u8, spawned: Vec<Reading>) -> bool {
        let mut next = spawned;
        for mut r in std::mem::take(&mut self.others) {
            let mut more = Vec::new();
            let mut low = 0;
            if feed_reading(&self.g, &mut r.stack, &mut r.ws, &mut low, b, &mut more) {
                next.push(r);
            }
            next.extend(more);
        }
        let mut next = next.into_iter();
        if !first_took {
            let Some(r) = next.next() else {
                return false;
            };
            (self.stack, self.ws, self.low) = (r.stack, r.ws, 0);
        }
        for r in next {
            if self.others.len() + 1 >= MAX_READINGS {
                break;
            }
            let same_as_first = r.stack == self.stack && r.ws == self.ws;
            if !same_as_first && !self.others.contains(&r) {
                self.others.push(r);
            }
        }
        true
    }

    /// Takes every byte of `bytes`; false if one is refused (the state is then unusable:
    /// feed a clone when probing).
    pub fn feed_all(&mut self, bytes: &[u8]) -> bool {
        bytes.iter().all(|b| self.feed(*b))
    }

    /// The document is finished: no byte can follow.
    pub fn finished(&self) -> bool {
        self.stacks().all(<[Frame]>::is_empty)
    }

    /// The bytes so far form a whole valid document (finished, or a top-level number or
    /// literal that could still go on).
    pub fn complete(&self) -> bool {
        self.stacks().any(|s| whole(&self.g, s))
    }

    /// Where plain string text may come next (not inside an escape or a multi-byte
    /// character) in the only reading: what [`super::TokenVocab`] needs to allow
    /// plain-text tokens without walking them.
    pub(crate) fn in_string(&self) -> Option<InString> {
        if self.ambiguous() {
            return None;
        }
        let (top, rest) = self.stack.split_last()?;
        match top {
            Frame::Str(t) => t.plain().map(|(room, owed)| InString {
                room,
                owed,
                below: frames_left(&self.g, &self.stack, rest.len()),
            }),
            _ => None,
        }
    }

    /// Inside a string, in the only reading: the string's state and the bytes the frames
    /// below it need to finish — all a walk needs to follow the string byte by byte (its
    /// remaining is `below` plus the string's own) without copying frames.
    pub(in crate::schema) fn in_text(&self) -> Option<(Text, usize)> {
        if self.ambiguous() {
            return None;
        }
        let (Frame::Str(t), rest) = self.stack.split_last()? else {
            return None;
        };
        let below = frames_left(&self.g, &self.stack, rest.len());
        Some((*t, below))
    }

    /// The grammar it follows.
    pub(crate) fn grammar(&self) -> &Grammar {
        &self.g
    }

    /// In the key of an object that takes other properties, with no escape or character
    /// under way, in the only reading: that key ([`FreeKey`]). The matcher takes any bare
    /// text there (no `"`, backslash or control byte; well-formed UTF-8, the last
    /// character maybe cut) as the start of another property's key, or of a declared one
    /// ([`super::in_key`] allows those tokens at once).
    pub(crate) fn free_key(&self) -> Option<FreeKey<'_>> {
        if self.ambiguous() {
            return None;
        }
        let (top, rest) = self.stack.split_last()?;
        let Frame::Object {
            node,
            written,
            extras,
            stage: ObjStage::Key { raw, utf8 },
        } = top
        else {
            return None;
        };
        let nodes = &self.g.nodes;
        let n = &nodes[*node];
        let extra = n.extra?;
        if *utf8 != Utf8::Ready || open_escape(raw) {
            return None;
        }
        let below = frames_left(&self.g, &self.stack, rest.len());
        // bare text as a new property's key: the quote and colon, the value, the members
        // still owed, the brace (and the bytes a cut character owes)
        let base = below
            .saturating_add(2)
            .saturating_add(nodes[extra].min_bytes)
            .saturating_add(n.members_cost(nodes, *written, true, false, 1))
            .saturating_add(1);
        let keys = n.props.iter().map(|p| &p.key[..]);
        Some(FreeKey {
            base,
            raw,
            keys: keys.chain(extras.iter().map(|e| &e[..])).collect(),
        })
    }

    /// The fewest bytes that finish the document from here.
    pub fn remaining(&self) -> usize {
        let left = |stack: &[Frame]| frames_left(&self.g, stack, stack.len());
        self.stacks().map(left).min().unwrap_or(0).min(NEVER)
    }
}

/// The fewest bytes that finish the first `n` frames of `stack` (each counted with the
/// frame above it, as [`frame_remaining`] asks).
fn frames_left(g: &Grammar, stack: &[Frame], n: usize) -> usize {
    stack[..n].iter().enumerate().fold(0usize, |a, (i, f)| {
        a.saturating_add(frame_remaining(g, f, stack.get(i + 1)))
    })
}

/// Whether the frames `stack` hold a whole valid document (finished, or a top-level
/// number or literal that could still go on).
fn whole(g: &Grammar, stack: &[Frame]) -> bool {
    match stack {
        [] => true,
        [
            Frame::Num {
                st,
                neg,
                mag,
                range,
                ..
            },
        ] => num_complete(*st, *neg, *mag, *range),
        [Frame::Lit { src, cands, pos }] => cands.iter().any(|c| lit(g, *src, *c).len() == *pos),
        _ => false,
    }
}

/// Feeds byte `b` to one reading (its frames `stack`, whitespace run `ws`; `low` as in
/// [`Matcher`]); readings it splits into at an `anyOf`/`oneOf` start go to `spawned`.
#[inline(always)]
fn feed_reading(
    g: &Grammar,
    stack: &mut Vec<Frame>,
    ws: &mut u8,
    low: &mut usize,
    b: u8,
    spawned: &mut Vec<Reading>,
) -> bool {
    loop {
        let at = stack.len().saturating_sub(1);
        let Some(top) = stack.last_mut() else {
            return false;
        };
        let go = step(g, top, b);
        // a refusal or whitespace leaves the frames as they were
        if !matches!(go, Go::No | Go::Ws) {
            *low = (*low).min(at);
        }
        match go {
            Go::No => return false,
            Go::Ws => {
                let ok = match g.whitespace {
                    Whitespace::Compact => b == b' ' && *ws == 0,
                    Whitespace::Any => *ws < WS_MAX,
                    Whitespace::None => false,
                };
                *ws += u8::from(ok);
                return ok;
            }
            Go::Take => {
                *ws = 0;
                return true;
            }
            Go::Become(f) => {
                become_frame(g, stack, low, f);
                *ws = 0;
                return true;
            }
            Go::Split(mut frames) => {
                // the other branches go on from a copy of this reading as it was
                let first = frames.remove(0);
                for f in frames {
                    let mut other = stack.clone();
                    become_frame(g, &mut other, &mut 0, f);
                    spawned.push(Reading {
                        stack: other,
                        ws: 0,
                    });
                }
                become_frame(g, stack, low, first);
                *ws = 0;
                return true;
            }
            Go::Push(f) => {
                *ws = 0;
                stack.push(f);
                return true;
            }
            Go::PushFeed(f) => stack.push(f),
            Go::Done => {
                *ws = 0;
                let done = finished_literal(g, stack.pop());
                *low = (*low).min(stack.len().saturating_sub(1));
                child_done(g, stack, done);
                return true;
            }
            Go::Pop => {
                let done = finished_literal(g, stack.pop());
                *low = (*low).min(stack.len().saturating_sub(1));
                child_done(g, stack, done);
            }
        }
    }
}

/// The value on top of `stack` becomes frame `f` (a literal whose every candidate is
/// already whole ends at once).
fn become_frame(g: &Grammar, stack: &mut Vec<Frame>, low: &mut usize, f: Frame) {
    let Some(top) = stack.last_mut() else {
        return;
    };
    *top = f;
    if let Frame::Lit { src, cands, pos } = top
        && cands.iter().all(|c| lit(g, *src, *c).len() == *pos)
    {
        let done = finished_literal(g, stack.pop());
        *low = (*low).min(stack.len().saturating_sub(1));
        child_done(g, stack, done);
    }
}

/// The literal a finished literal frame `f` wrote (the candidate as long as what it
/// read), when it is one of a node's.
fn finished_literal(g: &Grammar, f: Option<Frame>) -> Option<u32> {
    match f {
        Some(Frame::Lit {
            src: src @ Lits::Node(_),
            cands,
            pos,
        }) => cands.into_iter().find(|c| lit(g, src, *c).len() == pos),
        _ => None,
    }
}

/// A value on top of `stack`'s parent has ended (the literal `done`, when it was one).
fn child_done(g: &Grammar, stack: &mut [Frame], done: Option<u32>) {
    match stack.last_mut() {
        Some(Frame::Object { written, stage, .. }) => {
            if let ObjStage::Value(t) = stage {
                if let Target::Declared(j) = *t {
                    *written |= 1u128 << j;
                }
                *stage = ObjStage::AfterValue;
            }
        }
        Some(Frame::Array {
            node,
            count,
            stage,
            used,
        }) => {
            *count += 1;
            *stage = ArrStage::AfterItem;
            if let (Some(i), Some(u)) = (done, &g.nodes[*node].unique) {
                *used |= u.same[i as usize];
            }
        }
        _ => {}
    }
}
