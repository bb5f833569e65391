//! Knowing the machine: a model that cannot fit is refused in words before anything changes,
//! and the memory the model uses is reported from MLX's own counters.

use gemma::memory::DeviceInfo;

use super::*;
use crate::settings::Settings;

/// A machine of `memory` bytes that lets the model hold `working_set` of them.
fn machine(memory: u64, working_set: u64) -> DeviceInfo {
    DeviceInfo {
        backend: "metal".into(),
        device_name: Some("Apple M1".into()),
        architecture: Some("applegpu_g13g".into()),
        memory_bytes: Some(memory),
        working_set_bytes: Some(working_set),
    }
}

#[test]
fn a_model_too_big_for_the_machine_is_refused_in_words_and_the_loaded_model_stays() {
    let h = Harness::with_model();
    let mut settings = Settings::load(&h.state.store);
    settings.context_length = 32_768;
    settings.context_length_chosen = true;
    let settings = settings.save(&h.state.store).unwrap();
    let before = h.state.models.state();
    let remembered = Settings::remembered_model(&h.state.store);
    let states_before = model_states(&h.events).len();
    // The fixture's weights are a few MB; the room for transients alone (1 GiB) does not fit.
    h.state
        .models
        .set_machine(machine(1_000_000_000, 600_000_000));

    let err = h
        .state
        .models
        .choose(&fixture_named("tiny-optiq"))
        .unwrap_err();

    assert_eq!(err.kind(), ErrorKind::ModelInvalid);
    let words = err.to_string();
    assert!(
        words.starts_with("tiny-optiq was not loaded: it needs about 1."),
        "{words}"
    );
    assert!(words.contains("with a 32768-token context"), "{words}");
    assert!(
        words.contains("has 0.6 GB for it (1.0 GB in all)"),
        "{words}"
    );
    assert!(words.contains("close other apps"), "{words}");
    // Nothing was lost: the model in use, the one remembered, the settings; no state was sent.
    assert_eq!(h.state.models.state(), before);
    assert_eq!(Settings::remembered_model(&h.state.store), remembered);
    assert_eq!(Settings::load(&h.state.store), settings);
    assert_eq!(model_states(&h.events).len(), states_before);
    let sent = h.send("Still there?", &short()).unwrap();
    assert!(matches!(
        h.finish(sent.generation_id).last(),
        Some(GenerationEvent::Done { .. })
    ));

    // A machine with room loads it.
    h.state
        .models
        .set_machine(machine(16_000_000_000, 11_000_000_000));
    let state = h.state.models.choose(&fixture_named("tiny-optiq")).unwrap();
    assert!(matches!(state, ModelState::Ready { ref name, .. } if name == "tiny-optiq"));
}

#[test]
fn with_no_model_in_use_the_refusal_is_the_state_shown() {
    let h = Harness::new();
    h.state
        .models
        .set_machine(machine(1_000_000_000, 600_000_000));

    let err = h.state.models.choose(&fixture()).unwrap_err();

    let ModelState::Failed { message, dir } = h.state.models.state() else {
        panic!("{:?}", h.state.models.state());
    };
    assert_eq!(message, err.to_string());
    assert!(message.contains("it would run out of memory"), "{message}");
    assert_eq!(
        dir.as_deref(),
        Some(fixture().display().to_string().as_str())
    );
    assert_eq!(Settings::remembered_model(&h.state.store), None);
}

#[test]
fn the_estimate_reads_every_stored_byte_from_the_headers() {
    let dir = fixture();
    let needs = engine::fit::Needs::of(&dir, &gemma::LoadOptions::default()).unwrap();
    let stored: u64 = engine::fit::stored_by_part(&dir)
        .unwrap()
        .iter()
        .map(|(_, bytes)| bytes)
        .sum();
    let on_disk: u64 = gemma::weights::checkpoint_files(&dir)
        .unwrap()
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    // The tiny fixture has every part: the PLE table (read from the file) and both towers.
    assert!(needs.ple_table > 0 && needs.towers > 0, "{needs:?}");
    assert_eq!(needs.weights + needs.ple_table + needs.towers, stored);
    assert!(
        stored < on_disk && on_disk - stored < 1 << 20,
        "only the headers are more"
    );
    assert!(needs.kv_bytes(8192) > needs.kv_bytes(4096));
}

