//! Several answers at once (continuous batching): streams stepped together by
//! [`next_tokens`] share each decode step's forward, and every answer is token for token the
//! one it gives alone — greedy and seeded, joining at different steps, with an image in a row,
//! across the sliding window's wrap (the tiny fixture's window is 32), and when one row is
//! stopped mid-answer.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{greedy, load_f32};
use engine::image::{preprocess_bytes, Preprocessed, SoftTokenBudget};
use engine::loaded::LoadedModel;
use engine::options::GenerateOptions;
use engine::prompt::Prompt;
use engine::sampler::SamplerConfig;
use engine::stream::{next_tokens, Session, StreamEnd, StreamRequest};
use engine::template::{Message, Part, Role};

/// One answer of a batch: its prompt, options, and the step at which it starts.
struct PlannedAnswer {
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
        .token_stream(StreamRequest::new(
            Session::new(&m.model),
            prompt,
            options,
            &cancel,
        ))
        .unwrap();
    let mut ids = Vec::new();
    while let Some(id) = stream.next_token().unwrap() {
        ids.push(id);
    }
    ids
}

/// The ids each row hands out when all are stepped together, and how each ended; also the
/// most rows that shared one step.
fn together(m: &LoadedModel, rows: &[PlannedAnswer]) -> (Vec<Vec<u32>>, Vec<StreamEnd>, usize) {
    let flags: Vec<Arc<AtomicBool>> = rows.iter().map(|_| Arc::default()).collect();
    let mut ids: Vec<Vec<u32>> = vec![Vec::new(); rows.len()];
    let mut ends: Vec<Option<StreamEnd>> = vec![None; rows.len()];
    let mut running = Vec::new(); // (row index, stream)
    let mut widest = 0;
    let mut step = 0;
    let mut kv = gemma::BatchKvCache::new();
    while ends.iter().any(Option::is_none) {
        for (i, row) in rows.iter().enumerate() {
            if row.joins_at == step {
                let stream = m
                    .token_stream(StreamRequest::new(
                        Session::new(&m.model),
                        &row.prompt,
                        &row.options,
                        flags[i].clone(),
                    ))
                    .unwrap();
                running.push((i, stream));
            }
        }
        widest = widest.max(running.len());
        let mut streams: Vec<_> = running.iter_mut().map(|(_, s)| s).collect();
        let next = next_tokens(&mut streams, &mut kv);
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
    every_answer_alone(&load_f32());
}

/// In the checkpoint's own bfloat16 as well: each row of a step is multiplied as a vector of
/// its own, as alone (no kernel is chosen by the number of rows).
#[test]
fn every_answer_of_a_batch_is_the_one_it_gives_alone_in_bfloat16() {
    let m = LoadedModel::load(&common::fixture(), &gemma::LoadOptions::default()).unwrap();
    assert_eq!(m.model.dtype(), mlx_rs::Dtype::Bfloat16);
    every_answer_alone(&m);
}

fn every_answer_alone(m: &LoadedModel) {
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
    let mut rows: Vec<PlannedAnswer> = texts
        .iter()
        .enumerate()
        .map(|(k, text)| PlannedAnswer {
            prompt: text_prompt(m, text),
            // Greedy and seeded rows side by side; long enough to wrap the sliding window.
            options: if k.is_multiple_of(2) {
                greedy(40 + 3 * k)
            } else {
                seeded(44 - k, 7 + k as u64)
            },
            joins_at: [0, 0, 3, 5, 5, 12, 20][k],
            stopped_at: None,
        })
        .collect();
    rows.push(PlannedAnswer {
        prompt: image_prompt(m, image),
        options: seeded(36, 99),
        joins_at: 2,
        stopped_at: None,
    });
    let (ids, ends, widest) = together(m, &rows);
    assert_eq!(widest, 8, "all eight rows ran in one step at some point");
    for (k, row) in rows.iter().enumerate() {
        let alone = solo(m, &row.prompt, &row.options);
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
    let rows: Vec<PlannedAnswer> = ["One", "Two things", "Three more things", "Four"]
        .iter()
        .enumerate()
        .map(|(k, text)| PlannedAnswer {
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

mod engine_thread {
    use std::sync::mpsc::{channel, Receiver, Sender};
    use std::time::Duration;

    use super::*;
    use common::fixture;
    use engine::events::{ChatRequest, Event};
    use engine::worker::Engine;
    use gemma::LoadOptions;

    fn engine() -> Engine {
        let engine = Engine::spawn();
        let options = LoadOptions {
            dtype: Some(mlx_rs::Dtype::Float32),
            ..LoadOptions::default()
        };
        engine.load(&fixture(), options).unwrap();
        engine
    }

    use common::api_request as request;

    /// The events of the generations sent together, tagged with their generation's id.
    type Log = Receiver<(u64, Event)>;

    fn send_all(engine: &Engine, requests: Vec<ChatRequest>, first: Option<ChatRequest>) -> Log {
        let (tx, rx) = channel();
        for request in requests {
            engine.generate(request, logged(&tx)).unwrap();
        }
        if let Some(request) = first {
            engine.generate_first(request, logged(&tx)).unwrap();
        }
        rx
    }

    /// An event callback that sends each event to `tx`, tagged with its generation's id.
    fn logged(tx: &Sender<(u64, Event)>) -> impl FnMut(Event) + Send + 'static {
        let tx = tx.clone();
        move |e| {
            let _ = tx.send((id_of(&e), e));
        }
    }

    fn id_of(event: &Event) -> u64 {
        match event {
            Event::Prefill { generation_id, .. }
            | Event::Delta { generation_id, .. }
            | Event::Done { generation_id, .. }
            | Event::Error { generation_id, .. } => *generation_id,
        }
    }

    /// Reads events until `count` generations are done: the ids each generated (in sending
    /// order) and the generation of each delta, in the order they came.
    fn collect(log: &Log, count: usize) -> (Vec<(u64, Vec<u32>)>, Vec<u64>) {
        let mut done: Vec<(u64, Vec<u32>)> = Vec::new();
        let mut order = Vec::new();
        while done.len() < count {
            let (id, event) = log
                .recv_timeout(Duration::from_secs(120))
                .expect("an answer");
            match event {
                Event::Delta { .. } => order.push(id),
                Event::Done { ids, .. } => done.push((id, ids)),
                Event::Error { error, .. } => panic!("generation {id} failed: {error}"),
                Event::Prefill { .. } => {}
            }
        }
        done.sort_by_key(|(id, _)| *id);
        (done, order)
    }

    /// How many times the stream of deltas switches from one generation to another.
    fn switches(order: &[u64]) -> usize {
        order.windows(2).filter(|w| w[0] != w[1]).count()
    }

    #[test]
    fn four_requests_are_answered_together_each_as_alone_and_the_window_never_waits() {
        let engine = engine();
        let texts = [
            "Alpha beta",
            "Gamma",
            "Delta epsilon zeta eta",
            "Theta iota",
        ];
        let options = |k: usize| {
            if k.is_multiple_of(2) {
                greedy(24 + k)
            } else {
                seeded(26, 40 + k as u64)
            }
        };
        // Alone, one after another.
        let mut alone = Vec::new();
        for (k, text) in texts.iter().enumerate() {
            let log = send_all(&engine, vec![request(text, options(k))], None);
            alone.push(collect(&log, 1).0.remove(0).1);
        }
        let requests = || {
            texts
                .iter()
                .enumerate()
                .map(|(k, t)| request(t, options(k)))
                .collect()
        };
        // All at once: the answers are the same, and they stream interleaved.
        let log = send_all(&engine, requests(), None);
        let (together, order) = collect(&log, 4);
        let ids: Vec<Vec<u32>> = together.into_iter().map(|(_, ids)| ids).collect();
        assert_eq!(ids, alone);
        assert!(switches(&order) > 20, "the answers were written together");

        // One at a time when so set: no interleaving, the same answers.
        engine.set_parallel(1).unwrap();
        let log = send_all(&engine, requests(), None);
        let (one_by_one, order) = collect(&log, 4);
        assert_eq!(switches(&order), 3);
        let ids: Vec<Vec<u32>> = one_by_one.into_iter().map(|(_, ids)| ids).collect();
        assert_eq!(ids, alone);

        // The window's chat joins at once even when every place is taken: sent once a long
        // API answer is streaming, it ends first.
        let log = send_all(
            &engine,
            vec![request("Write at length.", greedy(300))],
            None,
        );
        let (busy, _) = log.recv_timeout(Duration::from_secs(120)).unwrap();
        let window = ChatRequest {
            conversation: "window".into(),
            ..request("Hello from the window", greedy(6))
        };
        let (tx, window_log) = channel();
        let window_id = engine.generate_first(window, logged(&tx)).unwrap();
        let (window_done, _) = collect(&window_log, 1);
        assert_eq!(window_done[0].0, window_id);
        assert!(
            log.try_iter()
                .all(|(_, e)| !matches!(e, Event::Done { .. })),
            "the window's answer ended while the long one still ran"
        );
        let (rest, _) = collect(&log, 1);
        assert_eq!(rest[0].0, busy);
        assert_eq!(rest[0].1.len(), 300, "the long answer went on to its end");
    }

    #[test]
    fn an_answer_that_drafts_alone_steps_aside_for_a_second_and_both_are_as_alone() {
        let engine = engine();
        let drafter = common::fixture().with_file_name("tiny-assistant");
        engine.set_drafter(Some(&drafter)).unwrap();
        let m = load_f32();
        let first = request("Draft this answer", greedy(40));
        let second = request("And this one", greedy(30));
        let (tx, rx) = channel();
        let a = engine.generate(first.clone(), logged(&tx)).unwrap();
        // The first is under way (drafting) before the second is sent.
        loop {
            let (id, event) = rx.recv_timeout(Duration::from_secs(120)).unwrap();
            if id == a && matches!(event, Event::Delta { .. }) {
                break;
            }
        }
        let b = engine.generate(second.clone(), logged(&tx)).unwrap();
        let mut stats = std::collections::HashMap::new();
        let mut ids = std::collections::HashMap::<u64, Vec<u32>>::new();
        while ids.len() < 2 {
            let (id, event) = rx.recv_timeout(Duration::from_secs(120)).unwrap();
            match event {
                Event::Delta { .. } | Event::Prefill { .. } => {}
                Event::Done {
                    ids: done, usage, ..
                } => {
                    stats.insert(id, usage.speculative);
                    ids.insert(id, done);
                }
                Event::Error { error, .. } => panic!("{error}"),
            }
        }
        let stopped = stats[&a].as_ref().and_then(|s| s.stopped.clone());
        assert_eq!(stopped.as_deref(), Some("another answer is running"));
        let alone = |r: &ChatRequest| {
            let prompt = m.prompt(&r.messages, false, &[]).unwrap();
            solo(&m, &prompt, &r.options)
        };
        // The stream runs on past an end of turn; the answer stops there and leaves it out.
        for (id, r) in [(a, &first), (b, &second)] {
            let alone = alone(r);
            let got = &ids[&id];
            assert!(
                alone.starts_with(got),
                "answer {id} differs from its plain run"
            );
            if let Some(&next) = alone.get(got.len()) {
                assert!(m.specials.is_stop(next), "answer {id} ended early");
            }
        }
    }

    #[test]
    fn more_answers_at_once_take_effect_while_answers_run() {
        let engine = engine();
        engine.set_parallel(1).unwrap();
        let long = request("Write forever.", greedy(2000));
        let short = request("Hi", greedy(8));
        let log = send_all(&engine, vec![long, short], None);
        // The first streams; the second waits for its place.
        let (long_id, _) = log.recv_timeout(Duration::from_secs(120)).unwrap();
        let mut seen = 0;
        while seen < 5 {
            let (id, event) = log.recv_timeout(Duration::from_secs(120)).unwrap();
            assert_eq!(id, long_id, "the second started with one place: {event:?}");
            seen += usize::from(matches!(event, Event::Delta { .. }));
        }
        engine.set_parallel(2).unwrap();
        loop {
            let (id, event) = log.recv_timeout(Duration::from_secs(120)).unwrap();
            match event {
                Event::Done { .. } if id == long_id => panic!("the long answer ended first"),
                Event::Done { .. } => break,
                _ => {}
            }
        }
        engine.cancel(long_id);
        engine.set_parallel(4).unwrap();
    }
}
