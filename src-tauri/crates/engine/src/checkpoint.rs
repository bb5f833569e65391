//! The files of a checkpoint folder that prompting reads (the weights are the model crate's).

/// The tokenizer.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// The model config, holding the media and bos/pad ids.
pub const CONFIG_FILE: &str = "config.json";
/// Generation defaults, holding the stop ids and sampling defaults.
pub const GENERATION_CONFIG_FILE: &str = "generation_config.json";
/// The chat template, preferred over tokenizer_config.json's `chat_template` string.
pub const TEMPLATE_FILE: &str = "chat_template.jinja";
/// Tokenizer settings: the token strings the template sees (`bos_token`, …).
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
