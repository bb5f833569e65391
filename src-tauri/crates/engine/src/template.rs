//! The checkpoint's own chat template, rendered like Hugging Face `apply_chat_template`,
//! and the expansion of image placeholders into soft-token runs.
//!
//! The template is never rewritten in Rust: whatever `chat_template.jinja` (or the
//! `chat_template` of tokenizer_config.json) says is what the prompt becomes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minijinja::value::Serde;
use minijinja::{Environment, Error as JinjaError, ErrorKind, Value};
use serde::Serialize;

use crate::checkpoint::{TEMPLATE_FILE, TOKENIZER_CONFIG_FILE};
use crate::detokenize::streamed_text;
use crate::tokenizer::{splice_mark, SpecialTokens, Tokenizer, CHANNEL_CLOSE, CHANNEL_OPEN};

mod tojson;

const TEMPLATE_NAME: &str = "chat_template";

/// Everything that can go wrong loading or rendering a chat template.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// A checkpoint file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// tokenizer_config.json is not valid JSON.
    #[error("{path} is not valid JSON: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The checkpoint has no chat template at all.
    #[error("{dir} has no chat template ({TEMPLATE_FILE}, or `chat_template` in {TOKENIZER_CONFIG_FILE})")]
    Missing {
        /// The checkpoint folder.
        dir: PathBuf,
    },
    /// A field of tokenizer_config.json has an unexpected shape.
    #[error("{path}: `{field}` must be {expected}")]
    InvalidField {
        /// The file.
        path: PathBuf,
        /// The field.
        field: String,
        /// What was expected, in words.
        expected: &'static str,
    },
    /// The template does not parse.
    #[error("the chat template from {origin} does not parse: {source}")]
    Syntax {
        /// Where the template came from.
        origin: PathBuf,
        /// Why.
        #[source]
        source: JinjaError,
    },
    /// The template fails on the simplest conversation: it could never be used.
    #[error(
        "the chat template from {origin} cannot render even a one-message conversation: {source}"
    )]
    Unusable {
        /// Where the template came from.
        origin: PathBuf,
        /// Why.
        #[source]
        source: JinjaError,
    },
    /// The template writes a special token (`bos_token`, …) that no file defines; it would
    /// silently render as nothing.
    #[error(
        "the chat template from {origin} uses `{name}`, which {} does not define{}",
        defined_in.display(),
        if *file_missing { " (the file is missing)" } else { "" }
    )]
    UndefinedToken {
        /// Where the template came from.
        origin: PathBuf,
        /// The variable, e.g. `bos_token`.
        name: String,
        /// The file that should define it: tokenizer_config.json.
        defined_in: PathBuf,
        /// Whether that file is absent altogether.
        file_missing: bool,
    },
    /// Tokenizing the rendered prompt failed.
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    /// Rendering failed, including the template's own `raise_exception(...)`.
    #[error("the chat template from {origin} cannot render this conversation: {source}")]
    Render {
        /// Where the template came from.
        origin: PathBuf,
        /// Why.
        #[source]
        source: JinjaError,
    },
    /// The prompt holds a different number of placeholders of a kind than items were given.
    #[error("the prompt has {found} {kind} placeholder(s) but {expected} {kind}(s) were given")]
    MediaCount {
        /// `image` or `audio`.
        kind: MediaKind,
        /// Number of items given.
        expected: usize,
        /// Number of placeholders in the prompt.
        found: usize,
    },
    /// Media were given to a checkpoint whose config names no tokens for them.
    #[error("this checkpoint takes no {kind} (its config.json has no {kind}_token_id)")]
    NoMediaTokens {
        /// `image` or `audio`.
        kind: MediaKind,
    },
}

/// What a placeholder stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaKind {
    /// A picture: the vision tower's soft tokens.
    Image,
    /// A sound clip: the audio tower's soft tokens.
    Audio,
}

impl std::fmt::Display for MediaKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Image => "image",
            Self::Audio => "audio",
        })
    }
}

/// Result of this module.
pub type Result<T, E = TemplateError> = std::result::Result<T, E>;

/// Who wrote a message. The template decides how each is written (Gemma: `model` for
/// the assistant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the whole conversation.
    System,
    /// The person.
    User,
    /// The model.
    Assistant,
}