#[test]
fn the_memory_in_use_is_read_from_mlx_after_a_load() {
    let _h = Harness::with_model();

    let usage = crate::commands::memory_usage();

    // The loaded fixture's weights are MLX arrays now (process-wide counters: at least them).
    assert!(usage.mlx_active_bytes > 0, "{usage:?}");
    assert!(usage.mlx_peak_bytes >= usage.mlx_active_bytes, "{usage:?}");
    assert!(usage.resident_bytes > 0, "{usage:?}");
}

#[test]
fn faster_answers_are_off_by_default_on_an_m1_and_on_on_an_m3_until_switched() {
    use crate::faster::FasterAnswers;
    let h = Harness::new();
    // Never switched (the harness switches it off for the other tests).
    h.state.store.remove_setting("faster_answers").unwrap();
    let m1 = machine(16_000_000_000, 11_000_000_000);
    let m3 = DeviceInfo {
        architecture: Some("applegpu_g15s".into()),
        ..m1.clone()
    };

    h.state.models.set_machine(m1);
    h.state.models.choose(&fixture()).unwrap();
    assert!(
        matches!(h.state.models.faster_answers(), FasterAnswers::Off { .. }),
        "{:?}",
        h.state.models.faster_answers()
    );

    h.state.models.set_machine(m3);
    h.state.models.choose(&fixture()).unwrap();
    assert!(
        matches!(h.state.models.faster_answers(), FasterAnswers::On { .. }),
        "{:?}",
        h.state.models.faster_answers()
    );

    // Switched off, it stays off on the machine whose default is on.
    h.state.models.set_faster_answers(false).unwrap();
    h.state.models.choose(&fixture()).unwrap();
    assert!(matches!(
        h.state.models.faster_answers(),
        FasterAnswers::Off { .. }
    ));
}

#[test]
fn a_tower_goes_back_soon_after_use_on_a_machine_without_room_to_keep_it() {
    let mut needs = engine::fit::Needs::default();
    needs.weights = 2_900_000_000;
    needs.towers = 900_000_000;
    let choose = |memory, working_set| {
        engine::fit::MachineDefaults::choose(&machine(memory, working_set), &needs)
    };
    // An 8 GB Mac lets the GPU hold ~5.3 GB: the model and its transients fit, the towers
    // beside them would leave less than a quarter free.
    let tight = choose(8_000_000_000, 5_300_000_000);
    let roomy = choose(32_000_000_000, 21_000_000_000);

    assert!(!tight.towers_warm && roomy.towers_warm);
    assert_eq!(crate::model_setup::tower_idle(&tight).as_secs(), 30);
    assert_eq!(
        crate::model_setup::tower_idle(&roomy),
        engine::policy::Policy::default().tower_idle
    );
}

#[test]
fn an_8_gb_mac_gets_its_context_length_until_the_user_chooses_one() {
    let h = Harness::new();
    let before = Settings::load(&h.state.store);
    assert_eq!(
        (before.context_length, before.machine_context),
        (16_384, None)
    );
    h.state.models.set_machine(machine(8 << 30, 5_700_000_000));

    h.state.models.choose(&fixture()).unwrap();

    // What Settings shows and every answer uses (`get_settings` and `send_message` read it).
    let settings = Settings::load(&h.state.store);
    assert_eq!(settings.context_length, 8192);
    assert!(!settings.context_length_chosen);
    assert_eq!(
        settings.machine_context,
        Some(crate::settings::MachineContext {
            tokens: 8192,
            memory_bytes: Some(8 << 30),
            mac: true,
        })
    );

    // Saving the other settings keeps following the machine; a length the user sets wins,
    // here and on a bigger machine.
    let saved = Settings {
        temperature: 0.0,
        ..settings
    }
    .save(&h.state.store)
    .unwrap();
    assert_eq!(saved.context_length, 8192);
    let chosen = Settings {
        context_length: 12_000,
        context_length_chosen: true,
        ..saved
    }
    .save(&h.state.store)
    .unwrap();
    assert_eq!(chosen.context_length, 12_000);
    h.state
        .models
        .set_machine(machine(32 << 30, 21_000_000_000));
    h.state.models.choose(&fixture()).unwrap();
    let settings = Settings::load(&h.state.store);
    assert_eq!(settings.context_length, 12_000);
    assert_eq!(settings.machine_context.map(|m| m.tokens), Some(16_384));
    // Back to the machine's: the bigger machine's length.
    let back = Settings {
        context_length_chosen: false,
        ..settings
    }
    .save(&h.state.store)
    .unwrap();
    assert_eq!(back.context_length, 16_384);
}

