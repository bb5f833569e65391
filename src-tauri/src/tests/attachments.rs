//! Images and recordings: attached, sent to the model, kept with the message.

use super::*;

#[test]
fn an_attached_image_is_sent_to_the_model_and_kept_with_the_message() {
    let h = Harness::with_model();
    let png = png_of(96, 64, [220, 30, 30]);
    let pending = h.state.attachments.add_bytes("red.png", &png).unwrap();
    let settings = Settings {
        image_token_budget: 70,
        ..short()
    };

    let sent = h
        .send_with("What is this?", vec![pending.id.clone()], &settings)
        .unwrap();
    let events = h.finish(sent.generation_id);

    let GenerationEvent::Done { usage, .. } = events.last().unwrap() else {
        panic!("{events:?}");
    };
    assert!(
        usage.prompt_tokens > 70,
        "the image's soft tokens are in the prompt: {usage:?}"
    );
    let message = &h
        .state
        .store
        .get_conversation(&sent.conversation.id)
        .unwrap()
        .messages[0];
    assert_eq!(message.attachments.len(), 1);
    assert_eq!(message.attachments[0].hash, pending.id);
    assert!(h
        .state
        .attachments
        .preview(&message.attachments[0].id)
        .unwrap()
        .starts_with("data:image/png"));
    // Shown full size: the whole image, every pixel of it.
    let full = h
        .state
        .attachments
        .full_view(&message.attachments[0].id)
        .unwrap();
    let encoded = full.strip_prefix("data:image/png;base64,").unwrap();
    let bytes =
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, encoded).unwrap();
    let shown = image::load_from_memory(&bytes).unwrap().to_rgb8();
    assert_eq!(shown.dimensions(), (96, 64));
    assert_eq!(shown.get_pixel(50, 30), &image::Rgb([220, 30, 30]));
    // Sent attachments are no longer pending.
    assert!(h.state.attachments.resolve(&[pending.id]).is_err());
}

#[test]
fn an_attached_recording_is_heard_by_the_model_and_kept_with_the_message_after_a_restart() {
    let h = Harness::with_model();
    let ModelState::Ready { audio, .. } = h.state.models.state() else {
        panic!("the fixture is loaded");
    };
    assert!(audio, "the tiny fixture has an audio tower");
    let bytes = crate::attachments::tone_wav(2.0, 16_000);
    let pending = h.state.attachments.add_bytes("note.wav", &bytes).unwrap();
    assert_eq!(pending.kind, chats::AttachmentKind::Audio);

    let sent = h
        .send_with("What is said here?", vec![pending.id.clone()], &short())
        .unwrap();
    let events = h.finish(sent.generation_id);

    let GenerationEvent::Done { usage, .. } = events.last().unwrap() else {
        panic!("{events:?}");
    };
    // 2 s is 50 soft tokens (one per 40 ms), between its begin- and end-of-audio tokens.
    assert!(
        usage.prompt_tokens > 52,
        "the recording's soft tokens are in the prompt: {usage:?}"
    );
    // Answered: the answer is shown as it streamed and kept as shown, with its usage.
    let answer = &h
        .state
        .store
        .get_conversation(&sent.conversation.id)
        .unwrap()
        .messages[1];
    assert_eq!(answer.status, MessageStatus::Complete);
    assert!(usage.generated_tokens > 0, "{usage:?}");
    assert_eq!(answer.text, streamed_text(&events));
    // Kept as shown: the counts exactly, the timings to well below what the stats line shows
    // (serde_json reads a float back to within one unit of its last place).
    let kept_usage = answer.usage.as_ref().expect("the answer keeps its usage");
    let timings = |u: &chats::Usage| {
        [
            u.time_to_first_token_ms,
            u.prefill_tokens_per_second,
            u.decode_tokens_per_second,
        ]
    };
    for (kept, shown) in timings(kept_usage).into_iter().zip(timings(usage)) {
        assert!(
            (kept - shown).abs() <= 1e-9 * shown.abs(),
            "{kept_usage:?} vs {usage:?}"
        );
    }
    assert_eq!(
        chats::Usage {
            time_to_first_token_ms: usage.time_to_first_token_ms,
            prefill_tokens_per_second: usage.prefill_tokens_per_second,
            decode_tokens_per_second: usage.decode_tokens_per_second,
            ..kept_usage.clone()
        },
        *usage
    );
    let conversation_id = sent.conversation.id.clone();
    let (state, events, _dir) = h.restart();
    let conversation = state.store.get_conversation(&conversation_id).unwrap();
    let kept = &conversation.messages[0].attachments;
    assert_eq!(kept.len(), 1);
    assert_eq!(
        (kept[0].kind, kept[0].duration_ms, kept[0].name.as_deref()),
        (chats::AttachmentKind::Audio, Some(2_000), Some("note.wav"))
    );
    assert_eq!(state.attachments.saved_audio(&kept[0].id).unwrap(), bytes);

    // A follow-up after the restart hears the recording again, decoded from app data.
    state.models.choose(&fixture()).unwrap();
    let again = state
        .chat
        .send(
            SendRequest {
                conversation_id: Some(conversation_id),
                text: "And now?".into(),
                attachment_ids: vec![],
                system_prompt: None,
            },
            &short(),
        )
        .unwrap();
    let done = poll("the follow-up's answer", 120, || {
        events.all().into_iter().find_map(|e| match e {
            Recorded::Generation(GenerationEvent::Done {
                generation_id,
                usage,
                ..
            }) if generation_id == again.generation_id => Some(usage),
            Recorded::Generation(GenerationEvent::Error {
                generation_id,
                error,
                ..
            }) if generation_id == again.generation_id => {
                panic!("the follow-up failed: {error:?}")
            }
            _ => None,
        })
    });
    assert!(done.prompt_tokens > usage.prompt_tokens, "{done:?}");
}