/// One piece of a message, serialized as HF processors pass content items:
/// `{"type": "text", "text": …}`, `{"type": "image"}` and `{"type": "audio"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Part {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image; the template writes its placeholder here.
    Image,
    /// A sound clip (at most 30 s); the template writes its placeholder here.
    Audio,
}

/// One message of a conversation.
///
/// Serialized as HF callers pass messages: `content` is a plain string when the message is
/// text only (templates `trim` a system message's content, which on a list would print its
/// Python repr), and a list of `{"type": …}` items as soon as it holds an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// What it holds, in order.
    pub content: Vec<Part>,
    /// For an answer: the ids the model generated for its text (thinking included, the
    /// end-of-turn id not), when known. The prompt then holds these ids for the answer
    /// instead of its text re-tokenized, so a follow-up reuses the cache over the whole
    /// history (see [`ChatTemplate::prompt_ids`]). Never serialized to the template.
    pub generated: Option<Vec<u32>>,
    /// For an answer: the tools it called, in order.
    pub tool_calls: Vec<ToolCall>,
    /// For an answer that called tools: what they returned, written after the calls in the
    /// same model turn (Gemma 4's format).
    pub tool_responses: Vec<ToolResponse>,
}

/// A tool the model called: its name and arguments (a JSON object).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The function's name.
    pub name: String,
    /// Its arguments.
    pub arguments: serde_json::Value,
}

impl Serialize for ToolCall {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serde_json::json!({
            "type": "function",
            "function": { "name": self.name, "arguments": self.arguments },
        })
        .serialize(serializer)
    }
}

/// What a tool returned: a JSON object, or any other value (written as `value:`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolResponse {
    /// The function that was called.
    pub name: String,
    /// What it returned.
    pub response: serde_json::Value,
}

impl Message {
    /// A message holding only text.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Self::new(role, vec![Part::Text { text: text.into() }])
    }

    /// A message of several parts.
    pub fn new(role: Role, content: Vec<Part>) -> Self {
        Self {
            role,
            content,
            generated: None,
            tool_calls: Vec::new(),
            tool_responses: Vec::new(),
        }
    }

    /// This answer, with the ids the model generated for it.
    pub fn with_generated(mut self, ids: Vec<u32>) -> Self {
        self.generated = Some(ids);
        self
    }
}

impl Serialize for Message {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("role", &self.role)?;
        match self.content.as_slice() {
            [] => map.serialize_entry("content", "")?,
            [Part::Text { text }] => map.serialize_entry("content", text)?,
            parts => map.serialize_entry("content", parts)?,
        }
        if !self.tool_calls.is_empty() {
            map.serialize_entry("tool_calls", &self.tool_calls)?;
        }
        if !self.tool_responses.is_empty() {
            map.serialize_entry("tool_responses", &self.tool_responses)?;
        }
        map.end()
    }
}

/// Switches of one rendering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RenderOptions {
    /// End with the opening of a model turn, ready for generation.
    pub add_generation_prompt: bool,
    /// Passed as `enable_thinking`; Gemma 4 then writes `<|think|>` in the system turn.
    pub enable_thinking: bool,
}

/// A compiled chat template with the token strings it is rendered with.
pub struct ChatTemplate {
    env: Environment<'static>,
    tokens: Vec<(String, String)>,
    origin: PathBuf,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("origin", &self.origin)
            .field("tokens", &self.tokens)
            .finish()
    }
}

impl ChatTemplate {
    /// Loads the template of the checkpoint in `dir`: `chat_template.jinja` if present,
    /// else the `chat_template` of tokenizer_config.json. Token strings (`bos_token`,
    /// `eos_token`, …) come from tokenizer_config.json when it exists.
    pub fn load(dir: &Path) -> Result<Self> {
        let config_path = dir.join(TOKENIZER_CONFIG_FILE);
        let config = if config_path.exists() {
            let bytes = std::fs::read(&config_path).map_err(|source| TemplateError::Io {
                path: config_path.clone(),
                source,
            })?;
            let json: serde_json::Value =
                serde_json::from_slice(&bytes).map_err(|source| TemplateError::Json {
                    path: config_path.clone(),
                    source,
                })?;
            Some(json)
        } else {
            None
        };

        let file = dir.join(TEMPLATE_FILE);
        let (source, origin) = if file.exists() {
            let source = std::fs::read_to_string(&file).map_err(|source| TemplateError::Io {
                path: file.clone(),
                source,
            })?;
            (source, file)
        } else {
            let embedded = match &config {
                Some(json) => embedded_template(&config_path, json)?,
                None => None,
            };
            match embedded {
                Some(source) => (source, config_path.clone()),
                None => {
                    return Err(TemplateError::Missing {
                        dir: dir.to_owned(),
                    })
                }
            }
        };

        let tokens = match &config {
            Some(serde_json::Value::Object(fields)) => token_variables(&config_path, fields)?,
            _ => Vec::new(),
        };
        let template = Self::from_source(source, tokens, origin)?;
        template.check_usable(&config_path)?;
        Ok(template)
    }

