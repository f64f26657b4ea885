//! Text ↔ token ids through a Hugging Face `tokenizer.json` (the `tokenizers` crate), and
//! the byte-level tokenizer of the tiny model.

use std::path::Path;

use crate::{Error, Result};

/// A loaded `tokenizer.json`, with the special-token rule of the `tokenizer_config.json`
/// beside it.
pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
    /// transformers' Llama and Gemma tokenizers rebuild the post-processor from
    /// `add_bos_token` / `add_eos_token` (defaults true / false) rather than using the one
    /// in tokenizer.json: the ids to put around a text prompt, when that is this one.
    llama_specials: Option<(Option<u32>, Option<u32>)>,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("vocab", &self.inner.get_vocab_size(true))
            .finish()
    }
}

impl TextTokenizer {
    /// Reads `tokenizer.json`.
    ///
    /// # Errors
    /// [`Error::Io`] when missing, [`Error::Model`] when the file is not a tokenizer.
    pub fn load(path: &Path) -> Result<TextTokenizer> {
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.into(),
            source,
        })?;
        let config_path = path.with_file_name("tokenizer_config.json");
        let config = std::fs::read(&config_path).ok();
        TextTokenizer::parse(&bytes, path, config.as_deref(), &config_path)
    }

    /// A tokenizer from the bytes of a `tokenizer.json` and, when there is one, of the
    /// `tokenizer_config.json` beside it: what [`TextTokenizer::load`] reads, without files.
    ///
    /// # Errors
    /// [`Error::Model`] when either is not what it should be.
    pub fn from_bytes(
        tokenizer_json: &[u8],
        tokenizer_config: Option<&[u8]>,
    ) -> Result<TextTokenizer> {
        TextTokenizer::parse(
            tokenizer_json,
            Path::new("tokenizer.json"),
            tokenizer_config,
            Path::new("tokenizer_config.json"),
        )
    }

    fn parse(
        bytes: &[u8],
        path: &Path,
        config: Option<&[u8]>,
        config_path: &Path,
    ) -> Result<TextTokenizer> {
        // tokenizers 0.23 panics on some malformed files (an `expect` while reading a
        // `decoder` or a `Precompiled` normalizer) instead of returning its error
        let inner = std::panic::catch_unwind(|| tokenizers::Tokenizer::from_bytes(bytes))
            .map_err(|_| "the tokenizers crate panicked reading it".to_owned())
            .and_then(|r| r.map_err(|e| e.to_string()))
            .map_err(|reason| Error::Model {
                path: path.into(),
                reason,
            })?;
        let llama_specials = match config {
            Some(b) => {
                let v: serde_json::Value = serde_json::from_slice(b).map_err(|e| Error::Model {
                    path: config_path.into(),
                    reason: e.to_string(),
                })?;
                llama_specials(&inner, &v)
            }
            None => None,
        };
        Ok(TextTokenizer {
            inner,
            llama_specials,
        })
    }

    /// The ids of `text` with no special tokens added: for text that already carries them,
    /// such as a rendered chat template.
    ///
    /// # Errors
    /// [`Error::Request`] when the tokenizer cannot encode it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.encode_with(text, false)
    }

    /// The ids of a text prompt as transformers' `tokenizer(text)` and vLLM give them:
    /// with `add_special_tokens`, the special tokens of tokenizer.json's post-processor
    /// (a Llama's `<s>`), or of `add_bos_token` / `add_eos_token` for the Llama and Gemma
    /// tokenizer classes, which transformers rebuilds the post-processor from.
    ///
    /// # Errors
    /// [`Error::Request`] when the tokenizer cannot encode it.
    pub fn encode_with(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let plain = add_special_tokens && self.llama_specials.is_some();
        let mut ids = self
            .inner
            .encode(text, add_special_tokens && !plain)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| Error::Request(format!("tokenizing the prompt: {e}")))?;
        if plain && let Some((bos, eos)) = self.llama_specials {
            ids.splice(0..0, bos);
            ids.extend(eos);
        }
        Ok(ids)
    }

    /// Every id's bytes, for constrained decoding ([`crate::schema::TokenVocab`]): byte-level
    /// vocabularies (GPT-2, Llama 3, Qwen) map their printable characters back to bytes;
    /// SentencePiece vocabularies (Llama 2, Mistral) write `▁` for a space and `<0xNN>` for
    /// byte fallback. Special tokens have none.
    pub fn token_bytes(&self) -> Vec<Option<Vec<u8>>> {
        let byte_level = self
            .inner
            .get_decoder()
            .and_then(|d| serde_json::to_string(d).ok())
            .is_some_and(|d| d.contains("ByteLevel"));
        let unmap: std::collections::HashMap<char, u8> = byte_to_char()
            .into_iter()
            .enumerate()
            .map(|(b, c)| (c, b as u8))
            .collect();
        // added tokens are stored as plain text, not in the model's byte mapping
        let added = self.inner.get_added_tokens_decoder();
        let mut out = vec![None; self.inner.get_vocab_size(true)];
        for (text, id) in self.inner.get_vocab(true) {
            if id as usize >= out.len() {
                continue;
            }
            let bytes = if let Some(t) = added.get(&id) {
                (!t.special).then(|| t.content.clone().into_bytes())
            } else if byte_level {
                text.chars()
                    .map(|c| unmap.get(&c).copied())
                    .collect::<Option<Vec<u8>>>()
            } else if let Some(hex) = text.strip_prefix("<0x").and_then(|t| t.strip_suffix('>'))
                && hex.len() == 2
            {
                u8::from_str_radix(hex, 16).ok().map(|b| vec![b])
            } else {
                Some(text.replace('\u{2581}', " ").into_bytes())
            };
            out[id as usize] = bytes;
        }
        out
    }

    /// The text of `ids`.
    ///
    /// # Errors
    /// [`Error::Request`] for ids the tokenizer does not know.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|e| Error::Request(format!("detokenizing: {e}")))
    }
}

