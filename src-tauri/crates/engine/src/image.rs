//! Image preprocessing for the vision tower: decode, turn upright, flatten onto white, resize onto
//! the 48-pixel grid inside a soft-token budget, and scale to `[0, 1]` channel-first floats.
//!
//! The output equals mlx-vlm 0.7.10's Gemma 4 image processor (which loads with Pillow 13 and
//! resizes with `Image.BICUBIC`) value for value on opaque images. Two reference behaviours are
//! deliberately not copied:
//! - transparency is composited onto white; the reference drops alpha, so a transparent pixel
//!   shows whatever colour it hides (often black);
//! - 16-bit grayscale keeps its high byte; the reference clips every value above 255 to white.
//!
//! Animated GIF and APNG files give their first frame, as Pillow's `Image.open` does.
//!
//! JPEG goes through libjpeg-turbo, the decoder inside Pillow: pure-Rust decoders differ from it by
//! up to ±5 levels per pixel. PNG, WebP, GIF, BMP and TIFF decode identically with the `image` crate.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use image::metadata::Orientation;
use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader};

mod bicubic;
mod thumbnail;

pub use thumbnail::{thumbnail, Thumbnail};

/// Largest accepted image, in decoded pixels. Covers 48-megapixel phone cameras.
pub const MAX_PIXELS: u64 = 50_000_000;
/// Longest accepted side, in pixels. Admits any real panorama while bounding the resize tables,
/// which grow with the side rather than the area.
pub const MAX_SIDE: u32 = 32_768;
/// Largest accepted file, in bytes.
pub const MAX_FILE_BYTES: u64 = 512 * 1024 * 1024;

/// Most memory a non-JPEG decoder may hold at once: a 50 MP RGBA image at 16 bits is 400 MB.
const MAX_DECODE_BYTES: u64 = 512 * 1024 * 1024;
/// Progressive JPEG scans allowed; cameras write about ten, crafted files thousands.
const MAX_JPEG_SCANS: u32 = 500;
const PATCH_SIZE: usize = 16;
const POOLING: usize = 3;
/// Both sides of a resized image are multiples of this: one pooled soft token is 48×48 pixels.
const GRID: usize = PATCH_SIZE * POOLING;
/// Bumped whenever the pixels produced for the same input change, to invalidate cached features.
const HASH_DOMAIN: &[u8] = b"gemma-desk image preprocessing v1\0";

/// How many soft tokens one image may become (the reference's `max_soft_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SoftTokenBudget {
    T70,
    T140,
    #[default]
    T280,
    T560,
    T1120,
}

impl SoftTokenBudget {
    pub const ALL: [Self; 5] = [Self::T70, Self::T140, Self::T280, Self::T560, Self::T1120];

    /// The most soft tokens an image gets under this budget.
    pub const fn tokens(self) -> usize {
        match self {
            Self::T70 => 70,
            Self::T140 => 140,
            Self::T280 => 280,
            Self::T560 => 560,
            Self::T1120 => 1120,
        }
    }
}

impl TryFrom<usize> for SoftTokenBudget {
    type Error = InvalidBudget;

    fn try_from(tokens: usize) -> Result<Self, InvalidBudget> {
        Self::ALL
            .into_iter()
            .find(|budget| budget.tokens() == tokens)
            .ok_or(InvalidBudget(tokens))
    }
}

/// A soft-token budget the model was not trained with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an image budget must be 70, 140, 280, 560 or 1120 soft tokens, not {0}")]
pub struct InvalidBudget(pub usize);

/// Why an image could not be prepared for the model.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("the image file is empty")]
    Empty,
    /// A known image format this app cannot decode, e.g. "HEIC".
    #[error("{}", unsupported_message(format))]
    Unsupported { format: String },
    #[error("this file is not an image Gemma Desk can read")]
    Unrecognized,
    /// The data ends early or contradicts itself.
    #[error("the {format} image is corrupt or truncated ({detail})")]
    Corrupt {
        format: &'static str,
        detail: String,
    },
    #[error(
        "the image is {width}×{height} pixels; the limit is {} megapixels and {MAX_SIDE} pixels per side",
        MAX_PIXELS / 1_000_000
    )]
    TooLarge { width: u32, height: u32 },
    #[error("the file is {} MB; the limit is {} MB", bytes / 1_000_000, MAX_FILE_BYTES / 1_000_000)]
    FileTooLarge { bytes: u64 },
    #[error("could not read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn unsupported_message(format: &str) -> String {
    if format == "HEIC" {
        "HEIC photos are not supported yet; export as JPEG or PNG".to_owned()
    } else {
        format!("{format} images are not supported yet; export as JPEG or PNG")
    }
}

