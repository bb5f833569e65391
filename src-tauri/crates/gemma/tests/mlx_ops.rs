//! The MLX primitives the model is built on, run through mlx-rs on this machine's MLX backend and
//! checked against straightforward host-side (f64) computations.

mod common;
use common::normal;

use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
use mlx_rs::ops::{dequantize, quantize, quantized_matmul};
use mlx_rs::transforms::compile::compile;
use mlx_rs::Array;

fn host(a: &Array) -> Vec<f32> {
    a.as_type::<f32>().unwrap().as_slice::<f32>().to_vec()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Dequantizes MLX's affine layout by hand: 32/bits values per little-endian u32 word,
/// one (scale, bias) pair per `group` consecutive input columns.
fn host_dequantize(
    words: &[u32],
    scales: &[f32],
    biases: &[f32],
    rows: usize,
    cols: usize,
    bits: usize,
) -> Vec<f32> {
    let per_word = 32 / bits;
    let groups = cols / 64;
    let mask = (1u32 << bits) - 1;
    let mut out = vec![0.0; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            let word = words[r * cols / per_word + c / per_word];
            let q = (word >> ((c % per_word) * bits)) & mask;
            let g = r * groups + c / 64;
            out[r * cols + c] = scales[g] * q as f32 + biases[g];
        }
    }
    out
}

#[test]
fn quantized_matmul_matches_dequantize_then_matmul_for_4_and_8_bits() {
    let (rows, cols) = (24, 256);
    let w = normal(&[rows, cols], 1);
    let x = normal(&[5, cols], 2);
    for bits in [4, 8] {
        let (wq, scales, biases) = quantize(&w, 64, bits).unwrap();
        assert_eq!(wq.shape(), &[rows, cols * bits / 32]);
        assert_eq!(scales.shape(), &[rows, cols / 64]);

        // Our reading of the packed layout reproduces MLX's own dequantize exactly.
        let deq = dequantize(&wq, &scales, &biases, 64, bits).unwrap();
        let by_hand = host_dequantize(
            wq.as_slice::<u32>(),
            &host(&scales),
            &host(&biases),
            rows as usize,
            cols as usize,
            bits as usize,
        );
        assert_eq!(
            max_abs_diff(&host(&deq), &by_hand),
            0.0,
            "{bits}-bit layout"
        );

        // Quantization error stays within one step of each group.
        let step_max = host(&scales).iter().fold(0.0f32, |m, s| m.max(s.abs()));
        assert!(max_abs_diff(&host(&deq), &host(&w)) <= step_max + 1e-5);

        let fused = quantized_matmul(&x, &wq, &scales, &biases, true, 64, bits).unwrap();
        let reference = x.matmul(deq.transpose().unwrap()).unwrap();
        assert_eq!(fused.shape(), &[5, rows]);
        let diff = max_abs_diff(&host(&fused), &host(&reference));
        assert!(diff < 1e-3, "{bits}-bit quantized_matmul differs by {diff}");
    }
}

#[test]
fn rms_norm_matches_host_formula() {
    let x = normal(&[3, 64], 3);
    let w = normal(&[64], 4);
    let y = host(&fast::rms_norm(&x, Some(&w), 1e-6).unwrap());
    let (xs, ws) = (host(&x), host(&w));
    for row in 0..3 {
        let v = &xs[row * 64..(row + 1) * 64];
        let ms = v.iter().map(|a| (*a as f64).powi(2)).sum::<f64>() / 64.0;
        let inv = 1.0 / (ms + 1e-6).sqrt();
        for j in 0..64 {
            let expect = v[j] as f64 * inv * ws[j] as f64;
            assert!((y[row * 64 + j] as f64 - expect).abs() < 1e-4);
        }
    }
}

/// Rotate-half RoPE on the host: dim j pairs with j + D/2, angle = pos · inv_freq_j.
fn host_rope(x: &[f32], t: usize, d: usize, offset: usize, inv_freq: &[f64]) -> Vec<f32> {
    let half = d / 2;
    let mut out = x.to_vec();
    for p in 0..t {
        for j in 0..half {
            let angle = (p + offset) as f64 * inv_freq[j];
            let (s, c) = angle.sin_cos();
            let (a, b) = (x[p * d + j] as f64, x[p * d + j + half] as f64);
            out[p * d + j] = (a * c - b * s) as f32;
            out[p * d + j + half] = (b * c + a * s) as f32;
        }
    }
    out
}

