//! Audio files to mono samples at their own rate, the way the reference reads them: every format
//! goes through signed 16-bit samples first, channels are averaged in f32 (docs/AUDIO.md,
//! "Decoding"). The container comes from the first bytes; limits are checked from the header
//! before any audio is decoded, and again while decoding for headers that say nothing or lie.

use std::io::{Read, SeekFrom};

use symphonia::core::audio::GenericAudioBufferRef;
use symphonia::core::codecs::audio::AudioDecoderOptions;
use symphonia::core::errors::Error as SymphoniaError;
use symphonia::core::formats::probe::{Hint, Probe};
use symphonia::core::formats::{FormatOptions, TrackType};
use symphonia::core::io::{MediaSource, MediaSourceStream, MediaSourceStreamOptions};
use symphonia::core::meta::MetadataOptions;
use symphonia::default::formats::{
    AdtsReader, AiffReader, FlacReader, IsoMp4Reader, MpaReader, OggReader, WavReader,
};

use super::{AudioError, AudioLimits};

/// Lowest sample rate accepted, in Hz.
pub const MIN_SAMPLE_RATE: u32 = 1_000;
/// Highest sample rate accepted, in Hz.
pub const MAX_SAMPLE_RATE: u32 = 384_000;
/// Channels accepted (a 7.1.4 mix has 12; third-order ambisonics 16).
pub const MAX_CHANNELS: usize = 32;
/// Largest reduced resampling factor (the filter has 128 taps per unit): keeps the filter under
/// 50 MB for odd rates such as 44 101 Hz, and refuses rates that would need gigabytes.
const MAX_RATIO_FACTOR: usize = 48_000;
/// A packet claiming more frames than this is a lie (the largest real ones hold 65 535).
const MAX_FRAMES_PER_PACKET: u64 = 1 << 20;

/// The container, named from the file's first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Container {
    Wav,
    Flac,
    Mp3,
    Ogg,
    Mp4,
    Adts,
    Aiff,
}

impl Container {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Wav => "WAV",
            Self::Flac => "FLAC",
            Self::Mp3 => "MP3",
            Self::Ogg => "Ogg",
            Self::Mp4 => "M4A",
            Self::Adts => "AAC",
            Self::Aiff => "AIFF",
        }
    }

    /// How float samples become 16-bit ones in the reference's decoder for this container:
    /// dr_wav's formula for WAV, rounding to nearest otherwise (minimp3's SIMD path, ffmpeg).
    fn float_to_i16(self) -> fn(f32) -> i16 {
        match self {
            Self::Wav => dr_wav_f32_to_i16,
            _ => nearest_f32_to_i16,
        }
    }

    /// A probe that knows only this container, so nothing else is guessed from the data.
    fn probe(self) -> Probe {
        let mut probe = Probe::default();
        match self {
            Self::Wav => probe.register_format::<WavReader<'_>>(),
            Self::Flac => probe.register_format::<FlacReader<'_>>(),
            Self::Mp3 => probe.register_format::<MpaReader<'_>>(),
            Self::Ogg => probe.register_format::<OggReader<'_>>(),
            Self::Mp4 => probe.register_format::<IsoMp4Reader<'_>>(),
            Self::Adts => probe.register_format::<AdtsReader<'_>>(),
            Self::Aiff => probe.register_format::<AiffReader<'_>>(),
        };
        if matches!(self, Self::Mp3 | Self::Adts) {
            probe.register_metadata::<symphonia::default::meta::Id3v2Reader<'_>>();
        }
        probe
    }
}

