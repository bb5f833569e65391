//! Constrained decoding: a grammar (a JSON schema, any JSON object, or a Lark grammar) turned
//! into a mask of the ids allowed next, applied to the logits before every draw.
//!
//! [`Grammars`] is built once per loaded model: the token trie llguidance walks (every id's
//! bytes; control ids as named special tokens, so a Lark grammar can write `<|tool_call>`),
//! with the checkpoint's stop ids as its end. [`Grammars::compile`] turns one request's
//! [`Grammar`] into a [`Constraint`], refusing a schema it cannot enforce before anything is
//! generated. The stream then masks each step's logits with [`Constraint::mask`] and feeds the
//! drawn id back with [`Constraint::consume`]; when the grammar is complete only the stop ids
//! are allowed, so the answer ends as a turn ends.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory, TokenParser};
use mlx_rs::ops::select;
use mlx_rs::Array;
use serde_json::Value;
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::tokenizer::{SpecialTokens, Tokenizer};

/// What an answer must follow.
#[derive(Debug, Clone, PartialEq)]
pub enum Grammar {
    /// Any JSON object (OpenAI's `response_format: {"type": "json_object"}`).
    JsonObject,
    /// A value valid under this JSON schema.
    JsonSchema(Value),
    /// A grammar in llguidance's Lark syntax; `<|tool_call>` and other control tokens of the
    /// vocabulary may be named in it.
    Lark(String),
}

/// Why a grammar cannot be enforced.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConstraintError {
    /// The grammar or schema is invalid, or uses what llguidance does not support.
    #[error("{0}")]
    Invalid(String),
    /// The vocabulary could not be read into a token trie.
    #[error("the tokenizer cannot be used for constrained output: {0}")]
    Tokenizer(String),
    /// The matcher refused an id or failed while stepping.
    #[error("constrained output failed: {0}")]
    Matcher(String),
}

/// The token trie and grammar compiler of one loaded model.
pub struct Grammars {
    factory: ParserFactory,
    vocab: usize,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammars")
            .field("vocab", &self.vocab)
            .finish()
    }
}

/// Whitespace and separators of constrained JSON: none between tokens, `,` and `:`. A
/// grammar that allows free whitespace lets a model pad forever; this one always ends.
fn compact_json_options() -> Value {
    serde_json::json!({
        "whitespace_flexible": false,
        "item_separator": ",",
        "key_separator": ":",
    })
}

impl Grammars {
    /// The trie of `tokenizer`'s vocabulary, padded to the model's `vocab` rows (ids past the
    /// tokenizer's are never allowed), ending at `specials.eos` (`<turn|>` first).
    pub fn new(
        tokenizer: Arc<Tokenizer>,
        specials: &SpecialTokens,
        vocab: usize,
    ) -> Result<Self, ConstraintError> {
        let inner = tokenizer.inner();
        let known = inner.get_vocab_size(true);
        if known > vocab {
            return Err(ConstraintError::Tokenizer(format!(
                "the tokenizer has {known} ids but the model only {vocab}"
            )));
        }
        let words: Vec<Vec<u8>> = (0..vocab as u32)
            .map(|id| match inner.id_to_token(id) {
                Some(piece) if tokenizer.is_special(id) => special(&piece),
                Some(piece) => match piece_bytes(&piece) {
                    // An id with no bytes would fit anywhere: make it one nobody can write.
                    bytes if bytes.is_empty() => special(&format!("<[{id}]>")),
                    bytes => bytes,
                },
                // A row of the model without a token.
                None => special(&format!("<[{id}]>")),
            })
            .collect();
        let mut eos: Vec<TokenId> = Vec::new();
        if specials.eos.contains(&specials.turn_close) {
            eos.push(specials.turn_close);
        }
        eos.extend(specials.eos.iter().filter(|&&e| e != specials.turn_close));
        let Some(&first) = eos.first() else {
            return Err(ConstraintError::Tokenizer(
                "the checkpoint names no stop id".into(),
            ));
        };
        let mut info = TokRxInfo::new(vocab as u32, first);
        info.tok_bos = Some(specials.bos);
        info.tok_pad = specials.pad;
        info.tok_end_of_turn = Some(specials.turn_close);
        let mut trie = TokTrie::from(&info, &words);
        if eos.len() > 1 {
            trie = trie.with_eos_tokens(&eos);
        }
        let env: TokEnv = Arc::new(TrieEnv { trie, tokenizer });
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| ConstraintError::Tokenizer(e.to_string()))?;
        factory.quiet();
        Ok(Self { factory, vocab })
    }

    /// Compiles `grammar` for one answer. An invalid or unsupported schema or grammar is
    /// refused here, with llguidance's reason.
    pub fn compile(&self, grammar: &Grammar) -> Result<Constraint, ConstraintError> {
        let top = match grammar {
            Grammar::JsonObject => {
                let mut schema = serde_json::json!({ "type": "object" });
                schema["x-guidance"] = compact_json_options();
                TopLevelGrammar::from_json_schema(schema)
            }
            Grammar::JsonSchema(schema) => {
                let Value::Object(map) = schema else {
                    return Err(ConstraintError::Invalid(
                        "a JSON schema must be an object".into(),
                    ));
                };
                let mut map = map.clone();
                // Ours, not the client's: the options decide whether the answer can end.
                map.insert("x-guidance".into(), compact_json_options());
                TopLevelGrammar::from_json_schema(Value::Object(map))
            }
            Grammar::Lark(text) => {
                if text.trim().is_empty() {
                    return Err(ConstraintError::Invalid("the grammar is empty".into()));
                }
                TopLevelGrammar::from_lark(text.clone())
            }
        };
        let parser = self
            .factory
            .create_parser(top)
            .map_err(|e| ConstraintError::Invalid(e.to_string()))?;
        Ok(Constraint {
            matcher: Matcher::new(Ok(parser.clone())),
            parser,
            vocab: self.vocab,
        })
    }
}

