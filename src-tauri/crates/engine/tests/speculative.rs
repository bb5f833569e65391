//! Speculative decoding: the answer is the target's own, whatever the drafts, and every path of
//! a round (partial and full accepts, rollbacks across the sliding window's wrap, the budget,
//! a stop, an end of turn) behaves as plain decoding does. Random-weight drafters are almost
//! never right, so acceptance is driven here by scripted drafts: the target's own continuation
//! with misses placed on purpose.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use common::{fixture, greedy, load_f32};
use engine::error::Result;
use engine::generate::{generate, StopReason};
use engine::loaded::LoadedModel;
use engine::options::GenerateOptions;
use engine::prompt::Prompt;
use engine::sampler::SamplerConfig;
use engine::speculative::{
    DraftRound, MtpProposer, Proposer, SpeculativeOptions, SpeculativeStats,
};
use engine::stream::{Drafting, Session, StreamRequest, TokenStream};
use engine::template::{Message, Role};
use gemma::{Drafter, Model};
use mlx_rs::Array;

/// The tiny drafter `make fixtures` writes next to the tiny target.
fn drafter_dir() -> PathBuf {
    let dir = fixture().with_file_name("tiny-assistant");
    assert!(
        dir.join("config.json").exists(),
        "fixture {} missing: run `make fixtures`",
        dir.display()
    );
    dir
}

fn prompt(m: &LoadedModel, text: &str) -> Prompt {
    m.prompt(&[Message::text(Role::User, text)], false, &[])
        .unwrap()
}

/// A stream answering `prompt`, drafting with `proposer` (`None`: plain).
fn start<'a>(
    m: &'a LoadedModel,
    session: &'a mut Session,
    prompt: &'a Prompt,
    options: &'a GenerateOptions,
    cancel: &'a AtomicBool,
    proposer: Option<(Box<dyn Proposer + 'a>, SpeculativeOptions)>,
) -> TokenStream<'a> {
    let drafting = match proposer {
        Some((proposer, spec)) => Drafting::With(proposer, spec),
        None => Drafting::Off,
    };
    let speculates = matches!(drafting, Drafting::With(..));
    let stream = m
        .token_stream(StreamRequest::new(session, prompt, options, cancel).drafting(drafting))
        .unwrap();
    assert_eq!(stream.speculating(), speculates);
    stream
}

/// Every id a stream hands out, until it ends, and the stream's speculation stats.
fn drain<'a>(
    m: &'a LoadedModel,
    session: &'a mut Session,
    prompt: &'a Prompt,
    options: &'a GenerateOptions,
    proposer: Option<(Box<dyn Proposer + 'a>, SpeculativeOptions)>,
) -> (Vec<u32>, Option<SpeculativeStats>) {
    let cancel = AtomicBool::new(false);
    let mut stream = start(m, session, prompt, options, &cancel, proposer);
    let mut ids = Vec::new();
    while let Some(id) = stream.next_token().unwrap() {
        ids.push(id);
    }
    (ids, stream.speculative_stats().cloned())
}

/// Drafts read from a known continuation, with misses placed on purpose: round `r` proposes
/// the continuation's next tokens, correct for the first `accepts[r % len]` drafts and wrong
/// at the one after (random-weight drafters are almost never right).
struct Script {
    /// The target's own answer (first generated id first), e.g. from a plain greedy run.
    continuation: Vec<u32>,
    /// Correct drafts per round, cycled.
    accepts: Vec<usize>,
    /// The vocabulary size (a wrong draft is the right one + 1, wrapped).
    vocab: u32,
}

impl Proposer for Script {
    fn fits(&self, model: &Model) -> bool {
        self.vocab as usize == model.config().text.vocab_size
    }

    fn draft(&mut self, round: &DraftRound<'_>, n: usize) -> Result<Array> {
        let right = self
            .accepts
            .get(round.index % self.accepts.len().max(1))
            .copied()
            .unwrap_or(0);
        let ids: Vec<u32> = (0..n)
            .map(|j| {
                let truth = self
                    .continuation
                    .get(round.produced + j)
                    .copied()
                    .unwrap_or(0);
                if j < right {
                    truth
                } else {
                    (truth + 1) % self.vocab.max(2)
                }
            })
            .collect();
        Ok(Array::from_slice(&ids, &[n as i32]))
    }
}

