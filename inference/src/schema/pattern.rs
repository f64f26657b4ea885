//! `pattern` and `format` of string schemas: a regular expression compiled to a table of
//! byte transitions (a DFA from `regex-automata`, explored once), with the fewest bytes
//! from each state to a match, so the matcher follows a string byte by byte, never enters
//! a state it cannot finish from, and knows the shortest way out.
//!
//! JSON Schema's `pattern` is an ECMA-262 regular expression that may match anywhere in
//! the string; here the string must lie in `.*(?:pattern).*` (with `\d` and `\w` as ASCII
//! classes, as ECMA-262 has them). Strings under a pattern or a format carry no escapes and
//! no `"` (the subset the matcher generates: every such string is valid). Each `format`
//! is a pattern whose strings its validator accepts (a subset: e.g. days 01–28, IPv6 in
//! full form). What cannot be compiled — look-around, backreferences, a DFA past its size
//! limit — is refused up front, naming the keyword.

use std::collections::HashMap;

use regex_automata::dfa::{Automaton, StartKind, dense};
use regex_automata::util::{start, syntax};
use regex_automata::{Anchored, MatchKind};

use serde_json::Value;

use super::compile::{Compiler, NEVER, STRING, schema_err};
use crate::Result;

/// Most automaton states of one schema's patterns and formats together (each takes 1 KiB
/// of transitions).
const MAX_STATES: usize = 8192;
/// Most different patterns and formats in one schema.
const MAX_PATTERNS: usize = 64;
/// The DFA builder's memory limits, in bytes (they also bound the time one pattern takes
/// to build: a hostile schema holds at most [`MAX_PATTERNS`] of them).
const DFA_LIMIT: usize = 2 << 20;
/// No transition (a byte the string cannot take there).
const NONE: u32 = u32::MAX;

/// A calendar date whose day exists in every month.
macro_rules! date {
    () => {
        r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])"
    };
}
/// RFC 3339 full-time: hours, minutes, seconds (no leap second), fraction, offset.
macro_rules! time {
    () => {
        r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
    };
}

/// The formats constrained decoding generates, each as a pattern of strings its validator
/// takes (`OCTET` stands for [`OCTET`]).
const FORMATS: &[(&str, &str)] = &[
    ("date", concat!("^", date!(), "$")),
    ("time", concat!("^", time!(), "$")),
    ("date-time", concat!("^", date!(), "T", time!(), "$")),
    (
        "uuid",
        r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
    ),
    (
        "email",
        r"^[a-z0-9]{1,32}(\.[a-z0-9]{1,32}){0,3}@[a-z0-9]{1,32}(\.[a-z0-9]{1,32}){1,3}$",
    ),
    ("ipv4", r"^(OCTET)(\.(OCTET)){3}$"),
    ("ipv6", r"^[0-9a-f]{1,4}(:[0-9a-f]{1,4}){7}$"),
    (
        "uri",
        r"^[a-z][a-z0-9+.-]{0,15}://[a-z0-9]{1,32}(\.[a-z0-9]{1,32}){0,4}(/[A-Za-z0-9._~-]{0,32}){0,8}$",
    ),
];
/// 0–255 without leading zeros.
const OCTET: &str = "25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]";

/// Whether a string under a pattern may hold byte `b` as it is (no escapes, no quote, no
/// control character).
fn plain(b: u8) -> bool {
    b >= 0x20 && b != b'"' && b != b'\\'
}

/// A pattern's transitions and distances; state 0 is the start.
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    /// `next[s * 256 + b]`: the state after byte `b`, or [`NONE`] (including every state
    /// no match can be reached from).
    next: Vec<u32>,
    /// Fewest bytes from each state to a whole match.
    dist: Vec<usize>,
}

impl Pattern {
    /// The pattern of JSON Schema `pattern` `source`, at schema location `at`.
    ///
    /// # Errors
    /// [`crate::Error::Schema`] for a pattern the DFA cannot take, or one too large, or one
    /// no string the matcher generates satisfies.
    pub fn new(source: &str, at: &str) -> Result<Pattern> {
        let body = ecma_classes(source);
        Pattern::build(&format!("(?s:.)*(?:{body})(?s:.)*"), at, "pattern")
    }

