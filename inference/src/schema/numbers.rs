//! Numbers under numeric keywords (`minimum`, `maximum`, `exclusiveMinimum`,
//! `exclusiveMaximum`, `multipleOf`): what the compiler makes of them ([`NumSpec`]) and
//! what the matcher asks of them while a number is being written ([`reachable`],
//! [`allowed_now`], and [`to_range`] for the bytes left).
//!
//! An `integer`, or a number under a whole `multipleOf`, is written as an integer of up to
//! [`INT_DIGITS`] digits and checked exactly. Any other bounded `number` is written as a
//! decimal of up to [`DEC_DIGITS`] significant digits and [`DEC_DIGITS`] fraction digits,
//! checked exactly against each bound's shortest decimal form (the shortest text that
//! reads back as that `f64`). Decimals of at most 15 significant digits lie further apart
//! than an `f64` rounds, so at most one of them reads as a given `f64` — and for a bound
//! that is its shortest form. A written decimal equal to the bound is therefore the same
//! `f64`, and one above or below it reads as an `f64` above or below it: the exact
//! comparison and the `jsonschema` crate's (in `f64`) agree on every number written,
//! exclusive bounds included.

use serde_json::Value;

use super::compile::{NEVER, schema_err};
use crate::Result;

/// The most integer digits the matcher writes.
pub(crate) const INT_DIGITS: u8 = 18;

/// The largest magnitude of an integer the matcher writes (18 digits).
pub(crate) const INT_LIMIT: i128 = 999_999_999_999_999_999;

/// The most significant digits, and the most fraction digits, of a bounded decimal.
pub(crate) const DEC_DIGITS: u8 = 15;

/// The numbers a bounded number may be: `lo..=hi` in units of 10^−`frac`, multiples of
/// `step` (an integer's `multipleOf`; 1 for decimals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NumSpec {
    pub lo: i128,
    pub hi: i128,
    pub step: i128,
    /// 0: integers; [`DEC_DIGITS`]: decimals.
    pub frac: u8,
}

/// Where a bounded number being written stands (after its sign, if any).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// No digit yet.
    Sign,
    /// The integer part is `0`.
    Zero,
    /// Integer digits, the first not 0.
    Int,
    /// After the point, this many fraction digits (0: one must still come).
    Frac(u8),
}

fn pow10(j: u8) -> i128 {
    10i128.pow(u32::from(j))
}

/// Decimal digits of `m` (0 for 0).
fn digits(m: i128) -> u8 {
    let mut d = 0;
    while pow10(d) <= m {
        d += 1;
    }
    d
}

impl NumSpec {
    /// Whether some allowed number that is a multiple of `every` lies in `a..=b`.
    fn meets_every(&self, a: i128, b: i128, every: i128) -> bool {
        let (a, b) = (a.max(self.lo), b.min(self.hi));
        // one of the two is 1: integers have no lattice, decimals no `multipleOf`
        let step = self.step * every;
        // the smallest multiple of step ≥ a
        let first = -((-a).div_euclid(step)) * step;
        a <= b && first <= b
    }

    /// Whether some allowed number lies in `a..=b`.
    pub fn meets(&self, a: i128, b: i128) -> bool {
        self.meets_every(a, b, 1)
    }

    /// The most significant digits a number here has.
    fn max_digits(&self) -> u8 {
        if self.frac == 0 {
            INT_DIGITS
        } else {
            DEC_DIGITS
        }
    }

    /// The fewest bytes of an allowed number (`NEVER` when none is).
    pub fn shortest(&self) -> usize {
        let plus = to_range(false, 0, Part::Sign, *self);
        let minus = to_range(true, 0, Part::Sign, *self).map(|n| n + 1);
        plus.into_iter().chain(minus).min().unwrap_or(NEVER)
    }
}