fn script(continuation: &[u32], accepts: &[usize]) -> Box<dyn Proposer> {
    Box::new(Script {
        continuation: continuation.to_vec(),
        accepts: accepts.to_vec(),
        vocab: 1024,
    })
}

fn always(block_size: usize) -> SpeculativeOptions {
    SpeculativeOptions {
        block_size,
        min_accepted: None,
        ..SpeculativeOptions::default()
    }
}

/// The largest difference between the K/V two sessions hold for their last `span` common
/// positions, over every cache.
fn cache_difference(a: &Session, b: &Session, span: usize) -> f32 {
    let end = a.tokens().len().min(b.tokens().len());
    let start = end.saturating_sub(span);
    let (ca, cb) = (a.caches(), b.caches());
    let mut worst = 0.0f32;
    for (x, y) in ca.iter().zip(cb) {
        let (kx, vx) = x.positions(start, end).unwrap();
        let (ky, vy) = y.positions(start, end).unwrap();
        for (p, q) in [(kx, ky), (vx, vy)] {
            let d = p
                .subtract(&q)
                .unwrap()
                .abs()
                .unwrap()
                .max(None)
                .unwrap()
                .item_exact::<f32>();
            worst = worst.max(d);
        }
    }
    worst
}

#[test]
fn scripted_drafts_give_the_plain_answer_whatever_is_accepted_and_leave_the_same_caches() {
    let m = load_f32();
    let p = prompt(&m, "Tell me about bread.");
    let options = greedy(110);
    let mut plain_session = Session::new(&m.model);
    let (plain, _) = drain(&m, &mut plain_session, &p, &options, None);
    assert_eq!(plain.len(), 110, "the tiny model answers without stopping");
    let window = m.model.config().text.sliding_window;
    assert!(
        p.ids.len() + plain.len() > 3 * window,
        "the answer wraps the window"
    );

    // (block size, correct drafts per round): partial, full and no accepts, mixed.
    for (block, accepts) in [
        (4, vec![0, 1, 2, 3]),
        (4, vec![3]),
        (2, vec![1, 0]),
        (8, vec![7, 0, 5, 2]),
    ] {
        let mut session = Session::new(&m.model);
        let (ids, stats) = drain(
            &m,
            &mut session,
            &p,
            &options,
            Some((script(&plain, &accepts), always(block))),
        );
        assert_eq!(ids, plain, "block {block}, accepts {accepts:?}");
        let stats = stats.unwrap();
        // Each round accepts what the script made right (the last round is cut by the budget).
        let n = stats.accepted_per_round.len();
        for (r, &got) in stats.accepted_per_round[..n - 1].iter().enumerate() {
            assert_eq!(got, accepts[r % accepts.len()], "round {r} of {accepts:?}");
        }
        assert!(stats.rounds < plain.len() || accepts == [0]);
        // The caches hold what plain decoding wrote: rollbacks after the wrap were exact.
        let diff = cache_difference(&session, &plain_session, window - 1);
        assert!(
            diff < 1e-4,
            "block {block} {accepts:?}: caches differ by {diff}"
        );
        // The tokens the session says it holds are the answer's.
        let held = session.tokens();
        assert_eq!(&held[..p.ids.len()], &p.ids[..]);
        assert_eq!(
            &held[p.ids.len()..],
            &plain[..held.len() - p.ids.len()],
            "session tokens"
        );
    }
}

#[test]
fn the_budget_is_never_exceeded_and_a_full_context_ends_the_answer() {
    let m = load_f32();
    let p = prompt(&m, "Hello there");
    let (plain, _) = drain(&m, &mut Session::new(&m.model), &p, &greedy(12), None);
    for max in 1..=7 {
        let (ids, _) = drain(
            &m,
            &mut Session::new(&m.model),
            &p,
            &greedy(max),
            Some((script(&plain, &[3]), always(4))),
        );
        assert_eq!(ids, plain[..max], "max_tokens {max}");
    }
    let tight = GenerateOptions {
        context_window: p.ids.len() + 6,
        ..greedy(100)
    };
    let cancel = AtomicBool::new(false);
    let mut session = Session::new(&m.model);
    let stream = start(
        &m,
        &mut session,
        &p,
        &tight,
        &cancel,
        Some((script(&plain, &[3]), always(4))),
    );
    let usage = generate(stream, &m.tokenizer, &m.specials, |_| {}).unwrap();
    assert_eq!(usage.stop_reason, StopReason::ContextFull);
    assert_eq!(usage.generated_tokens, 6);
}

