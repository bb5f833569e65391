//! The audio tower's input: log-mel features of one clip at 16 kHz, as the reference's extractor
//! computes them (docs/AUDIO.md, "Features"): 20 ms periodic-Hann frames every 10 ms behind a
//! 160-sample semicausal pad, 512-point FFT magnitudes, 128 HTK mel filters over 0–8 kHz,
//! `ln(mel + 0.001)`, and a mask of the frames that end inside the clip.

use std::sync::OnceLock;

use realfft::num_complex::Complex;
use realfft::RealFftPlanner;

use super::{CLIP_SAMPLES, SAMPLE_RATE};

/// Mel bins per frame.
pub const MEL_BINS: usize = 128;
const FRAME: usize = 320;
const HOP: usize = 160;
const FFT: usize = 512;
const FFT_BINS: usize = FFT / 2 + 1;
/// The clip is zero-padded on the right to a multiple of this many samples.
const PAD_MULTIPLE: usize = 128;
const MEL_FLOOR: f64 = 1e-3;
const MS_PER_TOKEN: f64 = 40.0;
/// The most soft tokens one clip becomes (30 s at 25 tokens a second).
pub const MAX_SOFT_TOKENS: usize = 750;

/// Log-mel features of one clip of at most [`CLIP_SAMPLES`] samples (longer input is cut there,
/// as in the reference): `(features [frames, 128] row-major, frames, valid [frames])`.
/// Rows of frames that reach past the clip's end are all zero and marked invalid.
pub fn log_mel(clip: &[f32]) -> (Vec<f32>, usize, Vec<bool>) {
    let clip = &clip[..clip.len().min(CLIP_SAMPLES)];
    let n = clip.len();
    let padded = n.div_ceil(PAD_MULTIPLE) * PAD_MULTIPLE;
    // Frame i covers padded samples 160·i − 160 … 160·i + 159 (the first 160 are the left pad).
    let frames = if padded + HOP < FRAME + 1 {
        0
    } else {
        (padded + HOP - (FRAME + 1)) / HOP + 1
    };
    let tables = tables();
    let fft = RealFftPlanner::<f64>::new().plan_fft_forward(FFT);
    let mut input = fft.make_input_vec();
    let mut spectrum = fft.make_output_vec();
    let mut scratch = fft.make_scratch_vec();
    let mut magnitude = [0.0f64; FFT_BINS];

    let mut features = vec![0.0f32; frames * MEL_BINS];
    let mut valid = vec![false; frames];
    for (i, row) in features.chunks_exact_mut(MEL_BINS).enumerate() {
        // The sample just past the frame's end must be real (the reference's frame mask).
        if i * HOP + HOP >= n {
            continue;
        }
        valid[i] = true;
        let start = (i * HOP) as isize - HOP as isize;
        for (k, slot) in input.iter_mut().enumerate() {
            *slot = if k < FRAME {
                let at = start + k as isize;
                let sample = if at >= 0 && (at as usize) < n {
                    clip[at as usize]
                } else {
                    0.0
                };
                // The windowing product is f32 in the reference.
                f64::from(sample * tables.window[k])
            } else {
                0.0
            };
        }
        if fft
            .process_with_scratch(&mut input, &mut spectrum, &mut scratch)
            .is_err()
        {
            // Sizes are fixed above; this cannot happen.
            continue;
        }
        for (m, c) in magnitude.iter_mut().zip(&spectrum) {
            *m = Complex::norm(*c);
        }
        for (out, filter) in row.iter_mut().zip(&tables.filters) {
            let mel: f64 = filter
                .weights
                .iter()
                .zip(&magnitude[filter.first..])
                .map(|(w, m)| w * m)
                .sum();
            *out = (mel + MEL_FLOOR).ln() as f32;
        }
    }
    (features, frames, valid)
}

