//! The reference's resampler to 16 kHz: a Kaiser-windowed sinc low-pass designed at the upsampled
//! rate and applied polyphase, with the signal's edge samples repeated past both ends
//! (docs/AUDIO.md, "Resampling"). Computed in f64 in the reference's summation order, rounded
//! to f32 at the end.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::SAMPLE_RATE;

/// Zero crossings of the sinc on each side, in units of the slower rate.
const NUM_ZEROS: usize = 64;
/// Cutoff as a fraction of the slower rate's Nyquist frequency.
const ROLLOFF: f64 = 0.947_593_716_739_959_6;
/// Kaiser window shape.
const BETA: f64 = 14.769_656_459_379_492;

/// The reduced conversion ratio from `rate` to 16 kHz: `(up, down)`.
pub(super) fn ratio(rate: u32) -> (usize, usize) {
    let g = gcd(rate, SAMPLE_RATE);
    ((SAMPLE_RATE / g) as usize, (rate / g) as usize)
}

/// How many input samples past the last kept output the filter reads: keeping this many more
/// than needed makes a prefix's outputs equal the whole signal's.
pub(super) fn halo(rate: u32) -> usize {
    let (up, down) = ratio(rate);
    let half = NUM_ZEROS * up.max(down);
    half / up + down + 2
}

/// Resamples mono audio at `rate` Hz to 16 kHz exactly as the reference does
/// (`resample_poly(x, up, down, window=kaiser_sinc, padtype="edge")`, then f32).
pub fn resample_to_16k(x: &[f32], rate: u32) -> Vec<f32> {
    resample_prefix(x, rate, usize::MAX)
}

/// The first `max_out` output samples (all of them when fewer). When `x` is only a prefix of a
/// longer signal, it must reach [`halo`] samples past the last needed input for exact values.
pub(super) fn resample_prefix(x: &[f32], rate: u32, max_out: usize) -> Vec<f32> {
    if rate == SAMPLE_RATE || rate == 0 || x.is_empty() {
        return x[..x.len().min(max_out)].to_vec();
    }
    let (up, down) = ratio(rate);
    let filter = polyphase(rate);

    let n_in = x.len();
    let n_out = ((n_in as u128 * up as u128).div_ceil(down as u128)).min(max_out as u128) as usize;
    let mut y = vec![0.0f32; n_out];
    // Outputs are independent: long recordings are shared among the cores, same values.
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8)
        .min(n_out / PER_THREAD + 1);
    if threads <= 1 {
        fill(&mut y, 0, x, up, down, &filter);
    } else {
        let chunk = n_out.div_ceil(threads);
        std::thread::scope(|scope| {
            for (i, part) in y.chunks_mut(chunk).enumerate() {
                let filter = &filter;
                scope.spawn(move || fill(part, i * chunk, x, up, down, filter));
            }
        });
    }
    y
}

/// Outputs below this count are computed on the calling thread.
const PER_THREAD: usize = 200_000;

/// Output samples `first..first + out.len()` of the polyphase filter over `x`.
fn fill(out: &mut [f32], first: usize, x: &[f32], up: usize, down: usize, filter: &Polyphase) {
    let last = x.len() as i64 - 1;
    for (j, y) in (first..).zip(out.iter_mut()) {
        let t = (j + filter.skip) * down;
        let newest = (t / up) as i64;
        let taps = &filter.phases[t % up];
        let oldest = newest - taps.len() as i64 + 1;
        let mut acc = 0.0f64;
        if oldest >= 0 && newest <= last {
            let window = &x[oldest as usize..=newest as usize];
            for (&v, &tap) in window.iter().zip(taps) {
                acc += f64::from(v) * tap;
            }
        } else {
            for (k, &tap) in taps.iter().enumerate() {
                let i = (oldest + k as i64).clamp(0, last) as usize;
                acc += f64::from(x[i]) * tap;
            }
        }
        *y = acc as f32;
    }
}

/// The filter split by phase, as the sum runs: tap lists ordered oldest input first.
struct Polyphase {
    phases: Vec<Vec<f64>>,
    /// Outputs the reference drops at the start so the filter's centre lines up with the input.
    skip: usize,
}

/// The filter for `rate`, designed once per rate (a 44.1 kHz filter has 56 449 taps).
fn polyphase(rate: u32) -> Arc<Polyphase> {
    static CACHE: OnceLock<Mutex<HashMap<u32, Arc<Polyphase>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(found) = cache.lock().ok().and_then(|c| c.get(&rate).cloned()) {
        return found;
    }
    let (up, down) = ratio(rate);
    let h = kaiser_sinc(up, down);
    let half = (h.len() - 1) / 2;
    let pre = down - half % down;
    let taps_len = pre + h.len();
    let phases = (0..up)
        .map(|phase| {
            let count = (taps_len - phase).div_ceil(up);
            (0..count)
                .rev()
                .map(|k| {
                    let idx = phase + k * up;
                    if idx < pre {
                        0.0
                    } else {
                        h[idx - pre] * up as f64
                    }
                })
                .collect()
        })
        .collect();
    let filter = Arc::new(Polyphase {
        phases,
        skip: (half + pre) / down,
    });
    if let Ok(mut c) = cache.lock() {
        // Real files use a handful of rates; odd ones must not pile up.
        if c.len() >= 16 {
            c.clear();
        }
        c.insert(rate, Arc::clone(&filter));
    }
    filter
}

