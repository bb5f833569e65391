//! What a user attaching a picture notices: which files are accepted, how they come out, and which
//! are refused with which reason. Pixel-exact agreement with the Python reference lives in
//! `tests/parity/image_parity.py`.

use engine::image::{
    preprocess_bytes, preprocess_path, ImageError, Preprocessed, SoftTokenBudget, MAX_SIDE,
};
use image::{ExtendedColorType, ImageEncoder};

mod common;
use common::png::{png, raw_png, rgb_png};

const T280: SoftTokenBudget = SoftTokenBudget::T280;

fn jpeg(width: usize, height: usize, format: turbojpeg::PixelFormat, pixels: &[u8]) -> Vec<u8> {
    let mut compressor = turbojpeg::Compressor::new().unwrap();
    compressor.set_quality(95).unwrap();
    let pitch = width * format.size();
    let image = turbojpeg::Image {
        pixels,
        width,
        pitch,
        height,
        format,
    };
    compressor.compress_to_vec(image).unwrap()
}

/// `jpeg` with an EXIF APP1 segment carrying `orientation` right after SOI.
fn with_exif_orientation(jpeg: &[u8], orientation: u16) -> Vec<u8> {
    let mut tiff = b"MM\0\x2a\0\0\0\x08\0\x01".to_vec(); // big-endian, IFD0 at 8, one entry
    tiff.extend([0x01, 0x12, 0x00, 0x03, 0, 0, 0, 1]); // Orientation, SHORT, count 1
    tiff.extend(orientation.to_be_bytes());
    tiff.extend([0, 0, 0, 0, 0, 0]); // value padding, no next IFD
    let body = [b"Exif\0\0".as_slice(), &tiff].concat();
    let mut out = jpeg[..2].to_vec();
    out.extend([0xFF, 0xE1]);
    out.extend(((body.len() + 2) as u16).to_be_bytes());
    out.extend(body);
    out.extend(&jpeg[2..]);
    out
}

/// Channel values of output pixel (x, y), times 255.
fn pixel(image: &Preprocessed, x: usize, y: usize) -> [f32; 3] {
    let plane = image.width * image.height;
    [0, 1, 2].map(|c| image.pixels[c * plane + y * image.width + x] * 255.0)
}

fn assert_near(actual: [f32; 3], expected: [f32; 3], tolerance: f32) {
    let close = actual
        .iter()
        .zip(expected)
        .all(|(a, e)| (a - e).abs() <= tolerance);
    assert!(
        close,
        "{actual:?} is not within {tolerance} of {expected:?}"
    );
}

#[test]
fn an_empty_file_is_refused() {
    assert!(matches!(
        preprocess_bytes(&[], T280),
        Err(ImageError::Empty)
    ));
}

#[test]
fn a_truncated_png_is_corrupt() {
    let png = rgb_png(64, 64, [10, 20, 30]);
    let cut = &png[..png.len() - 30];
    let error = preprocess_bytes(cut, T280).unwrap_err();
    assert!(
        matches!(error, ImageError::Corrupt { format: "PNG", .. }),
        "{error:?}"
    );
}

#[test]
fn a_truncated_jpeg_is_corrupt() {
    let rgb: Vec<u8> = (0..64 * 64 * 3).map(|i| (i * 7 % 251) as u8).collect();
    let full = jpeg(64, 64, turbojpeg::PixelFormat::RGB, &rgb);
    let error = preprocess_bytes(&full[..full.len() / 2], T280).unwrap_err();
    assert!(
        matches!(error, ImageError::Corrupt { format: "JPEG", .. }),
        "{error:?}"
    );
}

#[test]
fn heic_photos_are_refused_by_name() {
    let heic = b"\0\0\0\x18ftypheic\0\0\0\0mif1heic\0\0\0\x08free";
    let error = preprocess_bytes(heic, T280).unwrap_err();
    assert!(
        matches!(&error, ImageError::Unsupported { format } if format == "HEIC"),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "HEIC photos are not supported yet; export as JPEG or PNG"
    );

    let avif = b"\0\0\0\x1cftypavif\0\0\0\0avifmif1miaf";
    let error = preprocess_bytes(avif, T280).unwrap_err();
    assert!(
        matches!(&error, ImageError::Unsupported { format } if format == "AVIF"),
        "{error:?}"
    );
}

#[test]
fn other_files_are_unrecognized() {
    let error = preprocess_bytes(b"hello, this is a text file", T280).unwrap_err();
    assert!(matches!(error, ImageError::Unrecognized), "{error:?}");
}

