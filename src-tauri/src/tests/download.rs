//! Downloads from Settings, from a hub on 127.0.0.1: the new build replaces the model in use,
//! a failed one says why and the model keeps answering.

use super::*;

#[test]
fn settings_can_download_another_build_which_then_replaces_the_model_in_use() {
    let repo = "mlx-community/gemma-4-e4b-it-8bit";
    let h = Harness::with_hub(&serve_hub(repo, &fixture_named("tiny-plmp-bf16")));
    h.state.models.choose(&fixture()).unwrap();

    h.state.models.start_download(Some(repo)).unwrap();

    let ready = poll("the download to finish", 120, || {
        match h.state.models.state() {
            ready @ ModelState::Ready { .. } if !matches!(&ready, ModelState::Ready { name, .. } if name == "tiny") => {
                Some(ready)
            }
            ModelState::Failed { message, .. } => panic!("the download failed: {message}"),
            _ => None,
        }
    });
    let ModelState::Ready { name, dir, .. } = ready else {
        unreachable!()
    };
    assert_eq!(name, repo);
    let folder = h.data_dir.join("models").join("gemma-4-e4b-it-8bit");
    assert_eq!(dir, folder.display().to_string());
    let total: u64 = std::fs::read_dir(fixture_named("tiny-plmp-bf16"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    // The model in use stayed ready (chatting goes on) with the download shown beside it.
    let states = model_states(&h.events);
    assert!(
        !states
            .iter()
            .any(|s| matches!(s, ModelState::Downloading { .. })),
        "the download took the model's place: {states:?}"
    );
    let progress: Vec<u64> = states
        .into_iter()
        .filter_map(|s| match s {
            ModelState::Ready {
                name,
                download: Some(side),
                ..
            } => {
                assert_eq!((name.as_str(), side.repo.as_str()), ("tiny", repo));
                side.progress.map(|p| p.bytes_total)
            }
            _ => None,
        })
        .collect();
    assert!(!progress.is_empty(), "no progress was shown");
    assert!(
        progress.iter().all(|&t| t == total),
        "{progress:?} of {total}"
    );
    // The downloaded model answers, and is the one loaded at the next start.
    let sent = h.send("Hello there", &short()).unwrap();
    assert!(matches!(
        h.finish(sent.generation_id).last(),
        Some(GenerationEvent::Done { .. })
    ));
    let (state, _, _dir) = h.restart();
    state.models.load_at_startup();
    assert!(matches!(state.models.state(), ModelState::Ready { name, .. } if name == repo));
}

#[test]
fn a_download_beside_the_model_that_fails_says_why_and_the_model_keeps_answering() {
    // The hub has no such repository: the file list is a 404.
    let h = Harness::with_hub(&serve_hub("someone/else", &fixture_named("tiny-plmp-bf16")));
    h.state.models.choose(&fixture()).unwrap();
    h.state
        .models
        .start_download(Some("mlx-community/gemma-4-e4b-it-8bit"))
        .unwrap();
    let failed = poll("the failure to be said", 60, || {
        match h.state.models.state() {
            ModelState::Ready {
                download: Some(side),
                ..
            } => side.failed,
            _ => None,
        }
    });
    assert!(
        failed.starts_with("The download stopped: ") && failed.contains("404"),
        "{failed}"
    );
    let sent = h.send("Hello there", &short()).unwrap();
    assert!(matches!(
        h.finish(sent.generation_id).last(),
        Some(GenerationEvent::Done { .. })
    ));
}