/// Pixels ready for the vision tower.
#[derive(Debug, Clone, PartialEq)]
pub struct Preprocessed {
    /// `[3, height, width]` channel-first, row-major, each value in `[0, 1]`.
    pub pixels: Vec<f32>,
    pub height: usize,
    pub width: usize,
    /// `(height / 48) · (width / 48)`: how many image tokens the prompt needs.
    pub soft_tokens: usize,
    /// BLAKE3 of the decoded upright RGB pixels, their size and the budget: a feature-cache key.
    pub hash: [u8; 32],
}

/// Prepares an image file for the model. The format comes from the content, not the extension.
pub fn preprocess_path(path: &Path, budget: SoftTokenBudget) -> Result<Preprocessed, ImageError> {
    let read_error = |source| ImageError::Read {
        path: path.to_path_buf(),
        source,
    };
    let bytes = std::fs::metadata(path).map_err(read_error)?.len();
    if bytes > MAX_FILE_BYTES {
        return Err(ImageError::FileTooLarge { bytes });
    }
    preprocess_bytes(&std::fs::read(path).map_err(read_error)?, budget)
}

/// Prepares an encoded image (PNG, JPEG, WebP, GIF, BMP or TIFF) for the model.
pub fn preprocess_bytes(bytes: &[u8], budget: SoftTokenBudget) -> Result<Preprocessed, ImageError> {
    let image = decode(bytes)?;
    let (height, width) = target_size(image.height, image.width, budget);
    let resized = bicubic::resize(&image, width, height);
    Ok(Preprocessed {
        pixels: to_unit_chw(&resized),
        height,
        width,
        soft_tokens: (height / GRID) * (width / GRID),
        hash: content_hash(&image, budget),
    })
}

/// How many soft tokens an upright image of `height × width` pixels becomes under `budget`:
/// what [`preprocess_bytes`] gives as `soft_tokens`, without decoding it (a draft's count).
pub fn soft_tokens_for(height: usize, width: usize, budget: SoftTokenBudget) -> usize {
    let (height, width) = target_size(height.max(1), width.max(1), budget);
    (height / GRID) * (width / GRID)
}

/// 8-bit RGB pixels, row-major, upright and opaque.
#[derive(Debug, Clone, PartialEq)]
struct Rgb {
    width: usize,
    height: usize,
    data: Vec<u8>,
}

fn decode(bytes: &[u8]) -> Result<Rgb, ImageError> {
    if bytes.is_empty() {
        return Err(ImageError::Empty);
    }
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ImageError::FileTooLarge {
            bytes: bytes.len() as u64,
        });
    }
    if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return decode_jpeg(bytes);
    }
    if let Some(format) = unsupported_by_signature(bytes) {
        return Err(ImageError::Unsupported {
            format: format.to_owned(),
        });
    }
    let format = image::guess_format(bytes).map_err(|_| ImageError::Unrecognized)?;
    let name = match format {
        ImageFormat::Png => "PNG",
        ImageFormat::WebP => "WebP",
        ImageFormat::Gif => "GIF",
        ImageFormat::Bmp => "BMP",
        ImageFormat::Tiff => "TIFF",
        other => {
            let name = other
                .extensions_str()
                .first()
                .map_or_else(|| format!("{other:?}"), |ext| ext.to_ascii_uppercase());
            return Err(ImageError::Unsupported { format: name });
        }
    };
    decode_with_image_crate(bytes, format, name)
}

