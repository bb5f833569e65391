//! A corpus of awkward and hostile image files, generated here, each with the outcome a user would
//! see through `engine::image` preprocessing: a clear refusal, or the picture the model gets.
//! Nothing may panic, hang, or allocate what the header merely claims.
//!
//! Decisions recorded here: animated GIF and APNG files give their first frame (the still a
//! viewer shows first); 16-bit samples keep their high byte; transparency is composited onto
//! white; the format comes from the content, never the file name.
//! (`image_preprocess.rs` checks the accepted pictures' pixels in finer detail.)

use std::io::Cursor;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use engine::image::{preprocess_bytes, preprocess_path, ImageError, Preprocessed, SoftTokenBudget};
use image::{ExtendedColorType, ImageEncoder};

mod common;
use common::png::{png_chunk, png_chunks, raw_png, rgb_png};

const BUDGET: SoftTokenBudget = SoftTokenBudget::T70;

// ------------------------------------------------------------------ encoders

/// A varied picture, so that corruption lands in real entropy-coded data.
fn pattern(width: u32, height: u32) -> Vec<u8> {
    (0..width * height * 3)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

fn jpeg(width: usize, height: usize, format: turbojpeg::PixelFormat, pixels: &[u8]) -> Vec<u8> {
    let mut compressor = turbojpeg::Compressor::new().unwrap();
    compressor.set_quality(90).unwrap();
    if format == turbojpeg::PixelFormat::GRAY {
        compressor.set_subsamp(turbojpeg::Subsamp::Gray).unwrap();
    }
    let image = turbojpeg::Image {
        pixels,
        width,
        pitch: width * format.size(),
        height,
        format,
    };
    compressor.compress_to_vec(image).unwrap()
}

fn rgb_jpeg(width: usize, height: usize) -> Vec<u8> {
    let data = pattern(width as u32, height as u32);
    jpeg(width, height, turbojpeg::PixelFormat::RGB, &data)
}

fn gif_frames(width: u32, height: u32, colours: &[[u8; 4]]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut encoder = image::codecs::gif::GifEncoder::new(&mut out);
        for &rgba in colours {
            let frame = image::RgbaImage::from_fn(width, height, |_, _| image::Rgba(rgba));
            encoder.encode_frame(image::Frame::new(frame)).unwrap();
        }
    }
    out
}

fn bmp(width: u32, height: u32) -> Vec<u8> {
    let mut out = Vec::new();
    image::codecs::bmp::BmpEncoder::new(&mut out)
        .write_image(
            &pattern(width, height),
            width,
            height,
            ExtendedColorType::Rgb8,
        )
        .unwrap();
    out
}

fn tiff(width: u32, height: u32) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    image::codecs::tiff::TiffEncoder::new(&mut out)
        .write_image(
            &pattern(width, height),
            width,
            height,
            ExtendedColorType::Rgb8,
        )
        .unwrap();
    out.into_inner()
}

fn webp(width: u32, height: u32) -> Vec<u8> {
    let mut out = Vec::new();
    image::codecs::webp::WebPEncoder::new_lossless(&mut out)
        .write_image(
            &pattern(width, height),
            width,
            height,
            ExtendedColorType::Rgb8,
        )
        .unwrap();
    out
}

/// A two-frame APNG: the default image (frame 0) is red, frame 1 green.
fn apng() -> Vec<u8> {
    let red = rgb_png(30, 20, [220, 0, 0]);
    let green = rgb_png(30, 20, [0, 220, 0]);
    let fctl = |sequence: u32| {
        let mut body = sequence.to_be_bytes().to_vec();
        for v in [30u32, 20, 0, 0] {
            body.extend(v.to_be_bytes());
        }
        body.extend([0, 1, 0, 10, 0, 0]); // delay 1/10 s, no dispose, no blend
        body
    };
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    for (kind, body) in png_chunks(&red) {
        match &kind {
            b"IDAT" => {
                out.extend(png_chunk(b"acTL", &[0, 0, 0, 2, 0, 0, 0, 0]));
                out.extend(png_chunk(b"fcTL", &fctl(0)));
                out.extend(png_chunk(b"IDAT", &body));
                out.extend(png_chunk(b"fcTL", &fctl(1)));
                for (kind, body) in png_chunks(&green) {
                    if &kind == b"IDAT" {
                        let mut fdat = 2u32.to_be_bytes().to_vec();
                        fdat.extend(body);
                        out.extend(png_chunk(b"fdAT", &fdat));
                    }
                }
            }
            _ => out.extend(png_chunk(&kind, &body)),
        }
    }
    out
}

