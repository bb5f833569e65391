//! Several answers at once (continuous batching): streams stepped together by
//! [`next_tokens`] share each decode step's forward, and every answer is token for token the
//! one it gives alone — greedy and seeded, joining at different steps, with an image in a row,
//! across the sliding window's wrap (the tiny fixture's window is 32), and when one row is
//! stopped mid-answer.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{greedy, load_f32};
use engine::generate::GenerateOptions;
use engine::image::{preprocess_bytes, Preprocessed, SoftTokenBudget};
use engine::sampler::SamplerConfig;
use engine::stream::{next_tokens, Session, StreamEnd};
use engine::template::{Message, Part, Role};
use engine::worker::{LoadedModel, Prompt};

/// One answer of a batch: its prompt, options, and the step at which it starts.
struct Row {
    prompt: Prompt,
    options: GenerateOptions,
    joins_at: usize,
    /// The step after which its cancel flag is set, if any.
    stopped_at: Option<usize>,
}

fn text_prompt(m: &LoadedModel, text: &str) -> Prompt {
    m.prompt(&[Message::text(Role::User, text)], false, &[])
        .unwrap()
}

fn image_prompt(m: &LoadedModel, image: Arc<Preprocessed>) -> Prompt {
    let message = Message::new(
        Role::User,
        vec![
            Part::Image,
            Part::Text {
                text: "What is in this picture?".into(),
            },
        ],
    );
    m.prompt(&[message], false, &[image]).unwrap()
}

fn test_image() -> Arc<Preprocessed> {
    let img = image::RgbImage::from_fn(120, 90, |x, y| {
        image::Rgb([
            (x * 2 % 256) as u8,
            (y * 3 % 256) as u8,
            ((x ^ y) % 256) as u8,
        ])
    });
    let mut png = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    Arc::new(preprocess_bytes(&png, SoftTokenBudget::T70).unwrap())
}

fn seeded(max_tokens: usize, seed: u64) -> GenerateOptions {
    GenerateOptions {
        sampler: SamplerConfig {
            temperature: 1.0,
            seed,
            ..SamplerConfig::default()
        },
        max_tokens,
        ..GenerateOptions::default()
    }
}

/// The ids one answer hands out alone, with a fresh session.
fn solo(m: &LoadedModel, prompt: &Prompt, options: &GenerateOptions) -> Vec<u32> {
    let cancel = AtomicBool::new(false);
    let mut stream = m
        .token_stream(Session::new(&m.model), prompt, options, &cancel)
        .unwrap();
    let mut ids = Vec::new();
    while let Some(id) = stream.next_token().unwrap() {
        ids.push(id);
    }
    ids
}

/// The ids each row hands out when all are stepped together, and how each ended; also the
/// most rows that shared one step.
fn together(m: &LoadedModel, rows: &[Row]) -> (Vec<Vec<u32>>, Vec<StreamEnd>, usize) {
    let flags: Vec<Arc<AtomicBool>> = rows.iter().map(|_| Arc::default()).collect();
    let mut ids: Vec<Vec<u32>> = vec![Vec::new(); rows.len()];
    let mut ends: Vec<Option<StreamEnd>> = vec![None; rows.len()];
    let mut running = Vec::new(); // (row index, stream)
    let mut widest = 0;
    let mut step = 0;
    while ends.iter().any(Option::is_none) {
        for (i, row) in rows.iter().enumerate() {
            if row.joins_at == step {
                let stream = m
                    .token_stream(
                        Session::new(&m.model),
                        &row.prompt,
                        &row.options,
                        flags[i].clone(),
                    )
                    .unwrap();
                running.push((i, stream));
            }
        }
        widest = widest.max(running.len());
        let mut streams: Vec<_> = running.iter_mut().map(|(_, s)| s).collect();
        let next = next_tokens(&mut streams);
        let mut ended = Vec::new();
        for ((i, stream), id) in running.iter().zip(next) {
            match id.unwrap() {
                Some(id) => ids[*i].push(id),
                None => {
                    ends[*i] = stream.end();
                    ended.push(*i);
                }
            }
        }
        running.retain(|(i, _)| !ended.contains(i));
        for (i, row) in rows.iter().enumerate() {
            if row.stopped_at == Some(step) {
                flags[i].store(true, Ordering::Relaxed);
            }
        }
        step += 1;
        assert!(step < 10_000, "the batch never ended");
    }
    let ends = ends.into_iter().map(Option::unwrap).collect();
    (ids, ends, widest)
}

#[test]
fn every_answer_of_a_batch_is_the_one_it_gives_alone() {
    let m = load_f32();
    let image = test_image();
    let texts = [
        "Hi",
        "Tell me a long story about a lighthouse keeper and the sea, please.",
        "List the planets.",
        "What is 2 + 2? Answer briefly, then explain your reasoning step by step.",
        "Why is the sky blue?",
        "Translate 'good morning' into French, German, Spanish and Italian.",
        "Write a haiku.",
    ];
    let mut rows: Vec<Row> = texts
        .iter()
        .enumerate()
        .map(|(k, text)| Row {
            prompt: text_prompt(&m, text),
            // Greedy and seeded rows side by side; long enough to wrap the sliding window.
            options: if k % 2 == 0 {
                greedy(40 + 3 * k)
            } else {
                seeded(44 - k, 7 + k as u64)
            },
            joins_at: [0, 0, 3, 5, 5, 12, 20][k],
            stopped_at: None,
        })
        .collect();
    rows.push(Row {
        prompt: image_prompt(&m, image),
        options: seeded(36, 99),
        joins_at: 2,
        stopped_at: None,
    });
    let (ids, ends, widest) = together(&m, &rows);
    assert_eq!(widest, 8, "all eight rows ran in one step at some point");
    for (k, row) in rows.iter().enumerate() {
        let alone = solo(&m, &row.prompt, &row.options);
        assert!(!alone.is_empty());
        assert_eq!(ids[k], alone, "row {k} differs from its solo run");
        assert_ne!(ends[k], StreamEnd::Cancelled);
    }
    // Crossing the window: some rows' prompt + answer outgrow the 32 positions.
    let longest = rows
        .iter()
        .zip(&ids)
        .map(|(r, i)| r.prompt.ids.len() + i.len())
        .max()
        .unwrap();
    assert!(longest > 2 * 32, "{longest}");
}

#[test]
fn stopping_one_of_four_leaves_the_others_as_they_are_alone() {
    let m = load_f32();
    let rows: Vec<Row> = ["One", "Two things", "Three more things", "Four"]
        .iter()
        .enumerate()
        .map(|(k, text)| Row {
            prompt: text_prompt(&m, text),
            options: if k == 1 { seeded(30, 5) } else { greedy(30) },
            joins_at: k,
            stopped_at: (k == 2).then_some(8),
        })
        .collect();
    let (ids, ends, _) = together(&m, &rows);
    assert_eq!(ends[2], StreamEnd::Cancelled);
    let stopped_alone = solo(&m, &rows[2].prompt, &rows[2].options);
    assert!(ids[2].len() < stopped_alone.len(), "stopped early");
    assert!(
        stopped_alone.starts_with(&ids[2]),
        "what it wrote is its own"
    );
    for k in [0, 1, 3] {
        assert_eq!(
            ids[k],
            solo(&m, &rows[k].prompt, &rows[k].options),
            "row {k}"
        );
        assert_ne!(ends[k], StreamEnd::Cancelled);
    }
}