#[test]
fn a_model_that_cannot_hear_refuses_audio_in_words_and_keeps_it_attached() {
    let h = Harness::new();
    let state = h
        .state
        .models
        .choose(&fixture_named("tiny-plmp-bf16"))
        .unwrap();
    assert!(
        matches!(state, ModelState::Ready { audio: false, .. }),
        "{state:?}"
    );
    let pending = h
        .state
        .attachments
        .add_bytes("note.wav", &crate::attachments::tone_wav(1.0, 16_000))
        .unwrap();

    let err = h
        .send_with("Transcribe this", vec![pending.id.clone()], &short())
        .unwrap_err();

    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("cannot hear audio"), "{err}");
    assert!(h.state.store.list_conversations().unwrap().is_empty());
    assert!(
        h.state.attachments.resolve(&[pending.id]).is_ok(),
        "still attached"
    );
}

#[test]
fn an_image_pasted_from_the_clipboard_is_attached_like_a_dropped_png() {
    use crate::clipboard::{attach, ClipboardImage};
    let h = Harness::new();
    let rgba: Vec<u8> = (0..64 * 48u32)
        .flat_map(|i| [(i % 251) as u8, (i / 64) as u8, 200, 255])
        .collect();

    let pending = attach(
        &h.state.attachments,
        ClipboardImage {
            width: 64,
            height: 48,
            rgba,
        },
    )
    .unwrap();

    assert_eq!(pending.name, "pasted image.png");
    assert_eq!(pending.mime, "image/png");
    assert_eq!((pending.width, pending.height), (Some(64), Some(48)));
    assert!(pending
        .thumbnail
        .as_deref()
        .is_some_and(|t| t.starts_with("data:image/png;base64,")));
    // Sent like any attachment: the model sees it and the message keeps it.
    h.state.models.choose(&fixture()).unwrap();
    let sent = h
        .send_with("What is this?", vec![pending.id.clone()], &short())
        .unwrap();
    h.finish(sent.generation_id);
    let saved = h
        .state
        .store
        .get_conversation(&sent.conversation.id)
        .unwrap();
    assert_eq!(saved.messages[0].attachments.len(), 1);

    let err = attach(
        &h.state.attachments,
        ClipboardImage {
            width: 64,
            height: 48,
            rgba: vec![0; 10],
        },
    )
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(
        err.to_string(),
        "the clipboard's image is damaged (64 × 48 pixels in 10 bytes)"
    );
}

#[test]
fn the_drafts_count_holds_its_image_and_recording_as_the_prompt_will() {
    let h = Harness::with_model();
    let png = png_of(96, 64, [220, 30, 30]);
    let image = h.state.attachments.add_bytes("red.png", &png).unwrap();
    let sound = crate::attachments::tone_wav(2.0, 16_000);
    let recording = h.state.attachments.add_bytes("note.wav", &sound).unwrap();
    let settings = Settings {
        image_token_budget: 70,
        ..short()
    };
    let text = "What is this?";
    let ids = vec![image.id.clone(), recording.id.clone()];
    let text_only = h.state.chat.count_draft(text, &[], &settings).unwrap();

    let counted = h.state.chat.count_draft(text, &ids, &settings).unwrap();
    let alone = h.state.chat.count_draft("", &ids, &settings).unwrap();

    // 96×64 at the 70 budget is scaled to 480×288: 10 × 6 = 60 soft tokens; 2 s of sound 50
    // (one per 40 ms); each between its begin and end markers.
    assert_eq!(
        engine::image::soft_tokens_for(64, 96, engine::image::SoftTokenBudget::T70),
        60
    );
    assert!(
        counted >= text_only + 60 + 50 + 4,
        "{counted} vs {text_only}"
    );
    assert!(
        alone >= 60 + 50 + 4 && alone < counted,
        "{alone} vs {counted}"
    );
    // A bigger budget counts more for the same image.
    let larger = Settings {
        image_token_budget: 280,
        ..settings.clone()
    };
    assert!(h.state.chat.count_draft(text, &ids, &larger).unwrap() > counted + 150);

    // What the composer said is what the prompt holds.
    let sent = h.send_with(text, ids.clone(), &settings).unwrap();
    let usage = usage_of(&h.finish(sent.generation_id));
    assert_eq!(
        counted as u32,
        usage.prompt_tokens - prompt_len(&[user("")]),
        "{usage:?}"
    );
    // Sent attachments are no longer pending: they count for nothing.
    assert_eq!(
        h.state.chat.count_draft(text, &ids, &settings).unwrap(),
        text_only
    );
}