/// `jpeg` with an APP1 segment carrying `body` right after SOI.
fn with_app1(jpeg: &[u8], body: &[u8], declared_len: Option<u16>) -> Vec<u8> {
    let mut out = jpeg[..2].to_vec();
    out.extend([0xFF, 0xE1]);
    out.extend(declared_len.unwrap_or(body.len() as u16 + 2).to_be_bytes());
    out.extend(body);
    out.extend(&jpeg[2..]);
    out
}

fn exif_orientation(orientation: u16) -> Vec<u8> {
    let mut body = b"Exif\0\0MM\0\x2a\0\0\0\x08\0\x01".to_vec();
    body.extend([0x01, 0x12, 0x00, 0x03, 0, 0, 0, 1]);
    body.extend(orientation.to_be_bytes());
    body.extend([0, 0, 0, 0, 0, 0]);
    body
}

/// A GIF whose logical screen is `screen` but whose one frame is `frame` (1×1 of data).
fn gif_claiming(screen: (u16, u16), frame: (u16, u16)) -> Vec<u8> {
    let mut out = b"GIF89a".to_vec();
    out.extend(screen.0.to_le_bytes());
    out.extend(screen.1.to_le_bytes());
    out.extend([0x80, 0, 0]); // global colour table of 2 entries
    out.extend([0, 0, 0, 255, 255, 255]);
    out.push(0x2C);
    out.extend([0, 0, 0, 0]);
    out.extend(frame.0.to_le_bytes());
    out.extend(frame.1.to_le_bytes());
    out.push(0);
    out.extend([2, 2, 0x4C, 0x01, 0]); // LZW: min code 2, one pixel of colour 0
    out.push(0x3B);
    out
}

/// A BMP header (BITMAPINFOHEADER, 24 bits) claiming `width`×`height`, followed by `data`.
fn bmp_claiming(width: i32, height: i32, data: &[u8]) -> Vec<u8> {
    let mut out = b"BM".to_vec();
    out.extend((54 + data.len() as u32).to_le_bytes());
    out.extend([0; 4]);
    out.extend(54u32.to_le_bytes());
    out.extend(40u32.to_le_bytes());
    out.extend(width.to_le_bytes());
    out.extend(height.to_le_bytes());
    out.extend(1u16.to_le_bytes());
    out.extend(24u16.to_le_bytes());
    out.extend([0; 24]);
    out.extend(data);
    out
}

/// A little-endian TIFF header with one IFD claiming `width`×`height`, 8-bit RGB, no data.
fn tiff_claiming(width: u32, height: u32) -> Vec<u8> {
    let entries: [(u16, u16, u32); 7] = [
        (256, 4, width),  // ImageWidth, LONG
        (257, 4, height), // ImageLength
        (258, 3, 8),      // BitsPerSample
        (262, 3, 2),      // Photometric RGB
        (273, 4, 8),      // StripOffsets
        (277, 3, 3),      // SamplesPerPixel
        (279, 4, 16),     // StripByteCounts
    ];
    let mut out = b"II\x2a\0\x08\0\0\0".to_vec();
    out.extend((entries.len() as u16).to_le_bytes());
    for (tag, kind, value) in entries {
        out.extend(tag.to_le_bytes());
        out.extend(kind.to_le_bytes());
        out.extend(1u32.to_le_bytes());
        out.extend(value.to_le_bytes());
    }
    out.extend([0; 4]);
    out
}

