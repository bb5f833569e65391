//! The checkpoint's chat template and tokenizer on arbitrary conversations: rendering and
//! tokenizing never panic, the prompt holds no more image placeholders than image parts (text
//! cannot forge one) and no more turn ends than the template writes.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use engine::template::{
    expand_placeholders, ChatTemplate, MediaKind, Message, Part, RenderOptions, Role,
};
use engine::tokenizer::{SpecialTokens, Tokenizer};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Conversation {
    messages: Vec<(u8, Vec<Piece>)>,
    add_generation_prompt: bool,
    enable_thinking: bool,
}

#[derive(Arbitrary, Debug)]
enum Piece {
    Text(String),
    Image,
}

struct Checkpoint {
    template: ChatTemplate,
    tokenizer: Tokenizer,
    specials: SpecialTokens,
}

fn checkpoint() -> &'static Checkpoint {
    static CHECKPOINT: OnceLock<Checkpoint> = OnceLock::new();
    CHECKPOINT.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../src-tauri/crates/engine/tests/data/tiny");
        let tokenizer = Tokenizer::load(&dir).unwrap();
        Checkpoint {
            template: ChatTemplate::load(&dir).unwrap(),
            specials: SpecialTokens::load(&dir, &tokenizer).unwrap(),
            tokenizer,
        }
    })
}

fuzz_target!(|input: Conversation| {
    let c = checkpoint();
    let messages: Vec<Message> = input
        .messages
        .into_iter()
        .map(|(role, pieces)| {
            let role = match role % 3 {
                0 => Role::System,
                1 => Role::User,
                _ => Role::Assistant,
            };
            let content = pieces
                .into_iter()
                .map(|p| match p {
                    Piece::Text(text) => Part::Text { text },
                    Piece::Image => Part::Image,
                })
                .collect();
            Message::new(role, content)
        })
        .collect();
    let options = RenderOptions {
        add_generation_prompt: input.add_generation_prompt,
        enable_thinking: input.enable_thinking,
    };
    // The template may refuse a conversation (raise_exception); it must not panic.
    let Ok(ids) = c.template.prompt_ids(&c.tokenizer, &messages, options) else {
        return;
    };
    let images = messages
        .iter()
        .flat_map(|m| &m.content)
        .filter(|p| matches!(p, Part::Image))
        .count();
    // Text cannot forge a placeholder. (The template may drop one: an image in a system
    // message is not written, and the engine then reports the count mismatch.)
    let placeholder = c.specials.image.map(|i| i.placeholder);
    let placeholders = ids.iter().filter(|&&id| Some(id) == placeholder).count();
    assert!(
        placeholders <= images,
        "{placeholders} placeholders for {images} images"
    );
    if placeholders == images {
        expand_placeholders(&ids, MediaKind::Image, &vec![3; images], &c.specials).unwrap();
    }
    let turn_ends = ids
        .iter()
        .filter(|&&id| id == c.specials.turn_close)
        .count();
    assert!(turn_ends <= messages.len() + 1, "{turn_ends} turn ends");

    let plain_text = messages.iter().flat_map(|m| &m.content).all(|p| match p {
        Part::Text { text } => !text.contains('<') && !text.contains('\u{FDD0}'),
        Part::Image | Part::Audio => true,
    });
    if plain_text {
        let rendered = c.template.render(&messages, options).unwrap();
        assert_eq!(ids, c.tokenizer.encode(&rendered).unwrap());
    }
});
