//! Relay-to-client messages, written straight to text (the event JSON is spliced in as
//! stored, never re-serialized).

fn string(s: &str) -> String {
    serde_json::to_string(s).expect("a string always serializes")
}

/// `["EVENT", <subid>, <event>]`.
pub fn event(subid: &str, event_json: &str) -> String {
    let sub = string(subid);
    let mut out = String::with_capacity(12 + sub.len() + event_json.len());
    out.push_str("[\"EVENT\",");
    out.push_str(&sub);
    out.push(',');
    out.push_str(event_json);
    out.push(']');
    out
}

/// `["OK", <id>, <accepted>, <message>]`.
pub fn ok(id_hex: &str, accepted: bool, message: &str) -> String {
    format!("[\"OK\",{},{accepted},{}]", string(id_hex), string(message))
}

/// `["EOSE", <subid>]`.
pub fn eose(subid: &str) -> String {
    format!("[\"EOSE\",{}]", string(subid))
}

/// `["CLOSED", <subid>, <message>]`.
pub fn closed(subid: &str, message: &str) -> String {
    format!("[\"CLOSED\",{},{}]", string(subid), string(message))
}

/// `["NEG-MSG", <subid>, <hex>]` (NIP-77).
pub fn neg_msg(subid: &str, msg: &[u8]) -> String {
    format!("[\"NEG-MSG\",{},\"{}\"]", string(subid), hex::encode(msg))
}

/// `["NEG-ERR", <subid>, <reason>]` (NIP-77).
pub fn neg_err(subid: &str, reason: &str) -> String {
    format!("[\"NEG-ERR\",{},{}]", string(subid), string(reason))
}

/// `["NOTICE", <message>]`.
pub fn notice(message: &str) -> String {
    format!("[\"NOTICE\",{}]", string(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_json_arrays_with_escaped_strings() {
        let v: serde_json::Value =
            serde_json::from_str(&ok("ab", false, "invalid: \"x\"")).unwrap();
        assert_eq!(v, serde_json::json!(["OK", "ab", false, "invalid: \"x\""]));
        let v: serde_json::Value = serde_json::from_str(&event("s\n1", "{\"a\":1}")).unwrap();
        assert_eq!(v, serde_json::json!(["EVENT", "s\n1", {"a": 1}]));
        for m in [eose("s"), closed("s", "m"), notice("n")] {
            assert!(
                serde_json::from_str::<serde_json::Value>(&m)
                    .unwrap()
                    .is_array()
            );
        }
    }
}