    /// Fails now, at load, rather than on the first message: when the template writes a special
    /// token no file defines, or cannot render a one-message conversation at all.
    fn check_usable(&self, tokens_file: &Path) -> Result<()> {
        let undeclared = self
            .env
            .get_template(TEMPLATE_NAME)
            .map(|t| t.undeclared_variables(false))
            .unwrap_or_default();
        let mut missing: Vec<&String> = undeclared
            .iter()
            .filter(|name| name.ends_with("_token"))
            .filter(|name| !self.tokens.iter().any(|(defined, _)| defined == *name))
            .collect();
        missing.sort();
        if let Some(name) = missing.first() {
            return Err(TemplateError::UndefinedToken {
                origin: self.origin.clone(),
                name: (*name).clone(),
                defined_in: tokens_file.to_owned(),
                file_missing: !tokens_file.exists(),
            });
        }
        let probe = [Message::text(Role::User, "Hello")];
        let options = RenderOptions {
            add_generation_prompt: true,
            enable_thinking: false,
        };
        match self.render(&probe, options) {
            Err(TemplateError::Render { origin, source }) => {
                Err(TemplateError::Unusable { origin, source })
            }
            other => other.map(drop),
        }
    }

    /// Compiles a template from its text. `tokens` are the variables `bos_token`,
    /// `eos_token`, … it is rendered with; `origin` names it in errors.
    pub fn from_source(
        source: String,
        tokens: Vec<(String, String)>,
        origin: impl Into<PathBuf>,
    ) -> Result<Self> {
        let origin = origin.into();
        let mut env = hf_environment();
        env.add_template_owned(TEMPLATE_NAME, source)
            .map_err(|source| TemplateError::Syntax {
                origin: origin.clone(),
                source,
            })?;
        Ok(Self {
            env,
            tokens,
            origin,
        })
    }

    /// Where the template came from.
    pub fn origin(&self) -> &Path {
        &self.origin
    }

    /// Renders a conversation to the prompt text, as HF `apply_chat_template(messages,
    /// add_generation_prompt=…, enable_thinking=…, tokenize=False)` does.
    pub fn render(&self, messages: &[Message], options: RenderOptions) -> Result<String> {
        self.render_with_tools(messages, &[], options)
    }

    /// [`Self::render`] with `tools` declared (OpenAI's function-tool objects, `{"type":
    /// "function", "function": {"name", "description", "parameters"}}`), as HF's
    /// `apply_chat_template(…, tools=…)` passes them; none declares none.
    pub fn render_with_tools(
        &self,
        messages: &[Message],
        tools: &[serde_json::Value],
        options: RenderOptions,
    ) -> Result<String> {
        let render_error = |source| TemplateError::Render {
            origin: self.origin.clone(),
            source,
        };
        let template = self.env.get_template(TEMPLATE_NAME).map_err(render_error)?;
        // Token variables first: like HF, the call's own arguments win over them.
        let mut context: BTreeMap<&str, Value> = self
            .tokens
            .iter()
            .map(|(name, text)| (name.as_str(), Value::from(text.as_str())))
            .collect();
        context.extend([
            ("messages", Value::from(Serde(messages))),
            (
                "tools",
                if tools.is_empty() {
                    Value::from(())
                } else {
                    Value::from(Serde(tools))
                },
            ),
            ("documents", Value::from(())),
            (
                "add_generation_prompt",
                Value::from(options.add_generation_prompt),
            ),
            ("enable_thinking", Value::from(options.enable_thinking)),
        ]);
        let context = Value::from(context);
        template.render(context).map_err(render_error)
    }
}