/// Names the container from the first bytes of a file, or says why it will not be read.
pub(super) fn sniff(head: &[u8]) -> Result<Container, AudioError> {
    if head.is_empty() {
        return Err(AudioError::Empty);
    }
    let at = |range: std::ops::Range<usize>| head.get(range).unwrap_or(&[]);
    let unsupported = |format: &str| {
        Err(AudioError::Unsupported {
            format: format.to_owned(),
        })
    };
    match at(0..4) {
        b"RIFF" if at(8..12) == b"WAVE" => return Ok(Container::Wav),
        b"RF64" | b"BW64" => return unsupported("RF64 WAV"),
        b"fLaC" => return Ok(Container::Flac),
        b"OggS" => {
            let page = &head[..head.len().min(512)];
            let has = |tag: &[u8]| page.windows(tag.len()).any(|w| w == tag);
            if has(b"OpusHead") {
                return unsupported("Opus");
            }
            if has(b"Speex   ") {
                return unsupported("Speex");
            }
            return Ok(Container::Ogg);
        }
        b"FORM" if matches!(at(8..12), b"AIFF" | b"AIFC") => return Ok(Container::Aiff),
        b"caff" => return unsupported("CAF"),
        [0x1A, 0x45, 0xDF, 0xA3] => return unsupported("WebM or Matroska"),
        b"MThd" => return unsupported("MIDI"),
        _ => {}
    }
    if at(0..5) == b"#!AMR" {
        return unsupported("AMR");
    }
    if at(4..8) == b"ftyp" {
        // HEIF and AVIF pictures share the ISO box format: left to the image decoder.
        let declared = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let brands = &head[8..declared.clamp(8, head.len())];
        let picture: &[&[u8]] = &[
            b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1", b"avif",
            b"avis",
        ];
        if brands.chunks_exact(4).any(|b| picture.contains(&b)) {
            return Err(AudioError::Unrecognized);
        }
        return Ok(Container::Mp4);
    }
    if at(0..3) == b"ID3" {
        return Ok(Container::Mp3);
    }
    if let [0xFF, b1, ..] = *head {
        if b1 & 0xF6 == 0xF0 {
            return Ok(Container::Adts);
        }
        if b1 & 0xE0 == 0xE0 && b1 & 0x06 != 0 {
            return Ok(Container::Mp3);
        }
    }
    Err(AudioError::Unrecognized)
}

/// Reads a WAV's channel count and rate itself, so that absurd values get their own message
/// rather than the decoder's generic refusal.
fn check_header(container: Container, head: &[u8]) -> Result<(), AudioError> {
    if container != Container::Wav {
        return Ok(());
    }
    let mut at = 12;
    while let Some(chunk) = head.get(at..at + 8) {
        let size = u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]) as usize;
        if &chunk[..4] == b"fmt " {
            let Some(fmt) = head.get(at + 8..at + 16) else {
                break;
            };
            let channels = usize::from(u16::from_le_bytes([fmt[2], fmt[3]]));
            let rate = u32::from_le_bytes([fmt[4], fmt[5], fmt[6], fmt[7]]);
            check_channels(channels, container.name())?;
            return check_rate(rate);
        }
        at = at.saturating_add(8).saturating_add(size + size % 2);
    }
    Ok(())
}

/// The start of an MP4 audio track's edit list: `media_time` units of `timescale` precede what
/// is to be played (AAC encoders put 1024 or 2112 priming samples there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Priming {
    media_time: u64,
    timescale: u32,
}

/// Reads the priming of the first sound track of an MP4 file, leaving the source at its start.
/// Any damage or absence simply means none.
fn priming_of<S: Read + std::io::Seek>(container: Container, source: &mut S) -> Option<Priming> {
    if container != Container::Mp4 {
        return None;
    }
    let found = find_moov(source).and_then(|moov| priming_in_moov(&moov));
    source.seek(SeekFrom::Start(0)).ok()?;
    found
}

/// The `moov` box's body, found by hopping over the top-level boxes.
fn find_moov<S: Read + std::io::Seek>(source: &mut S) -> Option<Vec<u8>> {
    const MAX_MOOV: u64 = 64 << 20;
    let mut at = 0u64;
    for _ in 0..1_000 {
        source.seek(SeekFrom::Start(at)).ok()?;
        let mut header = [0u8; 16];
        source.read_exact(&mut header[..8]).ok()?;
        let mut size = u64::from(u32::from_be_bytes([
            header[0], header[1], header[2], header[3],
        ]));
        let mut header_len = 8;
        if size == 1 {
            source.read_exact(&mut header[8..]).ok()?;
            size = u64::from_be_bytes(header[8..16].try_into().ok()?);
            header_len = 16;
        }
        if &header[4..8] == b"moov" {
            let body = size.checked_sub(header_len)?;
            if size == 0 || body > MAX_MOOV {
                return None;
            }
            let mut moov = Vec::new();
            source.take(body).read_to_end(&mut moov).ok()?;
            return Some(moov);
        }
        if size < header_len {
            return None;
        }
        at = at.checked_add(size)?;
    }
    None
}

/// Child boxes of a box body: `(type, body)`.
fn boxes(mut data: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    std::iter::from_fn(move || {
        let size = u32::from_be_bytes(data.get(..4)?.try_into().ok()?) as usize;
        let kind = data.get(4..8)?;
        let body = data.get(8..size.max(8))?;
        data = &data[size.max(8)..];
        Some((kind, body))
    })
}