/// Names formats people often try to attach that no decoder here reads.
fn unsupported_by_signature(bytes: &[u8]) -> Option<&'static str> {
    if bytes.get(4..8) == Some(b"ftyp") {
        // ISO media file: the brands say whether it is HEIF (HEIC, AVIF) or video.
        // The box size bounds the brand list; 0 ("to the end") and 1 (a 64-bit size follows)
        // and sizes past the data read to the end of what is there.
        let declared = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        let end = if declared < 16 {
            bytes.len()
        } else {
            declared.min(bytes.len())
        };
        let brands = bytes.get(8..end)?;
        let has = |names: &[&[u8; 4]]| {
            brands
                .chunks_exact(4)
                .any(|b| names.iter().any(|n| b == *n))
        };
        if has(&[b"avif", b"avis"]) {
            return Some("AVIF");
        }
        let heic: &[&[u8; 4]] = &[
            b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1",
        ];
        return has(heic).then_some("HEIC");
    }
    if bytes.starts_with(b"%PDF-") {
        return Some("PDF");
    }
    let head = &bytes[..bytes.len().min(1024)];
    head.windows(4).any(|w| w == b"<svg").then_some("SVG")
}

fn check_dimensions(width: usize, height: usize, format: &'static str) -> Result<(), ImageError> {
    if width == 0 || height == 0 {
        let detail = format!("it declares a {width}×{height} picture");
        return Err(ImageError::Corrupt { format, detail });
    }
    let side = MAX_SIDE as usize;
    if width > side || height > side || (width as u64) * (height as u64) > MAX_PIXELS {
        let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        return Err(ImageError::TooLarge {
            width: clamp(width),
            height: clamp(height),
        });
    }
    Ok(())
}

fn decode_jpeg(bytes: &[u8]) -> Result<Rgb, ImageError> {
    use turbojpeg::{Colorspace, PixelFormat};

    let corrupt = |e: turbojpeg::Error| ImageError::Corrupt {
        format: "JPEG",
        detail: e.to_string(),
    };
    let mut decompressor = turbojpeg::Decompressor::new().map_err(corrupt)?;
    let header = decompressor.read_header(bytes).map_err(corrupt)?;
    let (width, height) = (header.width, header.height);
    check_dimensions(width, height, "JPEG")?;
    decompressor
        .set_scan_limit(MAX_JPEG_SCANS)
        .map_err(corrupt)?;

    // libjpeg cannot turn CMYK into RGB; Pillow does it itself, and so do we.
    let cmyk = matches!(header.colorspace, Colorspace::CMYK | Colorspace::YCCK);
    let format = if cmyk {
        PixelFormat::CMYK
    } else {
        PixelFormat::RGB
    };
    let pitch = width * format.size();
    let mut out = turbojpeg::Image {
        pixels: vec![0; pitch * height],
        width,
        pitch,
        height,
        format,
    };
    decompressor
        .decompress(bytes, out.as_deref_mut())
        .map_err(corrupt)?;
    let data = if cmyk {
        cmyk_to_rgb(&out.pixels)
    } else {
        out.pixels
    };
    Ok(orient(
        Rgb {
            width,
            height,
            data,
        },
        jpeg_orientation(bytes),
    ))
}

/// Pillow's reading of JPEG CMYK: stored inverted (Adobe), then `r = (255 - c)·(255 - k) / 255`
/// with its own rounding.
fn cmyk_to_rgb(cmyk: &[u8]) -> Vec<u8> {
    let muldiv255 = |a: u32, b: u32| {
        let t = a * b + 128;
        ((t >> 8) + t) >> 8
    };
    let mut rgb = Vec::with_capacity(cmyk.len() / 4 * 3);
    for px in cmyk.chunks_exact(4) {
        let [c, m, y, k] = [px[0], px[1], px[2], px[3]].map(|v| 255 - u32::from(v));
        let white = 255 - k;
        rgb.extend([c, m, y].map(|ink| (white - muldiv255(ink, white)) as u8));
    }
    rgb
}

