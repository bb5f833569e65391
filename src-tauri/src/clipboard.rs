//! The OS clipboard, read and written here rather than by the page.
//!
//! Copying: every copy in the window (a message, a code block, the whole conversation, the Local
//! API's key) goes through the `copy_text` command and [`TextClipboard`]. The page's own
//! clipboard API only works inside the click's user activation, and copying a conversation first
//! asks the backend for its Markdown, so the write comes after an `await` and WebKitGTK and
//! WKWebView refuse it. One thread owns the
//! `arboard::Clipboard` for the app's life: on X11 the program that copied serves the text, only
//! while its `Clipboard` lives.
//!
//! Pasting an image the webview hands the page no file for: WebKitGTK offers `image/png` on the
//! clipboard but gives the paste event no file, so the image is read from the OS clipboard here
//! and attached like a dropped one (the same size limit and the same refusals).

use std::io::Cursor;
use std::sync::mpsc;
use std::thread;

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

/// A text to copy, and where the clipboard thread says whether it could.
type Write = (String, mpsc::Sender<Result<(), String>>);

/// Writes text to the OS clipboard and keeps it there (the window's copies); cheap to clone.
#[derive(Clone)]
pub struct TextClipboard {
    writes: mpsc::Sender<Write>,
}

impl TextClipboard {
    /// Starts the thread that owns the clipboard; it opens the clipboard at the first copy.
    pub fn start() -> Self {
        let (writes, requests) = mpsc::channel::<Write>();
        // A thread that cannot start drops `requests`: every copy then fails in words.
        let _ = thread::Builder::new()
            .name("clipboard".into())
            .spawn(move || serve(requests));
        Self { writes }
    }

    /// Puts `text` on the clipboard, replacing what was there.
    pub fn write(&self, text: String) -> Result<(), Error> {
        let stopped = || Error::Internal("the clipboard thread stopped".into());
        let (reply, answer) = mpsc::channel();
        self.writes.send((text, reply)).map_err(|_| stopped())?;
        answer
            .recv()
            .map_err(|_| stopped())?
            .map_err(|e| Error::Invalid(format!("the clipboard cannot be written: {e}")))
    }
}

/// The clipboard thread: one `Clipboard`, kept while it works (reopened after a failure).
fn serve(requests: mpsc::Receiver<Write>) {
    let mut clipboard: Option<arboard::Clipboard> = None;
    for (text, reply) in requests {
        let written = match &mut clipboard {
            Some(open) => open.set_text(text),
            None => {
                arboard::Clipboard::new().and_then(|open| clipboard.insert(open).set_text(text))
            }
        };
        if written.is_err() {
            clipboard = None;
        }
        let _ = reply.send(written.map_err(|e| e.to_string()));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs an X display (run with `xvfb-run cargo test -p gemma-desk clipboard -- --ignored`).
    #[test]
    #[ignore = "needs a display: run under xvfb-run with --ignored"]
    fn a_copy_stays_on_the_clipboard_after_the_call_and_the_next_replaces_it() {
        let clipboard = TextClipboard::start();
        let read = || arboard::Clipboard::new().unwrap().get_text().unwrap();
        clipboard.write("first ✓ copy\nline two".into()).unwrap();
        assert_eq!(read(), "first ✓ copy\nline two");
        clipboard.write("second".into()).unwrap();
        assert_eq!(read(), "second");
        // Read again by a reader opened later: the thread still serves it.
        thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(read(), "second");
    }
}