/// A lossless WebP header claiming `width`×`height` (at most 16384 each) and no pixels.
fn webp_claiming(width: u32, height: u32) -> Vec<u8> {
    let bits = (width - 1) | ((height - 1) << 14);
    let mut vp8l = vec![0x2F];
    vp8l.extend(bits.to_le_bytes());
    vp8l.extend([0; 8]);
    let mut out = b"RIFF".to_vec();
    out.extend((4 + 8 + vp8l.len() as u32).to_le_bytes());
    out.extend(b"WEBPVP8L");
    out.extend((vp8l.len() as u32).to_le_bytes());
    out.extend(vp8l);
    out
}

// ------------------------------------------------------------------ the corpus

/// What a case must come to.
enum Outcome {
    /// Accepted; the check looks at what the model gets.
    Accepted(fn(&Preprocessed) -> Result<(), String>),
    /// Refused with this kind of error, whose message contains the text.
    Refused(fn(&ImageError) -> bool, &'static str),
}

use Outcome::{Accepted, Refused};

fn is_empty(e: &ImageError) -> bool {
    matches!(e, ImageError::Empty)
}
fn is_corrupt(e: &ImageError) -> bool {
    matches!(e, ImageError::Corrupt { .. })
}
fn is_unsupported(e: &ImageError) -> bool {
    matches!(e, ImageError::Unsupported { .. })
}
fn is_unrecognized(e: &ImageError) -> bool {
    matches!(e, ImageError::Unrecognized)
}
fn is_too_large(e: &ImageError) -> bool {
    matches!(e, ImageError::TooLarge { .. })
}

/// Channel values (×255) of output pixel (x, y).
fn pixel(image: &Preprocessed, x: usize, y: usize) -> [f32; 3] {
    let plane = image.width * image.height;
    [0, 1, 2].map(|c| image.pixels[c * plane + y * image.width + x] * 255.0)
}

fn colour_near(image: &Preprocessed, expected: [f32; 3], tolerance: f32) -> Result<(), String> {
    let (x, y) = (image.width / 2, image.height / 2);
    let got = pixel(image, x, y);
    if got
        .iter()
        .zip(expected)
        .all(|(a, e)| (a - e).abs() <= tolerance)
    {
        Ok(())
    } else {
        Err(format!("centre pixel {got:?}, expected {expected:?}"))
    }
}

fn any_picture(image: &Preprocessed) -> Result<(), String> {
    let ok = image.soft_tokens > 0
        && image.pixels.len() == 3 * image.width * image.height
        && image.pixels.iter().all(|v| (0.0..=1.0).contains(v));
    ok.then_some(()).ok_or_else(|| "malformed output".into())
}

fn corpus() -> Vec<(&'static str, Vec<u8>, Outcome)> {
    let png_file = rgb_png(64, 48, [10, 20, 30]);
    let jpeg_file = rgb_jpeg(64, 48);
    let gif_file = gif_frames(32, 24, &[[200, 0, 0, 255]]);
    let bmp_file = bmp(32, 24);
    let tiff_file = tiff(32, 24);
    let webp_file = webp(32, 24);
    let half = |b: &[u8]| b[..b.len() / 2].to_vec();
    let mut corrupt_png = png_file.clone();
    let idat = corrupt_png.windows(4).position(|w| w == b"IDAT").unwrap();
    corrupt_png[idat + 8] ^= 0xFF; // data changed, CRC not
    let mut corrupt_jpeg = jpeg_file.clone();
    let scan = corrupt_jpeg
        .windows(2)
        .position(|w| w == [0xFF, 0xDA])
        .unwrap();
    for b in &mut corrupt_jpeg[scan + 20..scan + 60] {
        *b = 0xFF; // a run of marker prefixes inside entropy-coded data
    }
    let palette = [(b"PLTE", vec![255, 0, 0, 0, 0, 255]), (b"tRNS", vec![0])];
    let palette_rows: Vec<u8> = (0..20)
        .flat_map(|_| std::iter::once(0).chain((0..30).map(|x| u8::from(x >= 15))))
        .collect();
    // Index 7 of a two-entry palette.
    let out_of_palette: Vec<u8> = (0..4).flat_map(|_| [0, 7, 7, 7, 7]).collect();
    let rgb16: Vec<u8> = (0..20)
        .flat_map(|_| std::iter::once(0).chain([0x12, 0x34, 0x80, 0xFF, 0xC8, 0x01].repeat(30)))
        .collect();
    let rgba16_clear: Vec<u8> = (0..20)
        .flat_map(|_| std::iter::once(0).chain([0, 0, 0, 0, 0, 0, 0, 0].repeat(30)))
        .collect();
    let grey_jpeg = jpeg(40, 30, turbojpeg::PixelFormat::GRAY, &[77; 40 * 30]);
    let cmyk_jpeg = jpeg(
        32,
        32,
        turbojpeg::PixelFormat::CMYK,
        &[255, 0, 255, 255].repeat(32 * 32),
    );
    let mut progressive = turbojpeg::Compressor::new().unwrap();
    progressive.set_optimize(true).unwrap();
    let progressive_jpeg = {
        let data = pattern(40, 30);
        let image = turbojpeg::Image {
            pixels: data.as_slice(),
            width: 40,
            pitch: 120,
            height: 30,
            format: turbojpeg::PixelFormat::RGB,
        };
        progressive.compress_to_vec(image).unwrap()
    };
    let mut zero_sof = jpeg_file.clone();
    let sof = zero_sof.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    zero_sof[sof + 5..sof + 9].copy_from_slice(&[0, 0, 0, 0]);

    vec![
        // ---- empty, truncated, corrupt
        ("zero bytes", vec![], Refused(is_empty, "empty")),
        (
            "one byte",
            vec![0x89],
            Refused(is_unrecognized, "not an image"),
        ),
        (
            "JPEG signature only",
            vec![0xFF, 0xD8, 0xFF],
            Refused(is_corrupt, "JPEG"),
        ),
        (
            "PNG signature only",
            png_file[..8].to_vec(),
            Refused(is_corrupt, "PNG"),
        ),
        ("half a PNG", half(&png_file), Refused(is_corrupt, "PNG")),
        ("half a JPEG", half(&jpeg_file), Refused(is_corrupt, "JPEG")),
        ("half a GIF", half(&gif_file), Refused(is_corrupt, "GIF")),
        ("half a BMP", half(&bmp_file), Refused(is_corrupt, "BMP")),
        ("half a TIFF", half(&tiff_file), Refused(is_corrupt, "TIFF")),
        ("half a WebP", half(&webp_file), Refused(is_corrupt, "WebP")),
        (
            "PNG with a flipped data byte",
            corrupt_png,
            Refused(is_corrupt, "PNG"),
        ),
        (
            "JPEG with garbage in its scan",
            corrupt_jpeg,
            Refused(is_corrupt, "JPEG"),
        ),
        ("JPEG declaring 0×0", zero_sof, Refused(is_corrupt, "JPEG")),
        (
            "PNG declaring 0×0",
            raw_png(0, 0, 8, 2, &[], &[]),
            Refused(is_corrupt, "PNG"),
        ),
        (
            "random bytes",
            (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect(),
            Refused(is_unrecognized, "not an image"),
        ),
        // ---- not images, or formats not read here
        (
            "a text file",
            b"Dear diary, today I attached a text file.".to_vec(),
            Refused(is_unrecognized, "not an image"),
        ),
        (
            "a PDF",
            b"%PDF-1.7\n%\xE2\xE3\xCF\xD3\n1 0 obj".to_vec(),
            Refused(is_unsupported, "PDF images are not supported"),
        ),
        (
            "an SVG",
            b"<?xml version=\"1.0\"?><svg xmlns=\"http://www.w3.org/2000/svg\"/>".to_vec(),
            Refused(is_unsupported, "SVG images are not supported"),
        ),
        (
            "HEIC",
            b"\0\0\0\x18ftypheic\0\0\0\0mif1heic\0\0\0\x08free".to_vec(),
            Refused(is_unsupported, "HEIC photos are not supported yet"),
        ),
        (
            "HEIC with a 64-bit box size",
            b"\0\0\0\x01ftypheic\0\0\0\0\0\0\0\0mif1heic".to_vec(),
            Refused(is_unsupported, "HEIC"),
        ),
        (
            "HEIC box cut after its type",
            b"\0\0\0\x18ftyp".to_vec(),
            Refused(is_unrecognized, "not an image"),
        ),
        (
            "HEIC box cut inside its brand",
            b"\0\0\0\x18ftyphe".to_vec(),
            Refused(is_unrecognized, "not an image"),
        ),
        (
            "AVIF",
            b"\0\0\0\x1cftypavif\0\0\0\0avifmif1miaf".to_vec(),
            Refused(is_unsupported, "AVIF"),
        ),
        (
            "an MP4 video",
            b"\0\0\0\x20ftypisom\0\0\x02\0isomiso2avc1mp41".to_vec(),
            Refused(is_unrecognized, "not an image"),
        ),
        (
            "an icon file",
            [0u8, 0, 1, 0, 1, 0, 16, 16, 0, 0, 1, 0, 32, 0].to_vec(),
            Refused(is_unsupported, "not supported"),
        ),
        // ---- animation
        (
            "animated GIF",
            gif_frames(30, 20, &[[200, 0, 0, 255], [0, 200, 0, 255]]),
            Accepted(|p| colour_near(p, [200.0, 0.0, 0.0], 1e-3)),
        ),
        (
            "APNG",
            apng(),
            Accepted(|p| colour_near(p, [220.0, 0.0, 0.0], 1e-3)),
        ),
        // ---- sizes and bombs
        (
            "1×50000 sliver",
            rgb_png(1, 50_000, [1, 2, 3]),
            Refused(is_too_large, "1×50000"),
        ),
        (
            "50000×1 sliver",
            rgb_png(50_000, 1, [1, 2, 3]),
            Refused(is_too_large, "50000×1"),
        ),
        (
            "1×32768 sliver (the longest side allowed)",
            rgb_png(1, 32_768, [1, 2, 3]),
            Accepted(|p| {
                (p.width == 48 && p.soft_tokens == 70)
                    .then_some(())
                    .ok_or_else(|| format!("{}×{}", p.width, p.height))
            }),
        ),
        (
            "PNG header claiming 100000×100000",
            raw_png(100_000, 100_000, 8, 6, &[], &[0; 16]),
            Refused(is_too_large, "100000×100000"),
        ),
        (
            "PNG header claiming 60 MP within the side limit",
            raw_png(10_000, 6_000, 8, 2, &[], &[0; 16]),
            Refused(is_too_large, "50 megapixels"),
        ),
        (
            "PNG header claiming 48 MP with 16 bytes of data",
            raw_png(8_000, 6_000, 16, 6, &[], &[0; 16]),
            Refused(is_corrupt, "PNG"),
        ),
        (
            "GIF screen of 65535×65535",
            gif_claiming((65_535, 65_535), (1, 1)),
            Refused(is_too_large, "65535×65535"),
        ),
        (
            "GIF frame of 65535×65535 on a 1×1 screen",
            gif_claiming((1, 1), (65_535, 65_535)),
            Refused(is_corrupt, "GIF"),
        ),
        (
            "BMP header claiming 30000×30000",
            bmp_claiming(30_000, 30_000, &[0; 64]),
            Refused(is_too_large, "30000×30000"),
        ),
        (
            "BMP header claiming a negative width",
            bmp_claiming(-30, 30, &[0; 64]),
            Refused(is_corrupt, "BMP"),
        ),
        (
            "TIFF header claiming 100000×100000",
            tiff_claiming(100_000, 100_000),
            Refused(is_too_large, "100000×100000"),
        ),
        (
            "WebP header claiming 16000×16000",
            webp_claiming(16_000, 16_000),
            Refused(is_too_large, "16000×16000"),
        ),
        (
            // The decoder reads a side of 16384 as 0 (it masks after adding one).
            "WebP header claiming 16384×16384",
            webp_claiming(16_384, 16_384),
            Refused(is_corrupt, "0×0"),
        ),
        // ---- colour layouts
        (
            "16-bit RGB PNG",
            raw_png(30, 20, 16, 2, &[], &rgb16),
            Accepted(|p| colour_near(p, [0x12 as f32, 0x80 as f32, 0xC8 as f32], 1e-3)),
        ),
        (
            "16-bit RGBA PNG, fully transparent",
            raw_png(30, 20, 16, 6, &[], &rgba16_clear),
            Accepted(|p| colour_near(p, [255.0; 3], 1e-3)),
        ),
        (
            "palette PNG with a transparent entry",
            raw_png(30, 20, 8, 3, &palette, &palette_rows),
            Accepted(|p| {
                // Left half transparent red: white. Right half opaque blue.
                let (left, right) = (pixel(p, 0, 0), pixel(p, p.width - 1, 0));
                let near =
                    |a: [f32; 3], b: [f32; 3]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1.0);
                (near(left, [255.0; 3]) && near(right, [0.0, 0.0, 255.0]))
                    .then_some(())
                    .ok_or_else(|| format!("left {left:?}, right {right:?}"))
            }),
        ),
        (
            "palette PNG indexing past its palette",
            raw_png(4, 4, 8, 3, &palette[..1], &out_of_palette),
            Accepted(any_picture),
        ),
        (
            "greyscale JPEG",
            grey_jpeg,
            Accepted(|p| colour_near(p, [77.0; 3], 2.0)),
        ),
        (
            "CMYK JPEG",
            cmyk_jpeg,
            Accepted(|p| colour_near(p, [255.0, 0.0, 255.0], 3.0)),
        ),
        ("optimized JPEG", progressive_jpeg, Accepted(any_picture)),
        (
            "JPEG with an invalid EXIF orientation",
            with_app1(&rgb_jpeg(64, 48), &exif_orientation(9), None),
            Accepted(|p| {
                (p.width > p.height)
                    .then_some(())
                    .ok_or_else(|| "turned".into())
            }),
        ),
        (
            "JPEG whose EXIF segment claims to run past the file",
            with_app1(&rgb_jpeg(64, 48), &exif_orientation(6), Some(0xFFFF)),
            Refused(is_corrupt, "JPEG"),
        ),
        (
            "JPEG with an EXIF IFD pointing past its segment",
            with_app1(&rgb_jpeg(64, 48), b"Exif\0\0MM\0\x2a\xFF\xFF\xFF\xF0", None),
            Accepted(any_picture),
        ),
    ]
}

/// Runs one input with a panic guard; `Err` describes a panic.
fn run(bytes: &[u8]) -> Result<Result<Preprocessed, ImageError>, String> {
    catch_unwind(AssertUnwindSafe(|| preprocess_bytes(bytes, BUDGET))).map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into())
    })
}