#[test]
fn a_decompression_bomb_is_refused_from_its_header() {
    // 100000×100000 RGBA would need 40 GB; the file is a few dozen bytes.
    let bomb = raw_png(100_000, 100_000, 8, 6, &[], &[0; 16]);
    let error = preprocess_bytes(&bomb, T280).unwrap_err();
    assert!(
        matches!(
            error,
            ImageError::TooLarge {
                width: 100_000,
                height: 100_000
            }
        ),
        "{error:?}"
    );

    // Within the side limit but 60 megapixels.
    let wide = raw_png(10_000, 6_000, 8, 2, &[], &[0; 16]);
    let error = preprocess_bytes(&wide, T280).unwrap_err();
    assert!(
        matches!(
            error,
            ImageError::TooLarge {
                width: 10_000,
                height: 6_000
            }
        ),
        "{error:?}"
    );
}

#[test]
fn a_jpeg_bomb_is_refused_from_its_header() {
    let mut bomb = jpeg(16, 16, turbojpeg::PixelFormat::RGB, &[128; 16 * 16 * 3]);
    let sof = bomb.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    bomb[sof + 5..sof + 9].copy_from_slice(&[0xEA, 0x60, 0xEA, 0x60]); // 60000×60000
    let error = preprocess_bytes(&bomb, T280).unwrap_err();
    assert!(
        matches!(
            error,
            ImageError::TooLarge {
                width: 60_000,
                height: 60_000
            }
        ),
        "{error:?}"
    );
}

#[test]
fn a_sliver_longer_than_the_side_limit_is_refused() {
    for length in [MAX_SIDE + 1, 50_000] {
        let sliver = rgb_png(length, 1, [1, 2, 3]);
        let error = preprocess_bytes(&sliver, T280).unwrap_err();
        assert!(
            matches!(error, ImageError::TooLarge { width, height: 1 } if width == length),
            "{error:?}"
        );
    }
}

#[test]
fn slivers_fill_one_row_of_tokens() {
    let wide = preprocess_bytes(&rgb_png(5000, 1, [9, 99, 199]), T280).unwrap();
    assert_eq!(
        (wide.height, wide.width, wide.soft_tokens),
        (48, 13_440, 280)
    );
    assert_near(pixel(&wide, 13_439, 47), [9.0, 99.0, 199.0], 1e-3);

    let tall = preprocess_bytes(&rgb_png(1, 5000, [9, 99, 199]), T280).unwrap();
    assert_eq!(
        (tall.height, tall.width, tall.soft_tokens),
        (13_440, 48, 280)
    );
    assert_eq!(tall.pixels.len(), 3 * 13_440 * 48);
}

#[test]
fn the_budget_sets_the_grid() {
    let png = rgb_png(1920, 1080, [50, 60, 70]);
    let sizes: Vec<_> = SoftTokenBudget::ALL
        .into_iter()
        .map(|budget| {
            let out = preprocess_bytes(&png, budget).unwrap();
            assert!(out.soft_tokens <= budget.tokens());
            (out.height, out.width, out.soft_tokens)
        })
        .collect();
    let expected = [
        (288, 528, 66),
        (384, 720, 120),
        (576, 1056, 264),
        (816, 1488, 527),
        (1200, 2112, 1100),
    ];
    assert_eq!(sizes, expected);
}

#[test]
fn the_extension_does_not_matter() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("photo.jpg");
    std::fs::write(&path, rgb_png(30, 20, [255, 0, 0])).unwrap();
    let image = preprocess_path(&path, T280).unwrap();
    assert_eq!((image.height, image.width), (624, 960));
    assert_near(pixel(&image, 0, 0), [255.0, 0.0, 0.0], 1e-3);
}

#[test]
fn a_missing_file_names_its_path() {
    let error = preprocess_path(std::path::Path::new("/nonexistent/cat.png"), T280).unwrap_err();
    assert!(
        error.to_string().contains("/nonexistent/cat.png"),
        "{error}"
    );
}

#[test]
fn transparency_is_flattened_onto_white() {
    // Fully transparent black, half-transparent black, opaque grey: white, mid grey, grey.
    for (rgba, expected) in [
        ([0, 0, 0, 0], 255.0),
        ([0, 0, 0, 128], 127.0),
        ([90, 90, 90, 255], 90.0),
    ] {
        let png = png(30, 20, ExtendedColorType::Rgba8, &rgba.repeat(600));
        let image = preprocess_bytes(&png, T280).unwrap();
        assert!(
            image
                .pixels
                .iter()
                .all(|&v| (v * 255.0 - expected).abs() < 1e-3),
            "{rgba:?}"
        );
    }
}