/// A bound `x` in units of 10^−`frac`: (the largest at or below it, the smallest at or
/// above it), read from its shortest decimal form; None when it is not finite.
fn scaled(x: &serde_json::Number, frac: u8) -> Option<(i128, i128)> {
    // beyond any number written, yet far from overflowing
    const FAR: i128 = 10i128.pow(36);
    let text = match (x.as_i64(), x.as_u64(), x.as_f64()) {
        (Some(i), ..) => i.to_string(),
        (_, Some(u), _) => u.to_string(),
        (.., Some(f)) if f.is_finite() => format!("{f}"),
        _ => return None,
    };
    let (neg, body) = match text.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, text.as_str()),
    };
    let (int, fr) = body.split_once('.').unwrap_or((body, ""));
    let mut v: i128 = 0;
    let mut far = false;
    for c in int
        .bytes()
        .chain(fr.bytes().chain(std::iter::repeat(b'0')).take(frac.into()))
    {
        v = v * 10 + i128::from(c - b'0');
        if v > FAR {
            far = true;
            break;
        }
    }
    let cut = fr.bytes().skip(frac.into()).any(|c| c != b'0');
    let (down, up) = match (far, cut) {
        (true, _) => (FAR, FAR),
        (false, true) => (v, v + 1),
        (false, false) => (v, v),
    };
    Some(if neg { (-up, -down) } else { (down, up) })
}

/// The bounds keywords and `multipleOf` of a schema object, as the numbers they allow, or
/// None when it has none of them; `decimals`: the node takes numbers that are not whole
/// (a `number` without `multipleOf` is then written as a decimal).
pub(crate) fn num_bounds(
    obj: &serde_json::Map<String, Value>,
    at: &str,
    decimals: bool,
) -> Result<Option<NumSpec>> {
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
    let frac = if decimals && step.is_none() {
        DEC_DIGITS
    } else {
        0
    };
    let limit = pow10(frac) * (INT_LIMIT + 1) - 1;
    let mut range = step.map(|_| (-limit, limit));
    for key in ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"] {
        let Some(v) = obj.get(key) else { continue };
        let x = v.as_number().ok_or_else(|| {
            schema_err(
                at,
                format!("`{key}` must be a number (JSON Schema 2020-12; not draft 4's boolean)"),
            )
        })?;
        // exact where the bound has no more fraction digits than are written; otherwise
        // rounded toward the inside
        let (floor, ceil) = scaled(x, frac)
            .ok_or_else(|| schema_err(at, format!("`{key}` is not a finite number")))?;
        let (lo, hi) = range.unwrap_or((-limit, limit));
        range = Some(match key {
            "minimum" => (lo.max(ceil), hi),
            "maximum" => (lo, hi.min(floor)),
            "exclusiveMinimum" => (lo.max(floor + 1), hi),
            _ => (lo, hi.min(ceil - 1)),
        });
    }
    Ok(range.map(|(lo, hi)| NumSpec {
        lo: lo.max(-limit),
        hi: hi.min(limit),
        step: step.unwrap_or(1),
        frac,
    }))
}

/// The value of a JSON number in `spec`'s units, when it is exactly one (no more fraction
/// digits than `spec` has) within the largest numbers `spec` writes.
pub(crate) fn exact_value(x: &serde_json::Number, spec: NumSpec) -> Option<i128> {
    let (down, up) = scaled(x, spec.frac)?;
    let limit = pow10(spec.frac) * (INT_LIMIT + 1) - 1;
    (down == up && down.abs() <= limit).then_some(down)
}

/// The fewest bytes still to write so that the number read so far — sign `neg`, its
/// digits as one integer `mag`, standing at `part` — ends as one `spec` allows (0: it is
/// one now); None when no ending does within the digits written. "0" and "-0" take no
/// more digits; a point takes at least one.
pub(crate) fn to_range(neg: bool, mag: u64, part: Part, spec: NumSpec) -> Option<usize> {
    endings(neg, mag, part, spec, true)
}