#[test]
fn rope_default_and_proportional_match_host_formula() {
    let (t, d, offset) = (7usize, 64usize, 5);
    let x = normal(&[1, 1, t as i32, d as i32], 5);

    let inv: Vec<f64> = (0..d / 2)
        .map(|j| 10000f64.powf(-2.0 * j as f64 / d as f64))
        .collect();
    let y = fast::rope(&x, d as i32, false, 10000.0, 1.0, offset as i32, None).unwrap();
    assert!(max_abs_diff(&host(&y), &host_rope(&host(&x), t, d, offset, &inv)) < 1e-4);

    // Proportional RoPE (Gemma 4 full layers): a quarter of the pairs rotate with exponents over
    // the full head dim, the rest pass through (MLX takes periods; infinity means "no rotation").
    let rotated = d / 8;
    let inv: Vec<f64> = (0..d / 2)
        .map(|j| {
            if j < rotated {
                1e6f64.powf(-2.0 * j as f64 / d as f64)
            } else {
                0.0
            }
        })
        .collect();
    let periods: Vec<f32> = inv
        .iter()
        .map(|f| {
            if *f == 0.0 {
                f32::INFINITY
            } else {
                (1.0 / f) as f32
            }
        })
        .collect();
    let freqs = Array::from_slice(&periods, &[(d / 2) as i32]);
    let y = fast::rope(&x, d as i32, false, None, 1.0, offset as i32, &freqs).unwrap();
    assert!(max_abs_diff(&host(&y), &host_rope(&host(&x), t, d, offset, &inv)) < 1e-4);
}

#[test]
fn sdpa_with_gqa_and_mask_matches_host_attention() {
    let (hq, hkv, tq, tk, d) = (4usize, 2usize, 3usize, 6usize, 16usize);
    let q = normal(&[1, hq as i32, tq as i32, d as i32], 6);
    let k = normal(&[1, hkv as i32, tk as i32, d as i32], 7);
    let v = normal(&[1, hkv as i32, tk as i32, d as i32], 8);
    // A sliding-window-like mask: query i (at absolute position 3 + i) sees keys in (pos-3, pos].
    let allowed: Vec<bool> = (0..tq)
        .flat_map(|i| (0..tk).map(move |j| j <= 3 + i && 3 + i - j < 3))
        .collect();
    let mask = Array::from_slice(&allowed, &[tq as i32, tk as i32]);
    let scale = 1.0;
    let out = fast::scaled_dot_product_attention(
        &q,
        &k,
        &v,
        scale,
        ScaledDotProductAttentionMask::Array(&mask),
        None,
    )
    .unwrap();
    let out = host(&out);
    let (qs, ks, vs) = (host(&q), host(&k), host(&v));
    for h in 0..hq {
        let kv = h / (hq / hkv);
        for i in 0..tq {
            let scores: Vec<f64> = (0..tk)
                .map(|j| {
                    if !allowed[i * tk + j] {
                        return f64::NEG_INFINITY;
                    }
                    (0..d)
                        .map(|e| qs[(h * tq + i) * d + e] as f64 * ks[(kv * tk + j) * d + e] as f64)
                        .sum::<f64>()
                        * scale as f64
                })
                .collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = scores.iter().map(|s| (s - m).exp()).sum();
            for e in 0..d {
                let expect: f64 = (0..tk)
                    .map(|j| (scores[j] - m).exp() / z * vs[(kv * tk + j) * d + e] as f64)
                    .sum();
                let got = out[(h * tq + i) * d + e] as f64;
                assert!(
                    (got - expect).abs() < 1e-4,
                    "head {h} row {i} dim {e}: {got} vs {expect}"
                );
            }
        }
    }
}

#[test]
fn compiled_function_matches_eager_and_reuses_for_new_shapes_when_shapeless() {
    let gelu_tanh = |x: &Array| {
        let c = (2.0f32 / std::f32::consts::PI).sqrt();
        let inner = (x + &(x * x * x * 0.044715f32)) * c;
        x * 0.5f32 * (mlx_rs::ops::tanh(&inner).unwrap() + 1.0f32)
    };
    let x = normal(&[4, 32], 9);
    let eager = host(&gelu_tanh(&x));
    let mut compiled = compile(gelu_tanh, true);
    assert!(max_abs_diff(&host(&compiled(&x).unwrap()), &eager) < 1e-6);
    let y = normal(&[2, 8], 10);
    let out = compiled(&y).unwrap();
    assert_eq!(out.shape(), &[2, 8]);
    let ys = host(&y);
    let expect: Vec<f32> = ys
        .iter()
        .map(|&v| {
            let v = v as f64;
            (0.5 * v
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v.powi(3))).tanh()))
                as f32
        })
        .collect();
    assert!(max_abs_diff(&host(&out), &expect) < 1e-5);
}