/// The EXIF orientation of a JPEG: the first `Exif` APP1 segment before the scan data decides,
/// as in Pillow.
fn jpeg_orientation(bytes: &[u8]) -> Orientation {
    let mut pos = 2;
    while let Some(&[0xFF, marker]) = bytes.get(pos..pos + 2) {
        match marker {
            0xFF => pos += 1,
            0x01 | 0xD0..=0xD8 => pos += 2,
            0xD9 | 0xDA => break,
            _ => {
                let Some(&[hi, lo]) = bytes.get(pos + 2..pos + 4) else {
                    break;
                };
                let length = usize::from(u16::from_be_bytes([hi, lo]));
                let Some(body) = bytes.get(pos + 4..pos + 2 + length.max(2)) else {
                    break;
                };
                if marker == 0xE1 {
                    if let Some(exif) = body.strip_prefix(b"Exif\0\0") {
                        return Orientation::from_exif_chunk(exif)
                            .unwrap_or(Orientation::NoTransforms);
                    }
                }
                pos += 2 + length.max(2);
            }
        }
    }
    Orientation::NoTransforms
}

fn decode_with_image_crate(
    bytes: &[u8],
    format: ImageFormat,
    name: &'static str,
) -> Result<Rgb, ImageError> {
    let failed = |error: image::ImageError| match error {
        image::ImageError::Unsupported(e) => ImageError::Unsupported {
            format: format!("{name} ({e})"),
        },
        other => ImageError::Corrupt {
            format: name,
            detail: other.to_string(),
        },
    };
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(MAX_DECODE_BYTES);
    reader.limits(limits);
    let mut decoder = reader.into_decoder().map_err(failed)?;
    let (width, height) = decoder.dimensions();
    check_dimensions(width as usize, height as usize, name)?;
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    // The declared size passed the checks above, so a limit hit now means the data asks for more
    // than that size needs (e.g. a GIF frame far larger than its screen).
    let image = DynamicImage::from_decoder(decoder).map_err(|error| match error {
        image::ImageError::Limits(_) => ImageError::Corrupt {
            format: name,
            detail: format!("its data does not fit the {width}×{height} picture it declares"),
        },
        other => failed(other),
    })?;
    Ok(orient(flatten_onto_white(image), orientation))
}

/// Any pixel layout to 8-bit RGB. 16-bit samples keep their high byte, as Pillow does for colour;
/// alpha is composited onto white.
fn flatten_onto_white(image: DynamicImage) -> Rgb {
    let (width, height) = (image.width() as usize, image.height() as usize);
    let high = |v: u16| (v >> 8) as u8;
    let data = match image {
        DynamicImage::ImageRgb8(buffer) => buffer.into_raw(),
        DynamicImage::ImageRgb16(buffer) => buffer.iter().map(|&c| high(c)).collect(),
        DynamicImage::ImageLuma8(buffer) => buffer.iter().flat_map(|&l| [l; 3]).collect(),
        DynamicImage::ImageLuma16(buffer) => buffer.iter().flat_map(|&l| [high(l); 3]).collect(),
        DynamicImage::ImageLumaA8(buffer) => buffer
            .chunks_exact(2)
            .flat_map(|px| [over_white(px[0], px[1]); 3])
            .collect(),
        DynamicImage::ImageLumaA16(buffer) => buffer
            .chunks_exact(2)
            .flat_map(|px| [over_white(high(px[0]), high(px[1])); 3])
            .collect(),
        DynamicImage::ImageRgba16(buffer) => buffer
            .chunks_exact(4)
            .flat_map(|px| [px[0], px[1], px[2]].map(|c| over_white(high(c), high(px[3]))))
            .collect(),
        DynamicImage::ImageRgba8(buffer) => rgba_over_white(buffer.as_raw()),
        // Float TIFFs and any layout added later: the crate's own conversion, then alpha onto white.
        other => rgba_over_white(other.to_rgba8().as_raw()),
    };
    Rgb {
        width,
        height,
        data,
    }
}

fn rgba_over_white(rgba: &[u8]) -> Vec<u8> {
    rgba.chunks_exact(4)
        .flat_map(|px| [px[0], px[1], px[2]].map(|c| over_white(c, px[3])))
        .collect()
}

/// `colour` seen with opacity `alpha` in front of white, rounded to nearest.
fn over_white(colour: u8, alpha: u8) -> u8 {
    let (c, a) = (u32::from(colour), u32::from(alpha));
    ((c * a + 255 * (255 - a) + 127) / 255) as u8
}

