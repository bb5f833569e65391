//! Pasting an image the webview hands the page no file for: WebKitGTK offers `image/png` on the
//! clipboard but gives the paste event no file, so the image is read from the OS clipboard here
//! and attached like a dropped one (the same size limit and the same refusals).

use std::io::Cursor;

use crate::attachments::{Attachments, PendingAttachment};
use crate::error::Error;

/// The name a pasted image is shown with.
const PASTED_NAME: &str = "pasted image.png";

/// An image as the clipboard holds it: rows of RGBA bytes.
pub struct ClipboardImage {
    pub width: usize,
    pub height: usize,
    pub rgba: Vec<u8>,
}

/// The clipboard's image; `None` when it holds none.
pub fn read_image() -> Result<Option<ClipboardImage>, Error> {
    let unreadable =
        |e: arboard::Error| Error::Invalid(format!("the clipboard cannot be read: {e}"));
    let mut clipboard = arboard::Clipboard::new().map_err(unreadable)?;
    match clipboard.get_image() {
        Ok(image) => Ok(Some(ClipboardImage {
            width: image.width,
            height: image.height,
            rgba: image.bytes.into_owned(),
        })),
        Err(arboard::Error::ContentNotAvailable) => Ok(None),
        Err(e) => Err(unreadable(e)),
    }
}

/// Attaches `image` as a PNG, exactly as a dropped PNG would be.
pub fn attach(
    attachments: &Attachments,
    image: ClipboardImage,
) -> Result<PendingAttachment, Error> {
    attachments.add_bytes(PASTED_NAME, &png(image)?)
}

fn png(image: ClipboardImage) -> Result<Vec<u8>, Error> {
    let refused = || {
        Error::Invalid(format!(
            "the clipboard's image is damaged ({} × {} pixels in {} bytes)",
            image.width,
            image.height,
            image.rgba.len()
        ))
    };
    let (Ok(width), Ok(height)) = (u32::try_from(image.width), u32::try_from(image.height)) else {
        return Err(refused());
    };
    let message = refused();
    let pixels = image::RgbaImage::from_raw(width, height, image.rgba).ok_or(message)?;
    let mut png = Vec::new();
    pixels
        .write_to(&mut Cursor::new(&mut png), image::ImageFormat::Png)
        .map_err(|e| Error::Invalid(format!("the clipboard's image cannot be encoded: {e}")))?;
    Ok(png)
}
