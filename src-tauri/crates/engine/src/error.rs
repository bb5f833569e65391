//! The engine's errors: a generation's ([`GenerateError`], from the token stream up to the
//! generator) and the engine's ([`EngineError`], what the engine thread and the loaded model
//! report, a generation's included). Below every module that can fail, so none imports upward.

/// Errors of a generation.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    Model(#[from] gemma::Error),
    #[error(transparent)]
    Sampler(#[from] crate::sampler::SamplerError),
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    #[error("MLX: {0}")]
    Mlx(#[from] mlx_rs::error::Exception),
    #[error("the prompt has {prompt} tokens, but the context window holds {context}")]
    PromptTooLong { prompt: usize, context: usize },
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// A decode step shared by several answers failed (each of them ends with this).
    #[error("a decode step shared with other answers failed: {0}")]
    Batch(String),
    #[error("reading a sampled token: {0}")]
    Token(String),
    #[error("the prompt has placeholders for {found} {kind} item(s) (or rows) but {expected} were given")]
    MediaCount {
        kind: crate::template::MediaKind,
        expected: usize,
        found: usize,
    },
    #[error("{0}")]
    Image(String),
    #[error("{0}")]
    Audio(String),
    /// The answer's grammar cannot be enforced (refused before anything is generated), or
    /// its matcher failed.
    #[error(transparent)]
    Constraint(#[from] crate::constraint::ConstraintError),
}

/// Result of a generation's steps.
pub type Result<T, E = GenerateError> = std::result::Result<T, E>;

/// Errors the engine reports (also inside events).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("no model is loaded")]
    NoModel,
    #[error("the engine thread has stopped")]
    Stopped,
    #[error(transparent)]
    Model(#[from] gemma::Error),
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    #[error(transparent)]
    Template(#[from] crate::template::TemplateError),
    #[error(transparent)]
    Generate(#[from] GenerateError),
    #[error(transparent)]
    Image(#[from] crate::image::ImageError),
    /// The last message alone (with the system prompt) does not fit the context window: a new
    /// chat would not help, only a shorter message or a larger window.
    #[error("the message alone is {message} tokens, but the context window holds {context}")]
    MessageTooLong { message: usize, context: usize },
}
