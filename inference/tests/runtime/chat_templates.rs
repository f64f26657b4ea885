//! Chat templates rendered as transformers renders them: the family formats of
//! `inference/src/chat/` and a whitespace-control template, over a few conversations,
//! against the text Python's jinja2 gives in transformers' configuration (trim_blocks,
//! lstrip_blocks, `raise_exception`; `tests/fixtures/chat_cases.py` regenerates the
//! cases), and `strftime_now` against the system's `date`.

use fleetmesh_inference::chat::{ChatTemplate, LLAMA3, MISTRAL, Message, PHI3};

#[test]
fn family_templates_render_as_jinja2_renders_them_for_transformers() {
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("../fixtures/chat_cases.json")).unwrap();
    let whitespace = fixture["whitespace"].as_str().unwrap();
    let cases = fixture["cases"].as_array().unwrap();
    assert!(cases.len() >= 30);
    for case in cases {
        let name = case["template"].as_str().unwrap();
        let source = match name {
            "mistral" => MISTRAL,
            "phi3" => PHI3,
            "llama3" => LLAMA3,
            "whitespace" => whitespace,
            other => panic!("unknown template {other}"),
        };
        let t = ChatTemplate::new(
            source,
            case["bos_token"].as_str().unwrap(),
            case["eos_token"].as_str().unwrap(),
        )
        .unwrap();
        let messages: Vec<Message> = serde_json::from_value(case["messages"].clone()).unwrap();
        let got = t.render(&messages, case["add_generation_prompt"].as_bool().unwrap());
        match (case.get("text"), case.get("error")) {
            (Some(text), None) => {
                assert_eq!(got.unwrap(), text.as_str().unwrap(), "{name}: {case}");
            }
            (None, Some(error)) => {
                let e = got.unwrap_err().to_string();
                assert!(e.contains(error.as_str().unwrap()), "{name}: {e}");
            }
            _ => panic!("a case has a text or an error: {case}"),
        }
    }
}

#[test]
fn strftime_now_is_todays_date_in_utc() {
    let t = ChatTemplate::new(r#"{{ strftime_now("%d %b %Y %j %A") }}"#, "", "").unwrap();
    let date = || {
        let o = std::process::Command::new("date")
            .args(["-u", "+%d %b %Y %j %A"])
            .env("LC_ALL", "C")
            .output()
            .unwrap();
        String::from_utf8(o.stdout).unwrap().trim().to_owned()
    };
    // read the clock on both sides of the render: a day boundary may fall between
    let before = date();
    let got = t.render(&[], false).unwrap();
    let after = date();
    assert!(got == before || got == after, "{got} vs {before}/{after}");
    // an unsupported directive is the template's error, not a panic or silent text
    let t = ChatTemplate::new(r#"{{ strftime_now("%Z") }}"#, "", "").unwrap();
    let e = t.render(&[], false).unwrap_err().to_string();
    assert!(e.contains("%Z is not supported"), "{e}");
}