/// A special token's trie entry: a marker byte no UTF-8 text holds, then its name.
fn special(name: &str) -> Vec<u8> {
    let mut bytes = vec![TokTrie::SPECIAL_TOKEN_MARKER];
    bytes.extend_from_slice(name.as_bytes());
    bytes
}

/// The bytes a (non-special) vocabulary piece stands for: `<0xAB>` is the byte 0xAB (byte
/// fallback), `▁` is a space (Gemma's SentencePiece-style pieces).
fn piece_bytes(piece: &str) -> Vec<u8> {
    if piece.len() == 6 && piece.starts_with("<0x") && piece.ends_with('>') {
        if let Ok(byte) = u8::from_str_radix(&piece[3..5], 16) {
            return vec![byte];
        }
    }
    piece.replace('\u{2581}', " ").into_bytes()
}

/// The trie and the tokenizer, as llguidance asks for them.
struct TrieEnv {
    trie: TokTrie,
    tokenizer: Arc<Tokenizer>,
}

impl TokenizerEnv for TrieEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.tokenize_with_greedy_fallback(s, |text| {
            self.tokenizer
                .inner()
                .encode(text, false)
                .map(|e| e.get_ids().to_vec())
                .unwrap_or_default()
        })
    }
}

/// One answer's grammar state: which ids may come next.
pub struct Constraint {
    matcher: Matcher,
    /// The compiled grammar at its start (a [`Clone`] starts over).
    parser: TokenParser,
    vocab: usize,
}

impl Clone for Constraint {
    /// The same grammar, from its start.
    fn clone(&self) -> Self {
        Self {
            matcher: Matcher::new(Ok(self.parser.clone())),
            parser: self.parser.clone(),
            vocab: self.vocab,
        }
    }
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("vocab", &self.vocab)
            .field("stopped", &self.matcher.is_stopped())
            .finish()
    }
}

impl Constraint {
    /// Which ids may come next (`vocab` flags); once the grammar is complete, only the stop
    /// ids.
    pub fn allowed(&mut self) -> Result<Vec<bool>, ConstraintError> {
        let vob = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| ConstraintError::Matcher(e.to_string()))?;
        let mut allowed = vec![false; self.vocab];
        vob.iter_set_entries(|id| {
            if let Some(a) = allowed.get_mut(id) {
                *a = true;
            }
        });
        if !allowed.contains(&true) {
            return Err(ConstraintError::Matcher(
                "the grammar allows no id to come next".into(),
            ));
        }
        Ok(allowed)
    }

    /// `logits` (`[…, vocab]`) with every id the grammar does not allow next at −∞.
    pub fn mask(&mut self, logits: &Array) -> Result<Array, ConstraintError> {
        let allowed = self.allowed()?;
        let mlx = |e: mlx_rs::error::Exception| ConstraintError::Matcher(format!("MLX: {e}"));
        let mask = Array::from_slice(&allowed, &[self.vocab as i32]);
        let floor = Array::from_f32(f32::NEG_INFINITY)
            .as_dtype(logits.dtype())
            .map_err(mlx)?;
        select(&mask, logits, &floor).map_err(mlx)
    }

    /// Feeds the drawn id to the grammar. An id it does not allow is an error (the mask
    /// makes that impossible unless the caller skipped it).
    pub fn consume(&mut self, id: u32) -> Result<(), ConstraintError> {
        if self.matcher.is_stopped() {
            return Ok(());
        }
        self.matcher
            .consume_token(id)
            .map_err(|e| ConstraintError::Matcher(e.to_string()))
    }
}
