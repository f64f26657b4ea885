//! NIP-01 canonical serialization, from which an event's id is the SHA-256.
//!
//! `[0,<pubkey hex>,<created_at>,<kind>,<tags>,<content>]` with no whitespace, UTF-8, and
//! exactly seven escapes in strings: `\n`, `\"`, `\\`, `\r`, `\t`, `\b`, `\f`. Every other
//! character, including other control characters, U+2028 and `/`, is written verbatim.
//! (A general JSON serializer escapes other control characters as `\u00XX` and would give a
//! different id.)

use sha2::{Digest, Sha256};

/// Appends `s` as a NIP-01 JSON string.
pub(crate) fn push_string(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The canonical serialization of an event's signed fields.
pub fn serialize(
    pubkey: &[u8; 32],
    created_at: u64,
    kind: u16,
    tags: &[Vec<String>],
    content: &str,
) -> String {
    let mut out = String::with_capacity(96 + content.len() + tags.len() * 80);
    out.push_str("[0,\"");
    out.push_str(&hex::encode(pubkey));
    out.push_str("\",");
    out.push_str(&created_at.to_string());
    out.push(',');
    out.push_str(&kind.to_string());
    out.push_str(",[");
    for (i, tag) in tags.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('[');
        for (j, field) in tag.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            push_string(&mut out, field);
        }
        out.push(']');
    }
    out.push_str("],");
    push_string(&mut out, content);
    out.push(']');
    out
}

/// The event id: SHA-256 of [`serialize`].
pub fn event_id(
    pubkey: &[u8; 32],
    created_at: u64,
    kind: u16,
    tags: &[Vec<String>],
    content: &str,
) -> [u8; 32] {
    Sha256::digest(serialize(pubkey, created_at, kind, tags, content).as_bytes()).into()
}