#[test]
fn every_awkward_image_has_a_clear_outcome() {
    let corpus = corpus();
    let mut failures = Vec::new();
    for (name, bytes, outcome) in &corpus {
        let start = Instant::now();
        let result = run(bytes);
        let took = start.elapsed();
        let shown = match &result {
            Ok(Ok(p)) => format!(
                "accepted: {}×{}, {} soft tokens",
                p.width, p.height, p.soft_tokens
            ),
            Ok(Err(e)) => format!("refused: {e}"),
            Err(panic) => format!("PANICKED: {panic}"),
        };
        eprintln!("{name:<52} {took:>6.0?}  {shown}");
        let verdict = match (result, outcome) {
            (Err(panic), _) => Err(format!("panicked: {panic}")),
            (Ok(Ok(p)), Accepted(check)) => check(&p),
            (Ok(Err(e)), Refused(kind, text)) => {
                if kind(&e) && e.to_string().contains(text) {
                    Ok(())
                } else {
                    Err(format!(
                        "refused with {e:?} ({e}), expected one containing {text:?}"
                    ))
                }
            }
            (Ok(Ok(_)), Refused(_, text)) => {
                Err(format!("accepted, expected a refusal with {text:?}"))
            }
            (Ok(Err(e)), Accepted(_)) => Err(format!("refused: {e}")),
        };
        if let Err(problem) = verdict {
            failures.push(format!("{name}: {problem}"));
        }
        if took > Duration::from_secs(20) {
            failures.push(format!("{name}: took {took:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        corpus.len(),
        failures.join("\n")
    );
}

#[test]
fn the_file_name_never_decides_the_format() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, Vec<u8>, Option<&str>); 4] = [
        ("photo.png", rgb_jpeg(64, 48), None),
        ("photo.jpg", rgb_png(64, 48, [1, 2, 3]), None),
        (
            "IMG_0001.jpg",
            b"\0\0\0\x18ftypheic\0\0\0\0mif1heic".to_vec(),
            Some("HEIC"),
        ),
        (
            "notes.png",
            b"just some notes".to_vec(),
            Some("not an image"),
        ),
    ];
    for (name, bytes, refusal) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        match (preprocess_path(&path, BUDGET), refusal) {
            (Ok(_), None) => {}
            (Err(e), Some(text)) => assert!(e.to_string().contains(text), "{name}: {e}"),
            (other, _) => panic!("{name}: {other:?}"),
        }
    }
    // A folder and a missing file name their path.
    let error = preprocess_path(dir.path(), BUDGET).unwrap_err();
    assert!(matches!(error, ImageError::Read { .. }), "{error:?}");
    let missing = dir.path().join("gone.png");
    let error = preprocess_path(&missing, BUDGET).unwrap_err();
    assert!(error.to_string().contains("gone.png"), "{error}");
}

