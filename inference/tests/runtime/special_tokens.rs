//! Text prompts get the tokenizer's special tokens as transformers' `tokenizer(text)` and
//! vLLM give them; text that already carries them (a rendered chat template) does not.

use fleetmesh_inference::TextTokenizer;
use fleetmesh_inference::tiny::make_tiny_with_bos;

#[test]
fn text_prompts_get_the_post_processors_bos_as_the_tokenizers_crate_gives_it() {
    let dir = tempfile::tempdir().unwrap();
    make_tiny_with_bos(dir.path(), 1).unwrap();
    let path = dir.path().join("tokenizer.json");
    let ours = TextTokenizer::load(&path).unwrap();
    // the independent reference: the tokenizers crate itself, add_special_tokens = true
    let reference = tokenizers::Tokenizer::from_file(&path).unwrap();
    let bos = reference.token_to_id("<s>").unwrap();
    for text in ["the", "hello, world", "é ü 😀", " leading space", ""] {
        let want = reference.encode(text, true).unwrap().get_ids().to_vec();
        assert_eq!(ours.encode_with(text, true).unwrap(), want, "{text:?}");
        assert_eq!(
            want.first(),
            Some(&bos),
            "{text:?}: the post-processor adds <s>"
        );
        let plain = reference.encode(text, false).unwrap().get_ids().to_vec();
        assert_eq!(ours.encode(text).unwrap(), plain, "{text:?}");
        assert_eq!(ours.encode_with(text, false).unwrap(), plain, "{text:?}");
        assert!(!plain.contains(&bos), "{text:?}");
    }
    // a rendered template that starts with <s> keeps exactly one
    let once = ours.encode("<s>[user] hi\n").unwrap();
    assert_eq!(once.iter().filter(|&&i| i == bos).count(), 1, "{once:?}");
}

#[test]
fn llama_tokenizer_classes_follow_add_bos_token_and_add_eos_token() {
    let dir = tempfile::tempdir().unwrap();
    make_tiny_with_bos(dir.path(), 1).unwrap();
    let cfg_path = dir.path().join("tokenizer_config.json");
    let cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cfg_path).unwrap()).unwrap();
    let path = dir.path().join("tokenizer.json");
    let reference = tokenizers::Tokenizer::from_file(&path).unwrap();
    let (bos, eos) = (
        reference.token_to_id("<s>").unwrap(),
        reference.token_to_id("</s>").unwrap(),
    );
    let plain = reference.encode("the", false).unwrap().get_ids().to_vec();
    // transformers' LlamaTokenizerFast rebuilds the post-processor from these two flags
    for (class, add_bos, add_eos, want_bos, want_eos) in [
        ("LlamaTokenizerFast", Some(false), Some(true), false, true),
        ("LlamaTokenizerFast", None, None, true, false),
        ("GemmaTokenizer", Some(true), Some(true), true, true),
        // other classes keep tokenizer.json's post-processor, whatever the flags say
        (
            "PreTrainedTokenizerFast",
            Some(false),
            Some(true),
            true,
            false,
        ),
    ] {
        let mut c = cfg.clone();
        c["tokenizer_class"] = class.into();
        for (k, v) in [("add_bos_token", add_bos), ("add_eos_token", add_eos)] {
            match v {
                Some(b) => c[k] = b.into(),
                None => {
                    c.as_object_mut().unwrap().remove(k);
                }
            }
        }
        std::fs::write(&cfg_path, c.to_string()).unwrap();
        let ids = TextTokenizer::load(&path)
            .unwrap()
            .encode_with("the", true)
            .unwrap();
        let mut want = Vec::new();
        if want_bos {
            want.push(bos);
        }
        want.extend(&plain);
        if want_eos {
            want.push(eos);
        }
        assert_eq!(ids, want, "{class} {add_bos:?} {add_eos:?}");
    }
}
