//! Prompt rendering, tokenization and special ids against the Python reference.
//!
//! `tests/data/tiny/` holds the text files of a tiny checkpoint written by
//! `tests/fixtures/make_checkpoint.py`, and `tests/data/template_cases.json` what
//! transformers' `apply_chat_template` and mlx-vlm's processor make of each conversation
//! (regenerate both with `tests/data/make_template_cases.py`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use engine::sampler::SamplerConfig;
use engine::template::{
    expand_placeholders, ChatTemplate, MediaKind, Message, Part, RenderOptions, Role, TemplateError,
};
use engine::tokenizer::{SpecialTokens, Tokenizer, TokenizerError};
use serde_json::{json, Value};

fn tiny() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny")
}

fn cases() -> Result<Vec<Value>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/template_cases.json");
    let data: Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    Ok(data["cases"].as_array().context("no cases")?.clone())
}

/// The engine's messages for an HF-style message list.
fn messages(json: &Value) -> Result<Vec<Message>> {
    let mut out = Vec::new();
    for message in json.as_array().context("messages must be a list")? {
        let role = match message["role"].as_str() {
            Some("system") => Role::System,
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            other => bail!("unexpected role {other:?}"),
        };
        let content = match &message["content"] {
            Value::String(text) => vec![Part::Text { text: text.clone() }],
            Value::Array(items) => items
                .iter()
                .map(|item| match item["type"].as_str() {
                    Some("image") => Ok(Part::Image),
                    Some("audio") => Ok(Part::Audio),
                    Some("text") => Ok(Part::Text {
                        text: item["text"].as_str().context("text")?.to_owned(),
                    }),
                    other => bail!("unexpected part {other:?}"),
                })
                .collect::<Result<_>>()?,
            other => bail!("unexpected content {other}"),
        };
        out.push(Message::new(role, content));
    }
    Ok(out)
}

fn ids(json: &Value) -> Vec<u32> {
    json.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_u64())
                .map(|v| v as u32)
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn prompts_tokens_and_image_expansion_match_the_reference() -> Result<()> {
    let template = ChatTemplate::load(&tiny())?;
    let tokenizer = Tokenizer::load(&tiny())?;
    let special = SpecialTokens::load(&tiny(), &tokenizer)?;
    let cases = cases()?;
    assert!(cases.len() >= 6);
    for case in &cases {
        let name = case["name"].as_str().unwrap_or("?");
        let msgs = messages(&case["messages"])?;
        // The template sees exactly what the reference was given.
        assert_eq!(
            serde_json::to_value(&msgs)?,
            case["messages"],
            "{name}: message JSON"
        );
        let options = RenderOptions {
            add_generation_prompt: case["add_generation_prompt"].as_bool() == Some(true),
            enable_thinking: case["enable_thinking"].as_bool() == Some(true),
        };
        let prompt = template.render(&msgs, options)?;
        assert_eq!(
            prompt,
            case["prompt"].as_str().unwrap_or_default(),
            "{name}: prompt"
        );

        let prompt_ids = tokenizer.encode(&prompt)?;
        assert_eq!(prompt_ids, ids(&case["prompt_ids"]), "{name}: prompt ids");

        if let Some(counts) = case.get("soft_tokens_per_image") {
            let counts: Vec<usize> = ids(counts).into_iter().map(|n| n as usize).collect();
            let expanded = expand_placeholders(&prompt_ids, MediaKind::Image, &counts, &special)?;
            assert_eq!(expanded, ids(&case["input_ids"]), "{name}: expanded ids");
        }
    }
    Ok(())
}

#[test]
fn thinking_writes_the_think_marker_in_a_system_turn() -> Result<()> {
    let template = ChatTemplate::load(&tiny())?;
    let chat = [Message::text(Role::User, "Hi")];
    let on = RenderOptions {
        add_generation_prompt: true,
        enable_thinking: true,
    };
    let off = RenderOptions {
        enable_thinking: false,
        ..on
    };
    assert_eq!(
        template.render(&chat, on)?,
        "<bos><|turn>system\n<|think|><turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n"
    );
    assert_eq!(
        template.render(&chat, off)?,
        "<bos><|turn>user\nHi<turn|>\n<|turn>model\n"
    );
    Ok(())
}