#[test]
fn palette_transparency_is_flattened_onto_white() {
    // Index 0 is transparent red, index 1 opaque blue; left half 0, right half 1.
    let rows: Vec<u8> = (0..20)
        .flat_map(|_| std::iter::once(0).chain((0..30).map(|x| u8::from(x >= 15))))
        .collect();
    let chunks = [(b"PLTE", vec![255, 0, 0, 0, 0, 255]), (b"tRNS", vec![0])];
    let png = raw_png(30, 20, 8, 3, &chunks, &rows);
    let image = preprocess_bytes(&png, T280).unwrap();
    assert_near(pixel(&image, 0, 0), [255.0, 255.0, 255.0], 1e-3);
    assert_near(pixel(&image, image.width - 1, 0), [0.0, 0.0, 255.0], 1e-3);
}

#[test]
fn sixteen_bit_grayscale_keeps_its_high_byte() {
    let rows: Vec<u8> = (0..20)
        .flat_map(|_| std::iter::once(0).chain([0x80, 0x7F].repeat(30)))
        .collect();
    let png = raw_png(30, 20, 16, 0, &[], &rows);
    let image = preprocess_bytes(&png, T280).unwrap();
    assert!(image
        .pixels
        .iter()
        .all(|&v| (v * 255.0 - 128.0).abs() < 1e-3));
}

#[test]
fn exif_orientation_turns_photos_upright() {
    // Stored 96 wide × 48 tall: left half red, right half blue.
    let rgb: Vec<u8> = (0..48)
        .flat_map(|_| (0..96).flat_map(|x| if x < 48 { [255, 0, 0] } else { [0, 0, 255] }))
        .collect();
    let plain = jpeg(96, 48, turbojpeg::PixelFormat::RGB, &rgb);
    let (red, blue) = ([255.0, 0.0, 0.0], [0.0, 0.0, 255.0]);
    // (EXIF value, upright width > height, colour at top-left, colour at bottom-right)
    let cases = [
        (1, true, red, blue),
        (3, true, blue, red),
        (6, false, red, blue),
        (8, false, blue, red),
    ];
    for (orientation, landscape, top_left, bottom_right) in cases {
        let image = preprocess_bytes(&with_exif_orientation(&plain, orientation), T280).unwrap();
        assert_eq!(
            image.width > image.height,
            landscape,
            "orientation {orientation}"
        );
        assert_near(pixel(&image, 0, 0), top_left, 3.0);
        assert_near(
            pixel(&image, image.width - 1, image.height - 1),
            bottom_right,
            3.0,
        );
    }
}

#[test]
fn cmyk_jpegs_read_as_pillow_reads_them() {
    // Stored samples are Adobe-inverted ink: 255 is none. No ink is white; full magenta is magenta.
    let paper = jpeg(32, 32, turbojpeg::PixelFormat::CMYK, &[255; 32 * 32 * 4]);
    let image = preprocess_bytes(&paper, T280).unwrap();
    assert_near(pixel(&image, 5, 5), [255.0, 255.0, 255.0], 2.0);

    let magenta = jpeg(
        32,
        32,
        turbojpeg::PixelFormat::CMYK,
        &[255, 0, 255, 255].repeat(32 * 32),
    );
    let image = preprocess_bytes(&magenta, T280).unwrap();
    assert_near(pixel(&image, 5, 5), [255.0, 0.0, 255.0], 3.0);
}

#[test]
fn an_animated_gif_shows_its_first_frame() {
    let mut gif = Vec::new();
    {
        let mut encoder = image::codecs::gif::GifEncoder::new(&mut gif);
        for rgba in [[200, 0, 0, 255], [0, 200, 0, 255]] {
            let frame = image::RgbaImage::from_fn(30, 20, |_, _| image::Rgba(rgba));
            encoder.encode_frame(image::Frame::new(frame)).unwrap();
        }
    }
    let image = preprocess_bytes(&gif, T280).unwrap();
    assert_near(pixel(&image, 10, 10), [200.0, 0.0, 0.0], 1e-3);
}

#[test]
fn the_hash_follows_content_not_container() {
    let rgb: Vec<u8> = (0..30 * 20 * 3).map(|i| (i % 256) as u8).collect();
    let png = png(30, 20, ExtendedColorType::Rgb8, &rgb);
    let mut bmp = Vec::new();
    image::codecs::bmp::BmpEncoder::new(&mut bmp)
        .write_image(&rgb, 30, 20, ExtendedColorType::Rgb8)
        .unwrap();

    let from_png = preprocess_bytes(&png, T280).unwrap();
    let from_bmp = preprocess_bytes(&bmp, T280).unwrap();
    assert_eq!(from_png, from_bmp);
    assert_ne!(
        from_png.hash,
        preprocess_bytes(&png, SoftTokenBudget::T70).unwrap().hash
    );
    assert_ne!(
        from_png.hash,
        preprocess_bytes(&rgb_png(30, 20, [0; 3]), T280)
            .unwrap()
            .hash
    );
}
