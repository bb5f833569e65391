//! Limits and sampling of one generation, as the caller sets them.

use crate::constraint::Grammar;
use crate::sampler::SamplerConfig;

/// Limits and sampling of one generation.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    pub sampler: SamplerConfig,
    pub max_tokens: usize,
    /// Positions the model may use in total (prompt + answer).
    pub context_window: usize,
    /// Prompt positions per prefill forward.
    pub prefill_chunk: usize,
    /// What the answer must follow (a JSON schema, any JSON object, a Lark grammar), enforced
    /// while sampling; `None` leaves the model free, at no cost. Compiled per answer by
    /// [`crate::loaded::LoadedModel::token_stream`]; an answer under one never speculates.
    pub constraint: Option<Grammar>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            sampler: SamplerConfig::default(),
            max_tokens: 1024,
            context_window: 32768,
            prefill_chunk: 512,
            constraint: None,
        }
    }
}
