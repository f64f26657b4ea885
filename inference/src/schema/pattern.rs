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
//! full form). What cannot be compiled — look-around, backreferences, a source past
//! [`MAX_PATTERN_BYTES`], a counted repetition past [`MAX_REPEAT`], an NFA or DFA past its
//! size limit — is refused up front, naming the keyword; each build is bounded in bytes
//! and its exploration checks the compilation's deadline ([`super::limits`]).

use std::collections::HashMap;

use regex_automata::dfa::{Automaton, StartKind, dense};
use regex_automata::nfa::thompson;
use regex_automata::util::{start, syntax};
use regex_automata::{Anchored, MatchKind};
use regex_syntax::hir::{Hir, HirKind};

use serde_json::Value;

use super::compile::{Compiler, NEVER, STRING, schema_err};
use super::limits::{CompileLimits, MAX_PATTERN_BYTES, MAX_REPEAT};
use crate::Result;

/// Most automaton states of one schema's patterns and formats together (each takes 1 KiB
/// of transitions).
const MAX_STATES: usize = 8192;
/// Most different patterns and formats in one schema.
const MAX_PATTERNS: usize = 64;
/// The DFA builder's memory limits, in bytes (they also bound the time one pattern takes
/// to build: a hostile schema holds at most [`MAX_PATTERNS`] of them).
const DFA_LIMIT: usize = 2 << 20;
/// The NFA builder's memory limit, in bytes (each pattern's NFA is built before its DFA:
/// `a{1000}` repeated a thousand times is refused here, not built).
const NFA_LIMIT: usize = 2 << 20;
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
    pub fn new(source: &str, at: &str, limits: &CompileLimits) -> Result<Pattern> {
        check_source(source, at)?;
        let body = ecma_classes(source);
        Pattern::build(&format!("(?s:.)*(?:{body})(?s:.)*"), at, "pattern", limits)
    }

    /// The pattern of `format` `name`.
    ///
    /// # Errors
    /// [`crate::Error::Schema`] naming the formats supported, for any other.
    pub fn format(name: &str, at: &str, limits: &CompileLimits) -> Result<Pattern> {
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
        Pattern::build(&re.replace("OCTET", OCTET), at, "format", limits)
    }

    fn build(re: &str, at: &str, keyword: &str, limits: &CompileLimits) -> Result<Pattern> {
        let refuse = |why: String| schema_err(at, format!("`{keyword}`: {why}"));
        limits.check(at, &format!("`{keyword}`"))?;
        let dfa = dense::Builder::new()
            .thompson(thompson::Config::new().nfa_size_limit(Some(NFA_LIMIT)))
            .configure(
                dense::Config::new()
                    .start_kind(StartKind::Anchored)
                    .match_kind(MatchKind::All)
                    .dfa_size_limit(Some(DFA_LIMIT))
                    .determinize_size_limit(Some(DFA_LIMIT)),
            )
            .syntax(syntax::Config::new().unicode(true).utf8(true))
            .build(re)
            .map_err(|e| {
                // the builder's error says what failed; its sources say why (a size limit)
                let mut why = e.to_string();
                let mut cause = std::error::Error::source(&e);
                while let Some(c) = cause {
                    why = format!("{why}: {c}");
                    cause = c.source();
                }
                refuse(format!(
                    "cannot be compiled to an automaton within {} MiB of NFA and {} MiB of \
                     DFA: {why}",
                    NFA_LIMIT >> 20,
                    DFA_LIMIT >> 20
                ))
            })?;
        let first = dfa
            .start_state(&start::Config::new().anchored(Anchored::Yes))
            .map_err(|e| refuse(e.to_string()))?;
        // every state reachable from the start through plain bytes
        let mut index: HashMap<_, u32> = HashMap::from([(first, 0)]);
        let mut states = vec![first];
        let mut next: Vec<u32> = Vec::new();
        let mut i = 0;
        while i < states.len() {
            if i % 256 == 255 {
                limits.check(at, &format!("`{keyword}`"))?;
            }
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
            ("pattern", p) => Pattern::new(p, at, self.limits)?,
            (_, f) => Pattern::format(f, at, self.limits)?,
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

/// Checks every `pattern` of `schema` (outside `enum`, `const`, `default` and `examples`
/// values) against [`check_source`], before anything compiles them.
///
/// # Errors
/// [`crate::Error::Schema`] naming the first pattern past a bound and its place.
pub(crate) fn check_sources(schema: &Value, limits: &CompileLimits) -> Result<()> {
    fn walk(v: &Value, at: &mut String) -> Result<()> {
        match v {
            Value::Object(o) => {
                if let Some(Value::String(p)) = o.get("pattern") {
                    check_source(p, at)?;
                }
                for (k, x) in o {
                    if ["enum", "const", "default", "examples"].contains(&k.as_str()) {
                        continue;
                    }
                    let len = at.len();
                    at.push('/');
                    at.push_str(&k.replace('~', "~0").replace('/', "~1"));
                    walk(x, at)?;
                    at.truncate(len);
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    let len = at.len();
                    at.push_str(&format!("/{i}"));
                    walk(x, at)?;
                    at.truncate(len);
                }
            }
            _ => {}
        }
        Ok(())
    }
    limits.check("", "`pattern`")?;
    walk(schema, &mut String::new())
}

/// Whether a `pattern`'s source at `at` is within the bounds every compiler of it needs:
/// at most [`MAX_PATTERN_BYTES`], and no counted repetition past [`MAX_REPEAT`] (`a{n}`
/// builds `n` copies of `a` in any automaton). Sources that do not parse here pass: the
/// compiler that reads them says why.
///
/// # Errors
/// [`crate::Error::Schema`] naming the bound passed.
pub(crate) fn check_source(source: &str, at: &str) -> Result<()> {
    if source.len() > MAX_PATTERN_BYTES {
        return Err(schema_err(
            at,
            format!(
                "`pattern`: {} bytes, past the bound of {MAX_PATTERN_BYTES}",
                source.len()
            ),
        ));
    }
    let Ok(hir) = regex_syntax::ParserBuilder::new()
        .utf8(false)
        .build()
        .parse(&ecma_classes(source))
    else {
        return Ok(());
    };
    // iteratively: the parser's nesting limit bounds the depth, a stack bounds the width
    let mut stack: Vec<&Hir> = vec![&hir];
    while let Some(h) = stack.pop() {
        match h.kind() {
            HirKind::Repetition(r) => {
                let n = r.max.unwrap_or(r.min).max(r.min);
                if n > MAX_REPEAT {
                    return Err(schema_err(
                        at,
                        format!(
                            "`pattern`: a counted repetition of {n} (`{{{n}}}`) is past the \
                             bound of {MAX_REPEAT}"
                        ),
                    ));
                }
                stack.push(&r.sub);
            }
            HirKind::Capture(c) => stack.push(&c.sub),
            HirKind::Concat(hs) | HirKind::Alternation(hs) => stack.extend(hs.iter()),
            _ => {}
        }
    }
    Ok(())
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
    use std::sync::Arc;

    #[test]
    fn ecma_classes_are_ascii_and_escaped_backslashes_stay() {
        assert_eq!(ecma_classes(r"^\d+\w$"), "^[0-9]+[0-9A-Za-z_]$");
        assert_eq!(ecma_classes(r"[\d.]\\d"), r"[[0-9].]\\d");
        let p = Pattern::new(r"^\d{3}$", "", &CompileLimits::default()).unwrap();
        assert!(p.takes("123"));
        assert!(!p.takes("١٢٣"), "Arabic-Indic digits are not ECMA \\d");
    }

    #[test]
    fn unanchored_patterns_match_anywhere_and_distances_are_exact() {
        let p = Pattern::new("ab", "", &CompileLimits::default()).unwrap();
        assert_eq!(p.left(0), 2);
        assert!(p.takes("xxabyy"));
        assert!(!p.takes("xxa"));
        let p = Pattern::new("^a{3}$", "", &CompileLimits::default()).unwrap();
        assert_eq!(p.left(0), 3);
        assert!(p.step(0, b'b').is_none(), "never into a dead end");
    }

    /// Hostile patterns are refused up front, naming the keyword and the bound, whether
    /// they come to the grammar or to the independent validator alone.
    #[test]
    fn hostile_patterns_are_refused_naming_the_bound() {
        use crate::schema::{Grammar, SchemaCheck};
        let long = "a".repeat(1 << 20);
        let cases: &[(&str, &str)] = &[
            ("a{1000000000}", "counted repetition of 1000000000"),
            ("a{100000000}", "counted repetition of 100000000"),
            ("x{2,5000}", "counted repetition of 5000"),
            ("(ab){1001,}", "counted repetition of 1001"),
            (r"\p{L}{10000}", "counted repetition of 10000"),
            (
                "(a{1000}){1000}",
                "cannot be compiled to an automaton within",
            ),
            (
                "((a{999}){999}){999}",
                "cannot be compiled to an automaton within",
            ),
            (r"(a)\1", "cannot be compiled"),
            ("(?=a)b", "cannot be compiled"),
            (&long, "past the bound of 4096"),
        ];
        for (pattern, says) in cases {
            let schema = serde_json::json!({"type": "object", "properties": {
                "s": {"type": "string", "pattern": pattern}}});
            let e = Grammar::compile(&schema).unwrap_err().to_string();
            assert!(
                e.contains("#/properties/s") && e.contains("`pattern`"),
                "{e}"
            );
            assert!(e.contains(says), "{pattern:.40}: {e}");
            if !says.starts_with("cannot") {
                let e = SchemaCheck::new(&schema).unwrap_err().to_string();
                assert!(e.contains(says), "{e}");
            }
        }
        // a pattern inside an `enum` value is data, not a pattern
        let data = serde_json::json!({"enum": [{"pattern": "a{5000}"}]});
        assert!(Grammar::compile(&data).is_ok());
        // within the bounds
        let ok = serde_json::json!({"type": "string", "pattern": "^[a-z]{1,1000}$"});
        assert!(Grammar::compile(&ok).is_ok());
    }

    #[test]
    fn a_cancelled_compilation_stops() {
        use crate::schema::{CompileLimits, Grammar};
        use std::sync::atomic::AtomicBool;
        let schema = serde_json::json!({"type": "string", "pattern": "^[a-z]{3}$"});
        let cancel = Arc::new(AtomicBool::new(true));
        let l = CompileLimits::default().with_cancel(cancel);
        let e = Grammar::compile_within(&schema, &l).unwrap_err();
        assert!(matches!(e, crate::Error::Abandoned(_)), "{e}");
        let late = CompileLimits::new(std::time::Duration::ZERO);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let e = Grammar::compile_within(&schema, &late).unwrap_err();
        assert!(
            matches!(e, crate::Error::Abandoned(_)),
            "no slot in time: {e}"
        );
    }
}