#[test]
fn an_end_of_turn_inside_an_accepted_run_ends_the_answer_there() {
    let m = load_f32();
    let p = prompt(&m, "Say something");
    let (plain, _) = drain(&m, &mut Session::new(&m.model), &p, &greedy(30), None);
    // Treat the answer's 7th id as an end of turn: with 3 drafts accepted per round it sits
    // inside an accepted run (round 2 hands out ids 5..9).
    let stop = plain[6];
    let first = plain.iter().position(|&t| t == stop).unwrap();
    let mut specials = m.specials.clone();
    specials.eos.insert(stop);
    let cancel = AtomicBool::new(false);
    let mut session = Session::new(&m.model);
    let options = greedy(30);
    let stream = start(
        &m,
        &mut session,
        &p,
        &options,
        &cancel,
        Some((script(&plain, &[3]), always(4))),
    );
    let mut seen = Vec::new();
    let usage = generate(stream, &m.tokenizer, &specials, |d| seen.extend(d.token)).unwrap();
    assert_eq!(usage.stop_reason, StopReason::EndOfTurn);
    assert_eq!(
        seen,
        plain[..first],
        "ids before the end of turn, none after"
    );
    assert_eq!(usage.generated_tokens, first + 1);
}

#[test]
fn a_stop_hands_out_nothing_more_even_from_a_round_already_checked() {
    let m = load_f32();
    let p = prompt(&m, "Go on");
    let (plain, _) = drain(&m, &mut Session::new(&m.model), &p, &greedy(20), None);
    let cancel = AtomicBool::new(false);
    let mut session = Session::new(&m.model);
    let options = greedy(20);
    let mut stream = start(
        &m,
        &mut session,
        &p,
        &options,
        &cancel,
        Some((script(&plain, &[3]), always(4))),
    );
    // The first id, then a round of four: take two of them and stop.
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(stream.next_token().unwrap().unwrap());
    }
    cancel.store(true, Ordering::Relaxed);
    assert_eq!(stream.next_token().unwrap(), None);
    assert_eq!(stream.next_token().unwrap(), None);
    assert_eq!(got, plain[..3]);
    assert_eq!(stream.end(), Some(engine::stream::StreamEnd::Cancelled));
}

#[test]
fn seeded_sampling_with_drafts_draws_exactly_the_plain_samples() {
    // The target's sampler is drawn once per id handed out, in order, so for a given seed the
    // speculative answer is the plain one, token for token: the output distribution is the
    // target's own (the bound of the statistical check is zero here).
    let m = load_f32();
    let p = prompt(&m, "Pick words");
    let drafter = Drafter::load(&drafter_dir(), &m.model).unwrap();
    for seed in 0..12 {
        let options = GenerateOptions {
            sampler: SamplerConfig {
                temperature: 0.9,
                top_p: Some(0.95),
                seed,
                ..SamplerConfig::default()
            },
            max_tokens: 24,
            ..GenerateOptions::default()
        };
        let (plain, _) = drain(&m, &mut Session::new(&m.model), &p, &options, None);
        for accepts in [vec![0, 1, 2, 3], vec![3]] {
            let (ids, stats) = drain(
                &m,
                &mut Session::new(&m.model),
                &p,
                &options,
                Some((script(&plain, &accepts), always(4))),
            );
            assert_eq!(ids, plain, "seed {seed}, scripted {accepts:?}");
            assert!(stats.unwrap().accepted > 0);
        }
        let (ids, _) = drain(
            &m,
            &mut Session::new(&m.model),
            &p,
            &options,
            Some((Box::new(MtpProposer { drafter: &drafter }), always(4))),
        );
        assert_eq!(ids, plain, "seed {seed}, MTP drafter");
    }
}

