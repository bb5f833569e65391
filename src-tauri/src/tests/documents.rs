//! Documents attached in the window: read off the UI thread, shown with pages and tokens, their
//! text put into the user turn as data, kept with the message (docs/DOCUMENTS.md).

use std::sync::atomic::AtomicBool;

use lopdf::content::{Content, Operation};
use lopdf::{dictionary, Document as Pdf, Object, Stream};

use super::*;

/// A PDF whose pages each say one line.
fn pdf(pages: &[&str]) -> Vec<u8> {
    let mut doc = Pdf::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font = doc.add_object(
        dictionary! { "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Helvetica" },
    );
    let resources = doc.add_object(dictionary! { "Font" => dictionary! { "F1" => font } });
    let mut kids = Vec::new();
    for text in pages {
        let ops = vec![
            Operation::new("BT", vec![]),
            Operation::new("Tf", vec!["F1".into(), 12.into()]),
            Operation::new("Td", vec![72.into(), 700.into()]),
            Operation::new("Tj", vec![Object::string_literal(*text)]),
            Operation::new("ET", vec![]),
        ];
        let content = doc.add_object(Stream::new(
            dictionary! {},
            Content { operations: ops }.encode().unwrap(),
        ));
        let page = doc.add_object(dictionary! {
            "Type" => "Page", "Parent" => pages_id, "Contents" => content,
            "MediaBox" => vec![0.into(), 0.into(), 612.into(), 792.into()],
        });
        kids.push(page.into());
    }
    let count = kids.len() as i64;
    doc.objects.insert(
        pages_id,
        Object::Dictionary(
            dictionary! { "Type" => "Pages", "Kids" => kids, "Count" => count, "Resources" => resources },
        ),
    );
    let catalog = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
    doc.trailer.set("Root", catalog);
    let mut out = Vec::new();
    doc.save_to(&mut out).unwrap();
    out
}

fn attach(
    h: &Harness,
    name: &str,
    bytes: &[u8],
) -> Result<crate::attachments::PendingDocument, Error> {
    h.state
        .chat
        .add_document(name, bytes, &AtomicBool::new(false))
}

#[test]
fn an_attached_pdf_shows_pages_and_tokens_goes_into_the_turn_as_data_and_is_kept_with_the_message()
{
    let h = Harness::with_model();
    let bytes = pdf(&[
        "The harbour light is green on Tuesdays.",
        "Control text <turn|> stays text.",
    ]);
    let pending = attach(&h, "harbour.pdf", &bytes).unwrap();
    assert_eq!(
        (
            pending.name.as_str(),
            pending.format.as_str(),
            pending.pages
        ),
        ("harbour.pdf", "PDF", Some(2))
    );
    let document = ::documents::extract(
        &bytes,
        "harbour.pdf",
        &::documents::Limits::default(),
        &AtomicBool::new(false),
        &mut |_| {},
    )
    .unwrap();
    let prompt_text = document.for_prompt("harbour.pdf");
    assert!(prompt_text.contains("[page 2]\nControl text <turn|> stays text."));
    assert_eq!(
        pending.tokens,
        h.state
            .chat
            .count_draft(&prompt_text, &[], &short())
            .unwrap(),
        "the chip's tokens are the document's text's"
    );
    // The draft's count (the context bar's), checked below against the prompt sent.
    let question = "What colour is the light?";
    let with_document = h
        .state
        .chat
        .count_draft(question, std::slice::from_ref(&pending.id), &short())
        .unwrap();

    let sent = h
        .send_with(question, vec![pending.id.clone()], &short())
        .unwrap();
    let events = h.finish(sent.generation_id);
    let GenerationEvent::Done { usage, .. } = events.last().unwrap() else {
        panic!("{events:?}");
    };
    // The prompt is the document's text typed before the question: the same tokens, the
    // control-token text in it kept as text.
    let typed = prompt_ids(&[user(&format!("{prompt_text}{question}"))]);
    assert_eq!(usage.prompt_tokens as usize, typed.len());
    let end_of_turn = engine::tokenizer::Tokenizer::load(&fixture())
        .unwrap()
        .encode("<turn|>")
        .unwrap();
    assert_eq!(end_of_turn.len(), 1, "the control token");
    let turn_ends = |ids: &[u32]| ids.iter().filter(|id| **id == end_of_turn[0]).count();
    assert_eq!(
        turn_ends(&typed),
        turn_ends(&prompt_ids(&[user(question)])),
        "the document's <turn|> is text, not the control token"
    );
    assert_eq!(
        with_document,
        typed.len() - prompt_ids(&[user("")]).len(),
        "the draft's count is what the turn's text takes"
    );

    // Sent: no longer pending; kept with the message, shown again after a restart.
    assert!(!h.state.attachments.is_document(&pending.id));
    let message_id = sent.user_message.id.clone();
    let (state, _events, _dir) = h.restart();
    let kept = state.store.message_documents(&message_id).unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(
        (
            kept[0].name.as_str(),
            kept[0].pages,
            kept[0].tokens as usize,
            kept[0].hash.as_str()
        ),
        ("harbour.pdf", Some(2), pending.tokens, pending.id.as_str())
    );
    assert_eq!(kept[0].prompt, prompt_text);
    let conversation = state.store.get_conversation(&sent.conversation.id).unwrap();
    assert_eq!(
        conversation.messages[0].text, question,
        "the message shows what was typed"
    );
    assert_eq!(
        state
            .store
            .conversation_documents(&sent.conversation.id)
            .unwrap(),
        vec![pending.id.clone()]
    );
}

#[test]
fn a_file_that_is_not_a_document_is_refused_in_words_and_nothing_is_pending() {
    let h = Harness::with_model();
    let err = attach(&h, "menu.txt", b"caf\xe9 au lait").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(
        err.to_string()
            .starts_with("menu.txt: the file is not UTF-8"),
        "{err}"
    );
    let err = attach(&h, "empty.md", b"").unwrap_err();
    assert_eq!(err.to_string(), "empty.md: the file is empty");
    // Sending with what failed to attach says so; the typed text is not lost.
    let err = h
        .send_with("Read it", vec!["0".repeat(64)], &short())
        .unwrap_err();
    assert!(err.to_string().contains("attach it again"), "{err}");
}

#[test]
fn a_document_larger_than_the_context_says_so_and_keeps_the_question_and_the_document() {
    let h = Harness::with_model();
    let settings = Settings {
        context_length: 512,
        max_tokens: 16,
        ..short()
    };
    let notes = "The tide tables for the northern pier are kept in the office.\n".repeat(60);
    let pending = attach(&h, "tides.md", notes.as_bytes()).unwrap();
    assert!(pending.tokens > 512, "{pending:?}");
    let sent = h
        .send_with("When is high tide?", vec![pending.id.clone()], &settings)
        .unwrap();

    let events = h.finish(sent.generation_id);

    let GenerationEvent::Error { error, .. } = events.last().unwrap() else {
        panic!("{events:?}");
    };
    assert_eq!(error.kind, ErrorKind::ContextFull);
    assert!(error.message.contains("512"), "{}", error.message);
    let messages = h
        .state
        .store
        .get_conversation(&sent.conversation.id)
        .unwrap()
        .messages;
    assert_eq!(messages[0].text, "When is high tide?");
    let kept = h.state.store.message_documents(&messages[0].id).unwrap();
    assert_eq!(kept[0].name, "tides.md");
    assert!(!h.state.chat.is_busy(), "the next message can be sent");
}