/// Turns a stored image upright, with the same transposes as Pillow's `ImageOps.exif_transpose`.
fn orient(image: Rgb, orientation: Orientation) -> Rgb {
    use Orientation::*;

    let Rgb {
        width: w,
        height: h,
        ..
    } = image;
    if orientation == NoTransforms {
        return image;
    }
    let swaps = matches!(
        orientation,
        Rotate90 | Rotate270 | Rotate90FlipH | Rotate270FlipH
    );
    let (width, height) = if swaps { (h, w) } else { (w, h) };
    // For each output (x, y): the stored column and row it shows.
    let source = |x: usize, y: usize| match orientation {
        NoTransforms => (x, y),
        FlipHorizontal => (w - 1 - x, y),
        Rotate180 => (w - 1 - x, h - 1 - y),
        FlipVertical => (x, h - 1 - y),
        Rotate90FlipH => (y, x),
        Rotate90 => (y, h - 1 - x),
        Rotate270FlipH => (w - 1 - y, h - 1 - x),
        Rotate270 => (w - 1 - y, x),
    };
    let mut data = Vec::with_capacity(image.data.len());
    for y in 0..height {
        for x in 0..width {
            let (sx, sy) = source(x, y);
            let at = (sy * w + sx) * 3;
            data.extend_from_slice(&image.data[at..at + 3]);
        }
    }
    Rgb {
        width,
        height,
        data,
    }
}

/// The reference's `get_aspect_ratio_preserving_size`: the largest multiple-of-48 size with the
/// image's aspect that fits `budget`, upscaling small images too. Returns `(height, width)`.
fn target_size(height: usize, width: usize, budget: SoftTokenBudget) -> (usize, usize) {
    let max_patches = budget.tokens() * POOLING * POOLING;
    let target_pixels = (max_patches * PATCH_SIZE * PATCH_SIZE) as f64;
    let factor = (target_pixels / (height * width) as f64).sqrt();
    let fit = |side: usize| (factor * side as f64 / GRID as f64).floor() as usize * GRID;
    let (fit_height, fit_width) = (fit(height), fit(width));
    // A sliver collapses one side: give it one row of tokens and the other side its aspect, capped.
    let max_side = budget.tokens() * GRID;
    let aspect = |long: usize, short: usize| (long as f64 / short as f64).floor() as usize * GRID;
    if fit_height == 0 {
        (GRID, aspect(width, height).min(max_side))
    } else if fit_width == 0 {
        (aspect(height, width).min(max_side), GRID)
    } else {
        (fit_height, fit_width)
    }
}

/// `[3, H, W]` floats in `[0, 1]`: `f32(v) · f32(1/255)`, exactly as NumPy computes the reference.
fn to_unit_chw(image: &Rgb) -> Vec<f32> {
    let scale = (1.0f64 / 255.0) as f32;
    let plane = image.width * image.height;
    let mut pixels = vec![0.0; 3 * plane];
    for (i, px) in image.data.chunks_exact(3).enumerate() {
        for (c, &v) in px.iter().enumerate() {
            pixels[c * plane + i] = f32::from(v) * scale;
        }
    }
    pixels
}

