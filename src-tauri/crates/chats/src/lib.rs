//! Conversations, messages and attachments on disk. Knows nothing of the model.