/// Every prefix and many single-byte corruptions of small valid files in each format: each is
/// accepted or refused, never a panic. (The fuzz targets go further; this runs in `make test`.)
#[test]
fn truncations_and_bit_flips_never_panic() {
    let files = [
        ("PNG", rgb_png(12, 8, [9, 8, 7])),
        ("JPEG", rgb_jpeg(16, 8)),
        ("GIF", gif_frames(6, 4, &[[1, 2, 3, 255], [4, 5, 6, 255]])),
        ("BMP", bmp(6, 4)),
        ("TIFF", tiff(6, 4)),
        ("WebP", webp(6, 4)),
        ("APNG", apng()),
    ];
    let mut panics = Vec::new();
    let mut tried = 0;
    for (format, file) in &files {
        let stride = (file.len() / 24).max(1);
        let mut variants: Vec<(String, Vec<u8>)> = (0..file.len())
            .step_by(stride)
            .map(|n| (format!("first {n} bytes"), file[..n].to_vec()))
            .collect();
        for at in (0..file.len()).step_by(stride) {
            for value in [0xFF, file[at] ^ 0x01] {
                let mut damaged = file.clone();
                damaged[at] = value;
                variants.push((format!("byte {at} = {value:#04x}"), damaged));
            }
        }
        for (what, bytes) in variants {
            tried += 1;
            if let Err(panic) = run(&bytes) {
                panics.push(format!("{format}, {what}: {panic}"));
            }
        }
    }
    eprintln!("{tried} damaged files tried");
    assert!(panics.is_empty(), "panics:\n{}", panics.join("\n"));
}
