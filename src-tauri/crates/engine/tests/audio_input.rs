//! Audio files through `engine::audio` as a user would hand them over: awkward and hostile input
//! gets a clear refusal, never a panic, a hang or an allocation a header merely claims; real
//! recordings in every supported container become clips; the resampler equals the reference's.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use engine::audio::{
    log_mel, prepare_bytes, prepare_path, prepare_samples, resample_to_16k, AudioError,
    AudioLimits, PreparedAudio, MEL_BINS,
};

const TIME_BOUND: Duration = Duration::from_secs(10);

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/audio")
        .join(name)
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(data(name)).unwrap()
}

/// A RIFF/WAVE file with the given `fmt ` fields around `payload`; `data_len` may lie.
fn wav_with(
    format: u16,
    channels: u16,
    rate: u32,
    bits: u16,
    data_len: u32,
    payload: &[u8],
) -> Vec<u8> {
    let block = channels * bits / 8;
    let mut out = Vec::new();
    out.extend(b"RIFF");
    out.extend(data_len.saturating_add(36).to_le_bytes());
    out.extend(b"WAVEfmt ");
    out.extend(16u32.to_le_bytes());
    out.extend(format.to_le_bytes());
    out.extend(channels.to_le_bytes());
    out.extend(rate.to_le_bytes());
    out.extend((rate.wrapping_mul(u32::from(block))).to_le_bytes());
    out.extend(block.to_le_bytes());
    out.extend(bits.to_le_bytes());
    out.extend(b"data");
    out.extend(data_len.to_le_bytes());
    out.extend(payload);
    out
}

/// A 16-bit PCM WAV of interleaved samples.
fn wav16(channels: u16, rate: u32, samples: &[i16]) -> Vec<u8> {
    let payload: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
    wav_with(1, channels, rate, 16, payload.len() as u32, &payload)
}

/// Speech-like 16-bit samples: a gliding harmonic tone with a syllable envelope.
fn voice(rate: u32, seconds: f64, channels: u16) -> Vec<i16> {
    let n = (f64::from(rate) * seconds) as usize;
    let mut phase = 0.0f64;
    let mut out = Vec::with_capacity(n * usize::from(channels));
    for i in 0..n {
        let t = i as f64 / f64::from(rate);
        phase += 2.0 * std::f64::consts::PI * (140.0 + 40.0 * (4.4 * t).sin()) / f64::from(rate);
        let tone: f64 = (1..8).map(|k| (k as f64 * phase).sin() / k as f64).sum();
        let v = 0.25 * tone * (0.5 + 0.5 * (25.0 * t).sin().powi(2));
        for c in 0..channels {
            out.push((v * 32_767.0 * (1.0 - 0.3 * f64::from(c))) as i16);
        }
    }
    out
}

/// Runs one input with a panic guard and a time bound; `Err` describes a panic or the time.
fn run(bytes: &[u8], limits: &AudioLimits) -> Result<Result<PreparedAudio, AudioError>, String> {
    let start = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(|| prepare_bytes(bytes, limits))).map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into())
    });
    let took = start.elapsed();
    if took > TIME_BOUND {
        return Err(format!("took {took:?}"));
    }
    result
}

fn refused(bytes: &[u8], limits: &AudioLimits) -> AudioError {
    match run(bytes, limits) {
        Ok(Err(e)) => e,
        Ok(Ok(p)) => panic!("accepted: {} clips, {} s", p.clips.len(), p.seconds),
        Err(panic) => panic!("{panic}"),
    }
}

