//! Chat template + tokenizer: messages (with image parts) → prompt token ids, the same ids as
//! transformers `apply_chat_template` followed by the Qwen-VL processor.
//!
//! - Template source, in order of precedence: `chat_template.jinja`, `chat_template.json`
//!   (`{"chat_template": …}`), `tokenizer_config.json` (`chat_template` string, or the entry
//!   named `default` of a list).
//! - Rendered with minijinja like transformers renders with jinja2: `trim_blocks`,
//!   `lstrip_blocks`, Python string methods through `minijinja_contrib::pycompat`,
//!   `raise_exception`; special tokens of `tokenizer_config.json` (`bos_token`, `eos_token`, …)
//!   are in the context.
//! - Each image placeholder (`<|image_pad|>`, `<IMG_CONTEXT>`) is expanded to the image's
//!   token count (the processor's `replace_image_token`: `t·h·w / merge²` for Qwen-VL,
//!   `tiles · tokens_per_tile` between `<img>` and `</img>` for InternVL). Expanding ids
//!   instead of text gives the same tokens because the placeholder and the wrap tokens are
//!   added tokens, split off before BPE.

use std::path::Path;

use minijinja::{Environment, ErrorKind};
use serde::Serialize;
use serde_json::Value;
use tokenizers::Tokenizer;

/// Errors of template rendering and tokenisation.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// No chat template in the checkpoint directory.
    #[error(
        "{0}: no chat template (chat_template.jinja, chat_template.json or tokenizer_config.json)"
    )]
    NoTemplate(String),
    /// A file could not be read or parsed.
    #[error("{path}: {msg}")]
    File {
        /// File path.
        path: String,
        /// Cause.
        msg: String,
    },
    /// The template failed to compile or render (including `raise_exception`).
    #[error("chat template: {0}")]
    Template(#[from] minijinja::Error),
    /// The tokenizer failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// Image placeholders in the prompt and images given disagree.
    #[error("prompt has {pads} image placeholders but {images} images were given")]
    ImageCount {
        /// Image placeholder tokens (`<|image_pad|>`, `<IMG_CONTEXT>`) in the rendered prompt.
        pads: usize,
        /// Images' token counts passed.
        images: usize,
    },
}

/// One part of a multimodal message (`{"type": "image"}` or `{"type": "text", "text": …}`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ContentPart {
    /// An image placeholder; the image itself travels separately as `pixel_values`.
    Image,
    /// Text.
    Text {
        /// The text.
        text: String,
    },
}

/// Message content: a plain string or a list of parts.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text content.
    Text(String),
    /// Multimodal parts, in order.
    Parts(Vec<ContentPart>),
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// Content.
    pub content: Content,
}

impl ChatMessage {
    /// A text-only message.
    pub fn text(role: &str, text: &str) -> Self {
        Self {
            role: role.into(),
            content: Content::Text(text.into()),
        }
    }

    /// A user message with one image followed by a question (the VQA prompt).
    pub fn user_image_question(question: &str) -> Self {
        Self {
            role: "user".into(),
            content: Content::Parts(vec![
                ContentPart::Image,
                ContentPart::Text {
                    text: question.into(),
                },
            ]),
        }
    }
}

/// The opening reasoning tag of the Qwen3 chat templates (a thinking template pre-fills it
/// at the end of the generation prompt).
pub const THINK_OPEN: &str = "<think>";
/// The closing reasoning tag of the Qwen3 chat templates.
pub const THINK_CLOSE: &str = "</think>";

/// Where a family's generated text holds its final answer, once the reasoning
/// (`<think>…</think>`) is split off. Recorded with each generation (`answer_format` in
/// `generations.jsonl`, absent for [`Self::AfterThink`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerFormat {
    /// Everything after the reasoning (the Qwen families, InternVL).
    #[default]
    AfterThink,
    /// GLM-4.1V-Thinking: the answer is written `<answer>…</answer>` after the reasoning and
    /// the final answer boxed inside it, `<|begin_of_box|>X<|end_of_box|>` (its model card and
    /// chat template). The answer is the last box's content; without a box, the text inside
    /// `<answer>`; without `<answer>`, all of it.
    GlmBox,
}

