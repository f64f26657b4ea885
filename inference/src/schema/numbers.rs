//! Integers under numeric keywords (`minimum`, `maximum`, `exclusiveMinimum`,
//! `exclusiveMaximum`, `multipleOf`): what the compiler makes of them ([`IntSpec`]) and
//! what the matcher asks of them while a number is being written ([`digits_to_range`]).

use serde_json::Value;

use super::compile::{NEVER, schema_err};
use crate::Result;

/// The most integer digits the matcher writes.
pub(crate) const INT_DIGITS: u8 = 18;

/// The largest magnitude of an integer the matcher writes (18 digits).
pub(crate) const INT_LIMIT: i128 = 999_999_999_999_999_999;

/// The integers a bounded number may be: `lo..=hi`, multiples of `step`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IntSpec {
    pub lo: i128,
    pub hi: i128,
    pub step: i128,
}

impl IntSpec {
    /// The first allowed integer at or above `a`, if it is at most `b`.
    fn first_in(&self, a: i128, b: i128) -> Option<i128> {
        let (a, b) = (a.max(self.lo), b.min(self.hi));
        // the smallest multiple of step ≥ a
        let first = -((-a).div_euclid(self.step)) * self.step;
        (a <= b && first <= b).then_some(first)
    }

    /// The last allowed integer at or below `b`, if it is at least `a`.
    fn last_in(&self, a: i128, b: i128) -> Option<i128> {
        let (a, b) = (a.max(self.lo), b.min(self.hi));
        let last = b.div_euclid(self.step) * self.step;
        (a <= b && last >= a).then_some(last)
    }

    /// Whether some allowed integer lies in `a..=b`.
    pub fn meets(&self, a: i128, b: i128) -> bool {
        self.first_in(a, b).is_some()
    }

    /// The fewest bytes of an allowed integer (`NEVER` when none is).
    pub fn shortest(&self) -> usize {
        let digits = |m: i128| m.unsigned_abs().to_string().len();
        if self.meets(0, 0) {
            return 1;
        }
        let up = self.first_in(1, INT_LIMIT).map_or(NEVER, digits);
        let down = self
            .last_in(-INT_LIMIT, -1)
            .map_or(NEVER, |m| 1 + digits(m));
        up.min(down)
    }
}

/// The bounds keywords and `multipleOf` of a schema object, as the integers they allow, or
/// None when it has none of them.
pub(crate) fn int_bounds(
    obj: &serde_json::Map<String, Value>,
    at: &str,
) -> Result<Option<IntSpec>> {
    let step = match obj.get("multipleOf") {
        None => None,
        Some(v) => Some(
            v.as_u64()
                .or_else(|| {
                    v.as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 1.0 && *f < 1e18)
                        .map(|f| f as u64)
                })
                .filter(|m| (1..=INT_LIMIT as u64).contains(m))
                .map(i128::from)
                .ok_or_else(|| {
                    schema_err(
                        at,
                        format!(
                            "`multipleOf` {v}: constrained decoding supports positive whole numbers"
                        ),
                    )
                })?,
        ),
    };
    let mut range = step.map(|_| (-INT_LIMIT, INT_LIMIT));
    for key in ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"] {
        let Some(v) = obj.get(key) else { continue };
        let x = v.as_number().ok_or_else(|| {
            schema_err(
                at,
                format!("`{key}` must be a number (JSON Schema 2020-12; not draft 4's boolean)"),
            )
        })?;
        // exact for integers; a fractional bound is rounded toward the inside
        let (floor, ceil) = match (x.as_i64(), x.as_u64(), x.as_f64()) {
            (Some(i), _, _) => (i128::from(i), i128::from(i)),
            (_, Some(u), _) => (i128::from(u), i128::from(u)),
            (_, _, Some(f)) if f.is_finite() => {
                let clamp = |g: f64| g.clamp(-1e30, 1e30) as i128;
                (clamp(f.floor()), clamp(f.ceil()))
            }
            _ => return Err(schema_err(at, format!("`{key}` is not a finite number"))),
        };
        let (lo, hi) = range.unwrap_or((-INT_LIMIT, INT_LIMIT));
        range = Some(match key {
            "minimum" => (lo.max(ceil), hi),
            "maximum" => (lo, hi.min(floor)),
            "exclusiveMinimum" => (lo.max(floor.saturating_add(1)), hi),
            _ => (lo, hi.min(ceil.saturating_sub(1))),
        });
    }
    Ok(range.map(|(lo, hi)| IntSpec {
        lo: lo.max(-INT_LIMIT),
        hi: hi.min(INT_LIMIT),
        step: step.unwrap_or(1),
    }))
}

/// The fewest digits still to write so that the integer read so far — sign `neg`,
/// magnitude `mag`, `k` digits — ends as one `spec` allows (0: it is one now); None when
/// no ending does (within [`INT_DIGITS`] digits). "0" and "-0" take no more digits.
pub(crate) fn digits_to_range(neg: bool, mag: u64, k: u8, spec: IntSpec) -> Option<usize> {
    let reaches = |m_lo: i128, m_hi: i128| {
        let (v_lo, v_hi) = if neg { (-m_hi, -m_lo) } else { (m_lo, m_hi) };
        spec.meets(v_lo, v_hi)
    };
    let pow = |j: u8| 10i128.pow(u32::from(j));
    if k == 0 {
        // a sign alone: then "0", or j digits not starting with 0
        return (1..=INT_DIGITS)
            .find(|&j| {
                let (a, b) = if j == 1 {
                    (0, 9)
                } else {
                    (pow(j - 1), pow(j) - 1)
                };
                reaches(a, b)
            })
            .map(usize::from);
    }
    let mag = i128::from(mag);
    if mag == 0 {
        return reaches(0, 0).then_some(0);
    }
    (0..=INT_DIGITS.saturating_sub(k))
        .find(|&j| {
            let a = mag * pow(j);
            reaches(a, a + pow(j) - 1)
        })
        .map(usize::from)
}