#[test]
fn every_supported_container_is_read_by_content() {
    let limits = AudioLimits::default();
    for name in ["hello.mp3", "hello.flac", "hello.ogg", "hello.m4a"] {
        let prepared = prepare_path(&data(name), &limits).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(prepared.clips.len(), 1, "{name}");
        let clip = &prepared.clips[0];
        assert!(
            (1.0..2.5).contains(&clip.seconds),
            "{name}: {} s",
            clip.seconds
        );
        assert!(clip.soft_tokens >= 25, "{name}");
        assert_eq!(clip.features.len(), clip.frames * MEL_BINS);
        // Speech is well above the floor somewhere.
        assert!(clip.features.iter().any(|&v| v > -2.0), "{name}");
        let by_bytes = prepare_bytes(&read(name), &limits).unwrap();
        assert_eq!(by_bytes.clips[0].hash, clip.hash, "{name}");
    }
}

#[test]
fn the_file_name_never_decides_the_format() {
    let dir = tempfile::tempdir().unwrap();
    let limits = AudioLimits::default();
    for (name, source) in [
        ("voicemail.wav", "hello.mp3"),
        ("song.mp3", "hello.flac"),
        ("note.flac", "hello.ogg"),
        ("memo", "hello.m4a"),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, read(source)).unwrap();
        let named = prepare_path(&path, &limits).unwrap_or_else(|e| panic!("{name}: {e}"));
        let original = prepare_path(&data(source), &limits).unwrap();
        assert_eq!(
            named.clips[0].features, original.clips[0].features,
            "{name}"
        );
    }
}

#[test]
fn a_wav_decodes_to_the_mean_of_its_16_bit_channels() {
    let samples = voice(16_000, 1.0, 2);
    let prepared = prepare_bytes(&wav16(2, 16_000, &samples), &AudioLimits::default()).unwrap();
    let mono: Vec<f32> = samples
        .chunks_exact(2)
        .map(|f| (f32::from(f[0]) + f32::from(f[1])) / 2.0 / 32_768.0)
        .collect();
    let direct = prepare_samples(&mono, &AudioLimits::default()).unwrap();
    assert_eq!(prepared.clips[0].features, direct.clips[0].features);
    assert_eq!(prepared.clips[0].hash, direct.clips[0].hash);
    assert_eq!(prepared.seconds, 1.0);
}

#[test]
fn the_resampler_equals_scipys_resample_poly() {
    #[derive(serde::Deserialize)]
    struct Case {
        rate: u32,
        input: Vec<u32>,
        output: Vec<u32>,
    }
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/audio_resample_cases.json"),
    )
    .unwrap();
    let cases: Vec<Case> = serde_json::from_str(&text).unwrap();
    for case in cases {
        let input: Vec<f32> = case.input.iter().map(|&b| f32::from_bits(b)).collect();
        let want: Vec<f32> = case.output.iter().map(|&b| f32::from_bits(b)).collect();
        let got = resample_to_16k(&input, case.rate);
        assert_eq!(got.len(), want.len(), "{} Hz", case.rate);
        let off_by_ulps = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (g.to_bits() as i64 - w.to_bits() as i64).unsigned_abs())
            .max()
            .unwrap_or(0);
        let exact = got.iter().zip(&want).filter(|(g, w)| g == w).count();
        eprintln!(
            "{} Hz: {exact}/{} samples bit for bit, at most {off_by_ulps} ulp apart",
            case.rate,
            want.len()
        );
        assert!(off_by_ulps <= 1, "{} Hz: {off_by_ulps} ulp", case.rate);
        assert!(exact * 100 >= want.len() * 99, "{} Hz: {exact}", case.rate);
    }
}