/// GLM's answer tags ([`AnswerFormat::GlmBox`]).
const GLM_ANSWER: (&str, &str) = ("<answer>", "</answer>");
/// GLM's box markers ([`AnswerFormat::GlmBox`]).
const GLM_BOX: (&str, &str) = ("<|begin_of_box|>", "<|end_of_box|>");

impl AnswerFormat {
    /// The final answer inside `after_think`, the text after the reasoning (not stripped).
    pub fn answer_of(self, after_think: &str) -> &str {
        match self {
            Self::AfterThink => after_think,
            Self::GlmBox => {
                let inside = match after_think.find(GLM_ANSWER.0) {
                    Some(at) => {
                        let rest = &after_think[at + GLM_ANSWER.0.len()..];
                        rest.rfind(GLM_ANSWER.1).map_or(rest, |end| &rest[..end])
                    }
                    None => after_think,
                };
                match inside.rfind(GLM_BOX.0) {
                    Some(at) => {
                        let rest = &inside[at + GLM_BOX.0.len()..];
                        rest.find(GLM_BOX.1).map_or(rest, |end| &rest[..end])
                    }
                    None => inside,
                }
            }
        }
    }

    /// Whether it is [`Self::AfterThink`] (serde's `skip_serializing_if`).
    pub fn is_after_think(&self) -> bool {
        *self == Self::AfterThink
    }
}

/// Rendering switches passed to the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderOptions {
    /// Append the assistant header (`add_generation_prompt`).
    pub add_generation_prompt: bool,
    /// `enable_thinking` (Qwen3 switch); `None` leaves it undefined, as transformers does when
    /// the caller does not pass it.
    pub enable_thinking: Option<bool>,
}

/// A compiled chat template with the special tokens of its checkpoint.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    special: serde_json::Map<String, Value>,
}

fn read(path: &Path) -> Result<Option<String>, ChatError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ChatError::File {
            path: path.display().to_string(),
            msg: e.to_string(),
        }),
    }
}

fn parse(path: &Path, text: &str) -> Result<Value, ChatError> {
    serde_json::from_str(text).map_err(|e| ChatError::File {
        path: path.display().to_string(),
        msg: e.to_string(),
    })
}

/// A `chat_template` value: a string, or a list of `{name, template}` (take `default`).
fn template_value(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Array(list) => list
            .iter()
            .find(|e| e.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|e| e.get("template")?.as_str().map(str::to_string)),
        _ => None,
    }
}

impl ChatTemplate {
    /// Loads the template of a checkpoint directory (precedence in the module docs) and the
    /// special tokens of `tokenizer_config.json`.
    ///
    /// Errors: [`ChatError::NoTemplate`], [`ChatError::File`], [`ChatError::Template`].
    pub fn from_dir(dir: &Path) -> Result<Self, ChatError> {
        let tc_path = dir.join("tokenizer_config.json");
        let tok_cfg = read(&tc_path)?.map(|t| parse(&tc_path, &t)).transpose()?;
        let json_path = dir.join("chat_template.json");
        let source = match read(&dir.join("chat_template.jinja"))? {
            Some(s) => s,
            None => match read(&json_path)? {
                Some(t) => template_value(parse(&json_path, &t)?.get("chat_template"))
                    .ok_or_else(|| ChatError::NoTemplate(json_path.display().to_string()))?,
                None => template_value(tok_cfg.as_ref().and_then(|c| c.get("chat_template")))
                    .ok_or_else(|| ChatError::NoTemplate(dir.display().to_string()))?,
            },
        };
        let mut special = serde_json::Map::new();
        if let Some(cfg) = &tok_cfg {
            for key in ["bos_token", "eos_token", "pad_token", "unk_token"] {
                match cfg.get(key) {
                    Some(Value::String(s)) => {
                        special.insert(key.into(), Value::String(s.clone()));
                    }
                    Some(Value::Object(o)) => {
                        if let Some(c) = o.get("content") {
                            special.insert(key.into(), c.clone());
                        }
                    }
                    _ => {}
                }
            }
        }
        Self::new(source, special)
    }

