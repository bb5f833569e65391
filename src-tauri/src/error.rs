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
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::CreateModelsDir { .. } => ErrorKind::Io,
        }
    }
}

/// Broad class of an error, for the UI to choose how to present it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub enum ErrorKind {
    /// A file or folder could not be read or written.
    Io,
}

/// An error as the UI receives it: a rejected `invoke` carries this object.
#[derive(Debug, Serialize, TS)]
pub struct CommandError {
    pub kind: ErrorKind,
    pub message: String,
}

impl From<&Error> for CommandError {
    fn from(err: &Error) -> Self {
        Self {
            kind: err.kind(),
            message: err.to_string(),
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
}