    /// The pattern of `format` `name`.
    ///
    /// # Errors
    /// [`crate::Error::Schema`] naming the formats supported, for any other.
    pub fn format(name: &str, at: &str) -> Result<Pattern> {
        let Some((_, re)) = FORMATS.iter().find(|(f, _)| *f == name) else {
            let known: Vec<&str> = FORMATS.iter().map(|(f, _)| *f).collect();
            return Err(schema_err(
                at,
                format!(
                    "unsupported `format` {name:?} (constrained decoding supports: {})",
                    known.join(", ")
                ),
            ));
        };
        Pattern::build(&re.replace("OCTET", OCTET), at, "format")
    }

    fn build(re: &str, at: &str, keyword: &str) -> Result<Pattern> {
        let refuse = |why: String| schema_err(at, format!("`{keyword}`: {why}"));
        let dfa = dense::Builder::new()
            .configure(
                dense::Config::new()
                    .start_kind(StartKind::Anchored)
                    .match_kind(MatchKind::All)
                    .dfa_size_limit(Some(DFA_LIMIT))
                    .determinize_size_limit(Some(DFA_LIMIT)),
            )
            .syntax(syntax::Config::new().unicode(true).utf8(true))
            .build(re)
            .map_err(|e| refuse(format!("cannot be compiled to an automaton: {e}")))?;
        let first = dfa
            .start_state(&start::Config::new().anchored(Anchored::Yes))
            .map_err(|e| refuse(e.to_string()))?;
        // every state reachable from the start through plain bytes
        let mut index: HashMap<_, u32> = HashMap::from([(first, 0)]);
        let mut states = vec![first];
        let mut next: Vec<u32> = Vec::new();
        let mut i = 0;
        while i < states.len() {
            let s = states[i];
            let row = next.len();
            next.resize(row + 256, NONE);
            for b in (0..=255u8).filter(|b| plain(*b)) {
                let t = dfa.next_state(s, b);
                if dfa.is_dead_state(t) || dfa.is_quit_state(t) {
                    continue;
                }
                let j = match index.get(&t) {
                    Some(j) => *j,
                    None => {
                        if states.len() >= MAX_STATES {
                            return Err(refuse(format!(
                                "too large (more than {MAX_STATES} automaton states)"
                            )));
                        }
                        states.push(t);
                        index.insert(t, (states.len() - 1) as u32);
                        (states.len() - 1) as u32
                    }
                };
                next[row + usize::from(b)] = j;
            }
            i += 1;
        }
        // fewest bytes to a match: backwards from the accepting states
        let n = states.len();
        let mut rev: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (s, row) in next.chunks_exact(256).enumerate() {
            for &t in row.iter().filter(|t| **t != NONE) {
                rev[t as usize].push(s as u32);
            }
        }
        let mut dist = vec![NEVER; n];
        let mut queue = std::collections::VecDeque::new();
        for (s, id) in states.iter().enumerate() {
            if dfa.is_match_state(dfa.next_eoi_state(*id)) {
                dist[s] = 0;
                queue.push_back(s);
            }
        }
        while let Some(s) = queue.pop_front() {
            for &p in &rev[s] {
                if dist[p as usize] == NEVER {
                    dist[p as usize] = dist[s] + 1;
                    queue.push_back(p as usize);
                }
            }
        }
        if dist[0] >= NEVER {
            return Err(refuse(
                "no string without quotes, backslashes or control characters matches it".into(),
            ));
        }
        // never into a state no match is reachable from
        for t in &mut next {
            if *t != NONE && dist[*t as usize] >= NEVER {
                *t = NONE;
            }
        }
        Ok(Pattern { next, dist })
    }

    /// The state after byte `b` in state `s`, if the string can take it there.
    pub fn step(&self, s: u32, b: u8) -> Option<u32> {
        match self.next[s as usize * 256 + usize::from(b)] {
            NONE => None,
            t => Some(t),
        }
    }

    /// How many states its table has.
    pub fn states(&self) -> usize {
        self.dist.len()
    }

    /// Fewest bytes from state `s` to a whole match (0: the string may end here).
    pub fn left(&self, s: u32) -> usize {
        self.dist[s as usize]
    }

