//! A decode step's attention (one query per head over the whole cache), by each way the model
//! can compose it, against the same attention computed on the host in f64.

mod common;
use common::normal;

use gemma::attention::single_query_attention;
use gemma::tuning::DecodeAttention;
use mlx_rs::{Array, Dtype};

fn host(a: &Array) -> Vec<f64> {
    let a = a.as_dtype(Dtype::Float32).unwrap();
    a.as_slice::<f32>().iter().map(|&x| x as f64).collect()
}

/// `[heads, d]`: softmax(q·kᵀ)·v per head, query head `h` on K/V head `h / (heads / kv_heads)`.
fn host_attention(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    heads: usize,
    kv_heads: usize,
    len: usize,
    d: usize,
) -> Vec<f64> {
    let group = heads / kv_heads;
    let mut out = vec![0.0; heads * d];
    for h in 0..heads {
        let kv = h / group;
        let row = |m: &[f64], j: usize| m[(kv * len + j) * d..(kv * len + j + 1) * d].to_vec();
        let scores: Vec<f64> = (0..len)
            .map(|j| {
                row(k, j)
                    .iter()
                    .zip(&q[h * d..(h + 1) * d])
                    .map(|(a, b)| a * b)
                    .sum()
            })
            .collect();
        let top = scores.iter().cloned().fold(f64::MIN, f64::max);
        let weights: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
        let total: f64 = weights.iter().sum();
        for (j, w) in weights.iter().enumerate() {
            for (o, x) in out[h * d..(h + 1) * d].iter_mut().zip(row(v, j)) {
                *o += w / total * x;
            }
        }
    }
    out
}

#[test]
fn every_decode_attention_path_gives_the_host_attention_in_f32_and_bf16() {
    let (heads, kv_heads, len, d) = (8, 2, 45, 256);
    // Queries scaled so that the scores spread (a peaked softmax catches a wrong head pairing).
    let q = normal(&[1, heads, 1, d], 1)
        .multiply(Array::from_f32(0.2))
        .unwrap();
    let k = normal(&[1, kv_heads, len, d], 2);
    let v = normal(&[1, kv_heads, len, d], 3);
    let expected = host_attention(
        &host(&q),
        &host(&k),
        &host(&v),
        heads as usize,
        kv_heads as usize,
        len as usize,
        d as usize,
    );
    let scale = expected.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    for (dtype, bound) in [(Dtype::Float32, 1e-5), (Dtype::Bfloat16, 2e-2)] {
        let [q, k, v] = [&q, &k, &v].map(|a| a.as_dtype(dtype).unwrap());
        for path in [DecodeAttention::GroupedRows, DecodeAttention::HeadScores] {
            let out = single_query_attention(&q, &k, &v, path).unwrap();
            assert_eq!(out.shape(), &[1, kv_heads, heads / kv_heads, d], "{path:?}");
            assert_eq!(out.dtype(), dtype, "{path:?}");
            let got = host(&out);
            let err = got
                .iter()
                .zip(&expected)
                .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()))
                / scale;
            assert!(
                err < bound,
                "{path:?} in {dtype:?}: relative error {err:.2e} (bound {bound:.0e})"
            );
        }
    }
}