fn content_hash(image: &Rgb, budget: SoftTokenBudget) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(HASH_DOMAIN);
    for n in [budget.tokens(), image.width, image.height] {
        hasher.update(&(n as u64).to_le_bytes());
    }
    hasher.update(&image.data);
    *hasher.finalize().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rgb(width: usize, height: usize, data: Vec<u8>) -> Rgb {
        assert_eq!(data.len(), width * height * 3);
        Rgb {
            width,
            height,
            data,
        }
    }

    #[test]
    fn target_size_matches_the_reference_formula() {
        // (height, width, budget) -> (height, width), from mlx-vlm's get_aspect_ratio_preserving_size.
        let cases = [
            (180, 260, 280, (624, 960)),
            (900, 600, 280, (960, 624)),
            (20, 30, 280, (624, 960)),
            (3000, 4000, 280, (672, 912)),
            (1, 5000, 280, (48, 13440)),
            (5000, 1, 280, (13440, 48)),
            (624, 960, 280, (624, 960)),
            (1, 1, 280, (768, 768)),
            (1080, 1920, 70, (288, 528)),
            (1080, 1920, 140, (384, 720)),
            (1080, 1920, 560, (816, 1488)),
            (1080, 1920, 1120, (1200, 2112)),
            (1, 5000, 1120, (48, 53760)),
            (7, 32768, 280, (48, 13440)),
            (100, 5000, 280, (96, 5664)),
            (32768, 1525, 1120, (7440, 336)),
        ];
        for (h, w, tokens, expected) in cases {
            let budget = SoftTokenBudget::try_from(tokens).unwrap();
            assert_eq!(target_size(h, w, budget), expected, "{h}×{w} at {tokens}");
            let (th, tw) = expected;
            assert!(
                (th / GRID) * (tw / GRID) <= tokens,
                "{h}×{w} exceeds the budget"
            );
            assert_eq!(soft_tokens_for(h, w, budget), (th / GRID) * (tw / GRID));
        }
    }

    #[test]
    fn budgets_are_the_five_trained_sizes() {
        assert_eq!(SoftTokenBudget::default(), SoftTokenBudget::T280);
        assert_eq!(SoftTokenBudget::try_from(1120), Ok(SoftTokenBudget::T1120));
        assert_eq!(SoftTokenBudget::try_from(281), Err(InvalidBudget(281)));
        assert_eq!(SoftTokenBudget::try_from(0), Err(InvalidBudget(0)));
    }

    #[test]
    fn orientations_follow_exif() {
        // Stored 3 wide × 2 tall, pixels numbered row-major: 0 1 2 / 3 4 5.
        let image = rgb(3, 2, (0..6).flat_map(|v| [v; 3]).collect());
        let shown = |o| {
            let out = orient(image.clone(), o);
            (
                out.width,
                out.data.chunks_exact(3).map(|px| px[0]).collect::<Vec<_>>(),
            )
        };
        use Orientation::*;
        assert_eq!(shown(NoTransforms), (3, vec![0, 1, 2, 3, 4, 5]));
        assert_eq!(shown(FlipHorizontal), (3, vec![2, 1, 0, 5, 4, 3]));
        assert_eq!(shown(Rotate180), (3, vec![5, 4, 3, 2, 1, 0]));
        assert_eq!(shown(FlipVertical), (3, vec![3, 4, 5, 0, 1, 2]));
        assert_eq!(shown(Rotate90FlipH), (2, vec![0, 3, 1, 4, 2, 5]));
        assert_eq!(shown(Rotate90), (2, vec![3, 0, 4, 1, 5, 2]));
        assert_eq!(shown(Rotate270FlipH), (2, vec![5, 2, 4, 1, 3, 0]));
        assert_eq!(shown(Rotate270), (2, vec![2, 5, 1, 4, 0, 3]));
    }

    #[test]
    fn transparency_becomes_white() {
        assert_eq!(over_white(0, 0), 255);
        assert_eq!(over_white(17, 255), 17);
        assert_eq!(over_white(0, 128), 127);
    }

    #[test]
    fn cmyk_matches_pillow() {
        // Raw Adobe JPEG samples (inverted ink) -> Pillow's RGB.
        assert_eq!(cmyk_to_rgb(&[255, 255, 255, 255]), [255, 255, 255]);
        assert_eq!(cmyk_to_rgb(&[0, 0, 0, 0]), [0, 0, 0]);
        assert_eq!(cmyk_to_rgb(&[255, 0, 128, 200]), [200, 0, 100]);
    }

    #[test]
    fn hash_depends_on_pixels_size_and_budget() {
        let a = rgb(2, 1, vec![1, 2, 3, 4, 5, 6]);
        let b = rgb(1, 2, vec![1, 2, 3, 4, 5, 6]);
        let base = content_hash(&a, SoftTokenBudget::T280);
        assert_eq!(base, content_hash(&a.clone(), SoftTokenBudget::T280));
        assert_ne!(base, content_hash(&b, SoftTokenBudget::T280));
        assert_ne!(base, content_hash(&a, SoftTokenBudget::T70));
    }
}
