//! The checkpoint's tokenizer (`tokenizer.json`) and its special token ids.
//!
//! Special ids are always read from the checkpoint (config.json, generation_config.json,
//! tokenizer.json), never written in code: test checkpoints use small vocabularies whose
//! ids differ from the real Gemma 4 ones.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::checkpoint::{
    CONFIG_FILE, GENERATION_CONFIG_FILE, TOKENIZER_CONFIG_FILE, TOKENIZER_FILE,
};

/// Text of the turn-open marker (`<|turn>user\n…`).
pub const TURN_OPEN: &str = "<|turn>";
/// Text of the turn-close marker; the usual end of an answer.
pub const TURN_CLOSE: &str = "<turn|>";
/// Text of the marker that switches thinking on inside the system turn.
pub const THINK: &str = "<|think|>";
/// Text of the marker that opens the reasoning channel (`<|channel>thought\n…`).
pub const CHANNEL_OPEN: &str = "<|channel>";
/// Text of the marker that closes the reasoning channel.
pub const CHANNEL_CLOSE: &str = "<channel|>";

/// Everything that can go wrong loading or using a tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A checkpoint file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file of the checkpoint is not valid JSON.
    #[error("{path} is not valid JSON: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// `tokenizer.json` parsed as JSON but is not a tokenizer the `tokenizers` crate can load.
    #[error("{path} is not a valid tokenizer: {source}")]
    Load {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: tokenizers::Error,
    },
    /// A required field is absent from a checkpoint file.
    #[error("{path} has no `{field}`")]
    MissingField {
        /// The file.
        path: PathBuf,
        /// The field, dotted for nested ones.
        field: String,
    },
    /// A field has the wrong type or an impossible value.
    #[error("{path}: `{field}` must be {expected}, found {found}")]
    InvalidField {
        /// The file.
        path: PathBuf,
        /// The field, dotted for nested ones.
        field: String,
        /// What was expected, in words.
        expected: &'static str,
        /// What was found.
        found: String,
    },
    /// A control token the chat format needs is not in the vocabulary.
    #[error("{path} has no token {token:?}, which the Gemma 4 chat format needs")]
    MissingToken {
        /// The tokenizer file.
        path: PathBuf,
        /// The token text.
        token: &'static str,
    },
    /// A config names a token id the tokenizer does not know.
    #[error("{path}: `{field}` is {id}, which is not in the tokenizer's vocabulary")]
    UnknownId {
        /// The config file.
        path: PathBuf,
        /// The field naming the id.
        field: String,
        /// The id.
        id: u32,
    },
    /// tokenizer_config.json names a token text the chat template writes that disagrees with
    /// the vocabulary or with config.json: prompts would silently start with the wrong token.
    #[error("{path}: `{field}` is {token:?}, {problem}")]
    TokenMismatch {
        /// tokenizer_config.json.
        path: PathBuf,
        /// The field, e.g. `bos_token`.
        field: &'static str,
        /// Its text.
        token: String,
        /// What is wrong, in words.
        problem: String,
    },
    /// Encoding text failed.
    #[error("cannot encode the prompt: {0}")]
    Encode(#[source] tokenizers::Error),
    /// Decoding ids failed.
    #[error("cannot decode tokens: {0}")]
    Decode(#[source] tokenizers::Error),
}

/// Result of this module.
pub type Result<T, E = TokenizerError> = std::result::Result<T, E>;

/// A loaded `tokenizer.json`.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
    /// Each special token's id → the ids of its text read as ordinary text, for control-token
    /// text that a person wrote (see [`Tokenizer::encode_marked`]).
    literal: HashMap<u32, Vec<u32>>,
    /// First characters of the special tokens: text without any of them holds none.
    special_starts: Vec<char>,
}

/// Brackets a special token id inside rendered text: Unicode noncharacters, which no text a
/// person sends may carry (they are replaced before marking).
const MARK_OPEN: char = '\u{FDD0}';
const MARK_CLOSE: char = '\u{FDD1}';
/// Brackets the index of an id sequence spliced verbatim into rendered text (see
/// [`Tokenizer::encode_spliced`]); noncharacters too, so no text can forge one.
const SPLICE_OPEN: char = '\u{FDD2}';
const SPLICE_CLOSE: char = '\u{FDD3}';

