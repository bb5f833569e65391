//! The vision and audio towers on demand (docs/MODEL.md "Towers on demand", docs/ENGINE.md
//! "Idle release"): a loaded model holds neither tower in MLX memory; the first question about
//! an image or a clip reads that tower (and only that one), answers exactly as a model whose
//! towers were read at load, and after the idle period the tower is gone and memory is back at
//! the text-only figure; a later question reads it again.
//! Its own test binary: it measures MLX's process-wide active memory.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engine::audio::{prepare_samples, AudioClip, AudioLimits};
use engine::events::{ChatRequest, Event};
use engine::loaded::LoadedModel;
use engine::stream::{Session, StreamRequest};
use engine::template::{Message, Part, Role};
use engine::worker::Engine;
use gemma::weights::{checkpoint_files, read_header};
use gemma::LoadOptions;

/// MLX's counters are the process's: the tests of this file run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The fixture with both towers (the audio tower at E4B's size: ~610 MB).
fn dir() -> PathBuf {
    common::fixture().with_file_name("tiny-audio-e4b")
}

/// Room for MLX's rounding of each buffer and the small arrays a load or an answer leaves.
const MARGIN: usize = 256 * 1024;

/// Bytes of the checkpoint as stored: (all, vision tower, audio tower, per-layer table).
fn stored(dir: &Path) -> (usize, usize, usize, usize) {
    let (mut all, mut vision, mut audio, mut ple) = (0, 0, 0, 0);
    for path in checkpoint_files(dir).unwrap() {
        for (name, h) in read_header(&path).unwrap() {
            let bytes = h.shape.iter().product::<usize>() * h.dtype.bitsize() / 8;
            all += bytes;
            if name.starts_with("vision_tower.") || name.starts_with("embed_vision.") {
                vision += bytes;
            } else if name.starts_with("audio_tower.") || name.starts_with("embed_audio.") {
                audio += bytes;
            } else if name.contains("embed_tokens_per_layer.") {
                ple += bytes;
            }
        }
    }
    (all, vision, audio, ple)
}

/// MLX's active bytes with its buffer cache emptied.
fn active() -> usize {
    gemma::memory::release_cache().unwrap();
    gemma::memory::counters().unwrap().active
}

/// A 16 kHz signal with some structure, one second long, at `pitch` Hz.
fn clip_at(pitch: f32) -> Arc<AudioClip> {
    let samples: Vec<f32> = (0..16_000)
        .map(|i| {
            let t = i as f32 / 16_000.0;
            0.2 * (2.0 * std::f32::consts::PI * pitch * t).sin() * (0.5 + 0.5 * (7.0 * t).sin())
        })
        .collect();
    let prepared = prepare_samples(&samples, &AudioLimits::default()).unwrap();
    prepared.clips[0].clone()
}

fn clip() -> Arc<AudioClip> {
    clip_at(180.0)
}

fn image_question() -> Message {
    Message::new(
        Role::User,
        vec![
            Part::Image,
            Part::Text {
                text: "What is in this picture?".into(),
            },
        ],
    )
}

fn audio_question() -> Message {
    Message::new(
        Role::User,
        vec![
            Part::Text {
                text: "What do you hear?".into(),
            },
            Part::Audio,
        ],
    )
}

/// The greedy ids answering one question about the test image (or the clip), in a new
/// session.
fn answer(m: &LoadedModel, audio: bool) -> Vec<u32> {
    let prompt = if audio {
        m.prompt_with_tools(&[audio_question()], &[], false, &[], &[clip()])
    } else {
        m.prompt(&[image_question()], false, &[common::test_image()])
    }
    .unwrap();
    let mut ids = Vec::new();
    let cancel = AtomicBool::new(false);
    let options = common::greedy(6);
    let mut session = Session::new(&m.model);
    let request = StreamRequest::new(&mut session, &prompt, &options, &cancel);
    m.generate(request, |d| ids.extend(d.token)).unwrap();
    assert_eq!(ids.len(), 6, "the answer ran to its length");
    ids
}

fn load() -> LoadedModel {
    LoadedModel::load(&dir(), &LoadOptions::default()).unwrap()
}

