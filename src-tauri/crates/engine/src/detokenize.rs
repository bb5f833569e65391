//! Streaming detokenization: ids in one at a time, text deltas out.
//!
//! Decoding one id at a time is wrong for two reasons: a byte-fallback token (`<0xE2>`)
//! may be a third of a character, and SentencePiece decoders treat the first piece of a
//! sequence differently (a leading "▁" is a space only after something). So, like HF's
//! `DecodeStream` and mlx-lm's streaming detokenizer, this decodes a short tail window and
//! emits the difference against the previous decode of that window, holding text back
//! while it ends in an incomplete character. The deltas concatenate to the full decode.

use crate::tokenizer::{Result, Tokenizer, CHANNEL_CLOSE, CHANNEL_OPEN};

const REPLACEMENT: char = '\u{FFFD}';

/// Turns a stream of ids into text deltas that are always whole UTF-8 characters.
#[derive(Debug)]
pub struct Detokenizer<'a> {
    tokenizer: &'a Tokenizer,
    skip_special: bool,
    /// The tail window: ids already emitted (context) followed by ids not yet emitted.
    ids: Vec<u32>,
    /// Decode of `ids[..read]`, the part already emitted.
    emitted: String,
    /// How many of `ids` are already accounted for in `emitted`.
    read: usize,
}

impl<'a> Detokenizer<'a> {
    /// A detokenizer; `skip_special` hides control tokens (`<|turn>`, `<turn|>`, `<bos>`, …)
    /// from the text.
    pub fn new(tokenizer: &'a Tokenizer, skip_special: bool) -> Self {
        Self {
            tokenizer,
            skip_special,
            ids: Vec::new(),
            emitted: String::new(),
            read: 0,
        }
    }

    /// Feeds one id. Returns the new text it completes, or `None` while it only adds to a
    /// character that is not yet whole (or adds no text, like a hidden special token).
    pub fn push(&mut self, id: u32) -> Result<Option<String>> {
        self.ids.push(id);
        let text = self.tokenizer.decode(&self.ids, self.skip_special)?;
        if text.len() <= self.emitted.len() || text.ends_with(REPLACEMENT) {
            return Ok(None);
        }
        let delta = suffix_after(&text, &self.emitted).to_owned();
        // Keep the ids emitted just now as context for the next decode; drop older ones.
        self.ids.drain(..self.read);
        self.read = self.ids.len();
        self.emitted = self.tokenizer.decode(&self.ids, self.skip_special)?;
        Ok(Some(delta))
    }

    /// Ends the stream: returns any held-back text, even an incomplete character (as
    /// U+FFFD, exactly what a full decode shows), and resets for a new stream.
    pub fn finish(&mut self) -> Result<Option<String>> {
        let text = self.tokenizer.decode(&self.ids, self.skip_special)?;
        let delta = (text.len() > self.emitted.len())
            .then(|| suffix_after(&text, &self.emitted).to_owned());
        self.ids.clear();
        self.emitted.clear();
        self.read = 0;
        Ok(delta)
    }

    /// Whether ids were fed whose text is still held back.
    pub fn has_pending(&self) -> bool {
        self.ids.len() > self.read
    }
}

/// Which ids an answer shows as text: control ids are hidden, except the thought channel's
/// markers (the UI shows the thinking they enclose apart, and the chat template strips it from
/// the history by them).
#[derive(Debug, Clone, Copy)]
pub struct Shown {
    channel: [Option<u32>; 2],
}

impl Shown {
    /// The rule for `tokenizer`'s ids.
    pub fn new(tokenizer: &Tokenizer) -> Self {
        Self {
            channel: [
                tokenizer.token_id(CHANNEL_OPEN),
                tokenizer.token_id(CHANNEL_CLOSE),
            ],
        }
    }

    /// Whether `id`'s text is shown.
    pub fn shows(&self, tokenizer: &Tokenizer, id: u32) -> bool {
        !tokenizer.is_special(id) || self.channel.contains(&Some(id))
    }
}

/// The text an answer of `ids` streams (and the app saves): the shown ids through a
/// [`Detokenizer`], deltas concatenated. Not always `decode(ids)`: bytes that form no
/// character stream as they came.
pub fn streamed_text(tokenizer: &Tokenizer, ids: &[u32]) -> Result<String> {
    let shown = Shown::new(tokenizer);
    let mut detok = Detokenizer::new(tokenizer, false);
    let mut text = String::new();
    for &id in ids.iter().filter(|&&id| shown.shows(tokenizer, id)) {
        text.push_str(&detok.push(id)?.unwrap_or_default());
    }
    text.push_str(&detok.finish()?.unwrap_or_default());
    Ok(text)
}

/// The part of `text` after `emitted`. Decoders seen in practice only ever extend the
/// previous decode; should one rewrite it, emit from where the two diverge rather than fail.
fn suffix_after<'t>(text: &'t str, emitted: &str) -> &'t str {
    if let Some(rest) = text.strip_prefix(emitted) {
        return rest;
    }
    let common = text
        .char_indices()
        .zip(emitted.chars())
        .find(|((_, a), b)| a != b)
        .map_or(emitted.len().min(text.len()), |((i, _), _)| i);
    // `common` is a char boundary of `text` (an index from char_indices or a full prefix).
    text.get(common..).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::suffix_after;

    #[test]
    fn suffix_after_a_rewritten_prefix_starts_where_they_diverge() {
        assert_eq!(suffix_after("hello world", "hello"), " world");
        assert_eq!(suffix_after("héllo", "hello"), "éllo");
        assert_eq!(suffix_after("abc", ""), "abc");
    }
}