impl ChatTemplate {
    /// Renders `messages` and tokenizes the prompt. Control-token text a person or the model
    /// wrote inside a message (`<|image|>`, `<turn|>`, …) stays text: only the template writes
    /// control tokens. (Hugging Face and mlx-vlm would turn it into control ids, so that a
    /// pasted `<|image|>` asks for an image that is not there.) The thinking markers in an
    /// earlier answer stay markers: the template strips the thinking they enclose. Prompts
    /// without such text encode exactly as `tokenizer.encode(&self.render(…))`.
    ///
    /// An answer that carries its [`Message::generated`] ids is written as those ids (its
    /// visible part: what follows the thinking, whitespace at the ends dropped as the template
    /// trims it) instead of its text re-tokenized — a sampled answer rarely re-tokenizes to
    /// the ids sampled, and every difference is history the next turn would prefill again.
    /// Only where it changes nothing else: the ids stream to exactly the message's text, their
    /// visible part holds no control id, and the template writes exactly the visible part's
    /// text for the ids' full text (checked by rendering both ways); otherwise the text is
    /// encoded as usual.
    pub fn prompt_ids(
        &self,
        tokenizer: &Tokenizer,
        messages: &[Message],
        options: RenderOptions,
    ) -> Result<Vec<u32>> {
        self.prompt_ids_with_tools(tokenizer, messages, &[], options)
    }

    /// [`Self::prompt_ids`] with `tools` declared (see [`Self::render_with_tools`]). Every
    /// string in the tools, in the answers' tool calls and in the tools' responses (keys
    /// included) is text, as a message's text is: control-token text in it stays text.
    pub fn prompt_ids_with_tools(
        &self,
        tokenizer: &Tokenizer,
        messages: &[Message],
        tools: &[serde_json::Value],
        options: RenderOptions,
    ) -> Result<Vec<u32>> {
        let tools = tools
            .iter()
            .map(|tool| mark_json(tokenizer, tool))
            .collect::<Result<Vec<_>>>()?;
        let tools = tools.as_slice();
        let thinking_markers: Vec<u32> = [CHANNEL_OPEN, CHANNEL_CLOSE]
            .iter()
            .filter_map(|t| tokenizer.token_id(t))
            .collect();
        let mut marked = Vec::with_capacity(messages.len());
        // The same messages with each usable answer replaced by a splice mark, and by the full
        // decode of its ids (what the splice must stand for); each mark's expected text
        // (marked like the rest) and ids.
        let mut with_splices = Vec::with_capacity(messages.len());
        let mut decoded = Vec::with_capacity(messages.len());
        let mut splices: Vec<(String, String, Vec<u32>)> = Vec::new();
        let mark_message = |message: &Message, keep: &[u32]| -> Result<Message> {
            let mut content = Vec::with_capacity(message.content.len());
            for part in &message.content {
                content.push(match part {
                    Part::Text { text } => Part::Text {
                        text: tokenizer.mark_special_text(text, keep)?.into_owned(),
                    },
                    Part::Image => Part::Image,
                    Part::Audio => Part::Audio,
                });
            }
            let mut marked = Message::new(message.role, content);
            for call in &message.tool_calls {
                marked.tool_calls.push(ToolCall {
                    name: tokenizer.mark_special_text(&call.name, &[])?.into_owned(),
                    arguments: mark_json(tokenizer, &call.arguments)?,
                });
            }
            for response in &message.tool_responses {
                marked.tool_responses.push(ToolResponse {
                    name: tokenizer
                        .mark_special_text(&response.name, &[])?
                        .into_owned(),
                    response: mark_json(tokenizer, &response.response)?,
                });
            }
            Ok(marked)
        };
        for message in messages {
            let keep: &[u32] = match message.role {
                Role::Assistant => &thinking_markers,
                Role::System | Role::User => &[],
            };
            let marked_message = mark_message(message, keep)?;
            match answer_ids(tokenizer, message)? {
                Some((all, visible)) => {
                    let full = Message::text(message.role, tokenizer.decode(&all, false)?);
                    decoded.push(mark_message(&full, keep)?);
                    let text = tokenizer.decode(&visible, false)?;
                    let expected = tokenizer.mark_special_text(&text, keep)?.into_owned();
                    let mark = splice_mark(splices.len());
                    with_splices.push(Message::text(message.role, mark.clone()));
                    splices.push((mark, expected, visible));
                }
                None => {
                    with_splices.push(marked_message.clone());
                    decoded.push(marked_message.clone());
                }
            }
            marked.push(marked_message);
        }
        let text = self.render_with_tools(&marked, tools, options)?;
        if !splices.is_empty() {
            let spliced = self.render_with_tools(&with_splices, tools, options)?;
            let mut check = spliced.clone();
            for (mark, expected, _) in &splices {
                check = check.replace(mark.as_str(), expected);
            }
            if check == self.render_with_tools(&decoded, tools, options)? {
                let ids: Vec<Vec<u32>> = splices.into_iter().map(|(_, _, ids)| ids).collect();
                return Ok(tokenizer.encode_spliced(&spliced, &ids)?);
            }
        }
        Ok(tokenizer.encode_marked(&text)?)
    }
}

