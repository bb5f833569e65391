//! A quantized linear layer over several rows, whichever MLX kernel computes it on this backend,
//! gives the product of its dequantized weights to within the rounding of its compute dtype.

mod common;
use common::normal;

use gemma::config::QuantSpec;
use gemma::quant::Linear;
use gemma::tuning::LinearKernels;
use gemma::Tuning;
use mlx_rs::ops::{dequantize, quantize, quantized_matmul};
use mlx_rs::{Array, Dtype};

/// max |a − b| / max |b|, in float32.
fn relative_error(a: &Array, b: &Array) -> f32 {
    let a = a.as_dtype(Dtype::Float32).unwrap();
    let diff = a.subtract(b).unwrap().abs().unwrap().max(None).unwrap();
    let scale = b.abs().unwrap().max(None).unwrap();
    diff.item_exact::<f32>() / scale.item_exact::<f32>()
}

/// A random `[out, inp]` layer quantized to 4 bits in groups of 64: its words, scales and biases.
fn random_quantized(out: i32, inp: i32, seed: u64) -> (Array, Array, Array) {
    let w = normal(&[out, inp], seed)
        .multiply(Array::from_f32(0.02))
        .unwrap();
    quantize(&w, 64, 4).unwrap()
}

fn quantized_layer(words: &Array, scales: Array, biases: Array, kernels: LinearKernels) -> Linear {
    Linear::Quantized {
        weight: words.clone(),
        scales,
        biases,
        spec: QuantSpec {
            bits: 4,
            group_size: 64,
        },
        kernels,
    }
}

#[test]
fn a_quantized_layer_in_half_precision_is_within_its_rounding_over_several_rows() {
    let (out, inp) = (96, 512);
    let (words, scales, biases) = random_quantized(out, inp, 1);
    let tuning = Tuning::for_backend();
    for dtype in [Dtype::Bfloat16, Dtype::Float16] {
        let layer = quantized_layer(
            &words,
            scales.as_dtype(dtype).unwrap(),
            biases.as_dtype(dtype).unwrap(),
            tuning.linear(),
        );
        // The exact product of the layer's (half-precision) weights with the same inputs.
        let (s32, b32) = match &layer {
            Linear::Quantized { scales, biases, .. } => (
                scales.as_dtype(Dtype::Float32).unwrap(),
                biases.as_dtype(Dtype::Float32).unwrap(),
            ),
            Linear::Dense { .. } => unreachable!(),
        };
        let dense32 = dequantize(&words, &s32, &b32, 64, 4).unwrap();
        for rows in [1, 2, 38] {
            let x = normal(&[1, rows, inp], 2).as_dtype(dtype).unwrap();
            let exact = x
                .as_dtype(Dtype::Float32)
                .unwrap()
                .matmul(dense32.transpose().unwrap())
                .unwrap();
            let y = layer.forward(&x).unwrap();
            assert_eq!(y.shape(), &[1, rows, out]);
            assert_eq!(y.dtype(), dtype);
            let dense = tuning
                .dense_from
                .rows(dtype)
                .is_some_and(|min| rows as usize >= min);
            if rows == 1 && !dense {
                // One row keeps MLX's quantized kernel, as mlx-vlm does (on the CPU, in bf16,
                // it accumulates in bf16: a few % off, and faster than dequantizing).
                let stored = layer.forward_as_stored(&x).unwrap();
                assert_eq!(
                    relative_error(&y, &stored.as_dtype(Dtype::Float32).unwrap()),
                    0.0
                );
                continue;
            }
            let err = relative_error(&y, &exact);
            // bf16 keeps 8 significant bits (f16 11): rounding the output alone is ≤ 2^-9.
            let bound = if dtype == Dtype::Bfloat16 {
                0.02
            } else {
                0.003
            };
            assert!(
                err <= bound,
                "{dtype:?}, {rows} rows (dense: {dense}): relative error {err} > {bound}"
            );
        }
    }
}

#[test]
fn a_quantized_layer_shared_among_cpu_lanes_gives_the_one_piece_result_exactly() {
    // Wide enough to be shared among up to 4 lanes.
    let (out, inp) = (1040, 256);
    let (words, scales, biases) = random_quantized(out, inp, 3);
    for lanes in [1, 2, 4] {
        let tuning = Tuning {
            cpu_lanes: lanes,
            ..Tuning::for_flavor("cpu")
        };
        let layer = quantized_layer(&words, scales.clone(), biases.clone(), tuning.linear());
        for rows in [1, 5] {
            let x = normal(&[1, rows, inp], 4);
            let whole = quantized_matmul(&x, &words, &scales, &biases, true, 64, 4).unwrap();
            let y = layer.forward_as_stored(&x).unwrap();
            assert_eq!(y.shape(), &[1, rows, out]);
            assert_eq!(
                relative_error(&y, &whole),
                0.0,
                "{lanes} lanes, {rows} rows"
            );
        }
    }
}
