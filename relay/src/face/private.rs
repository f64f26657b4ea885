//! Private kinds on the relay face (`[relay] private_kinds`, by default NIP-59 gift wraps):
//! events served only to the keys they are addressed to, as NIP-17 asks of relays.
//!
//! Every filter of a REQ or NEG-OPEN is read through [`Connection::private_view`]:
//! - a filter asking for private kinds only must name the connection's own key, which it
//!   proved by NIP-42, as the recipient (`#p`) or author (`authors`); an unauthenticated
//!   connection is sent its challenge and `auth-required:`, another key `restricted:`;
//! - any other filter leaves the private kinds out (stored, live and reconciled alike), so
//!   a `{}` subscription never carries someone else's mail;
//! - a federation link reads them within the shards agreed with it (its session's filters:
//!   when none of them can hold a private kind, they are left out too).

use super::*;

/// Whether filter `f` can match an event of one of `kinds`.
fn may_match(f: &Filter, kinds: &[u16]) -> bool {
    f.kinds
        .as_ref()
        .is_none_or(|ks| ks.iter().any(|k| kinds.contains(k)))
}

/// Whether `f` asks for this key's own events only: every `#p` value, or every author, is
/// `key` (hex).
fn names_only(f: &Filter, key: &str) -> bool {
    let p = f
        .tags
        .get(&'p')
        .is_some_and(|ps| !ps.is_empty() && ps.iter().all(|p| p == key));
    let authors = f
        .authors
        .as_ref()
        .is_some_and(|a| !a.is_empty() && a.iter().all(|a| hex::encode(a) == key));
    p || authors
}

impl Connection {
    /// `filters` as this connection may read them (see the module docs), or the refusal
    /// (`auth-required:`, `restricted:`) of the first filter that asks for private kinds it
    /// may not read; an empty refusal when the challenge could not be sent.
    pub(super) fn private_view(&mut self, mut filters: Vec<Filter>) -> Result<Vec<Filter>, String> {
        let relay = self.relay.clone();
        let private = &relay.limits.private_kinds;
        if private.is_empty() {
            return Ok(filters);
        }
        if let Some(s) = &self.session {
            // a federation link: within its agreed shards
            let shards_hold_private = s
                .filters
                .as_ref()
                .is_none_or(|fs| fs.iter().any(|f| may_match(f, private)));
            if !shards_hold_private {
                filters
                    .iter_mut()
                    .for_each(|f| f.exclude_kinds.clone_from(private));
            }
            return Ok(filters);
        }
        for f in &mut filters {
            if !may_match(f, private) {
                continue;
            }
            let only_private = f
                .kinds
                .as_ref()
                .is_some_and(|ks| !ks.is_empty() && ks.iter().all(|k| private.contains(k)));
            if !only_private {
                f.exclude_kinds.clone_from(private);
                continue;
            }
            match self.authed.as_deref() {
                Some(key) if names_only(f, key) => {}
                Some(key) => {
                    return Err(format!(
                        "restricted: kinds {private:?} are served only to the keys they are addressed to; ask with \"#p\": [\"{key}\"]"
                    ));
                }
                None => {
                    if !self.challenge() {
                        return Err(String::new());
                    }
                    return Err(format!(
                        "auth-required: kinds {private:?} are served only to the keys they are addressed to, who authenticate (NIP-42)"
                    ));
                }
            }
        }
        Ok(filters)
    }
}
