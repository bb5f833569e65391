//! Audio input for the audio tower: decode a file (WAV, MP3, FLAC, Ogg Vorbis, M4A/AAC, AIFF),
//! average its channels, resample to 16 kHz with the reference's filter, cut it into consecutive
//! 30-second clips and compute each clip's log-mel features and placeholder-token count.
//!
//! For a recording of up to 30 s the output equals mlx-vlm 0.7.10's (which reads files through
//! mlx-audio: miniaudio or ffmpeg to 16-bit, scipy's `resample_poly`, its own extractor) within
//! 1e-4 on PCM sources; lossy sources differ by their decoders. Longer recordings, which the
//! reference cuts at 30 s, become several clips, up to [`AudioLimits::max_clips`].
//! docs/AUDIO.md ("Audio input") describes every step and limit.

use std::path::{Path, PathBuf};
use std::sync::Arc;

mod decode;
mod log_mel;
mod resample;

pub use decode::{MAX_CHANNELS, MAX_SAMPLE_RATE, MIN_SAMPLE_RATE};
pub use log_mel::{log_mel, soft_tokens, MAX_SOFT_TOKENS, MEL_BINS};
pub use resample::resample_to_16k;

/// The rate the model hears, in Hz.
pub const SAMPLE_RATE: u32 = 16_000;
/// One clip: 30 s at 16 kHz, the most the reference feeds the tower at once.
pub const CLIP_SAMPLES: usize = 480_000;
/// A clip needs more than this many samples for one valid frame of features (a frame is valid
/// when the sample after its 10 ms hop is real; with 128 or fewer there is no frame at all).
const MIN_CLIP_SAMPLES: usize = 160;
/// Bumped whenever the samples produced for the same input change, to invalidate cached features.
const HASH_DOMAIN: &[u8] = b"gemma-desk audio clip v1\0";

/// What one recording may cost.
#[derive(Debug, Clone, Copy)]
pub struct AudioLimits {
    /// Largest file accepted, in bytes.
    pub max_file_bytes: u64,
    /// Longest recording accepted, in seconds: refused from the header when it says so,
    /// otherwise as soon as decoding passes it.
    pub max_seconds: f64,
    /// Most 30-second clips kept; the rest of a longer recording is left out and
    /// [`PreparedAudio::limit_reached`] says so. Zero counts as one.
    pub max_clips: usize,
}

impl Default for AudioLimits {
    /// 200 MB, one hour, and the first ten minutes (20 clips) heard.
    fn default() -> Self {
        Self {
            max_file_bytes: 200 * 1_000_000,
            max_seconds: 3_600.0,
            max_clips: 20,
        }
    }
}

/// One clip's input for the audio tower.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioClip {
    /// Log-mel features `[frames, 128]`, row-major; rows of invalid frames are 0.
    pub features: Vec<f32>,
    pub frames: usize,
    /// `[frames]`, true for a real frame (the reference's `input_features_mask`).
    pub valid: Vec<bool>,
    /// Placeholder tokens the prompt needs for this clip ([`soft_tokens`] of its length).
    pub soft_tokens: usize,
    /// This clip's duration in seconds.
    pub seconds: f64,
    /// BLAKE3 of the clip's 16 kHz samples and their count: a feature-cache key.
    pub hash: [u8; 32],
}

/// A recording ready for the model.
#[derive(Debug, Clone)]
pub struct PreparedAudio {
    /// Consecutive clips of at most 30 s, in order.
    pub clips: Vec<Arc<AudioClip>>,
    /// The whole recording's duration, in seconds.
    pub seconds: f64,
    /// What the clips cover, in seconds: less than `seconds` when `limit_reached`.
    pub kept_seconds: f64,
    /// The recording was longer than `max_clips` clips; only its beginning is heard.
    pub limit_reached: bool,
}

/// Why a recording could not be prepared for the model.
#[derive(Debug, thiserror::Error)]
pub enum AudioError {
    #[error("the audio file is empty")]
    Empty,
    #[error(
        "this file is not audio Gemma Desk can read; use WAV, MP3, FLAC, Ogg Vorbis, M4A (AAC) or AIFF"
    )]
    Unrecognized,
    /// A known format or codec no decoder here reads, e.g. "Opus".
    #[error("{format} audio is not supported yet; convert it to WAV, MP3, FLAC or M4A")]
    Unsupported { format: String },
    /// The data ends before any sound, or contradicts itself.
    #[error("the {format} audio is corrupt or truncated ({detail})")]
    Corrupt {
        format: &'static str,
        detail: String,
    },
    #[error("the file holds no audio track ({format})")]
    NoAudioTrack { format: &'static str },
    #[error("the file is {} MB; the limit is {} MB", bytes / 1_000_000, limit / 1_000_000)]
    FileTooLarge { bytes: u64, limit: u64 },
    #[error(
        "the recording is {}; the limit is {}",
        clock(*seconds),
        clock(*limit)
    )]
    TooLong { seconds: f64, limit: f64 },
    #[error(
        "the file declares a sample rate of {rate} Hz; Gemma Desk reads common rates from \
         {MIN_SAMPLE_RATE} Hz to {MAX_SAMPLE_RATE} Hz"
    )]
    SampleRate { rate: u32 },
    #[error("the file has {channels} channels; the limit is {MAX_CHANNELS}")]
    TooManyChannels { channels: usize },
    #[error(
        "the recording is too short to hear ({samples} samples at 16 kHz; at least 161 are needed)"
    )]
    TooShort { samples: usize },
    #[error("the recording holds invalid samples (not a number or infinite)")]
    InvalidSamples,
    #[error("could not read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// `m:ss` (or `h:mm:ss`) for messages.