/// The mark that [`Tokenizer::encode_spliced`] replaces with its `k`-th id sequence.
pub(crate) fn splice_mark(k: usize) -> String {
    format!("{SPLICE_OPEN}{k}{SPLICE_CLOSE}")
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("path", &self.path)
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

impl Tokenizer {
    /// Loads `tokenizer.json` from a checkpoint folder.
    pub fn load(dir: &Path) -> Result<Self> {
        Self::from_file(&dir.join(TOKENIZER_FILE))
    }

    /// Loads a tokenizer from a `tokenizer.json` file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|source| TokenizerError::Io {
            path: path.to_owned(),
            source,
        })?;
        // Parse once as plain JSON first so a truncated file reads as "not JSON", not as a
        // confusing serde error from deep inside the tokenizers crate.
        serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).map_err(|source| {
            TokenizerError::Json {
                path: path.to_owned(),
                source,
            }
        })?;
        let inner =
            tokenizers::Tokenizer::from_bytes(&bytes).map_err(|source| TokenizerError::Load {
                path: path.to_owned(),
                source,
            })?;
        Ok(Self::from_tokenizer(inner, path))
    }

    /// Wraps an already built tokenizer; `origin` names it in error messages.
    pub fn from_tokenizer(mut inner: tokenizers::Tokenizer, origin: impl Into<PathBuf>) -> Self {
        let specials: Vec<(u32, String)> = inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, token)| token.special)
            .map(|(id, token)| (id, token.content))
            .collect();
        // With this switch on, special tokens' texts go through the model like any other text.
        inner.set_encode_special_tokens(true);
        let mut literal = HashMap::with_capacity(specials.len());
        for (id, content) in &specials {
            let whole = inner.encode_fast(content.as_str(), false).ok();
            let ids = whole.map(|e| e.get_ids().to_vec());
            // Should the vocabulary merge the text back into a special id, spell it by characters.
            let ids = match ids {
                Some(ids) if !ids.iter().any(|i| specials.iter().any(|(s, _)| s == i)) => ids,
                _ => content
                    .chars()
                    .flat_map(|c| {
                        let text = c.to_string();
                        let e = inner.encode_fast(text.as_str(), false).ok();
                        e.map(|e| e.get_ids().to_vec()).unwrap_or_default()
                    })
                    .collect(),
            };
            literal.insert(*id, ids);
        }
        inner.set_encode_special_tokens(false);
        let mut special_starts: Vec<char> = specials
            .iter()
            .filter_map(|(_, content)| content.chars().next())
            .collect();
        special_starts.sort_unstable();
        special_starts.dedup();
        Self {
            inner,
            path: origin.into(),
            literal,
            special_starts,
        }
    }

    /// Where this tokenizer came from (used in error messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Encodes a rendered prompt. Adds nothing: the chat template writes `<bos>` itself.
    /// Control tokens written in the text (`<|turn>`, `<|image|>`, …) become their ids.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode_fast(text, false)
            .map_err(TokenizerError::Encode)?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Marks every special token written in `text` (as this tokenizer would split it) so that
    /// [`Self::encode_marked`] encodes it as text, not as a control id. Tokens in `keep` stay
    /// control tokens. Unicode noncharacters in `text` become U+FFFD.
    pub fn mark_special_text<'t>(&self, text: &'t str, keep: &[u32]) -> Result<Cow<'t, str>> {
        let is_mark = |c: char| ('\u{FDD0}'..='\u{FDEF}').contains(&c);
        let text: Cow<'t, str> = if text.contains(is_mark) {
            Cow::Owned(text.replace(is_mark, "\u{FFFD}"))
        } else {
            Cow::Borrowed(text)
        };
        if !text.contains(|c| self.special_starts.contains(&c)) {
            return Ok(text);
        }
        // `encode` (not `encode_fast`) keeps byte offsets into `text`.
        let encoding = self
            .inner
            .encode(text.as_ref(), false)
            .map_err(TokenizerError::Encode)?;
        let spans: Vec<(u32, (usize, usize))> = encoding
            .get_ids()
            .iter()
            .zip(encoding.get_offsets())
            .filter(|(id, _)| self.literal.contains_key(id) && !keep.contains(id))
            .map(|(id, offsets)| (*id, *offsets))
            .collect();
        if spans.is_empty() {
            return Ok(text);
        }
        let mut marked = String::with_capacity(text.len() + spans.len() * 8);
        let mut at = 0;
        for (id, (start, end)) in spans {
            // Only a span that is exactly the token's text is replaced.
            let exact = self.inner.id_to_token(id);
            if start < at || text.get(start..end) != exact.as_deref() {
                continue;
            }
            marked.push_str(&text[at..start]);
            marked.push(MARK_OPEN);
            marked.push_str(&id.to_string());
            marked.push(MARK_CLOSE);
            at = end;
        }
        marked.push_str(&text[at..]);
        Ok(Cow::Owned(marked))
    }

    /// Encodes a rendered prompt in which [`Self::mark_special_text`] marked the control-token
    /// text a person wrote: each mark becomes that text's ordinary ids; everything else is
    /// encoded as [`Self::encode`] does (which is what happens when nothing was marked).
    pub fn encode_marked(&self, text: &str) -> Result<Vec<u32>> {
        self.encode_spliced(text, &[])
    }

    /// [`Self::encode_marked`], where each [`splice_mark`]`(k)` in `text` stands for
    /// `spliced[k]`, written verbatim (the ids a model generated for an earlier answer, so that
    /// the follow-up's prompt holds exactly the tokens the cache holds).
    pub(crate) fn encode_spliced(&self, text: &str, spliced: &[Vec<u32>]) -> Result<Vec<u32>> {
        let is_open = |c: char| c == MARK_OPEN || c == SPLICE_OPEN;
        if !text.contains(is_open) {
            return self.encode(text);
        }
        let mut ids = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find(is_open) {
            let opener = if rest[open..].starts_with(MARK_OPEN) {
                MARK_OPEN
            } else {
                SPLICE_OPEN
            };
            let after = &rest[open + opener.len_utf8()..];
            let closer = if opener == MARK_OPEN {
                MARK_CLOSE
            } else {
                SPLICE_CLOSE
            };
            let marked = after.find(closer).and_then(|close| {
                let n: usize = after[..close].parse().ok()?;
                let found = if opener == MARK_OPEN {
                    self.literal.get(&u32::try_from(n).ok()?)?
                } else {
                    spliced.get(n)?
                };
                Some((found, close))
            });
            let Some((found, close)) = marked else {
                // Not one of ours (it cannot be: noncharacters were replaced); keep it as text.
                ids.extend(self.encode(&rest[..open + opener.len_utf8()])?);
                rest = after;
                continue;
            };
            if open > 0 {
                ids.extend(self.encode(&rest[..open])?);
            }
            ids.extend_from_slice(found);
            rest = &after[close + closer.len_utf8()..];
        }
        if !rest.is_empty() {
            ids.extend(self.encode(rest)?);
        }
        Ok(ids)
    }

    /// How many tokens `text` takes as a message's text: control-token text a person wrote
    /// counts as the ordinary text it is (as [`crate::template::ChatTemplate::prompt_ids`]
    /// encodes it), without the turn markers around it.
    pub fn count_text(&self, text: &str) -> Result<usize> {
        Ok(self
            .encode_marked(&self.mark_special_text(text, &[])?)?
            .len())
    }

    /// Whether `id` is a special (control) token: `<bos>`, `<|turn>`, `<|image|>`, …
    pub fn is_special(&self, id: u32) -> bool {
        self.literal.contains_key(&id)
    }

    /// Decodes ids to text; `skip_special` drops control tokens (`<bos>`, `<|turn>`, …).
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special)
            .map_err(TokenizerError::Decode)
    }

    /// The id of a token given by its text, added tokens included.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The text of a token id.
    pub fn token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Number of ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    fn require_token(&self, token: &'static str) -> Result<u32> {
        self.token_id(token)
            .ok_or_else(|| TokenizerError::MissingToken {
                path: self.path.clone(),
                token,
            })
    }
}

