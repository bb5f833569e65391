//! Errors of the model crate.

use std::path::PathBuf;

/// Everything that can go wrong loading or running the model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file of the model folder could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A JSON file of the model folder is malformed or misses a field.
    #[error("{path} is not a valid Gemma 4 file: {message}")]
    Config { path: PathBuf, message: String },
    /// The folder holds a model this crate does not run.
    #[error("unsupported model: {0}")]
    Unsupported(String),
    /// A safetensors file is malformed (header, offsets, dtypes).
    #[error("{path}: {message}")]
    Safetensors { path: PathBuf, message: String },
    /// The checkpoint's tensors do not match what the config describes.
    #[error("the checkpoint's tensors do not match its config:\n{0}")]
    Tensors(String),
    /// An adapter folder is malformed or does not fit the loaded model (every problem, each
    /// naming its tensor).
    #[error("adapter {path}: {message}")]
    Adapter { path: PathBuf, message: String },
    /// Bad input to a forward pass (the caller's mistake, reported in words).
    #[error("{0}")]
    Input(String),
    /// MLX reported an error.
    #[error("MLX: {0}")]
    Mlx(#[from] mlx_rs::error::Exception),
}

/// Result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
