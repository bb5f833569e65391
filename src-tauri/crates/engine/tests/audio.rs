//! Audio clips in a conversation: where their placeholders go, the audio tower's features bound
//! to them in the prefill, reuse of features and cache, and refusals. (That the answers are the
//! reference's is tests/parity/audio_parity.py.)

mod common;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use common::{fixture, greedy, load_f32};
use engine::audio::{prepare_samples, AudioClip, AudioLimits};
use engine::loaded::LoadedModel;
use engine::stream::{Session, StreamRequest};
use engine::template::{Message, Part, Role};

/// A 16 kHz signal with some structure (harmonics under an envelope), `seconds` long.
fn signal(seconds: f64, seed: f64) -> Vec<f32> {
    let n = (seconds * 16_000.0) as usize;
    (0..n)
        .map(|i| {
            let t = i as f64 / 16_000.0;
            let pitch = 150.0 + 30.0 * (1.3 * t + seed).sin();
            let voice: f64 = (1..6)
                .map(|k| (2.0 * std::f64::consts::PI * pitch * k as f64 * t).sin() / k as f64)
                .sum();
            (0.2 * voice * (0.5 + 0.5 * (8.0 * t + seed).sin().powi(2))) as f32
        })
        .collect()
}

fn clip(seconds: f64, seed: f64) -> Arc<AudioClip> {
    let prepared = prepare_samples(&signal(seconds, seed), &AudioLimits::default()).unwrap();
    assert_eq!(prepared.clips.len(), 1);
    prepared.clips[0].clone()
}

fn asking(parts_before_text: Vec<Part>, clips: usize) -> Message {
    let mut parts = parts_before_text;
    parts.push(Part::Text {
        text: "What do you hear?".into(),
    });
    parts.extend((0..clips).map(|_| Part::Audio));
    Message::new(Role::User, parts)
}

/// The count of `token` in `ids`, and the runs it forms.
fn runs(ids: &[u32], token: u32) -> Vec<usize> {
    engine::stream::placeholder_runs(ids, token)
        .into_iter()
        .map(|(_, len)| len)
        .collect()
}

#[test]
fn each_clip_becomes_its_run_of_soft_tokens_after_the_text() {
    let m = LoadedModel::load(&fixture(), &gemma::LoadOptions::default()).unwrap();
    let audio = m.specials.audio.expect("the tiny fixture has audio ids");
    let (a, b) = (clip(1.0, 0.0), clip(0.5, 1.0));
    assert_eq!((a.soft_tokens, b.soft_tokens), (25, 13));
    let prompt = m
        .prompt_with_tools(&[asking(vec![], 2)], &[], false, &[], &[a, b])
        .unwrap();
    assert_eq!(runs(&prompt.ids, audio.placeholder), [25, 13]);
    // `<|audio>` + run + `<audio|>`, the text before the first one, the turn closed after.
    let first = prompt
        .ids
        .iter()
        .position(|&t| t == audio.placeholder)
        .unwrap();
    assert_eq!(prompt.ids[first - 1], audio.begin);
    assert_eq!(prompt.ids[first + 25], audio.end);
    assert_eq!(prompt.ids[first + 26], audio.begin);
    assert_eq!(prompt.ids[first + 26 + 14], audio.end);
    assert_eq!(prompt.ids[first + 26 + 15], m.specials.turn_close);
    let text = m.tokenizer.decode(&prompt.ids[..first - 1], false).unwrap();
    assert!(text.ends_with("What do you hear?"), "{text:?}");

    // A prompt whose placeholders do not match the clips is refused with both counts.
    let error = m
        .prompt_with_tools(&[asking(vec![], 2)], &[], false, &[], &[])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("2 audio") && error.contains("0 audio"),
        "{error}"
    );
}

#[test]
fn a_follow_up_about_a_clip_reuses_its_features_and_its_cache() {
    let m = load_f32();
    let cancel = AtomicBool::new(false);
    let clips = vec![clip(2.0, 0.0)];
    let placeholder = m.specials.audio.unwrap().placeholder;
    let mut session = Session::new(&m.model);
    let mut messages = vec![asking(vec![], 1)];
    let first = m
        .prompt_with_tools(&messages, &[], false, &[], &clips)
        .unwrap();
    let mut answer = Vec::new();
    m.generate(
        StreamRequest::new(&mut session, &first, &greedy(6), &cancel),
        |d| answer.extend(d.token),
    )
    .unwrap();
    assert_eq!(answer.len(), 6);
    assert_eq!(m.audio_tower_runs(), 1);

    // The same answer from a fresh session: the clip's features are bound the same way.
    let mut again = Vec::new();
    let usage = m
        .generate(
            StreamRequest::new(Session::new(&m.model), &first, &greedy(6), &cancel),
            |d| again.extend(d.token),
        )
        .unwrap();
    assert_eq!(again, answer);
    assert_eq!((usage.reused_tokens, m.audio_tower_runs()), (0, 1));

    // A follow-up: neither the tower nor the clip's prefill runs again.
    messages.push(Message::text(
        Role::Assistant,
        m.tokenizer.decode(&answer, true).unwrap(),
    ));
    messages.push(Message::text(Role::User, "And then?"));
    let second = m
        .prompt_with_tools(&messages, &[], false, &[], &clips)
        .unwrap();
    let usage = m
        .generate(
            StreamRequest::new(&mut session, &second, &greedy(3), &cancel),
            |_| {},
        )
        .unwrap();
    assert_eq!(m.audio_tower_runs(), 1);
    let last = second.ids.iter().rposition(|&t| t == placeholder).unwrap();
    assert!(usage.reused_tokens > last, "the clip was prefilled again");
}