    /// Whether the whole of `text` is a string the matcher generates under this pattern.
    #[cfg(test)]
    pub fn takes(&self, text: &str) -> bool {
        let mut s = 0;
        for b in text.bytes() {
            match self.step(s, b) {
                Some(t) => s = t,
                None => return false,
            }
        }
        self.left(s) == 0
    }
}

impl Compiler<'_> {
    /// The `pattern` or `format` of the schema object `obj` (types `kinds`), compiled and
    /// listed: None when it has neither, or no string is allowed there (a `format` on a
    /// number, as OpenAPI writes `int32`, then says nothing about the document).
    pub(super) fn pattern(
        &mut self,
        obj: &serde_json::Map<String, Value>,
        at: &str,
        kinds: u8,
    ) -> Result<Option<(u32, usize)>> {
        let text = |key: &str| -> Result<Option<&str>> {
            obj.get(key)
                .map(|v| {
                    v.as_str()
                        .ok_or_else(|| schema_err(at, format!("`{key}` must be a string")))
                })
                .transpose()
        };
        let (pattern, format) = (text("pattern")?, text("format")?);
        if kinds & STRING == 0 || (pattern.is_none() && format.is_none()) {
            return Ok(None);
        }
        if obj.contains_key("minLength") || obj.contains_key("maxLength") {
            return Err(schema_err(
                at,
                "`minLength`/`maxLength` beside `pattern` or `format` is not supported; put \
                 the length in the pattern (e.g. `^.{2,8}$`)",
            ));
        }
        let key = match (pattern, format) {
            (Some(p), None) => ("pattern", p),
            (None, Some(f)) => ("format", f),
            _ => {
                return Err(schema_err(
                    at,
                    "`pattern` beside `format` is not supported; write the format into the \
                     pattern",
                ));
            }
        };
        if let Some(known) = self.pattern_ids.get(&(key.0, key.1.to_owned())) {
            return Ok(Some(*known));
        }
        if self.patterns.len() >= MAX_PATTERNS {
            return Err(schema_err(
                at,
                format!("more than {MAX_PATTERNS} different patterns and formats"),
            ));
        }
        let p = match key {
            ("pattern", p) => Pattern::new(p, at)?,
            (_, f) => Pattern::format(f, at)?,
        };
        let states: usize = self.patterns.iter().map(Pattern::states).sum();
        if states + p.states() > MAX_STATES {
            return Err(schema_err(
                at,
                format!(
                    "`{}`: the schema's patterns and formats need more than {MAX_STATES} \
                     automaton states in all",
                    key.0
                ),
            ));
        }
        let id = (self.patterns.len() as u32, p.left(0));
        self.patterns.push(p);
        self.pattern_ids.insert((key.0, key.1.to_owned()), id);
        Ok(Some(id))
    }
}

/// `\d`, `\D`, `\w`, `\W` as ECMA-262 has them (ASCII), inside or outside classes; other
/// escapes as they are.
fn ecma_classes(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut chars = source.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str("[0-9]"),
            Some('D') => out.push_str("[^0-9]"),
            Some('w') => out.push_str("[0-9A-Za-z_]"),
            Some('W') => out.push_str("[^0-9A-Za-z_]"),
            Some(o) => {
                out.push('\\');
                out.push(o);
            }
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecma_classes_are_ascii_and_escaped_backslashes_stay() {
        assert_eq!(ecma_classes(r"^\d+\w$"), "^[0-9]+[0-9A-Za-z_]$");
        assert_eq!(ecma_classes(r"[\d.]\\d"), r"[[0-9].]\\d");
        let p = Pattern::new(r"^\d{3}$", "").unwrap();
        assert!(p.takes("123"));
        assert!(!p.takes("١٢٣"), "Arabic-Indic digits are not ECMA \\d");
    }

    #[test]
    fn unanchored_patterns_match_anywhere_and_distances_are_exact() {
        let p = Pattern::new("ab", "").unwrap();
        assert_eq!(p.left(0), 2);
        assert!(p.takes("xxabyy"));
        assert!(!p.takes("xxa"));
        let p = Pattern::new("^a{3}$", "").unwrap();
        assert_eq!(p.left(0), 3);
        assert!(p.step(0, b'b').is_none(), "never into a dead end");
    }
}
