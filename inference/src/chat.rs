//! Chat templates: the Jinja template a model ships to turn a conversation into its prompt
//! text, rendered as Hugging Face's `apply_chat_template` does.
//!
//! The template comes from `tokenizer_config.json` beside the tokenizer (`chat_template`,
//! a string or a list of named templates, `default` taken) or from a GGUF file's
//! `tokenizer.chat_template` (its `bos_token`/`eos_token` then the vocabulary's pieces of
//! `tokenizer.ggml.bos_token_id`/`eos_token_id`, as llama.cpp's server passes them). It
//! sees `messages`, `add_generation_prompt`, `bos_token` and `eos_token`,
//! `raise_exception(msg)`, `strftime_now(format)` (Llama 3.1's date line) and
//! Python's string methods (`.strip()`, `.startswith()` …), and block tags trim as they do
//! in transformers' environment (`trim_blocks`, `lstrip_blocks`). [`family_template`] gives
//! a family's own format for models made here. A model without a template has no
//! chat endpoint: [`ChatTemplate::load_beside`] returns `None` and the API says so.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Error, Result};

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant` (or whatever roles the template knows).
    pub role: String,
    /// The text.
    pub content: String,
}

/// A model's chat template with its special-token strings.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    source: String,
    bos_token: String,
    eos_token: String,
}

/// The special-token string in `tokenizer_config.json`: a string or `{"content": …}`.
fn token_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Object(o) => o
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    }
}

impl ChatTemplate {
    /// A template from its Jinja source and the bos/eos strings.
    ///
    /// # Errors
    /// [`Error::Request`] when the source does not parse.
    pub fn new(
        source: impl Into<String>,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Result<ChatTemplate> {
        let t = ChatTemplate {
            source: source.into(),
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
        };
        t.env()?;
        Ok(t)
    }

    /// The template of the model at `path` (a model directory, or a GGUF file): the
    /// directory's (or the file's directory's) `tokenizer_config.json`, else the GGUF's
    /// `tokenizer.chat_template`. `Ok(None)` when neither has one.
    ///
    /// # Errors
    /// [`Error::Model`] for a config or template that does not parse.
    pub fn load_beside(path: &Path) -> Result<Option<ChatTemplate>> {
        let dir = if path.is_dir() {
            path
        } else {
            path.parent().unwrap_or(Path::new("."))
        };
        let cfg_path = dir.join("tokenizer_config.json");
        let model_err = |p: &Path, reason: String| Error::Model {
            path: p.into(),
            reason,
        };
        if cfg_path.exists() {
            let text = std::fs::read_to_string(&cfg_path).map_err(|source| Error::Io {
                path: cfg_path.clone(),
                source,
            })?;
            let v: Value =
                serde_json::from_str(&text).map_err(|e| model_err(&cfg_path, e.to_string()))?;
            let source = match &v["chat_template"] {
                Value::String(s) => Some(s.clone()),
                Value::Array(list) => list
                    .iter()
                    .find(|t| t["name"] == "default")
                    .and_then(|t| t["template"].as_str())
                    .map(str::to_owned),
                _ => None,
            };
            if let Some(source) = source {
                return ChatTemplate::new(
                    source,
                    token_text(&v["bos_token"]),
                    token_text(&v["eos_token"]),
                )
                .map(Some)
                .map_err(|e| model_err(&cfg_path, format!("chat_template: {e}")));
            }
        }
        if path.is_file() && path.extension().is_some_and(|e| e == "gguf") {
            return gguf_template(path);
        }
        Ok(None)
    }

    /// The end-of-sequence string (`eos_token`), empty when the config names none.
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }

    fn env(&self) -> Result<minijinja::Environment<'static>> {
        let mut env = minijinja::Environment::new();
        // transformers renders with jinja2's trim_blocks and lstrip_blocks
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        minijinja_contrib::add_to_environment(&mut env);
        env.add_function("strftime_now", strftime_now);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    msg,
                ))
            },
        );
        env.add_template_owned("chat", self.source.clone())
            .map_err(|e| Error::Request(format!("the chat template does not parse: {e}")))?;
        Ok(env)
    }

    /// The prompt text for `messages`, with the assistant's turn opened when
    /// `add_generation_prompt`.
    ///
    /// # Errors
    /// [`Error::Request`] when the template refuses the conversation (its
    /// `raise_exception`) or fails.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let env = self.env()?;
        let t = env
            .get_template("chat")
            .map_err(|e| Error::Request(e.to_string()))?;
        t.render(minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
        })
        .map_err(|e| {
            Error::Request(match e.detail() {
                Some(d) => format!("the chat template refused the messages: {d}"),
                None => format!("the chat template refused the messages: {e}"),
            })
        })
    }
}

fn gguf_template(path: &Path) -> Result<Option<ChatTemplate>> {
    let model_err = |reason: String| Error::Model {
        path: path.into(),
        reason,
    };
    let (_, content) = crate::model::open_gguf(path)?;
    let Some(source) = content.metadata.get("tokenizer.chat_template") else {
        return Ok(None);
    };
    let source = source
        .to_string()
        .map_err(|e| model_err(format!("tokenizer.chat_template: {e}")))?
        .clone();
    // the bos/eos strings are the vocabulary's pieces of the ids the file names (empty
    // when it names none, or an id outside its vocabulary)
    let piece = |key: &str| -> String {
        use candle_core::quantized::gguf_file::Value;
        let id = content.metadata.get(key).and_then(|v| v.to_u32().ok());
        match (id, content.metadata.get("tokenizer.ggml.tokens")) {
            (Some(id), Some(Value::Array(pieces))) => pieces
                .get(id as usize)
                .and_then(|p| p.to_string().ok())
                .cloned()
                .unwrap_or_default(),
            _ => String::new(),
        }
    };
    ChatTemplate::new(
        source,
        piece("tokenizer.ggml.bos_token_id"),
        piece("tokenizer.ggml.eos_token_id"),
    )
    .map(Some)
    .map_err(|e| model_err(format!("tokenizer.chat_template: {e}")))
}

/// Python's `time.strftime(format)` of the current UTC time, for the directives chat
/// templates use: `%Y %y %m %d %e %b %B %a %A %H %M %S %j %%`; any other is an error.
fn strftime_now(format: String) -> std::result::Result<String, minijinja::Error> {
    strftime(&format, time::OffsetDateTime::now_utc())
}

/// `format` of the time `t` (see [`strftime_now`]).
fn strftime(
    format: &str,
    t: time::OffsetDateTime,
) -> std::result::Result<String, minijinja::Error> {
    let month = t.month().to_string();
    let weekday = t.weekday().to_string();
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let piece = match chars.next().unwrap_or('%') {
            'Y' => t.year().to_string(),
            'y' => format!("{:02}", t.year().rem_euclid(100)),
            'm' => format!("{:02}", u8::from(t.month())),
            'd' => format!("{:02}", t.day()),
            'e' => format!("{:>2}", t.day()),
            'b' => month[..3].to_owned(),
            'B' => month.clone(),
            'a' => weekday[..3].to_owned(),
            'A' => weekday.clone(),
            'H' => format!("{:02}", t.hour()),
            'M' => format!("{:02}", t.minute()),
            'S' => format!("{:02}", t.second()),
            'j' => format!("{:03}", t.ordinal()),
            '%' => "%".to_owned(),
            other => {
                return Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    format!("strftime_now: %{other} is not supported"),
                ));
            }
        };
        out.push_str(&piece);
    }
    Ok(out)
}

/// ChatML, the template [`crate::tiny::make_tiny`] ships (Qwen's and many others' format).
pub const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// Mistral's instruct format: `[INST] … [/INST]` around each user turn, the answer and
/// `eos_token` after it; roles must alternate user/assistant, and a leading system message
/// is put before the first user turn's text (Mistral has no system role).
pub const MISTRAL: &str = include_str!("chat/mistral.jinja");

/// Phi-3's format: `<|role|>` newline, the text, `<|end|>` newline per turn; the
/// generation prompt opens `<|assistant|>`, else the conversation ends with `eos_token`.
pub const PHI3: &str = include_str!("chat/phi3.jinja");

/// A model family's own chat template and the end-of-turn string it writes after an
/// answer, for models made here: ChatML for `llama` and `qwen2` (the tiny Llama has always
/// spoken it), [`MISTRAL`], [`PHI3`].
pub fn family_template(model_type: &str) -> (&'static str, &'static str) {
    match model_type {
        "mistral" => (MISTRAL, "</s>"),
        "phi3" => (PHI3, "<|end|>"),
        _ => (CHATML, "<|im_end|>"),
    }
}

#[cfg(test)]
mod tests {
    use super::strftime;

    #[test]
    fn strftime_formats_known_instants_as_python_does() {
        // values from Python's time.strftime(fmt, time.gmtime(secs))
        for (secs, want) in [
            (
                0,
                "1970-01-01 70 001 Thu Thursday January Jan  1 00:00:00 %",
            ),
            (
                951_825_599,
                "2000-02-29 00 060 Tue Tuesday February Feb 29 11:59:59 %",
            ),
            (
                1_798_761_599,
                "2026-12-31 26 365 Thu Thursday December Dec 31 23:59:59 %",
            ),
            (
                4_107_542_400,
                "2100-03-01 00 060 Mon Monday March Mar  1 00:00:00 %",
            ),
        ] {
            let t = time::OffsetDateTime::from_unix_timestamp(secs).unwrap();
            assert_eq!(
                strftime("%Y-%m-%d %y %j %a %A %B %b %e %H:%M:%S %%", t).unwrap(),
                want,
                "{secs}"
            );
        }
        assert!(strftime("%Z", time::OffsetDateTime::UNIX_EPOCH).is_err());
    }
}
