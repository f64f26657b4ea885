//! Chat templates rendered as transformers renders them: the family formats of
//! `inference/src/chat/`, Llama 3's (`tests/fixtures/llama3.jinja`) and a whitespace-control
//! template, over a few conversations,
//! against the text Python's jinja2 gives in transformers' configuration (trim_blocks,
//! lstrip_blocks, `raise_exception`; `tests/fixtures/chat_cases.py` regenerates the
//! cases), `strftime_now` against the system's `date`, and a GGUF's template given the
//! bos/eos pieces its vocabulary names.

use fleetmesh_inference::chat::{ChatTemplate, MISTRAL, Message, PHI3};

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
            // Llama 3's header format, a fixture: no family made here speaks it
            "llama3" => include_str!("../fixtures/llama3.jinja"),
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

#[test]
fn a_gguf_template_gets_the_bos_and_eos_pieces_its_vocabulary_names() {
    use candle_core::quantized::gguf_file::{Value, write};
    let dir = tempfile::tempdir().unwrap();
    let pieces = ["a", "<s>", "</s>"]
        .map(|p| Value::String(p.into()))
        .to_vec();
    let template =
        Value::String("{{ bos_token }}{{ messages[0]['content'] }}{{ eos_token }}".into());
    for (bos, eos, want) in [(1u32, 2u32, "<s>hi</s>"), (1, 99, "<s>hi")] {
        let path = dir.path().join(format!("m{eos}.gguf"));
        let (b, e, tokens) = (
            Value::U32(bos),
            Value::U32(eos),
            Value::Array(pieces.clone()),
        );
        let meta = [
            ("tokenizer.chat_template", &template),
            ("tokenizer.ggml.tokens", &tokens),
            ("tokenizer.ggml.bos_token_id", &b),
            ("tokenizer.ggml.eos_token_id", &e),
        ];
        write(&mut std::fs::File::create(&path).unwrap(), &meta, &[]).unwrap();
        let t = ChatTemplate::load_beside(&path).unwrap().unwrap();
        let hi = Message {
            role: "user".into(),
            content: "hi".into(),
        };
        // an eos id outside the vocabulary is no piece, not a panic
        assert_eq!(t.render(&[hi], false).unwrap(), want);
        assert_eq!(t.eos_token(), want.strip_prefix("<s>hi").unwrap());
    }
}