    /// Compiles `source` with the given special-token context.
    ///
    /// Errors: [`ChatError::Template`] on syntax errors.
    pub fn new(source: String, special: serde_json::Map<String, Value>) -> Result<Self, ChatError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_template_owned("chat", source)?;
        Ok(Self { env, special })
    }

    /// Renders `messages` to the prompt text.
    ///
    /// Errors: [`ChatError::Template`] (including the template's own `raise_exception`).
    pub fn render(
        &self,
        messages: &[ChatMessage],
        opts: RenderOptions,
    ) -> Result<String, ChatError> {
        let mut ctx = self.special.clone();
        ctx.insert(
            "messages".into(),
            serde_json::to_value(messages).unwrap_or(Value::Null),
        );
        ctx.insert(
            "add_generation_prompt".into(),
            Value::Bool(opts.add_generation_prompt),
        );
        if let Some(t) = opts.enable_thinking {
            ctx.insert("enable_thinking".into(), Value::Bool(t));
        }
        let tmpl = self.env.get_template("chat")?;
        Ok(tmpl.render(minijinja::Value::from_serialize(&ctx))?)
    }
}

/// Template + tokenizer + image-pad expansion: messages and image token counts → prompt ids.
#[derive(Debug)]
pub struct PromptBuilder {
    template: ChatTemplate,
    tokenizer: Tokenizer,
    image_token_id: u32,
    /// Ids put before and after each expanded placeholder run (InternVL's `<img>`, `</img>`).
    wrap: Option<(u32, u32)>,
}

impl PromptBuilder {
    /// Loads `tokenizer.json` and the chat template of a checkpoint directory.
    /// `image_token_id` comes from `config.json`; `wrap`, the tokens the family's processor
    /// puts around an image's placeholder run (`crate::Family::image_wrap`), are looked up in
    /// the tokenizer.
    ///
    /// Errors: [`ChatError`] for missing/invalid files, or a tokenizer without a wrap token.
    pub fn from_dir(
        dir: &Path,
        image_token_id: u32,
        wrap: Option<(&str, &str)>,
    ) -> Result<Self, ChatError> {
        let path = dir.join("tokenizer.json");
        let tokenizer = Tokenizer::from_file(&path).map_err(|e| ChatError::File {
            path: path.display().to_string(),
            msg: e.to_string(),
        })?;
        let id = |t: &str| {
            tokenizer.token_to_id(t).ok_or_else(|| ChatError::File {
                path: path.display().to_string(),
                msg: format!("the tokenizer has no `{t}` token (the family's image wrap)"),
            })
        };
        let wrap = match wrap {
            Some((open, close)) => Some((id(open)?, id(close)?)),
            None => None,
        };
        Ok(Self {
            template: ChatTemplate::from_dir(dir)?,
            tokenizer,
            image_token_id,
            wrap,
        })
    }

    /// The chat template.
    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Renders, tokenises and expands image placeholders: the `k`-th placeholder becomes
    /// `tokens[k]` placeholders (the processor's `replace_image_token`), between the wrap
    /// tokens when the family has them.
    ///
    /// Errors: [`ChatError::ImageCount`] when placeholders and images differ in number;
    /// template or tokenizer errors.
    pub fn encode(
        &self,
        messages: &[ChatMessage],
        opts: RenderOptions,
        tokens: &[usize],
    ) -> Result<Vec<u32>, ChatError> {
        let text = self.template.render(messages, opts)?;
        let ids = self.encode_text(&text)?;
        let pads = ids.iter().filter(|&&t| t == self.image_token_id).count();
        if pads != tokens.len() {
            return Err(ChatError::ImageCount {
                pads,
                images: tokens.len(),
            });
        }
        let mut out = Vec::with_capacity(ids.len() + tokens.iter().sum::<usize>());
        let mut k = 0;
        for id in ids {
            if id == self.image_token_id {
                out.extend(self.wrap.map(|w| w.0));
                out.extend(std::iter::repeat_n(id, tokens[k]));
                out.extend(self.wrap.map(|w| w.1));
                k += 1;
            } else {
                out.push(id);
            }
        }
        Ok(out)
    }

