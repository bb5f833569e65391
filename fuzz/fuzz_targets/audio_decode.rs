//! The audio front end on arbitrary bytes: a clear error, or clips within their bounds whose
//! features are finite and whose token counts follow their lengths. Small limits keep each run
//! short; the decoders see the input as a file of any claimed length and format.
#![no_main]

use engine::audio::{prepare_bytes, soft_tokens, AudioLimits, CLIP_SAMPLES, MEL_BINS};
use libfuzzer_sys::fuzz_target;

const LIMITS: AudioLimits = AudioLimits {
    max_file_bytes: 1 << 20,
    max_seconds: 90.0,
    max_clips: 2,
};

fuzz_target!(|data: &[u8]| {
    let Ok(prepared) = prepare_bytes(data, &LIMITS) else {
        return;
    };
    assert!(!prepared.clips.is_empty() && prepared.clips.len() <= LIMITS.max_clips);
    assert!(prepared.kept_seconds <= prepared.seconds + 1e-6);
    assert!(prepared.seconds <= LIMITS.max_seconds);
    if prepared.limit_reached {
        assert!(prepared.kept_seconds < prepared.seconds);
    } else {
        // Only a tail too short for one valid frame (10 ms) may be left out.
        assert!(prepared.seconds - prepared.kept_seconds < 0.01);
    }
    for clip in &prepared.clips {
        let samples = (clip.seconds * 16_000.0).round() as usize;
        assert!(samples > 160 && samples <= CLIP_SAMPLES);
        assert_eq!(clip.soft_tokens, soft_tokens(samples));
        assert_eq!(clip.features.len(), clip.frames * MEL_BINS);
        assert_eq!(clip.valid.len(), clip.frames);
        assert!(clip.valid.iter().any(|&v| v));
        assert!(clip.features.iter().all(|v| v.is_finite()));
    }
});