/// Ids of one media kind: the single placeholder the template writes, and the begin/end
/// markers the engine wraps around the expanded soft tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MediaTokens {
    /// The soft-token placeholder (`<|image|>`), repeated once per soft token after expansion.
    pub placeholder: u32,
    /// Begin marker (`<|image>`).
    pub begin: u32,
    /// End marker (`<image|>`).
    pub end: u32,
}

/// The special ids of one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Start of every prompt.
    pub bos: u32,
    /// Padding, if the config names one.
    pub pad: Option<u32>,
    /// Ids that end generation (generation_config.json `eos_token_id`).
    pub eos: BTreeSet<u32>,
    /// Image ids, if the checkpoint takes images.
    pub image: Option<MediaTokens>,
    /// Audio ids, if the checkpoint takes audio.
    pub audio: Option<MediaTokens>,
    /// `<|turn>`.
    pub turn_open: u32,
    /// `<turn|>`.
    pub turn_close: u32,
    /// `<|think|>`, if the vocabulary has it.
    pub think: Option<u32>,
    /// `<|channel>`, if the vocabulary has it.
    pub channel_open: Option<u32>,
    /// `<channel|>`, if the vocabulary has it.
    pub channel_close: Option<u32>,
}

impl SpecialTokens {
    /// Reads the special ids of the checkpoint in `dir`: `config.json` (required),
    /// `generation_config.json` (optional; stop ids fall back to config.json's `eos_token_id`)
    /// and the turn/thinking markers looked up by text in `tokenizer`.
    ///
    /// When `tokenizer_config.json` exists, its `bos_token` (the text the chat template writes
    /// first) must be the vocabulary's token for config.json's `bos_token_id`.
    pub fn load(dir: &Path, tokenizer: &Tokenizer) -> Result<Self> {
        let config_path = dir.join(CONFIG_FILE);
        let config = read_json(&config_path)?;
        let generation_path = dir.join(GENERATION_CONFIG_FILE);
        let generation = if generation_path.exists() {
            Some(read_json(&generation_path)?)
        } else {
            None
        };
        let specials = Self::from_configs(
            &config_path,
            &config,
            generation.as_ref().map(|g| (generation_path.as_path(), g)),
            tokenizer,
        )?;
        let tokenizer_config = dir.join(TOKENIZER_CONFIG_FILE);
        if tokenizer_config.exists() {
            check_bos_text(&tokenizer_config, specials.bos, tokenizer)?;
        }
        Ok(specials)
    }

