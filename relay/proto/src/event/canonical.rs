//! NIP-01 canonical serialization, from which an event's id is the SHA-256.
//!
//! `[0,<pubkey hex>,<created_at>,<kind>,<tags>,<content>]` with no whitespace, UTF-8, and
//! the seven escapes NIP-01 names: `\n`, `\"`, `\\`, `\r`, `\t`, `\b`, `\f`. Non-ASCII,
//! U+2028 and `/` are written verbatim (a general serializer that escapes them gives a
//! different id).
//!
//! The other C0 control characters (U+0000–U+001F) are not covered by NIP-01's list, and
//! JSON cannot carry them raw. We write them as `\u00xx`, as JSON requires and as the
//! deployed implementations do (JavaScript's `JSON.stringify`, rust-nostr, go-nostr), so
//! ids agree with the events those clients sign (tested against the `nostr` crate).

use sha2::{Digest, Sha256};

/// Appends `s` as a NIP-01 JSON string. Runs of characters that need no escape are
/// copied in one go; only quote, backslash and C0 controls are looked at one by one.
pub(crate) fn push_string(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &str = match b {
            b'\n' => "\\n",
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        // Every byte matched above is ASCII, so `run..i` ends on a char boundary.
        out.push_str(&s[run..i]);
        run = i + 1;
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xf) as usize] as char);
        } else {
            out.push_str(escape);
        }
    }
    out.push_str(&s[run..]);
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
