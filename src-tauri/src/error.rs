//! The one error type commands return, and the `{ kind, message }` shape the UI receives.

use std::io;
use std::path::PathBuf;

use serde::{Serialize, Serializer};
use ts_rs::TS;

/// Everything a command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("could not create the models folder {}: {source}", path.display())]
    CreateModelsDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("no model is loaded yet: download one or choose its folder first")]
    NoModel,
    #[error("{0}")]
    ModelInvalid(String),
    #[error("a reply is still being written; stop it before sending another message")]
    Busy,
    #[error("{0}")]
    Invalid(String),
    #[error("{}", context_full_message(*needed, *window, *alone))]
    ContextFull {
        /// Tokens the prompt needs.
        needed: usize,
        /// Tokens the context window holds.
        window: usize,
        /// The message alone does not fit (a new chat would not help).
        alone: bool,
    },
    #[error(transparent)]
    Chats(#[from] chats::Error),
    #[error(transparent)]
    Image(#[from] engine::image::ImageError),
    #[error("{0}")]
    Engine(String),
    #[error("{0}")]
    Internal(String),
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::CreateModelsDir { .. } => ErrorKind::Io,
            Self::NoModel => ErrorKind::NoModel,
            Self::ModelInvalid(_) => ErrorKind::ModelInvalid,
            Self::Busy => ErrorKind::Busy,
            Self::Invalid(_) | Self::Image(_) => ErrorKind::InvalidInput,
            Self::ContextFull { .. } => ErrorKind::ContextFull,
            Self::Chats(chats::Error::NotFound { .. }) => ErrorKind::NotFound,
            Self::Chats(chats::Error::InvalidInput(_) | chats::Error::BadExport(_)) => {
                ErrorKind::InvalidInput
            }
            Self::Chats(_) => ErrorKind::Io,
            Self::Engine(_) | Self::Internal(_) => ErrorKind::Internal,
        }
    }
}

impl From<engine::error::EngineError> for Error {
    fn from(err: engine::error::EngineError) -> Self {
        use engine::error::{EngineError, GenerateError};
        match err {
            EngineError::NoModel => Self::NoModel,
            EngineError::Generate(GenerateError::PromptTooLong { prompt, context }) => {
                Self::ContextFull {
                    needed: prompt,
                    window: context,
                    alone: false,
                }
            }
            EngineError::MessageTooLong { message, context } => Self::ContextFull {
                needed: message,
                window: context,
                alone: true,
            },
            EngineError::Image(image) => Self::Image(image),
            other => Self::Engine(other.to_string()),
        }
    }
}

/// What the user reads when a prompt does not fit the context window: one sentence per case,
/// numbers grouped as people write them.
pub fn context_full_message(needed: usize, window: usize, alone: bool) -> String {
    let (needed, window) = (grouped(needed), grouped(window));
    if alone {
        format!(
            "This message is {needed} tokens on its own, and the context window holds {window}. \
             Shorten it, or raise the context length in Settings."
        )
    } else {
        format!(
            "This conversation needs {needed} tokens, and the context window holds {window}. \
             Start a new chat, or raise the context length in Settings."
        )
    }
}

/// `8379` as `8,379`.
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Broad class of an error, for the UI to choose how to present it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub enum ErrorKind {
    /// A file or folder could not be read or written.
    Io,
    /// The action needs a loaded model.
    NoModel,
    /// A model folder is not usable; the message says why in words.
    ModelInvalid,
    /// A reply is still being generated.
    Busy,
    /// A conversation, message or attachment does not exist (any more).
    NotFound,
    /// The input was refused: an unreadable image, an empty message, a bad setting.
    InvalidInput,
    /// The conversation no longer fits the context window.
    ContextFull,
    /// Something that should not happen; the message has the details.
    Internal,
}

/// An error as the UI receives it: a rejected `invoke` carries this object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
pub struct CommandError {
    pub kind: ErrorKind,
    pub message: String,
    /// For `contextFull`: the numbers, so the window can offer what helps.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub context: Option<ContextNeed>,
}

/// What did not fit the context window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct ContextNeed {
    /// Tokens the prompt needs.
    pub needed: u32,
    /// Tokens the context window holds.
    pub window: u32,
    /// The message alone does not fit: a new chat would not help.
    pub alone: bool,
}

impl From<&Error> for CommandError {
    fn from(err: &Error) -> Self {
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Self {
            kind: err.kind(),
            message: err.to_string(),
            context: match err {
                Error::ContextFull {
                    needed,
                    window,
                    alone,
                } => Some(ContextNeed {
                    needed: count(*needed),
                    window: count(*window),
                    alone: *alone,
                }),
                _ => None,
            },
        }
    }
}

impl Serialize for Error {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        CommandError::from(self).serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_as_kind_and_message() {
        let err = Error::CreateModelsDir {
            path: PathBuf::from("/data/models"),
            source: io::Error::from(io::ErrorKind::PermissionDenied),
        };
        let json = serde_json::to_value(&err).unwrap();
        assert_eq!(json["kind"], "io");
        let message = json["message"].as_str().unwrap();
        assert!(message.contains("/data/models"), "{message}");
        assert!(message.contains("permission denied"), "{message}");
    }