/// `firwin(2·64·R + 1, 0.9476 / R, window=("kaiser", 14.77))` with R = max(up, down), unit DC gain.
fn kaiser_sinc(up: usize, down: usize) -> Vec<f64> {
    let r = up.max(down);
    let numtaps = 2 * NUM_ZEROS * r + 1;
    let alpha = 0.5 * (numtaps - 1) as f64;
    let cutoff = ROLLOFF / r as f64;
    let i0_beta = bessel_i0(BETA);
    let mut h: Vec<f64> = (0..numtaps)
        .map(|n| {
            let m = n as f64 - alpha;
            let ratio = m / alpha;
            let window = bessel_i0(BETA * (1.0 - ratio * ratio).sqrt()) / i0_beta;
            cutoff * sinc(cutoff * m) * window
        })
        .collect();
    let sum = pairwise_sum(&h);
    for v in &mut h {
        *v /= sum;
    }
    h
}

/// NumPy's `sinc`: `sin(πx)/(πx)`, with 1e-20 standing in for 0.
fn sinc(x: f64) -> f64 {
    let y = std::f64::consts::PI * if x == 0.0 { 1.0e-20 } else { x };
    y.sin() / y
}

/// The modified Bessel function of the first kind, order 0, by its power series
/// (every term positive, so it converges to full f64 precision for the arguments used here).
fn bessel_i0(x: f64) -> f64 {
    let q = 0.25 * x * x;
    let (mut term, mut sum) = (1.0f64, 1.0f64);
    for k in 1..500 {
        term *= q / (k * k) as f64;
        sum += term;
        if term < sum * 1e-17 {
            break;
        }
    }
    sum
}

/// NumPy's pairwise summation (blocks of 128, eight accumulators), so the normalised taps round
/// as the reference's do.
fn pairwise_sum(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        a.iter().fold(0.0, |acc, &v| acc + v)
    } else if n <= 128 {
        let mut r = [0.0f64; 8];
        r.copy_from_slice(&a[..8]);
        let whole = n - n % 8;
        for block in a[8..whole].chunks_exact(8) {
            for (acc, &v) in r.iter_mut().zip(block) {
                *acc += v;
            }
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for &v in &a[whole..] {
            res += v;
        }
        res
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        pairwise_sum(&a[..n2]) + pairwise_sum(&a[n2..])
    }
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_and_filter_lengths_match_the_reference() {
        assert_eq!(ratio(44_100), (160, 441));
        assert_eq!(ratio(48_000), (1, 3));
        assert_eq!(ratio(8_000), (2, 1));
        assert_eq!(ratio(22_050), (320, 441));
        assert_eq!(kaiser_sinc(1, 3).len(), 385);
        assert_eq!(kaiser_sinc(2, 1).len(), 257);
        let h = kaiser_sinc(160, 441);
        assert_eq!(h.len(), 56_449);
        assert!((h.iter().sum::<f64>() - 1.0).abs() < 1e-12, "unit DC gain");
    }

    #[test]
    fn bessel_i0_matches_known_values() {
        // scipy.special.i0
        assert_eq!(bessel_i0(0.0), 1.0);
        assert!((bessel_i0(1.0) - 1.266_065_877_752_008_2).abs() < 1e-15);
        let big = 271_903.640_681_456_6; // scipy.special.i0(14.769656459379492)
        assert!((bessel_i0(BETA) / big - 1.0).abs() < 1e-14);
    }

    #[test]
    fn output_length_is_the_ceiling_of_the_ratio() {
        let x = vec![0.25f32; 1_001];
        assert_eq!(resample_to_16k(&x, 48_000).len(), 334);
        assert_eq!(resample_to_16k(&x, 8_000).len(), 2_002);
        assert_eq!(resample_to_16k(&x, 44_100).len(), 364);
        assert_eq!(resample_to_16k(&x, 16_000), x);
        // A constant stays constant: unit gain, and the edges repeat the signal.
        for v in resample_to_16k(&x, 44_100) {
            assert!((v - 0.25).abs() < 1e-6, "{v}");
        }
    }

    #[test]
    fn a_prefix_with_its_halo_gives_the_whole_signals_values() {
        let x: Vec<f32> = (0..20_000)
            .map(|i| ((i as f32) * 0.013).sin() * 0.5)
            .collect();
        for rate in [8_000, 22_050, 44_100, 48_000] {
            let whole = resample_to_16k(&x, rate);
            let (up, down) = ratio(rate);
            let keep = 3_000;
            let need = (keep * down).div_ceil(up) + halo(rate);
            assert_eq!(resample_prefix(&x[..need], rate, keep), whole[..keep]);
        }
    }
}
