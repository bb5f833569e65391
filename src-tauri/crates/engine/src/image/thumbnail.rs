//! Small previews of attached images for the UI, decoded exactly as the model will see them
//! (upright, alpha on white), so what the user sees is what the model gets.

use std::io::Cursor;

use image::{imageops, ImageFormat, RgbImage};

use super::{decode, ImageError};

/// A preview and what the original is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thumbnail {
    /// MIME type of the original, from its content.
    pub mime: &'static str,
    /// Size of the original, upright.
    pub width: u32,
    pub height: u32,
    /// PNG of the image scaled to fit `max_side`, never enlarged.
    pub png: Vec<u8>,
}

/// Decodes `bytes` (refusing anything the model could not read, with the same errors) and
/// makes a PNG preview whose longer side is at most `max_side`.
pub fn thumbnail(bytes: &[u8], max_side: u32) -> Result<Thumbnail, ImageError> {
    let rgb = decode(bytes)?;
    let (width, height) = (rgb.width as u32, rgb.height as u32);
    let image = RgbImage::from_raw(width, height, rgb.data).ok_or(ImageError::Unrecognized)?;
    let scale = (max_side.max(1) as f64 / width.max(height) as f64).min(1.0);
    let small = |n: u32| ((n as f64 * scale).round() as u32).max(1);
    let preview = if scale < 1.0 {
        imageops::thumbnail(&image, small(width), small(height))
    } else {
        image
    };
    let mut png = Vec::new();
    preview
        .write_to(&mut Cursor::new(&mut png), ImageFormat::Png)
        .map_err(|e| ImageError::Corrupt {
            format: "PNG",
            detail: format!("encoding the preview: {e}"),
        })?;
    Ok(Thumbnail {
        mime: mime_of(bytes),
        width,
        height,
        png,
    })
}

/// MIME type of a decodable image, from its first bytes.
fn mime_of(bytes: &[u8]) -> &'static str {
    match bytes {
        [0xFF, 0xD8, 0xFF, ..] => "image/jpeg",
        [0x89, b'P', b'N', b'G', ..] => "image/png",
        [b'G', b'I', b'F', b'8', ..] => "image/gif",
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => "image/webp",
        [b'B', b'M', ..] => "image/bmp",
        [b'I', b'I', 0x2A, 0, ..] | [b'M', b'M', 0, 0x2A, ..] => "image/tiff",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(width: u32, height: u32) -> Vec<u8> {
        let image = RgbImage::from_fn(width, height, |x, _| image::Rgb([(x % 256) as u8, 0, 0]));
        let mut out = Vec::new();
        image
            .write_to(&mut Cursor::new(&mut out), ImageFormat::Png)
            .unwrap();
        out
    }

    #[test]
    fn large_images_shrink_to_fit_keeping_their_shape_and_real_size() {
        let thumb = thumbnail(&png(800, 200), 256).unwrap();
        assert_eq!(
            (thumb.mime, thumb.width, thumb.height),
            ("image/png", 800, 200)
        );
        let preview = image::load_from_memory(&thumb.png).unwrap();
        assert_eq!((preview.width(), preview.height()), (256, 64));
    }

    #[test]
    fn small_images_are_not_enlarged() {
        let preview = image::load_from_memory(&thumbnail(&png(40, 30), 256).unwrap().png).unwrap();
        assert_eq!((preview.width(), preview.height()), (40, 30));
    }

    #[test]
    fn files_that_are_not_images_get_the_preprocessing_errors() {
        assert!(matches!(thumbnail(b"", 64), Err(ImageError::Empty)));
        assert!(matches!(
            thumbnail(b"hello, world", 64),
            Err(ImageError::Unrecognized)
        ));
    }
}
