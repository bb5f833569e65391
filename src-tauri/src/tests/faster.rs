//! Faster answers: drafting with the assistant model beside the target, and what happens when
//! it does not fit, is missing or fails to download.

use super::*;

/// A copy of the tiny model in a fresh folder, with `drafter` (a copy of the tiny drafter with
/// `edit` applied to its config) beside it, or nothing beside it.
fn model_with_drafter(
    root: &std::path::Path,
    edit: Option<&dyn Fn(&mut serde_json::Value)>,
) -> PathBuf {
    let copy = |from: &std::path::Path, to: &std::path::Path| {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap().flatten() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    };
    let model = root.join("gemma-4-tiny");
    copy(&fixture(), &model);
    if let Some(edit) = edit {
        let drafter = root.join("gemma-4-tiny-assistant");
        copy(&fixture_named("tiny-assistant"), &drafter);
        let path = drafter.join("config.json");
        let mut config: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        edit(&mut config);
        std::fs::write(&path, config.to_string()).unwrap();
    }
    model
}

#[test]
fn faster_answers_draft_with_the_assistant_beside_the_model_and_can_be_switched_off() {
    use crate::faster::FasterAnswers;
    let h = Harness::with_model();
    assert!(matches!(
        h.state.models.faster_answers(),
        FasterAnswers::Off { drafter: Some(ref d) } if d.ends_with("tiny-assistant")
    ));
    let on = h.state.models.set_faster_answers(true).unwrap();
    let FasterAnswers::On {
        drafter,
        block_size,
        parameters,
    } = on
    else {
        panic!("{on:?}");
    };
    assert!(drafter.ends_with("tiny-assistant"));
    assert_eq!(block_size, 4);
    assert!(parameters > 0);
    let sent = h.send("Tell me about rivers.", &short()).unwrap();
    let events = h.finish(sent.generation_id);
    let Some(GenerationEvent::Done { usage, .. }) = events.last() else {
        panic!("{events:?}");
    };
    let per_round = usage
        .tokens_per_round
        .expect("a drafted answer says tokens per round");
    assert!((1.0..=4.0).contains(&per_round), "{per_round}");
    let stored = h
        .state
        .store
        .get_conversation(&sent.conversation.id)
        .unwrap();
    let answer = stored.messages.last().unwrap();
    assert_eq!(
        answer.usage.as_ref().and_then(|u| u.tokens_per_round),
        Some(per_round)
    );
    // Off, and still off after a restart; answers are plain again.
    assert!(matches!(
        h.state.models.set_faster_answers(false).unwrap(),
        FasterAnswers::Off { .. }
    ));
    let sent = h.send("And the sea?", &short()).unwrap();
    let events = h.finish(sent.generation_id);
    let Some(GenerationEvent::Done { usage, .. }) = events.last() else {
        panic!("{events:?}");
    };
    assert_eq!(usage.tokens_per_round, None);
    let (state, _events, _dir) = h.restart();
    assert!(!Settings::faster_answers_or(&state.store, true));
}

