//! What one frame of a [`super::Matcher`] does with one byte: the automaton's moves
//! (starting a value, an object's keys and members, an array's items, a number's digits,
//! a literal's bytes), which the matcher applies to its stack.

use super::{ArrStage, Frame, Lits, Num, ObjStage, Target, lit};
use crate::schema::compile::{ARRAY, BOOLEAN, Grammar, INTEGER, NULL, NUMBER, OBJECT, STRING};
use crate::schema::numbers::{INT_DIGITS, allowed_now, reachable};
use crate::schema::text::{Step, Text};
use crate::schema::utf8::Utf8;

const FRAC_DIGITS: u8 = 20;
const EXP_DIGITS: u8 = 2;

/// What a frame does with a byte.
pub(super) enum Go {
    No,
    Ws,
    Take,
    Become(Frame),
    /// An `anyOf`/`oneOf` value starts as each of these (several branches take the byte).
    Split(Vec<Frame>),
    Push(Frame),
    PushFeed(Frame),
    Done,
    Pop,
}

pub(super) fn is_ws(b: u8) -> bool {
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

/// What frame `f` does with byte `b`; it refuses ([`Go::No`]) or takes whitespace
/// ([`Go::Ws`]) without changing `f` (the mask walk copies back only changed frames).
pub(super) fn step(g: &Grammar, f: &mut Frame, b: u8) -> Go {
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
        // `anyOf`/`oneOf`: the branches this byte can start, one reading each
        let mut takers = n.alts.iter().filter(|(_, first)| first[usize::from(b)]);
        let (Some((one, _)), None) = (takers.next(), takers.clone().next()) else {
            let mut frames = Vec::new();
            for (branch, first) in &n.alts {
                if first[usize::from(b)] {
                    match start_value(g, *branch, b) {
                        Go::Become(f) => frames.push(f),
                        Go::Split(fs) => frames.extend(fs),
                        _ => {}
                    }
                }
            }
            return match frames.len() {
                0 => Go::No,
                1 => Go::Become(frames.remove(0)),
                _ => Go::Split(frames),
            };
        };
        return start_value(g, *one, b);
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
pub(super) fn open_escape(raw: &[u8]) -> bool {
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