#[test]
fn the_mtp_drafter_is_lossless_in_a_chat_and_stops_drafting_when_it_does_not_pay() {
    let mut m = load_f32();
    let cancel = AtomicBool::new(false);
    let first = vec![Message::text(Role::User, "Tell me a story about rivers.")];
    let answer = |m: &LoadedModel, session: &mut Session, messages: &[Message]| {
        let p = m.prompt(messages, false, &[]).unwrap();
        let mut ids = Vec::new();
        let usage = m
            .generate(StreamRequest::new(session, &p, &greedy(48), &cancel), |d| {
                ids.extend(d.token)
            })
            .unwrap();
        (ids, usage)
    };
    let mut plain_session = Session::new(&m.model);
    let (plain_1, _) = answer(&m, &mut plain_session, &first);

    m.load_drafter(&drafter_dir(), None).unwrap();
    let mut session = Session::new(&m.model);
    let (ids_1, usage_1) = answer(&m, &mut session, &first);
    assert_eq!(ids_1, plain_1);
    let stats = usage_1.speculative.expect("the answer speculated");
    // A random drafter is (almost) never right: drafting stops after its window of rounds, says
    // why, and the rest of the answer is decoded plainly — still the same tokens.
    assert_eq!(stats.rounds, SpeculativeOptions::default().window);
    assert!(stats
        .stopped
        .as_deref()
        .unwrap()
        .contains("drafting stopped"));

    // A follow-up reuses the cached history exactly as without the drafter.
    let text = m.tokenizer.decode(&ids_1, true).unwrap();
    let second = [
        first[0].clone(),
        Message::text(Role::Assistant, text).with_generated(ids_1.clone()),
        Message::text(Role::User, "And then?"),
    ];
    let (ids_2, usage_2) = answer(&m, &mut session, &second);
    m.unload_drafter();
    let (plain_2, plain_usage_2) = answer(&m, &mut plain_session, &second);
    assert_eq!(ids_2, plain_2);
    assert_eq!(usage_2.reused_tokens, plain_usage_2.reused_tokens);
    // (The random model's answer holds a thought marker the template drops from the history,
    // so the reuse stops at the first prompt, for both.)
    assert!(usage_2.reused_tokens >= usage_1.prompt_tokens);
}

/// A copy of the tiny drafter with `edit` applied to its config.json.
fn edited_drafter(work: &Path, name: &str, edit: impl Fn(&mut serde_json::Value)) -> PathBuf {
    let dir = work.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let src = drafter_dir();
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    dir
}

#[test]
fn a_drafter_that_does_not_fit_is_refused_with_the_reason_and_the_model_keeps_answering() {
    let mut m = load_f32();
    let work = tempfile::tempdir().unwrap();
    let cases: Vec<(PathBuf, &str)> = vec![
        (
            edited_drafter(work.path(), "window", |c| {
                c["text_config"]["sliding_window"] = 64.into()
            }),
            "its sliding_window is 64, the model's is 32",
        ),
        (
            edited_drafter(work.path(), "backbone", |c| {
                c["backbone_hidden_size"] = 2560.into()
            }),
            "its backbone_hidden_size is 2560, the model's is 256",
        ),
        (
            edited_drafter(work.path(), "quantized", |c| {
                c["quantization"] = serde_json::json!({"bits": 4, "group_size": 64})
            }),
            "is a quantized drafter",
        ),
        (
            edited_drafter(work.path(), "llama", |c| c["model_type"] = "llama".into()),
            "not a Gemma 4 assistant drafter (model_type \"llama\"",
        ),
        (
            edited_drafter(work.path(), "rope", |c| {
                c["text_config"]["rope_parameters"]["sliding_attention"]["rope_theta"] =
                    5000.0.into()
            }),
            "sliding_attention RoPE is base 5000 over 64 dims, the model's is base 10000 over 64 dims",
        ),
        (fixture(), "not a Gemma 4 assistant drafter"),
    ];
    for (dir, expected) in cases {
        let err = m.load_drafter(&dir, None).unwrap_err().to_string();
        assert!(err.contains(expected), "{}: {err}", dir.display());
        assert!(m.drafter().is_none());
    }
    // Still answering, plainly.
    let p = prompt(&m, "Hi");
    let usage = m
        .generate(
            StreamRequest::new(
                Session::new(&m.model),
                &p,
                &greedy(3),
                &AtomicBool::new(false),
            ),
            |_| {},
        )
        .unwrap();
    assert_eq!(usage.generated_tokens, 3);
    assert!(usage.speculative.is_none());
}