/// Whether some ending of the number read so far is one `spec` allows: what [`to_range`]
/// tells without counting bytes (the matcher asks it of every digit the mask walk tries).
pub(crate) fn reachable(neg: bool, mag: u64, part: Part, spec: NumSpec) -> bool {
    endings(neg, mag, part, spec, false).is_some()
}

/// Whether the number read so far is one `spec` allows as it stands.
pub(crate) fn allowed_now(neg: bool, mag: u64, part: Part, spec: NumSpec) -> bool {
    let mag = i128::from(mag);
    let j = match part {
        Part::Sign | Part::Frac(0) => return false,
        Part::Zero | Part::Int => 0,
        Part::Frac(j) => j,
    };
    if digits(mag) > spec.max_digits() {
        return false;
    }
    let v = mag * pow10(spec.frac - j);
    let v = if neg { -v } else { v };
    spec.meets(v, v)
}

/// [`to_range`] (`fewest`), or any ending's bytes (not `fewest`: the first found).
fn endings(neg: bool, mag: u64, part: Part, spec: NumSpec, fewest: bool) -> Option<usize> {
    let mag = i128::from(mag);
    let (f_max, d_max) = (spec.frac, spec.max_digits());
    if digits(mag) > d_max {
        return None;
    }
    let one = pow10(f_max);
    // every multiple of 10^(f_max − fraction digits) from `a` to `b` (before the sign)
    let reaches = |a: i128, b: i128, fr: u8| {
        let (lo, hi) = if neg { (-b, -a) } else { (a, b) };
        spec.meets_every(lo, hi, pow10(f_max - fr))
    };
    // the magnitude past which nothing is allowed
    let far = if neg { -spec.lo } else { spec.hi };
    // the integer part now holds values lo..=hi of `sig` significant digits: the fewest
    // bytes of a fraction (none, or a point and digits) that meets the range
    let with_fraction = |lo: i128, hi: i128, sig: u8| {
        let top = f_max.min(d_max - sig);
        let upto = |f: u8| hi * one + one - pow10(f_max - f);
        // the most fraction digits reach a superset of what fewer do
        if !reaches(lo * one, upto(top), top) {
            return None;
        }
        if !fewest {
            return Some(0);
        }
        (0..=top)
            .find(|&f| reaches(lo * one, upto(f), f))
            .map(|f| if f == 0 { 0 } else { usize::from(f) + 1 })
    };
    // the fewest bytes over integer parts of i more digits (the values each would hold)
    let over_digits = |from: u8, values: &dyn Fn(u8) -> (i128, i128), sig: u8| {
        let mut best: Option<usize> = None;
        for i in from..=d_max - sig {
            let (lo, hi) = values(i);
            if best.is_some_and(|b| !fewest || b <= usize::from(i)) || lo * one > far {
                break;
            }
            if let Some(c) = with_fraction(lo, hi, sig + i) {
                best = Some(best.map_or(c + usize::from(i), |b| b.min(c + usize::from(i))));
            }
        }
        best
    };
    match part {
        Part::Frac(j) => {
            let unit = pow10(f_max - j);
            let top = (f_max - j).min(d_max - digits(mag));
            let meets = |f: u8| reaches(mag * unit, (mag + 1) * unit - pow10(f_max - j - f), j + f);
            let first = u8::from(j == 0);
            // the most digits reach a superset of what fewer do
            if top < first || !meets(top) {
                return None;
            }
            if !fewest {
                return Some(0);
            }
            (first..=top).find(|&f| meets(f)).map(usize::from)
        }
        Part::Zero => with_fraction(0, 0, 0),
        Part::Int => over_digits(
            0,
            &|i| (mag * pow10(i), (mag + 1) * pow10(i) - 1),
            digits(mag),
        ),
        Part::Sign => {
            // "0", or i digits not starting with 0
            let zero = with_fraction(0, 0, 0).map(|c| c + 1);
            if zero.is_some() && !fewest {
                return zero;
            }
            let other = over_digits(1, &|i| (pow10(i - 1), pow10(i) - 1), 0);
            zero.into_iter().chain(other).min()
        }
    }
}
