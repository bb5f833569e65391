//! Full-text search as the user types it.

use chats::{MessageStatus, Role, SearchHit, Store};
use rusqlite::Connection;
use tempfile::TempDir;

fn open() -> (TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    (dir, store)
}

/// The matched runs of each hit's snippet, joined.
fn matched(hit: &SearchHit) -> String {
    hit.snippet
        .iter()
        .filter(|part| part.matched)
        .map(|part| part.text.as_str())
        .collect::<Vec<_>>()
        .join("|")
}

fn message_ids(store: &Store, query: &str) -> Vec<String> {
    store
        .search(query)
        .unwrap()
        .into_iter()
        .filter_map(|hit| hit.message_id)
        .collect()
}

#[test]
fn finds_words_in_messages_and_titles() {
    let (_dir, store) = open();
    let trip = store.create_conversation("Trip to Lisbon").unwrap();
    let packing = store
        .add_message(
            &trip.id,
            Role::User,
            "Should I pack sunscreen and a hat?",
            &[],
        )
        .unwrap();
    let other = store.create_conversation("Recipes").unwrap();
    store
        .add_message(&other.id, Role::User, "A cake with lemon", &[])
        .unwrap();

    let hits = store.search("lisbon").unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(
        (
            hits[0].conversation_id.as_str(),
            hits[0].message_id.as_deref()
        ),
        (trip.id.as_str(), None)
    );
    assert_eq!(matched(&hits[0]), "Lisbon");
    let whole: String = hits[0]
        .snippet
        .iter()
        .map(|part| part.text.as_str())
        .collect();
    assert_eq!(whole, "Trip to Lisbon");

    for query in [
        "sunscreen",
        "SUNSCREEN",
        "sunscr",
        "pack hat",
        "  hat   pack ",
    ] {
        assert_eq!(message_ids(&store, query), [packing.id.as_str()], "{query}");
    }
    let hit = &store.search("sunscreen").unwrap()[0];
    assert_eq!(
        (hit.title.as_str(), matched(hit).as_str()),
        ("Trip to Lisbon", "sunscreen")
    );
    assert!(
        store.search("pack umbrella").unwrap().is_empty(),
        "all words must match"
    );
    assert!(
        store.search("screen").unwrap().is_empty(),
        "words match from their start"
    );
}

#[test]
fn accents_case_and_other_scripts_are_searchable() {
    let (_dir, store) = open();
    let chat = store.create_conversation("Café talk").unwrap();
    let french = store
        .add_message(&chat.id, Role::User, "Un café crème, s'il vous plaît", &[])
        .unwrap();
    let russian = store
        .add_message(&chat.id, Role::Assistant, "Привет, мир!", &[])
        .unwrap();
    let greek = store
        .add_message(&chat.id, Role::User, "ΚΑΛΗΜΈΡΑ κόσμε", &[])
        .unwrap();

    assert_eq!(message_ids(&store, "creme"), [french.id.as_str()]);
    // The title matches too, and the chat is listed once, by its title.
    let hits = store.search("CAFÉ").unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(matched(&hits[0]), "Café");
    assert_eq!(message_ids(&store, "мир"), [russian.id.as_str()]);
    assert_eq!(message_ids(&store, "καλημέρα"), [greek.id.as_str()]);
    assert_eq!(message_ids(&store, "ΚΌΣΜΕ"), [greek.id.as_str()]);
    assert_eq!(
        store.search("cafe").unwrap()[0].message_id,
        None,
        "the title hit comes first"
    );
}