/// `value` with every string in it (object keys too) marked as [`Tokenizer::mark_special_text`]
/// marks a message's text.
fn mark_json(tokenizer: &Tokenizer, value: &serde_json::Value) -> Result<serde_json::Value> {
    use serde_json::Value as Json;
    Ok(match value {
        Json::String(text) => Json::String(tokenizer.mark_special_text(text, &[])?.into_owned()),
        Json::Array(items) => Json::Array(
            items
                .iter()
                .map(|item| mark_json(tokenizer, item))
                .collect::<Result<_>>()?,
        ),
        Json::Object(fields) => Json::Object(
            fields
                .iter()
                .map(|(key, item)| {
                    Ok((
                        tokenizer.mark_special_text(key, &[])?.into_owned(),
                        mark_json(tokenizer, item)?,
                    ))
                })
                .collect::<Result<_>>()?,
        ),
        other => other.clone(),
    })
}

/// An answer's generated ids and those of its visible text, when they can stand for its text
/// in a prompt: the answer streamed exactly its (single) text part from them; the thinking
/// before the last `<channel|>` (or an unfinished thought from a lone `<|channel>`) and
/// whitespace-only ids at the ends are dropped, as the template drops their text; no control
/// id remains.
fn answer_ids(tokenizer: &Tokenizer, message: &Message) -> Result<Option<(Vec<u32>, Vec<u32>)>> {
    let (Role::Assistant, Some(ids), [Part::Text { text }]) =
        (message.role, &message.generated, message.content.as_slice())
    else {
        return Ok(None);
    };
    if !message.tool_calls.is_empty() || !message.tool_responses.is_empty() {
        return Ok(None);
    }
    if streamed_text(tokenizer, ids)? != *text {
        return Ok(None);
    }
    let mut visible: &[u32] = ids;
    if let Some(close) = tokenizer.token_id(CHANNEL_CLOSE) {
        if let Some(at) = visible.iter().rposition(|&id| id == close) {
            visible = &visible[at + 1..];
        }
    }
    if let Some(open) = tokenizer.token_id(CHANNEL_OPEN) {
        if let Some(at) = visible.iter().position(|&id| id == open) {
            visible = &visible[..at];
        }
    }
    let blank = |id: u32| -> Result<bool> { Ok(tokenizer.decode(&[id], false)?.trim().is_empty()) };
    while let Some((&first, rest)) = visible.split_first() {
        if !blank(first)? {
            break;
        }
        visible = rest;
    }
    while let Some((&last, rest)) = visible.split_last() {
        if !blank(last)? {
            break;
        }
        visible = rest;
    }
    if visible.iter().any(|&id| tokenizer.is_special(id)) {
        return Ok(None);
    }
    Ok(Some((ids.clone(), visible.to_vec())))
}

/// An environment that behaves like the one transformers builds for chat templates:
/// trim_blocks + lstrip_blocks, loop controls, Python string/dict methods,
/// `raise_exception` and `strftime_now`.
fn hf_environment() -> Environment<'static> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build();
    // The default delimiters always build; fall back to them rather than panic.
    env.set_syntax(syntax.unwrap_or_default());
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    minijinja_contrib::add_to_environment(&mut env);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_filter("tojson", tojson::python_tojson);
    env
}

fn raise_exception(message: String) -> std::result::Result<Value, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, message))
}

fn strftime_now(format: String) -> std::result::Result<String, JinjaError> {
    let now = jiff::ZonedDateTime::now();
    let mut out = String::new();
    use std::fmt::Write;
    write!(out, "{}", now.strftime(&format)).map_err(|_| {
        JinjaError::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: bad format {format:?}"),
        )
    })?;
    Ok(out)
}

