//! Answers at once stay within memory: one that would not fit beside those running (by MLX's
//! memory limit, from each conversation's cache size at its longest) waits for them to end.
//! Its own test binary: it lowers the process-wide limit.

mod common;

use std::sync::mpsc::channel;
use std::time::Duration;

use common::{fixture, greedy};
use engine::events::{ChatRequest, Event};
use engine::worker::Engine;
use gemma::LoadOptions;

fn request(text: &str) -> ChatRequest {
    common::api_request(text, greedy(40))
}

/// The generation of each delta, in order, for two requests sent at once.
fn deltas_of_two(engine: &Engine) -> Vec<u64> {
    let (tx, rx) = channel();
    for text in ["First question", "Second question"] {
        let tx = tx.clone();
        engine
            .generate(request(text), move |e| {
                let _ = tx.send(e);
            })
            .unwrap();
    }
    let (mut order, mut done) = (Vec::new(), 0);
    while done < 2 {
        match rx
            .recv_timeout(Duration::from_secs(120))
            .expect("an answer")
        {
            Event::Delta { generation_id, .. } => order.push(generation_id),
            Event::Done { .. } => done += 1,
            Event::Error { error, .. } => panic!("{error}"),
            Event::Prefill { .. } => {}
        }
    }
    order
}

#[test]
fn an_answer_that_does_not_fit_in_memory_waits_for_the_running_one() {
    let engine = Engine::spawn();
    let options = LoadOptions {
        dtype: Some(mlx_rs::Dtype::Float32),
        ..LoadOptions::default()
    };
    engine.load(&fixture(), options).unwrap();
    let switches = |order: &[u64]| order.windows(2).filter(|w| w[0] != w[1]).count();

    let limit = mlx_rs::memory::memory_limit().unwrap();
    eprintln!(
        "MLX memory limit {limit}, active {}",
        mlx_rs::memory::active_memory().unwrap()
    );
    assert!(
        switches(&deltas_of_two(&engine)) > 5,
        "room for both: together"
    );

    // Only just what is in use now: the second must wait.
    let active = mlx_rs::memory::active_memory().unwrap();
    mlx_rs::memory::set_memory_limit(active + 1).unwrap();
    let order = deltas_of_two(&engine);
    mlx_rs::memory::set_memory_limit(limit).unwrap();
    assert_eq!(switches(&order), 1, "one after the other: {order:?}");
}
