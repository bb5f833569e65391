//! Backend tuning is a value per model: one process loads the same checkpoint twice with
//! different kernel choices and both give the same logits (bit for bit where the choice only
//! splits the work, within float32 rounding where it changes the kernel).

mod common;

use gemma::tuning::{DecodeAttention, DenseFrom};
use gemma::{LoadOptions, Model, Tuning};
use mlx_rs::{Array, Dtype};

fn load(tuning: Tuning) -> Model {
    load_in(Dtype::Float32, tuning)
}

fn load_in(dtype: Dtype, tuning: Tuning) -> Model {
    let options = LoadOptions {
        dtype: Some(dtype),
        tuning,
        ..LoadOptions::default()
    };
    Model::load(&common::fixture("tiny"), &options).unwrap()
}

/// Logits of a 12-token prefill (every position) and of three decode steps after it.
fn logits(model: &Model) -> Vec<Vec<f32>> {
    let prompt: Vec<u32> = (0..12).map(|i| 2 + i * 37 % 1000).collect();
    let mut caches = model.new_caches();
    let mut out = vec![model.forward(&prompt, &[], &mut caches, None).unwrap()];
    for id in [5u32, 77, 901] {
        let ids = Array::from_slice(&[id], &[1]);
        out.push(model.forward_array(&ids, &mut caches, Some(1)).unwrap());
    }
    out.iter()
        .map(|a| {
            a.as_dtype(Dtype::Float32)
                .unwrap()
                .as_slice::<f32>()
                .to_vec()
        })
        .collect()
}

/// max |a − b| / max |b| over every step.
fn relative_error(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    let diff = a
        .iter()
        .flatten()
        .zip(b.iter().flatten())
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    let scale = b.iter().flatten().fold(0.0f32, |m, y| m.max(y.abs()));
    diff / scale
}

fn plain() -> Tuning {
    Tuning {
        decode_attention: DecodeAttention::GroupedRows,
        cpu_lanes: 1,
        dense_from: DenseFrom::all(None),
        fused_single_query_head_dims: &[],
        batched_rows: true,
    }
}

#[test]
fn two_models_tuned_differently_in_one_process_give_the_same_logits() {
    let reference = load(plain());
    let lanes = load(Tuning {
        cpu_lanes: 2,
        ..plain()
    });
    let kernels = load(Tuning {
        decode_attention: DecodeAttention::HeadScores,
        cpu_lanes: 2,
        dense_from: DenseFrom::all(Some(1)),
        ..plain()
    });
    let fused = load(Tuning {
        fused_single_query_head_dims: &[64, 128],
        ..plain()
    });
    assert_eq!(lanes.tuning().cpu_lanes, 2);
    assert_eq!(
        kernels.tuning().decode_attention,
        DecodeAttention::HeadScores
    );
    // Interleaved, so that no switch of one model can leak into the other's forward.
    let expected = logits(&reference);
    let split = logits(&lanes);
    let other = logits(&kernels);
    let sdpa = logits(&fused);
    assert_eq!(logits(&reference), expected, "the reference again");
    assert_eq!(
        split, expected,
        "rows shared among 2 lanes are computed alone"
    );
    let err = relative_error(&other, &expected);
    assert!(err < 1e-4, "dense + head scores: relative error {err:.2e}");
    let err = relative_error(&sdpa, &expected);
    assert!(
        err < 1e-4,
        "MLX's attention for one query: relative error {err:.2e}"
    );
}

#[test]
fn the_dense_threshold_of_each_model_decides_its_kernel() {
    // In bfloat16 MLX's CPU quantized matmul accumulates in bf16, the dense path in float32:
    // each model's own threshold shows in how close its logits come to float32's.
    let exact = logits(&load(plain()));
    let quantized = load_in(Dtype::Bfloat16, plain());
    let dense = load_in(
        Dtype::Bfloat16,
        Tuning {
            dense_from: DenseFrom::all(Some(1)),
            ..plain()
        },
    );
    let quantized_err = relative_error(&logits(&quantized), &exact);
    let dense_err = relative_error(&logits(&dense), &exact);
    assert!(
        dense_err < quantized_err / 2.0,
        "bf16 error from float32: dense {dense_err:.2e}, quantized {quantized_err:.2e}"
    );
}