/// The Llama/Gemma special-token rule of a `tokenizer_config.json` (bos, eos to add), when
/// its `tokenizer_class` is one of those.
fn llama_specials(
    tokenizer: &tokenizers::Tokenizer,
    config: &serde_json::Value,
) -> Option<(Option<u32>, Option<u32>)> {
    let class = config["tokenizer_class"].as_str()?;
    let rebuilt = ["LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer"]
        .iter()
        .any(|c| class.strip_suffix("Fast").unwrap_or(class) == *c);
    if !rebuilt {
        return None;
    }
    let id = |key: &str, add_key: &str, default: bool| -> Option<u32> {
        let text = match &config[key] {
            serde_json::Value::String(s) => s.as_str(),
            v => v["content"].as_str()?,
        };
        config[add_key]
            .as_bool()
            .unwrap_or(default)
            .then(|| tokenizer.token_to_id(text))
            .flatten()
    };
    Some((
        id("bos_token", "add_bos_token", true),
        id("eos_token", "add_eos_token", false),
    ))
}

/// GPT-2's reversible map from bytes to printable characters (what byte-level BPE
/// vocabularies are written in).
fn byte_to_char() -> Vec<char> {
    let printable: Vec<u32> = (u32::from(b'!')..=u32::from(b'~'))
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut extra = 0;
    (0u32..256)
        .map(|b| {
            if printable.contains(&b) {
                char::from_u32(b).expect("latin-1")
            } else {
                extra += 1;
                char::from_u32(255 + extra).expect("in range")
            }
        })
        .collect()
}

/// A byte-level `tokenizer.json` whose id for each byte is the byte's value (256 ids, no
/// merges): UTF-8 text in, its bytes as ids, and back. The tiny model's tokenizer.
pub fn byte_level_tokenizer_json() -> String {
    let vocab: serde_json::Map<String, serde_json::Value> = byte_to_char()
        .into_iter()
        .enumerate()
        .map(|(i, c)| (c.to_string(), serde_json::Value::from(i)))
        .collect();
    let byte_level = serde_json::json!({
        "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false
    });
    serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": byte_level,
        "post_processor": null,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": null,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": false,
            "byte_fallback": false,
            "ignore_merges": false,
            "vocab": vocab,
            "merges": []
        }
    })
    .to_string()
}