#[test]
fn special_ids_come_from_the_checkpoint_files() -> Result<()> {
    let tokenizer = Tokenizer::load(&tiny())?;
    let special = SpecialTokens::load(&tiny(), &tokenizer)?;
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(tiny().join("config.json"))?)?;
    let generation: Value = serde_json::from_str(&std::fs::read_to_string(
        tiny().join("generation_config.json"),
    )?)?;

    assert_eq!(
        Some(u64::from(special.bos)),
        config["bos_token_id"].as_u64()
    );
    assert_eq!(special.pad, Some(0));
    let eos: Vec<u32> = special.eos.iter().copied().collect();
    assert_eq!(eos, ids(&generation["eos_token_id"]));
    let image = special.image.context("image ids")?;
    assert_eq!(
        Some(u64::from(image.placeholder)),
        config["image_token_id"].as_u64()
    );
    assert_eq!(
        Some(u64::from(image.begin)),
        config["boi_token_id"].as_u64()
    );
    assert_eq!(Some(u64::from(image.end)), config["eoi_token_id"].as_u64());
    let audio = special.audio.context("audio ids")?;
    assert_eq!(Some(u64::from(audio.end)), config["eoa_token_id"].as_u64());

    assert_eq!(
        tokenizer.token(special.turn_open).as_deref(),
        Some("<|turn>")
    );
    assert_eq!(
        tokenizer.token(special.turn_close).as_deref(),
        Some("<turn|>")
    );
    assert_eq!(
        tokenizer.token(special.think.context("think")?).as_deref(),
        Some("<|think|>")
    );
    assert_eq!(
        special
            .channel_open
            .and_then(|id| tokenizer.token(id))
            .as_deref(),
        Some("<|channel>")
    );
    assert_eq!(
        special
            .channel_close
            .and_then(|id| tokenizer.token(id))
            .as_deref(),
        Some("<channel|>")
    );
    // The fixture's ids differ from Gemma 4's real ones (bos 2, <turn|> 106), so nothing
    // above can pass by a constant in code.
    assert_ne!(special.bos, 2);
    assert_ne!(special.turn_close, 106);
    assert!(special.is_stop(special.turn_close));
    assert!(!special.is_stop(special.turn_open));
    Ok(())
}

#[test]
fn encoding_adds_no_bos_and_decoding_round_trips() -> Result<()> {
    let tokenizer = Tokenizer::load(&tiny())?;
    let special = SpecialTokens::load(&tiny(), &tokenizer)?;
    let ids = tokenizer.encode("Hello there")?;
    assert!(!ids.contains(&special.bos));
    assert_eq!(tokenizer.decode(&ids, false)?, "Hello there");
    let with_markers = tokenizer.encode("<bos><|turn>user\nHi<turn|>")?;
    assert_eq!(with_markers[0], special.bos);
    assert_eq!(with_markers[1], special.turn_open);
    assert_eq!(with_markers.last(), Some(&special.turn_close));
    assert_eq!(tokenizer.decode(&with_markers, true)?, "user\nHi");
    Ok(())
}

#[test]
fn image_count_mismatch_names_both_counts() -> Result<()> {
    let tokenizer = Tokenizer::load(&tiny())?;
    let special = SpecialTokens::load(&tiny(), &tokenizer)?;
    let image = special.image.context("image ids")?;
    let ids = [special.bos, image.placeholder, 7, image.placeholder];
    match expand_placeholders(&ids, MediaKind::Image, &[3], &special) {
        Err(TemplateError::MediaCount {
            kind: MediaKind::Image,
            expected: 1,
            found: 2,
        }) => {}
        other => bail!("expected an image count error, got {other:?}"),
    }
    let expanded = expand_placeholders(&ids, MediaKind::Image, &[2, 1], &special)?;
    let (p, b, e) = (image.placeholder, image.begin, image.end);
    assert_eq!(expanded, vec![special.bos, b, p, p, e, 7, b, p, e]);
    assert_eq!(
        expand_placeholders(&[1, 2], MediaKind::Image, &[], &special)?,
        vec![1, 2]
    );
    Ok(())
}

