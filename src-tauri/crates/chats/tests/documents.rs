//! Documents in conversations: stored once per hash, retrieved per conversation by BM25, and
//! deleted with the last conversation that used them.

use chats::{NewChunk, NewDocument, Store};
use rusqlite::Connection;
use tempfile::TempDir;

fn open() -> (TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    (dir, store)
}

fn document(hash: char, name: &str, pages: &[&str]) -> NewDocument {
    NewDocument {
        hash: hash.to_string().repeat(64),
        name: name.into(),
        format: "PDF".into(),
        pages: Some(pages.len() as u32),
        text: pages.join("\n\n"),
        chunks: pages
            .iter()
            .enumerate()
            .map(|(i, t)| NewChunk {
                page: Some(i as u32 + 1),
                lines: None,
                text: t.to_string(),
            })
            .collect(),
    }
}

fn count(dir: &TempDir, table: &str) -> i64 {
    let conn = Connection::open(dir.path().join(chats::DATABASE_FILE)).unwrap();
    conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[test]
fn retrieval_ranks_the_matching_page_first_within_the_conversation() {
    let (_dir, store) = open();
    let a = store.create_conversation("a").unwrap();
    let b = store.create_conversation("b").unwrap();
    let manual = document(
        'a',
        "manual.pdf",
        &[
            "Installing the pump: bolt it to the frame.",
            "Cleaning the filters every month keeps the pumps running.",
            "Warranty terms.",
        ],
    );
    store.add_document(&a.id, &manual).unwrap();
    store
        .add_document(
            &b.id,
            &document('b', "other.pdf", &["filters filters filters cleaning"]),
        )
        .unwrap();

    let hits = store
        .retrieve(&a.id, "How often should I clean the filter?", 5)
        .unwrap();
    assert_eq!(
        hits[0].page,
        Some(2),
        "stems match: clean/cleaning, filter/filters"
    );
    assert_eq!(hits[0].name, "manual.pdf");
    assert!(
        hits.iter().all(|h| h.hash == manual.hash),
        "only this conversation's documents"
    );
    assert_eq!(
        store.retrieve(&a.id, "the of and?", 5).unwrap(),
        [],
        "common words alone find nothing"
    );
    assert_eq!(
        store.retrieve(&a.id, "\"NEAR( *) AND", 5).unwrap().len(),
        0,
        "any text is a valid question"
    );
}

#[test]
fn a_document_is_stored_once_and_goes_with_its_last_conversation() {
    let (dir, store) = open();
    let a = store.create_conversation("a").unwrap();
    let b = store.create_conversation("b").unwrap();
    let shared = document('c', "shared.pdf", &["one", "two"]);
    store.add_document(&a.id, &shared).unwrap();
    store.add_document(&b.id, &shared).unwrap();
    store.add_document(&b.id, &shared).unwrap();
    assert_eq!(
        (count(&dir, "documents"), count(&dir, "document_chunks")),
        (1, 2)
    );
    assert_eq!(
        store.conversation_documents(&b.id).unwrap(),
        vec![shared.hash.clone()]
    );

    store.delete_conversation(&a.id).unwrap();
    assert_eq!(
        store.document_text(&shared.hash).unwrap().as_deref(),
        Some("one\n\ntwo"),
        "b still uses it"
    );
    assert_eq!(store.retrieve(&b.id, "two", 5).unwrap().len(), 1);

    store.delete_conversation(&b.id).unwrap();
    assert_eq!(store.document_text(&shared.hash).unwrap(), None);
    assert_eq!(
        (
            count(&dir, "document_chunks"),
            count(&dir, "document_chunk_fts")
        ),
        (0, 0),
        "chunks and index too"
    );
}