#[test]
fn a_long_file_becomes_clips_up_to_the_limit_and_says_so() {
    // 75 s at 8 kHz: three clips (30, 30, 15 s), or two and the limit.
    let bytes = wav16(1, 8_000, &voice(8_000, 75.0, 1));
    let all = prepare_bytes(&bytes, &AudioLimits::default()).unwrap();
    let seconds: Vec<f64> = all.clips.iter().map(|c| c.seconds).collect();
    assert_eq!(seconds, [30.0, 30.0, 15.0]);
    let tokens: Vec<usize> = all.clips.iter().map(|c| c.soft_tokens).collect();
    assert_eq!(tokens, [750, 750, 375]);
    assert!(!all.limit_reached);

    let two = AudioLimits {
        max_clips: 2,
        ..AudioLimits::default()
    };
    let cut = prepare_bytes(&bytes, &two).unwrap();
    assert!(cut.limit_reached);
    assert_eq!((cut.seconds, cut.kept_seconds), (75.0, 60.0));
    // Only the kept part is resampled, and it equals the whole recording's resampling.
    assert_eq!(cut.clips[0].features, all.clips[0].features);
    assert_eq!(cut.clips[1].features, all.clips[1].features);
    assert_eq!(cut.clips[1].hash, all.clips[1].hash);
}

#[test]
fn the_kept_part_never_outlasts_the_whole() {
    // Found by the `audio_decode` fuzz target: 9280 Hz, whose 16 kHz length rounds up.
    let prepared = prepare_path(
        &data("fuzz_kept_longer_than_whole.wav"),
        &AudioLimits::default(),
    )
    .unwrap();
    assert!(prepared.kept_seconds <= prepared.seconds);
    assert!(!prepared.limit_reached);
}

#[test]
fn a_clip_without_a_valid_frame_is_too_short() {
    // Found by the `audio_decode` fuzz target: 150 samples give a frame, but not a valid one.
    let e = prepare_path(&data("fuzz_no_valid_frame.wav"), &AudioLimits::default()).unwrap_err();
    assert!(e.to_string().contains("too short"), "{e}");
    for (n, heard) in [(160, false), (161, true)] {
        let result = prepare_samples(&vec![0.1; n], &AudioLimits::default());
        assert_eq!(result.is_ok(), heard, "{n} samples");
    }
}

#[test]
fn silence_is_heard_as_the_floor() {
    let prepared =
        prepare_bytes(&wav16(1, 16_000, &vec![0; 16_000]), &AudioLimits::default()).unwrap();
    let clip = &prepared.clips[0];
    let floor = (1e-3f64).ln() as f32;
    for (row, valid) in clip.features.chunks_exact(MEL_BINS).zip(&clip.valid) {
        assert!(row.iter().all(|&v| v == if *valid { floor } else { 0.0 }));
    }
    assert_eq!(clip.soft_tokens, 25);
}

