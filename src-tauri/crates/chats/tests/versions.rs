//! Answer versions and edit branches: nothing regenerated or edited away is lost, and the
//! conversation shown (what a follow-up is answered from) is the version chosen.

use chats::{Error, Message, MessageStatus, Role, Store};
use tempfile::TempDir;

fn open() -> (TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    (dir, store)
}

/// An answer to `to`, finished with `text` and ids `ids`.
fn answer(store: &Store, chat: &str, to: &str, text: &str, ids: &[u32]) -> String {
    let id = store.begin_answer_to(chat, to).unwrap();
    store.append_assistant_text(&id, text).unwrap();
    store.set_generated_ids(&id, ids).unwrap();
    store
        .finish_assistant_message(&id, MessageStatus::Complete, None, None)
        .unwrap();
    id
}

/// The conversation shown: text, version and number of versions of each message.
fn shown(store: &Store, chat: &str) -> Vec<(String, u32, u32)> {
    store
        .get_conversation(chat)
        .unwrap()
        .messages
        .into_iter()
        .map(|m| (m.text, m.version, m.versions))
        .collect()
}

fn row(text: &str, version: u32, versions: u32) -> (String, u32, u32) {
    (text.to_owned(), version, versions)
}

fn message(store: &Store, chat: &str, id: &str) -> Message {
    store
        .get_conversation(chat)
        .unwrap()
        .messages
        .into_iter()
        .find(|m| m.id == id)
        .unwrap()
}

#[test]
fn regenerating_keeps_every_answer_and_flipping_shows_each_with_its_ids() {
    let (_dir, store) = open();
    let chat = store.create_conversation("Versions").unwrap().id;
    let question = store
        .add_message(&chat, Role::User, "Name a colour", &[])
        .unwrap();
    let first = answer(&store, &chat, &question.id, "Red", &[1, 2]);
    let second = answer(&store, &chat, &question.id, "Blue", &[3, 4]);

    assert_eq!(
        shown(&store, &chat),
        [row("Name a colour", 1, 1), row("Blue", 2, 2)]
    );

    store.select_version(&chat, &second, 1).unwrap();
    assert_eq!(
        shown(&store, &chat),
        [row("Name a colour", 1, 1), row("Red", 1, 2)]
    );
    assert_eq!(message(&store, &chat, &first).generated, Some(vec![1, 2]));

    // A follow-up continues the version shown.
    let follow_up = store.add_message(&chat, Role::User, "Why?", &[]).unwrap();
    assert_eq!(follow_up.position, 2);
    assert_eq!(
        shown(&store, &chat),
        [
            row("Name a colour", 1, 1),
            row("Red", 1, 2),
            row("Why?", 1, 1)
        ]
    );
    // The other version has no follow-up; going back to Red brings "Why?" back.
    store.select_version(&chat, &first, 2).unwrap();
    assert_eq!(
        shown(&store, &chat),
        [row("Name a colour", 1, 1), row("Blue", 2, 2)]
    );
    assert_eq!(message(&store, &chat, &second).generated, Some(vec![3, 4]));
    store.select_version(&chat, &second, 1).unwrap();
    assert_eq!(shown(&store, &chat).len(), 3);
    // The list counts and previews the versions shown.
    let listed = &store.list_conversations().unwrap()[0];
    assert_eq!(
        (listed.message_count, listed.preview.as_deref()),
        (3, Some("Why?"))
    );
    store.select_version(&chat, &first, 2).unwrap();
    let listed = &store.list_conversations().unwrap()[0];
    assert_eq!(
        (listed.message_count, listed.preview.as_deref()),
        (2, Some("Blue"))
    );
}

#[test]
fn editing_a_question_branches_and_switching_back_restores_what_followed() {
    let (_dir, store) = open();
    let chat = store.create_conversation("Branches").unwrap().id;
    let q1 = store.add_message(&chat, Role::User, "first", &[]).unwrap();
    answer(&store, &chat, &q1.id, "answer one", &[]);
    let q2 = store.add_message(&chat, Role::User, "second", &[]).unwrap();
    answer(&store, &chat, &q2.id, "answer two", &[]);

    let edited = store
        .add_message_version(&chat, &q1.id, "first, edited", &[])
        .unwrap();
    assert_eq!(
        (edited.position, edited.version, edited.versions),
        (0, 2, 2)
    );
    answer(&store, &chat, &edited.id, "edited answer", &[]);
    assert_eq!(
        shown(&store, &chat),
        [row("first, edited", 2, 2), row("edited answer", 1, 1)]
    );

    store.select_version(&chat, &edited.id, 1).unwrap();
    assert_eq!(
        shown(&store, &chat),
        [
            row("first", 1, 2),
            row("answer one", 1, 1),
            row("second", 1, 1),
            row("answer two", 1, 1)
        ]
    );
}

#[test]
fn versions_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let chat = {
        let store = Store::open(dir.path()).unwrap();
        let chat = store.create_conversation("Kept").unwrap().id;
        let q = store.add_message(&chat, Role::User, "q", &[]).unwrap();
        let a = answer(&store, &chat, &q.id, "a", &[5]);
        answer(&store, &chat, &q.id, "b", &[6]);
        store.select_version(&chat, &a, 1).unwrap();
        chat
    };
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(shown(&store, &chat), [row("q", 1, 1), row("a", 1, 2)]);
    let answer = &store.get_conversation(&chat).unwrap().messages[1];
    assert_eq!(answer.generated, Some(vec![5]));
}

#[test]
fn a_version_that_does_not_exist_is_refused_and_changes_nothing() {
    let (_dir, store) = open();
    let chat = store.create_conversation("Refused").unwrap().id;
    let other = store.create_conversation("Other").unwrap().id;
    let q = store.add_message(&chat, Role::User, "q", &[]).unwrap();
    let a = answer(&store, &chat, &q.id, "a", &[]);
    let before = shown(&store, &chat);

    for version in [0, 2, u32::MAX] {
        let err = store.select_version(&chat, &a, version).unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{err}");
    }
    let err = store.select_version(&other, &a, 1).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    let err = store.begin_answer_to(&other, &q.id).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    assert_eq!(shown(&store, &chat), before);
}

#[test]
fn a_message_in_a_version_not_shown_can_be_brought_into_view() {
    let (_dir, store) = open();
    let chat = store.create_conversation("Found").unwrap().id;
    let q = store.add_message(&chat, Role::User, "q", &[]).unwrap();
    let old = answer(&store, &chat, &q.id, "old answer", &[]);
    let follow = store
        .add_message(&chat, Role::User, "deep in the old branch", &[])
        .unwrap();
    answer(&store, &chat, &q.id, "new answer", &[]);
    assert_eq!(shown(&store, &chat).len(), 2);

    store.show_message(&chat, &follow.id).unwrap();

    assert_eq!(
        shown(&store, &chat),
        [
            row("q", 1, 1),
            row("old answer", 1, 2),
            row("deep in the old branch", 1, 1)
        ]
    );
    assert_eq!(message(&store, &chat, &old).text, "old answer");
}
