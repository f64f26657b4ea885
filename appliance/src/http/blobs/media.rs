//! How a blob is served: its media type cleaned, passive types told from active ones, the
//! headers that keep a browser from running it as the node's page, and `Range`s.

use super::*;
/// What `Content-Security-Policy` every blob is served with: no scripts, no plugins, no
/// sub-resources, an opaque origin.
pub(super) const BLOB_CSP: &str = "default-src 'none'; sandbox";

/// The media type to store for an upload's `Content-Type`: the value with its essence
/// lowercased when it is a well-formed `type/subtype[; params]` of printable ASCII (at
/// most 255 bytes), else `application/octet-stream`.
pub(super) fn clean_media(value: Option<&HeaderValue>) -> String {
    const DEFAULT: &str = "application/octet-stream";
    let Some(v) = value.and_then(|v| v.to_str().ok()).map(str::trim) else {
        return DEFAULT.into();
    };
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    let (essence, params) = v.split_once(';').unwrap_or((v, ""));
    let essence = essence.trim().to_ascii_lowercase();
    let well_formed = v.len() <= 255
        && v.bytes().all(|b| (0x20..0x7f).contains(&b))
        && essence
            .split_once('/')
            .is_some_and(|(t, s)| token(t) && token(s));
    if !well_formed {
        return DEFAULT.into();
    }
    if params.trim().is_empty() {
        essence
    } else {
        format!("{essence};{params}")
    }
}

/// Whether blobs of `media` may be shown inline: types a browser only ever displays
/// (raster images, audio, video, plain text, JSON, opaque bytes), never runs. Everything
/// else is served as an attachment: HTML, XHTML, SVG and other XML (documents that run
/// script), JavaScript, PDF (viewers run its scripts and forms, and a sandboxed page
/// cannot show it inline anyway), and any type this list does not know.
pub fn passive(media: &str) -> bool {
    const PASSIVE: &[&str] = &[
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "image/avif",
        "image/apng",
        "image/bmp",
        "image/x-icon",
        "image/vnd.microsoft.icon",
        "text/plain",
        "application/json",
        "application/octet-stream",
    ];
    let essence = media
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if essence.ends_with("+xml") || essence.ends_with("/xml") {
        return false;
    }
    PASSIVE.contains(&essence.as_str())
        || essence.starts_with("audio/")
        || essence.starts_with("video/")
}

/// The part of a blob of `size` bytes a `Range` header asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Span {
    /// The whole blob: no `Range`, or one this server ignores (another unit, several
    /// ranges, a malformed one — RFC 9110 §14.2 lets a server ignore those).
    Whole,
    /// Bytes `start..=end`.
    Part { start: u64, end: u64 },
    /// None of the asked bytes exist (416).
    Unsatisfiable,
}

pub(super) fn digits(s: &str) -> Option<u64> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// Reads a `Range` header against a blob of `size` bytes.
pub(super) fn span(range: Option<&str>, size: u64) -> Span {
    let Some(range) = range.map(str::trim) else {
        return Span::Whole;
    };
    let Some(spec) = range
        .get(..6)
        .filter(|unit| unit.eq_ignore_ascii_case("bytes="))
        .map(|_| range[6..].trim())
    else {
        return Span::Whole;
    };
    if spec.contains(',') {
        return Span::Whole;
    }
    let Some((first, last)) = spec.split_once('-') else {
        return Span::Whole;
    };
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        // bytes=-n: the last n bytes
        return match digits(last) {
            None => Span::Whole,
            Some(0) => Span::Unsatisfiable,
            Some(_) if size == 0 => Span::Unsatisfiable,
            Some(n) => Span::Part {
                start: size.saturating_sub(n),
                end: size - 1,
            },
        };
    }
    let Some(start) = digits(first) else {
        return Span::Whole;
    };
    let end = if last.is_empty() {
        None
    } else {
        match digits(last) {
            Some(e) if e >= start => Some(e),
            _ => return Span::Whole,
        }
    };
    if start >= size {
        return Span::Unsatisfiable;
    }
    Span::Part {
        start,
        end: end.map_or(size - 1, |e| e.min(size - 1)),
    }
}

/// The headers every blob is served with: its type, what keeps a browser from running
/// it as the node's origin, ranges, its ETag (the hash: blobs never change).
pub(super) fn blob_headers(media: &str, hash: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(media)
            .unwrap_or(HeaderValue::from_static("application/octet-stream")),
    );
    crate::http::guard::set_headers(
        &mut h,
        &[
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CONTENT_SECURITY_POLICY, BLOB_CSP),
            (header::ACCEPT_RANGES, "bytes"),
        ],
    );
    if !passive(media) {
        h.insert(
            header::CONTENT_DISPOSITION,
            HeaderValue::from_static("attachment"),
        );
    }
    if let Ok(v) = HeaderValue::from_str(&format!("\"{hash}\"")) {
        h.insert(header::ETAG, v);
    }
    h
}