    /// Builds the ids from already parsed config files; paths name them in errors.
    pub fn from_configs(
        config_path: &Path,
        config: &Value,
        generation: Option<(&Path, &Value)>,
        tokenizer: &Tokenizer,
    ) -> Result<Self> {
        let ids = ConfigIds {
            path: config_path,
            json: config,
            tokenizer,
        };
        let bos = ids
            .get("bos_token_id")?
            .ok_or_else(|| TokenizerError::MissingField {
                path: config_path.to_owned(),
                field: "bos_token_id".into(),
            })?;
        let pad = ids.get("pad_token_id")?;

        let from_generation = match generation {
            Some((path, json)) => eos_ids(path, json, tokenizer)?,
            None => None,
        };
        let eos = match from_generation {
            Some(eos) => eos,
            None => eos_ids(config_path, config, tokenizer)?.ok_or_else(|| {
                TokenizerError::MissingField {
                    path: generation
                        .map_or_else(|| config_path.to_owned(), |(path, _)| path.to_owned()),
                    field: "eos_token_id".into(),
                }
            })?,
        };

        let image = ids.media("image_token_id", "boi_token_id", &["eoi_token_id"])?;
        let audio = ids.media(
            "audio_token_id",
            "boa_token_id",
            &["eoa_token_id", "eoa_token_index"],
        )?;

        Ok(Self {
            bos,
            pad,
            eos,
            image,
            audio,
            turn_open: tokenizer.require_token(TURN_OPEN)?,
            turn_close: tokenizer.require_token(TURN_CLOSE)?,
            think: tokenizer.token_id(THINK),
            channel_open: tokenizer.token_id(CHANNEL_OPEN),
            channel_close: tokenizer.token_id(CHANNEL_CLOSE),
        })
    }

    /// Whether generation must stop after this id.
    pub fn is_stop(&self, id: u32) -> bool {
        self.eos.contains(&id)
    }
}