fn priming_in_moov(moov: &[u8]) -> Option<Priming> {
    let be32 = |b: &[u8], at: usize| Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?));
    let be64 = |b: &[u8], at: usize| Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?));
    for (_, trak) in boxes(moov).filter(|(kind, _)| *kind == b"trak") {
        let mdia = boxes(trak).find(|(kind, _)| *kind == b"mdia")?.1;
        let is_sound =
            boxes(mdia).any(|(kind, body)| kind == b"hdlr" && body.get(8..12) == Some(b"soun"));
        if !is_sound {
            continue;
        }
        let mdhd = boxes(mdia).find(|(kind, _)| *kind == b"mdhd")?.1;
        let timescale = if mdhd.first() == Some(&1) {
            be32(mdhd, 20)?
        } else {
            be32(mdhd, 12)?
        };
        let edts = boxes(trak).find(|(kind, _)| *kind == b"edts")?.1;
        let elst = boxes(edts).find(|(kind, _)| *kind == b"elst")?.1;
        let entries = be32(elst, 4)? as usize;
        let version = *elst.first()?;
        let entry_len = if version == 1 { 20 } else { 12 };
        // The first edit that maps media (an empty edit, −1, only delays the start).
        return (0..entries.min(64)).find_map(|i| {
            let at = 8 + i * entry_len;
            let media_time = if version == 1 {
                be64(elst, at + 8)? as i64
            } else {
                i64::from(be32(elst, at + 4)? as i32)
            };
            (media_time >= 0).then_some(Priming {
                media_time: media_time as u64,
                timescale,
            })
        });
    }
    None
}

/// Mono samples at the file's own rate, in `[-1, 1]`, each a mean of 16-bit values.
pub(super) struct Decoded {
    pub rate: u32,
    /// The first samples of the recording (all of them unless `keep` cut it short).
    pub mono: Vec<f32>,
    /// How many frames the whole recording holds.
    pub frames: u64,
}

/// Reads the head of a seekable source, names its container, and decodes it.
pub(super) fn decode_source<S>(
    mut source: S,
    limits: &AudioLimits,
    keep: impl Fn(u32) -> usize,
) -> Result<Decoded, AudioError>
where
    S: MediaSource + 'static,
{
    let mut head = Vec::with_capacity(512);
    let read = (&mut source)
        .take(512)
        .read_to_end(&mut head)
        .and_then(|_| source.seek(SeekFrom::Start(0)));
    if let Err(e) = read {
        return Err(AudioError::Corrupt {
            format: "audio",
            detail: e.to_string(),
        });
    }
    let container = sniff(&head)?;
    check_header(container, &head)?;
    let priming = priming_of(container, &mut source);
    decode(Box::new(source), container, priming, limits, keep)
}

/// Decodes a borrowed buffer.
pub(super) fn decode_bytes(
    bytes: &[u8],
    limits: &AudioLimits,
    keep: impl Fn(u32) -> usize,
) -> Result<Decoded, AudioError> {
    let container = sniff(bytes)?;
    check_header(container, bytes)?;
    let mut cursor = std::io::Cursor::new(bytes);
    let priming = priming_of(container, &mut cursor);
    decode(Box::new(cursor), container, priming, limits, keep)
}

