//! Gemma 4 E4B on MLX: the model, knowing nothing of prompts, chats or windows.