/// The `chat_template` of tokenizer_config.json: a string, or HF's list of
/// `{name, template}` of which the one named `default` is used.
fn embedded_template(path: &Path, json: &serde_json::Value) -> Result<Option<String>> {
    let invalid = || TemplateError::InvalidField {
        path: path.to_owned(),
        field: "chat_template".into(),
        expected: "a string or a list of {name, template} with a `default`",
    };
    match json.get("chat_template") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(text)) => Ok(Some(text.clone())),
        Some(serde_json::Value::Array(items)) => {
            let default = items
                .iter()
                .find(|item| item.get("name").and_then(|n| n.as_str()) == Some("default"))
                .and_then(|item| item.get("template"))
                .and_then(|t| t.as_str())
                .ok_or_else(invalid)?;
            Ok(Some(default.to_owned()))
        }
        Some(_) => Err(invalid()),
    }
}

/// The special tokens transformers knows by name: a value of another shape under one of these
/// is an error there too.
const NAMED_SPECIAL_TOKENS: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// The token strings tokenizer_config.json gives the template, read as transformers reads the
/// file: HF passes the tokenizer's named special tokens (`bos_token`, `eos_token`, and in
/// transformers 5 model-specific ones such as `image_token`, also under `extra_special_tokens`
/// when that is a name → token object) as template variables. A token is a string or an
/// `AddedToken` object with a `content` string. Switches such as `add_bos_token: false`, other
/// fields and other shapes under unknown names are not tokens and are ignored, as transformers
/// ignores them; a malformed value under one of the [`NAMED_SPECIAL_TOKENS`] is refused.
fn token_variables(
    path: &Path,
    fields: &serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<(String, String)>> {
    let mut tokens = Vec::new();
    let named = fields
        .iter()
        .filter(|(name, _)| name.ends_with("_token") && !name.starts_with("add_"));
    for (name, value) in named {
        match token_string(value) {
            Some(text) => tokens.push((name.clone(), text)),
            None if value.is_null() => {}
            None if NAMED_SPECIAL_TOKENS.contains(&name.as_str()) => {
                return Err(TemplateError::InvalidField {
                    path: path.to_owned(),
                    field: name.clone(),
                    expected: "a string or an object with a `content` string",
                })
            }
            None => {}
        }
    }
    if let Some(serde_json::Value::Object(extra)) = fields.get("extra_special_tokens") {
        for (name, value) in extra {
            let known = tokens.iter().any(|(defined, _)| defined == name);
            if let (Some(text), false) = (token_string(value), known) {
                tokens.push((name.clone(), text));
            }
        }
    }
    Ok(tokens)
}

/// A token of tokenizer_config.json: `"<bos>"` or `{"content": "<bos>", …}`.
fn token_string(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(text) => Some(text.clone()),
        object => object.get("content")?.as_str().map(str::to_owned),
    }
}

/// Replaces each placeholder id of `kind` in `ids` by `begin, placeholder × n, end`, where `n`
/// is the soft-token count of that item (in order). Fails when the prompt holds a different
/// number of placeholders than `soft_tokens` has entries.
pub fn expand_placeholders(
    ids: &[u32],
    kind: MediaKind,
    soft_tokens: &[usize],
    special: &SpecialTokens,
) -> Result<Vec<u32>> {
    let tokens = match kind {
        MediaKind::Image => special.image,
        MediaKind::Audio => special.audio,
    };
    let Some(tokens) = tokens else {
        if soft_tokens.is_empty() {
            return Ok(ids.to_vec());
        }
        return Err(TemplateError::NoMediaTokens { kind });
    };
    let found = ids.iter().filter(|&&id| id == tokens.placeholder).count();
    if found != soft_tokens.len() {
        return Err(TemplateError::MediaCount {
            kind,
            expected: soft_tokens.len(),
            found,
        });
    }
    let extra: usize = soft_tokens.iter().map(|n| n + 1).sum();
    let mut out = Vec::with_capacity(ids.len() + extra);
    let mut counts = soft_tokens.iter();
    for &id in ids {
        if id != tokens.placeholder {
            out.push(id);
            continue;
        }
        // The counts agree, so every placeholder has its entry.
        let n = counts.next().copied().unwrap_or(0);
        out.push(tokens.begin);
        out.extend(std::iter::repeat_n(tokens.placeholder, n));
        out.push(tokens.end);
    }
    Ok(out)
}