#[test]
fn the_clip_reaches_the_model() {
    // Two clips, two different next-token distributions after the same prompt text.
    let m = load_f32();
    let tower = m
        .model
        .load_audio()
        .unwrap()
        .expect("the tiny fixture has an audio tower");
    let token_id = m.specials.audio.unwrap().placeholder;
    let mut last_rows = Vec::new();
    for seed in [0.0, 2.0] {
        let clip = clip(1.0, seed);
        let prompt = m
            .prompt_with_tools(
                &[asking(vec![], 1)],
                &[],
                false,
                &[],
                std::slice::from_ref(&clip),
            )
            .unwrap();
        let mel = gemma::Mel {
            data: &clip.features,
            frames: clip.frames,
            valid: &clip.valid,
        };
        let features = tower.encode(&mel, clip.soft_tokens).unwrap();
        let media = [gemma::MediaFeatures {
            token_id,
            features: &features,
        }];
        let mut caches = m.model.new_caches();
        let logits = m
            .model
            .forward(&prompt.ids, &media, &mut caches, Some(1))
            .unwrap()
            .as_dtype(mlx_rs::Dtype::Float32)
            .unwrap();
        logits.eval().unwrap();
        let row = logits.as_slice::<f32>().to_vec();
        // The engine's prefill binds the same features: its greedy first token is this argmax.
        let argmax = (0..row.len()).fold(0, |best, i| if row[i] > row[best] { i } else { best });
        let mut first = Vec::new();
        let cancel = AtomicBool::new(false);
        m.generate(
            StreamRequest::new(Session::new(&m.model), &prompt, &greedy(1), &cancel),
            |d| first.extend(d.token),
        )
        .unwrap();
        assert_eq!(first, [argmax as u32]);
        last_rows.push(row);
    }
    let diff = last_rows[0]
        .iter()
        .zip(&last_rows[1])
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(
        diff > 1e-3,
        "two clips gave the same logits (max diff {diff})"
    );
}

#[test]
fn an_image_and_a_clip_in_one_message() {
    let m = load_f32();
    let cancel = AtomicBool::new(false);
    let image = common::test_image();
    let clips = vec![clip(1.0, 0.5)];
    let prompt = m
        .prompt_with_tools(
            &[asking(vec![Part::Image], 1)],
            &[],
            false,
            std::slice::from_ref(&image),
            &clips,
        )
        .unwrap();
    let (img, audio) = (m.specials.image.unwrap(), m.specials.audio.unwrap());
    assert_eq!(runs(&prompt.ids, img.placeholder), [image.soft_tokens]);
    assert_eq!(runs(&prompt.ids, audio.placeholder), [clips[0].soft_tokens]);
    let usage = m
        .generate(
            StreamRequest::new(Session::new(&m.model), &prompt, &greedy(4), &cancel),
            |_| {},
        )
        .unwrap();
    assert_eq!(usage.generated_tokens, 4);
    assert_eq!((m.vision_tower_runs(), m.audio_tower_runs()), (1, 1));
}

#[test]
fn a_model_without_an_audio_tower_refuses_a_clip_clearly() {
    let dir = fixture().with_file_name("tiny-plmp-bf16");
    let m = LoadedModel::load(&dir, &gemma::LoadOptions::default()).unwrap();
    assert!(!m.model.has_audio());
    let clips = vec![clip(1.0, 0.0)];
    let cancel = AtomicBool::new(false);
    let outcome = m
        .prompt_with_tools(&[asking(vec![], 1)], &[], false, &[], &clips)
        .map_err(|e| e.to_string())
        .and_then(|prompt| {
            m.generate(
                StreamRequest::new(Session::new(&m.model), &prompt, &greedy(2), &cancel),
                |_| {},
            )
            .map_err(|e| e.to_string())
        });
    let error = outcome.unwrap_err();
    assert!(error.contains("no audio tower"), "{error}");
}
