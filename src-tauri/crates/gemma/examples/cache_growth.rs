//! What a decode step pays to add its K/V to a full cache of E4B's shape (2 K/V heads of 512,
//! bfloat16) after a long history: the cache's write in place (`KvCache::full`) against a
//! concatenation of the whole history, which every step copied before. Milliseconds per step,
//! K and V of one full layer (E4B has four), medians of `STEPS` steps. Then the same for a
//! sliding cache (2 K/V heads of 256, window 512; E4B has twenty): written in place
//! (`KvCache::sliding`, its kept positions moved once the room is used up) against the window
//! and slack joined with the new position every step, as before; means over
//! `SLIDING_STEPS` steps, so that the moves count.
//!
//!     cargo run --release -p gemma --example cache_growth [POSITIONS...]

use std::time::Instant;

use gemma::KvCache;
use mlx_rs::ops::{concatenate, zeros_dtype};
use mlx_rs::transforms::eval;
use mlx_rs::{Array, Dtype};

const STEPS: usize = 64;
const SLIDING_STEPS: usize = 512;

/// Milliseconds of each of `n` calls of `step`.
fn time_steps(n: usize, mut step: impl FnMut()) -> Vec<f64> {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            step();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let history: Vec<i32> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let history = if history.is_empty() {
        vec![2048, 8192, 32768]
    } else {
        history
    };
    let one = || zeros_dtype(&[1, 2, 1, 512], Dtype::Bfloat16).unwrap();
    println!("positions  in place ms  concatenated ms  ratio");
    for len in history {
        let prompt = zeros_dtype(&[1, 2, len, 512], Dtype::Bfloat16).unwrap();
        // The cache, written in place.
        let mut cache = KvCache::full(None);
        cache
            .update_and_fetch(prompt.clone(), prompt.clone())
            .unwrap();
        eval(cache.arrays()).unwrap();
        let in_place = time_steps(STEPS + 1, || {
            cache.update_and_fetch(one(), one()).unwrap();
            eval(cache.arrays()).unwrap();
        });
        // The same history, concatenated every step.
        let (mut k, mut v): (Array, Array) = (prompt.clone(), prompt);
        eval([&k, &v]).unwrap();
        let joined = time_steps(STEPS + 1, || {
            k = concatenate(&[&k, &one()], 2).unwrap();
            v = concatenate(&[&v, &one()], 2).unwrap();
            eval([&k, &v]).unwrap();
        });
        let (a, b) = (median(in_place), median(joined));
        println!("{len:>9}  {a:>11.3}  {b:>15.3}  {:>5.1}", b / a);
    }
    sliding();
}

fn sliding() {
    let window = 512;
    let keep = (window - 1 + gemma::cache::REWIND_SLACK) as i32;
    let one = || zeros_dtype(&[1, 2, 1, 256], Dtype::Bfloat16).unwrap();
    let prompt = zeros_dtype(&[1, 2, 2048, 256], Dtype::Bfloat16).unwrap();
    let mean = |v: Vec<f64>| v.iter().sum::<f64>() / v.len() as f64;
    let mut cache = KvCache::sliding(window, None);
    cache
        .update_and_fetch(prompt.clone(), prompt.clone())
        .unwrap();
    eval(cache.arrays()).unwrap();
    let in_place = time_steps(SLIDING_STEPS, || {
        cache.update_and_fetch(one(), one()).unwrap();
        eval(cache.arrays()).unwrap();
    });
    // As before: keep the last `window − 1 + slack` positions, join the new one.
    let tail = |a: &Array| {
        use mlx_rs::ops::indexing::IndexOp;
        let n = a.shape()[2];
        a.index((.., .., (n - keep.min(n)).., ..))
    };
    let (mut k, mut v): (Array, Array) = (tail(&prompt), tail(&prompt));
    eval([&k, &v]).unwrap();
    let joined = time_steps(SLIDING_STEPS, || {
        k = concatenate(&[&tail(&k), &one()], 2).unwrap();
        v = concatenate(&[&tail(&v), &one()], 2).unwrap();
        eval([&k, &v]).unwrap();
    });
    let (a, b) = (mean(in_place), mean(joined));
    println!("sliding (window {window}, mean of {SLIDING_STEPS} steps)  in place {a:.3} ms  joined {b:.3} ms  ratio {:.1}", b / a);
}
