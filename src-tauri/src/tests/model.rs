//! Choosing, switching and forgetting the model; what cannot be loaded is refused in words and
//! the loaded model stays.

use super::*;

#[test]
fn a_folder_that_is_not_a_model_is_refused_in_words_and_the_loaded_model_stays() {
    let h = Harness::with_model();
    let not_a_model = h.data_dir.join("photos");
    std::fs::create_dir_all(&not_a_model).unwrap();

    let err = h.state.models.choose(&not_a_model).unwrap_err();

    assert_eq!(err.kind(), ErrorKind::ModelInvalid);
    assert!(err.to_string().contains("config.json"), "{err}");
    assert!(matches!(h.state.models.state(), ModelState::Ready { .. }));
}

#[test]
fn the_model_chosen_last_is_found_again_on_the_next_start() {
    let h = Harness::with_model();
    let data_dir = h.data_dir.clone();
    drop(h.state);
    let events = Arc::new(Recorder::default());
    let state = AppState::open(
        DataDir::new(data_dir),
        HfCache::none(),
        "http://127.0.0.1:9".into(),
        events.clone(),
    )
    .unwrap();

    state.models.load_at_startup();

    assert!(matches!(state.models.state(), ModelState::Ready { .. }));
    let states: Vec<String> = events
        .all()
        .into_iter()
        .filter_map(|e| match e {
            Recorded::ModelState(s) => Some(
                serde_json::to_value(&s).unwrap()["state"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            ),
            _ => None,
        })
        .collect();
    assert_eq!(states, ["loading", "ready"]);
}

#[test]
fn settings_can_switch_to_another_model_which_is_described_and_kept_for_the_next_start() {
    let h = Harness::with_model();
    let ModelState::Ready { checkpoint, .. } = h.state.models.state() else {
        panic!("not ready");
    };
    assert_eq!(checkpoint.name, "tiny");
    assert_eq!(checkpoint.quantization_bits, Some(4));
    assert_eq!(checkpoint.quantization_mode.as_deref(), Some("affine"));
    assert!(checkpoint.parameters.is_some_and(|n| n > 1_000_000));
    assert!(checkpoint.size_bytes > 1_000_000);
    assert!(checkpoint.vision && checkpoint.audio);

    let other = fixture_named("tiny-plmp-bf16");
    let state = h.state.models.choose(&other).unwrap();
    let ModelState::Ready {
        name,
        dir,
        context_window,
        checkpoint,
        ..
    } = &state
    else {
        panic!("{state:?}");
    };
    assert_eq!(name, "tiny-plmp-bf16");
    assert_eq!(dir, &other.display().to_string());
    assert_eq!(*context_window, 131_072);
    assert!(!checkpoint.audio, "this checkpoint has no audio tower");
    assert_eq!(&h.state.models.state(), &state);

    // The new model answers.
    let sent = h.send("Hello there", &short()).unwrap();
    let events = h.finish(sent.generation_id);
    assert!(
        matches!(events.last(), Some(GenerationEvent::Done { .. })),
        "{events:?}"
    );

    let (state, _, _dir) = h.restart();
    state.models.load_at_startup();
    let ModelState::Ready { name, .. } = state.models.state() else {
        panic!("{:?}", state.models.state());
    };
    assert_eq!(name, "tiny-plmp-bf16");
}

#[test]
fn switching_models_while_an_answer_streams_stops_it_first_and_keeps_it() {
    let h = Harness::with_model();
    let sent = h.send("Tell me a long story", &long()).unwrap();
    while h.generation_events(sent.generation_id).len() < 3 {
        std::thread::sleep(Duration::from_millis(1));
    }

    let state = h.state.models.choose(&fixture_named("tiny-optiq")).unwrap();

    assert!(matches!(state, ModelState::Ready { ref name, .. } if name == "tiny-optiq"));
    let events = h.finish(sent.generation_id);
    let Some(GenerationEvent::Done { usage, .. }) = events.last() else {
        panic!("{events:?}");
    };
    // Random weights may end a story early; a long one ends because of the switch.
    if usage.stop_reason == StopReason::Cancelled {
        let answer = h
            .state
            .store
            .get_conversation(&sent.conversation.id)
            .unwrap()
            .messages[1]
            .clone();
        assert_eq!(answer.status, MessageStatus::Stopped);
        assert_eq!(answer.text, streamed_text(&events));
    }
    assert!(!h.state.chat.is_busy());
    // The same chat goes on with the new model.
    let next = h
        .send_to(Some(&sent.conversation.id), "And then?", &short())
        .unwrap();
    assert!(matches!(
        h.finish(next.generation_id).last(),
        Some(GenerationEvent::Done { .. })
    ));
}

#[test]
fn forgetting_the_model_unloads_it_and_the_next_start_shows_the_picker() {
    let h = Harness::with_model();

    assert_eq!(h.state.models.forget().unwrap(), ModelState::None);

    assert_eq!(h.state.models.state(), ModelState::None);
    let err = h.send("Hello", &short()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoModel);
    let (state, events, _dir) = h.restart();
    state.models.load_at_startup();
    assert_eq!(state.models.state(), ModelState::None);
    assert!(model_states(&events).is_empty(), "nothing was loaded");
}

#[test]
fn a_last_used_model_whose_folder_is_gone_is_named_at_start() {
    let h = Harness::new();
    let copy = h.data_dir.join("elsewhere").join("my-gemma");
    std::fs::create_dir_all(&copy).unwrap();
    for entry in std::fs::read_dir(fixture()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
    }
    h.state.models.choose(&copy).unwrap();
    // Another model is on disk, but the one the user chose is named, not silently replaced.
    let models_dir = h.data_dir.join("models");
    std::os::unix::fs::symlink(fixture(), models_dir.join("tiny")).unwrap();
    std::fs::remove_dir_all(&copy).unwrap();

    let (state, events, _dir) = h.restart();
    state.models.load_at_startup();

    let expected = ModelState::Failed {
        dir: Some(copy.display().to_string()),
        message: format!("my-gemma at {} is gone: choose another", copy.display()),
    };
    assert_eq!(state.models.state(), expected);
    assert_eq!(model_states(&events), [expected]);
}

#[test]
fn a_hugging_face_cache_folder_can_be_chosen_as_it_is() {
    let h = Harness::new();
    let repo = h
        .data_dir
        .join("hub")
        .join("models--mlx-community--gemma-4-e4b-it-4bit");
    let snapshot = repo.join("snapshots").join("0123abcd");
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs").join("main"), "0123abcd").unwrap();
    for entry in std::fs::read_dir(fixture()).unwrap() {
        let entry = entry.unwrap();
        std::os::unix::fs::symlink(entry.path(), snapshot.join(entry.file_name())).unwrap();
    }

    let state = h.state.models.choose(&repo).unwrap();

    let ModelState::Ready { name, dir, .. } = state else {
        panic!("{state:?}");
    };
    assert_eq!(name, "mlx-community/gemma-4-e4b-it-4bit");
    assert_eq!(dir, snapshot.display().to_string());
}

#[test]
fn a_model_of_another_architecture_is_refused_in_words_and_the_loaded_one_stays() {
    let h = Harness::with_model();
    let llama = h.data_dir.join("llama-3");
    std::fs::create_dir_all(&llama).unwrap();
    std::fs::write(llama.join("config.json"), r#"{"model_type": "llama"}"#).unwrap();

    let err = h.state.models.choose(&llama).unwrap_err();

    assert_eq!(err.kind(), ErrorKind::ModelInvalid);
    assert!(
        err.to_string().ends_with(
            r#"This is a Llama model (model_type "llama"); Gemma Desk runs Gemma 4 E4B"#
        ),
        "{err}"
    );
    assert!(matches!(h.state.models.state(), ModelState::Ready { ref name, .. } if name == "tiny"));
}

#[test]
fn only_the_offered_checkpoints_can_be_downloaded() {
    let h = Harness::new();
    let err = h
        .state
        .models
        .start_download(Some("someone/not-gemma"))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(
        err.to_string(),
        r#""someone/not-gemma" is not one of the models Gemma Desk downloads"#
    );
    assert_eq!(h.state.models.state(), ModelState::None);
}

#[test]
fn recent_model_folders_are_offered_after_forget_and_load_again_without_browsing() {
    let h = Harness::with_model();
    let other = fixture_named("tiny-plmp-bf16");
    h.state.models.choose(&other).unwrap();
    let names = |h: &Harness| -> Vec<String> {
        h.state
            .models
            .recent()
            .into_iter()
            .map(|recent| recent.name)
            .collect()
    };
    assert_eq!(names(&h), ["tiny-plmp-bf16", "tiny"]);

    // Forget leaves the list: it is the way back.
    h.state.models.forget().unwrap();
    assert_eq!(names(&h), ["tiny-plmp-bf16", "tiny"]);
    let tiny = fixture().display().to_string();
    let state = h.state.models.open_recent(&tiny).unwrap();
    assert!(
        matches!(&state, ModelState::Ready { name, .. } if name == "tiny"),
        "{state:?}"
    );
    assert_eq!(names(&h), ["tiny", "tiny-plmp-bf16"]);

    // A folder that is not on the list is refused in words; the model in use stays.
    let elsewhere = h.data_dir.join("elsewhere").display().to_string();
    let err = h.state.models.open_recent(&elsewhere).unwrap_err();
    assert!(
        err.to_string()
            .contains("not one of the recent model folders"),
        "{err}"
    );
    assert!(matches!(h.state.models.state(), ModelState::Ready { name, .. } if name == "tiny"));

    // A folder that is gone is no longer offered.
    let root = tempfile::tempdir().unwrap();
    let copy = root.path().join("gemma-copy");
    std::fs::create_dir_all(&copy).unwrap();
    for entry in std::fs::read_dir(fixture()).unwrap().flatten() {
        std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
    }
    h.state.models.choose(&copy).unwrap();
    assert_eq!(names(&h), ["gemma-copy", "tiny", "tiny-plmp-bf16"]);
    h.state.models.choose(&fixture()).unwrap();
    std::fs::remove_dir_all(&copy).unwrap();
    assert_eq!(names(&h), ["tiny", "tiny-plmp-bf16"]);
}

#[test]
fn loading_says_what_it_reads_without_repeating_the_model_name() {
    let h = Harness::new();
    h.state
        .models
        .choose(&fixture_named("tiny-audio-e4b"))
        .unwrap();
    let stages: Vec<(String, String)> = h
        .events
        .all()
        .into_iter()
        .filter_map(|e| match e {
            Recorded::ModelState(ModelState::Loading { name, stage, .. }) => Some((name, stage)),
            _ => None,
        })
        .collect();
    let [(name, stage)] = &stages[..] else {
        panic!("{stages:?}");
    };
    assert_eq!(name, "tiny-audio-e4b");
    assert!(!stage.contains(name.as_str()), "{stage}");
    assert!(
        stage.starts_with("Reading ") && stage.ends_with(" GB of weights"),
        "{stage}"
    );
}