fn decode<'s>(
    source: Box<dyn MediaSource + 's>,
    container: Container,
    priming: Option<Priming>,
    limits: &AudioLimits,
    keep: impl Fn(u32) -> usize,
) -> Result<Decoded, AudioError> {
    let format_name = container.name();
    let corrupt = |detail: String| AudioError::Corrupt {
        format: format_name,
        detail,
    };
    let refuse = |e: SymphoniaError| match e {
        SymphoniaError::Unsupported(what) => AudioError::Unsupported {
            format: format!("{format_name} ({what})"),
        },
        other => corrupt(describe(&other)),
    };
    let stream = MediaSourceStream::new(source, MediaSourceStreamOptions::default());
    let mut reader = container
        .probe()
        .probe(
            &Hint::new(),
            stream,
            FormatOptions::default(),
            MetadataOptions::default(),
        )
        .map_err(refuse)?;

    let no_track = AudioError::NoAudioTrack {
        format: format_name,
    };
    let Some(track) = reader.default_track(TrackType::Audio) else {
        return Err(no_track);
    };
    let track_id = track.id;
    let Some(params) = track.codec_params.as_ref().and_then(|p| p.audio()) else {
        return Err(no_track);
    };
    let params = params.clone();
    let rate = params
        .sample_rate
        .ok_or_else(|| corrupt("it declares no sample rate".to_owned()))?;
    check_rate(rate)?;
    let mut channels = params.channels.as_ref().map(|c| c.count());
    if let Some(count) = channels {
        check_channels(count, format_name)?;
    }
    if let Some(frames) = params.max_frames_per_packet {
        if frames > MAX_FRAMES_PER_PACKET {
            return Err(corrupt(format!("it declares packets of {frames} frames")));
        }
    }
    // The header's duration, when there is one, decides before anything is decoded.
    let declared_seconds = match (track.num_frames, track.duration, track.time_base) {
        (Some(frames), _, _) => Some(frames as f64 / f64::from(rate)),
        (None, Some(duration), Some(base)) => base.calc_duration(duration).map(|t| t.as_secs_f64()),
        _ => None,
    };
    if let Some(seconds) = declared_seconds {
        if seconds > limits.max_seconds {
            return Err(AudioError::TooLong {
                seconds,
                limit: limits.max_seconds,
            });
        }
    }

    let mut decoder = symphonia::default::get_codecs()
        .make_audio_decoder(&params, &AudioDecoderOptions::default())
        .map_err(refuse)?;

    let keep = keep(rate);
    // Encoder priming an MP4 edit list marks as not to be played; ffmpeg drops it, and so do we.
    let mut to_skip = priming.map_or(0, |p| {
        (u128::from(p.media_time) * u128::from(rate) / u128::from(p.timescale.max(1))) as usize
    });
    let max_frames = (limits.max_seconds * f64::from(rate)).ceil() as u64;
    let to_i16 = container.float_to_i16();
    let mut mono: Vec<f32> = Vec::new();
    let mut frames: u64 = 0;
    let mut ints: Vec<i16> = Vec::new();
    let mut floats: Vec<f32> = Vec::new();
    let mut first_error: Option<String> = None;
    loop {
        let packet = match reader.next_packet() {
            Ok(Some(packet)) => packet,
            Ok(None) => break,
            // A file cut short, or garbage after the audio: keep what decoded, as players do.
            Err(e) => {
                first_error.get_or_insert_with(|| describe(&e));
                break;
            }
        };
        if packet.track_id != track_id {
            continue;
        }
        let buffer = match decoder.decode(&packet) {
            Ok(buffer) => buffer,
            Err(SymphoniaError::DecodeError(_) | SymphoniaError::IoError(_)) => {
                // A damaged packet is skipped, as the reference's decoders do.
                first_error.get_or_insert_with(|| "a damaged packet".to_owned());
                continue;
            }
            Err(e @ SymphoniaError::Unsupported(_)) => return Err(refuse(e)),
            Err(e) => {
                first_error.get_or_insert_with(|| describe(&e));
                break;
            }
        };
        if buffer.spec().rate() != rate {
            return Err(corrupt(format!(
                "the sample rate changes from {rate} Hz to {} Hz",
                buffer.spec().rate()
            )));
        }
        let count = buffer.spec().channels().count();
        match channels {
            None => {
                check_channels(count, format_name)?;
                channels = Some(count);
            }
            Some(c) if c != count => {
                return Err(corrupt(format!(
                    "the channel count changes from {c} to {count}"
                )))
            }
            Some(_) => {}
        }
        let mut n = buffer.frames();
        let skipped = to_skip.min(n);
        to_skip -= skipped;
        n -= skipped;
        if n == 0 || count == 0 {
            continue;
        }
        frames += n as u64;
        if frames > max_frames {
            return Err(AudioError::TooLong {
                seconds: frames as f64 / f64::from(rate),
                limit: limits.max_seconds,
            });
        }
        let room = keep.saturating_sub(mono.len()).min(n);
        if room == 0 {
            continue;
        }
        let is_float = matches!(
            buffer,
            GenericAudioBufferRef::F32(_) | GenericAudioBufferRef::F64(_)
        );
        if is_float {
            buffer.copy_to_vec_interleaved::<f32>(&mut floats);
            ints.clear();
            ints.extend(floats.iter().map(|&v| to_i16(v)));
        } else {
            buffer.copy_to_vec_interleaved::<i16>(&mut ints);
        }
        mono.extend(ints.chunks_exact(count).skip(skipped).take(room).map(mean));
    }
    if frames == 0 {
        return Err(match first_error {
            Some(detail) => corrupt(detail),
            None => AudioError::TooShort { samples: 0 },
        });
    }
    Ok(Decoded { rate, mono, frames })
}

/// The mean of one frame's channels in f32, as NumPy computes it on `int16 / 32768` values
/// (the sum is exact; one rounding in the division).
fn mean(frame: &[i16]) -> f32 {
    let sum: i32 = frame.iter().map(|&v| i32::from(v)).sum();
    sum as f32 / frame.len() as f32 / 32_768.0
}

