//! Full-text search over message text and conversation titles (SQLite FTS5).

use rusqlite::params;

use crate::error::Result;
use crate::store::Store;
use crate::types::{SearchHit, SnippetPart};

/// Most hits one search returns.
const MAX_HITS: usize = 100;
/// Most words of a query that are used; the rest are ignored.
const MAX_TERMS: usize = 16;
/// Markers around matches in FTS5 snippets: private-use characters, split out before returning.
const MATCH_START: char = '\u{E000}';
const MATCH_END: char = '\u{E001}';

impl Store {
    /// Conversations whose title, and messages whose text, contain every word of `query` (as a
    /// word or the start of one; case and accents ignored), each chat once: by its title when
    /// that matches, else by its best matching message. Title hits come first. Any text is a valid query: quotes, `*`, `AND`, `NEAR(` are just words.
    /// Answers still streaming are not searchable until they finish.
    pub fn search(&self, query: &str) -> Result<Vec<SearchHit>> {
        let Some(expression) = fts_expression(query) else {
            return Ok(Vec::new());
        };
        self.with("searching", |inner| {
            let mut stmt = inner.conn.prepare_cached(
                // One hit per chat: its title when that matches, else its best message.
                "SELECT id, title, message_id, snippet FROM (
                     SELECT *, row_number() OVER (PARTITION BY id ORDER BY kind, rank) AS nth
                     FROM (
                         SELECT c.id, c.title, NULL AS message_id,
                                snippet(title_fts, 0, char(57344), char(57345), '…', 12) AS snippet,
                                0 AS kind, bm25(title_fts) AS rank
                         FROM title_fts JOIN conversations c ON c.rowid = title_fts.rowid
                         WHERE title_fts MATCH ?1
                         UNION ALL
                         SELECT c.id, c.title, m.id,
                                snippet(message_fts, 0, char(57344), char(57345), '…', 12),
                                1, bm25(message_fts)
                         FROM message_fts
                         JOIN messages m ON m.rowid = message_fts.rowid
                         JOIN conversations c ON c.id = m.conversation_id
                         WHERE message_fts MATCH ?1
                     )
                 ) WHERE nth = 1 ORDER BY kind, rank LIMIT ?2",
            )?;
            let limit = i64::try_from(MAX_HITS).unwrap_or(i64::MAX);
            let hits = stmt.query_map(params![expression, limit], |row| {
                let snippet: String = row.get(3)?;
                Ok(SearchHit {
                    conversation_id: row.get(0)?,
                    title: row.get(1)?,
                    message_id: row.get(2)?,
                    snippet: snippet_parts(&snippet),
                })
            })?;
            Ok(hits.collect::<rusqlite::Result<_>>()?)
        })
    }
}

/// Turns what the user typed into an FTS5 expression that cannot be a syntax error: every word
/// becomes a quoted string (inner quotes doubled) matched as a prefix, and words are ANDed.
/// Words without a letter or digit would tokenize to nothing and are dropped; `None` if no word
/// is left.
fn fts_expression(query: &str) -> Option<String> {
    let terms: Vec<String> = query
        .split_whitespace()
        .filter(|word| word.chars().any(char::is_alphanumeric))
        .take(MAX_TERMS)
        .map(|word| format!("\"{}\"*", word.replace('"', "\"\"")))
        .collect();
    (!terms.is_empty()).then(|| terms.join(" "))
}

/// Splits an FTS5 snippet at the match markers.
fn snippet_parts(snippet: &str) -> Vec<SnippetPart> {
    let mut parts = Vec::new();
    let mut matched = false;
    for piece in snippet.split([MATCH_START, MATCH_END]) {
        if !piece.is_empty() {
            parts.push(SnippetPart {
                text: piece.to_owned(),
                matched,
            });
        }
        matched = !matched;
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_text_becomes_quoted_prefix_terms() {
        assert_eq!(
            fts_expression("rust tauri").as_deref(),
            Some(r#""rust"* "tauri"*"#)
        );
        assert_eq!(
            fts_expression(r#"say "hi""#).as_deref(),
            Some(r#""say"* """hi"""*"#)
        );
        assert_eq!(fts_expression("AND OR"), Some(r#""AND"* "OR"*"#.to_owned()));
        assert_eq!(fts_expression(r#" " * - ( ) "#), None);
        assert_eq!(fts_expression(""), None);
    }

    #[test]
    fn snippets_split_into_plain_and_matched_runs() {
        let parts = snippet_parts("a \u{E000}fox\u{E001} b");
        let runs: Vec<(&str, bool)> = parts.iter().map(|p| (p.text.as_str(), p.matched)).collect();
        assert_eq!(runs, [("a ", false), ("fox", true), (" b", false)]);
    }
}