    #[test]
    fn a_prompt_longer_than_the_context_is_a_context_full_error_with_both_numbers() {
        let err = Error::from(engine::error::EngineError::Generate(
            engine::error::GenerateError::PromptTooLong {
                prompt: 9000,
                context: 8192,
            },
        ));
        assert_eq!(err.kind(), ErrorKind::ContextFull);
        let message = err.to_string();
        assert_eq!(
            message,
            "This conversation needs 9,000 tokens, and the context window holds 8,192. Start a \
             new chat, or raise the context length in Settings."
        );
        let alone = Error::from(engine::error::EngineError::MessageTooLong {
            message: 131_073,
            context: 131_072,
        });
        let json = serde_json::to_value(&alone).unwrap();
        assert_eq!(json["kind"], "contextFull");
        assert_eq!(
            json["context"],
            serde_json::json!({ "needed": 131073, "window": 131072, "alone": true })
        );
        assert!(json["message"]
            .as_str()
            .unwrap()
            .starts_with("This message is 131,073 tokens on its own"));
        assert!(serde_json::to_value(Error::NoModel)
            .unwrap()
            .get("context")
            .is_none());
    }

    /// What a person reads must not say a thing twice ("could not load: could not load…") nor
    /// speak in the code's words (`snake_case` names, Rust debug output), whichever layer the
    /// error came from.
    #[test]
    fn error_messages_say_each_thing_once_in_words() {
        use engine::error::{EngineError, GenerateError};
        use engine::image::ImageError;
        let io = || io::Error::from(io::ErrorKind::PermissionDenied);
        let sqlite = || rusqlite_busy();
        let broken_model = {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("config.json"), "{ not json").unwrap();
            let err = engine::loaded::LoadedModel::load(dir.path(), &Default::default())
                .err()
                .expect("a broken folder is refused");
            // As `ModelSetup::load` words it.
            Error::ModelInvalid(format!("gemma-4-e4b-it-4bit could not be loaded: {err}"))
        };
        let errors = vec![
            Error::CreateModelsDir {
                path: "/data/models".into(),
                source: io(),
            },
            Error::NoModel,
            Error::Busy,
            broken_model,
            Error::from(EngineError::NoModel),
            Error::from(EngineError::Generate(GenerateError::PromptTooLong {
                prompt: 9000,
                context: 8192,
            })),
            Error::from(EngineError::MessageTooLong {
                message: 9000,
                context: 8192,
            }),
            Error::from(EngineError::Generate(GenerateError::EmptyPrompt)),
            Error::from(EngineError::Generate(GenerateError::Image(
                "this model has no vision tower".into(),
            ))),
            Error::from(EngineError::Image(ImageError::Empty)),
            Error::from(EngineError::Image(ImageError::Corrupt {
                format: "PNG",
                detail: "unexpected end of file".into(),
            })),
            Error::from(ImageError::Unsupported {
                format: "HEIC".into(),
            }),
            Error::from(ImageError::TooLarge {
                width: 30000,
                height: 20000,
            }),
            Error::from(chats::Error::NotFound {
                what: "conversation",
                id: "0193f2c4-7d1e".into(),
            }),
            Error::from(chats::Error::Sqlite {
                op: "listing conversations",
                source: sqlite(),
            }),
            Error::from(chats::Error::InvalidInput(
                "the attachment is too large".into(),
            )),
            Error::from(chats::Error::BadExport("it is not JSON".into())),
            Error::from(chats::Error::NewerSchema {
                path: "/data/conversations.sqlite".into(),
                found: 9,
                supported: 4,
            }),
        ];
        for err in &errors {
            let message = CommandError::from(err).message;
            let words: Vec<String> = message
                .split(|c: char| !c.is_alphanumeric() && c != '\'' && c != '_' && c != '.')
                .filter(|w| !w.is_empty())
                .map(str::to_lowercase)
                .collect();
            let triples: Vec<&[String]> = words.windows(3).collect();
            for (i, triple) in triples.iter().enumerate() {
                assert!(
                    !triples[i + 1..].contains(triple),
                    "{message:?} says {triple:?} twice"
                );
            }
            for word in &words {
                let code_like = word.contains('_') && !word.ends_with(".json");
                assert!(!code_like, "{message:?} speaks in code: {word}");
            }
            // A path named once: not "/m: /m/config.json is …".
            let paths: Vec<&str> = message
                .split_whitespace()
                .filter(|w| w.contains('/'))
                .map(|w| w.trim_end_matches([':', ',', ';', '.']))
                .collect();
            for (i, path) in paths.iter().enumerate() {
                assert!(
                    !paths[i + 1..].iter().any(|later| later.starts_with(path)),
                    "{message:?} names {path} twice"
                );
            }
            for debug in ["Some(", "None", "Os {", "kind:", "Error {", "\\n"] {
                assert!(!message.contains(debug), "{message:?} shows {debug}");
            }
        }
    }

    /// A real SQLite error ("database is locked"), as a second connection meets it.
    fn rusqlite_busy() -> rusqlite::Error {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let a = rusqlite::Connection::open(&path).unwrap();
        a.execute_batch("CREATE TABLE t (x); BEGIN EXCLUSIVE; INSERT INTO t VALUES (1);")
            .unwrap();
        let b = rusqlite::Connection::open(&path).unwrap();
        b.busy_timeout(std::time::Duration::ZERO).unwrap();
        b.execute("INSERT INTO t VALUES (2)", [])
            .expect_err("the first connection holds the lock")
    }

    #[test]
    fn missing_conversations_are_not_found() {
        let err = Error::from(chats::Error::NotFound {
            what: "conversation",
            id: "x".into(),
        });
        assert_eq!(err.kind(), ErrorKind::NotFound);
    }
}
