//! How many bytes the shortest way to finish takes from each frame of a
//! [`super::Matcher`]: what [`super::Matcher::remaining`] sums, and the mask walk asks
//! at every token it keeps.

use super::{ArrStage, Frame, Num, ObjStage, Target, lit, open_escape};
use crate::schema::compile::{Grammar, NEVER};
use crate::schema::numbers::{NumSpec, allowed_now, to_range};

/// The bytes a bounded number still needs to end as one `r` allows (0: it is one now).
fn bounded_left(st: Num, neg: bool, mag: u64, r: NumSpec) -> Option<usize> {
    st.part().and_then(|p| to_range(neg, mag, p, r))
}

/// Whether a number frame holds a whole value now (one its range allows, when it has one).
pub(super) fn num_complete(st: Num, neg: bool, mag: u64, range: Option<NumSpec>) -> bool {
    match range {
        None => st.accepting(),
        Some(r) => st.part().is_some_and(|p| allowed_now(neg, mag, p, r)),
    }
}

/// The fewest bytes that finish frame `f`, given the frame `above` it (a `uniqueItems`
/// array counts its owed items against the value its current item is becoming).
pub(super) fn frame_remaining(g: &Grammar, f: &Frame, above: Option<&Frame>) -> usize {
    let nodes = &g.nodes;
    match f {
        Frame::Value(node) => nodes[*node].min_bytes,
        Frame::Lit { src, cands, pos } => cands
            .iter()
            .map(|c| lit(g, *src, *c).len() - pos)
            .min()
            .unwrap_or(NEVER),
        Frame::Str(t) => t.remaining(g),
        Frame::Num {
            st,
            neg,
            mag,
            range: Some(r),
            ..
        } => bounded_left(*st, *neg, *mag, *r).unwrap_or(NEVER),
        Frame::Num { st, .. } => usize::from(!st.accepting()),
        Frame::Array {
            node,
            count,
            stage,
            used,
        } => {
            let n = &nodes[*node];
            let done = match stage {
                ArrStage::Open | ArrStage::AfterItem => *count,
                ArrStage::Item => *count + 1,
            };
            let k = n.min_items.saturating_sub(done);
            let owed = match (&n.unique, stage, above) {
                (None, ..) => n.items_cost(nodes, done, n.min_items),
                (Some(u), ArrStage::Item, Some(Frame::Lit { src, cands, pos })) => {
                    // the item being written becomes one of its candidates and the owed
                    // items are others: both together, less what the literal frame counts
                    let left = |c: u32| lit(g, *src, c).len() - pos;
                    let own = cands.iter().map(|c| left(*c)).min().unwrap_or(NEVER);
                    u.cost_after(*used, k, cands, left).saturating_sub(own)
                }
                (Some(u), ..) => u.cost(*used, k),
            };
            match stage {
                // the first item needs no comma
                ArrStage::Open if done < n.min_items => owed,
                _ => owed.saturating_add(1),
            }
        }
        Frame::Object {
            node,
            written,
            extras,
            stage,
        } => {
            let n = &nodes[*node];
            let written = *written;
            let extra_key = usize::from(
                n.props.iter().any(|p| p.key.is_empty()) || extras.iter().any(Vec::is_empty),
            );
            let rest_after = |w: u128| n.members_cost(nodes, w, true, false, extra_key);
            let value_of = |t: Target| match t {
                Target::Declared(j) => (nodes[n.props[j].node].min_bytes, written | (1u128 << j)),
                Target::Extra => (n.extra.map_or(NEVER, |e| nodes[e].min_bytes), written),
            };
            let body = match stage {
                ObjStage::Open => n.members_cost(nodes, written, false, false, extra_key),
                ObjStage::AfterValue => rest_after(written),
                ObjStage::AfterComma => n.members_cost(nodes, written, false, true, extra_key),
                ObjStage::Colon(t) => {
                    let (v, after) = value_of(*t);
                    v.saturating_add(1).saturating_add(rest_after(after))
                }
                ObjStage::Value(t) => rest_after(value_of(*t).1),
                ObjStage::Key { raw, utf8 } => {
                    let mut best = NEVER;
                    for j in n.unwritten(written) {
                        let k = &n.props[j].key;
                        if k.starts_with(raw) {
                            let v = nodes[n.props[j].node].min_bytes;
                            best = best.min(
                                (k.len() - raw.len() + 2)
                                    .saturating_add(v)
                                    .saturating_add(rest_after(written | (1u128 << j))),
                            );
                        }
                    }
                    if let Some(e) = n.extra
                        && !open_escape(raw)
                    {
                        let taken = n.props.iter().any(|p| p.key == *raw) || extras.contains(raw);
                        best = best.min(
                            (utf8.owed() + usize::from(taken) + 2)
                                .saturating_add(nodes[e].min_bytes)
                                .saturating_add(rest_after(written)),
                        );
                    }
                    best
                }
            };
            body.saturating_add(1)
        }
    }
}