#[test]
fn a_load_holds_no_tower_and_a_question_reads_only_its_own_until_released() {
    let _serial = serial();
    let (all, vision, audio, ple) = stored(&dir());
    assert!(
        vision > 1_000_000 && audio > 100_000_000,
        "the fixture's towers: vision {vision} bytes, audio {audio}"
    );
    let text_only = all - vision - audio - ple;

    let before = active();
    let m = load();
    let after_load = active() - before;
    eprintln!(
        "tiny-audio-e4b: checkpoint {all} bytes (vision {vision}, audio {audio}, PLE {ple}); \
         MLX active after load {after_load}"
    );
    assert!(
        after_load < text_only + MARGIN,
        "MLX holds {after_load} bytes after loading; the checkpoint less its towers and per-layer \
         table is {text_only}: a tower was read at load"
    );
    assert!(m.model.has_vision() && m.model.has_audio());
    assert_eq!((m.tower_bytes(), m.tower_loads()), ((0, 0), (0, 0)));

    // The first image question reads the vision tower, not the audio tower.
    let first = answer(&m, false);
    let with_vision = active() - before;
    assert_eq!(m.tower_loads(), (1, 0));
    assert!(m.last_tower_load().is_some());
    let (held, _) = m.tower_bytes();
    assert!(
        held >= vision,
        "the vision tower holds {held} bytes of {vision}"
    );
    assert!(
        with_vision >= after_load + vision && with_vision < after_load + vision + MARGIN,
        "after an image question MLX holds {with_vision} bytes: the load's {after_load} and the \
         vision tower's {vision} expected"
    );

    // Released (the idle period passed), it is gone: back at the text-only figure.
    assert!(m.release_idle_towers(Duration::ZERO));
    m.forget_media_features();
    let released = active() - before;
    assert_eq!(m.tower_bytes(), (0, 0));
    assert!(
        released < after_load + MARGIN,
        "after the release MLX holds {released} bytes, after the load {after_load}"
    );

    // A later question reads it again and answers the same.
    assert_eq!(answer(&m, false), first);
    assert_eq!(m.tower_loads(), (2, 0));

    // A clip reads the audio tower.
    assert!(m.release_idle_towers(Duration::ZERO));
    m.forget_media_features();
    answer(&m, true);
    let with_audio = active() - before;
    assert_eq!(m.tower_loads(), (2, 1));
    // Not quite the stored bytes: some stored tensors are folded at load.
    let (_, held) = m.tower_bytes();
    assert!(
        held > audio / 10 * 9,
        "the audio tower holds {held} bytes of {audio}"
    );
    assert!(
        with_audio >= after_load + held && with_audio < after_load + held + MARGIN,
        "after a clip MLX holds {with_audio} bytes: the load's {after_load} and the audio \
         tower's {held} expected"
    );
    // A tower used within the idle period stays.
    assert!(!m.release_idle_towers(Duration::from_secs(3600)));
    assert!(m.release_idle_towers(Duration::ZERO));
    m.forget_media_features();
    assert!(active() - before < after_load + MARGIN);
}

#[test]
fn towers_read_on_demand_answer_as_towers_read_at_load() {
    let _serial = serial();
    let eager = load();
    eager.load_towers().unwrap();
    assert_eq!(eager.tower_loads(), (1, 1));
    let expected = (answer(&eager, false), answer(&eager, true));
    assert_eq!(eager.tower_loads(), (1, 1), "no tower was read again");
    drop(eager);

    let lazy = load();
    let got = (answer(&lazy, false), answer(&lazy, true));
    assert_eq!(got, expected);
    assert_eq!(lazy.tower_loads(), (1, 1));
}

/// Sends `request` and waits for its answer's ids.
fn ask(engine: &Engine, request: ChatRequest) -> Vec<u32> {
    let (tx, rx) = channel();
    engine
        .generate(request, move |e| {
            let _ = tx.send(e);
        })
        .unwrap();
    loop {
        match rx
            .recv_timeout(Duration::from_secs(300))
            .expect("an answer")
        {
            Event::Done { ids, .. } => return ids,
            Event::Error { error, .. } => panic!("{error}"),
            _ => {}
        }
    }
}

fn engine_request(message: Message, audio: bool) -> ChatRequest {
    ChatRequest {
        conversation: "towers".into(),
        messages: vec![message],
        images: Vec::new(),
        audio: if audio { vec![clip()] } else { Vec::new() },
        thinking: false,
        tools: Vec::new(),
        options: common::greedy(4),
    }
}

/// Polls MLX's active bytes (the engine thread empties the buffer cache itself) until they are
/// below `bytes`, for at most `within`; the last figure.
fn active_below(bytes: usize, within: Duration) -> usize {
    let until = Instant::now() + within;
    loop {
        let now = gemma::memory::counters().unwrap().active;
        if now < bytes || Instant::now() > until {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_engine_lets_go_of_an_idle_tower_and_reads_it_again() {
    let _serial = serial();
    let (_, _, audio, _) = stored(&dir());
    let engine = Engine::spawn();
    engine.set_tower_idle(Duration::from_millis(500)).unwrap();
    let info = engine.load(&dir(), LoadOptions::default()).unwrap();
    assert!(info.vision && info.audio, "{info:?}");

    // The text-only figure: the weights and this conversation's cache after a text question.
    let text = Message::text(Role::User, "Hello there");
    ask(&engine, engine_request(text.clone(), false));
    let text_only = active_below(0, Duration::from_millis(200));

    gemma::memory::reset_peak().unwrap();
    let first = ask(&engine, engine_request(audio_question(), true));
    let peak = gemma::memory::counters().unwrap().peak;
    let audio = audio / 10 * 9;
    assert!(
        peak >= text_only + audio,
        "the clip's answer peaked at {peak} bytes; the text-only figure is {text_only} and the \
         audio tower {audio}"
    );
    // The tower goes after its idle period; memory is back at the text-only figure.
    let bound = text_only + audio / 10;
    let released = active_below(bound, Duration::from_secs(60));
    assert!(
        released < bound,
        "60 s after the answer MLX still holds {released} bytes (text only: {text_only}, the \
         audio tower {audio})"
    );

    // A text question does not read it; a new clip reads it again and is answered.
    ask(&engine, engine_request(text, false));
    assert!(gemma::memory::counters().unwrap().active < bound);
    gemma::memory::reset_peak().unwrap();
    let mut again = engine_request(audio_question(), true);
    again.audio = vec![clip_at(320.0)];
    assert_eq!(ask(&engine, again).len(), 4);
    let peak = gemma::memory::counters().unwrap().peak;
    assert!(
        peak >= text_only + audio,
        "the tower was not read again: peak {peak}"
    );
    assert_eq!(first.len(), 4);
}