/// dr_wav's float-to-16-bit conversion (miniaudio reads float WAVs through it).
fn dr_wav_f32_to_i16(x: f32) -> i16 {
    let c = if x.is_nan() { 0.0 } else { x.clamp(-1.0, 1.0) };
    (((c + 1.0) * 32_767.5f32) as i32 - 32_768) as i16
}

/// `x·32768` rounded to nearest, ties to even, clipped to 16 bits (ffmpeg's `lrintf`).
fn nearest_f32_to_i16(x: f32) -> i16 {
    if x.is_nan() {
        return 0;
    }
    (x * 32_768.0).round_ties_even().clamp(-32_768.0, 32_767.0) as i16
}

fn check_rate(rate: u32) -> Result<(), AudioError> {
    if !(MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&rate) {
        return Err(AudioError::SampleRate { rate });
    }
    let (up, down) = super::resample::ratio(rate);
    if up.max(down) > MAX_RATIO_FACTOR {
        return Err(AudioError::SampleRate { rate });
    }
    Ok(())
}

fn check_channels(count: usize, format: &'static str) -> Result<(), AudioError> {
    if count == 0 {
        return Err(AudioError::Corrupt {
            format,
            detail: "it declares no channels".to_owned(),
        });
    }
    if count > MAX_CHANNELS {
        return Err(AudioError::TooManyChannels { channels: count });
    }
    Ok(())
}

fn describe(e: &SymphoniaError) -> String {
    match e {
        SymphoniaError::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            "the data ends early".to_owned()
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_samples_become_16_bit_as_the_reference_decoders_make_them() {
        // Measured with miniaudio 1.71 on a float WAV.
        let cases = [
            (0.0, -1),
            (0.5, 16_383),
            (-0.5, -16_385),
            (1.0, 32_767),
            (-1.0, -32_768),
            (0.3, 9_829),
            (-0.3, -9_831),
            (2.0, 32_767),
            (-2.0, -32_768),
            (0.999_99, 32_766),
            (3.0 / 65_536.0, 1),
            (-3.0 / 65_536.0, -2),
        ];
        for (x, want) in cases {
            assert_eq!(dr_wav_f32_to_i16(x), want, "{x}");
        }
        assert_eq!(nearest_f32_to_i16(0.5 / 32_768.0), 0);
        assert_eq!(nearest_f32_to_i16(1.5 / 32_768.0), 2);
        assert_eq!(nearest_f32_to_i16(-1.0), -32_768);
        assert_eq!(nearest_f32_to_i16(1.0), 32_767);
    }

    #[test]
    fn the_mean_of_channels_is_numpys() {
        assert_eq!(mean(&[1, 2]), 1.5 / 32_768.0);
        assert_eq!(mean(&[-32_768]), -1.0);
        assert_eq!(mean(&[1, 1, 2]), (4.0f32 / 3.0) / 32_768.0);
    }

    #[test]
    fn containers_are_named_by_content() {
        assert_eq!(sniff(b"RIFF\0\0\0\0WAVEfmt ").unwrap(), Container::Wav);
        assert_eq!(sniff(b"fLaC\0").unwrap(), Container::Flac);
        assert_eq!(sniff(b"ID3\x04").unwrap(), Container::Mp3);
        assert_eq!(sniff(&[0xFF, 0xFB, 0x90, 0x64]).unwrap(), Container::Mp3);
        assert_eq!(sniff(&[0xFF, 0xF1, 0x50, 0x80]).unwrap(), Container::Adts);
        assert_eq!(sniff(b"\0\0\0\x20ftypM4A ").unwrap(), Container::Mp4);
        assert!(matches!(sniff(b""), Err(AudioError::Empty)));
        let heic = b"\0\0\0\x18ftypheic\0\0\0\0mif1heic";
        assert!(matches!(sniff(heic), Err(AudioError::Unrecognized)));
        for picture in [
            &b"\xFF\xD8\xFF\xE0"[..],
            b"\x89PNG\r\n\x1a\n",
            b"RIFF\0\0\0\0WEBPVP8 ",
            b"GIF89a",
        ] {
            assert!(matches!(sniff(picture), Err(AudioError::Unrecognized)));
        }
        assert!(matches!(sniff(b"hello"), Err(AudioError::Unrecognized)));
        let opus = b"OggS\0\x02\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x01\x13OpusHead";
        assert!(matches!(sniff(opus), Err(AudioError::Unsupported { format }) if format == "Opus"));
    }
}