#[test]
fn a_drafter_that_does_not_fit_is_refused_in_words_and_a_missing_one_is_named() {
    use crate::faster::FasterAnswers;
    let h = Harness::new();
    Settings::set_faster_answers(&h.state.store, true).unwrap();
    let root = tempfile::tempdir().unwrap();
    let misfit = |c: &mut serde_json::Value| c["text_config"]["sliding_window"] = 64.into();
    let model = model_with_drafter(&root.path().join("a"), Some(&misfit));
    h.state.models.choose(&model).unwrap();
    match h.state.models.faster_answers() {
        FasterAnswers::Refused { drafter, reason } => {
            assert!(drafter.ends_with("gemma-4-tiny-assistant"));
            assert!(reason.contains("sliding_window is 64"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // The model answers without it.
    let sent = h.send("Hello", &short()).unwrap();
    let events = h.finish(sent.generation_id);
    assert!(
        matches!(events.last(), Some(GenerationEvent::Done { .. })),
        "{events:?}"
    );

    let alone = model_with_drafter(&root.path().join("b"), None);
    h.state.models.choose(&alone).unwrap();
    match h.state.models.faster_answers() {
        FasterAnswers::Missing { repo, .. } => {
            assert_eq!(repo, "mlx-community/gemma-4-E4B-it-assistant-bf16")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_drafter_downloads_from_settings_while_the_model_answers_then_drafts() {
    use crate::faster::FasterAnswers;
    let repo = model_store::DRAFTER_REPO;
    let h = Harness::with_hub(&serve_hub(repo, &fixture_named("tiny-assistant")));
    Settings::set_faster_answers(&h.state.store, true).unwrap();
    let root = tempfile::tempdir().unwrap();
    h.state
        .models
        .choose(&model_with_drafter(root.path(), None))
        .unwrap();
    assert!(matches!(
        h.state.models.faster_answers(),
        FasterAnswers::Missing { failed: None, .. }
    ));

    h.state.models.start_drafter_download().unwrap();
    // The model answers while the drafter downloads (alone, not drafted).
    let sent = h.send("Hello there", &short()).unwrap();
    assert!(matches!(
        h.finish(sent.generation_id).last(),
        Some(GenerationEvent::Done { .. })
    ));
    let drafter = poll("the drafter to arrive", 60, || {
        match h.state.models.faster_answers() {
            FasterAnswers::On { drafter, .. } => Some(drafter),
            FasterAnswers::Missing {
                failed: Some(why), ..
            } => panic!("{why}"),
            _ => None,
        }
    });
    let folder = h
        .data_dir
        .join("models")
        .join("gemma-4-E4B-it-assistant-bf16");
    assert_eq!(drafter, folder.display().to_string());
    // Progress was shown, in the drafter's bytes, and the last word was "on".
    let total: u64 = std::fs::read_dir(fixture_named("tiny-assistant"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let shown: Vec<FasterAnswers> = h
        .events
        .all()
        .into_iter()
        .filter_map(|e| match e {
            Recorded::FasterAnswers(state) => Some(state),
            _ => None,
        })
        .collect();
    assert!(shown.iter().any(
        |s| matches!(s, FasterAnswers::Downloading { progress } if progress.bytes_total == total)
    ));
    assert!(
        matches!(shown.last(), Some(FasterAnswers::On { .. })),
        "{shown:?}"
    );
    // Answers are drafted now.
    let sent = h.send("And the sea?", &short()).unwrap();
    let events = h.finish(sent.generation_id);
    let Some(GenerationEvent::Done { usage, .. }) = events.last() else {
        panic!("{events:?}");
    };
    assert!(usage.tokens_per_round.is_some(), "{usage:?}");
}

#[test]
fn a_drafter_download_that_fails_says_why_and_the_model_answers_alone() {
    use crate::faster::FasterAnswers;
    // The hub knows another repository only: the drafter's file list is a 404.
    let h = Harness::with_hub(&serve_hub("someone/else", &fixture_named("tiny-assistant")));
    Settings::set_faster_answers(&h.state.store, true).unwrap();
    let root = tempfile::tempdir().unwrap();
    h.state
        .models
        .choose(&model_with_drafter(root.path(), None))
        .unwrap();
    h.state.models.start_drafter_download().unwrap();
    let why = poll("the failure to be said", 60, || {
        match h.state.models.faster_answers() {
            FasterAnswers::Missing { failed, .. } => failed,
            _ => None,
        }
    });
    assert!(
        why.starts_with("The download stopped: ") && why.contains("404"),
        "{why}"
    );
    let sent = h.send("Hello", &short()).unwrap();
    let events = h.finish(sent.generation_id);
    let Some(GenerationEvent::Done { usage, .. }) = events.last() else {
        panic!("{events:?}");
    };
    assert_eq!(usage.tokens_per_round, None);
    // With no model there is nothing to draft for.
    h.state.models.forget().unwrap();
    assert!(matches!(
        h.state.models.start_drafter_download(),
        Err(Error::NoModel)
    ));
}

#[test]
fn switching_models_checks_the_drafter_against_the_new_one_and_never_keeps_the_old_one() {
    use crate::faster::FasterAnswers;
    let h = Harness::new();
    Settings::set_faster_answers(&h.state.store, true).unwrap();
    // The tiny model: its assistant sits beside it and fits.
    h.state.models.choose(&fixture()).unwrap();
    assert!(matches!(
        h.state.models.faster_answers(),
        FasterAnswers::On { ref drafter, .. } if drafter.ends_with("tiny-assistant")
    ));
    // Another model whose only drafter was made for a different target: refused, and the
    // drafter of the model before does not carry over.
    let root = tempfile::tempdir().unwrap();
    let misfit = |c: &mut serde_json::Value| c["text_config"]["sliding_window"] = 64.into();
    let other = model_with_drafter(root.path(), Some(&misfit));
    h.state.models.choose(&other).unwrap();
    match h.state.models.faster_answers() {
        FasterAnswers::Refused { drafter, .. } => {
            assert!(
                drafter.starts_with(&root.path().display().to_string()),
                "{drafter}"
            )
        }
        other => panic!("{other:?}"),
    }
    let sent = h.send("Hello", &short()).unwrap();
    let events = h.finish(sent.generation_id);
    let Some(GenerationEvent::Done { usage, .. }) = events.last() else {
        panic!("{events:?}");
    };
    assert_eq!(usage.tokens_per_round, None, "answered without a drafter");
    // Back to the tiny model: its own assistant again.
    h.state.models.choose(&fixture()).unwrap();
    assert!(matches!(
        h.state.models.faster_answers(),
        FasterAnswers::On { ref drafter, .. } if drafter.ends_with("tiny-assistant")
    ));
}
