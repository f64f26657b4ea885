//! Text ↔ token ids through a Hugging Face `tokenizer.json` (the `tokenizers` crate), and
//! the byte-level tokenizer of the tiny model.

use std::path::Path;

use crate::{Error, Result};

/// A loaded `tokenizer.json`.
pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
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
        let inner = tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| Error::Model {
            path: path.into(),
            reason: e.to_string(),
        })?;
        Ok(TextTokenizer { inner })
    }

    /// The ids of `text` (no special tokens added).
    ///
    /// # Errors
    /// [`Error::Request`] when the tokenizer cannot encode it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.inner
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| Error::Request(format!("tokenizing the prompt: {e}")))
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