#[test]
fn hostile_queries_are_just_text() {
    let (dir, store) = open();
    let chat = store.create_conversation("Operators").unwrap();
    let ops = store
        .add_message(
            &chat.id,
            Role::User,
            "Use AND or OR, and NOT: \"quoted\" words*",
            &[],
        )
        .unwrap();

    let long_word = "x".repeat(10_000);
    let many_words = "word ".repeat(500);
    let hostile = [
        "\"",
        "\"\"",
        "\"\"\"",
        "*",
        "**",
        "AND",
        "AND OR",
        "OR NOT",
        "NOT",
        "NEAR(a b)",
        "NEAR/2",
        "title:foo",
        "text:x",
        "{text}: x",
        "a AND",
        "(",
        ")",
        "((a)",
        "^",
        "^foo",
        "-foo",
        "+",
        "foo\"bar",
        "'; DROP TABLE messages; --",
        "\\",
        "\0",
        "\u{0301}",
        "\u{093E}",
        "🎉",
        "👍🏽 ok",
        "\u{E000}",
        "\u{202E}evil",
        "ｆｕｌｌ",
        "中文搜索",
        &long_word,
        &many_words,
    ];
    for query in hostile {
        assert!(
            store.search(query).is_ok(),
            "{query:?}: {:?}",
            store.search(query)
        );
    }
    assert!(store.search("").unwrap().is_empty());
    assert!(store.search("   \t\n").unwrap().is_empty());

    // Operator words are ordinary words to search for.
    assert_eq!(message_ids(&store, "AND OR"), [ops.id.as_str()]);
    assert_eq!(message_ids(&store, "\"quoted\""), [ops.id.as_str()]);
    assert_eq!(message_ids(&store, "words*"), [ops.id.as_str()]);

    let conn = Connection::open(dir.path().join(chats::DATABASE_FILE)).unwrap();
    let messages: i64 = conn
        .query_row("SELECT COUNT(*) FROM messages", [], |r| r.get(0))
        .unwrap();
    assert_eq!(messages, 1);
}

#[test]
fn answers_become_searchable_when_they_finish() {
    let (_dir, store) = open();
    let chat = store.create_conversation("Chat").unwrap();
    let answer = store.begin_assistant_message(&chat.id).unwrap();
    store
        .append_assistant_text(&answer, "photosynthesis turns light ")
        .unwrap();
    store.append_assistant_text(&answer, "into sugar").unwrap();
    assert!(store.search("photosynthesis").unwrap().is_empty());

    store
        .finish_assistant_message(&answer, MessageStatus::Complete, None, None)
        .unwrap();
    assert_eq!(
        message_ids(&store, "photosynthesis sugar"),
        [answer.as_str()]
    );
}

#[test]
fn an_answer_interrupted_by_a_crash_is_searchable_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let answer = {
        let store = Store::open(dir.path()).unwrap();
        let chat = store.create_conversation("Chat").unwrap();
        let answer = store.begin_assistant_message(&chat.id).unwrap();
        store
            .append_assistant_text(&answer, "interrupted thought")
            .unwrap();
        answer
    };
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(message_ids(&store, "interrupted"), [answer]);
}

#[test]
fn renames_and_deletes_update_the_index() {
    let (dir, store) = open();
    let chat = store.create_conversation("Old name").unwrap();
    store
        .add_message(&chat.id, Role::User, "unique zebra text", &[])
        .unwrap();
    store.rename_conversation(&chat.id, "Fresh name").unwrap();
    assert!(store.search("old").unwrap().is_empty());
    assert_eq!(store.search("fresh").unwrap()[0].title, "Fresh name");
    assert_eq!(store.search("zebra").unwrap()[0].title, "Fresh name");

    store.delete_conversation(&chat.id).unwrap();
    assert!(store.search("fresh").unwrap().is_empty());
    assert!(store.search("zebra").unwrap().is_empty());
    let conn = Connection::open(dir.path().join(chats::DATABASE_FILE)).unwrap();
    let indexed: i64 = conn
        .query_row(
            "SELECT (SELECT COUNT(*) FROM message_fts) + (SELECT COUNT(*) FROM title_fts)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(indexed, 0);
}

#[test]
fn a_chat_is_listed_once_by_its_best_hit() {
    let (_dir, store) = open();
    let bread = store.create_conversation("Bread baking").unwrap();
    for text in [
        "Bread needs flour",
        "More bread, please",
        "Sourdough bread rises",
    ] {
        store.add_message(&bread.id, Role::User, text, &[]).unwrap();
    }
    let other = store.create_conversation("Breakfast").unwrap();
    store
        .add_message(&other.id, Role::User, "Toast is bread too", &[])
        .unwrap();

    let hits = store.search("bread").unwrap();
    let chats: Vec<&str> = hits.iter().map(|h| h.conversation_id.as_str()).collect();
    assert_eq!(chats.len(), 2, "{chats:?}");
    // The title hit first, and for it the title, not one of its messages.
    assert_eq!(
        (chats[0], hits[0].message_id.as_deref()),
        (bread.id.as_str(), None)
    );
    assert_eq!(chats[1], other.id.as_str());
    assert!(hits[1].message_id.is_some());
}