/// `bos_token` of tokenizer_config.json (a string or `{"content": …}`), when present, must be
/// one token of the vocabulary, and the one config.json names.
fn check_bos_text(path: &Path, bos: u32, tokenizer: &Tokenizer) -> Result<()> {
    let json = read_json(path)?;
    let text = match json.get("bos_token") {
        Some(Value::String(text)) => text,
        Some(value) => match value.get("content").and_then(Value::as_str) {
            Some(text) => text,
            None => return Ok(()), // a malformed field is the template loader's to report
        },
        None => return Ok(()),
    };
    let mismatch = |problem: String| TokenizerError::TokenMismatch {
        path: path.to_owned(),
        field: "bos_token",
        token: text.to_owned(),
        problem,
    };
    match tokenizer.token_id(text) {
        None => Err(mismatch(format!(
            "which is not a token of {}",
            tokenizer.path().display()
        ))),
        Some(id) if id != bos => Err(mismatch(format!(
            "token {id}, but config.json's bos_token_id is {bos}"
        ))),
        Some(_) => Ok(()),
    }
}

/// Reads and parses a JSON file, naming it in errors.
pub(crate) fn read_json(path: &Path) -> Result<Value> {
    let bytes = std::fs::read(path).map_err(|source| TokenizerError::Io {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|source| TokenizerError::Json {
        path: path.to_owned(),
        source,
    })
}

/// Id fields of config.json: top level first, then `text_config` (where some exports keep
/// bos/pad/eos), each checked against the tokenizer.
struct ConfigIds<'a> {
    path: &'a Path,
    json: &'a Value,
    tokenizer: &'a Tokenizer,
}

impl ConfigIds<'_> {
    fn get(&self, field: &str) -> Result<Option<u32>> {
        let (value, name) = match self.json.get(field) {
            Some(value) if !value.is_null() => (value, field.to_owned()),
            _ => match self.json.get("text_config").and_then(|t| t.get(field)) {
                Some(value) if !value.is_null() => (value, format!("text_config.{field}")),
                _ => return Ok(None),
            },
        };
        let id = token_id(self.path, &name, value)?;
        check_known(self.path, &name, id, self.tokenizer)?;
        Ok(Some(id))
    }

    /// A media kind is present when its placeholder id is; then begin and end are required.
    fn media(&self, placeholder: &str, begin: &str, end: &[&str]) -> Result<Option<MediaTokens>> {
        let Some(placeholder) = self.get(placeholder)? else {
            return Ok(None);
        };
        let require = |field: &str| -> Result<u32> {
            self.get(field)?
                .ok_or_else(|| TokenizerError::MissingField {
                    path: self.path.to_owned(),
                    field: field.to_owned(),
                })
        };
        let begin = require(begin)?;
        let mut end_id = None;
        for field in end {
            if let Some(id) = self.get(field)? {
                end_id = Some(id);
                break;
            }
        }
        let end = match end_id {
            Some(id) => id,
            None => require(end[0])?,
        };
        Ok(Some(MediaTokens {
            placeholder,
            begin,
            end,
        }))
    }
}

/// `eos_token_id` as an int or a list of ints; `None` when absent or null.
fn eos_ids(path: &Path, json: &Value, tokenizer: &Tokenizer) -> Result<Option<BTreeSet<u32>>> {
    let value = match json.get("eos_token_id") {
        Some(value) if !value.is_null() => value,
        _ => return Ok(None),
    };
    let mut ids = BTreeSet::new();
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let field = format!("eos_token_id[{i}]");
                let id = token_id(path, &field, item)?;
                check_known(path, &field, id, tokenizer)?;
                ids.insert(id);
            }
        }
        single => {
            let id = token_id(path, "eos_token_id", single)?;
            check_known(path, "eos_token_id", id, tokenizer)?;
            ids.insert(id);
        }
    }
    if ids.is_empty() {
        return Err(TokenizerError::InvalidField {
            path: path.to_owned(),
            field: "eos_token_id".into(),
            expected: "an id or a non-empty list of ids",
            found: "[]".into(),
        });
    }
    Ok(Some(ids))
}

fn token_id(path: &Path, field: &str, value: &Value) -> Result<u32> {
    value
        .as_u64()
        .and_then(|id| u32::try_from(id).ok())
        .ok_or_else(|| TokenizerError::InvalidField {
            path: path.to_owned(),
            field: field.to_owned(),
            expected: "a token id (a non-negative integer)",
            found: value.to_string(),
        })
}

fn check_known(path: &Path, field: &str, id: u32, tokenizer: &Tokenizer) -> Result<()> {
    if tokenizer.token(id).is_none() {
        return Err(TokenizerError::UnknownId {
            path: path.to_owned(),
            field: field.to_owned(),
            id,
        });
    }
    Ok(())
}