/// Placeholder tokens for a clip of `samples_16k` samples: `min(ceil(ms / 40), 750)` computed in
/// f64 in the reference's order, which gives one more than `ceil(N / 640)` for N = 257 920 and
/// 260 480 (docs/AUDIO.md, "Token count").
pub fn soft_tokens(samples_16k: usize) -> usize {
    let ms = samples_16k as f64 / f64::from(SAMPLE_RATE) * 1000.0;
    let tokens = (ms / MS_PER_TOKEN).ceil();
    (tokens as usize).min(MAX_SOFT_TOKENS)
}

/// One mel filter: its nonzero weights, starting at FFT bin `first`.
struct Filter {
    first: usize,
    weights: Vec<f64>,
}

struct Tables {
    window: [f32; FRAME],
    filters: Vec<Filter>,
}

fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(|| {
        let bank = mel_filter_bank();
        let filters = (0..MEL_BINS)
            .map(|j| {
                let column: Vec<f64> = (0..FFT_BINS).map(|k| bank[k * MEL_BINS + j]).collect();
                let first = column.iter().position(|&w| w != 0.0).unwrap_or(FFT_BINS);
                let last = column
                    .iter()
                    .rposition(|&w| w != 0.0)
                    .map_or(first, |l| l + 1);
                Filter {
                    first,
                    weights: column[first..last].to_vec(),
                }
            })
            .collect();
        Tables {
            window: hann_window(),
            filters,
        }
    })
}

/// The reference's periodic Hann window `0.5 - 0.5·cos(2π·n/320)` as NumPy 2 computes it in
/// float32, bit for bit (`(0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(320, dtype=np.float32) /
/// 320)).view(np.uint32)`). NumPy's float32 cosine is not correctly rounded; a correctly rounded
/// window differs in 19 values, which moves the features of near-silent bins by up to 1.6e-4.
fn hann_window() -> [f32; FRAME] {
    HANN_BITS.map(f32::from_bits)
}