#[test]
fn bad_files_are_refused_in_words() {
    let limits = AudioLimits::default();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("zero bytes", Vec::new(), "empty"),
        ("text", b"just some words, not audio".to_vec(), "not audio"),
        (
            "a PNG",
            b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec(),
            "not audio",
        ),
        (
            "header claiming hours",
            wav_with(1, 1, 8_000, 16, 0xFFFF_FFF0, &[0; 64]),
            "the limit is 1:00:00",
        ),
        ("0 Hz", wav_with(1, 1, 0, 16, 64, &[0; 64]), "sample rate"),
        (
            "10 MHz",
            wav_with(1, 1, 10_000_000, 16, 64, &[0; 64]),
            "sample rate",
        ),
        (
            "40 channels",
            wav_with(1, 40, 16_000, 16, 800, &[0; 800]),
            "channels",
        ),
        (
            "only a header",
            wav_with(1, 1, 16_000, 16, 0, &[]),
            "too short",
        ),
        ("100 samples", wav16(1, 16_000, &[100; 100]), "too short"),
        (
            "Opus",
            b"OggS\0\x02\0\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0\0\0\0\0\x01\x13OpusHead\x01\x01"
                .to_vec(),
            "Opus audio is not supported",
        ),
        (
            "WebM",
            vec![0x1A, 0x45, 0xDF, 0xA3, 0x9F, 0x42, 0x86, 0x81],
            "WebM",
        ),
        (
            "RIFF but AVI",
            b"RIFF\x10\0\0\0AVI LIST".to_vec(),
            "not audio",
        ),
        (
            "WAV of an unknown codec",
            wav_with(0x1234, 1, 16_000, 16, 64, &[0; 64]),
            "WAV",
        ),
    ];
    let mut failures = Vec::new();
    for (name, bytes, text) in &cases {
        match run(bytes, &limits) {
            Ok(Err(e)) if e.to_string().contains(text) => eprintln!("{name:<28} refused: {e}"),
            Ok(Err(e)) => failures.push(format!("{name}: refused with \"{e}\", expected {text:?}")),
            Ok(Ok(p)) => failures.push(format!("{name}: accepted ({} s)", p.seconds)),
            Err(problem) => failures.push(format!("{name}: {problem}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    let big = AudioLimits {
        max_file_bytes: 1_000,
        ..limits
    };
    let e = refused(&read("hello.flac"), &big);
    assert!(matches!(e, AudioError::FileTooLarge { .. }), "{e}");
    let short = AudioLimits {
        max_seconds: 0.5,
        ..limits
    };
    let e = refused(&read("hello.mp3"), &short);
    assert!(matches!(e, AudioError::TooLong { .. }), "{e}");

    let folder = tempfile::tempdir().unwrap();
    let e = prepare_path(folder.path(), &limits).unwrap_err();
    assert!(e.to_string().contains("it is a folder"), "{e}");

    let missing = Path::new("/nonexistent/voicemail.wav");
    let e = prepare_path(missing, &limits).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/voicemail.wav"), "{e}");
}

#[test]
fn every_truncation_of_small_files_is_refused_or_heard_never_a_panic() {
    let limits = AudioLimits::default();
    let wav = wav16(2, 22_050, &voice(22_050, 0.04, 2));
    let mut files = vec![("wav", wav)];
    for name in ["hello.mp3", "hello.ogg", "hello.m4a", "hello.flac"] {
        files.push((name, read(name)));
    }
    for (name, bytes) in files {
        // Every prefix of the WAV; for the larger encoded files every 7th (and the first 64).
        let step = if name == "wav" { 1 } else { 7 };
        let (mut accepted, mut refusals) = (0, 0);
        for len in (0..bytes.len()).filter(|&l| l < 64 || l % step == 0) {
            match run(&bytes[..len], &limits) {
                Ok(Ok(p)) => {
                    accepted += 1;
                    assert!(p.clips.iter().all(|c| c.frames > 0 && c.soft_tokens > 0));
                }
                Ok(Err(e)) => {
                    refusals += 1;
                    assert!(!e.to_string().is_empty());
                }
                Err(problem) => panic!("{name} cut at {len} bytes: {problem}"),
            }
        }
        eprintln!("{name}: {accepted} prefixes heard, {refusals} refused");
        assert!(refusals > 0, "{name}");
        // An M4A written by ffmpeg keeps its index at the end: no prefix can be played.
        assert!(accepted > 0 || name == "hello.m4a", "{name}");
    }
}

#[test]
fn random_bytes_and_bit_flips_never_panic() {
    let limits = AudioLimits::default();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for len in [1usize, 3, 16, 100, 4_096] {
        let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let _ = run(&bytes, &limits).unwrap_or_else(|p| panic!("{len} random bytes: {p}"));
    }
    for name in ["hello.mp3", "hello.ogg", "hello.m4a", "hello.flac"] {
        let original = read(name);
        for _ in 0..60 {
            let mut bytes = original.clone();
            let at = next() as usize % bytes.len();
            bytes[at] ^= 1 << (next() % 8);
            let _ =
                run(&bytes, &limits).unwrap_or_else(|p| panic!("{name}, bit flipped at {at}: {p}"));
        }
    }
}

#[test]
fn log_mel_of_a_short_clip_has_no_frames() {
    let (features, frames, valid) = log_mel(&[0.5; 128]);
    assert_eq!((features.len(), frames, valid.len()), (0, 0, 0));
}