#[test]
fn the_fit_check_uses_the_machines_context_length_when_the_user_chose_none() {
    let h = Harness::new();
    // With the room for transients and MLX's cache (1 GiB), the fixture needs ~1.09 GB at the
    // machine's 8k and ~1.21 GB at 128k (a length the user chose): 1.2 GB holds only the first.
    let tight = machine(2_000_000_000, 1_200_000_000);
    h.state.models.set_machine(tight.clone());
    h.state.models.choose(&fixture()).unwrap();
    let settings = Settings {
        context_length: 131_072,
        context_length_chosen: true,
        max_tokens: 1024,
        ..Settings::load(&h.state.store)
    }
    .save(&h.state.store)
    .unwrap();
    let err = h.state.models.choose(&fixture()).unwrap_err();
    assert!(err.to_string().contains("131072-token context"), "{err}");
    Settings {
        context_length_chosen: false,
        ..settings
    }
    .save(&h.state.store)
    .unwrap();
    h.state.models.choose(&fixture()).unwrap();
}

#[test]
fn the_encoders_idle_period_is_the_machines_until_chosen_and_applies_at_once() {
    use crate::model_setup::TowerIdle;
    let h = Harness::new();
    let tower_idle = |state: ModelState| match state {
        ModelState::Ready { tower_idle, .. } => tower_idle,
        other => panic!("{other:?}"),
    };
    // A machine without room to keep the towers beside the model (the fixture with its 1 GiB
    // of room for transients, ~1.09 GB, leaves less than a quarter of 1.2 GB): 30 seconds.
    h.state
        .models
        .set_machine(machine(2_000_000_000, 1_200_000_000));
    let ready = h.state.models.choose(&fixture()).unwrap();
    let machines = TowerIdle {
        secs: 30,
        machine_secs: 30,
        chosen: false,
    };
    assert_eq!(tower_idle(ready), machines);

    let states = model_states(&h.events).len();
    let state = h.state.models.set_tower_idle(Some(1800)).unwrap();
    let chosen = TowerIdle {
        secs: 1800,
        chosen: true,
        ..machines
    };
    assert_eq!(tower_idle(state.clone()), chosen);
    // The window hears it (the panel shows it) without a reload.
    assert_eq!(model_states(&h.events).len(), states + 1);
    assert_eq!(model_states(&h.events).last(), Some(&state));

    // Kept for the next load; a period not offered is refused and changes nothing.
    assert_eq!(
        tower_idle(h.state.models.choose(&fixture()).unwrap()),
        chosen
    );
    let err = h.state.models.set_tower_idle(Some(45)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(tower_idle(h.state.models.state()), chosen);

    // Back to the machine's; a roomy machine's is the engine's five minutes.
    assert_eq!(
        tower_idle(h.state.models.set_tower_idle(None).unwrap()),
        machines
    );
    h.state
        .models
        .set_machine(machine(32 << 30, 21_000_000_000));
    let roomy = tower_idle(h.state.models.choose(&fixture()).unwrap());
    assert_eq!((roomy.secs, roomy.chosen), (300, false));
    // Chosen with no model loaded: kept, applied at the next load.
    h.state.models.forget().unwrap();
    h.state.models.set_tower_idle(Some(0)).unwrap();
    assert_eq!(
        tower_idle(h.state.models.choose(&fixture()).unwrap()).secs,
        0
    );
}
