//! Decode rows of several sequences stepped together over shared buffers (`rows.rs`): every
//! row's logits and caches are its own alone, bit for bit on MLX's CPU backend, through joins,
//! a row stepping alone, a rewind, a row leaving, buffer growth and a sliding buffer moving its
//! start, across the sliding window.

mod common;

use gemma::{BatchKvCache, KvCache, LoadOptions, Model, Tuning};
use mlx_rs::{Array, Dtype};

fn load(name: &str, kv_quantization: bool) -> Model {
    let options = LoadOptions {
        dtype: Some(Dtype::Float32),
        kv_quantization,
        tuning: Tuning::for_backend(),
        ..LoadOptions::default()
    };
    Model::load(&common::fixture(name), &options).unwrap()
}

fn host(a: &Array) -> Vec<f32> {
    let a = a.as_dtype(Dtype::Float32).unwrap().contiguous().unwrap();
    a.as_slice::<f32>().to_vec()
}

/// One sequence, twice: stepped with others (`rows`) and alone (`alone`), fed the same ids.
struct Sequence {
    rows: Vec<KvCache>,
    alone: Vec<KvCache>,
    next: u32,
}

impl Sequence {
    fn new(model: &Model, prompt_len: usize, seed: u32) -> Self {
        let prompt: Vec<u32> = (0..prompt_len as u32)
            .map(|i| 2 + (i * 37 + seed * 101) % 1000)
            .collect();
        let mut alone = model.new_caches();
        let logits = model.forward(&prompt, &[], &mut alone, Some(1)).unwrap();
        Self {
            rows: alone.clone(),
            alone,
            next: top(&host(&logits)),
        }
    }

    /// A step alone of both copies (their logits within `tol`, see [`close`]).
    fn step_alone(&mut self, model: &Model, tol: f32) {
        let ids = Array::from_slice(&[self.next], &[1]);
        let a = host(&model.forward_array(&ids, &mut self.rows, Some(1)).unwrap());
        let b = host(&model.forward_array(&ids, &mut self.alone, Some(1)).unwrap());
        let diff = close(&a, &b);
        assert!(
            diff <= tol,
            "a step alone after stepping with others: {diff:e}"
        );
        assert_eq!(top(&a), top(&b));
        self.next = top(&b);
    }

    fn trim(&mut self, n: usize) {
        assert!(self.rows.iter().all(|c| c.can_trim(n)));
        assert!(self.alone.iter().all(|c| c.can_trim(n)));
        for c in self.rows.iter_mut().chain(self.alone.iter_mut()) {
            c.trim(n).unwrap();
        }
    }

    /// Both copies hold the same positions with the same keys and values (within `tol`).
    fn assert_caches_agree(&self, tol: f32) {
        for (slot, (r, a)) in self.rows.iter().zip(&self.alone).enumerate() {
            assert_eq!(r.offset(), a.offset(), "slot {slot}: positions processed");
            assert_eq!(r.held(), a.held(), "slot {slot}: positions held");
            let (start, end) = (a.offset() - a.held(), a.offset());
            let (rk, rv) = r.positions(start, end).unwrap();
            let (ak, av) = a.positions(start, end).unwrap();
            let (dk, dv) = (close(&host(&rk), &host(&ak)), close(&host(&rv), &host(&av)));
            assert!(
                dk <= tol && dv <= tol,
                "slot {slot}: keys {dk:e}, values {dv:e}"
            );
        }
    }
}

/// The id of the largest logit.
fn top(logits: &[f32]) -> u32 {
    let mut best = (0usize, f32::NEG_INFINITY);
    for (i, &x) in logits.iter().enumerate() {
        if x > best.1 {
            best = (i, x);
        }
    }
    best.0 as u32
}

/// max |a − b| / max |b|.
fn close(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let diff = a
        .iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    diff / b.iter().fold(0.0f32, |m, y| m.max(y.abs())).max(1e-30)
}

/// `steps` decode steps of `seqs` together over `kv`'s buffers, each row compared with its step alone (logits
/// within `tol`, the same greedy token). Returns whether the rows' caches were views of shared
/// buffers after every step.
fn together(
    model: &Model,
    kv: &mut BatchKvCache,
    seqs: &mut [&mut Sequence],
    steps: usize,
    tol: f32,
) -> bool {
    let mut shared = true;
    for _ in 0..steps {
        let ids: Vec<u32> = seqs.iter().map(|s| s.next).collect();
        let ids = Array::from_slice(&ids, &[ids.len() as i32]);
        let logits = {
            let mut caches: Vec<&mut [KvCache]> =
                seqs.iter_mut().map(|s| s.rows.as_mut_slice()).collect();
            model.forward_rows(&ids, &mut caches, kv).unwrap()
        };
        let vocab = logits.shape()[1] as usize;
        let logits = host(&logits);
        for (i, s) in seqs.iter_mut().enumerate() {
            shared &= s.rows.iter().all(|c| c.is_batch_view());
            let row = &logits[i * vocab..(i + 1) * vocab];
            let ids = Array::from_slice(&[s.next], &[1]);
            let alone = host(&model.forward_array(&ids, &mut s.alone, Some(1)).unwrap());
            // (On MLX's CPU backend, where the tests run, bit for bit eagerly; a GPU's kernels
            // may group the float sums differently.)
            let diff = close(row, &alone);
            assert!(diff <= tol, "row {i}: logits differ from alone by {diff:e}");
            assert_eq!(top(row), top(&alone), "row {i}: the greedy token");
            s.next = top(&alone);
        }
    }
    shared
}