#[rustfmt::skip]
const HANN_BITS: [u32; FRAME] = [
    0x00000000, 0x38ca2000, 0x39ca1c00, 0x3a635400, 0x3aca0700, 0x3b1dc980, 0x3b632200, 0x3b9a8300,
    0x3bc9b6c0, 0x3bff27c0, 0x3c1d6840, 0x3c3e5580, 0x3c625880, 0x3c84b6d0, 0x3c99c890, 0x3cb05f50,
    0x3cc878f0, 0x3ce21310, 0x3cfd2b10, 0x3d0cdf30, 0x3d1be510, 0x3d2ba5a8, 0x3d3c1f70, 0x3d4d50c8,
    0x3d5f37f8, 0x3d71d348, 0x3d829068, 0x3d8c8f5c, 0x3d96e580, 0x3da191d0, 0x3dac933c, 0x3db7e8b0,
    0x3dc3910c, 0x3dcf8b2c, 0x3ddbd5e0, 0x3de86ff4, 0x3df55824, 0x3e014696, 0x3e0806e2, 0x3e0eec48,
    0x3e15f61a, 0x3e1d23a6, 0x3e24743c, 0x3e2be71a, 0x3e337b8e, 0x3e3b30ce, 0x3e43061e, 0x3e4afab8,
    0x3e530dd0, 0x3e5b3e9e, 0x3e638c4e, 0x3e6bf612, 0x3e747b14, 0x3e7d1a78, 0x3e82e9b9, 0x3e87528a,
    0x3e8bc748, 0x3e90477c, 0x3e94d2b6, 0x3e996886, 0x3e9e0875, 0x3ea2b210, 0x3ea764e0, 0x3eac206e,
    0x3eb0e444, 0x3eb5afe8, 0x3eba82e2, 0x3ebf5cb7, 0x3ec43cee, 0x3ec9230a, 0x3ece0e91, 0x3ed2ff05,
    0x3ed7f3e9, 0x3edcecc4, 0x3ee1e912, 0x3ee6e85b, 0x3eebea1b, 0x3ef0edd8, 0x3ef5f312, 0x3efaf94a,
    0x3f000000, 0x3f02835c, 0x3f050677, 0x3f078915, 0x3f0a0af3, 0x3f0c8bd3, 0x3f0f0b77, 0x3f1189a0,
    0x3f14060c, 0x3f16807e, 0x3f18f8b8, 0x3f1b6e7c, 0x3f1de18a, 0x3f2051a5, 0x3f22be90, 0x3f25280e,
    0x3f278ddf, 0x3f29efca, 0x3f2c4d91, 0x3f2ea6f8, 0x3f30fbc6, 0x3f334bbe, 0x3f3596a5, 0x3f37dc43,
    0x3f3a1c5d, 0x3f3c56bb, 0x3f3e8b24, 0x3f40b962, 0x3f42e13d, 0x3f45027c, 0x3f471cec, 0x3f49305a,
    0x3f4b3c8e, 0x3f4d4152, 0x3f4f3e78, 0x3f5133ce, 0x3f53211d, 0x3f55063a, 0x3f56e2f2, 0x3f58b718,
    0x3f5a827a, 0x3f5c44ee, 0x3f5dfe48, 0x3f5fae5a, 0x3f6154fc, 0x3f62f202, 0x3f648544, 0x3f660e9a,
    0x3f678dde, 0x3f6902ea, 0x3f6a6d99, 0x3f6bcdc6, 0x3f6d2350, 0x3f6e6e15, 0x3f6fadf4, 0x3f70e2cc,
    0x3f720c81, 0x3f732af4, 0x3f743e0a, 0x3f7545a6, 0x3f7641b0, 0x3f77320d, 0x3f7816a8, 0x3f78ef68,
    0x3f79bc38, 0x3f7a7d06, 0x3f7b31bc, 0x3f7bda4a, 0x3f7c769e, 0x3f7d06aa, 0x3f7d8a60, 0x3f7e01b0,
    0x3f7e6c92, 0x3f7ecafa, 0x3f7f1cde, 0x3f7f6236, 0x3f7f9afd, 0x3f7fc72b, 0x3f7fe6bc, 0x3f7ff9af,
    0x3f800000, 0x3f7ff9af, 0x3f7fe6bc, 0x3f7fc72b, 0x3f7f9afd, 0x3f7f6236, 0x3f7f1cde, 0x3f7ecafa,
    0x3f7e6c92, 0x3f7e01b0, 0x3f7d8a60, 0x3f7d06aa, 0x3f7c769e, 0x3f7bda49, 0x3f7b31bb, 0x3f7a7d05,
    0x3f79bc38, 0x3f78ef68, 0x3f7816a8, 0x3f77320d, 0x3f7641af, 0x3f7545a4, 0x3f743e08, 0x3f732af2,
    0x3f720c80, 0x3f70e2cc, 0x3f6fadf3, 0x3f6e6e14, 0x3f6d2350, 0x3f6bcdc5, 0x3f6a6d97, 0x3f6902eb,
    0x3f678dde, 0x3f660e9a, 0x3f648544, 0x3f62f201, 0x3f6154fb, 0x3f5fae58, 0x3f5dfe48, 0x3f5c44ef,
    0x3f5a8278, 0x3f58b715, 0x3f56e2f0, 0x3f550638, 0x3f53211c, 0x3f5133cd, 0x3f4f3e77, 0x3f4d4152,
    0x3f4b3c8a, 0x3f493059, 0x3f471ceb, 0x3f450278, 0x3f42e13d, 0x3f40b962, 0x3f3e8b22, 0x3f3c56ba,
    0x3f3a1c5a, 0x3f37dc42, 0x3f3596a6, 0x3f334bbc, 0x3f30fbc6, 0x3f2ea6f8, 0x3f2c4d8e, 0x3f29efc8,
    0x3f278ddc, 0x3f25280c, 0x3f22be90, 0x3f2051a4, 0x3f1de18a, 0x3f1b6e7a, 0x3f18f8b5, 0x3f16807d,
    0x3f14060c, 0x3f11899d, 0x3f0f0b77, 0x3f0c8bd2, 0x3f0a0af3, 0x3f078912, 0x3f050673, 0x3f02835d,
    0x3f000000, 0x3efaf945, 0x3ef5f311, 0x3ef0edd3, 0x3eebea1a, 0x3ee6e854, 0x3ee1e911, 0x3edcecc5,
    0x3ed7f3e8, 0x3ed2fefe, 0x3ece0e8e, 0x3ec92304, 0x3ec43ceb, 0x3ebf5cb8, 0x3eba82df, 0x3eb5afe9,
    0x3eb0e441, 0x3eac2068, 0x3ea764dd, 0x3ea2b20a, 0x3e9e0873, 0x3e996888, 0x3e94d2b4, 0x3e90477c,
    0x3e8bc744, 0x3e875284, 0x3e82e9b5, 0x3e7d1a7a, 0x3e747b0c, 0x3e6bf610, 0x3e638c46, 0x3e5b3e9c,
    0x3e530dc8, 0x3e4afaaa, 0x3e430624, 0x3e3b30cc, 0x3e337b84, 0x3e2be71a, 0x3e247432, 0x3e1d23a6,
    0x3e15f612, 0x3e0eec44, 0x3e0806e4, 0x3e014694, 0x3df55814, 0x3de86fec, 0x3ddbd5d0, 0x3dcf8b28,
    0x3dc39110, 0x3db7e8a8, 0x3dac933c, 0x3da191c8, 0x3d96e570, 0x3d8c8f54, 0x3d829058, 0x3d71d338,
    0x3d5f37f8, 0x3d4d50b8, 0x3d3c1f70, 0x3d2ba598, 0x3d1be4f0, 0x3d0cdf38, 0x3cfd2b10, 0x3ce212f0,
    0x3cc878f0, 0x3cb05f40, 0x3c99c880, 0x3c84b6c0, 0x3c625860, 0x3c3e5580, 0x3c1d6820, 0x3bff2780,
    0x3bc9b6c0, 0x3b9a82c0, 0x3b632200, 0x3b1dc980, 0x3aca0600, 0x3a635400, 0x39ca1c00, 0x38ca2000,
];