fn clock(seconds: f64) -> String {
    let total = seconds.max(0.0).round() as u64;
    let (h, m, s) = (total / 3600, total / 60 % 60, total % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// Prepares an audio file for the model. The format comes from the content, not the extension.
pub fn prepare_path(path: &Path, limits: &AudioLimits) -> Result<PreparedAudio, AudioError> {
    let read_error = |source| AudioError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let metadata = file.metadata().map_err(read_error)?;
    if metadata.is_dir() {
        let folder = std::io::Error::new(std::io::ErrorKind::InvalidInput, "it is a folder");
        return Err(read_error(folder));
    }
    let bytes = metadata.len();
    check_file_size(bytes, limits)?;
    let decoded = decode::decode_source(file, limits, |rate| input_to_keep(rate, limits))?;
    from_decoded(&decoded, limits)
}

/// Prepares an encoded recording held in memory (see [`prepare_path`]).
pub fn prepare_bytes(bytes: &[u8], limits: &AudioLimits) -> Result<PreparedAudio, AudioError> {
    check_file_size(bytes.len() as u64, limits)?;
    let decoded = decode::decode_bytes(bytes, limits, |rate| input_to_keep(rate, limits))?;
    from_decoded(&decoded, limits)
}

/// Prepares samples already at 16 kHz, mono, nominally in `[-1, 1]` (a recording made by the
/// app). They are used as given, as the reference uses an array it is handed.
pub fn prepare_samples(samples: &[f32], limits: &AudioLimits) -> Result<PreparedAudio, AudioError> {
    if samples.iter().any(|v| !v.is_finite()) {
        return Err(AudioError::InvalidSamples);
    }
    let seconds = samples.len() as f64 / f64::from(SAMPLE_RATE);
    if seconds > limits.max_seconds {
        return Err(AudioError::TooLong {
            seconds,
            limit: limits.max_seconds,
        });
    }
    let kept = samples.len().min(kept_samples(limits));
    clips(&samples[..kept], seconds, kept < samples.len(), limits)
}

fn check_file_size(bytes: u64, limits: &AudioLimits) -> Result<(), AudioError> {
    if bytes == 0 {
        return Err(AudioError::Empty);
    }
    if bytes > limits.max_file_bytes {
        return Err(AudioError::FileTooLarge {
            bytes,
            limit: limits.max_file_bytes,
        });
    }
    Ok(())
}

/// 16 kHz samples the clips may hold.
fn kept_samples(limits: &AudioLimits) -> usize {
    limits.max_clips.max(1).saturating_mul(CLIP_SAMPLES)
}

/// Input samples at `rate` that give the kept 16 kHz samples exactly: their span plus the
/// filter's reach past it.
fn input_to_keep(rate: u32, limits: &AudioLimits) -> usize {
    let (up, down) = resample::ratio(rate);
    let span = (kept_samples(limits) as u128 * down as u128).div_ceil(up as u128);
    usize::try_from(span)
        .unwrap_or(usize::MAX)
        .saturating_add(resample::halo(rate))
}

fn from_decoded(
    decoded: &decode::Decoded,
    limits: &AudioLimits,
) -> Result<PreparedAudio, AudioError> {
    let (up, down) = resample::ratio(decoded.rate);
    let whole = (u128::from(decoded.frames) * up as u128).div_ceil(down as u128);
    let kept = kept_samples(limits);
    let limit_reached = whole > kept as u128;
    let samples = resample::resample_prefix(&decoded.mono, decoded.rate, kept);
    // Measured at 16 kHz like `kept_seconds` (the resampled length rounds up by < 1/16000 s).
    let seconds = whole as f64 / f64::from(SAMPLE_RATE);
    clips(&samples, seconds, limit_reached, limits)
}

/// Cuts 16 kHz samples into consecutive 30 s clips and featurizes each.
fn clips(
    samples: &[f32],
    seconds: f64,
    limit_reached: bool,
    limits: &AudioLimits,
) -> Result<PreparedAudio, AudioError> {
    if samples.len() <= MIN_CLIP_SAMPLES {
        return Err(AudioError::TooShort {
            samples: samples.len(),
        });
    }
    let mut pieces: Vec<&[f32]> = samples
        .chunks(CLIP_SAMPLES)
        .take(limits.max_clips.max(1))
        .collect();
    // A tail of 10 ms or less after whole clips has no valid frame of its own; it is left out.
    if pieces.len() > 1 && pieces.last().is_some_and(|p| p.len() <= MIN_CLIP_SAMPLES) {
        pieces.pop();
    }
    let kept: usize = pieces.iter().map(|p| p.len()).sum();
    let clips = pieces.into_iter().map(|p| Arc::new(clip(p))).collect();
    Ok(PreparedAudio {
        clips,
        seconds,
        kept_seconds: kept as f64 / f64::from(SAMPLE_RATE),
        limit_reached,
    })
}

fn clip(samples: &[f32]) -> AudioClip {
    let (features, frames, valid) = log_mel(samples);
    let mut hasher = blake3::Hasher::new();
    hasher.update(HASH_DOMAIN);
    hasher.update(&(samples.len() as u64).to_le_bytes());
    for v in samples {
        hasher.update(&v.to_le_bytes());
    }
    AudioClip {
        features,
        frames,
        valid,
        soft_tokens: soft_tokens(samples.len()),
        seconds: samples.len() as f64 / f64::from(SAMPLE_RATE),
        hash: *hasher.finalize().as_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(seconds: f64) -> Vec<f32> {
        let n = (seconds * f64::from(SAMPLE_RATE)) as usize;
        (0..n).map(|i| ((i as f32) * 0.05).sin() * 0.3).collect()
    }

    #[test]
    fn a_long_recording_becomes_consecutive_30_second_clips() {
        let prepared = prepare_samples(&tone(75.0), &AudioLimits::default()).unwrap();
        let seconds: Vec<f64> = prepared.clips.iter().map(|c| c.seconds).collect();
        assert_eq!(seconds, [30.0, 30.0, 15.0]);
        let tokens: Vec<usize> = prepared.clips.iter().map(|c| c.soft_tokens).collect();
        assert_eq!(tokens, [750, 750, 375]);
        let frames: Vec<usize> = prepared.clips.iter().map(|c| c.frames).collect();
        assert_eq!(frames, [2_999, 2_999, 1_499]);
        assert_eq!((prepared.seconds, prepared.kept_seconds), (75.0, 75.0));
        assert!(!prepared.limit_reached);
        // Each clip is featurized on its own: the second equals a lone 30 s clip of its samples.
        let samples = tone(75.0);
        let (alone, _, _) = log_mel(&samples[CLIP_SAMPLES..2 * CLIP_SAMPLES]);
        assert_eq!(prepared.clips[1].features, alone);
        assert_ne!(prepared.clips[0].hash, prepared.clips[1].hash);
    }

    #[test]
    fn past_max_clips_the_rest_is_left_out_and_said() {
        let limits = AudioLimits {
            max_clips: 2,
            ..AudioLimits::default()
        };
        let prepared = prepare_samples(&tone(75.0), &limits).unwrap();
        assert_eq!(prepared.clips.len(), 2);
        assert!(prepared.limit_reached);
        assert_eq!((prepared.seconds, prepared.kept_seconds), (75.0, 60.0));

        let exact = prepare_samples(&tone(60.0), &limits).unwrap();
        assert!(!exact.limit_reached, "two whole clips fit");
    }

    #[test]
    fn a_tail_too_short_for_a_frame_is_left_out() {
        let samples = vec![0.1f32; CLIP_SAMPLES + 100];
        let prepared = prepare_samples(&samples, &AudioLimits::default()).unwrap();
        assert_eq!(prepared.clips.len(), 1);
        assert!((prepared.seconds - 30.00625).abs() < 1e-9);
        assert_eq!(prepared.kept_seconds, 30.0);
    }

    #[test]
    fn bad_samples_and_limits_are_refused_in_words() {
        let limits = AudioLimits::default();
        let err = prepare_samples(&[0.0; 100], &limits).unwrap_err();
        assert!(err.to_string().contains("too short"), "{err}");
        let err = prepare_samples(&[0.0, f32::NAN, 0.0], &limits).unwrap_err();
        assert!(matches!(err, AudioError::InvalidSamples));
        let short = AudioLimits {
            max_seconds: 1.0,
            ..limits
        };
        let err = prepare_samples(&tone(2.0), &short).unwrap_err();
        assert_eq!(err.to_string(), "the recording is 0:02; the limit is 0:01");
    }

    #[test]
    fn the_hash_follows_the_samples() {
        let limits = AudioLimits::default();
        let a = prepare_samples(&tone(1.0), &limits).unwrap();
        let b = prepare_samples(&tone(1.0), &limits).unwrap();
        let mut other = tone(1.0);
        other[5] += 1e-3;
        let c = prepare_samples(&other, &limits).unwrap();
        assert_eq!(a.clips[0].hash, b.clips[0].hash);
        assert_ne!(a.clips[0].hash, c.clips[0].hash);
    }
}