    /// Tokenises text (no template) with the tokenizer's own special-token handling.
    ///
    /// Errors: [`ChatError::Tokenizer`].
    pub fn encode_text(&self, text: &str) -> Result<Vec<u32>, ChatError> {
        let enc = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| ChatError::Tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decodes ids to text (`skip_special_tokens` as in transformers).
    ///
    /// Errors: [`ChatError::Tokenizer`].
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, ChatError> {
        self.tokenizer
            .decode(ids, skip_special_tokens)
            .map_err(|e| ChatError::Tokenizer(e.to_string()))
    }

    /// Id of a token string (e.g. `</think>`), if in the vocabulary.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.tokenizer.token_to_id(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glm_answers_are_the_last_box_inside_answer() {
        let glm = AnswerFormat::GlmBox;
        let cases = [
            (
                "<answer>The amount is <|begin_of_box|>1432<|end_of_box|> pesos.</answer>",
                "1432",
            ),
            // The last box counts; text around it does not.
            (
                "<answer><|begin_of_box|>1<|end_of_box|> or <|begin_of_box|>12<|end_of_box|></answer>",
                "12",
            ),
            ("<answer>\n1432\n</answer>", "\n1432\n"),
            ("<answer>1432", "1432"),
            ("<|begin_of_box|>77", "77"),
            ("plain 5", "plain 5"),
        ];
        for (text, want) in cases {
            assert_eq!(glm.answer_of(text), want, "{text}");
        }
        let qwen = AnswerFormat::AfterThink;
        assert_eq!(qwen.answer_of("<answer>x</answer>"), "<answer>x</answer>");
    }

    #[test]
    fn renders_images_thinking_and_generation_prompt() {
        let src = "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'image' %}<img>{% else %}{{ p.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}";
        let t = ChatTemplate::new(src.into(), Default::default()).unwrap();
        let msgs = [
            ChatMessage::text("system", "S"),
            ChatMessage::user_image_question("Q?"),
        ];
        let on = t
            .render(
                &msgs,
                RenderOptions {
                    add_generation_prompt: true,
                    enable_thinking: Some(true),
                },
            )
            .unwrap();
        assert_eq!(on, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n<img>Q?<|im_end|>\n<|im_start|>assistant\n");
        let off = t
            .render(
                &msgs,
                RenderOptions {
                    add_generation_prompt: true,
                    enable_thinking: Some(false),
                },
            )
            .unwrap();
        assert!(off.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
        let none = t
            .render(
                &msgs,
                RenderOptions {
                    add_generation_prompt: false,
                    enable_thinking: None,
                },
            )
            .unwrap();
        assert!(none.ends_with("Q?<|im_end|>\n"));
    }

    #[test]
    fn python_string_methods_and_raise_exception() {
        let t = ChatTemplate::new(
            "{{ messages[0].content.strip().startswith('a') }}{% if messages|length > 1 %}{{ raise_exception('too many') }}{% endif %}".into(),
            Default::default(),
        )
        .unwrap();
        let opts = RenderOptions {
            add_generation_prompt: false,
            enable_thinking: None,
        };
        assert_eq!(
            t.render(&[ChatMessage::text("user", "  abc ")], opts)
                .unwrap(),
            "True"
        );
        let err = t
            .render(
                &[
                    ChatMessage::text("user", "a"),
                    ChatMessage::text("user", "b"),
                ],
                opts,
            )
            .unwrap_err();
        assert!(err.to_string().contains("too many"), "{err}");
    }

    #[test]
    fn template_list_takes_default() {
        let v: Value = serde_json::json!([{"name": "tool_use", "template": "x"}, {"name": "default", "template": "y"}]);
        assert_eq!(template_value(Some(&v)).as_deref(), Some("y"));
    }
}