/// HTK mel filters without normalisation, `[257, 128]` row-major in f64 (transformers'
/// `mel_filter_bank(..., norm=None, mel_scale="htk")`).
pub(super) fn mel_filter_bank() -> Vec<f64> {
    let hz_to_mel = |hz: f64| 2595.0 * (1.0 + hz / 700.0).log10();
    let mel_to_hz = |mel: f64| 700.0 * (10f64.powf(mel / 2595.0) - 1.0);
    let max_hz = f64::from(SAMPLE_RATE / 2);
    let linspace = |stop: f64, num: usize| -> Vec<f64> {
        let step = stop / (num - 1) as f64;
        let mut v: Vec<f64> = (0..num).map(|i| i as f64 * step).collect();
        v[num - 1] = stop;
        v
    };
    let mel_max = hz_to_mel(max_hz);
    let hz: Vec<f64> = linspace(mel_max, MEL_BINS + 2)
        .into_iter()
        .map(mel_to_hz)
        .collect();
    let bins = linspace(max_hz, FFT_BINS);
    let mut bank = vec![0.0f64; FFT_BINS * MEL_BINS];
    for (k, &f) in bins.iter().enumerate() {
        for j in 0..MEL_BINS {
            let down = -(hz[j] - f) / (hz[j + 1] - hz[j]);
            let up = (hz[j + 2] - f) / (hz[j + 2] - hz[j + 1]);
            bank[k * MEL_BINS + j] = down.min(up).max(0.0);
        }
    }
    bank
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_tone(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let t = i as f64 / 16_000.0;
                (0.5 * (2.0 * std::f64::consts::PI * 440.0 * t).sin()
                    + 0.25 * (2.0 * std::f64::consts::PI * 3000.0 * t).sin()) as f32
            })
            .collect()
    }

    #[test]
    fn the_two_tone_golden_values_of_the_reference() {
        let (f, frames, valid) = log_mel(&two_tone(16_000));
        assert_eq!(frames, 99);
        assert!(valid.iter().all(|&v| v));
        let mean = f.iter().map(|&v| f64::from(v)).sum::<f64>() / f.len() as f64;
        assert!((mean + 4.269_886_5).abs() < 1e-4, "mean {mean}");
        // Pure tones sit near the floor in most bins, where the reference's f32 FFT is noisy.
        let close = |got: &[f32], want: &[f64]| {
            for (g, w) in got.iter().zip(want) {
                assert!((f64::from(*g) - w).abs() < 1e-3, "{got:?} vs {want:?}");
            }
        };
        close(
            &f[..4],
            &[-6.907_755_4, 0.870_454_3, -0.314_497_9, 0.681_119_3],
        );
        let row50 = &f[50 * MEL_BINS..51 * MEL_BINS];
        close(
            &row50[..6],
            &[
                -6.907_755_4,
                -3.821_994_8,
                -4.909_053_8,
                -3.873_687_3,
                -4.350_459_1,
                -6.820_409_3,
            ],
        );
        let argmax = (0..MEL_BINS)
            .max_by(|&a, &b| row50[a].total_cmp(&row50[b]))
            .unwrap();
        assert_eq!(argmax, 84);
        assert!((f64::from(row50[84]) - 3.561_579_0).abs() < 1e-3);
    }

    #[test]
    fn the_filter_bank_matches_transformers() {
        let bank = mel_filter_bank();
        let sum: f64 = bank.iter().sum();
        assert!((sum - 252.785_137_140_664_57).abs() < 1e-9, "{sum}");
        assert!((bank[MEL_BINS + 1] - 0.766_007_674_965_969_1).abs() < 1e-12);
        // Filter 0 is empty: its feature is always ln(0.001).
        assert!((0..FFT_BINS).all(|k| bank[k * MEL_BINS] == 0.0));
    }

    #[test]
    fn frames_and_mask_follow_the_clip_length() {
        for (n, frames, valid) in [
            (0, 0, 0),
            (128, 0, 0),
            (129, 1, 0),
            (161, 1, 1),
            (16_000, 99, 99),
            (16_001, 100, 100),
            (480_000, 2_999, 2_999),
        ] {
            let (f, got, mask) = log_mel(&vec![0.1; n]);
            assert_eq!(
                (got, mask.iter().filter(|&&v| v).count()),
                (frames, valid),
                "{n}"
            );
            assert_eq!(f.len(), frames * MEL_BINS);
        }
        // Longer input is cut at 30 s, as in the reference.
        assert_eq!(log_mel(&vec![0.0; 480_500]).1, 2_999);
    }

    #[test]
    fn silence_gives_the_floor_on_valid_frames_and_zero_elsewhere() {
        let (f, frames, valid) = log_mel(&vec![0.0; 1_100]);
        let floor = (1e-3f64).ln() as f32;
        for (row, ok) in f.chunks_exact(MEL_BINS).zip(&valid) {
            let want = if *ok { floor } else { 0.0 };
            assert!(row.iter().all(|&v| v == want));
        }
        assert_eq!(frames, 7);
        assert_eq!(valid.iter().filter(|&&v| v).count(), 6);
    }

    #[test]
    fn soft_tokens_reproduce_the_reference_and_its_two_float_artefacts() {
        for n in [1, 639, 640, 641, 16_000, 100_000, 257_919, 257_921, 479_999] {
            assert_eq!(soft_tokens(n), n.div_ceil(640), "{n}");
        }
        assert_eq!(soft_tokens(257_920), 257_920 / 640 + 1);
        assert_eq!(soft_tokens(260_480), 260_480 / 640 + 1);
        assert_eq!(soft_tokens(480_000), 750);
        assert_eq!(soft_tokens(10_000_000), 750);
        assert_eq!(soft_tokens(0), 0);
    }
}