/// A copy of the tiny checkpoint's text files in a temporary folder, for breaking them.
fn scratch_checkpoint() -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for entry in std::fs::read_dir(tiny())? {
        let entry = entry?;
        std::fs::copy(entry.path(), dir.path().join(entry.file_name()))?;
    }
    Ok(dir)
}

fn edit_json(path: &Path, edit: impl FnOnce(&mut Value)) -> Result<()> {
    let mut value: Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    edit(&mut value);
    std::fs::write(path, serde_json::to_string(&value)?)?;
    Ok(())
}

#[test]
fn broken_checkpoint_files_give_errors_that_name_the_file() -> Result<()> {
    let dir = scratch_checkpoint()?;
    let tokenizer = Tokenizer::load(dir.path())?;

    edit_json(&dir.path().join("generation_config.json"), |v| {
        v["eos_token_id"] = json!(["three"]);
    })?;
    let err = SpecialTokens::load(dir.path(), &tokenizer)
        .err()
        .context("must fail")?;
    assert!(matches!(err, TokenizerError::InvalidField { .. }), "{err}");
    assert!(err.to_string().contains("generation_config.json"), "{err}");
    assert!(err.to_string().contains("eos_token_id[0]"), "{err}");

    // Without generation_config.json, stop ids fall back to config.json's.
    std::fs::remove_file(dir.path().join("generation_config.json"))?;
    let special = SpecialTokens::load(dir.path(), &tokenizer)?;
    assert_eq!(special.eos.len(), 2);

    edit_json(&dir.path().join("config.json"), |v| {
        v["image_token_id"] = json!(999_999);
    })?;
    let err = SpecialTokens::load(dir.path(), &tokenizer)
        .err()
        .context("must fail")?;
    assert!(
        matches!(err, TokenizerError::UnknownId { id: 999_999, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("config.json"), "{err}");

    edit_json(&dir.path().join("config.json"), |v| {
        if let Some(map) = v.as_object_mut() {
            map.remove("bos_token_id");
            map.insert("text_config".into(), json!({}));
        }
    })?;
    let err = SpecialTokens::load(dir.path(), &tokenizer)
        .err()
        .context("must fail")?;
    assert!(matches!(err, TokenizerError::MissingField { .. }), "{err}");
    assert!(err.to_string().contains("bos_token_id"), "{err}");

    std::fs::write(dir.path().join("tokenizer.json"), "{\"truncated\": ")?;
    let err = Tokenizer::load(dir.path()).err().context("must fail")?;
    assert!(matches!(err, TokenizerError::Json { .. }), "{err}");
    assert!(err.to_string().contains("tokenizer.json"), "{err}");

    std::fs::remove_file(dir.path().join("tokenizer.json"))?;
    let err = Tokenizer::load(dir.path()).err().context("must fail")?;
    assert!(matches!(err, TokenizerError::Io { .. }), "{err}");
    Ok(())
}

#[test]
fn a_vocabulary_without_turn_markers_is_refused() -> Result<()> {
    let dir = scratch_checkpoint()?;
    // Rename the token (its id stays valid for the stop ids) so its text is gone.
    edit_json(&dir.path().join("tokenizer.json"), |v| {
        if let Some(added) = v["added_tokens"].as_array_mut() {
            for token in added.iter_mut().filter(|t| t["content"] == "<turn|>") {
                token["content"] = json!("<end_of_turn>");
            }
        }
        if let Some(vocab) = v["model"]["vocab"].as_object_mut() {
            if let Some(id) = vocab.remove("<turn|>") {
                vocab.insert("<end_of_turn>".into(), id);
            }
        }
    })?;
    let tokenizer = Tokenizer::load(dir.path())?;
    let err = SpecialTokens::load(dir.path(), &tokenizer)
        .err()
        .context("must fail")?;
    assert!(
        matches!(
            err,
            TokenizerError::MissingToken {
                token: "<turn|>",
                ..
            }
        ),
        "{err}"
    );
    Ok(())
}

#[test]
fn template_falls_back_to_tokenizer_config_and_reports_its_absence() -> Result<()> {
    let dir = scratch_checkpoint()?;
    let source = std::fs::read_to_string(dir.path().join("chat_template.jinja"))?;
    std::fs::remove_file(dir.path().join("chat_template.jinja"))?;
    let err = ChatTemplate::load(dir.path()).err().context("must fail")?;
    assert!(matches!(err, TemplateError::Missing { .. }), "{err}");

    edit_json(&dir.path().join("tokenizer_config.json"), |v| {
        v["chat_template"] = json!(source);
    })?;
    let template = ChatTemplate::load(dir.path())?;
    let chat = [Message::text(Role::User, "Hi")];
    let prompt = template.render(&chat, RenderOptions::default())?;
    assert_eq!(prompt, "<bos><|turn>user\nHi<turn|>\n");
    Ok(())
}

fn render(source: &str, messages: &[Message]) -> Result<String, TemplateError> {
    let tokens = vec![("bos_token".to_owned(), "<s>".to_owned())];
    ChatTemplate::from_source(source.to_owned(), tokens, "inline")?
        .render(messages, RenderOptions::default())
}

#[test]
fn hf_template_features_work() -> Result<()> {
    let chat = [
        Message::text(Role::System, "  Be brief.  "),
        Message::text(Role::User, "one"),
        Message::text(Role::User, "two"),
    ];
    // Python string methods, loop controls, trim_blocks/lstrip_blocks (expected strings
    // checked with transformers' own jinja environment).
    let source = "{{ bos_token }}\n{% for m in messages %}\n  {% if loop.index > 2 %}{% break %}{% endif %}\n{{ m.content.strip().upper() }}{% if m.role.startswith('sys') %}!{% endif %}\n{% endfor %}";
    assert_eq!(render(source, &chat)?, "<s>\nBE BRIEF.!ONE");

    // transformers' tojson: Python separators, no HTML escaping, key order kept.
    let source = "{{ {'b': '<x>', 'a': [1, 2.5, none, true]} | tojson }}|{{ 'é' | tojson(ensure_ascii=true) }}";
    assert_eq!(
        render(source, &chat)?,
        r#"{"b": "<x>", "a": [1, 2.5, null, true]}|"\u00e9""#
    );
    let source = "{{ {'a': {'b': 1}} | tojson(indent=2) }}";
    assert_eq!(
        render(source, &chat)?,
        "{\n  \"a\": {\n    \"b\": 1\n  }\n}"
    );

    let year = render("{{ strftime_now('%Y') }}", &chat)?;
    assert!(year.len() == 4 && year.starts_with('2'), "{year}");

    let err = render("{{ raise_exception('System role not supported') }}", &chat)
        .err()
        .context("must fail")?;
    assert!(matches!(err, TemplateError::Render { .. }));
    assert!(
        format!("{err}").contains("System role not supported"),
        "{err}"
    );

    let err = render("{% if %}", &chat).err().context("must fail")?;
    assert!(matches!(err, TemplateError::Syntax { .. }), "{err}");
    Ok(())
}

#[test]
fn sampling_defaults_come_from_generation_config() -> Result<()> {
    let config = SamplerConfig::load(&tiny())?;
    assert_eq!(config.temperature, 1.0);
    assert_eq!(config.top_k, Some(64));
    assert_eq!(config.top_p, Some(0.95));
    assert_eq!(config.min_p, None);

    let dir = scratch_checkpoint()?;
    edit_json(&dir.path().join("generation_config.json"), |v| {
        v["do_sample"] = json!(false);
    })?;
    assert_eq!(SamplerConfig::load(dir.path())?.temperature, 0.0);
    edit_json(&dir.path().join("generation_config.json"), |v| {
        v["top_p"] = json!("high");
    })?;
    let err = SamplerConfig::load(dir.path()).err().context("must fail")?;
    assert!(err.to_string().contains("generation_config.json"), "{err}");
    assert!(err.to_string().contains("top_p"), "{err}");
    Ok(())
}