/// Three rows through joins, a row stepping alone, a rewind, a row leaving and buffer growth,
/// each compared with its lone steps within `tol`.
fn joins_rewinds_and_growth(model: &Model, tol: f32) {
    let mut kv = BatchKvCache::new();
    let (mut a, mut b, mut c) = (
        Sequence::new(model, 5, 1),
        Sequence::new(model, 40, 2),
        Sequence::new(model, 250, 3),
    );
    // Three rows, one short, one past the window (32), one long.
    assert!(together(
        model,
        &mut kv,
        &mut [&mut a, &mut b, &mut c],
        20,
        tol
    ));
    // One steps alone: the others' buffers are gathered again at the next step together.
    for _ in 0..3 {
        b.step_alone(model, tol);
    }
    assert!(together(
        model,
        &mut kv,
        &mut [&mut a, &mut b, &mut c],
        10,
        tol
    ));
    // A rewind (the next turn of a chat) of one row.
    c.trim(5);
    c.assert_caches_agree(tol);
    assert!(together(
        model,
        &mut kv,
        &mut [&mut a, &mut b, &mut c],
        5,
        tol
    ));
    // One leaves with its own copy and goes on alone.
    for cache in a.rows.iter_mut() {
        cache.detach().unwrap();
    }
    assert!(a.rows.iter().all(|c| !c.is_batch_view()));
    a.assert_caches_agree(tol);
    a.step_alone(model, tol);
    // Two go on: the full buffers grow past their first 512 positions and the sliding ones
    // let go of what no row holds any longer.
    assert!(together(model, &mut kv, &mut [&mut b, &mut c], 360, tol));
    for s in [&a, &b, &c] {
        s.assert_caches_agree(tol);
    }
    drop(kv);
    // The caches outlive the buffers they were views of.
    b.step_alone(model, tol);
    b.assert_caches_agree(tol);
}

#[test]
fn rows_stepped_together_are_each_what_they_are_alone_through_joins_rewinds_and_growth() {
    joins_rewinds_and_growth(&load("tiny", false), 0.0);
}

#[test]
fn rows_whose_attention_scores_one_head_per_row_are_each_what_they_are_alone() {
    // (Each row's attention scores one query head per row under the rows' mask, CUDA's
    // default.)
    let model = Model::load(
        &common::fixture("tiny"),
        &LoadOptions {
            dtype: Some(Dtype::Float32),
            tuning: Tuning {
                decode_attention: gemma::tuning::DecodeAttention::HeadScores,
                ..Tuning::for_backend()
            },
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let (mut a, mut b, mut c) = (
        Sequence::new(&model, 9, 8),
        Sequence::new(&model, 50, 9),
        Sequence::new(&model, 3, 10),
    );
    let mut kv = BatchKvCache::new();
    assert!(together(
        &model,
        &mut kv,
        &mut [&mut a, &mut b, &mut c],
        12,
        0.0
    ));
    for s in [&a, &b, &c] {
        s.assert_caches_agree(0.0);
    }
}

#[test]
fn rows_whose_caches_are_stored_quantized_step_each_over_its_own() {
    let model = load("tiny-optiq", true);
    let (mut a, mut b) = (Sequence::new(&model, 6, 4), Sequence::new(&model, 45, 5));
    let mut kv = BatchKvCache::new();
    assert!(!together(&model, &mut kv, &mut [&mut a, &mut b], 4, 0.0));
    a.assert_caches_agree(0.0);
    b.assert_caches_agree(0.0);
}

#[test]
fn stepping_rows_each_over_its_own_caches_gives_the_same_as_over_shared_buffers() {
    let shared = load("tiny", false);
    let own = Model::load(
        &common::fixture("tiny"),
        &LoadOptions {
            dtype: Some(Dtype::Float32),
            tuning: Tuning {
                batched_rows: false,
                ..Tuning::for_backend()
            },
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let mut kv = BatchKvCache::new();
    let mut a = Sequence::new(&own, 7, 6);
    let mut b = Sequence::new(&own, 70, 7);
    assert!(!together(&own, &mut kv, &mut [&mut a, &mut b], 8, 0.0));
    let mut a = Sequence::new(&shared, 7, 6);
    let mut b = Sequence::new(&shared, 70, 7);
    assert!(together(&shared, &mut kv, &mut [&mut a, &mut b], 8, 0.0));
}
