//! Streaming detokenization on the tiny checkpoint's Gemma-style tokenizer (BPE with byte
//! fallback, "▁" spaces), whose small vocabulary spells emoji and CJK as raw bytes.

use std::path::Path;

use anyhow::{Context, Result};
use engine::detokenize::Detokenizer;
use engine::tokenizer::Tokenizer;

fn tokenizer() -> Result<Tokenizer> {
    Ok(Tokenizer::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny"),
    )?)
}

/// Streams `ids` one at a time; returns the deltas (the flush last, if any).
fn stream(tokenizer: &Tokenizer, ids: &[u32], skip_special: bool) -> Result<Vec<String>> {
    let mut detokenizer = Detokenizer::new(tokenizer, skip_special);
    let mut deltas = Vec::new();
    for &id in ids {
        if let Some(delta) = detokenizer.push(id)? {
            deltas.push(delta);
        }
    }
    if let Some(rest) = detokenizer.finish()? {
        deltas.push(rest);
    }
    Ok(deltas)
}

const TEXTS: [&str; 6] = [
    "Hello world, how are you today?",
    "Thumbs up 👍 and a rocket 🚀!",
    "日本語のテキストと中文。",
    "Family: 👩\u{200d}👩\u{200d}👧 (one grapheme, five code points)",
    "a  b   c\n\n  indented\tand tabbed ",
    "mixed: café, naïve, € 5 — done",
];

#[test]
fn deltas_concatenate_to_the_full_decode_and_never_split_a_character() -> Result<()> {
    let tokenizer = tokenizer()?;
    for text in TEXTS {
        let ids = tokenizer.encode(text)?;
        let full = tokenizer.decode(&ids, false)?;
        assert_eq!(full, text, "the fixture tokenizer round-trips");
        let deltas = stream(&tokenizer, &ids, false)?;
        assert_eq!(deltas.concat(), full, "{text:?}: {deltas:?}");
        for delta in &deltas {
            assert!(
                !delta.contains('\u{FFFD}'),
                "{text:?}: half a character in {delta:?}"
            );
        }
    }
    Ok(())
}

#[test]
fn byte_fallback_tokens_are_held_until_the_character_is_whole() -> Result<()> {
    let tokenizer = tokenizer()?;
    let ids = tokenizer.encode("👍")?;
    assert_eq!(ids.len(), 4, "the emoji is spelled as its four UTF-8 bytes");
    let mut detokenizer = Detokenizer::new(&tokenizer, false);
    for &id in &ids[..3] {
        assert_eq!(detokenizer.push(id)?, None);
        assert!(detokenizer.has_pending());
    }
    assert_eq!(detokenizer.push(ids[3])?.as_deref(), Some("👍"));
    assert!(!detokenizer.has_pending());
    assert_eq!(detokenizer.finish()?, None);
    Ok(())
}

/// The fixture tokenizer with a Llama-style decoder that strips the text's leading space
/// (`Strip(" ", 1, 0)` after `Fuse`): decoding a word-start piece alone loses its space.
fn stripping_tokenizer() -> Result<Tokenizer> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny/tokenizer.json");
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    let decoders = json["decoder"]["decoders"]
        .as_array_mut()
        .context("a decoder sequence")?;
    decoders.push(serde_json::json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
    let inner = tokenizers::Tokenizer::from_bytes(serde_json::to_vec(&json)?)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Tokenizer::from_tokenizer(inner, path))
}

#[test]
fn word_start_spaces_survive_streaming() -> Result<()> {
    let tokenizer = stripping_tokenizer()?;
    let ids = tokenizer.encode("Hello world")?;
    let alone: Vec<String> = ids
        .iter()
        .map(|&id| tokenizer.decode(&[id], false))
        .collect::<Result<_, _>>()?;
    assert_eq!(
        alone.concat(),
        "Helloworld",
        "decoding one id at a time drops the space"
    );

    let deltas = stream(&tokenizer, &ids, false)?;
    assert!(deltas.iter().any(|d| d.starts_with(" wor")), "{deltas:?}");
    assert_eq!(deltas.concat(), "Hello world");
    for text in TEXTS {
        let ids = tokenizer.encode(text)?;
        let deltas = stream(&tokenizer, &ids, false)?;
        assert_eq!(deltas.concat(), tokenizer.decode(&ids, false)?, "{text:?}");
    }
    Ok(())
}

#[test]
fn special_tokens_can_be_hidden() -> Result<()> {
    let tokenizer = tokenizer()?;
    let ids = tokenizer.encode("<|turn>model\nHi 👋<turn|>")?;
    assert_eq!(stream(&tokenizer, &ids, true)?.concat(), "model\nHi 👋");
    assert_eq!(
        stream(&tokenizer, &ids, false)?.concat(),
        "<|turn>model\nHi 👋<turn|>"
    );
    Ok(())
}

#[test]
fn finish_flushes_an_incomplete_character_like_a_full_decode() -> Result<()> {
    let tokenizer = tokenizer()?;
    let mut ids = tokenizer.encode("ok ")?;
    let emoji = tokenizer.encode("👍")?;
    ids.extend_from_slice(&emoji[..2]);
    let mut detokenizer = Detokenizer::new(&tokenizer, false);
    let mut text = String::new();
    for &id in &ids {
        text.extend(detokenizer.push(id)?);
    }
    assert_eq!(text, "ok ");
    let rest = detokenizer.finish()?.unwrap_or_default();
    assert!(rest.contains('\u{FFFD}'), "{rest:?}");
    assert_eq!(text + &rest, tokenizer.decode(&ids, false)?);
    // After finish the detokenizer starts a new stream.
    let first = tokenizer.decode(&ids[..1], false)?;
    assert_eq!(detokenizer.push(ids[0])?, Some(first));
    Ok(())
}
