//! The matcher: a pushdown automaton over bytes that accepts exactly the prefixes of the
//! JSON documents a [`Grammar`] generates, and knows how many bytes the shortest way to
//! finish from any state takes.
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

use super::compile::{
    ARRAY, BOOLEAN, Grammar, INTEGER, NEVER, NULL, NUMBER, OBJECT, STRING, Whitespace,
};
use super::numbers::{INT_DIGITS, NumSpec, Part, allowed_now, reachable};
use super::text::{Step, Text};
use super::utf8::Utf8;

mod remaining;
use remaining::{frame_remaining, num_complete};

const WS_MAX: u8 = 16;
const FRAC_DIGITS: u8 = 20;
const EXP_DIGITS: u8 = 2;

const BOOL_LITS: [&[u8]; 2] = [b"true", b"false"];
const NULL_LITS: [&[u8]; 1] = [b"null"];

/// Where a generation stands in its document.
#[derive(Debug)]
pub struct Matcher {
    g: Arc<Grammar>,
    stack: Vec<Frame>,
    ws: u8,
    /// The lowest frame bytes fed since the last copy may have changed (those below are
    /// as they were): what [`Matcher::reset_to`] copies back.
    low: usize,
}

impl Clone for Matcher {
    fn clone(&self) -> Matcher {
        Matcher {
            g: self.g.clone(),
            stack: self.stack.clone(),
            ws: self.ws,
            low: self.stack.len(),
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
    }
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

/// What a frame does with a byte.
enum Go {
    No,
    Ws,
    Take,
    Become(Frame),
    Push(Frame),
    PushFeed(Frame),
    Done,
    Pop,
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\t' | b'\r')
}

/// A number or literal that could end here meets byte `b`: it ends ([`Go::Pop`]) when its
/// parent may take `b` next. That parent is an object or array whose value just ended, or
/// none (the document is whole), and takes nothing but whitespace, a comma or its close —
/// so any other byte is refused here, before a frame changes.
fn end_before(b: u8) -> Go {
    if is_ws(b) || matches!(b, b',' | b'}' | b']') {
        Go::Pop
    } else {
        Go::No
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
        }
    }

    /// Makes `self` equal to `source` again, copying only the frames feeding changed:
    /// `self` must have been made equal to `source` (by `clone_from` or this) and only
    /// fed since, and `source` not changed meanwhile. The mask walk's sibling edges.
    pub(crate) fn reset_to(&mut self, source: &Matcher) {
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
        format!("{:?}{}", self.stack, self.ws)
    }

    /// Takes byte `b` if some generated document continues with it. After a refused byte
    /// the state is unusable: probe on a clone.
    pub fn feed(&mut self, b: u8) -> bool {
        let g: &Grammar = &self.g;
        let stack = &mut self.stack;
        loop {
            let at = stack.len().saturating_sub(1);
            let Some(top) = stack.last_mut() else {
                return false;
            };
            let go = step(g, top, b);
            // a refusal or whitespace leaves the frames as they were
            if !matches!(go, Go::No | Go::Ws) {
                self.low = self.low.min(at);
            }
            match go {
                Go::No => return false,
                Go::Ws => {
                    let ok = match g.whitespace {
                        Whitespace::Compact => b == b' ' && self.ws == 0,
                        Whitespace::Any => self.ws < WS_MAX,
                        Whitespace::None => false,
                    };
                    self.ws += u8::from(ok);
                    return ok;
                }
                Go::Take => {
                    self.ws = 0;
                    return true;
                }
                Go::Become(f) => {
                    *top = f;
                    self.ws = 0;
                    if let Frame::Lit { src, cands, pos } = top
                        && cands.iter().all(|c| lit(g, *src, *c).len() == *pos)
                    {
                        let done = finished_literal(g, stack.pop());
                        self.low = self.low.min(stack.len().saturating_sub(1));
                        child_done(g, stack, done);
                    }
                    return true;
                }
                Go::Push(f) => {
                    self.ws = 0;
                    stack.push(f);
                    return true;
                }
                Go::PushFeed(f) => stack.push(f),
                Go::Done => {
                    self.ws = 0;
                    let done = finished_literal(g, stack.pop());
                    self.low = self.low.min(stack.len().saturating_sub(1));
                    child_done(g, stack, done);
                    return true;
                }
                Go::Pop => {
                    let done = finished_literal(g, stack.pop());
                    self.low = self.low.min(stack.len().saturating_sub(1));
                    child_done(g, stack, done);
                }
            }
        }
    }

    /// Takes every byte of `bytes`; false if one is refused (the state is then unusable:
    /// feed a clone when probing).
    pub fn feed_all(&mut self, bytes: &[u8]) -> bool {
        bytes.iter().all(|b| self.feed(*b))
    }

    /// The document is finished: no byte can follow.
    pub fn finished(&self) -> bool {
        self.stack.is_empty()
    }

    /// The bytes so far form a whole valid document (finished, or a top-level number or
    /// literal that could still go on).
    pub fn complete(&self) -> bool {
        match self.stack.as_slice() {
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
            [Frame::Lit { src, cands, pos }] => {
                cands.iter().any(|c| lit(&self.g, *src, *c).len() == *pos)
            }
            _ => false,
        }
    }

    /// Where plain string text may come next (not inside an escape or a multi-byte
    /// character): what [`super::TokenVocab`] needs to allow plain-text tokens without
    /// walking them.
    pub(crate) fn in_string(&self) -> Option<InString> {
        let (top, rest) = self.stack.split_last()?;
        match top {
            Frame::Str(t) => t.plain().map(|(room, owed)| InString {
                room,
                owed,
                below: rest.iter().enumerate().fold(0usize, |a, (i, f)| {
                    a.saturating_add(frame_remaining(&self.g, f, self.stack.get(i + 1)))
                }),
            }),
            _ => None,
        }
    }

    /// The fewest bytes that finish the document from here.
    pub fn remaining(&self) -> usize {
        let g = &self.g;
        let mut sum = 0usize;
        for (i, f) in self.stack.iter().enumerate() {
            sum = sum.saturating_add(frame_remaining(g, f, self.stack.get(i + 1)));
        }
        sum.min(NEVER)
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

/// What frame `f` does with byte `b`; it refuses ([`Go::No`]) or takes whitespace
/// ([`Go::Ws`]) without changing `f` (the mask walk copies back only changed frames).
fn step(g: &Grammar, f: &mut Frame, b: u8) -> Go {
    match f {
        Frame::Value(node) => start_value(g, *node, b),
        Frame::Object {
            node,
            written,
            extras,
            stage,
        } => object_step(g, *node, *written, extras, stage, b),
        Frame::Array {
            node,
            count,
            stage,
            used,
        } => {
            let n = &g.nodes[*node];
            // the next item's frame: under `uniqueItems`, one of the values not yet written
            let next = |i: usize| match &n.unique {
                None => Some(Frame::Value(n.item(i))),
                Some(u) => {
                    let cands: Vec<u32> = (0..u.same.len() as u32)
                        .filter(|c| *used & (1u128 << c) == 0)
                        .collect();
                    (!cands.is_empty()).then_some(Frame::Lit {
                        src: Lits::Node(n.items),
                        cands,
                        pos: 0,
                    })
                }
            };
            match stage {
                ArrStage::Open if is_ws(b) => Go::Ws,
                ArrStage::Open if b == b']' => {
                    if n.min_items == 0 {
                        Go::Done
                    } else {
                        Go::No
                    }
                }
                ArrStage::Open => {
                    if n.max_items == Some(0) {
                        return Go::No;
                    }
                    let Some(f) = next(0) else {
                        return Go::No;
                    };
                    *stage = ArrStage::Item;
                    Go::PushFeed(f)
                }
                ArrStage::Item => Go::No,
                ArrStage::AfterItem if is_ws(b) => Go::Ws,
                ArrStage::AfterItem if b == b',' => {
                    if n.max_items.is_some_and(|m| *count >= m) {
                        return Go::No;
                    }
                    let Some(f) = next(*count) else {
                        return Go::No;
                    };
                    *stage = ArrStage::Item;
                    Go::Push(f)
                }
                ArrStage::AfterItem if b == b']' && *count >= n.min_items => Go::Done,
                ArrStage::AfterItem => Go::No,
            }
        }
        Frame::Str(t) => match t.step(g, b) {
            Step::No => Go::No,
            Step::Take => Go::Take,
            Step::Done => Go::Done,
        },
        Frame::Num {
            int_only,
            st,
            neg,
            mag,
            range,
        } => {
            let digit = b.is_ascii_digit();
            if let Some(r) = *range {
                // a number in a range: a digit or point only where the range can still
                // be met (its digit limits included)
                let Some(at) = st.part() else {
                    return Go::No;
                };
                let here = allowed_now(*neg, *mag, at, r);
                let next = match (*st, b) {
                    (Num::Minus, b'0') => Some(Num::Zero),
                    (Num::Minus, _) if digit => Some(Num::Int(1)),
                    (Num::Int(n), _) if digit && n < INT_DIGITS => Some(Num::Int(n + 1)),
                    (Num::Zero | Num::Int(_), b'.') if r.frac > 0 => Some(Num::Dot),
                    (Num::Dot, _) if digit => Some(Num::Frac(1)),
                    (Num::Frac(j), _) if digit && j < r.frac => Some(Num::Frac(j + 1)),
                    _ => None,
                };
                let m = match digit {
                    true => *mag * 10 + u64::from(b - b'0'),
                    false => *mag,
                };
                return match next.and_then(|s| Some((s, s.part()?))) {
                    Some((s, p)) if reachable(*neg, m, p, r) => {
                        *st = s;
                        *mag = m;
                        Go::Take
                    }
                    _ if here => end_before(b),
                    _ => Go::No,
                };
            }
            let next = match (*st, b) {
                (Num::Minus, b'0') => Some(Num::Zero),
                (Num::Minus, _) if digit => Some(Num::Int(1)),
                (Num::Int(n), _) if digit && n < INT_DIGITS => Some(Num::Int(n + 1)),
                (Num::Zero | Num::Int(_), b'.') if !*int_only => Some(Num::Dot),
                (Num::Zero | Num::Int(_) | Num::Frac(_), b'e' | b'E') if !*int_only => {
                    Some(Num::Exp)
                }
                (Num::Dot, _) if digit => Some(Num::Frac(1)),
                (Num::Frac(n), _) if digit && n < FRAC_DIGITS => Some(Num::Frac(n + 1)),
                (Num::Exp, b'+' | b'-') => Some(Num::ExpSign),
                (Num::Exp | Num::ExpSign, _) if digit => Some(Num::ExpDigits(1)),
                (Num::ExpDigits(n), _) if digit && n < EXP_DIGITS => Some(Num::ExpDigits(n + 1)),
                _ => None,
            };
            match next {
                Some(s) => {
                    *st = s;
                    Go::Take
                }
                None if st.accepting() => end_before(b),
                None => Go::No,
            }
        }
        Frame::Lit { src, cands, pos } => {
            let p = *pos;
            // a `uniqueItems` item starts as a literal frame: whitespace may come first
            if p == 0 && is_ws(b) {
                return Go::Ws;
            }
            let finished = cands.iter().copied().find(|c| lit(g, *src, *c).len() == p);
            let src = *src;
            let goes_on = |c: &u32| lit(g, src, *c).get(p) == Some(&b);
            if !cands.iter().any(goes_on) {
                // the finished one stays, so the parent learns which value was written
                return match (finished, end_before(b)) {
                    (Some(c), Go::Pop) => {
                        cands.clear();
                        cands.push(c);
                        Go::Pop
                    }
                    _ => Go::No,
                };
            }
            cands.retain(goes_on);
            *pos += 1;
            if cands.iter().all(|c| lit(g, src, *c).len() == *pos) {
                Go::Done
            } else {
                Go::Take
            }
        }
    }
}

fn start_value(g: &Grammar, node: usize, b: u8) -> Go {
    if is_ws(b) {
        return Go::Ws;
    }
    let n = &g.nodes[node];
    if !n.alts.is_empty() {
        // `anyOf`/`oneOf`: the branch this byte can start (at most one can)
        return match n.alts.iter().find(|(_, first)| first[usize::from(b)]) {
            Some((branch, _)) => start_value(g, *branch, b),
            None => Go::No,
        };
    }
    if let Some(lits) = &n.literals {
        let cands: Vec<u32> = (0..lits.len() as u32)
            .filter(|i| lits[*i as usize].first() == Some(&b))
            .collect();
        if cands.is_empty() {
            return Go::No;
        }
        return Go::Become(Frame::Lit {
            src: Lits::Node(node),
            cands,
            pos: 1,
        });
    }
    let k = n.kinds;
    match b {
        b'{' if k & OBJECT != 0 => Go::Become(Frame::Object {
            node,
            written: 0,
            extras: Vec::new(),
            stage: ObjStage::Open,
        }),
        b'[' if k & ARRAY != 0 => Go::Become(Frame::Array {
            node,
            count: 0,
            stage: ArrStage::Open,
            used: 0,
        }),
        b'"' if k & STRING != 0 => Go::Become(Frame::Str(Text::new(n))),
        b'-' | b'0'..=b'9' if k & (NUMBER | INTEGER) != 0 => {
            let (neg, mag) = (b == b'-', u64::from(b.wrapping_sub(b'0')).min(9));
            let mag = if neg { 0 } else { mag };
            let st = match b {
                b'-' => Num::Minus,
                b'0' => Num::Zero,
                _ => Num::Int(1),
            };
            let part = st.part().expect("a number's start");
            if n.num_range.is_some_and(|r| !reachable(neg, mag, part, r)) {
                return Go::No;
            }
            Go::Become(Frame::Num {
                int_only: n.kinds & NUMBER == 0,
                st,
                neg,
                mag,
                range: n.num_range,
            })
        }
        b't' | b'f' if k & BOOLEAN != 0 => Go::Become(Frame::Lit {
            src: Lits::Bool,
            cands: vec![u32::from(b == b'f')],
            pos: 1,
        }),
        b'n' if k & NULL != 0 => Go::Become(Frame::Lit {
            src: Lits::Null,
            cands: vec![0],
            pos: 1,
        }),
        _ => Go::No,
    }
}

/// Whether `raw` ends inside an escape (an odd run of backslashes).
fn open_escape(raw: &[u8]) -> bool {
    raw.iter().rev().take_while(|c| **c == b'\\').count() % 2 == 1
}

fn object_step(
    g: &Grammar,
    node: usize,
    written: u128,
    extras: &mut Vec<Vec<u8>>,
    stage: &mut ObjStage,
    b: u8,
) -> Go {
    let n = &g.nodes[node];
    match stage {
        ObjStage::Open | ObjStage::AfterValue | ObjStage::AfterComma if is_ws(b) => Go::Ws,
        ObjStage::Open | ObjStage::AfterComma if b == b'"' => {
            *stage = ObjStage::Key {
                raw: Vec::new(),
                utf8: Utf8::Ready,
            };
            Go::Take
        }
        ObjStage::Open | ObjStage::AfterValue if b == b'}' && !n.owes(written) => Go::Done,
        ObjStage::AfterValue if b == b',' => {
            if n.unwritten(written).next().is_none() && n.extra.is_none() {
                return Go::No;
            }
            *stage = ObjStage::AfterComma;
            Go::Take
        }
        ObjStage::Key { raw, utf8 } => {
            let window = n.unwritten(written);
            if b == b'"' && !open_escape(raw) && *utf8 == Utf8::Ready {
                if let Some(j) = window.clone().find(|j| n.props[*j].key == *raw) {
                    *stage = ObjStage::Colon(Target::Declared(j));
                    return Go::Take;
                }
                if n.extra.is_some()
                    && !n.props.iter().any(|p| p.key == *raw)
                    && !extras.contains(raw)
                {
                    extras.push(std::mem::take(raw));
                    *stage = ObjStage::Colon(Target::Extra);
                    return Go::Take;
                }
                return Go::No;
            }
            let declared = window.clone().any(|j| {
                let k = &n.props[j].key;
                k.starts_with(raw) && k.get(raw.len()) == Some(&b)
            });
            let plain = n.extra.is_some() && b >= 0x20 && b != b'\\' && b != b'"';
            let next_utf8 = utf8.step(b);
            if declared || (plain && next_utf8.is_some()) {
                raw.push(b);
                *utf8 = next_utf8.unwrap_or(Utf8::Ready);
                Go::Take
            } else {
                Go::No
            }
        }
        ObjStage::Colon(t) if b == b':' => {
            let t = *t;
            let value = match t {
                Target::Declared(j) => n.props[j].node,
                Target::Extra => n.extra.expect("an extra key needs additionalProperties"),
            };
            *stage = ObjStage::Value(t);
            Go::Push(Frame::Value(value))
        }
        ObjStage::Colon(_) if is_ws(b) => Go::Ws,
        _ => Go::No,
    }
}
