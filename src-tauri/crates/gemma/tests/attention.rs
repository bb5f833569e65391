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

#[test]
fn a_few_masked_queries_composed_as_grouped_rows_give_the_host_attention() {
    // A speculative verify's rows over a sliding cache: query t (of T) sits at key position
    // len − T + t and sees the keys at most `window − 1` before it, and none after.
    use gemma::attention::attention_of_few_queries;
    let (heads, kv_heads, len, t, d, window) = (8, 2, 40, 5, 256, 32);
    let q = normal(&[1, heads, t, d], 4)
        .multiply(Array::from_f32(0.2))
        .unwrap();
    let k = normal(&[1, kv_heads, len, d], 5);
    let v = normal(&[1, kv_heads, len, d], 6);
    let visible = |query: usize, key: usize| {
        let at = len as usize - t as usize + query;
        key <= at && at - key < window
    };
    let mask: Vec<bool> = (0..t as usize)
        .flat_map(|i| (0..len as usize).map(move |j| (i, j)))
        .map(|(i, j)| visible(i, j))
        .collect();
    let mask = Array::from_slice(&mask, &[t, len]);
    let (hq, hk, hv) = (host(&q), host(&k), host(&v));
    let (heads_u, kv_u, len_u, t_u, d_u) = (
        heads as usize,
        kv_heads as usize,
        len as usize,
        t as usize,
        d as usize,
    );
    // Per query: the host attention over its visible keys alone.
    let mut expected = vec![0.0; heads_u * t_u * d_u]; // [heads, T, d]
    for query in 0..t_u {
        let keys: Vec<usize> = (0..len_u).filter(|&j| visible(query, j)).collect();
        let pick = |m: &[f64]| -> Vec<f64> {
            (0..kv_u)
                .flat_map(|h| keys.iter().map(move |&j| (h, j)))
                .flat_map(|(h, j)| m[(h * len_u + j) * d_u..(h * len_u + j + 1) * d_u].to_vec())
                .collect()
        };
        let qs: Vec<f64> = (0..heads_u)
            .flat_map(|h| hq[(h * t_u + query) * d_u..(h * t_u + query + 1) * d_u].to_vec())
            .collect();
        let out = host_attention(&qs, &pick(&hk), &pick(&hv), heads_u, kv_u, keys.len(), d_u);
        for h in 0..heads_u {
            expected[(h * t_u + query) * d_u..(h * t_u + query + 1) * d_u]
                .copy_from_slice(&out[h * d_u..(h + 1) * d_u]);
        }
    }
    let scale = expected.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    for (dtype, bound) in [(Dtype::Float32, 1e-5), (Dtype::Bfloat16, 2e-2)] {
        let [q, k, v] = [&q, &k, &v].map(|a| a.as_dtype(dtype).unwrap());
        let out = attention_of_few_queries(&q, &k, &v, &mask).unwrap();
        assert_eq!(out.shape(), &[1, heads, t, d]);
        assert_eq!(out.dtype(), dtype);
        let err = host(&out)
            .iter()
            .zip(&expected)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            err <= bound * scale,
            "{dtype:?}: error {err} (scale {scale})"
        );
    }
}
